/* CUDA element-wise ops: GELU forward/backward and the residual add
 * (cuda_nn.h; contract in ddptrain/nn.h, kernels in kernels/pointwise.cu,
 * CPU twins ddp_nn_cpu_ops.gelu_fwd / gelu_bwd / add). No scratch; the
 * launchers validate dtype, pointers and alignment on the host. */
#include <config.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "pointwise.h"

// out (n), inp (n)
ddp_status_t ddp_cuda_nn_gelu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                                  size_t n, ddp_stream_t s) {
  return ddp_cuda_gelu_fwd(dt, out, inp, n, ddp_cuda_stream(be, s));
}

// dinp (n) (may alias dout), inp (n), dout (n)
ddp_status_t ddp_cuda_nn_gelu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *inp,
                                  const void *dout, size_t n, ddp_stream_t s) {
  return ddp_cuda_gelu_bwd(dt, dinp, inp, dout, n, ddp_cuda_stream(be, s));
}

// out (n) (may alias a or b), a, b (n)
ddp_status_t ddp_cuda_nn_add(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *a,
                             const void *b, size_t n, ddp_stream_t s) {
  return ddp_cuda_add(dt, out, a, b, n, ddp_cuda_stream(be, s));
}
