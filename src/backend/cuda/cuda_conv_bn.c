/* Batch normalization on the GPU (the conv table's bn_fwd, bn_relu_fwd,
 * bn_bwd and bn_prepare; contracts in ddptrain/conv.h): cuDNN for fp32 and
 * fp16, the --sync-bn kernels of ours (kernels/conv_ops.cu, bn_reduce.cu) for bf16, where
 * bn_relu_fwd's ReLU (and residual add) run in the apply's pass; after
 * cuDNN they are our ReLU kernels.
 *
 * cuDNN's mode is CUDNN_BATCHNORM_SPATIAL, per channel over N*H*W, on NHWC
 * tensors with fp32 parameters and statistics. SPATIAL_PERSISTENT is
 * faster on NHWC half tensors, but cuDNN documents that it may overflow on
 * inputs of large magnitude; SPATIAL is the general path
 * (tests/check_gpu_conv.c also checks that its backward repeats bit for
 * bit). cuDNN's conventions against the contract: its
 * exponentialAverageFactor is the contract's momentum (running = factor *
 * batch + (1 - factor) * running), and it moves the running variance by the
 * unbiased batch variance, M / (M - 1) times the biased one it normalises
 * with, as PyTorch does; the saves are the batch mean and the inverse
 * standard deviation 1 / sqrt(var + eps), which only this backend's bn_bwd
 * reads. The parameter gradients' accumulate is cuDNN's betaParamDiff.
 *
 * bf16 stays off cuDNN's legacy batch norm, as in PyTorch, which never
 * calls it for bf16; so do batches beyond the sizes PyTorch hands it (N >
 * 880801 training, 65535 inference). Those run our kernels: one
 * fixed-order pass for the statistics (sums shifted by a value of each
 * channel, ddp_cuda_bn_stats), the apply, and in the backward one
 * reduction and the apply (bn_relu_bwd: both with the ReLU's mask
 * recomputed from the input, so no ReLU pass);
 * they save the same mean and inverse std, so either path's backward reads
 * either's saves. The parts' partial sums, the two sums and the variance
 * live in the table's shared workspace, which bn_prepare sizes, and the
 * reductions' arrival counters in a small buffer of their own. */
#include <config.h>

#include <cudnn.h>
#include <limits.h>
#include <math.h>

#include "backend/cuda/cuda_conv.h"
#include "backend/cuda/cuda_impl.h"
#include "conv_ops.h"
#include "core/foreign_check.h"

#define BN_MODE CUDNN_BATCHNORM_SPATIAL

/* cuDNN for this call, or our kernels (see the file comment). */
static int use_cudnn(ddp_dtype_t dt, const ddp_bn_shape_t *sh, int training) {
  if (dt == DDP_DTYPE_BF16) return 0;
  return training ? sh->N <= 880801 : sh->N <= 65535;
}

/* Workspace floats of our path: the reductions' partials, 2C sums, C var. */
static size_t own_floats(const ddp_bn_shape_t *sh) {
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  return ddp_cuda_bn_scratch_floats(M, sh->C) + 3 * (size_t)sh->C;
}

typedef struct own_ws {
  float *partials, *sums, *var;
  unsigned *counters; /* the reductions' arrival counters (apart from the workspace) */
} own_ws_t;

static ddp_status_t own_workspace(ddp_backend_t *be, const ddp_bn_shape_t *sh, own_ws_t *w) {
  void *ws = NULL;
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  DDP_CHECK(ddp_cuda_conv_bn_counters(be, ddp_cuda_bn_counters_needed(M, sh->C), &w->counters));
  DDP_CHECK(ddp_cuda_conv_workspace(be, own_floats(sh) * sizeof(float), &ws));
  w->partials = ws;
  w->sums = w->partials + ddp_cuda_bn_scratch_floats(M, sh->C);
  w->var = w->sums + 2 * (size_t)sh->C;
  return DDP_OK;
}

/* Our path's forward; relu / residual: the apply's epilogue (bn_relu_fwd). */
static ddp_status_t own_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_mean,
                            float *save_istd, float *running_mean, float *running_var,
                            const void *inp, const float *gamma, const float *beta,
                            const ddp_bn_shape_t *sh, int training, int relu, const void *residual,
                            cudaStream_t cs) {
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  const int C = sh->C;
  if (!training)
    return ddp_cuda_bn_apply_act_fwd(dt, out, NULL, NULL, inp, running_mean, running_var, NULL,
                                     gamma, beta, sh->eps, 0.0f, 1.0f, M, C, relu, residual, cs);
  own_ws_t w;
  DDP_CHECK(own_workspace(be, sh, &w));
  /* one read of inp for the statistics (the --sync-bn parts need two: the
   * mean is all-reduced before the centred squares) */
  DDP_CHECK(ddp_cuda_bn_stats(dt, save_mean, w.var, save_istd, running_mean, running_var, w.sums,
                              w.partials, w.counters, inp, M, C, sh->eps, sh->momentum, cs));
  return ddp_cuda_bn_apply_act_fwd(dt, out, NULL, NULL, inp, save_mean, w.var, save_istd, gamma,
                                   beta, sh->eps, 0.0f, 1.0f, M, C, relu, residual, cs);
}

/* Our path's backward. relu (may be NULL): dout masked by the forward's
 * ReLU, recomputed from inp in both passes (bn_relu_bwd without a
 * residual). mask_out (may be NULL): the forward's ReLU output; the first
 * pass masks dout by it and writes the masked gradient over dout, which
 * the apply then reads (bn_relu_bwd with a residual); only then is dout
 * written. */
static ddp_status_t own_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                            float *dbeta, void *dout, const void *inp, const float *gamma,
                            const float *save_mean, const float *save_istd,
                            const ddp_bn_shape_t *sh, int accumulate,
                            const ddp_cuda_bn_relu_t *relu, const void *mask_out, cudaStream_t cs) {
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  own_ws_t w;
  DDP_CHECK(own_workspace(be, sh, &w));
  /* the reduction's last blocks write dgamma and dbeta from its sums */
  const ddp_cuda_bn_grads_t grads = {dgamma, dbeta, save_istd, accumulate};
  if (relu)
    DDP_CHECK(ddp_cuda_bn_reduce_relu(dt, w.sums, w.partials, w.counters, inp, dout, save_mean,
                                      relu, &grads, M, sh->C, cs));
  else if (mask_out)
    DDP_CHECK(ddp_cuda_bn_reduce_mask_out(dt, w.sums, w.partials, w.counters, inp, dout, mask_out,
                                          save_mean, &grads, M, sh->C, cs));
  else
    DDP_CHECK(ddp_cuda_bn_reduce(dt, w.sums, w.partials, w.counters, inp, dout, save_mean, &grads,
                                 M, sh->C, cs));
  return ddp_cuda_bn_apply_bwd(dt, dinp, NULL, NULL, dout, inp, save_mean, NULL, save_istd, gamma,
                               w.sums, w.sums, sh->eps, (double)M, M, sh->C, accumulate, relu, cs);
}

/* Binds the handle to the stream and describes x (NHWC in dt) and the
 * per-channel parameters (1,C,1,1 fp32, as cuDNN derives them). */
static ddp_status_t describe(ddp_backend_t *be, ddp_dtype_t dt, const ddp_bn_shape_t *sh,
                             cudaStream_t stream, cudnnHandle_t *h) {
  DDP_CHECK(ddp_cuda_conv_handle(be, stream, h));
  const cudnnTensorDescriptor_t x = ddp_cuda_conv_bn_x_desc(be);
  DDP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, ddp_cuda_cudnn_dtype(dt), sh->N,
                                             sh->C, sh->H, sh->W));
  DDP_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(ddp_cuda_conv_bn_param_desc(be), x, BN_MODE));
  return DDP_OK;
}

/* bn_fwd and bn_relu_fwd: cuDNN's batch norm followed by our ReLU kernel,
 * or our batch norm with the ReLU in its apply's epilogue. */
static ddp_status_t bn_fwd_act(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_a,
                               float *save_b, float *running_mean, float *running_var,
                               const void *inp, const float *gamma, const float *beta, int relu,
                               const void *residual, const ddp_bn_shape_t *sh, int training,
                               ddp_stream_t s) {
  const char *op = relu ? "batch_norm_relu_fwd" : "batch_norm_fwd";
  DDP_CHECK(ddp_cuda_conv_check_dt(op, dt));
  DDP_CHECK(ddp_bn_check_shape(op, sh, training));
  if (!out || !inp || !gamma || !beta || !running_mean || !running_var)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "%s: out, inp, gamma, beta, running_mean and running_var are required", op);
  if (training && (!save_a || !save_b))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: training needs save_a and save_b", op);
  if (relu && (out == inp || (residual && out == residual)))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: out may not alias inp or residual", op);
  const cudaStream_t cs = ddp_cuda_stream(be, s);
  if (!use_cudnn(dt, sh, training))
    return own_fwd(be, dt, out, save_a, save_b, running_mean, running_var, inp, gamma, beta, sh,
                   training, relu, residual, cs);
  cudnnHandle_t h;
  DDP_CHECK(describe(be, dt, sh, cs, &h));
  const cudnnTensorDescriptor_t x = ddp_cuda_conv_bn_x_desc(be);
  const cudnnTensorDescriptor_t pd = ddp_cuda_conv_bn_param_desc(be);
  const float one = 1.0f, zero = 0.0f;
  if (training)
    DDP_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
        h, BN_MODE, &one, &zero, x, inp, x, out, pd, gamma, beta, (double)sh->momentum,
        running_mean, running_var, (double)sh->eps, save_a, save_b));
  else
    DDP_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(h, BN_MODE, &one, &zero, x, inp, x, out,
                                                            pd, gamma, beta, running_mean,
                                                            running_var, (double)sh->eps));
  const size_t n = (size_t)sh->N * sh->H * sh->W * sh->C;
  if (residual) return ddp_cuda_add_relu_fwd(dt, out, out, residual, n, cs);
  if (relu) return ddp_cuda_relu_fwd(dt, out, out, n, cs);
  return DDP_OK;
}

ddp_status_t ddp_cuda_bn_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_a,
                             float *save_b, float *running_mean, float *running_var,
                             const void *inp, const float *gamma, const float *beta,
                             const ddp_bn_shape_t *sh, int training, ddp_stream_t s) {
  return bn_fwd_act(be, dt, out, save_a, save_b, running_mean, running_var, inp, gamma, beta, 0,
                    NULL, sh, training, s);
}

ddp_status_t ddp_cuda_bn_relu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_a,
                                  float *save_b, float *running_mean, float *running_var,
                                  const void *inp, const float *gamma, const float *beta,
                                  const void *residual, const ddp_bn_shape_t *sh, int training,
                                  ddp_stream_t s) {
  return bn_fwd_act(be, dt, out, save_a, save_b, running_mean, running_var, inp, gamma, beta, 1,
                    residual, sh, training, s);
}

ddp_status_t ddp_cuda_bn_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                             float *dbeta, const void *dout, const void *inp, const float *gamma,
                             const float *save_a, const float *save_b, const ddp_bn_shape_t *sh,
                             int accumulate, ddp_stream_t s) {
  DDP_CHECK(ddp_cuda_conv_check_dt("batch_norm_bwd", dt));
  DDP_CHECK(ddp_bn_check_shape("batch_norm_bwd", sh, 1));
  if (!dinp || !dgamma || !dbeta || !dout || !inp || !gamma || !save_a || !save_b)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "batch_norm_bwd: dinp, dgamma, dbeta, dout, inp, gamma, save_a and save_b are "
             "required");
  const cudaStream_t cs = ddp_cuda_stream(be, s);
  if (!use_cudnn(dt, sh, 1))
    return own_bwd(be, dt, dinp, dgamma, dbeta, (void *)dout, inp, gamma, save_a, save_b, sh,
                   accumulate, NULL, NULL, cs);
  cudnnHandle_t h;
  DDP_CHECK(describe(be, dt, sh, cs, &h));
  const cudnnTensorDescriptor_t x = ddp_cuda_conv_bn_x_desc(be);
  const cudnnTensorDescriptor_t pd = ddp_cuda_conv_bn_param_desc(be);
  const float one = 1.0f, zero = 0.0f;
  DDP_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      h, BN_MODE, &one, &zero, &one, accumulate ? &one : &zero, x, inp, x, dout, x, dinp, pd, gamma,
      dgamma, dbeta, (double)sh->eps, save_a, save_b));
  return DDP_OK;
}

/* Where the forward was ours (use_cudnn's choice for training, the same
 * as bn_relu_fwd's): without a residual, the mask is recomputed from inp,
 * the saved mean and inverse std, gamma and beta, in both passes of the
 * backward, so relu_bwd's pass (a read of dout and out, a write) is gone
 * and out is never read; with one, the first pass reads out and writes the
 * masked gradient over dout, one read of dout and one write fewer than
 * relu_bwd's pass. After cuDNN's forward, whose arithmetic we cannot
 * repeat, relu_bwd masks dout in place and cuDNN's backward follows. */
ddp_status_t ddp_cuda_bn_relu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                                  float *dbeta, void *dout, const void *inp, const void *out,
                                  const float *gamma, const float *beta, const float *save_a,
                                  const float *save_b, int residual, const ddp_bn_shape_t *sh,
                                  int accumulate, ddp_stream_t s) {
  DDP_CHECK(ddp_cuda_conv_check_dt("batch_norm_relu_bwd", dt));
  DDP_CHECK(
      ddp_bn_relu_bwd_check(dinp, dgamma, dbeta, dout, inp, out, gamma, beta, save_a, save_b, sh));
  const cudaStream_t cs = ddp_cuda_stream(be, s);
  if (!use_cudnn(dt, sh, 1)) {
    const ddp_cuda_bn_relu_t relu = {.istd = save_b, .gamma = gamma, .beta = beta};
    return own_bwd(be, dt, dinp, dgamma, dbeta, dout, inp, gamma, save_a, save_b, sh, accumulate,
                   residual ? NULL : &relu, residual ? out : NULL, cs);
  }
  DDP_CHECK(ddp_cuda_relu_bwd(dt, dout, dout, out, (size_t)sh->N * sh->H * sh->W * sh->C, cs));
  return ddp_cuda_bn_bwd(be, dt, dinp, dgamma, dbeta, dout, inp, gamma, save_a, save_b, sh,
                         accumulate, s);
}

/* cuDNN's batch norm needs no workspace and no search; preparing creates
 * the handle (loading cuDNN) and sizes the shared workspace for our path
 * and the --sync-bn parts of the same shape, so neither allocates in the
 * loop. */
ddp_status_t ddp_cuda_bn_prepare(ddp_backend_t *be, ddp_dtype_t dt, const ddp_bn_shape_t *sh) {
  DDP_CHECK(ddp_cuda_conv_check_dt("batch_norm_prepare", dt));
  DDP_CHECK(ddp_bn_check_shape("batch_norm_prepare", sh, 0));
  void *ws = NULL;
  unsigned *counters = NULL;
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  DDP_CHECK(ddp_cuda_conv_bn_counters(be, ddp_cuda_bn_counters_needed(M, sh->C), &counters));
  return ddp_cuda_conv_workspace(be, own_floats(sh) * sizeof(float), &ws);
}
