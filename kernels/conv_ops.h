/* Launchers for the convolutional-network kernels of ours
 * (kernels/conv_ops.cu, and kernels/bn_reduce.cu for the batch-norm
 * reductions): ReLU and the residual add + ReLU, global average and max
 * pooling, the four parts of batch normalization over several ranks, and
 * folding a half weight gradient into its fp32 buffer.
 *
 * A C header like kernels/kernels.h: extern "C", outputs first, the stream
 * last, a ddp_status_t, enqueue only. The caller
 * (src/backend/cuda/cuda_conv_ops.c) validates shapes and pointers with the
 * messages of ddptrain/conv.h's contracts; the launchers refuse only a dtype
 * they have no kernel for. dt is the storage type of the activations
 * (DDP_DTYPE_F32, BF16 or F16); every statistic, parameter and parameter
 * gradient is fp32, and math is fp32 with one rounding per stored value.
 * Layouts are channels-last: element (m, c) of M positions by C channels is
 * at m * C + c. No kernel here uses atomics: every sum is taken in an order
 * fixed by the shape, so results repeat bit for bit. The CPU twins are the
 * CPU backend's conv ops of the same names (ddptrain/conv.h). */
#ifndef DDPTRAIN_KERNELS_CONV_OPS_H
#define DDPTRAIN_KERNELS_CONV_OPS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- activations (n elements; out / dinp may be an input) ------------ */
/* out = inp > 0 ? inp : 0. */
ddp_status_t ddp_cuda_relu_fwd(ddp_dtype_t dt, void *out, const void *inp, size_t n,
                               cudaStream_t stream);
/* out = max(a + b, 0) with a + b in fp32, stored once in dt. */
ddp_status_t ddp_cuda_add_relu_fwd(ddp_dtype_t dt, void *out, const void *a, const void *b,
                                   size_t n, cudaStream_t stream);
/* dinp = out > 0 ? dout : 0. */
ddp_status_t ddp_cuda_relu_bwd(ddp_dtype_t dt, void *dinp, const void *dout, const void *out,
                               size_t n, cudaStream_t stream);

/* ---- global average pooling: inp (N, HW, C) <-> out (N, C) ------------- */
/* out[n, c] = sum over p in order of inp[n, p, c], divided by HW. */
ddp_status_t ddp_cuda_avgpool_fwd(ddp_dtype_t dt, void *out, const void *inp, int N, int HW, int C,
                                  cudaStream_t stream);
/* dinp[n, p, c] = dout[n, c] / HW (overwrites). */
ddp_status_t ddp_cuda_avgpool_bwd(ddp_dtype_t dt, void *dinp, const void *dout, int N, int HW,
                                  int C, cudaStream_t stream);

/* ---- max pooling over kernel x kernel windows ------------------------- */
/* The sizes of one max pooling (output OH x OW, as ddptrain/conv.h). */
typedef struct ddp_cuda_pool_dims {
  int N, H, W, C, kernel, stride, pad, OH, OW;
} ddp_cuda_pool_dims_t;

/* Bytes of the training forward's record: one uint16 window position per
 * output element (kernel <= 255, so kernel * kernel fits). */
static inline size_t ddp_cuda_maxpool_ws_bytes(const ddp_cuda_pool_dims_t *d) {
  return (size_t)d->N * d->OH * d->OW * d->C * sizeof(uint16_t);
}

/* out (N,OH,OW,C) = each window's maximum; padded positions never win and
 * ties go to the first position in window order (row by row), as
 * PyTorch's. ws (NULL: inference) records the winner's position in its
 * window, kh * kernel + kw. */
ddp_status_t ddp_cuda_maxpool_fwd(ddp_dtype_t dt, void *out, uint16_t *ws, const void *inp,
                                  const ddp_cuda_pool_dims_t *d, cudaStream_t stream);
/* dinp (N,H,W,C) = the sum of dout over the windows whose winner is this
 * position (overwrites). A gather, one thread per input element adding its
 * windows in row order: no atomics where windows overlap. */
ddp_status_t ddp_cuda_maxpool_bwd(ddp_dtype_t dt, void *dinp, const void *dout, const uint16_t *ws,
                                  const ddp_cuda_pool_dims_t *d, cudaStream_t stream);

/* ---- batch normalization in parts ------------------------------------- */
/* The M positions of a reduction are cut into this many fixed slices
 * (depends on M only); each leaves one fp32 partial per channel and sum. */
static inline int ddp_cuda_bn_slices(int64_t M) {
  int64_t p = (M + 255) / 256;
  return (int)(p < 1 ? 1 : p > 512 ? 512 : p);
}
/* The slices' partials are added in groups of this many, each group by
 * the last of its blocks to finish, then the groups' sums by the last
 * group: two short fixed-order passes spread over many blocks, not one
 * block adding all slices while the rest of the GPU waits. */
#define DDP_CUDA_BN_GROUP 16
static inline int ddp_cuda_bn_groups(int64_t M) {
  return (ddp_cuda_bn_slices(M) + DDP_CUDA_BN_GROUP - 1) / DDP_CUDA_BN_GROUP;
}
/* fp32 scratch floats a reduction of M positions by C channels needs: two
 * sums' partials per slice, and per group. */
static inline size_t ddp_cuda_bn_scratch_floats(int64_t M, int C) {
  return (size_t)2 * (size_t)(ddp_cuda_bn_slices(M) + ddp_cuda_bn_groups(M)) * (size_t)C;
}

/* The ReLU that followed a batch norm's forward, recomputed in its
 * backward (bn_relu_bwd): the forward stored round(bn(x)) clipped at 0,
 * with bn(x) = (x - mean) istd gamma + beta, so its output was positive
 * exactly where that value rounded to dt is; the backward keeps dy there
 * and zeroes it elsewhere, which is relu_bwd's mask without reading the
 * output. istd, gamma, beta: the forward's (C fp32 each); the mean is the
 * reduction's own argument. */
typedef struct ddp_cuda_bn_relu {
  const float *istd, *gamma, *beta;
} ddp_cuda_bn_relu_t;

/* The arrival counters a reduction of M positions over C channels needs
 * (zeroed once; each reduction leaves them zero): per column of its grid,
 * one per group of slices and one for the groups. */
static inline size_t ddp_cuda_bn_counters_needed(int64_t M, int C) {
  return (size_t)((C + 31) / 32) * (size_t)(ddp_cuda_bn_groups(M) + 1);
}

/* The parameter gradients a backward reduction may finish with, from its
 * own sums: dbeta = / += sums[c], dgamma = / += sums[C + c] istd[c] per
 * accumulate (one rank's batch norm, where the sums are final). */
typedef struct ddp_cuda_bn_grads {
  float *dgamma, *dbeta;
  const float *istd;
  int accumulate;
} ddp_cuda_bn_grads_t;

/* Per-channel sums over the M positions of x (M, C), into `sums`:
 *   dy NULL, mean NULL: sums[c] = sum x;
 *   dy NULL, mean given: sums[c] = sum (x - mean[c])^2;
 *   dy given (mean required): sums[c] = sum dy, sums[C + c] = sum dy (x -
 *   mean[c]), then the parameter gradients where grads is given.
 * scratch: ddp_cuda_bn_scratch_floats(M, C) floats, overwritten; counters:
 * ddp_cuda_bn_counters_needed(M, C), zero (and left zero). Each slice sums
 * its rows in 32 lanes (row r in lane r % 32) and adds the lanes in a
 * fixed tree; the last block of each group of DDP_CUDA_BN_GROUP slices to
 * finish adds the group's partials in slice order, and the last group of
 * the column adds the groups' sums in group order, in the same launch. */
ddp_status_t ddp_cuda_bn_reduce(ddp_dtype_t dt, float *sums, float *scratch, unsigned *counters,
                                const void *x, const void *dy, const float *mean,
                                const ddp_cuda_bn_grads_t *grads, int64_t M, int C,
                                cudaStream_t stream);
/* ddp_cuda_bn_reduce's backward sums (dy and mean required) of dy masked
 * by the forward's ReLU, recomputed from x and `relu`. */
ddp_status_t ddp_cuda_bn_reduce_relu(ddp_dtype_t dt, float *sums, float *scratch,
                                     unsigned *counters, const void *x, const void *dy,
                                     const float *mean, const ddp_cuda_bn_relu_t *relu,
                                     const ddp_cuda_bn_grads_t *grads, int64_t M, int C,
                                     cudaStream_t stream);

/* ddp_cuda_bn_reduce's backward sums (dy and mean required) of g = (y > 0
 * ? dy : 0), y the output of the ReLU that followed the batch norm (after
 * a residual add, so not recomputable), with g written over dy in the
 * same pass: relu_bwd's result, for the caller's shortcut. */
ddp_status_t ddp_cuda_bn_reduce_mask_out(ddp_dtype_t dt, float *sums, float *scratch,
                                         unsigned *counters, const void *x, void *dy, const void *y,
                                         const float *mean, const ddp_cuda_bn_grads_t *grads,
                                         int64_t M, int C, cudaStream_t stream);

/* One rank's batch statistics in one pass over x (M, C): the shifted sums
 * of x - k and (x - k)^2 about k = x[0, c] (the scratch, counters and sums
 * as ddp_cuda_bn_reduce's, 2C sums), then per channel the mean, the biased
 * variance, the inverse standard deviation 1 / sqrt(var + eps), and, when
 * running_mean is not NULL, the running statistics moved by momentum (the
 * variance unbiased by M / (M - 1)); one launch. Shifting by a value of
 * the channel keeps the sums' cancellation that of the data's spread,
 * which the two-pass reduction (mean, then the centred squares) avoids at
 * the cost of a second read of x. */
ddp_status_t ddp_cuda_bn_stats(ddp_dtype_t dt, float *mean, float *var, float *istd,
                               float *running_mean, float *running_var, float *sums, float *scratch,
                               unsigned *counters, const void *x, int64_t M, int C, float eps,
                               float momentum, cudaStream_t stream);

/* out = (x - mean) / sqrt(var + eps) * gamma + beta; when running_mean is
 * not NULL, running_mean = (1 - momentum) running_mean + momentum mean and
 * running_var likewise with var * unbias (M_total / (M_total - 1)). */
ddp_status_t ddp_cuda_bn_apply_fwd(ddp_dtype_t dt, void *out, float *running_mean,
                                   float *running_var, const void *x, const float *mean,
                                   const float *var, const float *gamma, const float *beta,
                                   float eps, float momentum, float unbias, int64_t M, int C,
                                   cudaStream_t stream);
/* ddp_cuda_bn_apply_fwd with an epilogue in the same pass: relu set,
 * out = max(out, 0); residual given (relu implied), out = max(round(out) +
 * residual, 0), the normalised value rounded to dt before the add. Either
 * is what the apply, then relu_fwd or add_relu_fwd, would store, with one
 * read and one write of the activation fewer. istd (may be NULL): 1 /
 * sqrt(var + eps) already computed (ddp_cuda_bn_stats's), the same value
 * the apply would compute per element. */
ddp_status_t ddp_cuda_bn_apply_act_fwd(ddp_dtype_t dt, void *out, float *running_mean,
                                       float *running_var, const void *x, const float *mean,
                                       const float *var, const float *istd, const float *gamma,
                                       const float *beta, float eps, float momentum, float unbias,
                                       int64_t M, int C, int relu, const void *residual,
                                       cudaStream_t stream);

/* dinp = gamma istd (dy - g[c] / M_total - (x - mean) istd^2 g[C+c] /
 * M_total) (overwrites); dbeta = / += l[c], dgamma = / += l[C+c] istd per
 * accumulate. istd is read from `istd` where given, else computed as
 * 1 / sqrt(var + eps). relu (may be NULL): dy is first masked by the
 * forward's ReLU, recomputed (the sums g and l must be of the masked dy
 * too: ddp_cuda_bn_reduce_relu's); its istd and gamma must be the apply's
 * own (istd given). dgamma NULL: no parameter gradients (the reduction
 * gave them). */
ddp_status_t ddp_cuda_bn_apply_bwd(ddp_dtype_t dt, void *dinp, float *dgamma, float *dbeta,
                                   const void *dy, const void *x, const float *mean,
                                   const float *var, const float *istd, const float *gamma,
                                   const float *g, const float *l, float eps, double M_total,
                                   int64_t M, int C, int accumulate, const ddp_cuda_bn_relu_t *relu,
                                   cudaStream_t stream);

/* ---- convolution helpers ---------------------------------------------- */
/* dw[i] = (accumulate ? dw[i] : 0) + src[i] widened from dt, i < n: a half
 * weight gradient computed by cuDNN (whose half filters are half) into the
 * fp32 gradient. */
ddp_status_t ddp_cuda_conv_dw_fold(ddp_dtype_t dt, float *dw, const void *src, size_t n,
                                   int accumulate, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
