/* CUDA attention against a KV cache (cuda_nn.h; contract in
 * ddptrain/nn.h's attention_decode, kernel in kernels/attention_decode.cu,
 * CPU twin ddp_nn_cpu_ops.attention_decode). No scratch. */
#include <config.h>

#include "attention_decode.h"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"

// out (B,C), qkv (B,Tc,3C): the cache; the query is row t
ddp_status_t ddp_cuda_nn_attention_decode(ddp_backend_t *be, ddp_dtype_t dt, void *out,
                                          const void *qkv, int B, int Tc, int t, int C, int NH,
                                          ddp_stream_t s) {
  return ddp_cuda_attention_decode(dt, out, qkv, B, Tc, t, C, NH, ddp_cuda_stream(be, s));
}
