/* The compute backend: one table of function pointers per device kind.
 *
 * Model code calls only this table, so a forward/backward pass is written once
 * and runs on the CPU (OpenBLAS) or on CUDA. The table is shaped for an
 * asynchronous device from the start:
 *   - buffers from alloc() are device pointers the host never dereferences;
 *     data moves only through copy();
 *   - every operation takes a stream and is merely *enqueued* on it; results
 *     are visible to the host only after synchronize() (or an event);
 *   - a NULL stream means the backend's compute stream.
 * On the CPU backend streams and events are trivial (work runs in order, at
 * once), which is a valid implementation of the same contract.
 *
 * Registry order is CUDA first, CPU last: "auto" takes the first backend whose
 * available() says yes. */
#ifndef DDPTRAIN_BACKEND_H
#define DDPTRAIN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Memory counters of a backend, in the terms of its caching allocator
 * (src/backend/caching_alloc.h); see ddp_backend_mem_stats. */
typedef struct ddp_caching_alloc_stats {
  uint64_t raw_alloc_calls; /* successful and failed raw allocations */
  uint64_t raw_free_calls;
  uint64_t oom_retries; /* raw OOMs recovered from by trimming the cache */
  uint64_t live_blocks; /* blocks handed out and not yet freed */
  size_t bytes_in_use;  /* rounded sizes of the live blocks */
  size_t peak_bytes_in_use;
  size_t bytes_reserved; /* held from the raw allocator: in use + cached */
  size_t peak_bytes_reserved;
} ddp_caching_alloc_stats_t;

typedef enum ddp_device_kind {
  DDP_DEVICE_KIND_CPU = 0,
  DDP_DEVICE_KIND_CUDA = 1
} ddp_device_kind_t;

typedef struct ddp_stream *ddp_stream_t; /* opaque; NULL = compute stream */
typedef struct ddp_event *ddp_event_t;   /* opaque */
typedef struct ddp_graph *ddp_graph_t;   /* opaque: recorded work (graph_begin/graph_end) */

typedef enum ddp_copy_kind {
  DDP_COPY_KIND_HOST_TO_DEVICE = 0,
  DDP_COPY_KIND_DEVICE_TO_HOST = 1,
  DDP_COPY_KIND_DEVICE_TO_DEVICE = 2
} ddp_copy_kind_t;

typedef enum ddp_transpose { DDP_TRANSPOSE_NO = 0, DDP_TRANSPOSE_YES = 1 } ddp_transpose_t;

/* Row-major, strided-batched GEMM, for b in [0, batch):
 *   C_b = alpha * op(A_b) * op(B_b) + beta * C_b
 * with op(A_b) m x k, op(B_b) k x n, C_b m x n, and X_b = x + b * stride_x.
 * lda/ldb/ldc are the row pitches (in elements) of the matrices *as stored*:
 * A stored m x k (lda >= k) when not transposed, k x m (lda >= m) when
 * transposed; likewise B. beta == 0 means C is write-only: whatever C holds
 * (even NaN) is ignored, which is what lets a first backward pass write
 * gradients without zeroing them. */
typedef struct ddp_gemm {
  ddp_transpose_t trans_a, trans_b;
  int64_t m, n, k;
  float alpha, beta;
  const void *a;
  int64_t lda, stride_a;
  const void *b;
  int64_t ldb, stride_b;
  void *c;
  int64_t ldc, stride_c;
  int64_t batch;        /* >= 1 */
  ddp_dtype_t ab_dtype; /* type of A and B */
  ddp_dtype_t c_dtype;  /* type of C; accumulation is always fp32 */
} ddp_gemm_t;

/* The common case: fp32, no transposes, densely packed row-major operands,
 * one product, C = A B (alpha 1, beta 0). Adjust fields for anything else. */
static inline ddp_gemm_t ddp_gemm_packed_f32(int64_t m, int64_t n, int64_t k, const void *a,
                                             const void *b, void *c) {
  ddp_gemm_t g = {.trans_a = DDP_TRANSPOSE_NO,
                  .trans_b = DDP_TRANSPOSE_NO,
                  .m = m,
                  .n = n,
                  .k = k,
                  .alpha = 1.0f,
                  .beta = 0.0f,
                  .a = a,
                  .lda = k,
                  .b = b,
                  .ldb = n,
                  .c = c,
                  .ldc = n,
                  .batch = 1,
                  .ab_dtype = DDP_DTYPE_F32,
                  .c_dtype = DDP_DTYPE_F32};
  return g;
}

/* Checks shapes, pitches and pointers of a GEMM descriptor (shared by every
 * backend so they reject the same things with the same message). */
ddp_status_t ddp_gemm_validate(const ddp_gemm_t *g);

typedef struct ddp_backend ddp_backend_t;

typedef struct ddp_backend_config {
  const char *device;        /* "auto", "cpu", "cuda" or "cuda:N"; NULL = "auto" */
  int local_rank;            /* picks the GPU when device is "auto" or "cuda" */
  int threads;               /* CPU math threads; 0 = cores / ranks on this node */
  int local_size;            /* ranks on this node, for the default thread count */
  int need_model_ops;        /* the job trains a model: "auto" skips backends without
                                nn kernels; naming one explicitly is an error */
  int conv_nondeterministic; /* GPUs: convolution algorithms may be
                                nondeterministic (0, the zeroed default:
                                deterministic ones only; --deterministic off) */
  int allow_tf32;            /* GPUs: fp32 GEMMs may use TF32 tensor cores (0, the
                                zeroed default: exact fp32; the CLI's --tf32 is on) */
  int conv_no_winograd;      /* CPU: direct convolution kernels only (0, the zeroed
                                default: oneDNN's Winograd for 3x3 stride 1 where it
                                has it; --winograd off) */
} ddp_backend_config_t;

typedef struct ddp_backend_ops {
  const char *name;
  ddp_device_kind_t kind;
  /* Nonzero when this backend can run here (for "auto"); otherwise, when
   * why is not NULL, writes the reason there (e.g. the driver's message). */
  int (*available)(char *why, size_t why_len);
  ddp_status_t (*init)(ddp_backend_t *be, const ddp_backend_config_t *cfg, int device_index);
  void (*shutdown)(ddp_backend_t *be);

  ddp_status_t (*alloc)(ddp_backend_t *be, size_t bytes, void **ptr);
  void (*free)(ddp_backend_t *be, void *ptr);
  /* Host memory suitable for asynchronous copies (pinned on CUDA). */
  ddp_status_t (*alloc_host)(ddp_backend_t *be, size_t bytes, void **ptr);
  void (*free_host)(ddp_backend_t *be, void *ptr);
  ddp_status_t (*copy)(ddp_backend_t *be, void *dst, const void *src, size_t bytes,
                       ddp_copy_kind_t kind, ddp_stream_t stream);
  /* Sets n elements of dst (of dtype) to value, rounded to dtype. */
  ddp_status_t (*fill)(ddp_backend_t *be, void *dst, ddp_dtype_t dtype, float value, size_t n,
                       ddp_stream_t stream);
  /* Element-wise type conversion of n elements in device memory. */
  ddp_status_t (*convert)(ddp_backend_t *be, void *dst, ddp_dtype_t dst_dtype, const void *src,
                          ddp_dtype_t src_dtype, size_t n, ddp_stream_t stream);

  ddp_status_t (*stream_create)(ddp_backend_t *be, ddp_stream_t *stream);
  void (*stream_destroy)(ddp_backend_t *be, ddp_stream_t stream);
  ddp_status_t (*event_create)(ddp_backend_t *be, ddp_event_t *event);
  void (*event_destroy)(ddp_backend_t *be, ddp_event_t event);
  ddp_status_t (*event_record)(ddp_backend_t *be, ddp_event_t event, ddp_stream_t stream);
  ddp_status_t (*stream_wait_event)(ddp_backend_t *be, ddp_stream_t stream, ddp_event_t event);
  /* Blocks the host until the work before the event's last record has
   * finished (only that work: the stream may run on). */
  ddp_status_t (*event_synchronize)(ddp_backend_t *be, ddp_event_t event);
  /* Blocks the host until everything enqueued on stream has finished. */
  ddp_status_t (*synchronize)(ddp_backend_t *be, ddp_stream_t stream);
  /* Optional, NULL where work runs on the host (--trace then uses the host
   * clock): an event that keeps its completion time, and the milliseconds
   * between two such events once both have completed. */
  ddp_status_t (*timing_event_create)(ddp_backend_t *be, ddp_event_t *event);
  ddp_status_t (*event_elapsed_ms)(ddp_backend_t *be, ddp_event_t start, ddp_event_t end,
                                   float *ms);

  ddp_status_t (*gemm)(ddp_backend_t *be, const ddp_gemm_t *g, ddp_stream_t stream);

  /* Optional, NULL where work runs on the host: recording what the calling
   * thread enqueues on the compute stream as a graph to replay (CUDA
   * graphs). Between graph_begin and graph_end nothing runs; graph_end
   * stops the recording and returns the graph ready to launch, or an error
   * that says why it could not be recorded (a call that cannot be recorded,
   * an allocation, a wait on the host): nothing of it has run then and
   * nothing is kept. graph_end is called after every graph_begin, also
   * when the work in between failed. graph_launch enqueues a graph on the
   * compute stream: the same kernels with the same arguments and pointers
   * as recorded. */
  ddp_status_t (*graph_begin)(ddp_backend_t *be);
  ddp_status_t (*graph_end)(ddp_backend_t *be, ddp_graph_t *graph);
  ddp_status_t (*graph_launch)(ddp_backend_t *be, ddp_graph_t graph);
  void (*graph_destroy)(ddp_backend_t *be, ddp_graph_t graph);

  /* Device memory free and total, in bytes. */
  ddp_status_t (*mem_info)(ddp_backend_t *be, size_t *free_bytes, size_t *total_bytes);

  /* The model kernels (ddptrain/nn.h); NULL where this backend has none. */
  const struct ddp_nn_ops *nn;
  /* The convolutional-network kernels (ddptrain/conv.h); NULL where this
   * backend has none. */
  const struct ddp_conv_ops *conv;
  /* The optimizer: the fused step, the gradient norm and the half
   * all-reduce's epilogue behind optim/optim.h (an internal table,
   * src/backend/optim_ops.h). NULL where this backend has none: the
   * optimizer's entry points then return DDP_ERR_UNSUPPORTED naming the
   * backend. */
  const struct ddp_optim_ops *optim;

  /* Backends with a caching allocator (CUDA): its counters, and returning
   * cached memory to the driver. NULL where alloc goes straight to the
   * system (CPU); ddp_backend_mem_stats/ddp_backend_trim cover both. */
  void (*cache_stats)(ddp_backend_t *be, ddp_caching_alloc_stats_t *stats);
  size_t (*trim)(ddp_backend_t *be);
  /* The PCI bus id ("0000:07:00.0") of this backend's GPU, for binding the
   * rank to the cores nearest it. NULL without GPUs. */
  ddp_status_t (*pci_bus_id)(ddp_backend_t *be, char *out, size_t len);
} ddp_backend_ops_t;

struct ddp_backend {
  const ddp_backend_ops_t *ops;
  int device;            /* CUDA ordinal; -1 on the CPU */
  int threads;           /* CPU math threads in use */
  char description[160]; /* one line for logs and --build-info */
  void *impl;            /* backend-private state */
  /* Allocation counters: tests use them to prove the step loop allocates
   * nothing; peak_bytes feeds the peak_mem_mb metric. */
  uint64_t alloc_calls, free_calls;
  /* Seconds the host spent blocked in synchronize()/event_synchronize()
   * (asynchronous backends; 0 on the CPU, whose work is done on return):
   * with the wall time of a step it tells whether the host issues work
   * faster than the device runs it, i.e. whether launch gaps can occur. */
  double host_wait_s;
  size_t bytes_in_use, peak_bytes;
  /* The convolution algorithm record the conv table consults before it
   * autotunes a shape, and adds its choices to (the trainer's
   * --conv-algos); NULL, the default: every new shape is searched. Owned
   * by whoever set it. */
  struct ddp_conv_algos *conv_algos;
};

/* Creates the backend named by cfg->device. "auto" picks the first available
 * entry of the registry; an explicit device that cannot be used is an error
 * (never a silent fallback). */
ddp_status_t ddp_backend_create(const ddp_backend_config_t *cfg, ddp_backend_t **out);
void ddp_backend_destroy(ddp_backend_t *be);

/* The registry: entries in preference order, NULL-terminated. */
const ddp_backend_ops_t *const *ddp_backend_registry(void);

/* Parses "auto" | "cpu" | "cuda" | "cuda:N" into a backend name and device
 * index (-1 when not given). Silent: callers report bad input in context. */
ddp_status_t ddp_device_parse(const char *text, const char **backend_name, int *index);

/* Measures the backend's fp32 GEMM rate on n x n x n products for at least
 * `seconds` (after one warm-up product), in GFLOP/s: the fastest window of 4
 * products. This is the "peak" that
 * MFU is reported against on the CPU, where no datasheet number applies;
 * there, with oneDNN in the build, the faster of the backend's GEMM
 * (OpenBLAS) and oneDNN's, which the convolutions run on. It
 * allocates its three matrices and frees them again: call it at start-up,
 * never inside the step loop. */
ddp_status_t ddp_backend_measure_gemm_gflops(ddp_backend_t *be, int64_t n, double seconds,
                                             double *gflops);
/* The same with A, B and C of `dtype` (fp32 accumulation): on a GPU the
 * bf16/fp16 tensor-core rate, the MFU denominator of a half-precision run. */
ddp_status_t ddp_backend_measure_gemm_gflops_dtype(ddp_backend_t *be, ddp_dtype_t dtype, int64_t n,
                                                   double seconds, double *gflops);

/* Memory counters of any backend, in the caching allocator's terms. Without
 * a cache every alloc is a raw allocation and nothing is held beyond what is
 * in use, so raw calls equal alloc/free calls and reserved equals in use. */
void ddp_backend_mem_stats(ddp_backend_t *be, ddp_caching_alloc_stats_t *stats);
/* Returns cached device memory to the driver; the bytes released (0 on the
 * CPU). For sharing a GPU with another process between phases, never per step. */
size_t ddp_backend_trim(ddp_backend_t *be);
/* Peak bytes of live backend allocations, in MiB: the peak_mem_mb metric. */
static inline double ddp_backend_peak_mem_mb(const ddp_backend_t *be) {
  return (double)be->peak_bytes / 1048576.0;
}

/* Thin wrappers, so call sites read as verbs. */
static inline ddp_status_t ddp_backend_alloc(ddp_backend_t *be, size_t bytes, void **ptr) {
  return be->ops->alloc(be, bytes, ptr);
}
static inline void ddp_backend_free(ddp_backend_t *be, void *ptr) {
  be->ops->free(be, ptr);
}
static inline ddp_status_t ddp_backend_copy(ddp_backend_t *be, void *dst, const void *src,
                                            size_t bytes, ddp_copy_kind_t kind,
                                            ddp_stream_t stream) {
  return be->ops->copy(be, dst, src, bytes, kind, stream);
}
static inline ddp_status_t ddp_backend_gemm(ddp_backend_t *be, const ddp_gemm_t *g,
                                            ddp_stream_t stream) {
  return be->ops->gemm(be, g, stream);
}
static inline ddp_status_t ddp_backend_sync(ddp_backend_t *be, ddp_stream_t stream) {
  return be->ops->synchronize(be, stream);
}

#ifdef __cplusplus
}
#endif
#endif
