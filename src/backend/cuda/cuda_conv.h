/* The CUDA backend's conv table (ddptrain/conv.h) and what its three files
 * share (internal).
 *
 * cuda_conv.c holds the per-backend state (a cuDNN handle, the autotuned
 * convolution plans, one workspace) and the convolutions; cuda_conv_bn.c
 * batch normalization through cuDNN; cuda_conv_ops.c the ops on our own
 * kernels (kernels/conv_ops.cu, bn_reduce.cu) and the table itself. Built only with
 * cuDNN: without it the CUDA backend has no conv table. */
#ifndef DDPTRAIN_CUDA_CONV_H
#define DDPTRAIN_CUDA_CONV_H

#include <config.h>

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "backend/conv_check.h"
#include "ddptrain/conv.h"

extern const ddp_conv_ops_t ddp_conv_cuda_ops;

/* ---- shared state (cuda_conv.c) --------------------------------------- */
/* The cuDNN handle of the backend, created on first use (loading cuDNN
 * costs a GPT run nothing) and bound to `stream`. */
ddp_status_t ddp_cuda_conv_handle(ddp_backend_t *be, cudaStream_t stream, cudnnHandle_t *out);
/* Tensor descriptors the batch-norm ops set per call (x and the per-channel
 * parameters); valid once ddp_cuda_conv_handle succeeded. */
cudnnTensorDescriptor_t ddp_cuda_conv_bn_x_desc(ddp_backend_t *be);
cudnnTensorDescriptor_t ddp_cuda_conv_bn_param_desc(ddp_backend_t *be);
/* The shared workspace, grown to at least `bytes` (never shrunk). Growing
 * allocates from the caching allocator; prepares grow it to the largest
 * need, so after warm-up this only returns the pointer. */
ddp_status_t ddp_cuda_conv_workspace(ddp_backend_t *be, size_t bytes, void **ws);
/* At least n zeroed arrival counters for the batch-norm reductions
 * (ddp_cuda_bn_counters_needed), apart from the workspace; grown like it. */
ddp_status_t ddp_cuda_conv_bn_counters(ddp_backend_t *be, size_t n, unsigned **out);
/* The conv table's release: frees plans, descriptors, workspace, handle. */
void ddp_cuda_conv_release(ddp_backend_t *be);

/* Counters for tests and logs: cudnnFind*AlgorithmEx calls made (each
 * measures every candidate algorithm of one op and shape), and the
 * workspace's current size. */
uint64_t ddp_cuda_conv_find_calls(ddp_backend_t *be);
size_t ddp_cuda_conv_workspace_size(ddp_backend_t *be);

/* ---- argument checks, with the CPU twins' messages -------------------- */
/* fp32, bf16 or fp16; anything else DDP_ERR_UNSUPPORTED naming op. */
ddp_status_t ddp_cuda_conv_check_dt(const char *op, ddp_dtype_t dt);
/* The shape checks are backend/conv_check.h's, shared with the CPU. */
/* cuDNN's name for dt (a checked dt). */
cudnnDataType_t ddp_cuda_cudnn_dtype(ddp_dtype_t dt);

/* ---- the ops (contracts in ddptrain/conv.h) --------------------------- */
ddp_status_t ddp_cuda_conv_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                               const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s);
ddp_status_t ddp_cuda_conv_bwd_data(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                    const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s);
ddp_status_t ddp_cuda_conv_bwd_weights(ddp_backend_t *be, ddp_dtype_t dt, float *dw,
                                       const void *dout, const void *inp,
                                       const ddp_conv_shape_t *sh, int accumulate, ddp_stream_t s);
ddp_status_t ddp_cuda_conv_bwd_data_add(ddp_backend_t *be, ddp_dtype_t dt, void *dinp,
                                        const void *dout, const void *w, const ddp_conv_shape_t *sh,
                                        ddp_stream_t s);
ddp_status_t ddp_cuda_conv_prepare(ddp_backend_t *be, ddp_dtype_t dt, const ddp_conv_shape_t *sh);

/* The conv table's conv_algos_reload (ddptrain/conv.h). */
ddp_status_t ddp_cuda_conv_algos_reload(ddp_backend_t *be);
ddp_status_t ddp_cuda_bn_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_a,
                             float *save_b, float *running_mean, float *running_var,
                             const void *inp, const float *gamma, const float *beta,
                             const ddp_bn_shape_t *sh, int training, ddp_stream_t s);
ddp_status_t ddp_cuda_bn_relu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_a,
                                  float *save_b, float *running_mean, float *running_var,
                                  const void *inp, const float *gamma, const float *beta,
                                  const void *residual, const ddp_bn_shape_t *sh, int training,
                                  ddp_stream_t s);
ddp_status_t ddp_cuda_bn_relu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                                  float *dbeta, void *dout, const void *inp, const void *out,
                                  const float *gamma, const float *beta, const float *save_a,
                                  const float *save_b, int residual, const ddp_bn_shape_t *sh,
                                  int accumulate, ddp_stream_t s);
ddp_status_t ddp_cuda_bn_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                             float *dbeta, const void *dout, const void *inp, const float *gamma,
                             const float *save_a, const float *save_b, const ddp_bn_shape_t *sh,
                             int accumulate, ddp_stream_t s);
ddp_status_t ddp_cuda_bn_prepare(ddp_backend_t *be, ddp_dtype_t dt, const ddp_bn_shape_t *sh);

#endif
