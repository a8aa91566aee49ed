/* Fused softmax cross-entropy forward and backward (launcher declared in
 * kernels/xent.h; CPU twin ddp_cpu_xent_fused_f32 in
 * src/backend/cpu/cpu_nn.c).
 *
 * One block per row: the row max, the sum of exp(x - max) in fp32 (each
 * thread sums its strided elements in order, then fixed-order warp and block
 * reductions), the loss, and with dlogits the gradient. Each element x[i] of
 * a row is read and written only by thread i % blockDim.x, and that thread
 * reads it before writing it; the target logit is read by every thread
 * before the first barrier and no element is written before the second. So
 * dlogits may be the logits buffer itself.
 *
 * The per-row losses are the op's output; a second kernel of one block then
 * adds them to *loss_sum in a fixed order (fp64 partials), so the sum is
 * reproducible and needs neither atomics nor scratch. */
#include <math.h>

#include "core/foreign_check.h"
#include "nn_io.cuh"
#include "xent.h"

namespace {

using namespace ddp_nn;

constexpr int kRowThreads = 512;
constexpr int kSumThreads = 1024;

template <int DT, bool GRAD>
static __global__ void __launch_bounds__(kRowThreads)
    xent_row_kernel(float *losses, void *dlogits, const void *logits, const int32_t *targets,
                    float dloss, float smoothing, int V, int Vp) {
  __shared__ float shm[32];
  __shared__ double shm_d[32];
  const size_t base = (size_t)blockIdx.x * (size_t)Vp;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int32_t t = targets[blockIdx.x];
  if (t < 0 || t >= V) {
    /* -1 is the ignore index; anything else outside [0, V) is an invalid
     * target that the host could not see (see xent.h): NaN marks it. The
     * branch is uniform over the block, so returning skips no barrier. */
    if (tid == 0) losses[blockIdx.x] = t == -1 ? 0.0f : __int_as_float(0x7FC00000);
    if constexpr (GRAD)
      for (int i = tid; i < Vp; i += nt) store<DT>(dlogits, base + i, 0.0f);
    return;
  }
  const float xt = load<DT>(logits, base + t);

  float m = -INFINITY;
  for (int i = tid; i < V; i += nt) m = fmaxf(m, load<DT>(logits, base + i));
  m = block_max(m, shm);

  float s = 0.0f;
  for (int i = tid; i < V; i += nt) s += expf(load<DT>(logits, base + i) - m);
  s = block_sum(s, shm);

  /* Label smoothing needs the row's mean logit (in double, as the CPU
   * twin); the branch is uniform over the block and every thread reads
   * before the barrier inside block_sum, so no element is written yet. */
  double mean = 0.0;
  if (smoothing != 0.0f) {
    double xs = 0.0;
    for (int i = tid; i < V; i += nt) xs += (double)load<DT>(logits, base + i);
    mean = block_sum(xs, shm_d) / (double)V;
  }

  /* (max - x_t) + log(sum), as the CPU twin: with logits near 1e4 the
   * log-sum-exp alone would carry an fp32 rounding of ~1e-3. Smoothing
   * mixes in the mean over the classes of -log p_c, (max - mean) + log(sum);
   * without it the loss is the unsmoothed one, computed as it always was. */
  if (tid == 0) {
    double loss = ((double)m - (double)xt) + log((double)s);
    if (smoothing != 0.0f)
      loss = (1.0 - (double)smoothing) * loss +
             (double)smoothing * (((double)m - mean) + log((double)s));
    losses[blockIdx.x] = (float)loss;
  }

  if constexpr (GRAD) {
    const float scale = dloss / s;
    /* the target distribution (1 - e) onehot + e / V */
    const float uniform = (float)((double)smoothing * (double)dloss / (double)V);
    const float hit =
        smoothing != 0.0f ? (float)((1.0 - (double)smoothing) * (double)dloss) : dloss;
    for (int i = tid; i < V; i += nt) {
      float g = expf(load<DT>(logits, base + i) - m) * scale;
      if (smoothing != 0.0f) g -= uniform;
      if (i == t) g -= hit;
      store<DT>(dlogits, base + i, g);
    }
    for (int i = V + tid; i < Vp; i += nt) store<DT>(dlogits, base + i, 0.0f);
  }
}

static __global__ void __launch_bounds__(kSumThreads)
    loss_sum_kernel(float *loss_sum, const float *losses, int N) {
  __shared__ double shm[32];
  double s = 0.0;
  for (int i = threadIdx.x; i < N; i += blockDim.x) s += (double)losses[i];
  s = block_sum(s, shm);
  if (threadIdx.x == 0) *loss_sum = (float)((double)*loss_sum + s);
}

template <int DT>
ddp_status_t launch_rows(float *losses, void *dlogits, const void *logits, const int32_t *targets,
                         float dloss, float smoothing, int N, int V, int Vp, cudaStream_t stream) {
  if (dlogits)
    xent_row_kernel<DT, true><<<(unsigned)N, kRowThreads, 0, stream>>>(
        losses, dlogits, logits, targets, dloss, smoothing, V, Vp);
  else
    xent_row_kernel<DT, false><<<(unsigned)N, kRowThreads, 0, stream>>>(
        losses, dlogits, logits, targets, dloss, smoothing, V, Vp);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

}  // namespace

extern "C" ddp_status_t ddp_cuda_xent_fused(ddp_dtype_t dt, float *losses, float *loss_sum,
                                            void *dlogits, const void *logits,
                                            const int32_t *targets, float dloss, float smoothing,
                                            int N, int V, int Vp, cudaStream_t stream) {
  if (dt != DDP_DTYPE_F32 && dt != DDP_DTYPE_BF16 && dt != DDP_DTYPE_F16)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "xent_fused: activation dtype %s (%d) is not fp32, bf16 or fp16",
             ddp_dtype_name(dt), (int)dt);
  if (!(N > 0 && V > 0 && Vp >= V))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "xent_fused: sizes N=%d V=%d Vp=%d must be positive with Vp >= V",
             N, V, Vp);
  if (!losses || !loss_sum || !logits || !targets)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "xent_fused: NULL pointer");
  if (!(smoothing >= 0.0f && smoothing < 1.0f))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "xent_fused: label smoothing %g is outside [0, 1)",
             (double)smoothing);
  const size_t esz = ddp_dtype_size(dt);
  if (!aligned(logits, esz) || (dlogits && !aligned(dlogits, esz)) || !aligned(losses, 4) ||
      !aligned(loss_sum, 4) || !aligned(targets, 4))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "xent_fused: a buffer is not aligned to its element size");
  ddp_status_t st;
  switch (dt) {
    case DDP_DTYPE_F32:
      st = launch_rows<DDP_DTYPE_F32>(losses, dlogits, logits, targets, dloss, smoothing, N, V, Vp,
                                      stream);
      break;
    case DDP_DTYPE_BF16:
      st = launch_rows<DDP_DTYPE_BF16>(losses, dlogits, logits, targets, dloss, smoothing, N, V, Vp,
                                       stream);
      break;
    default:
      st = launch_rows<DDP_DTYPE_F16>(losses, dlogits, logits, targets, dloss, smoothing, N, V, Vp,
                                      stream);
      break;
  }
  DDP_CHECK(st);
  loss_sum_kernel<<<1, kSumThreads, 0, stream>>>(loss_sum, losses, N);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}
