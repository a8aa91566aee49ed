/* Max pooling (NHWC fp32) on the CPU through oneDNN's pooling primitive:
 * training and inference forward and the backward (cpu_conv.h), cached per
 * shape like the convolutions (cpu_dnnl.h). The training forward's
 * workspace, where oneDNN records each window's winner, is the caller's
 * buffer, so that one cached primitive serves every layer of that shape. */
#include <config.h>

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend/cpu/cpu_conv.h"
#include "backend/conv_check.h"
#include "backend/cpu/cpu_dnnl.h"
#include "ddptrain/check.h"

int ddp_pool_out_h(const ddp_pool_shape_t *sh) {
  return ddp_window_out_size(sh->H, sh->kernel, sh->stride, sh->pad);
}

int ddp_pool_out_w(const ddp_pool_shape_t *sh) {
  return ddp_window_out_size(sh->W, sh->kernel, sh->stride, sh->pad);
}

#if DDP_HAVE_DNNL

enum pool_op { POOL_FWD_TRAINING = 21, POOL_FWD_INFERENCE = 22, POOL_BWD = 23 };

/* One cached pooling: the primitive, memory objects for its arguments
 * (source or diff_dst in, destination or diff_src out, the workspace), the
 * scratchpad, and the workspace's size. */
typedef struct pool_impl {
  dnnl_primitive_t prim;
  dnnl_memory_t in, out, ws, scratch;
  size_t ws_bytes;
} pool_impl_t;

static void pool_destroy(void *impl) {
  pool_impl_t *p = impl;
  if (!p) return;
  if (p->prim) dnnl_primitive_destroy(p->prim);
  if (p->in) dnnl_memory_destroy(p->in);
  if (p->out) dnnl_memory_destroy(p->out);
  if (p->ws) dnnl_memory_destroy(p->ws);
  if (p->scratch) dnnl_memory_destroy(p->scratch);
  free(p);
}

static ddp_status_t pool_create(const ddp_dnnl_key_t *key, void **impl) {
  const int op = key->op;
  const ddp_pool_shape_t sh = {.N = (int)key->v[0],
                               .H = (int)key->v[1],
                               .W = (int)key->v[2],
                               .C = (int)key->v[3],
                               .kernel = (int)key->v[4],
                               .stride = (int)key->v[5],
                               .pad = (int)key->v[6]};
  ddp_status_t st = DDP_OK;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
  pool_impl_t *p = calloc(1, sizeof *p);
  if (!p) DDP_FAIL(DDP_ERR_OOM, "maxpool: cannot allocate a primitive cache entry");
  const dnnl_dims_t src_dims = {sh.N, sh.C, sh.H, sh.W};
  const dnnl_dims_t dst_dims = {sh.N, sh.C, ddp_pool_out_h(&sh), ddp_pool_out_w(&sh)};
  const dnnl_dims_t strides = {sh.stride, sh.stride}, kernel = {sh.kernel, sh.kernel};
  /* the bottom/right padding the last window really reaches (as for the
   * convolution, cpu_conv.c): never more than `pad`, less when the input's
   * last rows are in no window */
  const dnnl_dims_t pads = {sh.pad, sh.pad};
  const dnnl_dims_t pads_r = {(dst_dims[2] - 1) * sh.stride + sh.kernel - sh.H - sh.pad,
                              (dst_dims[3] - 1) * sh.stride + sh.kernel - sh.W - sh.pad};
  dnnl_memory_desc_t src_md, dst_md;
  DDP_DNNL_CHECK_GOTO(dnnl_memory_desc_init_by_tag(&src_md, 4, src_dims, dnnl_f32, dnnl_nhwc), st,
                      fail);
  DDP_DNNL_CHECK_GOTO(dnnl_memory_desc_init_by_tag(&dst_md, 4, dst_dims, dnnl_f32, dnnl_nhwc), st,
                      fail);
  dnnl_pooling_desc_t fwd_d, bwd_d;
  DDP_DNNL_CHECK_GOTO(
      dnnl_pooling_forward_desc_init(
          &fwd_d, op == POOL_FWD_INFERENCE ? dnnl_forward_inference : dnnl_forward_training,
          dnnl_pooling_max, &src_md, &dst_md, strides, kernel, pads, pads_r),
      st, fail);
  DDP_CHECK_GOTO(ddp_dnnl_user_scratchpad_attr(&attr), st, fail);
  if (op == POOL_BWD) {
    DDP_DNNL_CHECK_GOTO(dnnl_primitive_desc_create(&fwd_pd, &fwd_d, NULL, ddp_dnnl_engine(), NULL),
                        st, fail);
    DDP_DNNL_CHECK_GOTO(dnnl_pooling_backward_desc_init(&bwd_d, dnnl_pooling_max, &src_md, &dst_md,
                                                        strides, kernel, pads, pads_r),
                        st, fail);
    DDP_DNNL_CHECK_GOTO(dnnl_primitive_desc_create(&pd, &bwd_d, attr, ddp_dnnl_engine(), fwd_pd),
                        st, fail);
  } else {
    DDP_DNNL_CHECK_GOTO(dnnl_primitive_desc_create(&pd, &fwd_d, attr, ddp_dnnl_engine(), NULL), st,
                        fail);
  }
  DDP_CHECK_GOTO(ddp_dnnl_primitive(&p->prim, pd), st, fail);
  DDP_CHECK_GOTO(ddp_dnnl_scratchpad(&p->scratch, pd), st, fail);
  /* fwd: src in, dst out; bwd: diff_dst in, diff_src out. */
  DDP_CHECK_GOTO(ddp_dnnl_user_memory(&p->in, op == POOL_BWD ? &dst_md : &src_md), st, fail);
  DDP_CHECK_GOTO(ddp_dnnl_user_memory(&p->out, op == POOL_BWD ? &src_md : &dst_md), st, fail);
  const dnnl_memory_desc_t *ws_md = dnnl_primitive_desc_query_md(pd, dnnl_query_workspace_md, 0);
  p->ws_bytes = ws_md ? dnnl_memory_desc_get_size(ws_md) : 0;
  if (p->ws_bytes) DDP_CHECK_GOTO(ddp_dnnl_user_memory(&p->ws, ws_md), st, fail);
  ddp_dnnl_release_descs(pd, fwd_pd, attr);
  *impl = p;
  return DDP_OK;
fail:
  ddp_dnnl_release_descs(pd, fwd_pd, attr);
  pool_destroy(p);
  return st;
}

static ddp_status_t acquire(const ddp_backend_t *be, enum pool_op op, const ddp_pool_shape_t *sh,
                            pool_impl_t **p) {
  const ddp_dnnl_key_t key = {.op = op,
                              .v = {sh->N, sh->H, sh->W, sh->C, sh->kernel, sh->stride, sh->pad}};
  void *impl = NULL;
  const ddp_status_t st = ddp_dnnl_acquire(be, &key, pool_create, pool_destroy, &impl);
  *p = impl;
  return st;
}

/* Runs p with its two data arguments and, where it has one, the workspace. */
static ddp_status_t pool_execute(pool_impl_t *p, int in_arg, int out_arg) {
  dnnl_exec_arg_t args[4] = {{in_arg, p->in}, {out_arg, p->out}};
  int n = 2;
  if (p->ws) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WORKSPACE, p->ws};
  if (p->scratch) args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, p->scratch};
  return ddp_dnnl_execute(p->prim, n, args);
}

ddp_status_t ddp_cpu_maxpool_workspace_bytes(ddp_backend_t *be, ddp_dtype_t dt,
                                             const ddp_pool_shape_t *sh, size_t *bytes) {
  DDP_CHECK(ddp_cpu_dnnl_admit(be, dt, "maxpool_workspace_bytes"));
  DDP_CHECK(ddp_pool_check_shape("maxpool_workspace_bytes", sh));
  if (!bytes) DDP_FAIL(DDP_ERR_INVALID_ARG, "maxpool_workspace_bytes: bytes is required");
  pool_impl_t *p = NULL;
  ddp_status_t st = acquire(be, POOL_FWD_TRAINING, sh, &p);
  if (st == DDP_OK) *bytes = p->ws_bytes;
  ddp_dnnl_release();
  return st;
}

ddp_status_t ddp_cpu_maxpool_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, void *ws,
                                 const void *inp, const ddp_pool_shape_t *sh, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_dnnl_admit(be, dt, "maxpool_fwd"));
  DDP_CHECK(ddp_pool_check_shape("maxpool_fwd", sh));
  if (!out || !inp) DDP_FAIL(DDP_ERR_INVALID_ARG, "maxpool_fwd: out and inp are required");
  pool_impl_t *p = NULL;
  ddp_status_t st = DDP_OK;
  DDP_CHECK_GOTO(acquire(be, ws ? POOL_FWD_TRAINING : POOL_FWD_INFERENCE, sh, &p), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_point(p->in, inp), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_point(p->out, out), st, done);
  if (p->ws) DDP_CHECK_GOTO(ddp_dnnl_point(p->ws, ws), st, done);
  st = pool_execute(p, DNNL_ARG_SRC, DNNL_ARG_DST);
done:
  ddp_dnnl_release();
  return st;
}

ddp_status_t ddp_cpu_maxpool_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                 const void *ws, const ddp_pool_shape_t *sh, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_dnnl_admit(be, dt, "maxpool_bwd"));
  DDP_CHECK(ddp_pool_check_shape("maxpool_bwd", sh));
  if (!dinp || !dout || !ws)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "maxpool_bwd: dinp, dout and ws (the training forward's workspace) are required");
  pool_impl_t *p = NULL;
  ddp_status_t st = DDP_OK;
  DDP_CHECK_GOTO(acquire(be, POOL_BWD, sh, &p), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_point(p->in, dout), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_point(p->out, dinp), st, done);
  if (p->ws) DDP_CHECK_GOTO(ddp_dnnl_point(p->ws, ws), st, done);
  st = pool_execute(p, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC);
done:
  ddp_dnnl_release();
  return st;
}

#else /* !DDP_HAVE_DNNL: every op says that this build has no oneDNN */

ddp_status_t ddp_cpu_maxpool_workspace_bytes(ddp_backend_t *be, ddp_dtype_t dt,
                                             const ddp_pool_shape_t *sh, size_t *bytes) {
  return ddp_cpu_dnnl_admit(be, dt, "maxpool_workspace_bytes");
}

ddp_status_t ddp_cpu_maxpool_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, void *ws,
                                 const void *inp, const ddp_pool_shape_t *sh, ddp_stream_t s) {
  return ddp_cpu_dnnl_admit(be, dt, "maxpool_fwd");
}

ddp_status_t ddp_cpu_maxpool_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                 const void *ws, const ddp_pool_shape_t *sh, ddp_stream_t s) {
  return ddp_cpu_dnnl_admit(be, dt, "maxpool_bwd");
}

#endif
