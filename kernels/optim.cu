/* Optimizer kernels: the global gradient norm, the multi-tensor AdamW /
 * SGD / LAMB step, and LAMB's three parts over a shard (launchers in
 * kernels/optim.h; CPU twins in src/backend/cpu/cpu_optim.c).
 *
 * The per-element arithmetic is the CPU twin's, operation for operation,
 * with the rounding made explicit (__fmul_rn and friends): nvcc would
 * otherwise contract a*b + c into one fused multiply-add, and the CPU build
 * does not, so the explicit form keeps the two backends on the same fp32
 * numbers (division and sqrtf are correctly rounded on both). Sums of
 * squares are accumulated in double in an order fixed by the sizes alone:
 * per-block partials, then one pass over the partials in block order. No
 * atomics anywhere, so two runs give the same bits.
 *
 * The step reads the squared norm from device memory and decides clipping
 * and the loss scaler's skip on the device, so the host never waits. */
#include <math.h>

#include "core/foreign_check.h"
#include "nn_io.cuh"
#include "optim.h"

namespace {

using namespace ddp_nn;

constexpr int kThreads = 256;
constexpr int kSumsqBlocks = 1024;

/* Per-block partials of ddp_cuda_grad_sumsq (see optim.h: one stream). */
__device__ double g_sumsq_partials[kSumsqBlocks];

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float dvd(float a, float b) { return __fdiv_rn(a, b); }

static __global__ void sumsq_blocks_kernel(const float *g, size_t n, size_t per, float scale) {
  __shared__ double shm[32];
  const size_t begin = (size_t)blockIdx.x * per;
  const size_t end = begin + per < n ? begin + per : n;
  double acc = 0.0;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double x = (double)mul(scale, g[i]);
    acc += x * x;
  }
  acc = block_sum(acc, shm);
  if (threadIdx.x == 0) g_sumsq_partials[blockIdx.x] = acc;
}

static __global__ void sumsq_total_kernel(float *out, int blocks) {
  __shared__ double shm[32];
  double acc = 0.0;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) acc += g_sumsq_partials[b];
  acc = block_sum(acc, shm);
  if (threadIdx.x == 0) *out = (float)acc;
}

/* The gradient multiplier: grad_scale times the clip coefficient
 * (torch.nn.utils.clip_grad_norm_, computed in double as the CPU twin);
 * false when the loss scaler's skip applies. Every thread computes the same
 * value from the same float. */
__device__ __forceinline__ bool step_gmul(const ddp_cuda_optim_coef_t &c, const float *sumsq,
                                          float *gmul) {
  double m = (double)c.grad_scale;
  if (c.use_sumsq) {
    const float s = *sumsq;
    if (c.skip_nonfinite && !isfinite(s)) return false;
    if (c.max_grad_norm > 0.0f) {
      const double coef = (double)c.max_grad_norm / (sqrt((double)s) + 1e-6);
      if (!(coef >= 1.0)) m *= coef;
    }
  }
  *gmul = (float)m;
  return true;
}

/* One thread of the grid records a skipped step. */
__device__ __forceinline__ void count_skip(int64_t *skipped) {
  if (skipped && blockIdx.x == 0 && threadIdx.x == 0) *skipped += 1;
}

template <int CDT>
__device__ __forceinline__ void emit(void *compute, size_t i, float p) {
  if constexpr (CDT >= 0) store<CDT>(compute, i, p);
}

/* AdamW and SGD: one block per chunk. CDT < 0: no compute copy. */
template <int CDT>
static __global__ void update_kernel(ddp_cuda_optim_coef_t c, float *p, const float *g,
                                     float *state, size_t n, void *compute, const float *sumsq,
                                     const ddp_cuda_optim_chunk_t *chunks,
                                     const int32_t *seg_decay, int64_t *skipped) {
  float gmul;
  if (!step_gmul(c, sumsq, &gmul)) {
    count_skip(skipped);
    return;
  }
  const ddp_cuda_optim_chunk_t ch = chunks[blockIdx.x];
  const bool decay = seg_decay[ch.seg] != 0;
  if (c.kind == 0) { /* AdamW */
    const float dm = decay ? c.decay_mul : 1.0f;
    float *m = state, *v = state + n;
    for (int j = threadIdx.x; j < ch.len; j += blockDim.x) {
      const size_t i = (size_t)ch.start + (size_t)j;
      const float gi = mul(g[i], gmul);
      const float mi = add(mul(c.b1, m[i]), mul(c.omb1, gi));
      const float vi = add(mul(c.b2, v[i]), mul(mul(c.omb2, gi), gi));
      m[i] = mi;
      v[i] = vi;
      const float s = sqrtf(vi);
      const float pi =
          sub(mul(p[i], dm), dvd(mul(c.step_size, mi), add(dvd(s, c.bc2_sqrt), c.eps)));
      p[i] = pi;
      emit<CDT>(compute, i, pi);
    }
    return;
  }
  /* SGD (kind 1) */
  const float wd = decay ? c.wd : 0.0f;
  for (int j = threadIdx.x; j < ch.len; j += blockDim.x) {
    const size_t i = (size_t)ch.start + (size_t)j;
    float pi = p[i];
    const float gi = add(mul(g[i], gmul), mul(wd, pi));
    if (!c.has_buf) {
      pi = sub(pi, mul(c.lr, gi));
    } else {
      const float b = c.first ? gi : add(mul(c.momentum, state[i]), gi);
      state[i] = b;
      const float d = c.nesterov ? add(gi, mul(c.momentum, b)) : b;
      pi = sub(pi, mul(c.lr, d));
    }
    p[i] = pi;
    emit<CDT>(compute, i, pi);
  }
}

/* LAMB's update direction r, apex's MOMENT_MODE_1 expression, the same in
 * both passes (so the r applied is the r whose norm was taken). */
__device__ __forceinline__ float lamb_r(const ddp_cuda_optim_coef_t &c, float p, float m, float v,
                                        float wd) {
  const float t = sqrtf(dvd(v, c.bc2));
  return add(dvd(dvd(m, c.bc1), add(t, c.eps)), mul(wd, p));
}

/* lr x trust from a tensor's squared norms, the CPU twin's expression. */
__device__ __forceinline__ float lamb_ratio(float lr, double pp, double rr) {
  const double pn = sqrt(pp), rn = sqrt(rr);
  const double trust = pn > 0.0 && rn > 0.0 ? pn / rn : 1.0;
  return (float)((double)lr * trust);
}

/* LAMB pass 1: moments, and per chunk ||p||^2 and ||r||^2 (double). */
static __global__ void lamb_norms_kernel(ddp_cuda_optim_coef_t c, const float *p, const float *g,
                                         float *state, size_t n, const float *sumsq,
                                         const ddp_cuda_optim_chunk_t *chunks,
                                         const int32_t *seg_decay, double *partials) {
  __shared__ double shm[32];
  float gmul;
  if (!step_gmul(c, sumsq, &gmul)) return;
  const ddp_cuda_optim_chunk_t ch = chunks[blockIdx.x];
  const float wd = seg_decay[ch.seg] ? c.wd : 0.0f;
  float *m = state, *v = state + n;
  double pp = 0.0, rr = 0.0;
  for (int j = threadIdx.x; j < ch.len; j += blockDim.x) {
    const size_t i = (size_t)ch.start + (size_t)j;
    const float gi = mul(g[i], gmul);
    const float mi = add(mul(c.b1, m[i]), mul(c.omb1, gi));
    const float vi = add(mul(c.b2, v[i]), mul(mul(c.omb2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float r = lamb_r(c, p[i], mi, vi, wd);
    pp += (double)p[i] * (double)p[i];
    rr += (double)r * (double)r;
  }
  pp = block_sum(pp, shm);
  rr = block_sum(rr, shm);
  if (threadIdx.x == 0) {
    partials[2 * (size_t)blockIdx.x] = pp;
    partials[2 * (size_t)blockIdx.x + 1] = rr;
  }
}

/* LAMB pass 2: per segment the trust ratio from its chunks, in order. */
static __global__ void lamb_ratio_kernel(ddp_cuda_optim_coef_t c, const float *sumsq,
                                         const int32_t *seg_chunk_begin, int n_segs,
                                         const double *partials, float *ratio) {
  float gmul;
  if (!step_gmul(c, sumsq, &gmul)) return;
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n_segs) return;
  double pp = 0.0, rr = 0.0;
  for (int k = seg_chunk_begin[s]; k < seg_chunk_begin[s + 1]; ++k) {
    pp += partials[2 * (size_t)k];
    rr += partials[2 * (size_t)k + 1];
  }
  ratio[s] = lamb_ratio(c.lr, pp, rr);
}

/* LAMB over a shard, part 1 after pass 1: per segment (piece) its squared
 * norms from its chunks, in order, into sums[2s], sums[2s + 1]. */
static __global__ void lamb_seg_sums_kernel(ddp_cuda_optim_coef_t c, const float *sumsq,
                                            const int32_t *seg_chunk_begin, int n_segs,
                                            const double *partials, double *sums) {
  float gmul;
  if (!step_gmul(c, sumsq, &gmul)) return;
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n_segs) return;
  double pp = 0.0, rr = 0.0;
  for (int k = seg_chunk_begin[s]; k < seg_chunk_begin[s + 1]; ++k) {
    pp += partials[2 * (size_t)k];
    rr += partials[2 * (size_t)k + 1];
  }
  sums[2 * (size_t)s] = pp;
  sums[2 * (size_t)s + 1] = rr;
}

/* LAMB over a shard, part 2: per piece its tensor's sums over the group, in
 * the group's order (the CPU twin's loop, so the same bits). */
static __global__ void lamb_group_ratio_kernel(float lr, const double *all_sums,
                                               const int32_t *begin, const int32_t *index,
                                               int n_segs, float *ratio) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n_segs) return;
  double pp = 0.0, rr = 0.0;
  for (int k = begin[s]; k < begin[s + 1]; ++k) {
    pp += all_sums[2 * (size_t)index[k]];
    rr += all_sums[2 * (size_t)index[k] + 1];
  }
  ratio[s] = lamb_ratio(lr, pp, rr);
}

/* LAMB pass 3: p -= ratio * r. */
template <int CDT>
static __global__ void lamb_apply_kernel(ddp_cuda_optim_coef_t c, float *p, const float *state,
                                         size_t n, void *compute, const float *sumsq,
                                         const ddp_cuda_optim_chunk_t *chunks,
                                         const int32_t *seg_decay, const float *ratio,
                                         int64_t *skipped) {
  float gmul;
  if (!step_gmul(c, sumsq, &gmul)) {
    count_skip(skipped);
    return;
  }
  const ddp_cuda_optim_chunk_t ch = chunks[blockIdx.x];
  const float wd = seg_decay[ch.seg] ? c.wd : 0.0f;
  const float q = ratio[ch.seg];
  const float *m = state, *v = state + n;
  for (int j = threadIdx.x; j < ch.len; j += blockDim.x) {
    const size_t i = (size_t)ch.start + (size_t)j;
    const float pi = sub(p[i], mul(q, lamb_r(c, p[i], m[i], v[i], wd)));
    p[i] = pi;
    emit<CDT>(compute, i, pi);
  }
}

template <int CDT>
ddp_status_t launch(const ddp_cuda_optim_coef_t *c, float *params, const float *grads,
                    float *state, size_t n, void *compute, const float *sumsq,
                    const ddp_cuda_optim_chunk_t *chunks, int n_chunks, const int32_t *seg_decay,
                    const int32_t *seg_chunk_begin, int n_segs, double *partials, float *ratio,
                    int64_t *skipped, cudaStream_t stream) {
  if (c->kind == 2) {
    lamb_norms_kernel<<<(unsigned)n_chunks, kThreads, 0, stream>>>(*c, params, grads, state, n,
                                                                     sumsq, chunks, seg_decay,
                                                                     partials);
    DDP_CUDA_CHECK(cudaGetLastError());
    lamb_ratio_kernel<<<(unsigned)((n_segs + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        *c, sumsq, seg_chunk_begin, n_segs, partials, ratio);
    DDP_CUDA_CHECK(cudaGetLastError());
    lamb_apply_kernel<CDT><<<(unsigned)n_chunks, kThreads, 0, stream>>>(
        *c, params, state, n, compute, sumsq, chunks, seg_decay, ratio, skipped);
  } else {
    update_kernel<CDT><<<(unsigned)n_chunks, kThreads, 0, stream>>>(*c, params, grads, state, n,
                                                                      compute, sumsq, chunks,
                                                                      seg_decay, skipped);
  }
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

template <int CDT>
ddp_status_t launch_lamb_apply(const ddp_cuda_optim_coef_t *c, float *params, const float *state,
                               size_t n, void *compute, const float *sumsq,
                               const ddp_cuda_optim_chunk_t *chunks, int n_chunks,
                               const int32_t *seg_decay, const float *ratio, int64_t *skipped,
                               cudaStream_t stream) {
  lamb_apply_kernel<CDT><<<(unsigned)n_chunks, kThreads, 0, stream>>>(
      *c, params, state, n, compute, sumsq, chunks, seg_decay, ratio, skipped);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

}  // namespace

extern "C" ddp_status_t ddp_cuda_optim_lamb_sums(const ddp_cuda_optim_coef_t *c,
                                                 const float *params, const float *grads,
                                                 float *state, size_t n, const float *sumsq,
                                                 const ddp_cuda_optim_chunk_t *chunks,
                                                 int n_chunks, const int32_t *seg_decay,
                                                 const int32_t *seg_chunk_begin, int n_segs,
                                                 double *partials, double *sums,
                                                 cudaStream_t stream) {
  if (!c || !params || !grads || !state || !chunks || !seg_decay || !seg_chunk_begin ||
      !partials || !sums || n_chunks < 1 || n_segs < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_lamb_sums: NULL pointer or empty plan");
  if (c->use_sumsq && !sumsq) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_lamb_sums: NULL sumsq");
  lamb_norms_kernel<<<(unsigned)n_chunks, kThreads, 0, stream>>>(*c, params, grads, state, n,
                                                                   sumsq, chunks, seg_decay,
                                                                   partials);
  DDP_CUDA_CHECK(cudaGetLastError());
  lamb_seg_sums_kernel<<<(unsigned)((n_segs + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      *c, sumsq, seg_chunk_begin, n_segs, partials, sums);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_optim_lamb_ratios(float lr, const double *all_sums,
                                                   const int32_t *begin, const int32_t *index,
                                                   int n_segs, float *ratio, cudaStream_t stream) {
  if (!all_sums || !begin || !index || !ratio || n_segs < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_lamb_ratios: NULL pointer or empty plan");
  lamb_group_ratio_kernel<<<(unsigned)((n_segs + kThreads - 1) / kThreads), kThreads, 0,
                            stream>>>(lr, all_sums, begin, index, n_segs, ratio);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_optim_lamb_apply(const ddp_cuda_optim_coef_t *c, float *params,
                                                  const float *state, size_t n, void *compute,
                                                  ddp_dtype_t cdt, const float *sumsq,
                                                  const ddp_cuda_optim_chunk_t *chunks,
                                                  int n_chunks, const int32_t *seg_decay,
                                                  const float *ratio, int64_t *skipped,
                                                  cudaStream_t stream) {
  if (!c || !params || !state || !chunks || !seg_decay || !ratio || n_chunks < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_lamb_apply: NULL pointer or empty plan");
  if (c->use_sumsq && !sumsq) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_lamb_apply: NULL sumsq");
  if (!compute)
    return launch_lamb_apply<-1>(c, params, state, n, NULL, sumsq, chunks, n_chunks, seg_decay,
                                 ratio, skipped, stream);
  switch (cdt) {
    case DDP_DTYPE_F32:
      return launch_lamb_apply<DDP_DTYPE_F32>(c, params, state, n, compute, sumsq, chunks,
                                              n_chunks, seg_decay, ratio, skipped, stream);
    case DDP_DTYPE_BF16:
      return launch_lamb_apply<DDP_DTYPE_BF16>(c, params, state, n, compute, sumsq, chunks,
                                               n_chunks, seg_decay, ratio, skipped, stream);
    case DDP_DTYPE_F16:
      return launch_lamb_apply<DDP_DTYPE_F16>(c, params, state, n, compute, sumsq, chunks,
                                              n_chunks, seg_decay, ratio, skipped, stream);
    default:
      DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_lamb_apply: compute dtype %s is not a float type",
               ddp_dtype_name(cdt));
  }
}

extern "C" ddp_status_t ddp_cuda_grad_sumsq(float *out, const float *g, size_t n, float scale,
                                            cudaStream_t stream) {
  if (!out || (n && !g)) DDP_FAIL(DDP_ERR_INVALID_ARG, "grad_sumsq: NULL pointer");
  if (!isfinite(scale)) DDP_FAIL(DDP_ERR_INVALID_ARG, "grad_sumsq: scale %g", (double)scale);
  /* Blocks of at least 4096 elements, at most kSumsqBlocks: the split (and
   * so the order of additions) depends on n only. */
  size_t blocks = (n + 4095) / 4096;
  if (blocks < 1) blocks = 1;
  if (blocks > (size_t)kSumsqBlocks) blocks = kSumsqBlocks;
  const size_t per = (n + blocks - 1) / blocks;
  sumsq_blocks_kernel<<<(unsigned)blocks, kThreads, 0, stream>>>(g, n, per ? per : 1, scale);
  DDP_CUDA_CHECK(cudaGetLastError());
  sumsq_total_kernel<<<1, 1024, 0, stream>>>(out, (int)blocks);
  DDP_CUDA_CHECK(cudaGetLastError());
  return DDP_OK;
}

extern "C" ddp_status_t ddp_cuda_optim_update(const ddp_cuda_optim_coef_t *c, float *params,
                                              const float *grads, float *state, size_t n,
                                              void *compute, ddp_dtype_t cdt, const float *sumsq,
                                              const ddp_cuda_optim_chunk_t *chunks, int n_chunks,
                                              const int32_t *seg_decay,
                                              const int32_t *seg_chunk_begin, int n_segs,
                                              double *lamb_partials, float *lamb_ratio,
                                              int64_t *skipped, cudaStream_t stream) {
  if (!c || !params || !grads || !chunks || !seg_decay || n_chunks < 1 || n_segs < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_update: NULL pointer or empty plan");
  if (c->kind < 0 || c->kind > 2)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_update: unknown kind %d", c->kind);
  if ((c->kind != 1 || c->has_buf) && !state)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_update: NULL state");
  if (c->kind == 2 && (!lamb_partials || !lamb_ratio || !seg_chunk_begin))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_update: LAMB needs its scratch");
  if (c->use_sumsq && !sumsq) DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_update: NULL sumsq");
  if (!compute)
    return launch<-1>(c, params, grads, state, n, NULL, sumsq, chunks, n_chunks, seg_decay,
                      seg_chunk_begin, n_segs, lamb_partials, lamb_ratio, skipped, stream);
  switch (cdt) {
    case DDP_DTYPE_F32:
      return launch<DDP_DTYPE_F32>(c, params, grads, state, n, compute, sumsq, chunks, n_chunks,
                                   seg_decay, seg_chunk_begin, n_segs, lamb_partials, lamb_ratio,
                                   skipped, stream);
    case DDP_DTYPE_BF16:
      return launch<DDP_DTYPE_BF16>(c, params, grads, state, n, compute, sumsq, chunks, n_chunks,
                                    seg_decay, seg_chunk_begin, n_segs, lamb_partials, lamb_ratio,
                                    skipped, stream);
    case DDP_DTYPE_F16:
      return launch<DDP_DTYPE_F16>(c, params, grads, state, n, compute, sumsq, chunks, n_chunks,
                                   seg_decay, seg_chunk_begin, n_segs, lamb_partials, lamb_ratio,
                                   skipped, stream);
    default:
      DDP_FAIL(DDP_ERR_INVALID_ARG, "optim_update: compute dtype %s is not a float type",
               ddp_dtype_name(cdt));
  }
}
