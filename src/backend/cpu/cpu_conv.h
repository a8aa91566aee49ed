/* Convolution, batch normalization and max pooling on the CPU, through
 * oneDNN.
 *
 * The layer ops of a convolutional network (a ResNet), as the CPU backend
 * implements them: 2-D convolution without bias (in a ResNet every
 * convolution is followed by batch norm, whose shift makes a bias
 * redundant), spatial batch normalization and max pooling. They follow
 * the layer-op conventions of ddptrain/nn.h: outputs first, then inputs and
 * weights, then sizes, the stream last; parameter gradients fp32 and per `accumulate`;
 * activation gradients overwritten. Only fp32 (`dt` DDP_DTYPE_F32) is
 * implemented; other types are refused with DDP_ERR_UNSUPPORTED.
 *
 * Layouts are channels-last, the layout cuDNN's tensor cores prefer, so the
 * GPU twins take the same buffers: activations NHWC, (N,H,W,C); weights
 * (K,R,S,C) (out channels, kernel rows, kernel columns, in channels: cuDNN's
 * NHWC filter layout). A convolution runs in the weight and activation
 * layouts oneDNN prefers (channel-blocked on AVX2, where its blocked kernels
 * are faster than its NHWC ones); the op reorders into and out of them
 * (cpu_dnnl.h), so callers only ever see NHWC.
 *
 * The backend reaches them through its `conv` table (ddp_conv_cpu_ops, at
 * the end of this file; docs/design.md §3.7). The first call for a
 * shape builds its oneDNN primitives (milliseconds); the prepare functions
 * do that before the step loop. Without oneDNN in the build every op
 * returns DDP_ERR_UNSUPPORTED and says so. A rejected call writes nothing. */
#ifndef DDPTRAIN_CPU_CONV_H
#define DDPTRAIN_CPU_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "ddptrain/conv.h"
#include "ddptrain/dtype.h"

/* The shapes (ddp_conv_shape_t, ddp_bn_shape_t, ddp_pool_shape_t) and
 * output sizes are ddptrain/conv.h's. */

/* out (N,OH,OW,K) = conv(inp (N,H,W,C), w (K,R,S,C)). */
ddp_status_t ddp_cpu_conv_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                              const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s);
/* dinp (N,H,W,C) = gradient of the input (overwrites) from dout (N,OH,OW,K)
 * and w (K,R,S,C). */
ddp_status_t ddp_cpu_conv_bwd_data(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                   const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s);
/* dw (K,R,S,C, fp32) = / += per `accumulate` the gradient of the weights
 * from dout (N,OH,OW,K) and inp (N,H,W,C). */
ddp_status_t ddp_cpu_conv_bwd_weights(ddp_backend_t *be, ddp_dtype_t dt, float *dw,
                                      const void *dout, const void *inp, const ddp_conv_shape_t *sh,
                                      int accumulate, ddp_stream_t s);
/* With on != 0 (--deterministic off), a shape's convolution primitives are
 * the fastest of oneDNN's implementations, Winograd or direct, in either
 * activation layout, reorders included, measured when the shape is first
 * prepared; otherwise a fixed rule: Winograd where it applies, else its
 * first choice in NHWC where that is an AVX-512 kernel, else in its
 * blocked layout (cpu_conv.c says why). Process-wide, set by the CPU
 * backend's init. */
void ddp_cpu_conv_set_autotune(int on);
/* Tests: with on != 0 the untuned choice tries the blocked layout first on
 * any machine, so the reorders and the shared staging buffers run where
 * oneDNN's AVX-512 NHWC kernels would otherwise be taken. Cached apart. */
void ddp_cpu_conv_set_prefer_blocked(int on);
/* With on != 0 (the default), 3x3 stride-1 convolutions whose channels
 * fill blocks of 16 take oneDNN's Winograd kernels where it has them
 * (AVX-512), before any direct one;
 * --winograd off turns it off, for the direct kernels' rounding.
 * Process-wide, set by the CPU backend's init; cached apart. */
void ddp_cpu_conv_set_winograd(int on);

/* Builds the three primitives for sh (outside the step loop). */
ddp_status_t ddp_cpu_conv_prepare(ddp_backend_t *be, ddp_dtype_t dt, const ddp_conv_shape_t *sh);
/* The implementation the current settings give op (0 forward, 1
 * backward-data, 2 backward-weights) on sh, as oneDNN names it plus the
 * activations' layout, e.g. "jit_wino_4x3:avx512_core (activations
 * reordered)"; built and cached if it was not (tests, diagnostics). */
ddp_status_t ddp_cpu_conv_describe(ddp_backend_t *be, int op, const ddp_conv_shape_t *sh,
                                   char *buf, size_t len);

/* Batch normalization over the M = N*H*W positions of each of C channels,
 * x (N,H,W,C), y = (x - mean) / sqrt(var + eps) * gamma + beta.
 * Training (training = 1): mean and var are the batch's (var biased, as
 * PyTorch normalises with); they are written to save_mean, save_var (C,
 * fp32) for the backward, and the running statistics (C, fp32) move toward
 * them: running_mean = (1 - momentum) running_mean + momentum mean,
 * running_var likewise with the unbiased var * M / (M - 1) (PyTorch's
 * rule), so M must be at least 2. Inference (training = 0): the running
 * statistics normalise, nothing is updated, save_mean / save_var may be
 * NULL. gamma, beta (C) fp32. */
ddp_status_t ddp_cpu_bn_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_mean,
                            float *save_var, float *running_mean, float *running_var,
                            const void *inp, const float *gamma, const float *beta,
                            const ddp_bn_shape_t *sh, int training, ddp_stream_t s);
/* Training backward: dinp (N,H,W,C) overwritten; dgamma, dbeta (C, fp32) =
 * / += per `accumulate`; from dout, inp, gamma and the forward's save_mean,
 * save_var. */
ddp_status_t ddp_cpu_bn_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                            float *dbeta, const void *dout, const void *inp, const float *gamma,
                            const float *save_mean, const float *save_var, const ddp_bn_shape_t *sh,
                            int accumulate, ddp_stream_t s);
/* Builds the training forward, inference forward and backward primitives. */
ddp_status_t ddp_cpu_bn_prepare(ddp_backend_t *be, ddp_dtype_t dt, const ddp_bn_shape_t *sh);

/* Max pooling over kernel x kernel windows of x (N,H,W,C), per channel:
 * output OH = (H + 2 pad - kernel) / stride + 1, OW likewise; padded
 * positions never win (as PyTorch's MaxPool2d, which also requires pad <=
 * kernel / 2). The training forward records where each maximum came from in
 * `ws`, a workspace of ddp_cpu_maxpool_workspace_bytes() bytes that the
 * backward reads; the inference forward (ws NULL) records nothing. */
/* *bytes = the workspace a training forward of sh needs (builds its
 * primitives, like a prepare). */
ddp_status_t ddp_cpu_maxpool_workspace_bytes(ddp_backend_t *be, ddp_dtype_t dt,
                                             const ddp_pool_shape_t *sh, size_t *bytes);
/* out (N,OH,OW,C) = max over each window of inp (N,H,W,C); ws as above
 * (non-NULL: training). */
ddp_status_t ddp_cpu_maxpool_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, void *ws,
                                 const void *inp, const ddp_pool_shape_t *sh, ddp_stream_t s);
/* dinp (N,H,W,C) = dout (N,OH,OW,C) routed to where each maximum came from
 * (overwrites; positions that were no window's maximum get 0). */
ddp_status_t ddp_cpu_maxpool_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                 const void *ws, const ddp_pool_shape_t *sh, ddp_stream_t s);

/* ---- kernels of ours (cpu_conv_ops.c, cpu_conv_bn_parts.c) --------------
 * The conv table's ReLU, add + ReLU, global average pooling and the
 * batch-norm parts for statistics over several ranks, with the contracts of
 * ddptrain/conv.h. They need no oneDNN: they work in every build. fp32 only
 * (DDP_ERR_UNSUPPORTED naming the op and the type otherwise). */

/* The checks each of them makes first: the CPU backend and fp32; `op`
 * names the caller in the message. */
ddp_status_t ddp_cpu_conv_ops_admit(const ddp_backend_t *be, ddp_dtype_t dt, const char *op);
/* acc[j] += row[j] for j < n, in double and vectorised: one position's
 * contribution to per-channel sums (pooling, batch norm). */
void ddp_cpu_add_row_f64(double *restrict acc, const float *restrict row, size_t n);

ddp_status_t ddp_cpu_relu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                              size_t n, ddp_stream_t s);
ddp_status_t ddp_cpu_add_relu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *a,
                                  const void *b, size_t n, ddp_stream_t s);
ddp_status_t ddp_cpu_relu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                              const void *out, size_t n, ddp_stream_t s);
ddp_status_t ddp_cpu_avgpool_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                                 int N, int HW, int C, ddp_stream_t s);
ddp_status_t ddp_cpu_avgpool_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                 int N, int HW, int C, ddp_stream_t s);
ddp_status_t ddp_cpu_bn_reduce_fwd(ddp_backend_t *be, ddp_dtype_t dt, float *sums, const void *inp,
                                   const float *mean, const ddp_bn_shape_t *sh, ddp_stream_t s);
ddp_status_t ddp_cpu_bn_apply_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *running_mean,
                                  float *running_var, const void *inp, const float *mean,
                                  const float *var, const float *gamma, const float *beta,
                                  int64_t M_total, const ddp_bn_shape_t *sh, ddp_stream_t s);
ddp_status_t ddp_cpu_bn_reduce_bwd(ddp_backend_t *be, ddp_dtype_t dt, float *sums, const void *dout,
                                   const void *inp, const float *mean, const ddp_bn_shape_t *sh,
                                   ddp_stream_t s);
/* The table's bn_fwd / bn_bwd: the contract of ddp_cpu_bn_fwd / _bwd (the
 * same saves: mean and biased variance), computed with the parts above,
 * whose double sums keep the accuracy oneDNN's fp32 ones lose at a
 * ResNet's sizes (cpu_conv_bn_parts.c has the figures). */
ddp_status_t ddp_cpu_bn_fwd_exact(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_a,
                                  float *save_b, float *running_mean, float *running_var,
                                  const void *inp, const float *gamma, const float *beta,
                                  const ddp_bn_shape_t *sh, int training, ddp_stream_t s);
ddp_status_t ddp_cpu_bn_bwd_exact(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                                  float *dbeta, const void *dout, const void *inp,
                                  const float *gamma, const float *save_a, const float *save_b,
                                  const ddp_bn_shape_t *sh, int accumulate, ddp_stream_t s);
ddp_status_t ddp_cpu_bn_apply_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                                  float *dbeta, const void *dout, const void *inp,
                                  const float *mean, const float *var, const float *gamma,
                                  const float *g, const float *l, int64_t M_total,
                                  const ddp_bn_shape_t *sh, int accumulate, ddp_stream_t s);

/* The CPU backend's conv table (cpu_conv_table.c): the oneDNN functions and
 * the kernels of ours above, taking fp32 as they are and bf16/fp16 storage
 * widened to fp32 around them (each output rounded once). */
extern const ddp_conv_ops_t ddp_conv_cpu_ops;

#endif
