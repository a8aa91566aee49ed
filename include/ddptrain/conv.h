/* Convolutional-network operations: the layer kernels of a ResNet.
 *
 * A second family of backend ops beside ddptrain/nn.h, in a table of its own
 * (be->ops->conv, NULL where a backend has none): the CPU backend fills it
 * through oneDNN (src/backend/cpu/cpu_conv*.c), CUDA through cuDNN and
 * kernels of ours (src/backend/cuda/cuda_conv*.c); each CPU op is the twin of
 * its CUDA op, and tests compare the two (tests/check_gpu_conv.c) besides the
 * CPU ops' finite-difference checks (tests/check_conv.c).
 *
 * Conventions, as nn.h's:
 *   - outputs first, then inputs and weights, then sizes, the stream last;
 *     every pointer is backend memory;
 *   - `dt` is the storage type of activations, activation gradients and the
 *     convolution weights the op reads (the model's compute copy): fp32, bf16
 *     or fp16; batch-norm parameters (gamma, beta), every statistic and every
 *     parameter gradient stay fp32 under any dt. A backend refuses a dt it
 *     does not implement with DDP_ERR_UNSUPPORTED (the CPU and CUDA
 *     tables take all three; the CPU widens half storage to fp32 around
 *     its fp32 ops);
 *   - parameter gradients follow `accumulate`: 0 overwrites, 1 adds;
 *     activation gradients are overwritten;
 *   - layouts are channels-last: activations (N,H,W,C), convolution weights
 *     (K,R,S,C) (cuDNN's NHWC filter layout). Exports transpose to
 *     PyTorch's (K,C,R,S);
 *   - a rejected call writes nothing.
 * Each op is prepared once per shape before the step loop (`*_prepare`:
 * oneDNN builds and JIT-compiles its primitives; cuDNN picks the
 * convolution algorithm by measuring the candidates, as cudnn.benchmark
 * does, and caches the choice). An op called on a shape that was not
 * prepared prepares it then, except that the CPU's bf16/fp16 ops refuse a
 * shape whose fp32 staging no prepare sized (DDP_ERR_INVALID_ARG naming
 * the prepare) rather than allocate it. After that an op allocates nothing: its
 * workspace comes from the backend's caching allocator, sized at prepare. */
#ifndef DDPTRAIN_CONV_H
#define DDPTRAIN_CONV_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "ddptrain/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One convolution's sizes. Output OH = (H + 2 pad - R) / stride + 1, OW
 * likewise with W and S; the same stride and zero padding on both axes. */
typedef struct ddp_conv_shape {
  int N, H, W, C; /* input (N,H,W,C) */
  int K, R, S;    /* K filters of R x S x C */
  int stride, pad;
} ddp_conv_shape_t;

/* Spatial batch normalization over the M = N*H*W positions of each of C
 * channels of x (N,H,W,C): y = (x - mean) / sqrt(var + eps) * gamma + beta.
 * momentum moves the running statistics (PyTorch's rule, below). */
typedef struct ddp_bn_shape {
  int N, H, W, C;
  float eps, momentum;
} ddp_bn_shape_t;

/* Max pooling over kernel x kernel windows, per channel. */
typedef struct ddp_pool_shape {
  int N, H, W, C;
  int kernel, stride, pad;
} ddp_pool_shape_t;

/* Output positions of a window of `kernel` sliding with `stride` over `in`
 * positions padded by `pad` on each side (convolution and pooling alike);
 * 0 for a shape that does not fit or a size that is not positive. */
int ddp_window_out_size(int in, int kernel, int stride, int pad);
/* The output's height and width (0 for a shape that does not fit). */
int ddp_conv_out_h(const ddp_conv_shape_t *sh);
int ddp_conv_out_w(const ddp_conv_shape_t *sh);
int ddp_pool_out_h(const ddp_pool_shape_t *sh);
int ddp_pool_out_w(const ddp_pool_shape_t *sh);

typedef struct ddp_conv_ops {
  /* ---- convolution, no bias ------------------------------------------- */
  /* out (N,OH,OW,K) = conv(inp (N,H,W,C), w (K,R,S,C)). */
  ddp_status_t (*conv_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                           const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s);
  /* dinp (N,H,W,C) = the input's gradient from dout (N,OH,OW,K) and w. */
  ddp_status_t (*conv_bwd_data)(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s);
  /* dw (K,R,S,C, fp32) = / += per `accumulate` the weights' gradient from
   * dout (N,OH,OW,K) and inp (N,H,W,C). */
  ddp_status_t (*conv_bwd_weights)(ddp_backend_t *be, ddp_dtype_t dt, float *dw, const void *dout,
                                   const void *inp, const ddp_conv_shape_t *sh, int accumulate,
                                   ddp_stream_t s);
  /* Prepares the three convolution ops of sh (see the file comment). */
  /* dinp += the input's gradient from dout and w, as conv_bwd_data's, the
   * sum formed in fp32 and rounded to dt once: a residual block's input
   * gradient gathered where its two paths meet, without a separate add
   * pass. May be NULL: callers run conv_bwd_data into scratch, then add. */
  ddp_status_t (*conv_bwd_data_add)(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                    const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s);
  ddp_status_t (*conv_prepare)(ddp_backend_t *be, ddp_dtype_t dt, const ddp_conv_shape_t *sh);
  /* After be->conv_algos (ddptrain/backend.h) was replaced: every shape
   * already prepared takes the record's algorithm where the record has
   * one (growing the workspace if it needs more); the trainer calls it
   * when the ranks adopt rank 0's record. NULL where a backend keeps no
   * such choices (the CPU, whose default takes oneDNN's first). */
  ddp_status_t (*conv_algos_reload)(ddp_backend_t *be);

  /* ---- batch normalization, one rank's statistics (cuDNN on GPUs; on the
   * CPU the parts below, whose double sums oneDNN's fp32 ones lack) ------ */
  /* Training (training = 1): normalises by the batch's mean and biased
   * variance, saves what the backward needs in save_a, save_b (C fp32 each,
   * in the backend's own form: mean and variance on the CPU, mean and
   * inverse standard deviation under cuDNN; only this backend's bn_bwd reads
   * them), and moves the running statistics (C fp32):
   * running_mean = (1 - momentum) running_mean + momentum mean, running_var
   * likewise with the unbiased variance var * M / (M - 1), so M >= 2.
   * Inference (training = 0): normalises by the running statistics and
   * updates nothing; save_a, save_b may be NULL. gamma, beta (C) fp32. */
  ddp_status_t (*bn_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_a, float *save_b,
                         float *running_mean, float *running_var, const void *inp,
                         const float *gamma, const float *beta, const ddp_bn_shape_t *sh,
                         int training, ddp_stream_t s);
  /* Training backward: dinp (N,H,W,C) overwritten; dgamma, dbeta (C fp32)
   * = / += per `accumulate`; from dout, inp, gamma and the forward's saves. */
  ddp_status_t (*bn_bwd)(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma, float *dbeta,
                         const void *dout, const void *inp, const float *gamma, const float *save_a,
                         const float *save_b, const ddp_bn_shape_t *sh, int accumulate,
                         ddp_stream_t s);
  ddp_status_t (*bn_prepare)(ddp_backend_t *be, ddp_dtype_t dt, const ddp_bn_shape_t *sh);
  /* bn_fwd, then the ReLU a residual network puts after it: out = max(out,
   * 0), or with residual (N,H,W,C in dt, may be NULL) out = max(out +
   * residual, 0). The result is, bit for bit, bn_fwd followed by relu_fwd
   * or add_relu_fwd (out rounded to dt before the add); a backend may do
   * it in one pass over the activation (the GPU's own batch norm, bf16),
   * which saves a read and a write of it. out may not alias inp or
   * residual. May be NULL: callers then run the two ops. */
  ddp_status_t (*bn_relu_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_a,
                              float *save_b, float *running_mean, float *running_var,
                              const void *inp, const float *gamma, const float *beta,
                              const void *residual, const ddp_bn_shape_t *sh, int training,
                              ddp_stream_t s);

  /* The backward of bn_relu_fwd (training): dinp, dgamma, dbeta as
   * bn_bwd's from dout masked by the ReLU (dout where out > 0, else 0);
   * out is that forward's output, and inp, gamma, beta and the saves are
   * its own. Bit for bit relu_bwd, then bn_bwd.
   *   residual 0 (the forward had none): a backend may recompute the mask
   *     from inp, the saves, gamma and beta rather than read out (the GPU's
   *     own batch norm, bf16: the ReLU's pass is gone, and out is never
   *     read); dout is the caller's scratch, its contents undefined after
   *     the call (the composition masks it in place);
   *   residual 1 (a block's last BN, whose ReLU followed the residual add):
   *     the mask is out's, and dout holds the masked gradient after the
   *     call, the gradient of the sum, which the caller's shortcut needs (the
   *     GPU's own batch norm writes it from its first pass instead of a
   *     pass of its own).
   * dinp may not alias dout, inp or out. May be NULL: callers run relu_bwd
   * and bn_bwd. */
  ddp_status_t (*bn_relu_bwd)(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                              float *dbeta, void *dout, const void *inp, const void *out,
                              const float *gamma, const float *beta, const float *save_a,
                              const float *save_b, int residual, const ddp_bn_shape_t *sh,
                              int accumulate, ddp_stream_t s);

  /* ---- batch normalization in parts, for statistics over several ranks
   * (--sync-bn): the caller sums each part's per-channel reductions across
   * ranks between the calls. M_total is the positions of all ranks
   * together. Kernels of ours on every backend; with one rank the parts
   * equal bn_fwd / bn_bwd up to rounding. -------------------------------- */
  /* sums (C fp32) = per channel, the sum over positions of x (mean NULL),
   * or of (x - mean[c])^2 (mean given: the second pass, after the global
   * mean is known; two passes because one pass of x and x^2 loses the
   * variance to cancellation). */
  ddp_status_t (*bn_reduce_fwd)(ddp_backend_t *be, ddp_dtype_t dt, float *sums, const void *inp,
                                const float *mean, const ddp_bn_shape_t *sh, ddp_stream_t s);
  /* out = (x - mean) / sqrt(var + eps) * gamma + beta with the global mean
   * and biased var (C fp32); running statistics (may be NULL: inference
   * with given statistics) move as bn_fwd's, unbiased by M_total. */
  ddp_status_t (*bn_apply_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *running_mean,
                               float *running_var, const void *inp, const float *mean,
                               const float *var, const float *gamma, const float *beta,
                               int64_t M_total, const ddp_bn_shape_t *sh, ddp_stream_t s);
  /* sums (2C fp32) = per channel, sum of dy (first C) and sum of
   * dy * (x - mean) (next C), over this rank's positions. */
  ddp_status_t (*bn_reduce_bwd)(ddp_backend_t *be, ddp_dtype_t dt, float *sums, const void *dout,
                                const void *inp, const float *mean, const ddp_bn_shape_t *sh,
                                ddp_stream_t s);
  /* With istd = 1 / sqrt(var + eps) and the global sums g (2C, all ranks'):
   * dinp = gamma istd (dy - g[c] / M_total - (x - mean) istd^2 g[C+c] /
   * M_total) (overwritten); from this rank's own sums l (2C): dbeta = l[c],
   * dgamma = l[C+c] istd, = / += per `accumulate` (the reducer adds the
   * ranks' parameter gradients, as for any parameter). */
  ddp_status_t (*bn_apply_bwd)(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                               float *dbeta, const void *dout, const void *inp, const float *mean,
                               const float *var, const float *gamma, const float *g, const float *l,
                               int64_t M_total, const ddp_bn_shape_t *sh, int accumulate,
                               ddp_stream_t s);

  /* ---- pooling ---------------------------------------------------------- */
  /* Max pooling: OH = (H + 2 pad - kernel) / stride + 1, OW likewise; padded
   * positions never win (PyTorch's MaxPool2d, which requires pad <= kernel /
   * 2). The training forward records each window's winner in `ws`, *bytes
   * from maxpool_workspace_bytes, which the backward reads; the inference
   * forward (ws NULL) records nothing. */
  ddp_status_t (*maxpool_workspace_bytes)(ddp_backend_t *be, ddp_dtype_t dt,
                                          const ddp_pool_shape_t *sh, size_t *bytes);
  ddp_status_t (*maxpool_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, void *ws,
                              const void *inp, const ddp_pool_shape_t *sh, ddp_stream_t s);
  /* dinp (N,H,W,C) = dout routed to each window's winner (overwrites). */
  ddp_status_t (*maxpool_bwd)(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                              const void *ws, const ddp_pool_shape_t *sh, ddp_stream_t s);
  /* Global average pooling: out (N,C) = mean over HW positions of inp
   * (N,HW,C), accumulated in fp32; the backward spreads dout / HW over the
   * positions (dinp overwritten). */
  ddp_status_t (*avgpool_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp, int N,
                              int HW, int C, ddp_stream_t s);
  ddp_status_t (*avgpool_bwd)(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                              int N, int HW, int C, ddp_stream_t s);

  /* ---- activations ------------------------------------------------------ */
  /* out = max(inp, 0), n elements (out may alias inp). */
  ddp_status_t (*relu_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp, size_t n,
                           ddp_stream_t s);
  /* out = max(a + b, 0): a residual block's add and ReLU in one pass (out
   * may alias a or b). The sum is rounded to dt once, before the ReLU. */
  ddp_status_t (*add_relu_fwd)(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *a,
                               const void *b, size_t n, ddp_stream_t s);
  /* dinp = dout where out > 0, else 0 (from the forward's output, so a ReLU
   * computed in place needs no copy of its input; dinp may alias dout). */
  ddp_status_t (*relu_bwd)(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                           const void *out, size_t n, ddp_stream_t s);

  /* Frees what the prepares cached (primitives, algorithm choices,
   * workspace); the backend's shutdown calls it. May be NULL. */
  void (*release)(ddp_backend_t *be);
} ddp_conv_ops_t;

#ifdef __cplusplus
}
#endif

#endif
