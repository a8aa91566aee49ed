/* Convolutions on the GPU through cuDNN's C API, autotuned as
 * cudnn.benchmark: the conv table's state and its three convolution ops
 * (contracts in ddptrain/conv.h; internals shared in cuda_conv.h).
 *
 * Layout and precision: activations are NHWC tensors and the weights NHWC
 * filters (K,R,S,C), so no transposes are needed; the convolution computes
 * in fp32 (CUDNN_DATA_FLOAT) under every storage type. bf16/fp16 run on
 * tensor cores; fp32 uses TF32 tensor cores only when the backend allows
 * TF32 (--tf32), else FMA math, exact fp32.
 *
 * Autotuning: the first call of an op on a shape (or conv_prepare, for all
 * three ops at once) runs cudnnFind*AlgorithmEx, which times every
 * candidate algorithm on the GPU, and keeps the fastest one that is allowed
 * (near-ties, within CONV_TIE_MARGIN, to the lowest algorithm number)
 * in a plan keyed by the shape and dtype, beside the descriptors: later
 * calls are a lookup and one cuDNN call. The backward-weights search writes
 * its output, so it always measures into a scratch filter, never into the
 * live gradient (which accumulate may be adding to). Allowed means
 * deterministic (CUDNN_DETERMINISTIC: cuDNN's atomics-based algorithms are
 * excluded) unless the backend was made with conv_nondeterministic
 * (--deterministic off), and no tensor-core math for fp32 without TF32.
 * Timings vary from run to run, and so would the choices: a backend given
 * an algorithm record (be->conv_algos, backend/conv_algos.h) takes each
 * shape's choice from there without timing, and adds what it searched.
 *
 * Workspace: one buffer for the whole table from the caching allocator,
 * grown to the largest need of any chosen algorithm and kept; the search
 * itself borrows a temporary one (as large as the biggest candidate needs,
 * at most 1 GiB or half of the free memory) and returns it to the cache. So
 * once every shape has been prepared, no op allocates. A half weight
 * gradient is computed by cuDNN in the storage type (its half filters are
 * half) into the end of the workspace and added into the fp32 gradient by
 * a kernel of ours. */
#include <config.h>

#include <cudnn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend/conv_algos.h"
#include "backend/cuda/cuda_conv.h"
#include "backend/cuda/cuda_impl.h"
#include "conv_ops.h"
#include "core/foreign_check.h"
#include "ddptrain/log.h"

enum conv_op { OP_FWD = 0, OP_BWD_DATA = 1, OP_BWD_WEIGHTS = 2, OP_COUNT = 3 };
static const char *const k_op_name[OP_COUNT] = {"conv_fwd", "conv_bwd_data", "conv_bwd_weights"};

#define FIND_WORKSPACE_CAP ((size_t)1 << 30)
#define MAX_CANDIDATES 16
#define WS_ALIGN ((size_t)256)

/* One shape's descriptors and, per op, the chosen algorithm. */
typedef struct conv_plan {
  ddp_conv_shape_t sh;
  ddp_dtype_t dt;
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  int found[OP_COUNT];
  int algo[OP_COUNT];
  cudnnMathType_t math[OP_COUNT];
  size_t algo_ws[OP_COUNT]; /* the algorithm's workspace */
  size_t need[OP_COUNT];    /* of the shared workspace: algo_ws, plus a half dw */
} conv_plan_t;

struct ddp_cuda_conv {
  cudnnHandle_t handle;
  cudnnTensorDescriptor_t bn_x, bn_param;
  conv_plan_t **plans;
  size_t nplans, cap;
  void *ws;
  size_t ws_bytes;
  uint64_t finds;
  cudaStream_t stream; /* the stream the handle was last bound to */
  int stream_bound;
  void *bn_counters; /* the batch-norm reductions' arrival counters, zero between uses */
  size_t bn_counters_bytes;
};

/* Candidates timed within this fraction of the fastest count as tied. */
#define CONV_TIE_MARGIN 0.05f

/* One candidate of a search, whichever op's perf struct it came from. */
typedef struct candidate {
  int algo;
  cudnnStatus_t status;
  float ms;
  size_t memory;
  cudnnDeterminism_t determinism;
  cudnnMathType_t math;
} candidate_t;

static size_t round_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

/* ---- state ------------------------------------------------------------------ */

static ddp_status_t conv_state(ddp_backend_t *be, struct ddp_cuda_conv **out) {
  ddp_cuda_state_t *st = ddp_cuda_state(be);
  if (!st->conv) {
    struct ddp_cuda_conv *c = calloc(1, sizeof *c);
    if (!c) DDP_FAIL(DDP_ERR_OOM, "cuda:%d: conv: out of host memory", be->device);
    ddp_status_t rc = DDP_OK;
    DDP_CUDNN_CHECK_GOTO(cudnnCreate(&c->handle), rc, fail);
    DDP_CUDNN_CHECK_GOTO(cudnnCreateTensorDescriptor(&c->bn_x), rc, fail_handle);
    DDP_CUDNN_CHECK_GOTO(cudnnCreateTensorDescriptor(&c->bn_param), rc, fail_x);
    st->conv = c;
    goto done;
  fail_x:
    cudnnDestroyTensorDescriptor(c->bn_x);
  fail_handle:
    cudnnDestroy(c->handle);
  fail:
    free(c);
    return rc;
  }
done:
  *out = st->conv;
  return DDP_OK;
}

ddp_status_t ddp_cuda_conv_handle(ddp_backend_t *be, cudaStream_t stream, cudnnHandle_t *out) {
  struct ddp_cuda_conv *c = NULL;
  DDP_CHECK(conv_state(be, &c));
  /* every op asks, nearly always for the compute stream: bind only on a
   * change, one host call fewer per op of a step's hundreds */
  if (!c->stream_bound || c->stream != stream) {
    DDP_CUDNN_CHECK(cudnnSetStream(c->handle, stream));
    c->stream = stream;
    c->stream_bound = 1;
  }
  *out = c->handle;
  return DDP_OK;
}

cudnnTensorDescriptor_t ddp_cuda_conv_bn_x_desc(ddp_backend_t *be) {
  return ddp_cuda_state(be)->conv->bn_x;
}

cudnnTensorDescriptor_t ddp_cuda_conv_bn_param_desc(ddp_backend_t *be) {
  return ddp_cuda_state(be)->conv->bn_param;
}

/* *buf grown to at least `bytes` (*have tracks its size; never shrunk).
 * The old block is freed first: growing happens while preparing, and the
 * old block may serve the new request from the cache. *grew: a new block
 * was allocated (its contents undefined). */
static ddp_status_t grow(ddp_backend_t *be, void **buf, size_t *have, size_t bytes, int *grew) {
  *grew = 0;
  if (bytes <= *have) return DDP_OK;
  if (*buf) ddp_backend_free(be, *buf);
  *buf = NULL;
  *have = 0;
  DDP_CHECK(ddp_backend_alloc(be, bytes, buf));
  *have = bytes;
  *grew = 1;
  return DDP_OK;
}

ddp_status_t ddp_cuda_conv_workspace(ddp_backend_t *be, size_t bytes, void **ws) {
  struct ddp_cuda_conv *c = NULL;
  int grew = 0;
  DDP_CHECK(conv_state(be, &c));
  DDP_CHECK(grow(be, &c->ws, &c->ws_bytes, round_up(bytes, WS_ALIGN), &grew));
  *ws = c->ws;
  return DDP_OK;
}

/* Kept apart from the workspace, which cuDNN overwrites: each counter is
 * zero except while a reduction's blocks arrive, and the last of them
 * wraps it back to zero (ddp_cuda_bn_reduce). Grown, and zeroed on the
 * compute stream, only when a shape needs more than any before it, which
 * bn_prepare does before the step loop. */
ddp_status_t ddp_cuda_conv_bn_counters(ddp_backend_t *be, size_t n, unsigned **out) {
  struct ddp_cuda_conv *c = NULL;
  int grew = 0;
  DDP_CHECK(conv_state(be, &c));
  DDP_CHECK(grow(be, &c->bn_counters, &c->bn_counters_bytes, n * sizeof(unsigned), &grew));
  if (grew)
    DDP_CUDA_CHECK(
        cudaMemsetAsync(c->bn_counters, 0, c->bn_counters_bytes, ddp_cuda_state(be)->compute));
  *out = c->bn_counters;
  return DDP_OK;
}

uint64_t ddp_cuda_conv_find_calls(ddp_backend_t *be) {
  const ddp_cuda_state_t *st = ddp_cuda_state(be);
  return st && st->conv ? st->conv->finds : 0;
}

size_t ddp_cuda_conv_workspace_size(ddp_backend_t *be) {
  const ddp_cuda_state_t *st = ddp_cuda_state(be);
  return st && st->conv ? st->conv->ws_bytes : 0;
}

static void plan_destroy(conv_plan_t *p) {
  if (p->x) cudnnDestroyTensorDescriptor(p->x);
  if (p->y) cudnnDestroyTensorDescriptor(p->y);
  if (p->w) cudnnDestroyFilterDescriptor(p->w);
  if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
  free(p);
}

void ddp_cuda_conv_release(ddp_backend_t *be) {
  ddp_cuda_state_t *st = ddp_cuda_state(be);
  if (!st || !st->conv) return;
  struct ddp_cuda_conv *c = st->conv;
  cudaStreamSynchronize(st->compute);
  for (size_t i = 0; i < c->nplans; ++i) plan_destroy(c->plans[i]);
  free(c->plans);
  if (c->ws) ddp_backend_free(be, c->ws);
  if (c->bn_counters) ddp_backend_free(be, c->bn_counters);
  cudnnDestroyTensorDescriptor(c->bn_param);
  cudnnDestroyTensorDescriptor(c->bn_x);
  cudnnDestroy(c->handle);
  free(c);
  st->conv = NULL;
}

/* ---- checks --------------------------------------------------------------- */

ddp_status_t ddp_cuda_conv_check_dt(const char *op, ddp_dtype_t dt) {
  if (dt != DDP_DTYPE_F32 && dt != DDP_DTYPE_BF16 && dt != DDP_DTYPE_F16)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "%s: activation dtype %s (%d) is not fp32, bf16 or fp16", op,
             ddp_dtype_name(dt), (int)dt);
  return DDP_OK;
}

cudnnDataType_t ddp_cuda_cudnn_dtype(ddp_dtype_t dt) {
  return dt == DDP_DTYPE_BF16  ? CUDNN_DATA_BFLOAT16
         : dt == DDP_DTYPE_F16 ? CUDNN_DATA_HALF
                               : CUDNN_DATA_FLOAT;
}

/* ---- plans ----------------------------------------------------------------- */

static int same_shape(const ddp_conv_shape_t *a, const ddp_conv_shape_t *b) {
  return a->N == b->N && a->H == b->H && a->W == b->W && a->C == b->C && a->K == b->K &&
         a->R == b->R && a->S == b->S && a->stride == b->stride && a->pad == b->pad;
}

/* The math the descriptor starts with: tensor cores for half types, TF32
 * for fp32 only where allowed (DEFAULT permits it on Ampere and later;
 * FMA forbids it). */
static cudnnMathType_t base_math(ddp_backend_t *be, ddp_dtype_t dt) {
  if (dt != DDP_DTYPE_F32) return CUDNN_TENSOR_OP_MATH;
  return ddp_cuda_state(be)->allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

static ddp_status_t plan_describe(ddp_backend_t *be, conv_plan_t *p) {
  const ddp_conv_shape_t *sh = &p->sh;
  const cudnnDataType_t t = ddp_cuda_cudnn_dtype(p->dt);
  DDP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
  DDP_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
  DDP_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
  DDP_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
  DDP_CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NHWC, t, sh->N, sh->C, sh->H, sh->W));
  DDP_CUDNN_CHECK(
      cudnnSetFilter4dDescriptor(p->w, t, CUDNN_TENSOR_NHWC, sh->K, sh->C, sh->R, sh->S));
  DDP_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, sh->pad, sh->pad, sh->stride, sh->stride,
                                                  1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  DDP_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, base_math(be, p->dt)));
  int n = 0, k = 0, oh = 0, ow = 0;
  DDP_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &n, &k, &oh, &ow));
  if (n != sh->N || k != sh->K || oh != ddp_conv_out_h(sh) || ow != ddp_conv_out_w(sh))
    DDP_FAIL(DDP_ERR_INTERNAL, "conv: cuDNN's output %dx%dx%dx%d differs from ours %dx%dx%dx%d", n,
             oh, ow, k, sh->N, ddp_conv_out_h(sh), ddp_conv_out_w(sh), sh->K);
  DDP_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NHWC, t, sh->N, sh->K,
                                             ddp_conv_out_h(sh), ddp_conv_out_w(sh)));
  return DDP_OK;
}

static ddp_status_t plan_get(ddp_backend_t *be, ddp_dtype_t dt, const ddp_conv_shape_t *sh,
                             conv_plan_t **out) {
  struct ddp_cuda_conv *c = NULL;
  DDP_CHECK(conv_state(be, &c));
  for (size_t i = 0; i < c->nplans; ++i)
    if (c->plans[i]->dt == dt && same_shape(&c->plans[i]->sh, sh)) {
      *out = c->plans[i];
      return DDP_OK;
    }
  if (c->nplans == c->cap) {
    const size_t cap = c->cap ? 2 * c->cap : 32;
    conv_plan_t **grown = realloc(c->plans, cap * sizeof *grown);
    if (!grown) DDP_FAIL(DDP_ERR_OOM, "cuda:%d: conv: out of host memory for plans", be->device);
    c->plans = grown;
    c->cap = cap;
  }
  conv_plan_t *p = calloc(1, sizeof *p);
  if (!p) DDP_FAIL(DDP_ERR_OOM, "cuda:%d: conv: out of host memory for a plan", be->device);
  p->sh = *sh;
  p->dt = dt;
  const ddp_status_t st = plan_describe(be, p);
  if (st != DDP_OK) {
    plan_destroy(p);
    return st;
  }
  c->plans[c->nplans++] = p;
  *out = p;
  return DDP_OK;
}

/* ---- the search ------------------------------------------------------------ */

/* The workspace algorithm `algo` of op needs for p under the descriptor's
 * current math type, or the status of an algorithm that does not apply. */
static cudnnStatus_t algo_workspace(cudnnHandle_t h, const conv_plan_t *p, enum conv_op op,
                                    int algo, size_t *bytes) {
  if (op == OP_FWD)
    return cudnnGetConvolutionForwardWorkspaceSize(h, p->x, p->w, p->conv, p->y,
                                                   (cudnnConvolutionFwdAlgo_t)algo, bytes);
  if (op == OP_BWD_DATA)
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p->w, p->y, p->conv, p->x,
                                                        (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(
      h, p->x, p->y, p->conv, p->w, (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

/* The largest workspace any candidate algorithm of op asks for, within the
 * search's cap. Algorithms that do not apply to the shape answer with an
 * error and are skipped. */
static size_t search_workspace(ddp_backend_t *be, cudnnHandle_t h, const conv_plan_t *p,
                               enum conv_op op) {
  const int count = op == OP_FWD        ? CUDNN_CONVOLUTION_FWD_ALGO_COUNT
                    : op == OP_BWD_DATA ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
                                        : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  size_t most = 0;
  for (int a = 0; a < MAX_CANDIDATES && a < count; ++a) {
    size_t b = 0;
    if (algo_workspace(h, p, op, a, &b) == CUDNN_STATUS_SUCCESS && b > most) most = b;
  }
  size_t cap = FIND_WORKSPACE_CAP, free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && free_b / 2 < cap) cap = free_b / 2;
  cudaGetLastError();
  (void)be;
  return most < cap ? most : cap;
}

#define COPY_CANDIDATES(perf, n, out)               \
  for (int i_ = 0; i_ < (n); ++i_) {                \
    (out)[i_].algo = (int)(perf)[i_].algo;          \
    (out)[i_].status = (perf)[i_].status;           \
    (out)[i_].ms = (perf)[i_].time;                 \
    (out)[i_].memory = (perf)[i_].memory;           \
    (out)[i_].determinism = (perf)[i_].determinism; \
    (out)[i_].math = (perf)[i_].mathType;           \
  }

/* Runs cuDNN's search for op of plan p on the given buffers (a, b in; out
 * written): fwd x, w -> y; bwd-data dy, w -> dx; bwd-weights x, dy -> a
 * scratch filter in dt. Fills *cand (fastest first) and *n. */
static ddp_status_t run_search(ddp_backend_t *be, cudnnHandle_t h, const conv_plan_t *p,
                               enum conv_op op, const void *a, const void *b, void *out,
                               candidate_t *cand, int *n) {
  struct ddp_cuda_conv *c = ddp_cuda_state(be)->conv;
  const size_t ws_bytes = search_workspace(be, h, p, op);
  void *ws = NULL;
  DDP_CHECK(ddp_backend_alloc(be, ws_bytes, &ws));
  cudnnStatus_t s;
  *n = 0;
  if (op == OP_FWD) {
    cudnnConvolutionFwdAlgoPerf_t perf[MAX_CANDIDATES];
    s = cudnnFindConvolutionForwardAlgorithmEx(h, p->x, a, p->w, b, p->conv, p->y, out,
                                               MAX_CANDIDATES, n, perf, ws, ws_bytes);
    if (s == CUDNN_STATUS_SUCCESS) COPY_CANDIDATES(perf, *n, cand);
  } else if (op == OP_BWD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_CANDIDATES];
    s = cudnnFindConvolutionBackwardDataAlgorithmEx(h, p->w, b, p->y, a, p->conv, p->x, out,
                                                    MAX_CANDIDATES, n, perf, ws, ws_bytes);
    if (s == CUDNN_STATUS_SUCCESS) COPY_CANDIDATES(perf, *n, cand);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_CANDIDATES];
    s = cudnnFindConvolutionBackwardFilterAlgorithmEx(h, p->x, a, p->y, b, p->conv, p->w, out,
                                                      MAX_CANDIDATES, n, perf, ws, ws_bytes);
    if (s == CUDNN_STATUS_SUCCESS) COPY_CANDIDATES(perf, *n, cand);
  }
  c->finds++;
  ddp_backend_free(be, ws);
  DDP_CUDNN_CHECK(s);
  return DDP_OK;
}

/* Allowed: it ran, it is deterministic unless the backend does not ask for
 * that, fp32 is never converted down to fp16 (ALLOW_CONVERSION), and fp32
 * without TF32 uses no tensor cores. */
static int allowed(ddp_backend_t *be, ddp_dtype_t dt, const candidate_t *k) {
  const ddp_cuda_state_t *st = ddp_cuda_state(be);
  if (k->status != CUDNN_STATUS_SUCCESS) return 0;
  if (!st->conv_nondeterministic && k->determinism != CUDNN_DETERMINISTIC) return 0;
  if (dt == DDP_DTYPE_F32 && k->math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return 0;
  if (dt == DDP_DTYPE_F32 && !st->allow_tf32 && k->math == CUDNN_TENSOR_OP_MATH) return 0;
  return 1;
}

/* The fastest allowed candidate of cuDNN's search for op on the buffers
 * given, near-ties going to the lowest algorithm number. */
static ddp_status_t search_pick(ddp_backend_t *be, cudnnHandle_t h, conv_plan_t *p, enum conv_op op,
                                const void *a, const void *b, void *out, candidate_t *chosen) {
  candidate_t cand[MAX_CANDIDATES];
  int n = 0;
  DDP_CHECK(run_search(be, h, p, op, a, b, out, cand, &n));
  const ddp_conv_shape_t *sh = &p->sh;
  int pick = -1;
  for (int i = 0; i < n && pick < 0; ++i)
    if (allowed(be, p->dt, &cand[i])) pick = i;
  if (pick < 0)
    DDP_FAIL(DDP_ERR_UNSUPPORTED,
             "cuda:%d: %s: cuDNN has no %s algorithm for N=%d H=%d W=%d C=%d K=%d R=%d S=%d "
             "stride %d pad %d in %s (%d candidates measured)",
             be->device, k_op_name[op],
             ddp_cuda_state(be)->conv_nondeterministic ? "usable" : "deterministic", sh->N, sh->H,
             sh->W, sh->C, sh->K, sh->R, sh->S, sh->stride, sh->pad, ddp_dtype_name(p->dt), n);
  /* Near-ties go to the lowest algorithm number (then math type), not to
   * the stopwatch: cuDNN's candidates come sorted by one timing each, and
   * the order of two within a few percent changes from run to run. This
   * narrows, but cannot close, the gap between two runs' choices (small
   * shapes' timings moved by 2x on an H100); the record (--conv-algos)
   * closes it. */
  const float limit = cand[pick].ms * (1.0f + CONV_TIE_MARGIN);
  for (int i = pick + 1; i < n; ++i) {
    const candidate_t *k = &cand[i], *best = &cand[pick];
    if (!allowed(be, p->dt, k) || !(k->ms <= limit)) continue;
    if (k->algo < best->algo || (k->algo == best->algo && k->math < best->math)) pick = i;
  }
  *chosen = cand[pick];
  /* fp32 without TF32 runs FMA math whatever the candidate was timed as. */
  if (p->dt == DDP_DTYPE_F32 && !ddp_cuda_state(be)->allow_tf32) chosen->math = CUDNN_FMA_MATH;
  return DDP_OK;
}

/* The record's key for op of p under the backend's mode. */
static ddp_conv_algo_key_t record_key(ddp_backend_t *be, const conv_plan_t *p, enum conv_op op) {
  const ddp_cuda_state_t *st = ddp_cuda_state(be);
  return (ddp_conv_algo_key_t){.op = (ddp_conv_algo_op_t)op,
                               .dt = p->dt,
                               .sh = p->sh,
                               .deterministic = !st->conv_nondeterministic,
                               .tf32 = st->allow_tf32 ? 1 : 0};
}

/* The recorded choice for op of p, as a candidate, when the record has one
 * that applies here (*found); one that does not (another cuDNN, another
 * GPU) is reported and searched again. */
static ddp_status_t recorded_pick(ddp_backend_t *be, cudnnHandle_t h, conv_plan_t *p,
                                  enum conv_op op, candidate_t *chosen, int *found) {
  *found = 0;
  const ddp_conv_algo_key_t key = record_key(be, p, op);
  const ddp_conv_algo_entry_t *e = ddp_conv_algos_find(be->conv_algos, &key);
  if (!e) return DDP_OK;
  size_t bytes = 0;
  DDP_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, (cudnnMathType_t)e->math));
  const cudnnStatus_t s = algo_workspace(h, p, op, e->algo, &bytes);
  if (s != CUDNN_STATUS_SUCCESS) {
    const ddp_conv_shape_t *sh = &p->sh;
    DDP_LOG_WARN(
        "cuda:%d: %s %s N=%d H=%d W=%d C=%d K=%d %dx%d/%d: the recorded algorithm %d (math %d) "
        "does not apply here (cuDNN: %s); searching again",
        be->device, k_op_name[op], ddp_dtype_name(p->dt), sh->N, sh->H, sh->W, sh->C, sh->K, sh->R,
        sh->S, sh->stride, e->algo, e->math, cudnnGetErrorString(s));
    return DDP_OK;
  }
  *chosen = (candidate_t){.algo = e->algo,
                          .status = s,
                          .ms = 0.0f,
                          .memory = bytes,
                          .determinism = CUDNN_DETERMINISTIC,
                          .math = (cudnnMathType_t)e->math};
  *found = 1;
  return DDP_OK;
}

/* Makes candidate k op's algorithm for p and grows the shared workspace to
 * what it needs. */
static ddp_status_t plan_set(ddp_backend_t *be, conv_plan_t *p, enum conv_op op,
                             const candidate_t *k, int recorded) {
  const ddp_conv_shape_t *sh = &p->sh;
  p->algo[op] = k->algo;
  p->math[op] = k->math;
  p->algo_ws[op] = k->memory;
  p->need[op] = k->memory;
  if (op == OP_BWD_WEIGHTS && p->dt != DDP_DTYPE_F32)
    p->need[op] = round_up(k->memory, WS_ALIGN) +
                  (size_t)sh->K * sh->R * sh->S * sh->C * ddp_dtype_size(p->dt);
  DDP_LOG_DEBUG(
      "cuda:%d: %s %s N=%d H=%d W=%d C=%d K=%d %dx%d/%d: algorithm %d (%s%.3f ms, %zu bytes of "
      "workspace, math %d)",
      be->device, k_op_name[op], ddp_dtype_name(p->dt), sh->N, sh->H, sh->W, sh->C, sh->K, sh->R,
      sh->S, sh->stride, k->algo, recorded ? "recorded, not timed: " : "", (double)k->ms, k->memory,
      (int)k->math);
  void *ws = NULL;
  DDP_CHECK(ddp_cuda_conv_workspace(be, p->need[op], &ws));
  p->found[op] = 1;
  return DDP_OK;
}

/* Chooses op's algorithm for p: the record's choice where it has one, else
 * by measuring on the buffers given (and adding the result to the record). */
static ddp_status_t choose(ddp_backend_t *be, cudaStream_t stream, conv_plan_t *p, enum conv_op op,
                           const void *a, const void *b, void *out) {
  cudnnHandle_t h;
  DDP_CHECK(ddp_cuda_conv_handle(be, stream, &h));
  candidate_t k;
  int recorded = 0;
  DDP_CHECK(recorded_pick(be, h, p, op, &k, &recorded));
  if (!recorded) {
    DDP_CHECK(search_pick(be, h, p, op, a, b, out, &k));
    if (be->conv_algos) {
      const ddp_conv_algo_key_t key = record_key(be, p, op);
      DDP_CHECK(ddp_conv_algos_put(be->conv_algos, &key, k.algo, (int)k.math));
    }
  }
  return plan_set(be, p, op, &k, recorded);
}

ddp_status_t ddp_cuda_conv_algos_reload(ddp_backend_t *be) {
  const ddp_cuda_state_t *st = ddp_cuda_state(be);
  if (!st || !st->conv || !be->conv_algos) return DDP_OK;
  struct ddp_cuda_conv *c = st->conv;
  cudnnHandle_t h;
  DDP_CHECK(ddp_cuda_conv_handle(be, st->compute, &h));
  for (size_t i = 0; i < c->nplans; ++i) {
    conv_plan_t *p = c->plans[i];
    for (int op = 0; op < OP_COUNT; ++op) {
      if (!p->found[op]) continue;
      candidate_t k;
      int recorded = 0;
      DDP_CHECK(recorded_pick(be, h, p, (enum conv_op)op, &k, &recorded));
      if (recorded && (k.algo != p->algo[op] || k.math != p->math[op]))
        DDP_CHECK(plan_set(be, p, (enum conv_op)op, &k, 1));
    }
  }
  return DDP_OK;
}

/* Bytes of a dt tensor of n elements. */
static size_t tensor_bytes(ddp_dtype_t dt, int64_t n) {
  return (size_t)n * ddp_dtype_size(dt);
}

/* The backward-weights search on the real inputs, into a scratch filter. */
static ddp_status_t choose_bwd_weights(ddp_backend_t *be, cudaStream_t stream, conv_plan_t *p,
                                       const void *x, const void *dy) {
  const ddp_conv_shape_t *sh = &p->sh;
  void *scratch = NULL;
  DDP_CHECK(
      ddp_backend_alloc(be, tensor_bytes(p->dt, (int64_t)sh->K * sh->R * sh->S * sh->C), &scratch));
  const ddp_status_t st = choose(be, stream, p, OP_BWD_WEIGHTS, x, dy, scratch);
  ddp_backend_free(be, scratch);
  return st;
}

/* ---- the ops ---------------------------------------------------------------- */

static ddp_status_t checked_plan(ddp_backend_t *be, const char *op, ddp_dtype_t dt,
                                 const ddp_conv_shape_t *sh, int have_pointers, conv_plan_t **p) {
  DDP_CHECK(ddp_cuda_conv_check_dt(op, dt));
  DDP_CHECK(ddp_conv_check_shape(op, sh));
  if (!have_pointers) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL buffer", op);
  return plan_get(be, dt, sh, p);
}

ddp_status_t ddp_cuda_conv_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, const void *inp,
                               const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s) {
  conv_plan_t *p = NULL;
  DDP_CHECK(checked_plan(be, "conv_fwd", dt, sh, out && inp && w, &p));
  const cudaStream_t cs = ddp_cuda_stream(be, s);
  /* The search writes out, which this call overwrites anyway. */
  if (!p->found[OP_FWD]) DDP_CHECK(choose(be, cs, p, OP_FWD, inp, w, out));
  cudnnHandle_t h;
  void *ws = NULL;
  DDP_CHECK(ddp_cuda_conv_handle(be, cs, &h));
  DDP_CHECK(ddp_cuda_conv_workspace(be, p->need[OP_FWD], &ws));
  const float one = 1.0f, zero = 0.0f;
  DDP_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->math[OP_FWD]));
  DDP_CUDNN_CHECK(cudnnConvolutionForward(h, &one, p->x, inp, p->w, w, p->conv,
                                          (cudnnConvolutionFwdAlgo_t)p->algo[OP_FWD], ws,
                                          p->algo_ws[OP_FWD], &zero, p->y, out));
  return DDP_OK;
}

/* conv_bwd_data (add 0) and conv_bwd_data_add (add 1: cuDNN's beta = 1,
 * which blends the result with dinp's old value in fp32 before rounding
 * once to dt). The first call of an unprepared shape searches: for a
 * plain call the search may write dinp, which the call overwrites anyway;
 * an adding call must keep dinp, so it searches on the prepare's scratch
 * tensors instead. */
static ddp_status_t bwd_data(ddp_backend_t *be, const char *op, ddp_dtype_t dt, void *dinp,
                             const void *dout, const void *w, const ddp_conv_shape_t *sh, int add,
                             ddp_stream_t s) {
  conv_plan_t *p = NULL;
  DDP_CHECK(checked_plan(be, op, dt, sh, dinp && dout && w, &p));
  const cudaStream_t cs = ddp_cuda_stream(be, s);
  if (!p->found[OP_BWD_DATA]) {
    if (add)
      DDP_CHECK(ddp_cuda_conv_prepare(be, dt, sh));
    else
      DDP_CHECK(choose(be, cs, p, OP_BWD_DATA, dout, w, dinp));
  }
  cudnnHandle_t h;
  void *ws = NULL;
  DDP_CHECK(ddp_cuda_conv_handle(be, cs, &h));
  DDP_CHECK(ddp_cuda_conv_workspace(be, p->need[OP_BWD_DATA], &ws));
  const float one = 1.0f, zero = 0.0f;
  DDP_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->math[OP_BWD_DATA]));
  DDP_CUDNN_CHECK(cudnnConvolutionBackwardData(
      h, &one, p->w, w, p->y, dout, p->conv, (cudnnConvolutionBwdDataAlgo_t)p->algo[OP_BWD_DATA],
      ws, p->algo_ws[OP_BWD_DATA], add ? &one : &zero, p->x, dinp));
  return DDP_OK;
}

ddp_status_t ddp_cuda_conv_bwd_data(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, const void *dout,
                                    const void *w, const ddp_conv_shape_t *sh, ddp_stream_t s) {
  return bwd_data(be, "conv_bwd_data", dt, dinp, dout, w, sh, 0, s);
}

ddp_status_t ddp_cuda_conv_bwd_data_add(ddp_backend_t *be, ddp_dtype_t dt, void *dinp,
                                        const void *dout, const void *w, const ddp_conv_shape_t *sh,
                                        ddp_stream_t s) {
  return bwd_data(be, "conv_bwd_data_add", dt, dinp, dout, w, sh, 1, s);
}

ddp_status_t ddp_cuda_conv_bwd_weights(ddp_backend_t *be, ddp_dtype_t dt, float *dw,
                                       const void *dout, const void *inp,
                                       const ddp_conv_shape_t *sh, int accumulate, ddp_stream_t s) {
  conv_plan_t *p = NULL;
  DDP_CHECK(checked_plan(be, "conv_bwd_weights", dt, sh, dw && dout && inp, &p));
  const cudaStream_t cs = ddp_cuda_stream(be, s);
  if (!p->found[OP_BWD_WEIGHTS]) DDP_CHECK(choose_bwd_weights(be, cs, p, inp, dout));
  cudnnHandle_t h;
  void *ws = NULL;
  DDP_CHECK(ddp_cuda_conv_handle(be, cs, &h));
  DDP_CHECK(ddp_cuda_conv_workspace(be, p->need[OP_BWD_WEIGHTS], &ws));
  const float one = 1.0f, zero = 0.0f;
  const cudnnConvolutionBwdFilterAlgo_t algo =
      (cudnnConvolutionBwdFilterAlgo_t)p->algo[OP_BWD_WEIGHTS];
  const size_t algo_ws = p->algo_ws[OP_BWD_WEIGHTS];
  DDP_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->math[OP_BWD_WEIGHTS]));
  if (dt == DDP_DTYPE_F32) {
    /* accumulate is cuDNN's beta. */
    DDP_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, p->x, inp, p->y, dout, p->conv, algo,
                                                   ws, algo_ws, accumulate ? &one : &zero, p->w,
                                                   dw));
    return DDP_OK;
  }
  void *half_dw = (char *)ws + round_up(algo_ws, WS_ALIGN);
  DDP_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, p->x, inp, p->y, dout, p->conv, algo, ws,
                                                 algo_ws, &zero, p->w, half_dw));
  return ddp_cuda_conv_dw_fold(dt, dw, half_dw, (size_t)sh->K * sh->R * sh->S * sh->C, accumulate,
                               cs);
}

/* Measures all three ops of sh on scratch tensors (zeros) from the caching
 * allocator, which go back to the cache afterwards. */
ddp_status_t ddp_cuda_conv_prepare(ddp_backend_t *be, ddp_dtype_t dt, const ddp_conv_shape_t *sh) {
  conv_plan_t *p = NULL;
  DDP_CHECK(checked_plan(be, "conv_prepare", dt, sh, 1, &p));
  if (p->found[OP_FWD] && p->found[OP_BWD_DATA] && p->found[OP_BWD_WEIGHTS]) return DDP_OK;
  const cudaStream_t cs = ddp_cuda_state(be)->compute;
  const size_t xb = tensor_bytes(dt, (int64_t)sh->N * sh->H * sh->W * sh->C);
  const size_t yb =
      tensor_bytes(dt, (int64_t)sh->N * ddp_conv_out_h(sh) * ddp_conv_out_w(sh) * sh->K);
  const size_t wb = tensor_bytes(dt, (int64_t)sh->K * sh->R * sh->S * sh->C);
  void *x = NULL, *y = NULL, *w = NULL;
  ddp_status_t st = DDP_OK;
  DDP_CHECK_GOTO(ddp_backend_alloc(be, xb, &x), st, done);
  DDP_CHECK_GOTO(ddp_backend_alloc(be, yb, &y), st, done);
  DDP_CHECK_GOTO(ddp_backend_alloc(be, wb, &w), st, done);
  DDP_CUDA_CHECK_GOTO(cudaMemsetAsync(x, 0, xb, cs), st, done);
  DDP_CUDA_CHECK_GOTO(cudaMemsetAsync(y, 0, yb, cs), st, done);
  DDP_CUDA_CHECK_GOTO(cudaMemsetAsync(w, 0, wb, cs), st, done);
  if (!p->found[OP_FWD]) DDP_CHECK_GOTO(choose(be, cs, p, OP_FWD, x, w, y), st, done);
  if (!p->found[OP_BWD_WEIGHTS]) DDP_CHECK_GOTO(choose_bwd_weights(be, cs, p, x, y), st, done);
  if (!p->found[OP_BWD_DATA]) DDP_CHECK_GOTO(choose(be, cs, p, OP_BWD_DATA, y, w, x), st, done);
done:
  ddp_backend_free(be, x);
  ddp_backend_free(be, y);
  ddp_backend_free(be, w);
  return st;
}
