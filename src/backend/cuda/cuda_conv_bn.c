/* Batch normalization on the GPU through cuDNN (the conv table's bn_fwd,
 * bn_bwd and bn_prepare; contracts in ddptrain/conv.h).
 *
 * Mode: CUDNN_BATCHNORM_SPATIAL, per channel over N*H*W, on NHWC tensors of
 * any of the three storage types with fp32 parameters and statistics.
 * SPATIAL_PERSISTENT is faster on NHWC half tensors, but cuDNN documents
 * that it may overflow on inputs of large magnitude; SPATIAL is the general
 * path, exact to fp32 summation for any input (tests/check_gpu_conv.c also
 * checks that its backward repeats bit for bit).
 *
 * cuDNN's conventions against the contract: its exponentialAverageFactor
 * is the contract's momentum (running = factor * batch + (1 - factor) *
 * running), and it moves the running variance by the unbiased batch
 * variance, M / (M - 1) times the biased one it normalises with, as
 * PyTorch does; the saves are the batch mean and the inverse standard
 * deviation 1 / sqrt(var + eps), which only this backend's bn_bwd reads.
 * The parameter gradients' accumulate is cuDNN's betaParamDiff. */
#include <config.h>

#include <cudnn.h>
#include <limits.h>
#include <math.h>

#include "backend/cuda/cuda_conv.h"
#include "backend/cuda/cuda_impl.h"
#include "conv_ops.h"
#include "core/foreign_check.h"

#define BN_MODE CUDNN_BATCHNORM_SPATIAL

/* The CPU twin's limits (src/backend/cpu/cpu_conv_bn.c), in its words. */
ddp_status_t ddp_cuda_bn_check_shape(const char *op, const ddp_bn_shape_t *sh, int training) {
  if (!sh) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: no shape given", op);
  if (sh->N < 1 || sh->H < 1 || sh->W < 1 || sh->C < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: every size must be positive (N=%d H=%d W=%d C=%d)", op,
             sh->N, sh->H, sh->W, sh->C);
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  if (M * sh->C > INT_MAX)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: %lld elements exceed %d", op, (long long)(M * sh->C),
             INT_MAX);
  if (training && M < 2)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: training needs at least 2 values per channel (N*H*W = %lld)",
             op, (long long)M);
  if (!(sh->eps > 0 && isfinite(sh->eps)))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: eps %g must be positive and finite", op, (double)sh->eps);
  if (!(sh->momentum >= 0 && sh->momentum <= 1))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: momentum %g must be in [0, 1]", op, (double)sh->momentum);
  return DDP_OK;
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

ddp_status_t ddp_cuda_bn_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_a,
                             float *save_b, float *running_mean, float *running_var,
                             const void *inp, const float *gamma, const float *beta,
                             const ddp_bn_shape_t *sh, int training, ddp_stream_t s) {
  DDP_CHECK(ddp_cuda_conv_check_dt("batch_norm_fwd", dt));
  DDP_CHECK(ddp_cuda_bn_check_shape("batch_norm_fwd", sh, training));
  if (!out || !inp || !gamma || !beta || !running_mean || !running_var)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "batch_norm_fwd: out, inp, gamma, beta, running_mean and running_var are required");
  if (training && (!save_a || !save_b))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "batch_norm_fwd: training needs save_a and save_b");
  cudnnHandle_t h;
  DDP_CHECK(describe(be, dt, sh, ddp_cuda_stream(be, s), &h));
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
  return DDP_OK;
}

ddp_status_t ddp_cuda_bn_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                             float *dbeta, const void *dout, const void *inp, const float *gamma,
                             const float *save_a, const float *save_b, const ddp_bn_shape_t *sh,
                             int accumulate, ddp_stream_t s) {
  DDP_CHECK(ddp_cuda_conv_check_dt("batch_norm_bwd", dt));
  DDP_CHECK(ddp_cuda_bn_check_shape("batch_norm_bwd", sh, 1));
  if (!dinp || !dgamma || !dbeta || !dout || !inp || !gamma || !save_a || !save_b)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "batch_norm_bwd: dinp, dgamma, dbeta, dout, inp, gamma, save_a and save_b are "
             "required");
  cudnnHandle_t h;
  DDP_CHECK(describe(be, dt, sh, ddp_cuda_stream(be, s), &h));
  const cudnnTensorDescriptor_t x = ddp_cuda_conv_bn_x_desc(be);
  const cudnnTensorDescriptor_t pd = ddp_cuda_conv_bn_param_desc(be);
  const float one = 1.0f, zero = 0.0f;
  DDP_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      h, BN_MODE, &one, &zero, &one, accumulate ? &one : &zero, x, inp, x, dout, x, dinp, pd, gamma,
      dgamma, dbeta, (double)sh->eps, save_a, save_b));
  return DDP_OK;
}

/* cuDNN's batch norm needs no workspace and no search; preparing creates
 * the handle (loading cuDNN) and sizes the shared workspace for the
 * --sync-bn parts of the same shape, so neither allocates in the loop. */
ddp_status_t ddp_cuda_bn_prepare(ddp_backend_t *be, ddp_dtype_t dt, const ddp_bn_shape_t *sh) {
  DDP_CHECK(ddp_cuda_conv_check_dt("batch_norm_prepare", dt));
  DDP_CHECK(ddp_cuda_bn_check_shape("batch_norm_prepare", sh, 0));
  void *ws = NULL;
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  return ddp_cuda_conv_workspace(be, ddp_cuda_bn_scratch_floats(M, sh->C) * sizeof(float), &ws);
}
