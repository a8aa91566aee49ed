/* The CPU backend: host memory, OpenBLAS GEMM, and trivial streams.
 *
 * "Device" memory is host memory, so copies are memcpy, but callers still go
 * through copy() for every transfer; code that works here therefore also works
 * on a device whose memory the host cannot touch. Work runs synchronously in
 * call order, which is a valid schedule of any stream program, so streams and
 * events are tokens and synchronize() has nothing to wait for. */
#include <config.h>

#include <cblas.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if DDP_HAVE_HWLOC
#include <hwloc.h>
#endif

#include "ddptrain/check.h"
#include "ddptrain/nn.h"
#include "backend/backend_impl.h"
#include "backend/cpu/cpu_conv.h"
#include "backend/cpu/cpu_nn_impl.h"
#include "backend/cpu/cpu_optim.h"

#if DDP_HAVE_OPENBLAS_THREADS
/* OpenBLAS's own thread control; declared in its cblas.h, repeated here in
 * case a cblas.h from another vendor is first on the include path. */
void openblas_set_num_threads(int num_threads);
#endif

/* Each block carries its size in a header so free() can keep the byte
 * counters honest; the header is one alignment unit so the user pointer
 * keeps the 256-byte alignment that vectorised loops and the arena expect. */
#define CPU_ALIGN 256

/* Stream and event handles only need to be distinct non-NULL tokens. */
static char g_token;

static int cpu_available(char *why, size_t why_len) {
  return 1;
}

int ddp_cpu_default_threads(int local_size) {
  int cores = 0;
#if DDP_HAVE_HWLOC
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) == 0) {
    if (hwloc_topology_load(topo) == 0) cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    hwloc_topology_destroy(topo);
  }
#endif
  if (cores <= 0) cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (cores <= 0) cores = 1;
  int per_rank = cores / (local_size > 0 ? local_size : 1);
  return per_rank > 0 ? per_rank : 1;
}

static ddp_status_t cpu_init(ddp_backend_t *be, const ddp_backend_config_t *cfg, int index) {
  if (index >= 0) DDP_FAIL(DDP_ERR_INVALID_ARG, "the cpu device takes no index");
  be->device = -1;
  be->threads = cfg->threads > 0 ? cfg->threads : ddp_cpu_default_threads(cfg->local_size);
#if DDP_HAVE_OPENBLAS_THREADS
  openblas_set_num_threads(be->threads);
#endif
  ddp_cpu_conv_set_autotune(cfg->conv_nondeterministic);
  ddp_cpu_conv_set_winograd(!cfg->conv_no_winograd);
  snprintf(be->description, sizeof be->description, "cpu (OpenBLAS, %d thread%s)", be->threads,
           be->threads == 1 ? "" : "s");
  return DDP_OK;
}

static void cpu_shutdown(ddp_backend_t *be) {
  ddp_cpu_nn_workspace_free(be);
  ddp_conv_cpu_ops.release(be); /* the oneDNN primitives the conv ops cached */
  if (be->bytes_in_use)
    DDP_LOG_DEBUG("cpu backend: %zu bytes still allocated at shutdown", be->bytes_in_use);
}

/* Both kinds of memory share one allocator; only "device" memory counts
 * (the counters mean device memory, as on CUDA). Zero bytes gives NULL. */
static ddp_status_t host_block(size_t bytes, void **ptr) {
  void *block = NULL;
  *ptr = NULL;
  if (bytes == 0) return DDP_OK;
  if (bytes > SIZE_MAX - CPU_ALIGN || posix_memalign(&block, CPU_ALIGN, bytes + CPU_ALIGN) != 0)
    DDP_FAIL(DDP_ERR_OOM, "cpu backend: cannot allocate %.2f MiB of host memory",
             bytes / 1048576.0);
  *(size_t *)block = bytes;
  *ptr = (char *)block + CPU_ALIGN;
  return DDP_OK;
}

/* Returns the block's size. */
static size_t host_block_free(void *ptr) {
  void *block = (char *)ptr - CPU_ALIGN;
  size_t bytes = *(size_t *)block;
  free(block);
  return bytes;
}

static ddp_status_t cpu_alloc(ddp_backend_t *be, size_t bytes, void **ptr) {
  DDP_CHECK(host_block(bytes, ptr));
  if (*ptr) ddp_backend_count_alloc(be, bytes);
  return DDP_OK;
}

static void cpu_free(ddp_backend_t *be, void *ptr) {
  if (ptr) ddp_backend_count_free(be, host_block_free(ptr));
}

static ddp_status_t cpu_alloc_host(ddp_backend_t *be, size_t bytes, void **ptr) {
  return host_block(bytes, ptr);
}

static void cpu_free_host(ddp_backend_t *be, void *ptr) {
  if (ptr) host_block_free(ptr);
}

static ddp_status_t cpu_copy(ddp_backend_t *be, void *dst, const void *src, size_t bytes,
                             ddp_copy_kind_t kind, ddp_stream_t stream) {
  if (bytes == 0) return DDP_OK;
  if (!dst || !src) DDP_FAIL(DDP_ERR_INVALID_ARG, "copy: NULL pointer");
  memmove(dst, src, bytes);
  return DDP_OK;
}

static ddp_status_t cpu_fill(ddp_backend_t *be, void *dst, ddp_dtype_t dtype, float value, size_t n,
                             ddp_stream_t stream) {
  if (n == 0) return DDP_OK;
  if (!dst) DDP_FAIL(DDP_ERR_INVALID_ARG, "fill: NULL pointer");
  switch (dtype) {
    case DDP_DTYPE_F32:
      for (size_t i = 0; i < n; ++i) ((float *)dst)[i] = value;
      return DDP_OK;
    case DDP_DTYPE_I32:
      for (size_t i = 0; i < n; ++i) ((int32_t *)dst)[i] = (int32_t)value;
      return DDP_OK;
    case DDP_DTYPE_BF16:
    case DDP_DTYPE_F16: {
      uint16_t bits = dtype == DDP_DTYPE_BF16 ? ddp_f32_to_bf16(value) : ddp_f32_to_f16(value);
      for (size_t i = 0; i < n; ++i) ((uint16_t *)dst)[i] = bits;
      return DDP_OK;
    }
    default:
      DDP_FAIL(DDP_ERR_INVALID_ARG, "fill: invalid dtype %d", (int)dtype);
  }
}

static ddp_status_t cpu_convert(ddp_backend_t *be, void *dst, ddp_dtype_t dst_dtype,
                                const void *src, ddp_dtype_t src_dtype, size_t n,
                                ddp_stream_t stream) {
  return ddp_convert_host(dst, dst_dtype, src, src_dtype, n);
}

static ddp_status_t cpu_stream_create(ddp_backend_t *be, ddp_stream_t *stream) {
  *stream = (ddp_stream_t)(void *)&g_token;
  return DDP_OK;
}

static void cpu_stream_destroy(ddp_backend_t *be, ddp_stream_t stream) {}

static ddp_status_t cpu_event_create(ddp_backend_t *be, ddp_event_t *event) {
  *event = (ddp_event_t)(void *)&g_token;
  return DDP_OK;
}

static void cpu_event_destroy(ddp_backend_t *be, ddp_event_t event) {}

static ddp_status_t cpu_event_record(ddp_backend_t *be, ddp_event_t event, ddp_stream_t stream) {
  return DDP_OK;
}

static ddp_status_t cpu_event_synchronize(ddp_backend_t *be, ddp_event_t event) {
  (void)be;
  (void)event;
  return DDP_OK; /* CPU work is finished when its call returns */
}

static ddp_status_t cpu_stream_wait_event(ddp_backend_t *be, ddp_stream_t stream,
                                          ddp_event_t event) {
  return DDP_OK;
}

static ddp_status_t cpu_synchronize(ddp_backend_t *be, ddp_stream_t stream) {
  return DDP_OK;
}

static ddp_status_t cpu_gemm(ddp_backend_t *be, const ddp_gemm_t *g, ddp_stream_t stream) {
  DDP_CHECK(ddp_gemm_validate(g));
  if (g->ab_dtype != DDP_DTYPE_F32 || g->c_dtype != DDP_DTYPE_F32)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "cpu gemm: only fp32 operands are supported (got %s x %s -> %s)",
             ddp_dtype_name(g->ab_dtype), ddp_dtype_name(g->ab_dtype), ddp_dtype_name(g->c_dtype));
  if (g->m == 0 || g->n == 0) return DDP_OK;
  const enum CBLAS_TRANSPOSE ta = g->trans_a == DDP_TRANSPOSE_YES ? CblasTrans : CblasNoTrans;
  const enum CBLAS_TRANSPOSE tb = g->trans_b == DDP_TRANSPOSE_YES ? CblasTrans : CblasNoTrans;
  const float *a = g->a, *b = g->b;
  float *c = g->c;
  for (int64_t i = 0; i < g->batch; ++i) {
    float *ci = c + i * g->stride_c;
    if (g->k == 0) {
      /* BLAS leaves C untouched when k == 0 only if beta == 1; make the
       * beta == 0 contract (C is write-only) hold here too. */
      for (int64_t r = 0; r < g->m; ++r)
        for (int64_t j = 0; j < g->n; ++j) {
          float *x = ci + r * g->ldc + j;
          *x = g->beta == 0.0f ? 0.0f : g->beta * *x;
        }
      continue;
    }
    cblas_sgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, g->alpha,
                a + i * g->stride_a, (int)g->lda, b + i * g->stride_b, (int)g->ldb, g->beta, ci,
                (int)g->ldc);
  }
  return DDP_OK;
}

static ddp_status_t cpu_mem_info(ddp_backend_t *be, size_t *free_bytes, size_t *total_bytes) {
  long page = sysconf(_SC_PAGESIZE);
  long avail = sysconf(_SC_AVPHYS_PAGES), total = sysconf(_SC_PHYS_PAGES);
  if (page <= 0 || avail < 0 || total <= 0) DDP_FAIL(DDP_ERR_INTERNAL, "cannot read memory size");
  *free_bytes = (size_t)avail * (size_t)page;
  *total_bytes = (size_t)total * (size_t)page;
  return DDP_OK;
}

const ddp_backend_ops_t ddp_backend_cpu_ops = {
    .name = "cpu",
    .kind = DDP_DEVICE_KIND_CPU,
    .available = cpu_available,
    .init = cpu_init,
    .shutdown = cpu_shutdown,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .alloc_host = cpu_alloc_host,
    .free_host = cpu_free_host,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .convert = cpu_convert,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_synchronize = cpu_event_synchronize,
    .synchronize = cpu_synchronize,
    .gemm = cpu_gemm,
    .mem_info = cpu_mem_info,
    .nn = &ddp_nn_cpu_ops,
    .optim = &ddp_optim_cpu_ops,
    .conv = &ddp_conv_cpu_ops,
};
