/* What the convolutional-network kernel files (conv_ops.cu, bn_reduce.cu)
 * share: the dtype dispatch of their launchers, and the batch-norm
 * arithmetic that a forward and a backward must round alike. CUDA C++
 * only; not part of the C launcher headers. */
#ifndef DDPTRAIN_KERNELS_CONV_COMMON_CUH
#define DDPTRAIN_KERNELS_CONV_COMMON_CUH

#include "core/foreign_check.h"
#include "ddptrain/check.h"
#include "nn_io.cuh"

/* Runs the statement(s) with DT, a constexpr int, set to the runtime dt;
 * DDP_ERR_UNSUPPORTED for a type with no kernel, and the launch's error. */
#define CONV_DISPATCH(what, dt, ...)                                                            \
  do {                                                                                          \
    switch (dt) {                                                                               \
      case DDP_DTYPE_F32: {                                                                     \
        constexpr int DT = DDP_DTYPE_F32;                                                       \
        __VA_ARGS__;                                                                            \
        break;                                                                                  \
      }                                                                                         \
      case DDP_DTYPE_BF16: {                                                                    \
        constexpr int DT = DDP_DTYPE_BF16;                                                      \
        __VA_ARGS__;                                                                            \
        break;                                                                                  \
      }                                                                                         \
      case DDP_DTYPE_F16: {                                                                     \
        constexpr int DT = DDP_DTYPE_F16;                                                       \
        __VA_ARGS__;                                                                            \
        break;                                                                                  \
      }                                                                                         \
      default:                                                                                  \
        DDP_FAIL(DDP_ERR_UNSUPPORTED, "%s: activation dtype %s (%d) is not fp32, bf16 or fp16", \
                 what, ddp_dtype_name(dt), (int)(dt));                                          \
    }                                                                                           \
    DDP_CUDA_CHECK(cudaGetLastError());                                                         \
  } while (0)

namespace ddp_conv {

/* The apply's arithmetic with the inverse standard deviation given: one
 * expression for the forward and for the backward's recomputed mask, so
 * both round alike. */
__device__ __forceinline__ float bn_affine(float v, float mean, float istd, float gamma,
                                           float beta) {
  return (v - mean) * istd * gamma + beta;
}

/* dy where the forward's bn_relu output was positive: round(bn(x)) > 0
 * (ddp_cuda_bn_relu_t), else 0, from the channel's mean, istd, gamma and
 * beta. A NaN normalised value gives 0, as the forward stored 0 for it. */
template <int DT>
__device__ __forceinline__ float relu_masked(float dy, float x, float mean, float istd, float gamma,
                                             float beta) {
  const float v = bn_affine(x, mean, istd, gamma, beta);
  return ddp_nn::to_f32<DT>(ddp_nn::from_f32<DT>(v)) > 0.0f ? dy : 0.0f;
}

}  // namespace ddp_conv

#endif
