/* Spatial batch normalization (NHWC fp32) on the CPU through oneDNN's batch
 * normalization primitive: training and inference forward, and the
 * backward to the input, gamma and beta (cpu_conv.h). Each is a cached
 * primitive (cpu_dnnl.h); the running statistics' momentum update is the
 * one loop written here, because oneDNN leaves it to the framework. */
#include <config.h>

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_conv.h"
#include "backend/conv_check.h"
#include "backend/cpu/cpu_dnnl.h"
#include "ddptrain/check.h"

#if DDP_HAVE_DNNL

enum bn_op { BN_FWD_TRAINING = 11, BN_FWD_INFERENCE = 12, BN_BWD = 13 };

static ddp_dnnl_key_t bn_key(enum bn_op op, const ddp_bn_shape_t *sh) {
  uint32_t eps_bits;
  memcpy(&eps_bits, &sh->eps, sizeof eps_bits);
  return (ddp_dnnl_key_t){.op = op, .v = {sh->N, sh->H, sh->W, sh->C, eps_bits}};
}

/* The most arguments one of the primitives takes (the backward: 9 and the
 * scratchpad). */
enum { BN_MAX_ARGS = 10 };

/* One cached batch norm: the primitive and a memory object per argument,
 * re-pointed at the caller's buffers each call; for the backward under
 * accumulate, room for the fresh dgamma and dbeta. */
typedef struct bn_impl {
  dnnl_primitive_t prim;
  dnnl_exec_arg_t args[BN_MAX_ARGS];
  int nargs;
  float *fresh;      /* 2C: dgamma then dbeta */
  float *zero_shift; /* C zeros (see bn_create) */
} bn_impl_t;

static void bn_destroy(void *impl) {
  bn_impl_t *b = impl;
  if (!b) return;
  if (b->prim) dnnl_primitive_destroy(b->prim);
  for (int i = 0; i < b->nargs; ++i)
    if (b->args[i].memory) dnnl_memory_destroy(b->args[i].memory);
  free(b->fresh);
  free(b->zero_shift);
  free(b);
}

/* Adds a memory object for argument `arg` in the layout pd expects for it
 * (NHWC for data, as the descriptor said; a plain vector of C for the
 * statistics, gamma and beta). */
static ddp_status_t add_arg(bn_impl_t *b, const_dnnl_primitive_desc_t pd, int arg) {
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, arg);
  if (!md) DDP_FAIL(DDP_ERR_INTERNAL, "batch_norm: oneDNN has no memory for argument %d", arg);
  b->args[b->nargs] = (dnnl_exec_arg_t){arg, NULL};
  DDP_CHECK(ddp_dnnl_user_memory(&b->args[b->nargs].memory, md));
  ++b->nargs;
  return DDP_OK;
}

/* Points argument `arg` of b at buf. */
static ddp_status_t point(bn_impl_t *b, int arg, const void *buf) {
  for (int i = 0; i < b->nargs; ++i)
    if (b->args[i].arg == arg) return ddp_dnnl_point(b->args[i].memory, buf);
  DDP_FAIL(DDP_ERR_INTERNAL, "batch_norm: no argument %d in this primitive", arg);
}

static ddp_status_t bn_create(const ddp_dnnl_key_t *key, void **impl) {
  const int op = key->op;
  const int N = (int)key->v[0], H = (int)key->v[1], W = (int)key->v[2], C = (int)key->v[3];
  const uint32_t eps_bits = (uint32_t)key->v[4];
  float eps;
  memcpy(&eps, &eps_bits, sizeof eps);
  ddp_status_t st = DDP_OK;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
  bn_impl_t *b = calloc(1, sizeof *b);
  if (!b) DDP_FAIL(DDP_ERR_OOM, "batch_norm: cannot allocate a primitive cache entry");

  const dnnl_dims_t dims = {N, C, H, W};
  dnnl_memory_desc_t data_md;
  DDP_DNNL_CHECK_GOTO(dnnl_memory_desc_init_by_tag(&data_md, 4, dims, dnnl_f32, dnnl_nhwc), st,
                      fail);
  /* Separate scale and shift (gamma, beta), not the packed scaleshift
   * tensor: they are two parameters of the model. */
  const unsigned flags = dnnl_use_scale | dnnl_use_shift;
  dnnl_batch_normalization_desc_t fwd_d, d;
  DDP_DNNL_CHECK_GOTO(dnnl_batch_normalization_forward_desc_init(&fwd_d, dnnl_forward_training,
                                                                 &data_md, eps, flags),
                      st, fail);
  DDP_CHECK_GOTO(ddp_dnnl_user_scratchpad_attr(&attr), st, fail);
  static const int fwd_args[] = {DNNL_ARG_SRC,      DNNL_ARG_DST,   DNNL_ARG_MEAN,
                                 DNNL_ARG_VARIANCE, DNNL_ARG_SCALE, DNNL_ARG_SHIFT};
  static const int bwd_args[] = {DNNL_ARG_SRC,        DNNL_ARG_MEAN,       DNNL_ARG_VARIANCE,
                                 DNNL_ARG_DIFF_DST,   DNNL_ARG_SCALE,      DNNL_ARG_DIFF_SRC,
                                 DNNL_ARG_DIFF_SCALE, DNNL_ARG_DIFF_SHIFT, DNNL_ARG_SHIFT};
  const int *want = fwd_args;
  int nwant = (int)(sizeof fwd_args / sizeof *fwd_args);
  if (op == BN_FWD_TRAINING) {
    DDP_DNNL_CHECK_GOTO(dnnl_primitive_desc_create(&pd, &fwd_d, attr, ddp_dnnl_engine(), NULL), st,
                        fail);
  } else if (op == BN_FWD_INFERENCE) {
    /* Global statistics: mean and variance become inputs (the running
     * ones) instead of outputs. */
    DDP_DNNL_CHECK_GOTO(
        dnnl_batch_normalization_forward_desc_init(&d, dnnl_forward_inference, &data_md, eps,
                                                   flags | dnnl_use_global_stats),
        st, fail);
    DDP_DNNL_CHECK_GOTO(dnnl_primitive_desc_create(&pd, &d, attr, ddp_dnnl_engine(), NULL), st,
                        fail);
  } else {
    DDP_DNNL_CHECK_GOTO(dnnl_primitive_desc_create(&fwd_pd, &fwd_d, NULL, ddp_dnnl_engine(), NULL),
                        st, fail);
    DDP_DNNL_CHECK_GOTO(dnnl_batch_normalization_backward_desc_init(&d, dnnl_backward, &data_md,
                                                                    &data_md, eps, flags),
                        st, fail);
    DDP_DNNL_CHECK_GOTO(dnnl_primitive_desc_create(&pd, &d, attr, ddp_dnnl_engine(), fwd_pd), st,
                        fail);
    want = bwd_args;
    nwant = (int)(sizeof bwd_args / sizeof *bwd_args);
    b->fresh = malloc(2 * (size_t)C * sizeof *b->fresh);
    b->zero_shift = calloc((size_t)C, sizeof *b->zero_shift);
    if (!b->fresh || !b->zero_shift)
      DDP_FAIL_GOTO(st, DDP_ERR_OOM, fail, "batch_norm: cannot allocate %d floats", 3 * C);
  }
  DDP_CHECK_GOTO(ddp_dnnl_primitive(&b->prim, pd), st, fail);
  for (int i = 0; i < nwant; ++i) DDP_CHECK_GOTO(add_arg(b, pd, want[i]), st, fail);
  /* oneDNN 2.6 insists on a shift argument in the backward whenever
   * use_shift is set, although no gradient depends on beta: a zero vector
   * of the entry's own, bound once. */
  if (op == BN_BWD) DDP_CHECK_GOTO(point(b, DNNL_ARG_SHIFT, b->zero_shift), st, fail);
  dnnl_memory_t scratch = NULL;
  DDP_CHECK_GOTO(ddp_dnnl_scratchpad(&scratch, pd), st, fail);
  if (scratch) b->args[b->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, scratch};
  ddp_dnnl_release_descs(pd, fwd_pd, attr);
  *impl = b;
  return DDP_OK;
fail:
  ddp_dnnl_release_descs(pd, fwd_pd, attr);
  bn_destroy(b);
  return st;
}

static ddp_status_t acquire(const ddp_backend_t *be, enum bn_op op, const ddp_bn_shape_t *sh,
                            bn_impl_t **b) {
  const ddp_dnnl_key_t key = bn_key(op, sh);
  void *impl = NULL;
  const ddp_status_t st = ddp_dnnl_acquire(be, &key, bn_create, bn_destroy, &impl);
  *b = impl;
  return st;
}

ddp_status_t ddp_cpu_bn_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_mean,
                            float *save_var, float *running_mean, float *running_var,
                            const void *inp, const float *gamma, const float *beta,
                            const ddp_bn_shape_t *sh, int training, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_dnnl_admit(be, dt, "batch_norm_fwd"));
  DDP_CHECK(ddp_bn_check_shape("batch_norm_fwd", sh, training));
  if (!out || !inp || !gamma || !beta || !running_mean || !running_var)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "batch_norm_fwd: out, inp, gamma, beta, running_mean and running_var are required");
  if (training && (!save_mean || !save_var))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "batch_norm_fwd: training needs save_mean and save_var");
  bn_impl_t *b = NULL;
  ddp_status_t st = DDP_OK;
  DDP_CHECK_GOTO(acquire(be, training ? BN_FWD_TRAINING : BN_FWD_INFERENCE, sh, &b), st, done);
  DDP_CHECK_GOTO(point(b, DNNL_ARG_SRC, inp), st, done);
  DDP_CHECK_GOTO(point(b, DNNL_ARG_DST, out), st, done);
  DDP_CHECK_GOTO(point(b, DNNL_ARG_MEAN, training ? save_mean : running_mean), st, done);
  DDP_CHECK_GOTO(point(b, DNNL_ARG_VARIANCE, training ? save_var : running_var), st, done);
  DDP_CHECK_GOTO(point(b, DNNL_ARG_SCALE, gamma), st, done);
  DDP_CHECK_GOTO(point(b, DNNL_ARG_SHIFT, beta), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_execute(b->prim, b->nargs, b->args), st, done);
  if (training) {
    const double M = (double)sh->N * sh->H * sh->W, m = sh->momentum;
    for (int c = 0; c < sh->C; ++c) {
      running_mean[c] = (float)((1 - m) * running_mean[c] + m * save_mean[c]);
      running_var[c] = (float)((1 - m) * running_var[c] + m * save_var[c] * (M / (M - 1)));
    }
  }
done:
  ddp_dnnl_release();
  return st;
}

ddp_status_t ddp_cpu_bn_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                            float *dbeta, const void *dout, const void *inp, const float *gamma,
                            const float *save_mean, const float *save_var, const ddp_bn_shape_t *sh,
                            int accumulate, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_dnnl_admit(be, dt, "batch_norm_bwd"));
  DDP_CHECK(ddp_bn_check_shape("batch_norm_bwd", sh, 1));
  if (!dinp || !dgamma || !dbeta || !dout || !inp || !gamma || !save_mean || !save_var)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "batch_norm_bwd: dinp, dgamma, dbeta, dout, inp, gamma, save_mean and save_var are "
             "required");
  bn_impl_t *b = NULL;
  ddp_status_t st = DDP_OK;
  DDP_CHECK_GOTO(acquire(be, BN_BWD, sh, &b), st, done);
  /* oneDNN overwrites dgamma and dbeta; under accumulate they land in the
   * entry's buffer and are added. */
  float *dg = accumulate ? b->fresh : dgamma, *db = accumulate ? b->fresh + sh->C : dbeta;
  DDP_CHECK_GOTO(point(b, DNNL_ARG_SRC, inp), st, done);
  DDP_CHECK_GOTO(point(b, DNNL_ARG_MEAN, save_mean), st, done);
  DDP_CHECK_GOTO(point(b, DNNL_ARG_VARIANCE, save_var), st, done);
  DDP_CHECK_GOTO(point(b, DNNL_ARG_DIFF_DST, dout), st, done);
  DDP_CHECK_GOTO(point(b, DNNL_ARG_SCALE, gamma), st, done);
  DDP_CHECK_GOTO(point(b, DNNL_ARG_DIFF_SRC, dinp), st, done);
  DDP_CHECK_GOTO(point(b, DNNL_ARG_DIFF_SCALE, dg), st, done);
  DDP_CHECK_GOTO(point(b, DNNL_ARG_DIFF_SHIFT, db), st, done);
  DDP_CHECK_GOTO(ddp_dnnl_execute(b->prim, b->nargs, b->args), st, done);
  if (accumulate)
    for (int c = 0; c < sh->C; ++c) {
      dgamma[c] += dg[c];
      dbeta[c] += db[c];
    }
done:
  ddp_dnnl_release();
  return st;
}

ddp_status_t ddp_cpu_bn_prepare(ddp_backend_t *be, ddp_dtype_t dt, const ddp_bn_shape_t *sh) {
  DDP_CHECK(ddp_cpu_dnnl_admit(be, dt, "batch_norm_prepare"));
  DDP_CHECK(ddp_bn_check_shape("batch_norm_prepare", sh, 1));
  ddp_status_t st = DDP_OK;
  for (enum bn_op op = BN_FWD_TRAINING; op <= BN_BWD && st == DDP_OK; ++op) {
    bn_impl_t *b = NULL;
    st = acquire(be, op, sh, &b);
    ddp_dnnl_release();
  }
  return st;
}

#else /* !DDP_HAVE_DNNL: every op says that this build has no oneDNN */

ddp_status_t ddp_cpu_bn_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_mean,
                            float *save_var, float *running_mean, float *running_var,
                            const void *inp, const float *gamma, const float *beta,
                            const ddp_bn_shape_t *sh, int training, ddp_stream_t s) {
  return ddp_cpu_dnnl_admit(be, dt, "batch_norm_fwd");
}

ddp_status_t ddp_cpu_bn_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                            float *dbeta, const void *dout, const void *inp, const float *gamma,
                            const float *save_mean, const float *save_var, const ddp_bn_shape_t *sh,
                            int accumulate, ddp_stream_t s) {
  return ddp_cpu_dnnl_admit(be, dt, "batch_norm_bwd");
}

ddp_status_t ddp_cpu_bn_prepare(ddp_backend_t *be, ddp_dtype_t dt, const ddp_bn_shape_t *sh) {
  return ddp_cpu_dnnl_admit(be, dt, "batch_norm_prepare");
}

#endif
