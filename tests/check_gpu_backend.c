/* GPU suite for the CUDA backend (src/backend/cuda/cuda_backend.c), through
 * the public ops table only, with the CPU backend as the oracle.
 *
 * GEMM (fp32 against the CPU backend; bf16/fp16 operands with fp32 C against
 * a double reference built from the rounded inputs) on odd sizes, all four
 * transpose combinations, alpha/beta pairs, NaN-poisoned C with beta 0,
 * beta 1 accumulation, padded pitches, strided batches (B shared through
 * stride_b 0) and k 0; fill and convert for every dtype pair, bit for bit;
 * copies of odd byte counts ordered across streams by events; allocation
 * counters through more than a hundred live allocations; the caching
 * allocator (no raw cudaMalloc in steady-state cycles, trim); the
 * out-of-memory message (free bytes, rank, operation) and recovery;
 * descriptor rejections; mem_info.
 *
 * Device memory is never read except through copy(), and every output is
 * poisoned first (padding of A and B with NaN, everything outside C with a
 * sentinel or NaN, fill/convert outputs with two different values in turn),
 * so an element that is skipped, read out of bounds or written out of bounds
 * shows up in the comparison.
 *
 * Exit status: 77 (Automake SKIP) when the registry's first backend is not an
 * available CUDA backend, 0 when every test passes, 1 otherwise. Tests run
 * in-process (CK_NOFORK): a CUDA context does not survive fork. */
#include <config.h>

#include <math.h>
#include <stdint.h>

#include "check_util.h"
#include "ddptrain/backend.h"
#include "ddptrain/dtype.h"
#include "ddptrain/rng.h"
#include "ddptrain/status.h"
#include "backend/cuda/cuda_gemm.h"
#include "gemm_layout.h"

#define SEED 20240611u
#define SENTINEL (-777.25f) /* C outside the matrices: must survive bit for bit */
#define U24 0x1p-24         /* fp32 unit roundoff */
/* Output poisons, used in turn: an element a backend leaves unwritten keeps
 * the poison, which can equal the right value under one of them, never both. */
#define POISON_A (-1234.5f)
#define POISON_B 777.0f

static ddp_backend_t *g_gpu; /* {.device = "cuda"} */
static ddp_backend_t *g_cpu; /* {.device = "cpu", .threads = 1}: the oracle */
static uint64_t g_tag;       /* gives every random array its own stream */

/* ---- helpers ------------------------------------------------------------ */

static void *dev_alloc(ddp_backend_t *be, size_t bytes) {
  void *p = NULL;
  const ddp_status_t st = ddp_backend_alloc(be, bytes, &p);
  ck_assert_msg(st == DDP_OK, "%s: alloc(%zu) = %s", be->ops->name, bytes, ddp_status_name(st));
  ck_assert_ptr_nonnull(p);
  return p;
}

static void upload(ddp_backend_t *be, void *dev, const void *host, size_t bytes) {
  ck_assert_int_eq(ddp_backend_copy(be, dev, host, bytes, DDP_COPY_KIND_HOST_TO_DEVICE, NULL),
                   DDP_OK);
}

/* D2H on the compute stream, then waits for it: everything enqueued on the
 * compute stream before is finished and visible. */
static void download(ddp_backend_t *be, void *host, const void *dev, size_t bytes) {
  ck_assert_int_eq(ddp_backend_copy(be, host, dev, bytes, DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
                   DDP_OK);
  ck_assert_int_eq(ddp_backend_sync(be, NULL), DDP_OK);
}

static ddp_rng_t next_rng(void) {
  ddp_rng_t base, r;
  ddp_rng_init(&base, SEED, 0);
  ddp_rng_derive(&base, g_tag++, &r);
  return r;
}

/* Uniforms mapped to odd multiples of 2^-24 in (-1, 1): exact in fp32 (2u - 1
 * is, and adding 2^-24 stays on the grid), never zero, so no product or
 * element can vanish and hide a wrong index, and they round to nonzero bf16
 * and fp16 values too. */
static void random_values(float *x, size_t n) {
  const ddp_rng_t r = next_rng();
  ddp_rng_fill_uniform(&r, 0, x, n);
  for (size_t i = 0; i < n; ++i) x[i] = (2.0f * x[i] - 1.0f) + 0x1p-24f;
}

static int is_half(ddp_dtype_t t) {
  return t == DDP_DTYPE_BF16 || t == DDP_DTYPE_F16;
}

static uint16_t half_of(ddp_dtype_t t, float x) {
  return t == DDP_DTYPE_BF16 ? ddp_f32_to_bf16(x) : ddp_f32_to_f16(x);
}

static float float_of_half(ddp_dtype_t t, uint16_t h) {
  return t == DDP_DTYPE_BF16 ? ddp_bf16_to_f32(h) : ddp_f16_to_f32(h);
}

/* ---- GEMM --------------------------------------------------------------- */

/* One GEMM problem. ld* == 0 means the minimal pitch; pad_* is the gap
 * between consecutive matrices of a batch (stride = rows * ld + pad). */
typedef struct gemm_case {
  ddp_transpose_t ta, tb;
  int64_t m, n, k, batch;
  int64_t lda, ldb, ldc;
  int64_t pad_a, pad_b, pad_c;
  int share_b; /* stride_b = 0: one B for every batch */
  int no_ab;   /* k == 0 only: A and B NULL with pitch 0, as validate allows */
  float alpha, beta;
  int nan_c;      /* fill all of C with NaN through the backends first (beta 0) */
  int reps;       /* times the GEMM is applied to the same C (0 = once) */
  int on_stream;  /* run on a user stream rather than the compute stream */
  ddp_dtype_t ab; /* type of A and B (C is fp32); 0 = fp32 */
} gemm_case_t;

/* An operand as the test holds it: `val` has the values the product uses
 * (for bf16/fp16 the rounded ones) and NaN in the padding; `raw` is what is
 * uploaded (val itself for fp32, 16-bit patterns with NaN padding otherwise),
 * so a backend that reads padding gets NaN. */
typedef struct operand {
  float *val;
  void *raw;
  size_t bytes;
} operand_t;

static operand_t make_operand(const layout_t *l, int64_t batch, ddp_dtype_t t) {
  const size_t n = alloc_elems(l);
  operand_t o = {.val = malloc(n * sizeof(float))};
  float *u = malloc(n * sizeof *u);
  uint16_t *h = is_half(t) ? malloc(n * sizeof *h) : NULL;
  ck_assert(o.val && u && (h || !is_half(t)));
  random_values(u, n);
  for (size_t i = 0; i < n; ++i) o.val[i] = NAN;
  if (h)
    for (size_t i = 0; i < n; ++i) h[i] = half_of(t, NAN);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < l->rows; ++r)
      for (int64_t c = 0; c < l->cols; ++c) {
        const size_t at = (size_t)(b * l->stride + r * l->ld + c);
        if (h) {
          h[at] = half_of(t, u[at]);
          o.val[at] = float_of_half(t, h[at]);
        } else {
          o.val[at] = u[at];
        }
      }
  free(u);
  o.raw = h ? (void *)h : (void *)o.val;
  o.bytes = n * (h ? sizeof *h : sizeof(float));
  return o;
}

static void free_operand(operand_t *o) {
  if (o->raw != o->val) free(o->raw);
  free(o->val);
}

/* Device side of one backend's run. */
typedef struct gemm_run {
  void *a, *b, *c;
} gemm_run_t;

/* Uploads A, B and C0 to `be`, optionally poisons C with NaN through the
 * backend, applies the GEMM reps times on the chosen stream, and downloads C
 * into `out`. */
static void run_on(ddp_backend_t *be, const gemm_case_t *gc, ddp_gemm_t g, const operand_t *a,
                   const operand_t *b, const float *c0, size_t nc, float *out, const char *what) {
  gemm_run_t d = {NULL, NULL, NULL};
  if (!gc->no_ab) {
    d.a = dev_alloc(be, a->bytes);
    d.b = dev_alloc(be, b->bytes);
    upload(be, d.a, a->raw, a->bytes);
    upload(be, d.b, b->raw, b->bytes);
  }
  d.c = dev_alloc(be, nc * sizeof(float));
  upload(be, d.c, c0, nc * sizeof(float));
  if (gc->nan_c) ck_assert_int_eq(be->ops->fill(be, d.c, DDP_DTYPE_F32, NAN, nc, NULL), DDP_OK);
  g.a = d.a;
  g.b = d.b;
  g.c = d.c;
  ddp_stream_t s = NULL;
  ddp_event_t e = NULL;
  if (gc->on_stream) {
    /* The uploads and the NaN fill went to the compute stream; the user
     * stream must wait for them. */
    ck_assert_int_eq(be->ops->stream_create(be, &s), DDP_OK);
    ck_assert_int_eq(be->ops->event_create(be, &e), DDP_OK);
    ck_assert_int_eq(be->ops->event_record(be, e, NULL), DDP_OK);
    ck_assert_int_eq(be->ops->stream_wait_event(be, s, e), DDP_OK);
  }
  const int reps = gc->reps > 0 ? gc->reps : 1;
  for (int r = 0; r < reps; ++r) {
    const ddp_status_t st = ddp_backend_gemm(be, &g, s);
    ck_assert_msg(st == DDP_OK, "%s gemm failed (%s): %s", be->ops->name, ddp_status_name(st),
                  what);
  }
  ck_assert_int_eq(ddp_backend_sync(be, s), DDP_OK);
  if (s) {
    be->ops->event_destroy(be, e);
    be->ops->stream_destroy(be, s);
  }
  download(be, out, d.c, nc * sizeof(float));
  ddp_backend_free(be, d.c);
  ddp_backend_free(be, d.b);
  ddp_backend_free(be, d.a);
}

/* Runs one case on the GPU and, for fp32 operands, on the CPU backend, and
 * compares.
 *
 * Tolerances. With u = 2^-24, a length-k fp32 dot product summed in any
 * order (blocked, split-k, with or without FMA) is within gamma_k * sum|a b|
 * of the exact value, gamma_k = k u / (1 - k u) (Higham, Accuracy and
 * Stability, 3.1); scaling by alpha and beta and the final add cost three
 * more roundings. So each backend is within (k + 3) u * mag of the exact
 * result, mag = |alpha| sum_l |a_il b_lj| + |beta| |C_in|; we allow twice
 * that (gamma's denominator, alpha folded in early), as tests/check_gemm.c
 * does for the CPU, and repeated applications add their bounds. Hence:
 *   fp32, GPU vs CPU:        |gpu - cpu| <= 4 reps (k + 3) u mag  (both sides)
 *   fp32, GPU vs exact:      |gpu - ref| <= 2 reps (k + 3) u mag
 * The CUDA backend asks for CUBLAS_COMPUTE_32F in the default math mode, so
 * no TF32: TF32 keeps 11 significant bits of each input, an error up to
 * 2^-10 |a b| per product, orders of magnitude above these bounds at small k.
 *   bf16/fp16 operands:      |gpu - ref| <= 16 reps (k + 3) u mag
 * The products of two bf16 (8-bit) or fp16 (11-bit) significands are exact in
 * fp32, so only the fp32 accumulation rounds; but tensor cores may truncate
 * rather than round (2u per operation) and align a block of addends before
 * normalising, losing up to two more bits (Fasi et al., "Numerical behavior
 * of NVIDIA tensor cores", 2021): 8u per operation, with the same factor 2.
 * The reference uses the *rounded* inputs, so input rounding is not error.
 * All bounds are relative to mag, not to |ref|, which cancellation can make
 * arbitrarily small. An indexing error costs a whole term, about mag / k, and
 * a half-precision accumulator 2^-11 or more relative: both far above the
 * bounds for every k tested (at k = 263 the loosest bound is 2.5e-4 mag). */
static void run_case(const gemm_case_t *gc) {
  const int64_t m = gc->m, n = gc->n, k = gc->k, batch = gc->batch;
  const int reps = gc->reps > 0 ? gc->reps : 1;
  const ddp_dtype_t ab = gc->ab;
  const int ta = gc->ta == DDP_TRANSPOSE_YES, tb = gc->tb == DDP_TRANSPOSE_YES;
  const layout_t la = make_layout(ta ? k : m, ta ? m : k, gc->lda, gc->pad_a, batch, 0);
  const layout_t lb = make_layout(tb ? n : k, tb ? k : n, gc->ldb, gc->pad_b, batch, gc->share_b);
  const layout_t lc = make_layout(m, n, gc->ldc, gc->pad_c, batch, 0);

  operand_t a = make_operand(&la, batch, ab);
  operand_t b = make_operand(&lb, batch, ab);
  const size_t nc = alloc_elems(&lc);
  float *c0 = malloc(nc * sizeof *c0), *u = malloc(nc * sizeof *u);
  float *c_gpu = malloc(nc * sizeof *c_gpu), *c_cpu = malloc(nc * sizeof *c_cpu);
  char *inside = calloc(nc, 1);
  ck_assert(c0 && u && c_gpu && c_cpu && inside);
  random_values(u, nc);
  for (size_t i = 0; i < nc; ++i) c0[i] = SENTINEL;
  for (int64_t bb = 0; bb < batch; ++bb)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const size_t at = (size_t)(bb * lc.stride + i * lc.ld + j);
        c0[at] = u[at];
        inside[at] = 1;
      }

  const ddp_gemm_t g = {.trans_a = gc->ta,
                        .trans_b = gc->tb,
                        .m = m,
                        .n = n,
                        .k = k,
                        .alpha = gc->alpha,
                        .beta = gc->beta,
                        .lda = gc->no_ab ? 0 : la.ld,
                        .stride_a = la.stride,
                        .ldb = gc->no_ab ? 0 : lb.ld,
                        .stride_b = lb.stride,
                        .ldc = lc.ld,
                        .stride_c = lc.stride,
                        .batch = batch,
                        .ab_dtype = ab,
                        .c_dtype = DDP_DTYPE_F32};
  char what[256];
  snprintf(what, sizeof what,
           "%s m=%lld n=%lld k=%lld %c%c batch=%lld alpha=%g beta=%g lda=%lld ldb=%lld ldc=%lld "
           "strides=%lld/%lld/%lld reps=%d%s%s%s",
           ddp_dtype_name(ab), (long long)m, (long long)n, (long long)k, ta ? 'T' : 'N',
           tb ? 'T' : 'N', (long long)batch, (double)gc->alpha, (double)gc->beta, (long long)g.lda,
           (long long)g.ldb, (long long)g.ldc, (long long)g.stride_a, (long long)g.stride_b,
           (long long)g.stride_c, reps, gc->nan_c ? " C=NaN" : "",
           gc->on_stream ? " on a user stream" : "", gc->no_ab ? " A=B=NULL" : "");
  {
    ddp_gemm_t probe = g;
    probe.a = gc->no_ab ? NULL : (const void *)a.raw;
    probe.b = gc->no_ab ? NULL : (const void *)b.raw;
    probe.c = c0;
    ck_assert_msg(ddp_gemm_validate(&probe) == DDP_OK, "validate rejected %s", what);
  }

  run_on(g_gpu, gc, g, &a, &b, c0, nc, c_gpu, what);
  const int with_cpu = ab == DDP_DTYPE_F32;
  if (with_cpu) run_on(g_cpu, gc, g, &a, &b, c0, nc, c_cpu, what);
  /* What was in C before the GEMM, as far as the padding is concerned. */
  if (gc->nan_c)
    for (size_t i = 0; i < nc; ++i) c0[i] = NAN;

  /* Element checks are counted, not asserted one by one (a message for the
   * first failure is enough). */
  size_t bad_pair = 0, bad_ref = 0, touched_gpu = 0, touched_cpu = 0;
  char first_pair[256] = "", first_ref[256] = "";
  const double f_ref = with_cpu ? 2.0 : 16.0;
  for (int64_t bb = 0; bb < batch; ++bb)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0, mag_dot = 0;
        for (int64_t l = 0; l < k; ++l) {
          const double x = at_op(a.val, &la, gc->ta, bb, i, l);
          const double y = at_op(b.val, &lb, gc->tb, bb, l, j);
          dot += x * y;
          mag_dot += fabs(x * y);
        }
        const size_t at = (size_t)(bb * lc.stride + i * lc.ld + j);
        double ref = u[at], mag = fabs((double)u[at]);
        for (int r = 0; r < reps; ++r) {
          /* beta == 0 ignores C (even NaN), so it must not be multiplied. */
          const double keep = gc->beta == 0.0f ? 0.0 : (double)gc->beta * ref;
          const double keep_mag = gc->beta == 0.0f ? 0.0 : fabs((double)gc->beta) * mag;
          ref = (double)gc->alpha * dot + keep;
          mag = fabs((double)gc->alpha) * mag_dot + keep_mag;
        }
        const double got = c_gpu[at];
        const double tol_ref = f_ref * reps * (double)(k + 3) * U24 * mag;
        if (!(fabs(got - ref) <= tol_ref) && bad_ref++ == 0)
          snprintf(first_ref, sizeof first_ref,
                   "batch %lld (%lld,%lld): gpu %.9g exact %.9g tol %.3g", (long long)bb,
                   (long long)i, (long long)j, got, ref, tol_ref);
        if (with_cpu) {
          const double tol_pair = 4.0 * reps * (double)(k + 3) * U24 * mag;
          const double want = c_cpu[at];
          if (!(fabs(got - want) <= tol_pair) && bad_pair++ == 0)
            snprintf(first_pair, sizeof first_pair,
                     "batch %lld (%lld,%lld): gpu %.9g cpu %.9g (exact %.9g) tol %.3g",
                     (long long)bb, (long long)i, (long long)j, got, want, ref, tol_pair);
        }
      }
  for (size_t i = 0; i < nc; ++i) {
    if (inside[i]) continue;
    touched_gpu += memcmp(&c_gpu[i], &c0[i], sizeof c0[i]) != 0;
    if (with_cpu) touched_cpu += memcmp(&c_cpu[i], &c0[i], sizeof c0[i]) != 0;
  }
  ck_assert_msg(bad_pair == 0, "%zu elements differ from the cpu backend, first %s; %s", bad_pair,
                first_pair, what);
  ck_assert_msg(bad_ref == 0, "%zu elements off the exact result, first %s; %s", bad_ref, first_ref,
                what);
  ck_assert_msg(touched_gpu == 0, "gpu wrote %zu elements outside C; %s", touched_gpu, what);
  ck_assert_msg(touched_cpu == 0, "cpu wrote %zu elements outside C; %s", touched_cpu, what);

  free(inside);
  free(c_cpu);
  free(c_gpu);
  free(u);
  free(c0);
  free_operand(&b);
  free_operand(&a);
}

static const ddp_transpose_t k_trans[4][2] = {{DDP_TRANSPOSE_NO, DDP_TRANSPOSE_NO},
                                              {DDP_TRANSPOSE_NO, DDP_TRANSPOSE_YES},
                                              {DDP_TRANSPOSE_YES, DDP_TRANSPOSE_NO},
                                              {DDP_TRANSPOSE_YES, DDP_TRANSPOSE_YES}};

static const int64_t k_sizes[] = {1, 7, 33, 129};

static gemm_case_t simple_case(int t, int64_t m, int64_t n, int64_t k) {
  gemm_case_t gc = {.ta = k_trans[t][0],
                    .tb = k_trans[t][1],
                    .m = m,
                    .n = n,
                    .k = k,
                    .batch = 1,
                    .alpha = 1.0f,
                    .beta = 0.0f,
                    .ab = DDP_DTYPE_F32};
  return gc;
}

/* The minimal pitches of A and B as stored, which padded cases add to. */
static int64_t min_lda(const gemm_case_t *gc) {
  return gc->ta == DDP_TRANSPOSE_YES ? gc->m : gc->k;
}
static int64_t min_ldb(const gemm_case_t *gc) {
  return gc->tb == DDP_TRANSPOSE_YES ? gc->k : gc->n;
}

START_TEST(test_gpu_backend_gemm_odd_sizes_all_transposes) {
  /* beta != 0 so a C read with the wrong layout is caught too. */
  for (int t = 0; t < 4; ++t)
    for (int im = 0; im < 4; ++im)
      for (int in = 0; in < 4; ++in)
        for (int ik = 0; ik < 4; ++ik) {
          gemm_case_t gc = simple_case(t, k_sizes[im], k_sizes[in], k_sizes[ik]);
          gc.alpha = 0.75f;
          gc.beta = -0.5f;
          run_case(&gc);
        }
}
END_TEST

START_TEST(test_gpu_backend_gemm_large_odd_all_transposes) {
  for (int t = 0; t < 4; ++t) {
    gemm_case_t gc = simple_case(t, 255, 257, 263);
    gc.alpha = -1.5f;
    gc.beta = 0.25f;
    run_case(&gc);
  }
}
END_TEST

START_TEST(test_gpu_backend_gemm_alpha_beta_combinations) {
  static const float alphas[] = {1.0f, -0.5f, 2.25f, 0.0f};
  static const float betas[] = {0.0f, 1.0f, -1.5f, 0.5f};
  for (int t = 0; t < 4; ++t)
    for (int ia = 0; ia < 4; ++ia)
      for (int ib = 0; ib < 4; ++ib) {
        gemm_case_t gc = simple_case(t, 33, 7, 129);
        gc.alpha = alphas[ia];
        gc.beta = betas[ib];
        run_case(&gc);
      }
}
END_TEST

START_TEST(test_gpu_backend_gemm_beta_zero_ignores_nan_in_c) {
  /* The "grad = None" contract: with beta 0, C is write-only, so the NaN the
   * backend's own fill put there must not reach the result (0 * NaN would). */
  static const float alphas[] = {1.0f, -2.0f, 0.0f};
  for (int t = 0; t < 4; ++t)
    for (int ia = 0; ia < 3; ++ia) {
      gemm_case_t gc = simple_case(t, 33, 7, 129);
      gc.alpha = alphas[ia];
      gc.nan_c = 1;
      run_case(&gc);
      gc.m = 7, gc.n = 33, gc.k = 1;
      gc.batch = 3, gc.pad_c = 2, gc.ldc = 33 + 3; /* NaN between rows and matrices too */
      run_case(&gc);
    }
}
END_TEST

START_TEST(test_gpu_backend_gemm_beta_one_accumulates) {
  /* Gradient accumulation: applying C += alpha A B three times. */
  for (int t = 0; t < 4; ++t) {
    gemm_case_t gc = simple_case(t, 33, 7, 129);
    gc.beta = 1.0f;
    gc.reps = 3;
    run_case(&gc);
    gc.alpha = -0.5f;
    gc.batch = 3;
    gc.pad_a = 1, gc.pad_b = 2, gc.pad_c = 3;
    run_case(&gc);
  }
}
END_TEST

START_TEST(test_gpu_backend_gemm_padded_pitches) {
  for (int t = 0; t < 4; ++t) {
    gemm_case_t gc = simple_case(t, 33, 7, 129);
    gc.lda = min_lda(&gc) + 3;
    gc.ldb = min_ldb(&gc) + 5;
    gc.ldc = 7 + 7;
    gc.alpha = 1.5f;
    gc.beta = 0.25f;
    run_case(&gc);
    /* One matrix padded at a time, so using one pitch for another is caught. */
    gemm_case_t only = simple_case(t, 7, 33, 129);
    only.lda = min_lda(&only) + 1;
    run_case(&only);
    only = simple_case(t, 7, 33, 129);
    only.ldb = min_ldb(&only) + 2;
    run_case(&only);
    only = simple_case(t, 7, 33, 129);
    only.ldc = 33 + 1;
    only.beta = 1.0f;
    run_case(&only);
  }
}
END_TEST

START_TEST(test_gpu_backend_gemm_strided_batched) {
  for (int t = 0; t < 4; ++t) {
    gemm_case_t gc = simple_case(t, 33, 7, 129);
    gc.batch = 3;
    gc.pad_a = 5, gc.pad_b = 7, gc.pad_c = 11; /* non-packed strides */
    run_case(&gc);
    gc.beta = -1.0f;
    gc.lda = min_lda(&gc) + 2;
    gc.ldb = min_ldb(&gc) + 1;
    gc.ldc = 7 + 4;
    run_case(&gc);
    gemm_case_t tiny = simple_case(t, 1, 7, 1);
    tiny.batch = 3;
    tiny.pad_a = 1, tiny.pad_b = 2, tiny.pad_c = 3;
    run_case(&tiny);
  }
}
END_TEST

START_TEST(test_gpu_backend_gemm_strided_batched_shared_b) {
  /* stride_b == 0: one B (a weight) applied to every matrix of the batch. */
  for (int t = 0; t < 4; ++t) {
    gemm_case_t gc = simple_case(t, 33, 7, 129);
    gc.batch = 3;
    gc.pad_a = 1, gc.pad_c = 2;
    gc.share_b = 1;
    gc.beta = 0.5f;
    run_case(&gc);
  }
}
END_TEST

START_TEST(test_gpu_backend_gemm_k_zero_scales_c) {
  /* An empty product: C = beta * C, and beta 0 writes zeros even over NaN. */
  for (int t = 0; t < 4; ++t) {
    gemm_case_t gc = simple_case(t, 7, 33, 0);
    gc.beta = 0.5f;
    run_case(&gc);
    gc.beta = 1.0f;
    run_case(&gc);
    gc.beta = 0.0f;
    gc.nan_c = 1;
    gc.batch = 2;
    run_case(&gc);
  }
}
END_TEST

START_TEST(test_gpu_backend_gemm_k_zero_ignores_operands) {
  /* With k == 0 ddp_gemm_validate checks neither A nor B, and backend.h asks
   * only lda >= k: NULL operands with pitch 0 are a valid descriptor, and
   * the CPU backend takes it. */
  for (int t = 0; t < 4; ++t) {
    gemm_case_t gc = simple_case(t, 7, 33, 0);
    gc.no_ab = 1;
    gc.beta = -0.5f;
    run_case(&gc);
    gc.beta = 0.0f;
    gc.nan_c = 1;
    run_case(&gc);
  }
}
END_TEST

START_TEST(test_gpu_backend_gemm_on_a_user_stream) {
  for (int t = 0; t < 4; ++t) {
    gemm_case_t gc = simple_case(t, 129, 33, 7);
    gc.on_stream = 1;
    gc.beta = 1.0f;
    gc.reps = 2;
    run_case(&gc);
    gc = simple_case(t, 33, 7, 129);
    gc.on_stream = 1;
    gc.nan_c = 1;
    gc.batch = 3;
    gc.share_b = 1;
    run_case(&gc);
  }
}
END_TEST

/* bf16 and fp16 operands with fp32 C: GPU only (the CPU backend has no half
 * GEMM yet), against the double reference. */
static void half_cases(ddp_dtype_t ab) {
  for (int t = 0; t < 4; ++t) {
    for (int im = 0; im < 4; ++im)
      for (int in = 0; in < 4; ++in)
        for (int ik = 0; ik < 4; ++ik) {
          gemm_case_t gc = simple_case(t, k_sizes[im], k_sizes[in], k_sizes[ik]);
          gc.ab = ab;
          gc.alpha = 0.75f;
          gc.beta = -0.5f;
          run_case(&gc);
        }
    gemm_case_t gc = simple_case(t, 255, 257, 263);
    gc.ab = ab;
    gc.nan_c = 1;
    run_case(&gc);
    gc = simple_case(t, 33, 7, 129);
    gc.ab = ab;
    gc.lda = min_lda(&gc) + 3;
    gc.ldb = min_ldb(&gc) + 1;
    gc.ldc = 7 + 2;
    gc.batch = 3;
    gc.pad_a = 5, gc.pad_b = 3, gc.pad_c = 1;
    gc.beta = 1.0f;
    gc.reps = 2;
    run_case(&gc);
    gc.share_b = 1;
    gc.beta = 0.0f;
    gc.nan_c = 1;
    gc.reps = 1;
    gc.alpha = -2.0f;
    run_case(&gc);
  }
}

START_TEST(test_gpu_backend_gemm_bf16_operands) {
  half_cases(DDP_DTYPE_BF16);
}
END_TEST

START_TEST(test_gpu_backend_gemm_f16_operands) {
  half_cases(DDP_DTYPE_F16);
}
END_TEST

/* ---- fill and convert --------------------------------------------------- */

static const ddp_dtype_t k_float_types[] = {DDP_DTYPE_F32, DDP_DTYPE_BF16, DDP_DTYPE_F16};
static const size_t k_lengths[] = {1, 3, 5, 7, 31, 33, 1001, 100003};
#define MAX_LEN 100003
#define SLACK 16 /* elements past the largest output: offsets plus a guard */

/* One device buffer pair per backend, reused by every case. */
typedef struct fc_bufs {
  void *src, *dst;
  size_t bytes;
} fc_bufs_t;

static fc_bufs_t fc_alloc(ddp_backend_t *be) {
  fc_bufs_t f = {.bytes = (MAX_LEN + SLACK) * 4};
  f.src = dev_alloc(be, f.bytes);
  f.dst = dev_alloc(be, f.bytes);
  return f;
}

static void fc_free(ddp_backend_t *be, fc_bufs_t *f) {
  ddp_backend_free(be, f->src);
  ddp_backend_free(be, f->dst);
}

/* Poisons dst entirely (in dtype dt), runs `op` at element offset `off`, and
 * downloads all of dst: the comparison with the CPU then covers the elements
 * before and after the output as well. op: 0 fill, 1 convert. */
static void fc_run(ddp_backend_t *be, const fc_bufs_t *f, ddp_stream_t s, int op, ddp_dtype_t dt,
                   ddp_dtype_t st, float value, float poison, size_t n, size_t src_off,
                   size_t dst_off, unsigned char *out) {
  const size_t dsz = ddp_dtype_size(dt), ssz = ddp_dtype_size(st);
  const size_t total = n + SLACK;
  ck_assert_int_eq(be->ops->fill(be, f->dst, dt, poison, total, NULL), DDP_OK);
  if (s) ck_assert_int_eq(ddp_backend_sync(be, NULL), DDP_OK); /* s must see the poison */
  void *dst = (char *)f->dst + dst_off * dsz;
  const void *src = (const char *)f->src + src_off * ssz;
  const ddp_status_t rc = op == 0 ? be->ops->fill(be, dst, dt, value, n, s)
                                  : be->ops->convert(be, dst, dt, src, st, n, s);
  ck_assert_msg(rc == DDP_OK, "%s: %s %s -> %s n %zu = %s", be->ops->name,
                op == 0 ? "fill" : "convert", ddp_dtype_name(st), ddp_dtype_name(dt), n,
                ddp_status_name(rc));
  ck_assert_int_eq(ddp_backend_sync(be, s), DDP_OK);
  download(be, out, f->dst, total * dsz);
}

/* Index of the first differing element of two dt arrays, or n. */
static size_t first_diff(const unsigned char *x, const unsigned char *y, size_t n, size_t sz) {
  for (size_t i = 0; i < n; ++i)
    if (memcmp(x + i * sz, y + i * sz, sz) != 0) return i;
  return n;
}

static uint32_t elem_bits(const unsigned char *p, size_t sz, size_t i) {
  uint32_t v = 0;
  if (sz == 4) {
    memcpy(&v, p + 4 * i, 4);
  } else {
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    v = h;
  }
  return v;
}

/* Random source patterns for every type, every value class included: random
 * bits hit NaNs (with payloads), infinities, subnormals and zeros, and the
 * specials at the front are the rounding edges. */
static unsigned char *fc_source(ddp_dtype_t st) {
  const size_t total = MAX_LEN + SLACK, sz = ddp_dtype_size(st);
  uint32_t *r = malloc(total * sizeof *r);
  unsigned char *p = malloc(total * sz);
  ck_assert(r && p);
  const ddp_rng_t rng = next_rng();
  ddp_rng_fill_u32(&rng, 0, r, total);
  static const uint32_t f32_specials[] = {
      0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u,
      0x7F800001u, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu, 0x7F7F8000u, 0x477FF000u,
      0x477FEFFFu, 0x33000000u, 0x33000001u, 0x3F808000u, 0x3F818000u, 0x3F801000u};
  static const uint32_t half_specials[] = {0x0000u, 0x8000u, 0x7C00u, 0xFC00u, 0x7E00u,
                                           0x7C01u, 0xFFFFu, 0x0001u, 0x03FFu, 0x7BFFu,
                                           0x7F80u, 0x7FC1u, 0xFF81u, 0x0080u, 0x007Fu};
  const uint32_t *sp = sz == 4 ? f32_specials : half_specials;
  const size_t nsp = sz == 4 ? sizeof f32_specials / sizeof *f32_specials
                             : sizeof half_specials / sizeof *half_specials;
  for (size_t i = 0; i < nsp; ++i) r[i] = sp[i];
  for (size_t i = 0; i < total; ++i) {
    if (sz == 4) {
      memcpy(p + 4 * i, &r[i], 4);
    } else {
      const uint16_t h = (uint16_t)r[i];
      memcpy(p + 2 * i, &h, 2);
    }
  }
  free(r);
  return p;
}

/* Element offsets (src, dst): aligned for the vector paths, and not. */
static const size_t k_offsets[][2] = {{0, 0}, {1, 1}, {0, 3}, {2, 0}, {3, 2}, {5, 7}};
#define N_OFFSETS (sizeof k_offsets / sizeof k_offsets[0])
/* Fill offsets: 0 takes the 16-byte vector path, the others every tail. */
static const size_t k_fill_offsets[] = {0, 1, 2, 3, 5, 7};
#define N_FILL_OFFSETS (sizeof k_fill_offsets / sizeof k_fill_offsets[0])

START_TEST(test_gpu_backend_convert_every_pair_bit_exact) {
  fc_bufs_t fg = fc_alloc(g_gpu), fcpu = fc_alloc(g_cpu);
  const size_t total = MAX_LEN + SLACK;
  unsigned char *got = malloc(total * 4), *want = malloc(total * 4);
  ck_assert(got && want);
  ddp_stream_t s = NULL;
  ck_assert_int_eq(g_gpu->ops->stream_create(g_gpu, &s), DDP_OK);
  int iter = 0;
  for (int b = 0; b < 3; ++b) {
    const ddp_dtype_t st = k_float_types[b];
    unsigned char *src = fc_source(st);
    upload(g_gpu, fg.src, src, total * ddp_dtype_size(st));
    upload(g_cpu, fcpu.src, src, total * ddp_dtype_size(st));
    for (int a = 0; a < 3; ++a) {
      const ddp_dtype_t dt = k_float_types[a];
      const size_t dsz = ddp_dtype_size(dt);
      for (size_t in = 0; in < sizeof k_lengths / sizeof *k_lengths; ++in)
        for (size_t io = 0; io < N_OFFSETS; ++io)
          for (int p = 0; p < 2; ++p, ++iter) {
            const size_t n = k_lengths[in], so = k_offsets[io][0], doff = k_offsets[io][1];
            const float poison = p ? POISON_B : POISON_A;
            /* Every other case on a user stream. */
            fc_run(g_gpu, &fg, iter % 2 ? s : NULL, 1, dt, st, 0.0f, poison, n, so, doff, got);
            fc_run(g_cpu, &fcpu, NULL, 1, dt, st, 0.0f, poison, n, so, doff, want);
            const size_t i = first_diff(got, want, n + SLACK, dsz);
            if (i < n + SLACK)
              ck_abort_msg(
                  "convert %s -> %s n %zu offsets %zu/%zu poison %g: element %zu "
                  "(%s) is 0x%X on the gpu, 0x%X on the cpu (input 0x%X)",
                  ddp_dtype_name(st), ddp_dtype_name(dt), n, so, doff, (double)poison, i,
                  i < doff        ? "before dst"
                  : i >= doff + n ? "past the end"
                                  : "output",
                  elem_bits(got, dsz, i), elem_bits(want, dsz, i),
                  i >= doff && i < doff + n ? elem_bits(src, ddp_dtype_size(st), so + i - doff)
                                            : 0u);
          }
    }
    free(src);
  }
  g_gpu->ops->stream_destroy(g_gpu, s);
  free(want);
  free(got);
  fc_free(g_cpu, &fcpu);
  fc_free(g_gpu, &fg);
}
END_TEST

START_TEST(test_gpu_backend_fill_every_dtype_bit_exact) {
  static const float floats[] = {0.0f,     -0.0f,    1.5f,      -3.75f,  65504.0f,
                                 65520.0f, 1e-8f,    -1e-40f,   3.3e38f, 0x1p-24f,
                                 0.1f,     INFINITY, -INFINITY, NAN,     -1.0f / 3.0f};
  static const float ints[] = {0.0f,          -0.0f,          1.5f,   -3.75f,
                               2147483520.0f, -2147483648.0f, 0.999f, -7.0f};
  static const ddp_dtype_t types[] = {DDP_DTYPE_F32, DDP_DTYPE_BF16, DDP_DTYPE_F16, DDP_DTYPE_I32};
  fc_bufs_t fg = fc_alloc(g_gpu), fcpu = fc_alloc(g_cpu);
  const size_t total = MAX_LEN + SLACK;
  unsigned char *got = malloc(total * 4), *want = malloc(total * 4);
  ck_assert(got && want);
  ddp_stream_t s = NULL;
  ck_assert_int_eq(g_gpu->ops->stream_create(g_gpu, &s), DDP_OK);
  int iter = 0;
  for (int a = 0; a < 4; ++a) {
    const ddp_dtype_t t = types[a];
    const size_t sz = ddp_dtype_size(t);
    const float *vals = t == DDP_DTYPE_I32 ? ints : floats;
    const size_t nv =
        t == DDP_DTYPE_I32 ? sizeof ints / sizeof *ints : sizeof floats / sizeof *floats;
    for (size_t iv = 0; iv < nv; ++iv)
      for (size_t in = 0; in < sizeof k_lengths / sizeof *k_lengths; ++in)
        for (size_t io = 0; io < N_FILL_OFFSETS; ++io) {
          const size_t n = k_lengths[in], off = k_fill_offsets[io];
          if (n == MAX_LEN && io > 1) continue; /* the long fills need not repeat */
          for (int p = 0; p < 2; ++p, ++iter) {
            const float poison = p ? POISON_B : POISON_A;
            fc_run(g_gpu, &fg, iter % 2 ? s : NULL, 0, t, t, vals[iv], poison, n, 0, off, got);
            fc_run(g_cpu, &fcpu, NULL, 0, t, t, vals[iv], poison, n, 0, off, want);
            const size_t i = first_diff(got, want, n + SLACK, sz);
            if (i < n + SLACK)
              ck_abort_msg(
                  "fill %s with %g n %zu offset %zu poison %g: element %zu (%s) is "
                  "0x%X on the gpu, 0x%X on the cpu",
                  ddp_dtype_name(t), (double)vals[iv], n, off, (double)poison, i,
                  i < off        ? "before dst"
                  : i >= off + n ? "past the end"
                                 : "output",
                  elem_bits(got, sz, i), elem_bits(want, sz, i));
          }
        }
  }
  g_gpu->ops->stream_destroy(g_gpu, s);
  free(want);
  free(got);
  fc_free(g_cpu, &fcpu);
  fc_free(g_gpu, &fg);
}
END_TEST

/* ---- copies, streams and events ----------------------------------------- */

/* H2D into d1 and D2D into d2 on a user stream, an event recorded there that
 * the compute stream waits on, then synchronize() of the compute stream. The
 * D2H of all of d2 goes either on the compute stream after the wait (without
 * the wait it could overtake the D2D) or on the user stream before the
 * event (synchronizing the compute stream must then wait for it through the
 * event). The poison before is written on the compute stream and handed to
 * the user stream the same way. Host buffers alternate between pageable and
 * the backend's pinned memory (the truly asynchronous case). */
static void copy_round_trips(ddp_backend_t *be) {
  static const size_t sizes[] = {1, 3, 13, 4097, 65537, 1000003};
  static const size_t offs[][2] = {{0, 0}, {1, 3}, {3, 1}, {2, 5}};
  const size_t max_size = 1000003, cap = (max_size + 16 + 3) / 4 * 4;
  unsigned char *d1 = dev_alloc(be, cap), *d2 = dev_alloc(be, cap);
  void *ps = NULL, *pd = NULL;
  ck_assert_int_eq(be->ops->alloc_host(be, cap, &ps), DDP_OK);
  ck_assert_int_eq(be->ops->alloc_host(be, cap, &pd), DDP_OK);
  unsigned char *pinned_src = ps, *pinned_dst = pd;
  unsigned char *pageable_src = malloc(cap), *pageable_dst = malloc(cap), *want = malloc(cap);
  ck_assert(pinned_src && pinned_dst && pageable_src && pageable_dst && want);
  ddp_stream_t s = NULL;
  ddp_event_t poisoned = NULL, copied = NULL;
  ck_assert_int_eq(be->ops->stream_create(be, &s), DDP_OK);
  ck_assert_int_eq(be->ops->event_create(be, &poisoned), DDP_OK);
  ck_assert_int_eq(be->ops->event_create(be, &copied), DDP_OK);
  const float poison = POISON_A;
  unsigned char pbytes[4];
  memcpy(pbytes, &poison, 4);

  int iter = 0;
  for (size_t is = 0; is < sizeof sizes / sizeof *sizes; ++is)
    for (size_t io = 0; io < sizeof offs / sizeof *offs; ++io, ++iter) {
      const size_t bytes = sizes[is], o1 = offs[io][0], o2 = offs[io][1];
      unsigned char *src = iter % 2 ? pinned_src : pageable_src;
      unsigned char *dst = iter % 2 ? pageable_dst : pinned_dst;
      const int d2h_on_user = (iter / 2) % 2;
      const ddp_rng_t rng = next_rng();
      for (size_t i = 0; i < bytes; i += 4) {
        const uint32_t w = ddp_rng_u32(&rng, i / 4);
        memcpy(src + i, &w, bytes - i < 4 ? bytes - i : 4);
      }
      memset(dst, 0x5A, cap);
      ck_assert_int_eq(be->ops->fill(be, d1, DDP_DTYPE_F32, poison, cap / 4, NULL), DDP_OK);
      ck_assert_int_eq(be->ops->fill(be, d2, DDP_DTYPE_F32, poison, cap / 4, NULL), DDP_OK);
      ck_assert_int_eq(be->ops->event_record(be, poisoned, NULL), DDP_OK);
      ck_assert_int_eq(be->ops->stream_wait_event(be, s, poisoned), DDP_OK);
      ck_assert_int_eq(ddp_backend_copy(be, d1 + o1, src, bytes, DDP_COPY_KIND_HOST_TO_DEVICE, s),
                       DDP_OK);
      ck_assert_int_eq(
          ddp_backend_copy(be, d2 + o2, d1 + o1, bytes, DDP_COPY_KIND_DEVICE_TO_DEVICE, s), DDP_OK);
      if (d2h_on_user)
        ck_assert_int_eq(ddp_backend_copy(be, dst, d2, cap, DDP_COPY_KIND_DEVICE_TO_HOST, s),
                         DDP_OK);
      ck_assert_int_eq(be->ops->event_record(be, copied, s), DDP_OK);
      ck_assert_int_eq(be->ops->stream_wait_event(be, NULL, copied), DDP_OK);
      if (!d2h_on_user)
        ck_assert_int_eq(ddp_backend_copy(be, dst, d2, cap, DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
                         DDP_OK);
      ck_assert_int_eq(ddp_backend_sync(be, NULL), DDP_OK);

      for (size_t i = 0; i < cap; ++i) want[i] = pbytes[i % 4];
      memcpy(want + o2, src, bytes);
      const size_t i = first_diff(dst, want, cap, 1);
      ck_assert_msg(i == cap,
                    "%s: copy of %zu bytes (offsets %zu/%zu, %s source, D2H on the %s stream): "
                    "byte %zu is 0x%02X, want 0x%02X (%s)",
                    be->ops->name, bytes, o1, o2, iter % 2 ? "pinned" : "pageable",
                    d2h_on_user ? "user" : "compute", i, dst[i], want[i],
                    i < o2 || i >= o2 + bytes ? "outside the copy" : "inside");
    }
  ck_assert_int_eq(be->ops->synchronize(be, s), DDP_OK);
  be->ops->event_destroy(be, copied);
  be->ops->event_destroy(be, poisoned);
  be->ops->stream_destroy(be, s);
  free(want);
  free(pageable_dst);
  free(pageable_src);
  be->ops->free_host(be, pinned_dst);
  be->ops->free_host(be, pinned_src);
  ddp_backend_free(be, d2);
  ddp_backend_free(be, d1);
}

START_TEST(test_gpu_backend_copy_odd_sizes_across_streams) {
  copy_round_trips(g_gpu);
  copy_round_trips(g_cpu);
}
END_TEST

/* ---- allocation accounting ---------------------------------------------- */

#define N_LIVE 300

/* Checks all four counters against what they must be now. */
#define CHECK_COUNTERS(be, calls, frees, in_use, peak, when)                                  \
  do {                                                                                        \
    ck_assert_msg((be)->alloc_calls == (calls) && (be)->free_calls == (frees) &&              \
                      (be)->bytes_in_use == (in_use) && (be)->peak_bytes == (peak),           \
                  "%s %s: alloc_calls %llu free_calls %llu bytes_in_use %zu peak_bytes %zu; " \
                  "want %llu %llu %zu %zu",                                                   \
                  (be)->ops->name, (when), (unsigned long long)(be)->alloc_calls,             \
                  (unsigned long long)(be)->free_calls, (be)->bytes_in_use, (be)->peak_bytes, \
                  (unsigned long long)(calls), (unsigned long long)(frees), (size_t)(in_use), \
                  (size_t)(peak));                                                            \
  } while (0)

/* A permutation of [0, n) from the test's generator (Fisher-Yates). */
static void shuffle(size_t *idx, size_t n) {
  const ddp_rng_t rng = next_rng();
  for (size_t i = 0; i < n; ++i) idx[i] = i;
  for (size_t i = n; i > 1; --i) {
    const size_t j = (size_t)ddp_rng_below(&rng, i, i);
    const size_t tmp = idx[i - 1];
    idx[i - 1] = idx[j];
    idx[j] = tmp;
  }
}

/* 200 allocations of distinct sizes, half of them freed in a scrambled
 * order, 100 more (reusing the freed slots of the CUDA backend's pointer
 * table), then the rest freed scrambled. Distinct sizes make a table that
 * returns another pointer's size visible in bytes_in_use. */
static void accounting(ddp_backend_t *be) {
  uint64_t calls = be->alloc_calls, frees = be->free_calls;
  size_t in_use = be->bytes_in_use, peak = be->peak_bytes;
  const size_t start = in_use;
  void *ptr[N_LIVE] = {NULL};
  size_t bytes[N_LIVE], order[N_LIVE];
  char when[64];
  for (size_t i = 0; i < N_LIVE; ++i) bytes[i] = 3 + 257 * i + (i % 7) * 100003;

  for (size_t i = 0; i < 200; ++i) {
    ptr[i] = dev_alloc(be, bytes[i]);
    calls++, in_use += bytes[i];
    if (in_use > peak) peak = in_use;
    snprintf(when, sizeof when, "after alloc %zu", i);
    CHECK_COUNTERS(be, calls, frees, in_use, peak, when);
  }
  size_t shared = 0;
  for (size_t i = 0; i < 200; ++i)
    for (size_t j = 0; j < i; ++j) shared += ptr[i] == ptr[j];
  ck_assert_msg(shared == 0, "%s: %zu pairs of live allocations share a pointer", be->ops->name,
                shared);
  shuffle(order, 200);
  for (size_t r = 0; r < 100; ++r) {
    const size_t i = order[r];
    ddp_backend_free(be, ptr[i]);
    ptr[i] = NULL;
    frees++, in_use -= bytes[i];
    snprintf(when, sizeof when, "after free of alloc %zu", i);
    CHECK_COUNTERS(be, calls, frees, in_use, peak, when);
  }
  for (size_t i = 200; i < N_LIVE; ++i) {
    ptr[i] = dev_alloc(be, bytes[i]);
    calls++, in_use += bytes[i];
    if (in_use > peak) peak = in_use;
    snprintf(when, sizeof when, "after alloc %zu", i);
    CHECK_COUNTERS(be, calls, frees, in_use, peak, when);
  }
  shuffle(order, N_LIVE);
  for (size_t r = 0; r < N_LIVE; ++r) {
    const size_t i = order[r];
    if (!ptr[i]) continue;
    ddp_backend_free(be, ptr[i]);
    ptr[i] = NULL;
    frees++, in_use -= bytes[i];
    snprintf(when, sizeof when, "after free of alloc %zu", i);
    CHECK_COUNTERS(be, calls, frees, in_use, peak, when);
  }
  ck_assert_uint_eq(be->bytes_in_use, start);
  /* free(NULL) is a no-op, not a free call. */
  ddp_backend_free(be, NULL);
  CHECK_COUNTERS(be, calls, frees, in_use, peak, "after free(NULL)");
}

START_TEST(test_gpu_backend_alloc_accounting_many_live) {
  accounting(g_gpu);
  accounting(g_cpu);
}
END_TEST

/* ---- errors -------------------------------------------------------------- */

START_TEST(test_gpu_backend_oom_is_reported_and_recoverable) {
  const uint64_t calls = g_gpu->alloc_calls, frees = g_gpu->free_calls;
  const size_t in_use = g_gpu->bytes_in_use, peak = g_gpu->peak_bytes;
  void *p = (void *)&p;
  ddp_test_log_start();
  const ddp_status_t st = ddp_backend_alloc(g_gpu, (size_t)1 << 50, &p);
  char *text = ddp_test_log_stop();
  ck_assert_msg(st == DDP_ERR_OOM, "alloc of 1 PiB = %s", ddp_status_name(st));
  ck_assert_ptr_null(p);
  /* The message says what to change and how much memory there was. */
  ddp_assert_contains(text, "--tokens-per-batch");
  ddp_assert_contains(text, "MiB free");
  free(text);
  CHECK_COUNTERS(g_gpu, calls, frees, in_use, peak, "after a failed alloc");

  /* The failure must not linger as a pending CUDA error: the next
   * allocation and the next kernel launch (fill) work. */
  enum { N = 4099 };
  float *d = dev_alloc(g_gpu, N * sizeof(float));
  ck_assert_int_eq(g_gpu->ops->fill(g_gpu, d, DDP_DTYPE_F32, 2.5f, N, NULL), DDP_OK);
  float *h = malloc(N * sizeof *h);
  ck_assert_ptr_nonnull(h);
  download(g_gpu, h, d, N * sizeof(float));
  int wrong = 0;
  for (int i = 0; i < N; ++i) wrong += h[i] != 2.5f;
  ck_assert_msg(wrong == 0, "%d of %d elements not filled after the failed alloc", wrong, N);
  free(h);
  ddp_backend_free(g_gpu, d);
  const size_t high = in_use + N * sizeof(float);
  CHECK_COUNTERS(g_gpu, calls + 1, frees + 1, in_use, peak > high ? peak : high,
                 "after the recovery alloc");
}
END_TEST

/* The OOM message carries the device's free bytes (as cudaMemGetInfo says),
 * the bytes asked for, the rank and the operation. */
START_TEST(test_gpu_backend_oom_message_has_free_bytes) {
  size_t free_b = 0, total_b = 0;
  ck_assert_int_eq(g_gpu->ops->mem_info(g_gpu, &free_b, &total_b), DDP_OK);
  void *p = NULL;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_backend_alloc(g_gpu, (size_t)1 << 50, &p), DDP_ERR_OOM);
  char *text = ddp_test_log_stop();
  ddp_assert_contains(text, "rank 0: cudaMalloc of 1125899906842624 bytes");
  char where[32];
  snprintf(where, sizeof where, "failed on cuda:%d", g_gpu->device);
  ddp_assert_contains(text, where);
  const char *at = strstr(text, "MiB free (");
  ck_assert_msg(at != NULL, "no free bytes in: %s", text);
  const unsigned long long said = strtoull(at + strlen("MiB free ("), NULL, 10);
  ck_assert_msg(said > 0 && said <= total_b, "free bytes %llu (device total %zu) in: %s", said,
                total_b, text);
  free(text);
}
END_TEST

/* After one warm-up cycle, repeated alloc/free cycles of the same sizes are
 * served from the cache: zero raw cudaMalloc calls, and the memory works. */
START_TEST(test_gpu_backend_steady_state_makes_no_raw_cudamalloc) {
  static const size_t sizes[] = {4, 4096, 123457, 3 << 20, 64 << 20, 999, 2 << 20};
  enum { N = sizeof sizes / sizeof sizes[0], CYCLES = 5 };
  void *p[N];
  ddp_caching_alloc_stats_t warm, now;
  for (int cycle = 0; cycle <= CYCLES; ++cycle) {
    for (int i = 0; i < N; ++i) p[i] = dev_alloc(g_gpu, sizes[i]);
    ck_assert_int_eq(g_gpu->ops->fill(g_gpu, p[4], DDP_DTYPE_F32, (float)cycle, 1, NULL), DDP_OK);
    float back = -1.0f;
    download(g_gpu, &back, p[4], sizeof back);
    ck_assert_float_eq(back, (float)cycle);
    for (int i = N - 1; i >= 0; --i) ddp_backend_free(g_gpu, p[(i * 3) % N]);
    if (cycle == 0) ddp_backend_mem_stats(g_gpu, &warm);
  }
  ddp_backend_mem_stats(g_gpu, &now);
  ck_assert_msg(now.raw_alloc_calls == warm.raw_alloc_calls,
                "%llu raw cudaMalloc calls in %d steady-state cycles",
                (unsigned long long)(now.raw_alloc_calls - warm.raw_alloc_calls), CYCLES);
  ck_assert_uint_eq(now.raw_free_calls, warm.raw_free_calls);
  ck_assert_uint_eq(now.bytes_reserved, warm.bytes_reserved);
  ck_assert_uint_ge(now.peak_bytes_in_use, (size_t)64 << 20);
}
END_TEST

/* trim gives cached segments back: reserved drops by what it released. */
START_TEST(test_gpu_backend_trim_releases_cached_memory) {
  void *p = dev_alloc(g_gpu, (size_t)96 << 20);
  ddp_backend_free(g_gpu, p);
  ddp_caching_alloc_stats_t before, after;
  ddp_backend_mem_stats(g_gpu, &before);
  const size_t released = ddp_backend_trim(g_gpu);
  ddp_backend_mem_stats(g_gpu, &after);
  ck_assert_uint_ge(released, (size_t)96 << 20);
  ck_assert_uint_eq(after.bytes_reserved, before.bytes_reserved - released);
  ck_assert_uint_gt(after.raw_free_calls, before.raw_free_calls);
}
END_TEST

/* Descriptors ddp_gemm_validate rejects are rejected by both backends with
 * the same status, and nothing is written to C. */
START_TEST(test_gpu_backend_gemm_rejects_invalid_descriptors) {
  enum { M = 3, N = 5, K = 7 };
  ddp_backend_t *bes[2] = {g_gpu, g_cpu};
  float host_c[M * N], back[M * N];
  for (int i = 0; i < M * N; ++i) host_c[i] = SENTINEL;
  for (int w = 0; w < 2; ++w) {
    ddp_backend_t *be = bes[w];
    void *a = dev_alloc(be, M * K * 4), *b = dev_alloc(be, K * N * 4),
         *c = dev_alloc(be, M * N * 4);
    upload(be, c, host_c, sizeof host_c);
    const ddp_gemm_t ok = ddp_gemm_packed_f32(M, N, K, a, b, c);
    ck_assert_int_eq(ddp_gemm_validate(&ok), DDP_OK);
    ddp_gemm_t bad[9];
    for (int i = 0; i < 9; ++i) bad[i] = ok;
    bad[0].lda = K - 1;                 /* lda smaller than A's K columns */
    bad[1].trans_a = DDP_TRANSPOSE_YES; /* A stored K x M: lda must be >= M */
    bad[1].lda = M - 1;
    bad[2].ldb = N - 1;
    bad[3].ldc = N - 1;
    bad[4].m = -1;
    bad[5].batch = 0;
    bad[6].a = NULL;
    bad[7].ab_dtype = DDP_DTYPE_I32;
    bad[8].batch = 2; /* a negative batch stride */
    bad[8].stride_b = -(int64_t)(K * N);
    for (int i = 0; i < 9; ++i) {
      ddp_test_log_start();
      const ddp_status_t v = ddp_gemm_validate(&bad[i]);
      const ddp_status_t st = ddp_backend_gemm(be, &bad[i], NULL);
      free(ddp_test_log_stop());
      ck_assert_msg(v == DDP_ERR_INVALID_ARG, "validate accepted bad descriptor %d", i);
      ck_assert_msg(st == DDP_ERR_INVALID_ARG, "%s gemm with bad descriptor %d = %s", be->ops->name,
                    i, ddp_status_name(st));
    }
    download(be, back, c, sizeof back);
    ck_assert_msg(memcmp(back, host_c, sizeof back) == 0, "%s: a rejected gemm wrote C",
                  be->ops->name);
    ddp_backend_free(be, c);
    ddp_backend_free(be, b);
    ddp_backend_free(be, a);
  }
}
END_TEST

/* Invalid fill and convert types are rejected by both backends alike. */
START_TEST(test_gpu_backend_fill_convert_reject_invalid_types) {
  ddp_backend_t *bes[2] = {g_gpu, g_cpu};
  for (int w = 0; w < 2; ++w) {
    ddp_backend_t *be = bes[w];
    void *x = dev_alloc(be, 64), *y = dev_alloc(be, 64);
    ddp_test_log_start();
    const ddp_status_t s1 = be->ops->fill(be, x, (ddp_dtype_t)7, 1.0f, 8, NULL);
    const ddp_status_t s2 = be->ops->convert(be, x, DDP_DTYPE_I32, y, DDP_DTYPE_F32, 8, NULL);
    const ddp_status_t s3 = be->ops->convert(be, x, DDP_DTYPE_F32, y, DDP_DTYPE_I32, 8, NULL);
    free(ddp_test_log_stop());
    ck_assert_msg(s1 == DDP_ERR_INVALID_ARG, "%s fill(dtype 7) = %s", be->ops->name,
                  ddp_status_name(s1));
    ck_assert_msg(s2 == DDP_ERR_INVALID_ARG, "%s convert(f32 -> i32) = %s", be->ops->name,
                  ddp_status_name(s2));
    ck_assert_msg(s3 == DDP_ERR_INVALID_ARG, "%s convert(i32 -> f32) = %s", be->ops->name,
                  ddp_status_name(s3));
    ck_assert_int_eq(ddp_backend_sync(be, NULL), DDP_OK);
    ddp_backend_free(be, y);
    ddp_backend_free(be, x);
  }
}
END_TEST

/* ---- mem_info ------------------------------------------------------------ */

START_TEST(test_gpu_backend_mem_info) {
  size_t free_b = 1, total_b = 0;
  ck_assert_int_eq(g_gpu->ops->mem_info(g_gpu, &free_b, &total_b), DDP_OK);
  ck_assert_uint_gt(total_b, 0);
  ck_assert_uint_le(free_b, total_b);
  /* It reports the device's memory, not the host's: a quarter of what it
   * calls free can be allocated (with room for other tests running beside). */
  void *p = dev_alloc(g_gpu, free_b / 4 > 0 ? free_b / 4 : 1);
  ddp_backend_free(g_gpu, p);
}
END_TEST

/* ---- runner ---------------------------------------------------------------- */

/* A 192 x 160 x 512 fp32 product on a backend made with allow_tf32 and on
 * the CPU: TF32 keeps 10 mantissa bits of each input (unit roundoff 2^-11
 * = 4.9e-4), so the normwise error must exceed exact fp32's (~1e-6: proof
 * the tensor-core path is really taken) and stay below 4e-3 (a few input
 * roundings, averaged over K = 512 products). */
START_TEST(test_gpu_backend_gemm_tf32_policy) {
  const ddp_backend_config_t cfg = {.device = "cuda", .allow_tf32 = 1};
  ddp_backend_t *tf = NULL;
  ck_assert_int_eq(ddp_backend_create(&cfg, &tf), DDP_OK);
  ck_assert_ptr_nonnull(strstr(tf->description, "TF32 on"));
  ck_assert_ptr_nonnull(strstr(g_gpu->description, "TF32 off"));
  enum { M = 192, N = 160, K = 512 };
  float *a = malloc(M * K * sizeof *a), *b = malloc(K * N * sizeof *b);
  float *cg = malloc(M * N * sizeof *cg), *cc = malloc(M * N * sizeof *cc);
  ck_assert(a && b && cg && cc);
  random_values(a, M * K);
  random_values(b, K * N);
  ddp_backend_t *bes[2] = {tf, g_cpu};
  float *outs[2] = {cg, cc};
  for (int i = 0; i < 2; ++i) {
    void *da = dev_alloc(bes[i], sizeof(float) * M * K),
         *db = dev_alloc(bes[i], sizeof(float) * K * N);
    void *dc = dev_alloc(bes[i], sizeof(float) * M * N);
    upload(bes[i], da, a, sizeof(float) * M * K);
    upload(bes[i], db, b, sizeof(float) * K * N);
    ddp_gemm_t g = ddp_gemm_packed_f32(M, N, K, da, db, dc);
    ck_assert_int_eq(ddp_backend_gemm(bes[i], &g, NULL), DDP_OK);
    download(bes[i], outs[i], dc, sizeof(float) * M * N);
    ddp_backend_free(bes[i], da);
    ddp_backend_free(bes[i], db);
    ddp_backend_free(bes[i], dc);
  }
  double num = 0.0, den = 0.0;
  for (int i = 0; i < M * N; ++i) {
    num = fmax(num, fabs((double)cg[i] - cc[i]));
    den = fmax(den, fabs((double)cc[i]));
  }
  const double err = num / den;
  printf("TF32 GEMM %dx%dx%d: normwise error %.3g against exact fp32\n", M, N, K, err);
  ck_assert_msg(err > 1e-5 && err < 4e-3, "TF32 normwise error %.3g outside (1e-5, 4e-3)", err);
  free(a), free(b), free(cg), free(cc);
  ddp_backend_destroy(tf);
}
END_TEST

/* Repeated GEMMs of one shape build their cuBLASLt descriptors once: the
 * step loop sets nothing up. */
START_TEST(test_gpu_backend_gemm_plans_are_cached) {
  enum { M = 33, N = 47, K = 29 };
  void *da = dev_alloc(g_gpu, sizeof(float) * M * K), *db = dev_alloc(g_gpu, sizeof(float) * K * N);
  void *dc = dev_alloc(g_gpu, sizeof(float) * M * N);
  ck_assert_int_eq(g_gpu->ops->fill(g_gpu, da, DDP_DTYPE_F32, 0.5f, M * K, NULL), DDP_OK);
  ck_assert_int_eq(g_gpu->ops->fill(g_gpu, db, DDP_DTYPE_F32, 0.25f, K * N, NULL), DDP_OK);
  ddp_gemm_t g = ddp_gemm_packed_f32(M, N, K, da, db, dc);
  ck_assert_int_eq(ddp_backend_gemm(g_gpu, &g, NULL), DDP_OK);
  const uint64_t misses = ddp_cuda_gemm_cache_misses(g_gpu);
  for (int i = 0; i < 20; ++i) ck_assert_int_eq(ddp_backend_gemm(g_gpu, &g, NULL), DDP_OK);
  ck_assert_uint_eq(ddp_cuda_gemm_cache_misses(g_gpu), misses);
  g.beta = 1.0f; /* alpha/beta are call arguments, not part of a plan */
  ck_assert_int_eq(ddp_backend_gemm(g_gpu, &g, NULL), DDP_OK);
  ck_assert_uint_eq(ddp_cuda_gemm_cache_misses(g_gpu), misses);
  float c[4];
  download(g_gpu, c, dc, sizeof c);
  ck_assert_msg(fabsf(c[0] - (float)(2 * 0.5 * 0.25 * K)) < 1e-4f, "c[0] = %g after beta 1",
                (double)c[0]); /* beta 1 doubled it */
  g.m = M - 1;                 /* a new shape is a new plan */
  ck_assert_int_eq(ddp_backend_gemm(g_gpu, &g, NULL), DDP_OK);
  ck_assert_uint_eq(ddp_cuda_gemm_cache_misses(g_gpu), misses + 1);
  download(g_gpu, c, dc, sizeof c);
  /* still beta 1: row 0 is among the M - 1 rows, so it gained one more product */
  ck_assert_msg(fabsf(c[0] - (float)(3 * 0.5 * 0.25 * K)) < 1e-4f, "c[0] = %g after M - 1",
                (double)c[0]);
  ddp_backend_free(g_gpu, da);
  ddp_backend_free(g_gpu, db);
  ddp_backend_free(g_gpu, dc);
}
END_TEST

/* A plan is chosen for the first call of a shape; later calls of that shape
 * may pass operands at other offsets (the attention slabs, views into packed
 * activations). Here the first call has allocation-aligned operands and the
 * second the same shape one element (2 bytes, bf16) into the buffers: it
 * gets a plan of its own (alignment is part of the key) and the right
 * product, within the fp32-accumulation tolerance of 1e-5 normwise. */
START_TEST(test_gpu_backend_gemm_offset_operands_get_their_own_plan) {
  enum { M = 64, N = 96, K = 72 };
  const ddp_dtype_t t = DDP_DTYPE_BF16;
  float *a = malloc((M * K + 1) * sizeof *a), *b = malloc((K * N + 1) * sizeof *b);
  uint16_t *ha = malloc((M * K + 1) * sizeof *ha), *hb = malloc((K * N + 1) * sizeof *hb);
  float *cg = malloc(M * N * sizeof *cg), *cc = malloc(M * N * sizeof *cc);
  ck_assert(a && b && ha && hb && cg && cc);
  random_values(a, M * K + 1);
  random_values(b, K * N + 1);
  for (int i = 0; i < M * K + 1; ++i) ha[i] = half_of(t, a[i]), a[i] = float_of_half(t, ha[i]);
  for (int i = 0; i < K * N + 1; ++i) hb[i] = half_of(t, b[i]), b[i] = float_of_half(t, hb[i]);
  ddp_backend_t *bes[2] = {g_gpu, g_cpu};
  float *outs[2] = {cg, cc};
  for (int i = 0; i < 2; ++i) {
    /* the CPU oracle multiplies the same (bf16-exact) values in fp32 */
    const size_t esz = i == 0 ? 2 : sizeof(float);
    char *da = dev_alloc(bes[i], esz * (M * K + 1)), *db = dev_alloc(bes[i], esz * (K * N + 1));
    char *dc = dev_alloc(bes[i], sizeof(float) * (M * N + 1));
    upload(bes[i], da, i == 0 ? (const void *)ha : a, esz * (M * K + 1));
    upload(bes[i], db, i == 0 ? (const void *)hb : b, esz * (K * N + 1));
    ddp_gemm_t g = ddp_gemm_packed_f32(M, N, K, da, db, dc);
    g.ab_dtype = i == 0 ? t : DDP_DTYPE_F32;
    ck_assert_int_eq(ddp_backend_gemm(bes[i], &g, NULL), DDP_OK);
    const uint64_t misses = i == 0 ? ddp_cuda_gemm_cache_misses(g_gpu) : 0;
    g.a = da + esz, g.b = db + esz, g.c = dc + sizeof(float);
    ck_assert_int_eq(ddp_backend_gemm(bes[i], &g, NULL), DDP_OK);
    if (i == 0) ck_assert_uint_eq(ddp_cuda_gemm_cache_misses(g_gpu), misses + 1);
    download(bes[i], outs[i], dc + sizeof(float), sizeof(float) * M * N);
    ddp_backend_free(bes[i], da);
    ddp_backend_free(bes[i], db);
    ddp_backend_free(bes[i], dc);
  }
  double num = 0.0, den = 0.0;
  for (int i = 0; i < M * N; ++i) {
    num = fmax(num, fabs((double)cg[i] - cc[i]));
    den = fmax(den, fabs((double)cc[i]));
  }
  ck_assert_msg(num / den < 1e-5, "offset bf16 GEMM: normwise error %.3g", num / den);
  free(a), free(b), free(ha), free(hb), free(cg), free(cc);
}
END_TEST

static Suite *gpu_backend_suite(void) {
  Suite *s = suite_create("gpu_backend");
  TCase *tc = tcase_create("gemm");
  tcase_add_test(tc, test_gpu_backend_gemm_odd_sizes_all_transposes);
  tcase_add_test(tc, test_gpu_backend_gemm_tf32_policy);
  tcase_add_test(tc, test_gpu_backend_gemm_plans_are_cached);
  tcase_add_test(tc, test_gpu_backend_gemm_offset_operands_get_their_own_plan);
  tcase_add_test(tc, test_gpu_backend_gemm_large_odd_all_transposes);
  tcase_add_test(tc, test_gpu_backend_gemm_alpha_beta_combinations);
  tcase_add_test(tc, test_gpu_backend_gemm_beta_zero_ignores_nan_in_c);
  tcase_add_test(tc, test_gpu_backend_gemm_beta_one_accumulates);
  tcase_add_test(tc, test_gpu_backend_gemm_padded_pitches);
  tcase_add_test(tc, test_gpu_backend_gemm_strided_batched);
  tcase_add_test(tc, test_gpu_backend_gemm_strided_batched_shared_b);
  tcase_add_test(tc, test_gpu_backend_gemm_k_zero_scales_c);
  tcase_add_test(tc, test_gpu_backend_gemm_k_zero_ignores_operands);
  tcase_add_test(tc, test_gpu_backend_gemm_on_a_user_stream);
  tcase_add_test(tc, test_gpu_backend_gemm_bf16_operands);
  tcase_add_test(tc, test_gpu_backend_gemm_f16_operands);
  suite_add_tcase(s, tc);

  tc = tcase_create("memory");
  tcase_add_test(tc, test_gpu_backend_convert_every_pair_bit_exact);
  tcase_add_test(tc, test_gpu_backend_fill_every_dtype_bit_exact);
  tcase_add_test(tc, test_gpu_backend_copy_odd_sizes_across_streams);
  tcase_add_test(tc, test_gpu_backend_alloc_accounting_many_live);
  tcase_add_test(tc, test_gpu_backend_mem_info);
  tcase_add_test(tc, test_gpu_backend_steady_state_makes_no_raw_cudamalloc);
  tcase_add_test(tc, test_gpu_backend_trim_releases_cached_memory);
  suite_add_tcase(s, tc);

  tc = tcase_create("errors");
  tcase_add_test(tc, test_gpu_backend_oom_is_reported_and_recoverable);
  tcase_add_test(tc, test_gpu_backend_oom_message_has_free_bytes);
  tcase_add_test(tc, test_gpu_backend_gemm_rejects_invalid_descriptors);
  tcase_add_test(tc, test_gpu_backend_fill_convert_reject_invalid_types);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  const ddp_backend_ops_t *const *reg = ddp_backend_registry();
  if (!reg[0] || reg[0]->kind != DDP_DEVICE_KIND_CUDA) {
    printf("SKIP: check_gpu_backend needs the CUDA backend (this build has none)\n");
    return 77;
  }
  char why[160] = "";
  if (!reg[0]->available(why, sizeof why)) {
    printf("SKIP: check_gpu_backend needs a usable CUDA device (%s)\n", why);
    return 77;
  }
  const ddp_backend_config_t gpu_cfg = {.device = "cuda"};
  const ddp_backend_config_t cpu_cfg = {.device = "cpu", .threads = 1};
  if (ddp_backend_create(&gpu_cfg, &g_gpu) != DDP_OK ||
      ddp_backend_create(&cpu_cfg, &g_cpu) != DDP_OK) {
    fprintf(stderr, "check_gpu_backend: cannot create the cuda and cpu backends\n");
    ddp_backend_destroy(g_gpu);
    return 1;
  }
  printf("check_gpu_backend: %s against %s\n", g_gpu->description, g_cpu->description);

  SRunner *sr = srunner_create(gpu_backend_suite());
  srunner_set_fork_status(sr, CK_NOFORK); /* a CUDA context does not survive fork */
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  ddp_backend_destroy(g_cpu);
  ddp_backend_destroy(g_gpu);
  return failed == 0 ? 0 : 1;
}
