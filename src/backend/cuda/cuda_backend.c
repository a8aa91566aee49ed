/* The CUDA backend: device memory, one compute stream, cuBLAS GEMM, and the
 * conversion/fill kernels from kernels/.
 *
 * Everything is enqueued on a stream (NULL = the backend's compute stream,
 * created non-blocking so it never serialises with the legacy default
 * stream); only synchronize() blocks the host. GEMMs are cuBLASLt's
 * (cuda_gemm.c: fp32 accumulation, TF32 for fp32 operands when the config
 * allows it), the model kernels are in kernels/ behind cuda_nn.c's table,
 * the optimizer's behind cuda_optim.c's. */
#include <config.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend_impl.h"
#include "backend/caching_alloc.h"
#if DDP_HAVE_CUDNN
#include "backend/cuda/cuda_conv.h"
#endif
#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/cuda_nn.h"
#include "backend/cuda/cuda_optim.h"
#include "backend/device_error.h"
#include "core/clock.h"
#include "core/foreign_check.h"
#include "kernels.h"

/* Device memory comes from a caching allocator over cudaMalloc/cudaFree
 * (backend/caching_alloc.h): after warm-up nothing reaches cudaMalloc, which
 * synchronises the device. The allocator also knows each block's requested
 * size, which keeps the backend's byte counters exact (device memory has no
 * room for a host-readable header). */
typedef ddp_cuda_state_t cuda_state_t;

static cuda_state_t *state(ddp_backend_t *be) {
  return ddp_cuda_state(be);
}

static cudaStream_t stream_of(ddp_backend_t *be, ddp_stream_t s) {
  return ddp_cuda_stream(be, s);
}

/* The raw pair under the cache. Out of memory is returned silently: the
 * cache trims itself and retries, and only a final failure is reported, by
 * cuda_oom with the device's numbers. */
static ddp_status_t raw_cuda_malloc(void *ctx, size_t bytes, void **ptr) {
  (void)ctx;
  cudaError_t err = cudaMalloc(ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError(); /* clear the error so later calls work */
    *ptr = NULL;
    return DDP_ERR_OOM;
  }
  DDP_CUDA_CHECK(err);
  return DDP_OK;
}

static void raw_cuda_free(void *ctx, void *ptr) {
  (void)ctx;
  cudaFree(ptr);
}

static int cuda_available(char *why, size_t why_len) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err == cudaSuccess && n > 0) return 1;
  if (why && why_len)
    snprintf(why, why_len, "%s", err != cudaSuccess ? cudaGetErrorString(err) : "0 GPUs visible");
  return 0;
}

static ddp_status_t cuda_pci_bus_id(ddp_backend_t *be, char *out, size_t len) {
  DDP_CUDA_CHECK(cudaDeviceGetPCIBusId(out, (int)len, be->device));
  return DDP_OK;
}

static ddp_status_t cuda_init(ddp_backend_t *be, const ddp_backend_config_t *cfg, int index) {
  int count = 0;
  DDP_CUDA_CHECK(cudaGetDeviceCount(&count));
  int dev = index >= 0 ? index : (cfg->local_rank > 0 ? cfg->local_rank : 0) % count;
  if (dev >= count)
    DDP_FAIL(DDP_ERR_NO_DEVICE, "device cuda:%d requested, but this host has %d GPU%s", dev, count,
             count == 1 ? "" : "s");
  DDP_CUDA_CHECK(cudaSetDevice(dev));
  cuda_state_t *st = calloc(1, sizeof *st);
  if (!st) DDP_FAIL(DDP_ERR_OOM, "cuda backend: out of host memory");
  ddp_status_t rc = DDP_OK;
  DDP_CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&st->compute, cudaStreamNonBlocking), rc,
                      free_state);
  DDP_CUBLAS_CHECK_GOTO(cublasCreate(&st->blas), rc, destroy_stream);
  DDP_CUBLAS_CHECK_GOTO(cublasSetMathMode(st->blas, CUBLAS_DEFAULT_MATH), rc, destroy_blas);
  struct cudaDeviceProp prop;
  DDP_CUDA_CHECK_GOTO(cudaGetDeviceProperties(&prop, dev), rc, destroy_blas);
  const ddp_raw_alloc_t raw = {.alloc = raw_cuda_malloc, .free = raw_cuda_free};
  DDP_CHECK_GOTO(ddp_caching_alloc_create(&raw, &st->cache), rc, destroy_blas);
  be->impl = st;
  be->device = dev;
  be->threads = 1;
  st->allow_tf32 = cfg->allow_tf32 != 0;
  st->conv_nondeterministic = cfg->conv_nondeterministic != 0;
  rc = ddp_cuda_gemm_init(be);
  if (rc != DDP_OK) {
    be->impl = NULL;
    ddp_caching_alloc_destroy(st->cache);
    goto destroy_blas;
  }
  snprintf(be->description, sizeof be->description, "cuda:%d %.80s (sm_%d%d, %.1f GiB, TF32 %s)",
           dev, prop.name, prop.major, prop.minor, prop.totalGlobalMem / 1073741824.0,
           st->allow_tf32 ? "on" : "off");
  return DDP_OK;
destroy_blas:
  cublasDestroy(st->blas);
destroy_stream:
  cudaStreamDestroy(st->compute);
free_state:
  free(st);
  return rc;
}

static void cuda_free(ddp_backend_t *be, void *ptr);

static void cuda_shutdown(ddp_backend_t *be) {
  cuda_state_t *st = state(be);
  if (!st) return;
  cudaStreamSynchronize(st->compute);
  if (st->scratch) {
    cuda_free(be, st->scratch);
    st->scratch = NULL;
  }
  if (be->ops->conv && be->ops->conv->release) be->ops->conv->release(be);
  ddp_cuda_gemm_shutdown(be);
  cublasDestroy(st->blas);
  cudaStreamDestroy(st->compute);
  cudaDeviceSynchronize(); /* work on other streams may still use cached blocks */
  ddp_caching_alloc_destroy(st->cache);
  free(st);
  be->impl = NULL;
}

/* Out of memory is the error users hit most; say what was asked for, what
 * was free, what ddptrain holds, and what to change. */
static ddp_status_t cuda_oom(ddp_backend_t *be, const char *what, size_t bytes) {
  ddp_oom_report_t r = {
      .rank = ddp_log_rank(), .device = be->device, .what = what, .requested = bytes};
  cudaMemGetInfo(&r.free_bytes, &r.total_bytes);
  cudaGetLastError();
  if (state(be)) {
    ddp_caching_alloc_stats_t s;
    ddp_caching_alloc_get_stats(state(be)->cache, &s);
    r.in_use = s.bytes_in_use;
    r.reserved = s.bytes_reserved;
  }
  char text[512];
  ddp_device_oom_message(text, sizeof text, &r);
  DDP_FAIL(DDP_ERR_OOM, "%s", text);
}

static ddp_status_t cuda_alloc(ddp_backend_t *be, size_t bytes, void **ptr) {
  *ptr = NULL;
  if (bytes == 0) return DDP_OK;
  const ddp_status_t st = ddp_caching_alloc_malloc(state(be)->cache, bytes, ptr);
  if (st == DDP_ERR_OOM) return cuda_oom(be, "cudaMalloc", bytes);
  DDP_CHECK(st);
  ddp_backend_count_alloc(be, bytes);
  return DDP_OK;
}

/* cudaFree synchronised the device, and callers may rely on that: a block is
 * handed out again at once, so work still using it on any stream must finish
 * first. Frees happen at set-up and shutdown, never in the step loop. */
static void cuda_free(ddp_backend_t *be, void *ptr) {
  if (!ptr) return;
  cudaDeviceSynchronize();
  const size_t bytes = ddp_caching_alloc_free(state(be)->cache, ptr);
  if (bytes)
    ddp_backend_count_free(be, bytes);
  else
    DDP_LOG_WARN("cuda:%d: free of %p, which this backend did not allocate", be->device, ptr);
}

ddp_status_t ddp_cuda_scratch_reserve(ddp_backend_t *be, size_t bytes) {
  cuda_state_t *st = state(be);
  if (bytes > st->scratch_bytes) {
    void *p = NULL;
    DDP_CHECK(cuda_alloc(be, bytes, &p));
    if (st->scratch) cuda_free(be, st->scratch);
    st->scratch = p;
    st->scratch_bytes = bytes;
  }
  st->scratch_holds++;
  return DDP_OK;
}

void ddp_cuda_scratch_release(ddp_backend_t *be) {
  cuda_state_t *st = state(be);
  if (st->scratch_holds > 0 && --st->scratch_holds == 0 && st->scratch) {
    cuda_free(be, st->scratch);
    st->scratch = NULL;
    st->scratch_bytes = 0;
  }
}

ddp_status_t ddp_cuda_scratch_get(ddp_backend_t *be, size_t bytes, const char *op, void **out) {
  cuda_state_t *st = state(be);
  *out = st->scratch;
  if (bytes > st->scratch_bytes)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "cuda:%d: %s needs %zu bytes of scratch but reserve() provided %zu; call the nn "
             "reserve() with the largest shapes before the step loop",
             be->device, op, bytes, st->scratch_bytes);
  return DDP_OK;
}

static void cuda_cache_stats(ddp_backend_t *be, ddp_caching_alloc_stats_t *stats) {
  ddp_caching_alloc_get_stats(state(be)->cache, stats);
}

static size_t cuda_trim(ddp_backend_t *be) {
  cudaDeviceSynchronize(); /* as in cuda_free: cached blocks may still be read */
  return ddp_caching_alloc_trim(state(be)->cache);
}

static ddp_status_t cuda_alloc_host(ddp_backend_t *be, size_t bytes, void **ptr) {
  *ptr = NULL;
  if (bytes == 0) return DDP_OK;
  /* Host staging memory: not device memory, so not in the counters. */
  cudaError_t err = cudaMallocHost(ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return cuda_oom(be, "cudaMallocHost (pinned)", bytes);
  }
  DDP_CUDA_CHECK(err);
  return DDP_OK;
}

static void cuda_free_host(ddp_backend_t *be, void *ptr) {
  if (ptr) cudaFreeHost(ptr);
}

static ddp_status_t cuda_copy(ddp_backend_t *be, void *dst, const void *src, size_t bytes,
                              ddp_copy_kind_t kind, ddp_stream_t stream) {
  if (bytes == 0) return DDP_OK;
  if (!dst || !src) DDP_FAIL(DDP_ERR_INVALID_ARG, "copy: NULL pointer");
  static const enum cudaMemcpyKind k_kind[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                               cudaMemcpyDeviceToDevice};
  if ((unsigned)kind > DDP_COPY_KIND_DEVICE_TO_DEVICE)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "copy: invalid kind %d", (int)kind);
  DDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k_kind[kind], stream_of(be, stream)));
  return DDP_OK;
}

static ddp_status_t cuda_fill(ddp_backend_t *be, void *dst, ddp_dtype_t dtype, float value,
                              size_t n, ddp_stream_t stream) {
  return ddp_cuda_fill(dst, dtype, value, n, stream_of(be, stream));
}

static ddp_status_t cuda_convert(ddp_backend_t *be, void *dst, ddp_dtype_t dst_dtype,
                                 const void *src, ddp_dtype_t src_dtype, size_t n,
                                 ddp_stream_t stream) {
  return ddp_cuda_convert(dst, dst_dtype, src, src_dtype, n, stream_of(be, stream));
}

static ddp_status_t cuda_stream_create(ddp_backend_t *be, ddp_stream_t *stream) {
  cudaStream_t s;
  DDP_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  *stream = (ddp_stream_t)(void *)s;
  return DDP_OK;
}

static void cuda_stream_destroy(ddp_backend_t *be, ddp_stream_t stream) {
  if (stream) cudaStreamDestroy((cudaStream_t)(void *)stream);
}

static ddp_status_t cuda_event_create(ddp_backend_t *be, ddp_event_t *event) {
  cudaEvent_t e;
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  *event = (ddp_event_t)(void *)e;
  return DDP_OK;
}

/* --trace's device spans: unlike the ordering events above, these keep a
 * timestamp (recording one costs a little more, so only the timeline asks). */
static ddp_status_t cuda_timing_event_create(ddp_backend_t *be, ddp_event_t *event) {
  cudaEvent_t e;
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));
  *event = (ddp_event_t)(void *)e;
  return DDP_OK;
}

static ddp_status_t cuda_event_elapsed_ms(ddp_backend_t *be, ddp_event_t start, ddp_event_t end,
                                          float *ms) {
  DDP_CUDA_CHECK(cudaEventElapsedTime(ms, (cudaEvent_t)(void *)start, (cudaEvent_t)(void *)end));
  return DDP_OK;
}

static void cuda_event_destroy(ddp_backend_t *be, ddp_event_t event) {
  if (event) cudaEventDestroy((cudaEvent_t)(void *)event);
}

static ddp_status_t cuda_event_record(ddp_backend_t *be, ddp_event_t event, ddp_stream_t stream) {
  DDP_CUDA_CHECK(cudaEventRecord((cudaEvent_t)(void *)event, stream_of(be, stream)));
  return DDP_OK;
}

static ddp_status_t cuda_stream_wait_event(ddp_backend_t *be, ddp_stream_t stream,
                                           ddp_event_t event) {
  DDP_CUDA_CHECK(cudaStreamWaitEvent(stream_of(be, stream), (cudaEvent_t)(void *)event, 0));
  return DDP_OK;
}

static ddp_status_t cuda_event_synchronize(ddp_backend_t *be, ddp_event_t event) {
  const double t0 = ddp_clock_seconds();
  DDP_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)(void *)event));
  be->host_wait_s += ddp_clock_seconds() - t0;
  return DDP_OK;
}

static ddp_status_t cuda_synchronize(ddp_backend_t *be, ddp_stream_t stream) {
  const double t0 = ddp_clock_seconds();
  DDP_CUDA_CHECK(cudaStreamSynchronize(stream_of(be, stream)));
  be->host_wait_s += ddp_clock_seconds() - t0;
  return DDP_OK;
}

static ddp_status_t cuda_mem_info(ddp_backend_t *be, size_t *free_bytes, size_t *total_bytes) {
  DDP_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
  return DDP_OK;
}

const ddp_backend_ops_t ddp_backend_cuda_ops = {
    .name = "cuda",
    .kind = DDP_DEVICE_KIND_CUDA,
    .available = cuda_available,
    .init = cuda_init,
    .shutdown = cuda_shutdown,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .alloc_host = cuda_alloc_host,
    .free_host = cuda_free_host,
    .copy = cuda_copy,
    .fill = cuda_fill,
    .convert = cuda_convert,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .stream_wait_event = cuda_stream_wait_event,
    .event_synchronize = cuda_event_synchronize,
    .synchronize = cuda_synchronize,
    .timing_event_create = cuda_timing_event_create,
    .event_elapsed_ms = cuda_event_elapsed_ms,
    .gemm = ddp_cuda_gemm,
    .graph_begin = ddp_cuda_graph_begin,
    .graph_end = ddp_cuda_graph_end,
    .graph_launch = ddp_cuda_graph_launch,
    .graph_destroy = ddp_cuda_graph_destroy,
    .mem_info = cuda_mem_info,
    .nn = &ddp_nn_cuda_ops,
#if DDP_HAVE_CUDNN
    .conv = &ddp_conv_cuda_ops, /* cuDNN's convolutions and batch norm, our kernels */
#endif
    .optim = &ddp_optim_cuda_ops,
    .cache_stats = cuda_cache_stats,
    .trim = cuda_trim,
    .pci_bus_id = cuda_pci_bus_id,
};
