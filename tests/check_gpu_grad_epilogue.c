/* GPU suite for the fused gradient epilogue of a half all-reduce
 * (kernels/grad_epilogue.cu through ddp_optim_grad_epilogue /
 * ddp_optim_sum_partials, and the reducer that calls them) against the CPU
 * twins (the same calls on the CPU backend).
 *
 * What must hold:
 *   - dst: bit-identical to the CPU for bf16 and fp16 sources, for n from 1
 *     through the block-split edges (4095, 4096, 4097), past the block limit
 *     (1024 blocks of 4096: 4194304 + 3) to 5000011, a power-of-two scale
 *     (the loss scaler's) and an inexact one; every element written (dst
 *     starts as NaN) and nothing past n;
 *   - the bucket's partial: within 1e-9 relative of the CPU's. Every square
 *     of an fp32 value is exact in double, so the two differ only by the
 *     double roundings of two addition orders, at most (n - 1) * 2^-53 of
 *     the sum for these positive terms: 5.6e-10 at n = 5000011. It
 *     overwrites a NaN-poisoned value;
 *   - an inf, -inf or NaN at the first element, a block edge or the last
 *     element makes the partial and the in-order total non-finite;
 *   - the in-order sum of partials: bit-identical to the CPU (both add in
 *     index order in double), order-sensitive values included;
 *   - two GPU runs give the same bits;
 *   - the reducer over the "self" communicator on the GPU (staging, the
 *     epilogue per bucket, the norm from the partials) against the same
 *     reducer on the CPU: gradients bit-identical, norm within 1e-6.
 *
 * Exit 77 (SKIP) without a usable CUDA device. In process (CK_NOFORK). */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/dtype.h"
#include "comm/comm.h"
#include "gpu_twin.h"
#include "optim/optim.h"
#include "train/reducer.h"
#include "train/zero_layout.h"

enum { TAIL = 8 }; /* floats past n that must stay poisoned */

static const ddp_dtype_t k_half[] = {DDP_DTYPE_BF16, DDP_DTYPE_F16};
static const size_t k_sizes[] = {1, 31, 257, 4095, 4096, 4097, 100003, 4194307, 5000011};

/* One double of backend memory holding NaN. */
static double *poisoned_double(ddp_backend_t *be) {
  double *d = twin_dev_alloc(be, sizeof(double));
  const double nan = NAN;
  twin_upload(be, d, &nan, sizeof nan);
  return d;
}

/* n + TAIL floats of 0xFF bytes (NaN). */
static float *poisoned_floats(ddp_backend_t *be, size_t n) {
  const size_t bytes = (n + TAIL) * sizeof(float);
  float *d = twin_dev_alloc(be, bytes);
  void *h = malloc(bytes);
  ck_assert_ptr_nonnull(h);
  memset(h, 0xFF, bytes);
  twin_upload(be, d, h, bytes);
  free(h);
  return d;
}

static double read_double(ddp_backend_t *be, const double *d) {
  double v;
  twin_download(be, &v, d, sizeof v);
  return v;
}

typedef struct epi_out {
  float *dst; /* host copy, n + TAIL */
  double partial;
} epi_out_t;

/* Runs the epilogue on one backend over the twin input's copy there. */
static epi_out_t run_epilogue(ddp_backend_t *be, const twin_t *in, float scale) {
  float *dst = poisoned_floats(be, in->n);
  double *partial = poisoned_double(be);
  ck_assert_int_eq(ddp_optim_grad_epilogue(be, dst, be == twin_gpu ? in->gpu : in->cpu, in->dt,
                                           in->n, scale, partial, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_backend_sync(be, NULL), DDP_OK);
  epi_out_t o = {.dst = malloc((in->n + TAIL) * sizeof(float))};
  ck_assert_ptr_nonnull(o.dst);
  twin_download(be, o.dst, dst, (in->n + TAIL) * sizeof(float));
  o.partial = read_double(be, partial);
  ddp_backend_free(be, dst);
  ddp_backend_free(be, partial);
  return o;
}

static void expect_tail_poisoned(const float *dst, size_t n, const char *what) {
  unsigned char ff[TAIL * sizeof(float)];
  memset(ff, 0xFF, sizeof ff);
  ck_assert_msg(memcmp(dst + n, ff, sizeof ff) == 0, "%s: written past n = %zu", what, n);
}

START_TEST(test_gpu_grad_epilogue_matches_cpu) {
  const float scales[] = {1.0f / 65536.0f, 0.3f};
  for (int d = 0; d < 2; ++d)
    for (size_t k = 0; k < sizeof k_sizes / sizeof k_sizes[0]; ++k)
      for (int c = 0; c < 2; ++c) {
        const size_t n = k_sizes[k];
        twin_t in = twin_input(k_half[d], n, 0.0f, 1024.0f);
        epi_out_t g = run_epilogue(twin_gpu, &in, scales[c]);
        epi_out_t h = run_epilogue(twin_cpu, &in, scales[c]);
        char what[96];
        snprintf(what, sizeof what, "%s n=%zu scale %g", ddp_dtype_name(k_half[d]), n,
                 (double)scales[c]);
        for (size_t i = 0; i < n; ++i)
          if (memcmp(&g.dst[i], &h.dst[i], sizeof(float)) != 0)
            ck_abort_msg("%s: element %zu gpu %.9g cpu %.9g", what, i, (double)g.dst[i],
                         (double)h.dst[i]);
        expect_tail_poisoned(g.dst, n, what);
        ck_assert_msg(isfinite(g.partial) && h.partial > 0.0, "%s: partial %g", what, g.partial);
        const double rel = fabs(g.partial - h.partial) / h.partial;
        ck_assert_msg(rel <= 1e-9, "%s: partial gpu %.17g cpu %.17g (rel %.3g)", what, g.partial,
                      h.partial, rel);
        free(g.dst);
        free(h.dst);
        twin_free(&in);
      }
}
END_TEST

/* --zero 1's fp32 shard: in place (dst == src) on both backends, the
 * same element bits and the partial within double rounding. */
START_TEST(test_gpu_grad_epilogue_fp32_in_place_matches_cpu) {
  for (size_t k = 0; k < sizeof k_sizes / sizeof k_sizes[0]; ++k) {
    const size_t n = k_sizes[k];
    twin_t in = twin_input(DDP_DTYPE_F32, n, 0.0f, 1024.0f);
    double *pg = poisoned_double(twin_gpu), *pc = poisoned_double(twin_cpu);
    ck_assert_int_eq(
        ddp_optim_grad_epilogue(twin_gpu, in.gpu, in.gpu, DDP_DTYPE_F32, n, 0.3f, pg, NULL),
        DDP_OK);
    ck_assert_int_eq(
        ddp_optim_grad_epilogue(twin_cpu, in.cpu, in.cpu, DDP_DTYPE_F32, n, 0.3f, pc, NULL),
        DDP_OK);
    ck_assert_int_eq(ddp_backend_sync(twin_gpu, NULL), DDP_OK);
    float *g = twin_fetch(&in, twin_gpu), *h = twin_fetch(&in, twin_cpu);
    ck_assert_msg(memcmp(g, h, n * sizeof(float)) == 0, "fp32 n=%zu: elements differ", n);
    const double a = read_double(twin_gpu, pg), b = read_double(twin_cpu, pc);
    ck_assert_msg(b > 0.0 && fabs(a - b) <= 1e-9 * b, "fp32 n=%zu: partial gpu %.17g cpu %.17g", n,
                  a, b);
    free(g);
    free(h);
    ddp_backend_free(twin_gpu, pg);
    ddp_backend_free(twin_cpu, pc);
    twin_free(&in);
  }
}
END_TEST

START_TEST(test_gpu_grad_epilogue_nonfinite_reaches_the_norm) {
  const size_t n = 10007;
  const float bad[] = {INFINITY, -INFINITY, NAN};
  const size_t where[] = {0, 4096, n - 1}; /* first, a block edge, last */
  for (int d = 0; d < 2; ++d)
    for (int b = 0; b < 3; ++b)
      for (int w = 0; w < 3; ++w) {
        twin_t in = twin_alloc(k_half[d], n);
        ddp_rng_fill_normal(&twin_rng, twin_off, 0.0f, 1.0f, in.host, n);
        twin_off += n;
        in.host[where[w]] = bad[b];
        twin_set(&in);
        epi_out_t g = run_epilogue(twin_gpu, &in, 0.5f);
        ck_assert_msg(!isfinite(g.partial), "%s %g at %zu: partial %g", ddp_dtype_name(k_half[d]),
                      (double)bad[b], where[w], g.partial);
        ck_assert(!isfinite(g.dst[where[w]]));
        /* through the in-order total, between finite partials */
        double host_p[3] = {1.0, g.partial, 2.0};
        double *dev_p = twin_dev_alloc(twin_gpu, sizeof host_p);
        float *total = twin_dev_alloc(twin_gpu, sizeof(float));
        twin_upload(twin_gpu, dev_p, host_p, sizeof host_p);
        ck_assert_int_eq(ddp_optim_sum_partials(twin_gpu, total, dev_p, 3, NULL), DDP_OK);
        float t = 0.0f;
        twin_download(twin_gpu, &t, total, sizeof t);
        ck_assert(!isfinite(t));
        ddp_backend_free(twin_gpu, dev_p);
        ddp_backend_free(twin_gpu, total);
        free(g.dst);
        twin_free(&in);
      }
}
END_TEST

/* Partials summed in index order, one thread on the GPU: the CPU's bits. */
static float sum_on(ddp_backend_t *be, const double *host_p, int n) {
  double *p = twin_dev_alloc(be, (size_t)n * sizeof(double));
  float *out = twin_dev_alloc(be, sizeof(float));
  const float nan = NAN;
  twin_upload(be, out, &nan, sizeof nan);
  twin_upload(be, p, host_p, (size_t)n * sizeof(double));
  ck_assert_int_eq(ddp_optim_sum_partials(be, out, p, n, NULL), DDP_OK);
  float v;
  twin_download(be, &v, out, sizeof v);
  ddp_backend_free(be, p);
  ddp_backend_free(be, out);
  return v;
}

START_TEST(test_gpu_sum_partials_matches_cpu_in_order) {
  const double order[4] = {1e16, 1.0, -1e16, 1.0}; /* 1 in order, 0 otherwise */
  ck_assert_float_eq(sum_on(twin_gpu, order, 4), 1.0f);
  const int ns[] = {1, 7, 300};
  static double p[300];
  for (int k = 0; k < 3; ++k) {
    float u[300];
    ddp_rng_fill_uniform(&twin_rng, twin_off, u, (size_t)ns[k]);
    twin_off += (uint64_t)ns[k];
    for (int i = 0; i < ns[k]; ++i) p[i] = (double)u[i] * 1e6 + 1.0 / (i + 3);
    const float g = sum_on(twin_gpu, p, ns[k]), c = sum_on(twin_cpu, p, ns[k]);
    ck_assert_msg(memcmp(&g, &c, sizeof g) == 0, "n=%d: gpu %.9g cpu %.9g", ns[k], (double)g,
                  (double)c);
  }
}
END_TEST

START_TEST(test_gpu_grad_epilogue_two_runs_bit_identical) {
  for (int d = 0; d < 2; ++d) {
    const size_t n = 5000011;
    twin_t in = twin_input(k_half[d], n, 0.0f, 1.0f);
    epi_out_t a = run_epilogue(twin_gpu, &in, 1.0f / 1024.0f);
    epi_out_t b = run_epilogue(twin_gpu, &in, 1.0f / 1024.0f);
    ck_assert(memcmp(a.dst, b.dst, n * sizeof(float)) == 0);
    ck_assert_msg(memcmp(&a.partial, &b.partial, sizeof a.partial) == 0, "%.17g vs %.17g",
                  a.partial, b.partial);
    free(a.dst);
    free(b.dst);
    twin_free(&in);
  }
}
END_TEST

/* The reducer end to end on each backend, one rank: tensors of odd sizes,
 * buckets of several kernel blocks. */
static const ddp_param_t k_tensors[] = {{.offset = 0, .count = 100},
                                        {.offset = 100, .count = 5001},
                                        {.offset = 5101, .count = 300007},
                                        {.offset = 305108, .count = 20001},
                                        {.offset = 325109, .count = 3}};
enum { N_TENSORS = 5, N_ELEMS = 325112 };

static void reduce_on(ddp_backend_t *be, ddp_dtype_t dt, const float *g0, float scale, float *out,
                      float *norm) {
  ddp_dist_t one = {.rank = 0, .world = 1, .local_rank = 0, .local_size = 1};
  ddp_comm_config_t cc = {.kind = "self"};
  ddp_comm_t *comm = NULL;
  ck_assert_int_eq(ddp_comm_create(&one, &cc, &comm), DDP_OK);
  float *g = twin_dev_alloc(be, N_ELEMS * sizeof(float));
  float *sq = twin_dev_alloc(be, sizeof(float));
  twin_upload(be, g, g0, N_ELEMS * sizeof(float));
  ddp_reducer_config_t cfg = {.grads = g,
                              .tensors = k_tensors,
                              .n_tensors = N_TENSORS,
                              .bucket_bytes = 1e6,
                              .first_bucket_bytes = 4e4,
                              .dtype = dt,
                              .be = be};
  ddp_reducer_t *r = NULL;
  ck_assert_int_eq(ddp_reducer_create(comm, &cfg, &r), DDP_OK);
  ck_assert_int_ge(ddp_reducer_num_buckets(r), 3);
  ck_assert_int_eq(ddp_reducer_set_scale(r, scale), DDP_OK);
  for (int t = 0; t < N_TENSORS; ++t)
    ck_assert_int_eq(ddp_reducer_mark_ready(r, k_tensors[t].offset, k_tensors[t].count), DDP_OK);
  ck_assert_int_eq(ddp_reducer_finish(r, NULL), DDP_OK);
  ck_assert_int_eq(ddp_reducer_grad_sumsq(r, sq), DDP_OK);
  twin_download(be, out, g, N_ELEMS * sizeof(float));
  twin_download(be, norm, sq, sizeof(float));
  ddp_reducer_destroy(r);
  ddp_comm_destroy(comm);
  ddp_backend_free(be, g);
  ddp_backend_free(be, sq);
}

/* --zero 1's reducer on one rank (a "self" communicator made for the
 * backend, whose reduce-scatter is a device copy): the shard's gradients,
 * scaled, and their norm, on each backend. */
static void reduce_zero_on(ddp_backend_t *be, ddp_dtype_t dt, const float *g0, float scale,
                           float *out, float *norm, size_t *shard) {
  ddp_dist_t one = {.rank = 0, .world = 1, .local_rank = 0, .local_size = 1};
  ddp_comm_config_t cc = {.kind = "self", .be = be};
  ddp_comm_t *comm = NULL;
  ck_assert_int_eq(ddp_comm_create(&one, &cc, &comm), DDP_OK);
  ddp_zero_layout_t l;
  ck_assert_int_eq(ddp_zero_layout_create(k_tensors, N_TENSORS, N_ELEMS, 1, 0, 1e6, 4e4, &l),
                   DDP_OK);
  float *g = twin_dev_alloc(be, N_ELEMS * sizeof(float));
  float *sg = twin_dev_alloc(be, l.shard * sizeof(float));
  float *sq = twin_dev_alloc(be, sizeof(float));
  twin_upload(be, g, g0, N_ELEMS * sizeof(float));
  ddp_reducer_config_t cfg = {.grads = g,
                              .tensors = k_tensors,
                              .n_tensors = N_TENSORS,
                              .bucket_bytes = 1e6,
                              .first_bucket_bytes = 4e4,
                              .dtype = dt,
                              .be = be,
                              .zero = &l,
                              .shard_grads = sg};
  ddp_reducer_t *r = NULL;
  ck_assert_int_eq(ddp_reducer_create(comm, &cfg, &r), DDP_OK);
  ck_assert_int_eq(ddp_reducer_set_scale(r, scale), DDP_OK);
  for (int t = 0; t < N_TENSORS; ++t)
    ck_assert_int_eq(ddp_reducer_mark_ready(r, k_tensors[t].offset, k_tensors[t].count), DDP_OK);
  ck_assert_int_eq(ddp_reducer_finish(r, NULL), DDP_OK);
  ck_assert_int_eq(ddp_reducer_grad_sumsq(r, sq), DDP_OK);
  *shard = l.shard;
  twin_download(be, out, sg, l.shard * sizeof(float));
  twin_download(be, norm, sq, sizeof(float));
  ddp_reducer_destroy(r);
  ddp_comm_destroy(comm);
  ddp_zero_layout_destroy(&l);
  ddp_backend_free(be, g);
  ddp_backend_free(be, sg);
  ddp_backend_free(be, sq);
}

START_TEST(test_gpu_zero_reducer_matches_cpu) {
  const ddp_dtype_t dts[] = {DDP_DTYPE_F32, DDP_DTYPE_BF16, DDP_DTYPE_F16};
  float *g0 = malloc(N_ELEMS * sizeof(float)), *gg = malloc((N_ELEMS + 64) * sizeof(float)),
        *gc = malloc((N_ELEMS + 64) * sizeof(float));
  ck_assert(g0 && gg && gc);
  for (int d = 0; d < 3; ++d) {
    ddp_rng_fill_normal(&twin_rng, twin_off, 0.0f, 4096.0f, g0, N_ELEMS);
    twin_off += N_ELEMS;
    float ng = NAN, nc = NAN;
    size_t sg = 0, sc = 0;
    reduce_zero_on(twin_gpu, dts[d], g0, 1.0f / 4096.0f, gg, &ng, &sg);
    reduce_zero_on(twin_cpu, dts[d], g0, 1.0f / 4096.0f, gc, &nc, &sc);
    ck_assert_uint_eq(sg, sc);
    ck_assert_uint_ge(sg, N_ELEMS);
    ck_assert_msg(memcmp(gg, gc, sg * sizeof(float)) == 0, "%s: shard gradients differ",
                  ddp_dtype_name(dts[d]));
    ck_assert_msg(isfinite(ng) && fabs((double)ng - (double)nc) <= 1e-6 * (double)nc,
                  "%s: norm gpu %.9g cpu %.9g", ddp_dtype_name(dts[d]), (double)ng, (double)nc);
  }
  free(g0);
  free(gg);
  free(gc);
}
END_TEST

START_TEST(test_gpu_reducer_fused_epilogue_matches_cpu) {
  float *g0 = malloc(N_ELEMS * sizeof(float)), *gg = malloc(N_ELEMS * sizeof(float)),
        *gc = malloc(N_ELEMS * sizeof(float));
  ck_assert(g0 && gg && gc);
  for (int d = 0; d < 2; ++d) {
    ddp_rng_fill_normal(&twin_rng, twin_off, 0.0f, 4096.0f, g0, N_ELEMS);
    twin_off += N_ELEMS;
    float ng = NAN, nc = NAN;
    reduce_on(twin_gpu, k_half[d], g0, 1.0f / 4096.0f, gg, &ng);
    reduce_on(twin_cpu, k_half[d], g0, 1.0f / 4096.0f, gc, &nc);
    for (size_t i = 0; i < N_ELEMS; ++i)
      if (memcmp(&gg[i], &gc[i], sizeof(float)) != 0)
        ck_abort_msg("%s element %zu: gpu %.9g cpu %.9g", ddp_dtype_name(k_half[d]), i,
                     (double)gg[i], (double)gc[i]);
    ck_assert_msg(isfinite(ng) && fabs((double)ng - (double)nc) <= 1e-6 * (double)nc,
                  "%s: norm gpu %.9g cpu %.9g", ddp_dtype_name(k_half[d]), (double)ng, (double)nc);
  }
  free(g0);
  free(gg);
  free(gc);
}
END_TEST

int main(void) {
  twin_start(); /* exits 77 without a usable CUDA device */
  Suite *s = suite_create("gpu_grad_epilogue");
  TCase *tc = tcase_create("twin");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_gpu_grad_epilogue_matches_cpu);
  tcase_add_test(tc, test_gpu_grad_epilogue_fp32_in_place_matches_cpu);
  tcase_add_test(tc, test_gpu_grad_epilogue_nonfinite_reaches_the_norm);
  tcase_add_test(tc, test_gpu_sum_partials_matches_cpu_in_order);
  tcase_add_test(tc, test_gpu_grad_epilogue_two_runs_bit_identical);
  tcase_add_test(tc, test_gpu_reducer_fused_epilogue_matches_cpu);
  tcase_add_test(tc, test_gpu_zero_reducer_matches_cpu);
  suite_add_tcase(s, tc);
  return twin_run_suite(s);
}
