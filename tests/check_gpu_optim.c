/* GPU suite for the optimizer kernels (kernels/optim.cu through the
 * backend-neutral ddp_optim_plan_create / ddp_optim_grad_sumsq /
 * ddp_optim_step) against the CPU twins (the same calls on the CPU backend).
 *
 * Parameters: n = 100003 in 41 segments of odd sizes (one of 40000, larger
 * than a chunk of kernels/optim.h, so chunking is exercised), decay on
 * alternate segments; fresh random weights and gradients every run (the
 * seed is printed), one tensor's weights starting at zero (LAMB's
 * zero-norm trust ratio). AdamW, SGD with Nesterov momentum, SGD with plain
 * momentum, SGD without momentum and LAMB, five steps each (t = 1..5) with
 * and without a bf16/fp16 compute copy, in three gradient modes: clipping
 * that bites (max norm 1) with grad_scale 0.5; no clipping at all
 * (max_grad_norm 0 and no grad_sumsq) with grad_scale 1; clipping that
 * does not bite (max norm 1e30) with grad_scale 0.25.
 *
 * What must hold:
 *   - the squared norm: relative error <= 1e-6 (both accumulate in double,
 *     in different orders, and round once to fp32), also alone for n from 1
 *     to 5000011 (one partial block up to the kernel's block limit), where
 *     it overwrites a NaN-poisoned result and repeats bit for bit;
 *   - with the CPU's norm copied to the GPU before each step (so both clip
 *     by the same factor), AdamW and SGD weights, state and compute copy are
 *     bit-identical: the kernels perform the CPU's fp32 operations with
 *     explicit rounding (no contraction; the CPU side is built without FMA
 *     contraction too, as the default x86-64 -O2 build is);
 *   - LAMB, whose per-tensor norms are summed in another order: weights and
 *     state within 1e-6 normwise;
 *   - for every kind, the compute copy is the GPU's final weights rounded
 *     to nearest even (ddp_convert_host on the host gives the same bits);
 *   - skip_nonfinite with an inf gradient leaves weights, state and copy as
 *     they were;
 *   - two GPU runs are bit-identical;
 *   - LAMB over a shard (ddp_optim_lamb_*): the ratios from the same
 *     exchanged sums are the same bits on both backends, and the three
 *     parts on a table of pieces (segments cut as --zero 1 cuts them) stay
 *     within 1e-6 of the CPU, skip included.
 *
 * Exit 77 (SKIP) without a usable CUDA device. In process (CK_NOFORK). */
#include <config.h>

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/dtype.h"
#include "gpu_twin.h"
#include "optim/optim.h"

enum { N_SEG = 41, N_KIND = 5, N_MODE = 3 };
static ddp_param_t g_segs[N_SEG];
static size_t g_n;

static void make_segments(void) {
  size_t off = 0;
  for (int k = 0; k < N_SEG; ++k) {
    size_t c = k == 7 ? 40000 : (size_t)(97 + 37 * k * k % 2011);
    g_segs[k] = (ddp_param_t){.offset = off, .count = c, .decay = k % 2};
    off += c;
  }
  /* the last segment takes up the rest of 100003 */
  g_segs[N_SEG - 1].count += 100003 - off;
  g_n = 100003;
}

/* Gradient modes of compare_case: the max norm, the gradient scale, and
 * whether the step gets the squared norm at all. */
static const struct {
  float max_norm, scale;
  int sumsq;
} g_modes[N_MODE] = {{1.0f, 0.5f, 1}, {0.0f, 1.0f, 0}, {1e30f, 0.25f, 1}};

static ddp_optim_config_t config(int k) {
  ddp_optim_config_t c = {
      .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .max_grad_norm = 1.0f};
  if (k == 0) c.kind = DDP_OPTIM_KIND_ADAMW;
  if (k == 1) c.kind = DDP_OPTIM_KIND_SGD, c.momentum = 0.9f, c.nesterov = 1;
  if (k == 2) c.kind = DDP_OPTIM_KIND_SGD, c.momentum = 0.0f;
  if (k == 3) c.kind = DDP_OPTIM_KIND_LAMB;
  if (k == 4) c.kind = DDP_OPTIM_KIND_SGD, c.momentum = 0.8f, c.nesterov = 0;
  return c;
}

typedef struct run {
  ddp_backend_t *be;
  ddp_optim_plan_t *plan;
  float *p, *g, *state, *sumsq;
  void *copy;
} run_t;

static run_t run_open(ddp_backend_t *be, const ddp_optim_config_t *cfg, ddp_dtype_t cdt,
                      const float *p0) {
  run_t r = {.be = be};
  ck_assert_int_eq(ddp_optim_plan_create(be, cfg, g_segs, N_SEG, g_n, &r.plan), DDP_OK);
  r.p = twin_dev_alloc(be, g_n * sizeof(float));
  r.g = twin_dev_alloc(be, g_n * sizeof(float));
  r.state = twin_dev_alloc(be, 2 * g_n * sizeof(float));
  r.sumsq = twin_dev_alloc(be, sizeof(float));
  r.copy = cdt != DDP_DTYPE_F32 ? twin_dev_alloc(be, g_n * 2) : NULL;
  twin_upload(be, r.p, p0, g_n * sizeof(float));
  ck_assert_int_eq(be->ops->fill(be, r.state, DDP_DTYPE_F32, 0.0f, 2 * g_n, NULL), DDP_OK);
  return r;
}

static void run_close(run_t *r) {
  ddp_optim_plan_destroy(r->plan);
  ddp_backend_free(r->be, r->p);
  ddp_backend_free(r->be, r->g);
  ddp_backend_free(r->be, r->state);
  ddp_backend_free(r->be, r->sumsq);
  if (r->copy) ddp_backend_free(r->be, r->copy);
}

static void step_mode(run_t *r, const ddp_optim_config_t *cfg, ddp_dtype_t cdt, int64_t t, int skip,
                      float grad_scale, int use_sumsq) {
  const ddp_optim_step_args_t a = {.cfg = cfg,
                                   .params = r->p,
                                   .grads = r->g,
                                   .state = r->state,
                                   .tensors = g_segs,
                                   .n_tensors = N_SEG,
                                   .n = g_n,
                                   .t = t,
                                   .lr = 0.01f,
                                   .grad_scale = grad_scale,
                                   .grad_sumsq = use_sumsq ? r->sumsq : NULL,
                                   .compute_params = r->copy,
                                   .compute_dtype = cdt,
                                   .skip_nonfinite = skip};
  ck_assert_int_eq(ddp_optim_step(r->be, r->plan, &a, NULL), DDP_OK);
}

static void step(run_t *r, const ddp_optim_config_t *cfg, ddp_dtype_t cdt, int64_t t, int skip) {
  step_mode(r, cfg, cdt, t, skip, 0.5f, 1);
}

static void *fetch(ddp_backend_t *be, const void *dev, size_t bytes) {
  void *h = malloc(bytes + 1);
  ck_assert_ptr_nonnull(h);
  twin_download(be, h, dev, bytes);
  return h;
}

static double normwise(const float *a, const float *b, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    num = fmax(num, fabs((double)a[i] - b[i]));
    den = fmax(den, fabs((double)b[i]));
  }
  return den > 0 ? num / den : num;
}

static float *random_vector(size_t n, float std) {
  float *x = malloc(n * sizeof *x);
  ck_assert_ptr_nonnull(x);
  ddp_rng_fill_normal(&twin_rng, twin_off, 0.0f, std, x, n);
  twin_off += n;
  return x;
}

/* Five steps on both backends in gradient mode `mode` (g_modes); returns
 * the GPU's final weights. */
static float *compare_case(int k, ddp_dtype_t cdt, int mode) {
  ddp_optim_config_t cfg = config(k);
  cfg.max_grad_norm = g_modes[mode].max_norm;
  const float scale = g_modes[mode].scale;
  float *p0 = random_vector(g_n, 0.5f);
  /* one tensor starts at zero: LAMB's ||p|| = 0 case (trust ratio 1) on step 1 */
  memset(p0 + g_segs[3].offset, 0, g_segs[3].count * sizeof(float));
  run_t gpu = run_open(twin_gpu, &cfg, cdt, p0), cpu = run_open(twin_cpu, &cfg, cdt, p0);
  for (int64_t t = 1; t <= 5; ++t) {
    float *g = random_vector(g_n, 2.0f);
    twin_upload(twin_gpu, gpu.g, g, g_n * sizeof(float));
    twin_upload(twin_cpu, cpu.g, g, g_n * sizeof(float));
    ck_assert_int_eq(ddp_optim_grad_sumsq(twin_gpu, gpu.sumsq, gpu.g, g_n, scale, NULL), DDP_OK);
    ck_assert_int_eq(ddp_optim_grad_sumsq(twin_cpu, cpu.sumsq, cpu.g, g_n, scale, NULL), DDP_OK);
    float sg, sc;
    twin_download(twin_gpu, &sg, gpu.sumsq, sizeof sg);
    twin_download(twin_cpu, &sc, cpu.sumsq, sizeof sc);
    ck_assert_msg(fabs((double)sg - sc) <= 1e-6 * sc, "sumsq: gpu %.9g cpu %.9g", (double)sg,
                  (double)sc);
    twin_upload(twin_gpu, gpu.sumsq, &sc, sizeof sc); /* the same clip factor on both */
    step_mode(&gpu, &cfg, cdt, t, 0, scale, g_modes[mode].sumsq);
    step_mode(&cpu, &cfg, cdt, t, 0, scale, g_modes[mode].sumsq);
    free(g);
  }
  float *pg = fetch(twin_gpu, gpu.p, g_n * 4), *pc = fetch(twin_cpu, cpu.p, g_n * 4);
  float *sg = fetch(twin_gpu, gpu.state, 2 * g_n * 4),
        *sc = fetch(twin_cpu, cpu.state, 2 * g_n * 4);
  const char *name = ddp_optim_kind_name(cfg.kind);
  if (cfg.kind == DDP_OPTIM_KIND_LAMB) {
    ck_assert_msg(normwise(pg, pc, g_n) <= 1e-6, "lamb weights (mode %d): error %.3g", mode,
                  normwise(pg, pc, g_n));
    ck_assert_msg(normwise(sg, sc, 2 * g_n) <= 1e-6, "lamb state (mode %d): error %.3g", mode,
                  normwise(sg, sc, 2 * g_n));
  } else {
    ck_assert_msg(memcmp(pg, pc, g_n * 4) == 0,
                  "%s (case %d, mode %d): weights differ from the CPU", name, k, mode);
    const size_t sn = cfg.kind == DDP_OPTIM_KIND_SGD ? (cfg.momentum > 0 ? g_n : 0) : 2 * g_n;
    ck_assert_msg(memcmp(sg, sc, sn * 4) == 0, "%s (case %d, mode %d): state differs from the CPU",
                  name, k, mode);
    if (cdt != DDP_DTYPE_F32) {
      void *cg = fetch(twin_gpu, gpu.copy, g_n * 2), *cc = fetch(twin_cpu, cpu.copy, g_n * 2);
      ck_assert_msg(memcmp(cg, cc, g_n * 2) == 0, "%s (case %d, mode %d): %s compute copy differs",
                    name, k, mode, ddp_dtype_name(cdt));
      free(cg);
      free(cc);
    }
  }
  if (cdt != DDP_DTYPE_F32) {
    /* every kind (LAMB included): the copy is the GPU's own final weights
     * rounded to nearest even, written in the same pass */
    void *cg = fetch(twin_gpu, gpu.copy, g_n * 2), *want = malloc(g_n * 2);
    ck_assert_ptr_nonnull(want);
    ck_assert_int_eq(ddp_convert_host(want, cdt, pg, DDP_DTYPE_F32, g_n), DDP_OK);
    ck_assert_msg(memcmp(cg, want, g_n * 2) == 0,
                  "%s (case %d, mode %d): the %s copy is not the rounded weights", name, k, mode,
                  ddp_dtype_name(cdt));
    free(cg);
    free(want);
  }
  free(pc), free(sg), free(sc), free(p0);
  run_close(&gpu);
  run_close(&cpu);
  return pg;
}

START_TEST(test_gpu_optim_matches_cpu) {
  const ddp_dtype_t cdts[] = {DDP_DTYPE_F32, DDP_DTYPE_BF16, DDP_DTYPE_F16};
  for (int mode = 0; mode < N_MODE; ++mode)
    for (int k = 0; k < N_KIND; ++k)
      for (int d = 0; d < 3; ++d) free(compare_case(k, cdts[d], mode));
}
END_TEST

/* An inf gradient makes the norm infinite: with skip_nonfinite the step
 * changes nothing, decided on the device. */
START_TEST(test_gpu_optim_skip_on_inf) {
  for (int k = 0; k < N_KIND; ++k) {
    const ddp_optim_config_t cfg = config(k);
    float *p0 = random_vector(g_n, 0.5f), *g = random_vector(g_n, 1.0f);
    run_t r = run_open(twin_gpu, &cfg, DDP_DTYPE_BF16, p0);
    twin_upload(twin_gpu, r.g, g, g_n * sizeof(float));
    ck_assert_int_eq(ddp_optim_grad_sumsq(twin_gpu, r.sumsq, r.g, g_n, 1.0f, NULL), DDP_OK);
    step(&r, &cfg, DDP_DTYPE_BF16, 1, 1); /* a clean step first */
    float *p1 = fetch(twin_gpu, r.p, g_n * 4), *s1 = fetch(twin_gpu, r.state, 2 * g_n * 4);
    void *c1 = fetch(twin_gpu, r.copy, g_n * 2);
    g[12345] = INFINITY;
    twin_upload(twin_gpu, r.g, g, g_n * sizeof(float));
    ck_assert_int_eq(ddp_optim_grad_sumsq(twin_gpu, r.sumsq, r.g, g_n, 1.0f, NULL), DDP_OK);
    step(&r, &cfg, DDP_DTYPE_BF16, 2, 1);
    float *p2 = fetch(twin_gpu, r.p, g_n * 4), *s2 = fetch(twin_gpu, r.state, 2 * g_n * 4);
    void *c2 = fetch(twin_gpu, r.copy, g_n * 2);
    ck_assert_msg(memcmp(p1, p2, g_n * 4) == 0 && memcmp(s1, s2, 2 * g_n * 4) == 0 &&
                      memcmp(c1, c2, g_n * 2) == 0,
                  "%s: a skipped step changed something", ddp_optim_kind_name(cfg.kind));
    int64_t skipped = -1; /* counted on the device, once per skipped step */
    ck_assert_int_eq(ddp_optim_plan_skipped_steps(r.plan, &skipped), DDP_OK);
    ck_assert_int_eq(skipped, 1);
    free(p0), free(g), free(p1), free(s1), free(c1), free(p2), free(s2), free(c2);
    run_close(&r);
  }
}
END_TEST

START_TEST(test_gpu_optim_two_runs_bit_identical) {
  for (int k = 0; k < N_KIND; ++k) {
    const ddp_optim_config_t cfg = config(k);
    float *p0 = random_vector(g_n, 0.5f), *g = random_vector(g_n, 1.0f);
    float *out[2];
    for (int rep = 0; rep < 2; ++rep) {
      run_t r = run_open(twin_gpu, &cfg, DDP_DTYPE_F16, p0);
      for (int64_t t = 1; t <= 3; ++t) {
        twin_upload(twin_gpu, r.g, g, g_n * sizeof(float));
        ck_assert_int_eq(ddp_optim_grad_sumsq(twin_gpu, r.sumsq, r.g, g_n, 0.5f, NULL), DDP_OK);
        step(&r, &cfg, DDP_DTYPE_F16, t, 1);
      }
      out[rep] = fetch(twin_gpu, r.p, g_n * 4);
      run_close(&r);
    }
    ck_assert_msg(memcmp(out[0], out[1], g_n * 4) == 0, "%s: two runs differ",
                  ddp_optim_kind_name(cfg.kind));
    free(out[0]), free(out[1]), free(p0), free(g);
  }
}
END_TEST

/* The norm alone over sizes that take one partial block, a few, and the
 * clamp at the kernel's block limit (n > 1024 * 4096): within 1e-6 of the
 * CPU, overwriting a NaN-poisoned result, and the same bits twice. */
START_TEST(test_gpu_optim_sumsq_sizes) {
  const size_t sizes[] = {1, 7, 4095, 4097, 100003, 5000011};
  const float scales[] = {1.0f, 0.75f};
  for (size_t z = 0; z < sizeof sizes / sizeof *sizes; ++z) {
    const size_t n = sizes[z];
    float *g = random_vector(n, 3.0f);
    float *gg = twin_dev_alloc(twin_gpu, n * sizeof(float)), *gs = twin_dev_alloc(twin_gpu, 4);
    float *cg = twin_dev_alloc(twin_cpu, n * sizeof(float)), *cs = twin_dev_alloc(twin_cpu, 4);
    twin_upload(twin_gpu, gg, g, n * sizeof(float));
    twin_upload(twin_cpu, cg, g, n * sizeof(float));
    for (int k = 0; k < 2; ++k) {
      float got[2], want;
      for (int rep = 0; rep < 2; ++rep) {
        ck_assert_int_eq(twin_gpu->ops->fill(twin_gpu, gs, DDP_DTYPE_F32, NAN, 1, NULL), DDP_OK);
        ck_assert_int_eq(ddp_optim_grad_sumsq(twin_gpu, gs, gg, n, scales[k], NULL), DDP_OK);
        twin_download(twin_gpu, &got[rep], gs, sizeof(float));
      }
      ck_assert_int_eq(ddp_optim_grad_sumsq(twin_cpu, cs, cg, n, scales[k], NULL), DDP_OK);
      twin_download(twin_cpu, &want, cs, sizeof want);
      ck_assert_msg(isfinite(got[0]) && fabs((double)got[0] - want) <= 1e-6 * want,
                    "sumsq n=%zu scale %g: gpu %.9g cpu %.9g", n, (double)scales[k], (double)got[0],
                    (double)want);
      ck_assert_msg(memcmp(&got[0], &got[1], sizeof(float)) == 0, "sumsq n=%zu: two runs differ",
                    n);
    }
    ddp_backend_free(twin_gpu, gg), ddp_backend_free(twin_gpu, gs);
    ddp_backend_free(twin_cpu, cg), ddp_backend_free(twin_cpu, cs);
    free(g);
  }
}
END_TEST

/* ---- LAMB over a shard (ddp_optim_lamb_*) ---------------------------------- */

/* The test layout cut into pieces as --zero 1 cuts tensors at bucket and
 * block boundaries: the 40000-element segment into three (the middle one
 * longer than a chunk), two small ones in two; one rank, so the groups are
 * the pieces of the same segment. */
enum { MAX_PIECES = N_SEG + 8 };
static ddp_param_t g_pieces[MAX_PIECES];
static int g_piece_seg[MAX_PIECES], g_n_pieces;
static int32_t g_begin[MAX_PIECES + 1], g_index[MAX_PIECES * 4];

static void make_pieces(void) {
  g_n_pieces = 0;
  for (int k = 0; k < N_SEG; ++k) {
    size_t cuts[2] = {0, 0};
    int nc = 0;
    if (k == 7) cuts[0] = 10000, cuts[1] = 30000, nc = 2;
    if (k == 3 || k == 12) cuts[0] = g_segs[k].count / 3, nc = 1;
    size_t at = 0;
    for (int c = 0; c <= nc; ++c) {
      const size_t end = c < nc ? cuts[c] : g_segs[k].count;
      g_piece_seg[g_n_pieces] = k;
      g_pieces[g_n_pieces++] = (ddp_param_t){
          .offset = g_segs[k].offset + at, .count = end - at, .decay = g_segs[k].decay};
      at = end;
    }
  }
  int n = 0;
  for (int j = 0; j < g_n_pieces; ++j) {
    g_begin[j] = n;
    for (int i = 0; i < g_n_pieces; ++i)
      if (g_piece_seg[i] == g_piece_seg[j]) g_index[n++] = i;
  }
  g_begin[g_n_pieces] = n;
}

static ddp_optim_plan_t *lamb_plan(ddp_backend_t *be, const ddp_optim_config_t *cfg) {
  ddp_optim_plan_t *plan = NULL;
  ck_assert_int_eq(ddp_optim_plan_create(be, cfg, g_pieces, g_n_pieces, g_n, &plan), DDP_OK);
  const ddp_optim_lamb_groups_t gr = {
      .n_ranks = 1, .rank = 0, .stride = g_n_pieces, .begin = g_begin, .index = g_index};
  ck_assert_int_eq(ddp_optim_plan_set_lamb_groups(plan, &gr), DDP_OK);
  return plan;
}

/* The ratios from the same exchanged sums: the same bits on both backends
 * (the same doubles added in the same order, one correctly rounded sqrt
 * and division each), zero norms (trust 1) included. Three ranks' rows. */
START_TEST(test_gpu_optim_lamb_ratios_bit_identical) {
  const ddp_optim_config_t cfg = config(3);
  const int W = 3, S = N_SEG;
  ddp_optim_plan_t *plans[2];
  int32_t begin[N_SEG + 1], index[3 * N_SEG];
  for (int j = 0; j < S; ++j) {
    begin[j] = 3 * j;
    for (int q = 0; q < W; ++q) index[3 * j + q] = q * S + j; /* ascending */
  }
  begin[S] = 3 * S;
  const ddp_optim_lamb_groups_t gr = {
      .n_ranks = W, .rank = 1, .stride = S, .begin = begin, .index = index};
  const size_t nd = 2 * (size_t)W * S;
  float *x = random_vector(nd, 1.0f);
  double *all = malloc(nd * sizeof *all);
  for (size_t i = 0; i < nd; ++i) all[i] = (double)x[i] * x[i] * 1e3 + 1e-3 * fabs((double)x[i]);
  for (int q = 0; q < W; ++q) all[2 * ((size_t)q * S + 5)] = 0.0; /* ||p|| = 0: trust 1 */
  float got[2][N_SEG];
  ddp_backend_t *bes[2] = {twin_cpu, twin_gpu};
  for (int b = 0; b < 2; ++b) {
    ck_assert_int_eq(ddp_optim_plan_create(bes[b], &cfg, g_segs, N_SEG, g_n, &plans[b]), DDP_OK);
    ck_assert_int_eq(ddp_optim_plan_set_lamb_groups(plans[b], &gr), DDP_OK);
    double *dall = twin_dev_alloc(bes[b], nd * sizeof(double));
    float *dr = twin_dev_alloc(bes[b], S * sizeof(float));
    twin_upload(bes[b], dall, all, nd * sizeof(double));
    ck_assert_int_eq(ddp_optim_lamb_ratios(bes[b], plans[b], 0.01f, dall, dr, NULL), DDP_OK);
    twin_download(bes[b], got[b], dr, S * sizeof(float));
    ddp_backend_free(bes[b], dall), ddp_backend_free(bes[b], dr);
    ddp_optim_plan_destroy(plans[b]);
  }
  ck_assert_float_eq(got[1][5], 0.01f);
  ck_assert_msg(memcmp(got[0], got[1], sizeof got[0]) == 0, "ratios differ between backends");
  free(x), free(all);
}
END_TEST

/* The three parts on pieces, five steps with a bf16 copy, the third
 * skipped (an inf norm), with the CPU's norm on both sides: weights and
 * state within 1e-6 of the CPU (the per-piece norms are summed in another
 * order, as in the unsharded step), the copy the GPU's weights rounded, the
 * skip counted once and changing nothing. */
START_TEST(test_gpu_optim_lamb_parts_match_cpu) {
  const ddp_optim_config_t cfg = config(3);
  make_pieces();
  float *p0 = random_vector(g_n, 0.5f);
  run_t r[2] = {run_open(twin_cpu, &cfg, DDP_DTYPE_BF16, p0),
                run_open(twin_gpu, &cfg, DDP_DTYPE_BF16, p0)};
  ddp_optim_plan_t *plan[2];
  double *sums[2];
  float *ratio[2];
  float *before = NULL;
  for (int b = 0; b < 2; ++b) {
    plan[b] = lamb_plan(r[b].be, &cfg);
    sums[b] = twin_dev_alloc(r[b].be, 2 * (size_t)g_n_pieces * sizeof(double));
    ratio[b] = twin_dev_alloc(r[b].be, (size_t)g_n_pieces * sizeof(float));
  }
  for (int64_t t = 1; t <= 5; ++t) {
    float *g = random_vector(g_n, 1.0f), sumsq;
    twin_upload(twin_cpu, r[0].g, g, g_n * sizeof(float));
    twin_upload(twin_gpu, r[1].g, g, g_n * sizeof(float));
    ck_assert_int_eq(ddp_optim_grad_sumsq(twin_cpu, r[0].sumsq, r[0].g, g_n, 0.5f, NULL), DDP_OK);
    twin_download(twin_cpu, &sumsq, r[0].sumsq, sizeof sumsq);
    if (t == 3) {
      sumsq = INFINITY;
      twin_upload(twin_cpu, r[0].sumsq, &sumsq, sizeof sumsq);
      before = fetch(twin_gpu, r[1].p, g_n * 4);
    }
    twin_upload(twin_gpu, r[1].sumsq, &sumsq, sizeof sumsq);
    for (int b = 0; b < 2; ++b) {
      const ddp_optim_step_args_t a = {.cfg = &cfg,
                                       .params = r[b].p,
                                       .grads = r[b].g,
                                       .state = r[b].state,
                                       .tensors = g_pieces,
                                       .n_tensors = g_n_pieces,
                                       .n = g_n,
                                       .t = t,
                                       .lr = 0.01f,
                                       .grad_scale = 0.5f,
                                       .grad_sumsq = r[b].sumsq,
                                       .compute_params = r[b].copy,
                                       .compute_dtype = DDP_DTYPE_BF16,
                                       .skip_nonfinite = 1};
      ck_assert_int_eq(ddp_optim_lamb_sums(r[b].be, plan[b], &a, sums[b], NULL), DDP_OK);
      ck_assert_int_eq(ddp_optim_lamb_ratios(r[b].be, plan[b], a.lr, sums[b], ratio[b], NULL),
                       DDP_OK);
      ck_assert_int_eq(ddp_optim_lamb_apply(r[b].be, plan[b], &a, ratio[b], NULL), DDP_OK);
    }
    if (t == 3) {
      float *after = fetch(twin_gpu, r[1].p, g_n * 4);
      ck_assert_msg(memcmp(before, after, g_n * 4) == 0, "a skipped step changed the weights");
      free(before), free(after);
    }
    free(g);
  }
  float *pc = fetch(twin_cpu, r[0].p, g_n * 4), *pg = fetch(twin_gpu, r[1].p, g_n * 4);
  float *sc = fetch(twin_cpu, r[0].state, 2 * g_n * 4),
        *sg = fetch(twin_gpu, r[1].state, 2 * g_n * 4);
  ck_assert_msg(normwise(pg, pc, g_n) <= 1e-6, "weights: error %.3g", normwise(pg, pc, g_n));
  ck_assert_msg(normwise(sg, sc, 2 * g_n) <= 1e-6, "state: error %.3g", normwise(sg, sc, 2 * g_n));
  uint16_t *copy = fetch(twin_gpu, r[1].copy, g_n * 2), *want = malloc(g_n * 2);
  ck_assert_int_eq(ddp_convert_host(want, DDP_DTYPE_BF16, pg, DDP_DTYPE_F32, g_n), DDP_OK);
  ck_assert_msg(memcmp(copy, want, g_n * 2) == 0, "the compute copy is not the weights rounded");
  int64_t skipped = -1;
  ck_assert_int_eq(ddp_optim_plan_skipped_steps(plan[1], &skipped), DDP_OK);
  ck_assert_int_eq(skipped, 1);
  for (int b = 0; b < 2; ++b) {
    ddp_optim_plan_destroy(plan[b]);
    ddp_backend_free(r[b].be, sums[b]), ddp_backend_free(r[b].be, ratio[b]);
    run_close(&r[b]);
  }
  free(p0), free(pc), free(pg), free(sc), free(sg), free(copy), free(want);
}
END_TEST

int main(void) {
  twin_start(); /* exits 77 without a usable CUDA device */
  make_segments();
  Suite *s = suite_create("gpu_optim");
  TCase *tc = tcase_create("twin");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_gpu_optim_sumsq_sizes);
  tcase_add_test(tc, test_gpu_optim_matches_cpu);
  tcase_add_test(tc, test_gpu_optim_skip_on_inf);
  tcase_add_test(tc, test_gpu_optim_two_runs_bit_identical);
  tcase_add_test(tc, test_gpu_optim_lamb_ratios_bit_identical);
  tcase_add_test(tc, test_gpu_optim_lamb_parts_match_cpu);
  suite_add_tcase(s, tc);
  return twin_run_suite(s);
}
