/* NHWC fp32 2-D convolution on the CPU through oneDNN: forward,
 * backward-data and backward-weights (cpu_conv.h), each a cached oneDNN
 * primitive (cpu_dnnl.h). oneDNN has the convolution, so none is written
 * here: this file only describes shapes to it, checks them first, and moves
 * the weights between the caller's (K,R,S,C) layout and oneDNN's. */
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
static int g_autotune; /* see ddp_cpu_conv_set_autotune */

/* v[9]: whether the entry was autotuned (tuned and untuned ones differ) */
static ddp_dnnl_key_t conv_key(enum conv_op op, const ddp_conv_shape_t *sh) {
  return (ddp_dnnl_key_t){
      .op = op,
      .v = {sh->N, sh->H, sh->W, sh->C, sh->K, sh->R, sh->S, sh->stride, sh->pad, g_autotune}};
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

/* One cached convolution: its primitive, memory objects for the caller's
 * activations (NHWC, re-pointed each call), the weights staged between the
 * caller's layout and the primitive's, the scratchpad, and for the weight
 * gradient under accumulate the buffer the fresh gradient lands in. */
typedef struct conv_impl {
  dnnl_primitive_t prim;
  dnnl_memory_t act_in, act_out; /* what the op reads / writes besides the weights */
  ddp_dnnl_staged_t w;
  dnnl_memory_t scratch;
  float *dw_fresh;
  size_t w_elems;
} conv_impl_t;

static void conv_destroy(void *impl) {
  conv_impl_t *c = impl;
  if (!c) return;
  if (c->prim) dnnl_primitive_destroy(c->prim);
  if (c->act_in) dnnl_memory_destroy(c->act_in);
  if (c->act_out) dnnl_memory_destroy(c->act_out);
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
 * implementation oneDNN offers for the op and shape is run on scratch
 * buffers and the fastest kept. oneDNN's own first choice is often not the
 * fastest on AVX2 (its direct NHWC kernels against its GEMM-based ones:
 * the backward-data of a 3x3, 256-channel 8x8 layer took 65 ms against
 * 34 ms); but which wins depends on timing, and implementations round
 * differently, so a tuned run is not bit-reproducible: hence off by
 * default. Set once per process by the CPU backend (the primitive cache is
 * process-wide too); tuned and untuned entries are cached apart. */
void ddp_cpu_conv_set_autotune(int on) {
  g_autotune = on != 0;
}

/* Milliseconds of the best of 2 runs (after one warm-up) of the primitive
 * of pd on zeroed scratch buffers; a candidate that cannot be built or run
 * costs infinity. */
static double time_candidate(const_dnnl_primitive_desc_t pd, enum conv_op op) {
  const dnnl_query_t q[3] = {
      op == CONV_BWD_DATA ? dnnl_query_diff_src_md : dnnl_query_src_md,
      op == CONV_BWD_WEIGHTS ? dnnl_query_diff_weights_md : dnnl_query_weights_md,
      op == CONV_FWD ? dnnl_query_dst_md : dnnl_query_diff_dst_md};
  const int arg[3] = {op == CONV_BWD_DATA ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC,
                      op == CONV_BWD_WEIGHTS ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS,
                      op == CONV_FWD ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST};
  void *buf[4] = {NULL, NULL, NULL, NULL};
  dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
  dnnl_exec_arg_t args[4];
  dnnl_primitive_t prim = NULL;
  double best = INFINITY;
  int n = 0;
  for (int i = 0; i < 4; ++i) {
    const dnnl_memory_desc_t *md =
        dnnl_primitive_desc_query_md(pd, i < 3 ? q[i] : dnnl_query_scratchpad_md, 0);
    const size_t bytes = md ? dnnl_memory_desc_get_size(md) : 0;
    if (!bytes) continue;
    if (!(buf[i] = calloc(1, bytes)) ||
        dnnl_memory_create(&mem[i], md, ddp_dnnl_engine(), buf[i]) != dnnl_success)
      goto done;
    args[n++] = (dnnl_exec_arg_t){i < 3 ? arg[i] : DNNL_ARG_SCRATCHPAD, mem[i]};
  }
  if (dnnl_primitive_create(&prim, pd) != dnnl_success) goto done;
  for (int r = 0; r < 3; ++r) {
    const double t0 = ddp_clock_seconds();
    if (dnnl_primitive_execute(prim, ddp_dnnl_stream(), n, args) != dnnl_success ||
        dnnl_stream_wait(ddp_dnnl_stream()) != dnnl_success)
      goto done;
    const double ms = 1e3 * (ddp_clock_seconds() - t0);
    if (r > 0 && ms < best) best = ms;
  }
done:
  if (prim) dnnl_primitive_destroy(prim);
  for (int i = 0; i < 4; ++i) {
    if (mem[i]) dnnl_memory_destroy(mem[i]);
    free(buf[i]);
  }
  return best;
}

/* The primitive descriptor of op_desc: oneDNN's first choice, or with
 * autotuning the fastest of its implementations (oneDNN's reference ones
 * are never candidates); never a broken 1x1 kernel (above). */
static ddp_status_t create_pd(dnnl_primitive_desc_t *pd, const void *op_desc,
                              const_dnnl_primitive_attr_t attr, const_dnnl_primitive_desc_t hint,
                              const ddp_conv_shape_t *sh, enum conv_op op, int tune) {
  *pd = NULL;
  dnnl_primitive_desc_iterator_t it = NULL;
  DDP_DNNL_CHECK(dnnl_primitive_desc_iterator_create(&it, op_desc, attr, ddp_dnnl_engine(), hint));
  double best_ms = INFINITY;
  char chosen[64] = "";
  do {
    dnnl_primitive_desc_t cand = dnnl_primitive_desc_iterator_fetch(it);
    if (!cand) continue;
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(cand, dnnl_query_impl_info_str, 0, &impl) != dnnl_success ||
        !impl || broken_1x1(sh, impl) || (tune && strstr(impl, "ref"))) {
      dnnl_primitive_desc_destroy(cand);
      continue;
    }
    const double ms = tune ? time_candidate(cand, op) : 0.0;
    if (!*pd || ms < best_ms) {
      if (*pd) dnnl_primitive_desc_destroy(*pd);
      *pd = cand, best_ms = ms;
      snprintf(chosen, sizeof chosen, "%s", impl);
    } else {
      dnnl_primitive_desc_destroy(cand);
    }
    if (!tune) break; /* oneDNN's first usable choice */
  } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
  dnnl_primitive_desc_iterator_destroy(it);
  if (!*pd)
    DDP_FAIL(DDP_ERR_UNSUPPORTED,
             "conv: oneDNN has no usable implementation for a %dx%d convolution of %d -> %d "
             "channels",
             sh->R, sh->S, sh->C, sh->K);
  if (tune)
    DDP_LOG_DEBUG("conv autotune: op %d N%d H%d W%d C%d K%d %dx%d s%d: %s (%.2f ms)", (int)op,
                  sh->N, sh->H, sh->W, sh->C, sh->K, sh->R, sh->S, sh->stride, chosen, best_ms);
  return DDP_OK;
}

static ddp_status_t conv_create(const ddp_dnnl_key_t *key, void **impl) {
  const ddp_conv_shape_t sh = key_shape(key);
  const int op = key->op;
  ddp_status_t st = DDP_OK;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
  conv_impl_t *c = calloc(1, sizeof *c);
  if (!c) DDP_FAIL(DDP_ERR_OOM, "conv: cannot allocate a primitive cache entry");
  c->w_elems = (size_t)sh.K * sh.R * sh.S * sh.C;

  /* Activations in the caller's NHWC; the weights' layout left to oneDNN
   * (`any`): its fast kernels want blocked weights, which the staging
   * reorder provides. */
  const dnnl_dims_t src_dims = {sh.N, sh.C, sh.H, sh.W};
  const dnnl_dims_t dst_dims = {sh.N, sh.K, ddp_conv_out_h(&sh), ddp_conv_out_w(&sh)};
  const dnnl_dims_t w_dims = {sh.K, sh.C, sh.R, sh.S};
  /* The right/bottom padding is what the last window really reaches,
   * (O-1)*stride + kernel - in - pad: negative when the input's last rows
   * are in no window (a 1x1 stride-2 convolution of an even size). Passing
   * `pad` there instead describes a window oneDNN's 1x1 kernels then read
   * and write past their buffers for. */
  const dnnl_dims_t strides = {sh.stride, sh.stride}, pads = {sh.pad, sh.pad};
  const dnnl_dims_t pads_r = {
      (dst_dims[2] - 1) * sh.stride + sh.R - sh.H - sh.pad,
      (dst_dims[3] - 1) * sh.stride + sh.S - sh.W - sh.pad,
  };
  dnnl_memory_desc_t src_md, dst_md, w_user_md, w_any_md;
  DDP_DNNL_CHECK_GOTO(dnnl_memory_desc_init_by_tag(&src_md, 4, src_dims, dnnl_f32, dnnl_nhwc), st,
                      fail);
  DDP_DNNL_CHECK_GOTO(dnnl_memory_desc_init_by_tag(&dst_md, 4, dst_dims, dnnl_f32, dnnl_nhwc), st,
                      fail);
  DDP_DNNL_CHECK_GOTO(dnnl_memory_desc_init_by_tag(&w_user_md, 4, w_dims, dnnl_f32, dnnl_ohwi), st,
                      fail);
  DDP_DNNL_CHECK_GOTO(
      dnnl_memory_desc_init_by_tag(&w_any_md, 4, w_dims, dnnl_f32, dnnl_format_tag_any), st, fail);

  /* Direct convolution: Winograd would be faster for some 3x3 shapes but
   * rounds differently from cuDNN's default algorithms and from the test's
   * oracle. The forward descriptor is also the hint the backward ones need. */
  dnnl_convolution_desc_t fwd_d, bwd_d;
  DDP_DNNL_CHECK_GOTO(
      dnnl_convolution_forward_desc_init(&fwd_d, dnnl_forward_training, dnnl_convolution_direct,
                                         &src_md, &w_any_md, NULL, &dst_md, strides, pads, pads_r),
      st, fail);
  DDP_CHECK_GOTO(ddp_dnnl_user_scratchpad_attr(&attr), st, fail);
  if (op == CONV_FWD) {
    DDP_CHECK_GOTO(create_pd(&pd, &fwd_d, attr, NULL, &sh, op, (int)key->v[9]), st, fail);
  } else {
    DDP_DNNL_CHECK_GOTO(dnnl_primitive_desc_create(&fwd_pd, &fwd_d, NULL, ddp_dnnl_engine(), NULL),
                        st, fail);
    if (op == CONV_BWD_DATA)
      DDP_DNNL_CHECK_GOTO(
          dnnl_convolution_backward_data_desc_init(&bwd_d, dnnl_convolution_direct, &src_md,
                                                   &w_any_md, &dst_md, strides, pads, pads_r),
          st, fail);
    else
      DDP_DNNL_CHECK_GOTO(dnnl_convolution_backward_weights_desc_init(
                              &bwd_d, dnnl_convolution_direct, &src_md, &w_any_md, NULL, &dst_md,
                              strides, pads, pads_r),
                          st, fail);
    DDP_CHECK_GOTO(create_pd(&pd, &bwd_d, attr, fwd_pd, &sh, op, (int)key->v[9]), st, fail);
  }
  DDP_CHECK_GOTO(ddp_dnnl_primitive(&c->prim, pd), st, fail);
  DDP_CHECK_GOTO(ddp_dnnl_scratchpad(&c->scratch, pd), st, fail);
  const dnnl_memory_desc_t *w_inner_md = dnnl_primitive_desc_query_md(
      pd, op == CONV_BWD_WEIGHTS ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
  DDP_CHECK_GOTO(ddp_dnnl_staged_init(&c->w, &w_user_md, w_inner_md, op != CONV_BWD_WEIGHTS), st,
                 fail);
  /* fwd reads src, writes dst; bwd-data reads diff_dst, writes diff_src;
   * bwd-weights reads src and diff_dst. */
  DDP_CHECK_GOTO(ddp_dnnl_user_memory(&c->act_in, op == CONV_BWD_DATA ? &dst_md : &src_md), st,
                 fail);
  DDP_CHECK_GOTO(ddp_dnnl_user_memory(&c->act_out, op == CONV_BWD_DATA ? &src_md : &dst_md), st,
                 fail);
  if (op == CONV_BWD_WEIGHTS) {
    c->dw_fresh = malloc(c->w_elems * sizeof *c->dw_fresh);
    if (!c->dw_fresh)
      DDP_FAIL_GOTO(st, DDP_ERR_OOM, fail, "conv: cannot allocate %zu floats for dw", c->w_elems);
  }
  ddp_dnnl_release_descs(pd, fwd_pd, attr);
  *impl = c;
  return DDP_OK;
fail:
  ddp_dnnl_release_descs(pd, fwd_pd, attr);
  conv_destroy(c);
  return st;
}

/* Runs c's primitive with the weights argument `w_arg` and its two
 * activation arguments. */
static ddp_status_t conv_execute(conv_impl_t *c, int in_arg, int out_arg, int w_arg) {
  dnnl_exec_arg_t args[4] = {
      {in_arg, c->act_in}, {out_arg, c->act_out}, {w_arg, c->w.inner}, {DNNL_ARG_SCRATCHPAD, NULL}};
  args[3].memory = c->scratch;
  return ddp_dnnl_execute(c->prim, c->scratch ? 4 : 3, args);
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
  ddp_status_t st = DDP_OK;
  DDP_CHECK_GOTO(acquire(be, CONV_FWD, sh, &c), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_point(c->w.user, w), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_staged_run(&c->w, 1), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_point(c->act_in, inp), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_point(c->act_out, out), st, done);
  st = conv_execute(c, DNNL_ARG_SRC, DNNL_ARG_DST, DNNL_ARG_WEIGHTS);
done:
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
  ddp_status_t st = DDP_OK;
  DDP_CHECK_GOTO(acquire(be, CONV_BWD_DATA, sh, &c), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_point(c->w.user, w), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_staged_run(&c->w, 1), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_point(c->act_in, dout), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_point(c->act_out, dinp), st, done);
  st = conv_execute(c, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS);
done:
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
  ddp_status_t st = DDP_OK;
  DDP_CHECK_GOTO(acquire(be, CONV_BWD_WEIGHTS, sh, &c), st, done);
  /* oneDNN overwrites its output; under accumulate the fresh gradient goes
   * to the entry's buffer and is added to dw. */
  float *target = accumulate ? c->dw_fresh : dw;
  DDP_CHECK_GOTO(ddp_dnnl_point(c->w.user, target), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_point(c->act_in, inp), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_point(c->act_out, dout), st, done);
  DDP_CHECK_GOTO(conv_execute(c, DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_staged_run(&c->w, 0), st, done);
  if (accumulate)
    for (size_t i = 0; i < c->w_elems; ++i) dw[i] += c->dw_fresh[i];
done:
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

#else /* !DDP_HAVE_DNNL: every op says that this build has no oneDNN */

void ddp_cpu_conv_set_autotune(int on) {
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

#endif
