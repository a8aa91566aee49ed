/* NHWC fp32 2-D convolution on the CPU through oneDNN: forward,
 * backward-data and backward-weights (cpu_conv.h), each a cached oneDNN
 * primitive (cpu_dnnl.h). oneDNN has the convolution, so none is written
 * here: this file only describes shapes to it, checks them first, picks an
 * implementation, and moves the weights and activations between the
 * caller's layouts ((K,R,S,C); NHWC) and the ones oneDNN's kernels want. */
#include <config.h>

#include "backend/cpu/cpu_conv.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/conv_check.h"
#include "backend/cpu/cpu_dnnl.h"
#include "core/clock.h"
#include "ddptrain/check.h"
#include "ddptrain/log.h"

int ddp_window_out_size(int in, int kernel, int stride, int pad) {
  if (in < 1 || kernel < 1 || stride < 1 || pad < 0) return 0;
  const int64_t span = (int64_t)in + 2 * (int64_t)pad - kernel;
  return span < 0 ? 0 : (int)(span / stride + 1);
}

int ddp_conv_out_h(const ddp_conv_shape_t *sh) {
  return ddp_window_out_size(sh->H, sh->R, sh->stride, sh->pad);
}

int ddp_conv_out_w(const ddp_conv_shape_t *sh) {
  return ddp_window_out_size(sh->W, sh->S, sh->stride, sh->pad);
}

#if DDP_HAVE_DNNL

enum conv_op { CONV_FWD = 1, CONV_BWD_DATA = 2, CONV_BWD_WEIGHTS = 3 };
static int g_autotune;       /* see ddp_cpu_conv_set_autotune */
static int g_prefer_blocked; /* see ddp_cpu_conv_set_prefer_blocked */
static int g_winograd = 1;   /* see ddp_cpu_conv_set_winograd */

/* v[9]: whether the entry was autotuned, v[10]: whether the blocked layout
 * was tried first, v[11]: whether Winograd was allowed (entries made
 * either way differ) */
static ddp_dnnl_key_t conv_key(enum conv_op op, const ddp_conv_shape_t *sh) {
  return (ddp_dnnl_key_t){.op = op,
                          .v = {sh->N, sh->H, sh->W, sh->C, sh->K, sh->R, sh->S, sh->stride,
                                sh->pad, g_autotune, g_prefer_blocked, g_winograd}};
}

static ddp_conv_shape_t key_shape(const ddp_dnnl_key_t *k) {
  return (ddp_conv_shape_t){.N = (int)k->v[0],
                            .H = (int)k->v[1],
                            .W = (int)k->v[2],
                            .C = (int)k->v[3],
                            .K = (int)k->v[4],
                            .R = (int)k->v[5],
                            .S = (int)k->v[6],
                            .stride = (int)k->v[7],
                            .pad = (int)k->v[8]};
}

/* One cached convolution: its primitive, its two activations and its
 * weights, each staged between the caller's layout (NHWC; (K,R,S,C)) and
 * the primitive's, the scratchpad, and for the weight gradient under
 * accumulate the buffer the fresh gradient lands in. The activations are
 *   forward:          a = src (read),      b = dst (written);
 *   backward-data:    a = diff_dst (read), b = diff_src (written);
 *   backward-weights: a = src (read),      b = diff_dst (read).
 * Their blocked copies live in the shared staging buffers (cpu_dnnl.h):
 * slot 0 for a, slot 1 for b. */
typedef struct conv_impl {
  dnnl_primitive_t prim;
  ddp_dnnl_staged_t a, b, w;
  dnnl_memory_t scratch;
  float *dw_fresh;
  size_t w_elems;
  char name[64]; /* oneDNN's implementation, and whether activations are reordered */
} conv_impl_t;

static void conv_destroy(void *impl) {
  conv_impl_t *c = impl;
  if (!c) return;
  if (c->prim) dnnl_primitive_destroy(c->prim);
  ddp_dnnl_staged_destroy(&c->a);
  ddp_dnnl_staged_destroy(&c->b);
  ddp_dnnl_staged_destroy(&c->w);
  if (c->scratch) dnnl_memory_destroy(c->scratch);
  free(c->dw_fresh);
  free(c);
}

/* oneDNN 2.6's AVX2 1x1 kernels write past their buffers when a strided
 * 1x1 convolution (which they compute by first gathering the strided input,
 * "reduce to unit stride") has channels that are not a multiple of 8 (a
 * ResNet's downsample at a small --width; check_conv has the case). Such a
 * shape never takes a 1x1 kernel: the general direct one is slower for 1x1
 * but correct. */
static int broken_1x1(const ddp_conv_shape_t *sh, const char *impl) {
  return sh->R == 1 && sh->S == 1 && sh->stride != 1 && (sh->C % 8 != 0 || sh->K % 8 != 0) &&
         strstr(impl, "1x1") != NULL;
}

/* With --deterministic off, the CPU's counterpart of cudnn.benchmark: every
 * implementation oneDNN offers for the op and shape, in the activation
 * layout it prefers and in NHWC, is run on scratch buffers, reorders
 * included, and the fastest kept. oneDNN's own first choice is often not
 * the fastest on AVX2 (its direct kernels against its GEMM-based ones: the
 * backward-data of a 3x3, 256-channel 8x8 layer took 65 ms against 34 ms);
 * but which wins depends on timing, and implementations round differently,
 * so a tuned run is not bit-reproducible: hence off by default. Set once
 * per process by the CPU backend (the primitive cache is process-wide too);
 * tuned and untuned entries are cached apart. */
void ddp_cpu_conv_set_autotune(int on) {
  g_autotune = on != 0;
}

void ddp_cpu_conv_set_prefer_blocked(int on) {
  g_prefer_blocked = on != 0;
}

void ddp_cpu_conv_set_winograd(int on) {
  g_winograd = on != 0;
}

/* The ways a convolution may run: an activation layout and one of oneDNN's
 * algorithms. The layouts are the one oneDNN picks (`any`: its
 * channel-blocked nChw8c on AVX2, nChw16c on AVX-512), which the op
 * reorders to and from the caller's NHWC, and NHWC as it is. */
typedef struct conv_plan {
  dnnl_format_tag_t act;
  dnnl_alg_kind_t alg;
} conv_plan_t;
enum { PLAN_WINOGRAD = 0, PLAN_BLOCKED = 1, PLAN_NHWC = 2, PLANS = 3 };
static const conv_plan_t k_plans[PLANS] = {
    [PLAN_WINOGRAD] = {dnnl_format_tag_any, dnnl_convolution_winograd},
    [PLAN_BLOCKED] = {dnnl_format_tag_any, dnnl_convolution_direct},
    [PLAN_NHWC] = {dnnl_nhwc, dnnl_convolution_direct},
};

/* The order the untuned choice tries them in.
 *
 * Winograd first, for the 3x3 stride-1 shapes it exists for
 * (winograd_candidate). oneDNN has it only on AVX-512 (F(4x4, 3x3) tiles,
 * channel-blocked activations);
 * there it does a ResNet's 3x3 layers in about half the direct kernels'
 * time, for all three ops (bench/RESULTS.md), far more than the
 * activations' reorders cost. Its rounding differs from the direct
 * kernels' (the tiles' transforms add a few ulps), but the same inputs
 * give the same bits every run.
 *
 * Then NHWC: where oneDNN has an AVX-512 kernel for it, that is taken,
 * since it needs no reorders (a ResNet-18 step on an AVX-512 EPYC: NHWC
 * convolutions 461 ms against blocked 453, but reorders 13 ms against
 * 62: 7.7% less in all). Else the blocked layout: on AVX2 oneDNN's NHWC
 * kernels lose 10-30% on a ResNet's 3x3 layers, far more than the
 * reorders cost; NHWC's first choice is kept in reserve for shapes with
 * no blocked kernel (the stem's 1 or 3 input channels). A rule of the
 * machine's kernels, not a timing: the choice, and the bits, repeat from
 * run to run. */
static const int k_nhwc_first[PLANS] = {PLAN_WINOGRAD, PLAN_NHWC, PLAN_BLOCKED};
static const int k_blocked_first[PLANS] = {PLAN_WINOGRAD, PLAN_BLOCKED, PLAN_NHWC};

/* Whether oneDNN's Winograd may be tried for sh: a 3x3 stride-1 shape
 * whose channels fill whole blocks of 16 (its AVX-512 kernel's block),
 * unless turned off (ddp_cpu_conv_set_winograd). oneDNN also takes other
 * channel counts, padded to the block, but pays for the padding: a
 * ResNet-18 stem's 1 -> 64 channels ran its forward and backward-weights
 * in 3.2 and 2.8 ms against the direct kernels' 0.5. */
static int winograd_candidate(const ddp_conv_shape_t *sh, int allowed) {
  return allowed && sh->R == 3 && sh->S == 3 && sh->stride == 1 && sh->C % 16 == 0 &&
         sh->K % 16 == 0;
}

/* The operation descriptors of one layout: the forward (also the hint the
 * backward ones need) and op's own. */
typedef struct conv_descs {
  dnnl_memory_desc_t src_user, dst_user, w_user; /* the caller's layouts */
  dnnl_convolution_desc_t fwd, bwd;
  dnnl_primitive_desc_t fwd_pd; /* the hint; NULL for the forward op */
} conv_descs_t;

static ddp_status_t descs_init(conv_descs_t *d, const ddp_conv_shape_t *sh, enum conv_op op,
                               dnnl_format_tag_t act, dnnl_alg_kind_t alg) {
  *d = (conv_descs_t){0};
  const dnnl_dims_t src_dims = {sh->N, sh->C, sh->H, sh->W};
  const dnnl_dims_t dst_dims = {sh->N, sh->K, ddp_conv_out_h(sh), ddp_conv_out_w(sh)};
  const dnnl_dims_t w_dims = {sh->K, sh->C, sh->R, sh->S};
  /* The right/bottom padding is what the last window really reaches,
   * (O-1)*stride + kernel - in - pad: negative when the input's last rows
   * are in no window (a 1x1 stride-2 convolution of an even size). Passing
   * `pad` there instead describes a window oneDNN's 1x1 kernels then read
   * and write past their buffers for. */
  const dnnl_dims_t strides = {sh->stride, sh->stride}, pads = {sh->pad, sh->pad};
  const dnnl_dims_t pads_r = {
      (dst_dims[2] - 1) * sh->stride + sh->R - sh->H - sh->pad,
      (dst_dims[3] - 1) * sh->stride + sh->S - sh->W - sh->pad,
  };
  dnnl_memory_desc_t src_md, dst_md, w_md;
  DDP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&d->src_user, 4, src_dims, dnnl_f32, dnnl_nhwc));
  DDP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&d->dst_user, 4, dst_dims, dnnl_f32, dnnl_nhwc));
  DDP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&d->w_user, 4, w_dims, dnnl_f32, dnnl_ohwi));
  DDP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&src_md, 4, src_dims, dnnl_f32, act));
  DDP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&dst_md, 4, dst_dims, dnnl_f32, act));
  /* The weights' layout is always oneDNN's choice: its fast kernels want
   * blocked weights, which the staging reorder provides. */
  DDP_DNNL_CHECK(dnnl_memory_desc_init_by_tag(&w_md, 4, w_dims, dnnl_f32, dnnl_format_tag_any));
  DDP_DNNL_CHECK(dnnl_convolution_forward_desc_init(&d->fwd, dnnl_forward_training,
                                                    alg, &src_md, &w_md, NULL,
                                                    &dst_md, strides, pads, pads_r));
  if (op == CONV_FWD) return DDP_OK;
  DDP_DNNL_CHECK(dnnl_primitive_desc_create(&d->fwd_pd, &d->fwd, NULL, ddp_dnnl_engine(), NULL));
  ddp_status_t st = DDP_OK;
  if (op == CONV_BWD_DATA)
    DDP_DNNL_CHECK_GOTO(
        dnnl_convolution_backward_data_desc_init(&d->bwd, alg, &src_md, &w_md,
                                                 &dst_md, strides, pads, pads_r),
        st, fail);
  else
    DDP_DNNL_CHECK_GOTO(
        dnnl_convolution_backward_weights_desc_init(&d->bwd, alg, &src_md,
                                                    &w_md, NULL, &dst_md, strides, pads, pads_r),
        st, fail);
  return DDP_OK;
fail:
  dnnl_primitive_desc_destroy(d->fwd_pd);
  d->fwd_pd = NULL;
  return st;
}

/* Builds the entry for one candidate primitive descriptor (consumed: the
 * caller keeps no reference to pd). */
static ddp_status_t impl_from_pd(conv_impl_t **out, dnnl_primitive_desc_t pd, const conv_descs_t *d,
                                 const ddp_conv_shape_t *sh, enum conv_op op) {
  *out = NULL;
  ddp_status_t st = DDP_OK;
  conv_impl_t *c = calloc(1, sizeof *c);
  if (!c) {
    dnnl_primitive_desc_destroy(pd);
    DDP_FAIL(DDP_ERR_OOM, "conv: cannot allocate a primitive cache entry");
  }
  c->w_elems = (size_t)sh->K * sh->R * sh->S * sh->C;
  const dnnl_query_t qa = op == CONV_BWD_DATA ? dnnl_query_diff_dst_md : dnnl_query_src_md;
  const dnnl_query_t qb = op == CONV_FWD        ? dnnl_query_dst_md
                          : op == CONV_BWD_DATA ? dnnl_query_diff_src_md
                                                : dnnl_query_diff_dst_md;
  const dnnl_query_t qw =
      op == CONV_BWD_WEIGHTS ? dnnl_query_diff_weights_md : dnnl_query_weights_md;
  const dnnl_memory_desc_t *a_user = op == CONV_BWD_DATA ? &d->dst_user : &d->src_user;
  const dnnl_memory_desc_t *b_user = op == CONV_BWD_DATA ? &d->src_user : &d->dst_user;
  DDP_CHECK_GOTO(ddp_dnnl_primitive(&c->prim, pd), st, fail);
  DDP_CHECK_GOTO(ddp_dnnl_scratchpad(&c->scratch, pd), st, fail);
  DDP_CHECK_GOTO(ddp_dnnl_staged_init(&c->a, a_user, dnnl_primitive_desc_query_md(pd, qa, 0), 1, 0),
                 st, fail);
  DDP_CHECK_GOTO(ddp_dnnl_staged_init(&c->b, b_user, dnnl_primitive_desc_query_md(pd, qb, 0),
                                      op == CONV_BWD_WEIGHTS, 1),
                 st, fail);
  DDP_CHECK_GOTO(ddp_dnnl_staged_init(&c->w, &d->w_user, dnnl_primitive_desc_query_md(pd, qw, 0),
                                      op != CONV_BWD_WEIGHTS, DDP_DNNL_OWN_BUFFER),
                 st, fail);
  if (op == CONV_BWD_WEIGHTS) {
    c->dw_fresh = malloc(c->w_elems * sizeof *c->dw_fresh);
    if (!c->dw_fresh)
      DDP_FAIL_GOTO(st, DDP_ERR_OOM, fail, "conv: cannot allocate %zu floats for dw", c->w_elems);
  }
  const char *impl = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
    impl = "?";
  snprintf(c->name, sizeof c->name, "%s%s", impl,
           c->a.reorder || c->b.reorder ? " (activations reordered)" : " (NHWC)");
  dnnl_primitive_desc_destroy(pd);
  *out = c;
  return DDP_OK;
fail:
  dnnl_primitive_desc_destroy(pd);
  conv_destroy(c);
  return st;
}

/* Runs c on the caller's buffers: stages what it reads into the
 * primitive's layouts, executes, stages what it wrote back. a, b are the
 * activations as conv_impl_t names them; w the weights (written for
 * backward-weights). */
static ddp_status_t conv_run(conv_impl_t *c, enum conv_op op, const void *a, const void *b,
                             const void *w) {
  DDP_CHECK(ddp_dnnl_point(c->a.user, a));
  DDP_CHECK(ddp_dnnl_point(c->b.user, b));
  DDP_CHECK(ddp_dnnl_point(c->w.user, w));
  DDP_CHECK(ddp_dnnl_staged_run(&c->a, 1));
  if (op == CONV_BWD_WEIGHTS) {
    DDP_CHECK(ddp_dnnl_staged_run(&c->b, 1));
  } else {
    DDP_CHECK(ddp_dnnl_staged_run(&c->w, 1));
    DDP_CHECK(ddp_dnnl_staged_bind(&c->b)); /* the op writes it */
  }
  const int arg_a = op == CONV_BWD_DATA ? DNNL_ARG_DIFF_DST : DNNL_ARG_SRC;
  const int arg_b = op == CONV_FWD        ? DNNL_ARG_DST
                    : op == CONV_BWD_DATA ? DNNL_ARG_DIFF_SRC
                                          : DNNL_ARG_DIFF_DST;
  const int arg_w = op == CONV_BWD_WEIGHTS ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS;
  const dnnl_exec_arg_t args[4] = {{arg_a, c->a.inner},
                                   {arg_b, c->b.inner},
                                   {arg_w, c->w.inner},
                                   {DNNL_ARG_SCRATCHPAD, c->scratch}};
  DDP_CHECK(ddp_dnnl_execute(c->prim, c->scratch ? 4 : 3, args));
  return op == CONV_BWD_WEIGHTS ? ddp_dnnl_staged_run(&c->w, 0) : ddp_dnnl_staged_run(&c->b, 0);
}

/* Caller-layout scratch operands for timing candidates: zeroed, so no
 * denormals or NaNs skew a timing. */
typedef struct tune_buffers {
  void *a, *b, *w;
} tune_buffers_t;

static ddp_status_t tune_buffers_alloc(tune_buffers_t *t, const conv_descs_t *d, enum conv_op op) {
  const dnnl_memory_desc_t *a_md = op == CONV_BWD_DATA ? &d->dst_user : &d->src_user;
  const dnnl_memory_desc_t *b_md = op == CONV_BWD_DATA ? &d->src_user : &d->dst_user;
  t->a = calloc(1, dnnl_memory_desc_get_size(a_md));
  t->b = calloc(1, dnnl_memory_desc_get_size(b_md));
  t->w = calloc(1, dnnl_memory_desc_get_size(&d->w_user));
  if (!t->a || !t->b || !t->w) DDP_FAIL(DDP_ERR_OOM, "conv autotune: cannot allocate scratch");
  return DDP_OK;
}

static void tune_buffers_free(tune_buffers_t *t) {
  free(t->a), free(t->b), free(t->w);
  *t = (tune_buffers_t){0};
}

/* Milliseconds of the best of 2 runs of c (after one warm-up), reorders
 * included; infinity when it fails to run. */
static double time_impl(conv_impl_t *c, enum conv_op op, const tune_buffers_t *t) {
  double best = INFINITY;
  for (int r = 0; r < 3; ++r) {
    const double t0 = ddp_clock_seconds();
    if (conv_run(c, op, t->a, t->b, t->w) != DDP_OK) return INFINITY;
    const double ms = 1e3 * (ddp_clock_seconds() - t0);
    if (r > 0 && ms < best) best = ms;
  }
  return best;
}

/* The entry for key: untuned, oneDNN's Winograd kernel where it has one
 * (3x3 stride 1, AVX-512), else its first choice in NHWC where that is an
 * AVX-512 kernel, else its first in the blocked layout, else NHWC's
 * (k_nhwc_first); with autotuning the fastest of every non-reference
 * implementation of every plan; a reference one only when nothing else
 * exists; never a broken 1x1 kernel (above). */
static ddp_status_t conv_create(const ddp_dnnl_key_t *key, void **impl) {
  const ddp_conv_shape_t sh = key_shape(key);
  const enum conv_op op = (enum conv_op)key->op;
  const int tune = (int)key->v[9], blocked_first = (int)key->v[10], winograd = (int)key->v[11];
  ddp_status_t st = DDP_OK;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t fallback = NULL; /* the first reference implementation */
  const conv_descs_t *fallback_descs = NULL;
  conv_descs_t d[PLANS] = {0}; /* kept to the end: a backward pd refers to its hint */
  conv_impl_t *best = NULL;
  double best_ms = INFINITY;
  tune_buffers_t tb = {0};
  DDP_CHECK(ddp_dnnl_user_scratchpad_attr(&attr));
  conv_impl_t *spare = NULL; /* untuned: NHWC's first choice, not an AVX-512 kernel */
  for (int k = 0; k < PLANS && (tune || !best); ++k) {
    const int l = (tune || blocked_first ? k_blocked_first : k_nhwc_first)[k];
    if (l == PLAN_WINOGRAD && !winograd_candidate(&sh, winograd)) continue;
    DDP_CHECK_GOTO(descs_init(&d[l], &sh, op, k_plans[l].act, k_plans[l].alg), st, done);
    if (tune && !tb.a) DDP_CHECK_GOTO(tune_buffers_alloc(&tb, &d[l], op), st, done);
    dnnl_primitive_desc_iterator_t it = NULL;
    if (dnnl_primitive_desc_iterator_create(
            &it, op == CONV_FWD ? (const void *)&d[l].fwd : (const void *)&d[l].bwd, attr,
            ddp_dnnl_engine(), d[l].fwd_pd) != dnnl_success)
      continue; /* no implementation in this layout */
    do {
      dnnl_primitive_desc_t cand = dnnl_primitive_desc_iterator_fetch(it);
      const char *name = NULL;
      if (!cand) continue;
      if (dnnl_primitive_desc_query(cand, dnnl_query_impl_info_str, 0, &name) != dnnl_success ||
          !name || broken_1x1(&sh, name) || (strstr(name, "ref") && fallback)) {
        dnnl_primitive_desc_destroy(cand);
        continue;
      }
      if (strstr(name, "ref")) {
        fallback = cand, fallback_descs = &d[l];
        continue;
      }
      conv_impl_t *c = NULL;
      if ((st = impl_from_pd(&c, cand, &d[l], &sh, op)) != DDP_OK) break;
      if (!tune && l == PLAN_NHWC && !spare && !best && !strstr(name, "avx512")) {
        spare = c; /* the blocked layout may do better */
        break;
      }
      const double ms = tune ? time_impl(c, op, &tb) : 0.0;
      if (!best || ms < best_ms) {
        conv_destroy(best);
        best = c, best_ms = ms;
      } else {
        conv_destroy(c);
      }
      if (!tune) break; /* oneDNN's first usable choice */
    } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
    dnnl_primitive_desc_iterator_destroy(it);
    if (st != DDP_OK) goto done;
  }
  if (!best && spare) best = spare, spare = NULL;
  if (!best && fallback) {
    st = impl_from_pd(&best, fallback, fallback_descs, &sh, op);
    fallback = NULL;
    if (st != DDP_OK) goto done;
  }
  if (!best)
    DDP_FAIL_GOTO(st, DDP_ERR_UNSUPPORTED, done,
                  "conv: oneDNN has no usable implementation for a %dx%d convolution of %d -> %d "
                  "channels",
                  sh.R, sh.S, sh.C, sh.K);
  if (tune)
    DDP_LOG_DEBUG("conv autotune: op %d N%d H%d W%d C%d K%d %dx%d s%d: %s (%.2f ms)", (int)op, sh.N,
                  sh.H, sh.W, sh.C, sh.K, sh.R, sh.S, sh.stride, best->name, best_ms);
  *impl = best;
  best = NULL;
done:
  if (fallback) dnnl_primitive_desc_destroy(fallback);
  conv_destroy(spare);
  conv_destroy(best);
  for (int l = 0; l < PLANS; ++l)
    if (d[l].fwd_pd) dnnl_primitive_desc_destroy(d[l].fwd_pd);
  tune_buffers_free(&tb);
  dnnl_primitive_attr_destroy(attr);
  return st;
}

static ddp_status_t acquire(const ddp_backend_t *be, enum conv_op op, const ddp_conv_shape_t *sh,
                            conv_impl_t **c) {
  const ddp_dnnl_key_t key = conv_key(op, sh);
  void *impl = NULL;
  const ddp_status_t st = ddp_dnnl_acquire(be, &key, conv_create, conv_destroy, &impl);
  *c = impl;
  return st;
}

ddp_status_t ddp_cpu_conv_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                              const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_dnnl_admit(be, dt, "conv_fwd"));
  DDP_CHECK(ddp_conv_check_shape("conv_fwd", sh));
  if (!out || !inp || !w) DDP_FAIL(DDP_ERR_INVALID_ARG, "conv_fwd: out, inp and w are required");
  conv_impl_t *c = NULL;
  ddp_status_t st = acquire(be, CONV_FWD, sh, &c);
  if (st == DDP_OK) st = conv_run(c, CONV_FWD, inp, out, w);
  ddp_dnnl_release();
  return st;
}

ddp_status_t ddp_cpu_conv_bwd_data(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                   const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_dnnl_admit(be, dt, "conv_bwd_data"));
  DDP_CHECK(ddp_conv_check_shape("conv_bwd_data", sh));
  if (!dinp || !dout || !w)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "conv_bwd_data: dinp, dout and w are required");
  conv_impl_t *c = NULL;
  ddp_status_t st = acquire(be, CONV_BWD_DATA, sh, &c);
  if (st == DDP_OK) st = conv_run(c, CONV_BWD_DATA, dout, dinp, w);
  ddp_dnnl_release();
  return st;
}

ddp_status_t ddp_cpu_conv_bwd_weights(ddp_backend_t *be, ddp_dtype_t dt, float *dw,
                                      const void *dout, const void *inp, const ddp_conv_shape_t *sh,
                                      int accumulate, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_dnnl_admit(be, dt, "conv_bwd_weights"));
  DDP_CHECK(ddp_conv_check_shape("conv_bwd_weights", sh));
  if (!dw || !dout || !inp)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "conv_bwd_weights: dw, dout and inp are required");
  conv_impl_t *c = NULL;
  ddp_status_t st = acquire(be, CONV_BWD_WEIGHTS, sh, &c);
  /* oneDNN overwrites its output; under accumulate the fresh gradient goes
   * to the entry's buffer and is added to dw. */
  if (st == DDP_OK) st = conv_run(c, CONV_BWD_WEIGHTS, inp, dout, accumulate ? c->dw_fresh : dw);
  if (st == DDP_OK && accumulate)
    for (size_t i = 0; i < c->w_elems; ++i) dw[i] += c->dw_fresh[i];
  ddp_dnnl_release();
  return st;
}

ddp_status_t ddp_cpu_conv_prepare(ddp_backend_t *be, ddp_dtype_t dt, const ddp_conv_shape_t *sh) {
  DDP_CHECK(ddp_cpu_dnnl_admit(be, dt, "conv_prepare"));
  DDP_CHECK(ddp_conv_check_shape("conv_prepare", sh));
  ddp_status_t st = DDP_OK;
  for (enum conv_op op = CONV_FWD; op <= CONV_BWD_WEIGHTS && st == DDP_OK; ++op) {
    conv_impl_t *c = NULL;
    st = acquire(be, op, sh, &c);
    ddp_dnnl_release();
  }
  return st;
}

ddp_status_t ddp_cpu_conv_describe(ddp_backend_t *be, int op, const ddp_conv_shape_t *sh,
                                   char *buf, size_t len) {
  DDP_CHECK(ddp_cpu_dnnl_admit(be, DDP_DTYPE_F32, "conv_describe"));
  DDP_CHECK(ddp_conv_check_shape("conv_describe", sh));
  if (op < 0 || op > 2 || !buf || len == 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "conv_describe: op must be 0, 1 or 2, with a buffer");
  conv_impl_t *c = NULL;
  const ddp_status_t st = acquire(be, (enum conv_op)(CONV_FWD + op), sh, &c);
  if (st == DDP_OK) snprintf(buf, len, "%s", c->name);
  ddp_dnnl_release();
  return st;
}

#else /* !DDP_HAVE_DNNL: every op says that this build has no oneDNN */

void ddp_cpu_conv_set_autotune(int on) {
  (void)on;
}

void ddp_cpu_conv_set_prefer_blocked(int on) {
  (void)on;
}

void ddp_cpu_conv_set_winograd(int on) {
  (void)on;
}

ddp_status_t ddp_cpu_conv_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                              const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s) {
  return ddp_cpu_dnnl_admit(be, dt, "conv_fwd");
}

ddp_status_t ddp_cpu_conv_bwd_data(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                   const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s) {
  return ddp_cpu_dnnl_admit(be, dt, "conv_bwd_data");
}

ddp_status_t ddp_cpu_conv_bwd_weights(ddp_backend_t *be, ddp_dtype_t dt, float *dw,
                                      const void *dout, const void *inp, const ddp_conv_shape_t *sh,
                                      int accumulate, ddp_stream_t s) {
  return ddp_cpu_dnnl_admit(be, dt, "conv_bwd_weights");
}

ddp_status_t ddp_cpu_conv_prepare(ddp_backend_t *be, ddp_dtype_t dt, const ddp_conv_shape_t *sh) {
  return ddp_cpu_dnnl_admit(be, dt, "conv_prepare");
}

ddp_status_t ddp_cpu_conv_describe(ddp_backend_t *be, int op, const ddp_conv_shape_t *sh,
                                   char *buf, size_t len) {
  return ddp_cpu_dnnl_admit(be, DDP_DTYPE_F32, "conv_describe");
}

#endif
