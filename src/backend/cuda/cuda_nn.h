/* The CUDA implementations of the nn ops (internal; ddptrain/nn.h gives the
 * contract of each, the CPU backend's ops are the oracles).
 *
 * One C file per family (src/backend/cuda/cuda_nn_<family>.c) validates the
 * arguments, takes its scratch from the shared buffer (cuda_impl.h) and
 * launches the kernels of kernels/<family>.cu on the op's stream. Each
 * family says how much scratch it needs for the largest shapes reserve()
 * is told about; cuda_nn.c's reserve() takes the maximum over families and
 * fills the ops table. Nothing here synchronises with the host. */
#ifndef DDPTRAIN_CUDA_NN_H
#define DDPTRAIN_CUDA_NN_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "ddptrain/dtype.h"
#include "ddptrain/nn.h"

/* ---- cuda_nn_embed.c ------------------------------------------------------ */
size_t ddp_cuda_embed_scratch_bytes(ddp_dtype_t dt, int64_t N, int C, int V);
ddp_status_t ddp_cuda_nn_embed_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out,
                                   const int32_t *tokens, const void *wte, const void *wpe, int B,
                                   int T, int C, ddp_stream_t s);
ddp_status_t ddp_cuda_nn_embed_bwd(ddp_backend_t *be, ddp_dtype_t dt, float *dwte, float *dwpe,
                                   const void *dout, const int32_t *tokens, int B, int T, int C,
                                   int accumulate, ddp_stream_t s);

/* ---- cuda_nn_layernorm.c -------------------------------------------------- */
size_t ddp_cuda_layernorm_scratch_bytes(ddp_dtype_t dt, int64_t N, int C, int V);
ddp_status_t ddp_cuda_nn_layernorm_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *mean,
                                       float *rstd, const void *inp, const void *w, const void *b,
                                       int N, int C, ddp_stream_t s);
ddp_status_t ddp_cuda_nn_residual_layernorm_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *resid,
                                                void *out, float *mean, float *rstd, const void *a,
                                                const void *b, const void *w, const void *bias,
                                                int N, int C, ddp_stream_t s);
ddp_status_t ddp_cuda_nn_layernorm_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dw,
                                       float *db, const void *dout, const void *inp, const void *w,
                                       const float *mean, const float *rstd, int N, int C,
                                       int accumulate, ddp_stream_t s);

/* ---- cuda_nn_pointwise.c ---------------------------------------------------- */
ddp_status_t ddp_cuda_nn_gelu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                                  size_t n, ddp_stream_t s);
ddp_status_t ddp_cuda_nn_gelu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *inp,
                                  const void *dout, size_t n, ddp_stream_t s);
ddp_status_t ddp_cuda_nn_add(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *a,
                             const void *b, size_t n, ddp_stream_t s);

/* ---- cuda_nn_linear.c --------------------------------------------------------- */
size_t ddp_cuda_linear_scratch_bytes(ddp_dtype_t dt, int64_t N, int C, int V);
ddp_status_t ddp_cuda_nn_linear_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                                    const void *w, const void *bias, int N, int IC, int OC,
                                    ddp_stream_t s);
ddp_status_t ddp_cuda_nn_linear_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dw,
                                    float *dbias, const void *dout, const void *inp, const void *w,
                                    int N, int IC, int OC, int accumulate, int accumulate_dinp,
                                    ddp_stream_t s);
ddp_status_t ddp_cuda_nn_linear_gelu_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, void *pre,
                                         const void *inp, const void *w, const void *bias, int N,
                                         int IC, int OC, ddp_stream_t s);
ddp_status_t ddp_cuda_nn_linear_dgelu_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dpre,
                                          float *dbias, const void *dout, const void *w,
                                          const void *pre, int N, int K, int OC, int accumulate,
                                          ddp_stream_t s);

/* ---- cuda_nn_attention.c -------------------------------------------------------- */
size_t ddp_cuda_attention_scratch_bytes(ddp_dtype_t dt, int64_t N, int C, int V);
/* Argument checks shared by both attention families (dtype, positive sizes,
 * C a multiple of NH), naming `op` in the message. */
ddp_status_t ddp_cuda_attention_check_args(const char *op, ddp_dtype_t dt, int B, int T, int C,
                                           int NH);
ddp_status_t ddp_cuda_nn_attention_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *att,
                                       const void *qkv, int B, int T, int C, int NH,
                                       ddp_stream_t s);
ddp_status_t ddp_cuda_nn_attention_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dqkv,
                                       float *scratch, const void *dout, const void *qkv,
                                       const float *att, int B, int T, int C, int NH,
                                       ddp_stream_t s);

/* ---- cuda_nn_xent.c ------------------------------------------------------------ */
size_t ddp_cuda_xent_scratch_bytes(ddp_dtype_t dt, int64_t N, int C, int V);
ddp_status_t ddp_cuda_nn_xent_fused(ddp_backend_t *be, ddp_dtype_t dt, float *losses,
                                    float *loss_sum, void *dlogits, const void *logits,
                                    const int32_t *targets, float dloss, float smoothing, int N,
                                    int V, int Vp, ddp_stream_t s);

/* ---- cuda_nn_flash.c ------------------------------------------------------------ */
/* No shared scratch (see the file): reserve() takes nothing for these. */
ddp_status_t ddp_cuda_nn_flash_attention_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out,
                                             float *lse, const void *qkv, const int32_t *lens,
                                             int B, int T, int C, int NH, ddp_stream_t s);
ddp_status_t ddp_cuda_nn_flash_attention_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dqkv,
                                             float *scratch, const void *dout, const void *qkv,
                                             const void *out, const float *lse, const int32_t *lens,
                                             int B, int T, int C, int NH, ddp_stream_t s);

/* ---- cuda_nn_decode.c ----------------------------------------------------------- */
ddp_status_t ddp_cuda_nn_attention_decode(ddp_backend_t *be, ddp_dtype_t dt, void *out,
                                          const void *qkv, int B, int Tc, int t, int C, int NH,
                                          ddp_stream_t s);

/* ---- cuda_nn.c: the table ------------------------------------------------------- */
extern const ddp_nn_ops_t ddp_nn_cuda_ops;

#endif
