/* GPU suite for the CUDA embedding, element-wise and cross-entropy ops
 * (src/backend/cuda/cuda_nn_{embed,pointwise,xent}.c, kernels/embed.cu,
 * pointwise.cu, xent.cu) against their CPU twins in ddp_nn_cpu_ops, under
 * fp32, bf16 and fp16, through the fixture in tests/gpu_twin.h (fresh
 * random inputs, NaN-poisoned outputs, normwise comparison).
 *
 * Thresholds, per op:
 *   - embed_fwd, embed_bwd, add: 0 (bit-identical). The GPU kernels perform
 *     the same fp32 additions in the same order as the twin (embed_bwd sums
 *     each token's positions in (t, b) order, dwpe over b ascending) on the
 *     same exactly widened inputs, and round each output once.
 *   - gelu_fwd, gelu_bwd: twin_tol() (expf on the GPU and the CPU's vector
 *     exp differ by a few ulps).
 *   - xent losses and loss_sum (fp32 under every dt): 2e-5 normwise / 1e-5
 *     relative (fp32 exp sums in a different order, the CPU's partly in
 *     fp64); dlogits: twin_tol(dt). The same with label smoothing (0.1,
 *     0.5): the row's mean logit is a double sum on both sides.
 * Also checked: embed_bwd twice from the same state gives bit-identical
 * gradients; aliasing (gelu_bwd dinp == dout, add out == a and out == b,
 * xent dlogits == logits); the unaligned scalar paths; the GPU policy for
 * inputs it cannot reject without a host sync (negative tokens, targets
 * outside [-1, V): NaN, never an out-of-bounds read); host-side argument
 * checks (DDP_ERR_INVALID_ARG).
 *
 * Exit 77 (SKIP) without a usable CUDA device; tests run in process
 * (CK_NOFORK). */
#include <config.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "check_util.h"
#include "ddptrain/nn.h"
#include "gpu_twin.h"

static const ddp_nn_ops_t *cpu_nn = &ddp_nn_cpu_ops;

/* ---- helpers --------------------------------------------------------------- */

/* An int32 array uploaded to both backends (the host copy stays with the
 * caller). */
typedef struct ids {
  int32_t *cpu, *gpu;
} ids_t;

static ids_t ids_upload(const int32_t *host, size_t n) {
  ids_t d = {twin_dev_alloc(twin_cpu, n * sizeof(int32_t)),
             twin_dev_alloc(twin_gpu, n * sizeof(int32_t))};
  twin_upload(twin_cpu, d.cpu, host, n * sizeof(int32_t));
  twin_upload(twin_gpu, d.gpu, host, n * sizeof(int32_t));
  return d;
}

static void ids_free(ids_t *d) {
  ddp_backend_free(twin_cpu, d->cpu);
  ddp_backend_free(twin_gpu, d->gpu);
}

/* n random ids in [0, bound); every third one is drawn from [0, few) so
 * that ids repeat (runs of equal tokens longer than one). */
static int32_t *random_ids(size_t n, int bound, int few) {
  if (few > bound) few = bound;
  int32_t *v = malloc(n * sizeof *v);
  ck_assert_ptr_nonnull(v);
  for (size_t i = 0; i < n; ++i)
    v[i] = (int32_t)ddp_rng_below(&twin_rng, twin_off++, (uint64_t)(i % 3 == 0 ? few : bound));
  return v;
}

/* Reserves the CPU workspace for dt and the GPU scratch for `gpu_bytes`. */
static void begin_dt(ddp_dtype_t dt, int64_t N, int C, int V, size_t gpu_bytes) {
  ck_assert_int_eq(cpu_nn->reserve(twin_cpu, dt, N, C, V), DDP_OK);
  ck_assert_int_eq(ddp_cuda_scratch_reserve(twin_gpu, gpu_bytes ? gpu_bytes : 1), DDP_OK);
}

static void end_dt(void) {
  cpu_nn->release(twin_cpu);
  ddp_cuda_scratch_release(twin_gpu);
}

static void sync_both(void) {
  ck_assert_int_eq(ddp_backend_sync(twin_cpu, NULL), DDP_OK);
  ck_assert_int_eq(ddp_backend_sync(twin_gpu, NULL), DDP_OK);
}

static float fetch1(ddp_backend_t *be, const float *p) {
  float v;
  twin_download(be, &v, p, sizeof v);
  return v;
}

/* ---- embedding ---------------------------------------------------------------- */

/* out = wte[tok] + wpe[t] on both; exact. */
static void embed_fwd_case(int B, int T, int C, int V) {
  const size_t n = (size_t)B * T;
  for (size_t d = 0; d < 3; ++d) {
    const ddp_dtype_t dt = twin_dtypes[d];
    begin_dt(dt, (int64_t)n, C, V, 0);
    int32_t *tok = random_ids(n, V, 5);
    ids_t ti = ids_upload(tok, n);
    twin_t wte = twin_input(dt, (size_t)V * C, 0.0f, 1.0f);
    twin_t wpe = twin_input(dt, (size_t)(T + 3) * C, 0.0f, 0.5f);
    twin_t out = twin_output(dt, n * C);
    ck_assert_int_eq(
        cpu_nn->embed_fwd(twin_cpu, dt, out.cpu, ti.cpu, wte.cpu, wpe.cpu, B, T, C, NULL), DDP_OK);
    ck_assert_int_eq(
        ddp_cuda_nn_embed_fwd(twin_gpu, dt, out.gpu, ti.gpu, wte.gpu, wpe.gpu, B, T, C, NULL),
        DDP_OK);
    sync_both();
    twin_expect(&out, 0.0, "embed_fwd out");
    twin_free(&out), twin_free(&wpe), twin_free(&wte);
    ids_free(&ti);
    free(tok);
    end_dt();
  }
}

START_TEST(test_gpu_embed_fwd_odd_sizes) {
  embed_fwd_case(3, 37, 67, 131); /* C odd: the scalar path */
  embed_fwd_case(2, 19, 64, 50);  /* C % 4 == 0: the vector path */
  embed_fwd_case(1, 1, 1, 1);
}
END_TEST

/* dwte (random start, always accumulated), dwpe with T + 2 rows (poisoned
 * under accumulate 0, random under 1); exact, and a second GPU run from the
 * same start gives the same bits. */
static void embed_bwd_case(int B, int T, int C, int V, int few) {
  const size_t n = (size_t)B * T;
  for (size_t d = 0; d < 3; ++d)
    for (int acc = 0; acc <= 1; ++acc) {
      const ddp_dtype_t dt = twin_dtypes[d];
      begin_dt(dt, (int64_t)n, C, V, ddp_cuda_embed_scratch_bytes(dt, (int64_t)n, C, V));
      int32_t *tok = random_ids(n, few > 0 ? V : 1, few > 0 ? few : 1);
      ids_t ti = ids_upload(tok, n);
      twin_t dout = twin_input(dt, n * C, 0.0f, 1.0f);
      twin_t dwte = twin_input(DDP_DTYPE_F32, (size_t)V * C, 0.0f, 0.25f);
      const size_t pe_n = (size_t)(T + 2) * C;
      twin_t dwpe =
          acc ? twin_input(DDP_DTYPE_F32, pe_n, 0.0f, 0.25f) : twin_output(DDP_DTYPE_F32, pe_n);
      float *wte0 = twin_fetch(&dwte, twin_gpu), *wpe0 = twin_fetch(&dwpe, twin_gpu);

      ck_assert_int_eq(
          cpu_nn->embed_bwd(twin_cpu, dt, dwte.cpu, dwpe.cpu, dout.cpu, ti.cpu, B, T, C, acc, NULL),
          DDP_OK);
      ck_assert_int_eq(ddp_cuda_nn_embed_bwd(twin_gpu, dt, dwte.gpu, dwpe.gpu, dout.gpu, ti.gpu, B,
                                             T, C, acc, NULL),
                       DDP_OK);
      sync_both();
      twin_expect(&dwte, 0.0, acc ? "embed_bwd dwte (accumulate 1)" : "embed_bwd dwte");
      twin_expect(&dwpe, 0.0, acc ? "embed_bwd dwpe (accumulate 1)" : "embed_bwd dwpe");

      /* Determinism: reset the GPU gradients to the same start and rerun. */
      float *wte1 = twin_fetch(&dwte, twin_gpu), *wpe1 = twin_fetch(&dwpe, twin_gpu);
      twin_upload(twin_gpu, dwte.gpu, wte0, dwte.n * sizeof(float));
      twin_upload(twin_gpu, dwpe.gpu, wpe0, dwpe.n * sizeof(float));
      ck_assert_int_eq(ddp_cuda_nn_embed_bwd(twin_gpu, dt, dwte.gpu, dwpe.gpu, dout.gpu, ti.gpu, B,
                                             T, C, acc, NULL),
                       DDP_OK);
      float *wte2 = twin_fetch(&dwte, twin_gpu), *wpe2 = twin_fetch(&dwpe, twin_gpu);
      ck_assert_msg(memcmp(wte1, wte2, dwte.n * sizeof(float)) == 0,
                    "embed_bwd (%s): dwte differs between two runs", ddp_dtype_name(dt));
      ck_assert_msg(memcmp(wpe1, wpe2, dwpe.n * sizeof(float)) == 0,
                    "embed_bwd (%s): dwpe differs between two runs", ddp_dtype_name(dt));

      free(wte0), free(wpe0), free(wte1), free(wpe1), free(wte2), free(wpe2);
      twin_free(&dwpe), twin_free(&dwte), twin_free(&dout);
      ids_free(&ti);
      free(tok);
      end_dt();
    }
}

START_TEST(test_gpu_embed_bwd_repeated_tokens) {
  embed_bwd_case(3, 37, 67, 131, 7); /* runs of up to ~20 positions */
  embed_bwd_case(4, 29, 200, 97, 3); /* C > 128: two column blocks per run */
  embed_bwd_case(2, 50, 33, 11, 0);  /* every token the same: one run of 100 */
  embed_bwd_case(1, 1, 5, 3, 2);
}
END_TEST

/* A negative token (the one kind of invalid token the device can see) gives
 * a NaN output row and NaN dwpe[t], and nothing else changes. */
START_TEST(test_gpu_embed_negative_token_is_nan) {
  const int B = 2, T = 9, C = 13, V = 17;
  const size_t n = (size_t)B * T;
  const ddp_dtype_t dt = DDP_DTYPE_F32;
  begin_dt(dt, (int64_t)n, C, V, ddp_cuda_embed_scratch_bytes(dt, (int64_t)n, C, V));
  int32_t *tok = random_ids(n, V, 4);
  tok[1 * T + 5] = -3;
  ids_t ti = ids_upload(tok, n);
  twin_t wte = twin_input(dt, (size_t)V * C, 0.0f, 1.0f);
  twin_t wpe = twin_input(dt, (size_t)T * C, 0.0f, 1.0f);
  twin_t out = twin_output(dt, n * C);
  ck_assert_int_eq(
      ddp_cuda_nn_embed_fwd(twin_gpu, dt, out.gpu, ti.gpu, wte.gpu, wpe.gpu, B, T, C, NULL),
      DDP_OK);
  float *o = twin_fetch(&out, twin_gpu);
  for (size_t r = 0; r < n; ++r)
    for (int c = 0; c < C; ++c) {
      const float v = o[r * C + c];
      if (r == (size_t)(1 * T + 5))
        expect(isnan(v));
      else
        expect(v == wte.host[(size_t)tok[r] * C + c] + wpe.host[(r % T) * C + c]);
    }
  free(o);

  twin_t dwte = twin_input(DDP_DTYPE_F32, (size_t)V * C, 0.0f, 1.0f);
  twin_t dwpe = twin_output(DDP_DTYPE_F32, (size_t)T * C);
  twin_t dout = twin_input(dt, n * C, 0.0f, 1.0f); /* finite: only the token makes NaN */
  ck_assert_int_eq(
      ddp_cuda_nn_embed_bwd(twin_gpu, dt, dwte.gpu, dwpe.gpu, dout.gpu, ti.gpu, B, T, C, 0, NULL),
      DDP_OK);
  float *pe = twin_fetch(&dwpe, twin_gpu), *te = twin_fetch(&dwte, twin_gpu);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) expect((t == 5) == isnan(pe[(size_t)t * C + c]));
  for (size_t i = 0; i < dwte.n; ++i) expect(isfinite(te[i]));
  free(pe), free(te);
  twin_free(&dout), twin_free(&dwpe), twin_free(&dwte), twin_free(&out), twin_free(&wpe),
      twin_free(&wte);
  ids_free(&ti);
  free(tok);
  end_dt();
}
END_TEST

START_TEST(test_gpu_embed_rejects_bad_arguments) {
  const int B = 2, T = 3, C = 4, V = 5;
  begin_dt(DDP_DTYPE_F32, B * T, C, V, 1); /* 1 byte: less than embed_bwd needs */
  float *buf = twin_dev_alloc(twin_gpu, 4096);
  int32_t *tok = twin_dev_alloc(twin_gpu, 64);
  ck_assert_int_eq(
      ddp_cuda_nn_embed_fwd(twin_gpu, DDP_DTYPE_F32, buf, tok, buf, buf, 0, T, C, NULL),
      DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(
      ddp_cuda_nn_embed_fwd(twin_gpu, DDP_DTYPE_F32, NULL, tok, buf, buf, B, T, C, NULL),
      DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(
      ddp_cuda_nn_embed_fwd(twin_gpu, DDP_DTYPE_I32, buf, tok, buf, buf, B, T, C, NULL),
      DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(
      ddp_cuda_nn_embed_bwd(twin_gpu, DDP_DTYPE_F32, buf, buf, buf, tok, B, 0, C, 0, NULL),
      DDP_ERR_INVALID_ARG);
  /* too little scratch: reserve() was not told about these shapes */
  ck_assert_int_eq(
      ddp_cuda_nn_embed_bwd(twin_gpu, DDP_DTYPE_F32, buf, buf + 512, buf, tok, B, T, C, 0, NULL),
      DDP_ERR_INVALID_ARG);
  ddp_backend_free(twin_gpu, tok);
  ddp_backend_free(twin_gpu, buf);
  end_dt();
}
END_TEST

/* ---- element-wise ------------------------------------------------------------- */

typedef enum { EW_GELU_FWD, EW_GELU_BWD, EW_ADD } ew_op_t;

/* Runs op on both backends. `off` elements into each buffer (1: misaligned
 * for the vector path); alias: 0 separate output, 1 output == first input
 * of the op's aliasing rule (gelu_bwd: dout; add: a), 2 output == b. */
static void ew_case(ew_op_t op, size_t n, size_t off, int alias) {
  static const char *names[] = {"gelu_fwd", "gelu_bwd", "add"};
  for (size_t d = 0; d < 3; ++d) {
    const ddp_dtype_t dt = twin_dtypes[d];
    const size_t esz = ddp_dtype_size(dt);
    twin_t x = twin_input(dt, n + off, 0.0f, 2.0f);
    twin_t y = twin_input(dt, n + off, 0.5f, 1.5f);
    twin_t out = twin_output(dt, n + off);
    twin_t *res = alias == 0 ? &out : op == EW_GELU_BWD ? &y : alias == 1 ? &x : &y;
    void *oc = (char *)res->cpu + off * esz, *og = (char *)res->gpu + off * esz;
    void *xc = (char *)x.cpu + off * esz, *xg = (char *)x.gpu + off * esz;
    void *yc = (char *)y.cpu + off * esz, *yg = (char *)y.gpu + off * esz;
    ddp_status_t sc = DDP_ERR_INTERNAL, sg = DDP_ERR_INTERNAL;
    switch (op) {
      case EW_GELU_FWD:
        sc = cpu_nn->gelu_fwd(twin_cpu, dt, oc, xc, n, NULL);
        sg = ddp_cuda_nn_gelu_fwd(twin_gpu, dt, og, xg, n, NULL);
        break;
      case EW_GELU_BWD: /* inp = x, dout = y */
        sc = cpu_nn->gelu_bwd(twin_cpu, dt, oc, xc, yc, n, NULL);
        sg = ddp_cuda_nn_gelu_bwd(twin_gpu, dt, og, xg, yg, n, NULL);
        break;
      case EW_ADD:
        sc = cpu_nn->add(twin_cpu, dt, oc, xc, yc, n, NULL);
        sg = ddp_cuda_nn_add(twin_gpu, dt, og, xg, yg, n, NULL);
        break;
    }
    ck_assert_int_eq(sc, DDP_OK);
    ck_assert_int_eq(sg, DDP_OK);
    sync_both();
    char what[96];
    snprintf(what, sizeof what, "%s n=%zu off=%zu alias=%d", names[op], n, off, alias);
    twin_expect(res, op == EW_ADD ? 0.0 : twin_tol(dt), what);
    twin_free(&out), twin_free(&y), twin_free(&x);
  }
}

START_TEST(test_gpu_gelu_fwd) {
  const size_t sizes[] = {1, 3, 5, 8, 3 * 37 * 67, 4 * 37 * 268 + 3};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
    for (size_t off = 0; off <= 1; ++off) ew_case(EW_GELU_FWD, sizes[i], off, 0);
}
END_TEST

START_TEST(test_gpu_gelu_bwd_and_in_place) {
  const size_t sizes[] = {1, 7, 3 * 37 * 67, 4 * 37 * 268 + 3};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
    for (size_t off = 0; off <= 1; ++off)
      for (int alias = 0; alias <= 1; ++alias) ew_case(EW_GELU_BWD, sizes[i], off, alias);
}
END_TEST

START_TEST(test_gpu_add_and_in_place) {
  const size_t sizes[] = {1, 6, 3 * 37 * 67, 4 * 37 * 268 + 3};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
    for (size_t off = 0; off <= 1; ++off)
      for (int alias = 0; alias <= 2; ++alias) ew_case(EW_ADD, sizes[i], off, alias);
}
END_TEST

/* n == 0 is a no-op that accepts NULL; bad dtype, NULL and misaligned
 * pointers are rejected. */
START_TEST(test_gpu_pointwise_rejects_bad_arguments) {
  ck_assert_int_eq(ddp_cuda_nn_add(twin_gpu, DDP_DTYPE_F32, NULL, NULL, NULL, 0, NULL), DDP_OK);
  char *buf = twin_dev_alloc(twin_gpu, 256);
  ck_assert_int_eq(ddp_cuda_nn_add(twin_gpu, DDP_DTYPE_I32, buf, buf, buf, 4, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_gelu_fwd(twin_gpu, DDP_DTYPE_F32, NULL, buf, 4, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_gelu_bwd(twin_gpu, DDP_DTYPE_BF16, buf, buf + 1, buf, 4, NULL),
                   DDP_ERR_INVALID_ARG);
  ddp_backend_free(twin_gpu, buf);
}
END_TEST

/* ---- cross-entropy ------------------------------------------------------------ */

/* alias: dlogits == logits; grad 0: dlogits NULL; eps: label smoothing.
 * Every fifth target is -1. */
static void xent_case(int N, int V, int Vp, int grad, int alias, float eps) {
  for (size_t d = 0; d < 3; ++d) {
    const ddp_dtype_t dt = twin_dtypes[d];
    begin_dt(dt, N, 8, Vp, ddp_cuda_xent_scratch_bytes(dt, N, 8, Vp));
    int32_t *tgt = random_ids((size_t)N, V, 3);
    for (int r = 0; r < N; r += 5) tgt[r] = -1;
    ids_t ti = ids_upload(tgt, (size_t)N);
    twin_t logits = twin_input(dt, (size_t)N * Vp, 0.0f, 2.0f);
    twin_t dl = twin_output(dt, (size_t)N * Vp);
    twin_t losses = twin_output(DDP_DTYPE_F32, (size_t)N);
    twin_t sum = twin_input(DDP_DTYPE_F32, 1, 3.0f, 1.0f);
    const float dloss = 1.0f / (float)N;
    twin_t *g = alias ? &logits : &dl;
    ck_assert_int_eq(cpu_nn->xent_fused(twin_cpu, dt, losses.cpu, sum.cpu, grad ? g->cpu : NULL,
                                        logits.cpu, ti.cpu, dloss, eps, N, V, Vp, NULL),
                     DDP_OK);
    ck_assert_int_eq(ddp_cuda_nn_xent_fused(twin_gpu, dt, losses.gpu, sum.gpu, grad ? g->gpu : NULL,
                                            logits.gpu, ti.gpu, dloss, eps, N, V, Vp, NULL),
                     DDP_OK);
    sync_both();
    char what[112];
    snprintf(what, sizeof what, "xent N=%d V=%d Vp=%d grad=%d alias=%d smoothing=%g", N, V, Vp,
             grad, alias, (double)eps);
    twin_expect(&losses, 2e-5, what);
    const float sc = fetch1(twin_cpu, sum.cpu), sg = fetch1(twin_gpu, sum.gpu);
    ck_assert_msg(fabsf(sc - sg) <= 1e-5f * fabsf(sc), "%s (%s): loss_sum gpu %.9g cpu %.9g", what,
                  ddp_dtype_name(dt), (double)sg, (double)sc);
    if (grad) twin_expect(g, twin_tol(dt), what);
    twin_free(&sum), twin_free(&losses), twin_free(&dl), twin_free(&logits);
    ids_free(&ti);
    free(tgt);
    end_dt();
  }
}

START_TEST(test_gpu_xent_padded_vocab) {
  xent_case(3 * 37, 131, 256, 0, 0, 0.0f);
  xent_case(3 * 37, 131, 256, 1, 0, 0.0f);
  xent_case(3 * 37, 131, 256, 1, 1, 0.0f);
  xent_case(7, 1, 1, 1, 0, 0.0f);
}
END_TEST

START_TEST(test_gpu_xent_large_odd_vocab) {
  xent_case(7, 50257, 50257, 1, 0, 0.0f);
  xent_case(6, 50257, 50304, 1, 1, 0.0f);
}
END_TEST

/* Label smoothing: losses and the gradient's uniform part against the CPU
 * twin, with padding, aliasing, a one-class row and a GPT-sized vocabulary. */
START_TEST(test_gpu_xent_label_smoothing) {
  xent_case(3 * 37, 131, 256, 0, 0, 0.1f);
  xent_case(3 * 37, 131, 256, 1, 0, 0.1f);
  xent_case(3 * 37, 131, 256, 1, 1, 0.5f);
  xent_case(7, 1, 1, 1, 0, 0.1f);
  xent_case(6, 50257, 50304, 1, 1, 0.1f);
  xent_case(64, 10, 10, 1, 0, 0.5f);
}
END_TEST

/* A target outside [-1, V) cannot be rejected on the device: its row's loss
 * is NaN (so is the sum), its gradient row zero, other rows unaffected. */
START_TEST(test_gpu_xent_invalid_target_is_nan) {
  const int N = 4, V = 10, Vp = 12;
  const ddp_dtype_t dt = DDP_DTYPE_F32;
  int32_t tgt[4] = {3, 10, -2, 0};
  ids_t ti = ids_upload(tgt, 4);
  twin_t logits = twin_input(dt, (size_t)N * Vp, 0.0f, 1.0f);
  twin_t losses = twin_output(DDP_DTYPE_F32, (size_t)N);
  twin_t sum = twin_input(DDP_DTYPE_F32, 1, 0.0f, 1.0f);
  ck_assert_int_eq(ddp_cuda_nn_xent_fused(twin_gpu, dt, losses.gpu, sum.gpu, logits.gpu, logits.gpu,
                                          ti.gpu, 1.0f, 0.0f, N, V, Vp, NULL),
                   DDP_OK);
  float *l = twin_fetch(&losses, twin_gpu), *g = twin_fetch(&logits, twin_gpu);
  expect(isfinite(l[0]) && l[0] > 0 && isfinite(l[3]) && l[3] > 0);
  expect(isnan(l[1]) && isnan(l[2]));
  expect(isnan(fetch1(twin_gpu, sum.gpu)));
  for (int r = 1; r <= 2; ++r)
    for (int i = 0; i < Vp; ++i) expect(g[(size_t)r * Vp + i] == 0.0f);
  for (int i = 0; i < V; ++i) expect(isfinite(g[i]) && g[i] != 0.0f);
  free(l), free(g);
  twin_free(&sum), twin_free(&losses), twin_free(&logits);
  ids_free(&ti);
}
END_TEST

START_TEST(test_gpu_xent_rejects_bad_arguments) {
  float *buf = twin_dev_alloc(twin_gpu, 4096);
  int32_t *tgt = twin_dev_alloc(twin_gpu, 64);
  ck_assert_int_eq(ddp_cuda_nn_xent_fused(twin_gpu, DDP_DTYPE_F32, buf, buf + 8, NULL, buf + 16,
                                          tgt, 1.0f, 0.0f, 0, 4, 4, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_xent_fused(twin_gpu, DDP_DTYPE_F32, buf, buf + 8, NULL, buf + 16,
                                          tgt, 1.0f, 0.0f, 2, 5, 4, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_xent_fused(twin_gpu, DDP_DTYPE_F32, NULL, buf + 8, NULL, buf + 16,
                                          tgt, 1.0f, 0.0f, 2, 4, 4, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_xent_fused(twin_gpu, DDP_DTYPE_F32, buf, NULL, NULL, buf + 16, tgt,
                                          1.0f, 0.0f, 2, 4, 4, NULL),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_nn_xent_fused(twin_gpu, DDP_DTYPE_I32, buf, buf + 8, NULL, buf + 16,
                                          tgt, 1.0f, 0.0f, 2, 4, 4, NULL),
                   DDP_ERR_INVALID_ARG);
  for (int k = 0; k < 3; ++k) { /* label smoothing outside [0, 1) */
    const float bad_eps[] = {1.0f, -0.25f, NAN};
    ck_assert_int_eq(ddp_cuda_nn_xent_fused(twin_gpu, DDP_DTYPE_F32, buf, buf + 8, NULL, buf + 16,
                                            tgt, 1.0f, bad_eps[k], 2, 4, 4, NULL),
                     DDP_ERR_INVALID_ARG);
  }
  ddp_backend_free(twin_gpu, tgt);
  ddp_backend_free(twin_gpu, buf);
}
END_TEST

/* ---- runner ------------------------------------------------------------------- */

static Suite *gpu_nn_basic_suite(void) {
  Suite *s = suite_create("gpu_nn_basic");
  TCase *tc = tcase_create("embed");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_gpu_embed_fwd_odd_sizes);
  tcase_add_test(tc, test_gpu_embed_bwd_repeated_tokens);
  tcase_add_test(tc, test_gpu_embed_negative_token_is_nan);
  tcase_add_test(tc, test_gpu_embed_rejects_bad_arguments);
  suite_add_tcase(s, tc);

  tc = tcase_create("pointwise");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_gpu_gelu_fwd);
  tcase_add_test(tc, test_gpu_gelu_bwd_and_in_place);
  tcase_add_test(tc, test_gpu_add_and_in_place);
  tcase_add_test(tc, test_gpu_pointwise_rejects_bad_arguments);
  suite_add_tcase(s, tc);

  tc = tcase_create("xent");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_gpu_xent_padded_vocab);
  tcase_add_test(tc, test_gpu_xent_large_odd_vocab);
  tcase_add_test(tc, test_gpu_xent_label_smoothing);
  tcase_add_test(tc, test_gpu_xent_invalid_target_is_nan);
  tcase_add_test(tc, test_gpu_xent_rejects_bad_arguments);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  twin_start(); /* exits 77 without a usable GPU */
  return twin_run_suite(gpu_nn_basic_suite());
}
