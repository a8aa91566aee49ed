/* Backend registry, creation by device name, and GEMM descriptor validation.
 *
 * The #if on DDP_HAVE_CUDA lives here, in the registry, and nowhere in the
 * code that uses backends: callers name a device, the registry decides. */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "ddptrain/check.h"

static const ddp_backend_ops_t *const k_registry[] = {
#if DDP_HAVE_CUDA
    &ddp_backend_cuda_ops,
#endif
    &ddp_backend_cpu_ops,
    NULL,
};

const ddp_backend_ops_t *const *ddp_backend_registry(void) {
  return k_registry;
}

ddp_status_t ddp_device_parse(const char *text, const char **backend_name, int *index) {
  if (!text || !*text) text = "auto";
  *index = -1;
  if (strcmp(text, "auto") == 0 || strcmp(text, "cpu") == 0 || strcmp(text, "cuda") == 0) {
    *backend_name = strcmp(text, "auto") == 0 ? "auto" : strcmp(text, "cpu") == 0 ? "cpu" : "cuda";
    return DDP_OK;
  }
  if (strncmp(text, "cuda:", 5) == 0 && text[5] >= '0' && text[5] <= '9') {
    char *end = NULL;
    long v = strtol(text + 5, &end, 10);
    if (*end == '\0' && v >= 0 && v < 1024) {
      *backend_name = "cuda";
      *index = (int)v;
      return DDP_OK;
    }
  }
  return DDP_ERR_INVALID_ARG;
}

ddp_status_t ddp_backend_create(const ddp_backend_config_t *cfg, ddp_backend_t **out) {
  if (!cfg || !out) DDP_FAIL(DDP_ERR_INVALID_ARG, "backend_create: NULL argument");
  *out = NULL;
  const char *name = NULL;
  int index = -1;
  if (ddp_device_parse(cfg->device, &name, &index) != DDP_OK)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "device '%s' is not one of auto, cpu, cuda, cuda:N", cfg->device);
  const ddp_backend_ops_t *ops = NULL;
  for (const ddp_backend_ops_t *const *r = k_registry; *r && !ops; ++r) {
    const int usable = !cfg->need_model_ops || (*r)->nn;
    if (strcmp(name, "auto") == 0 ? usable && (*r)->available(NULL, 0)
                                  : strcmp(name, (*r)->name) == 0)
      ops = *r;
  }
  if (!ops) {
    DDP_FAIL(strcmp(name, "cuda") == 0 ? DDP_ERR_UNSUPPORTED : DDP_ERR_NO_DEVICE,
             "device '%s': this build has no %s backend (configure found no CUDA toolkit)",
             cfg->device, name);
  }
  if (cfg->need_model_ops && !ops->nn)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "device '%s': the %s backend has no model kernels in this "
             "build yet; use --device cpu", cfg->device, ops->name);
  char why[160] = "";
  if (!ops->available(why, sizeof why))
    DDP_FAIL(DDP_ERR_NO_DEVICE, "device '%s': no usable %s device on this host (%s)", cfg->device,
             ops->name, why);
  ddp_backend_t *be = calloc(1, sizeof *be);
  if (!be) DDP_FAIL(DDP_ERR_OOM, "backend_create: out of host memory");
  be->ops = ops;
  be->device = -1;
  ddp_status_t st = ops->init(be, cfg, index);
  if (st != DDP_OK) {
    free(be);
    return st;
  }
  *out = be;
  return DDP_OK;
}

void ddp_backend_destroy(ddp_backend_t *be) {
  if (!be) return;
  be->ops->shutdown(be);
  free(be);
}

void ddp_backend_count_alloc(ddp_backend_t *be, size_t bytes) {
  be->alloc_calls++;
  be->bytes_in_use += bytes;
  if (be->bytes_in_use > be->peak_bytes) be->peak_bytes = be->bytes_in_use;
}

void ddp_backend_count_free(ddp_backend_t *be, size_t bytes) {
  be->free_calls++;
  be->bytes_in_use -= bytes <= be->bytes_in_use ? bytes : be->bytes_in_use;
}

void ddp_backend_mem_stats(ddp_backend_t *be, ddp_caching_alloc_stats_t *stats) {
  if (be->ops->cache_stats) {
    be->ops->cache_stats(be, stats);
    return;
  }
  *stats = (ddp_caching_alloc_stats_t){.raw_alloc_calls = be->alloc_calls,
                                       .raw_free_calls = be->free_calls,
                                       .live_blocks = be->alloc_calls - be->free_calls,
                                       .bytes_in_use = be->bytes_in_use,
                                       .peak_bytes_in_use = be->peak_bytes,
                                       .bytes_reserved = be->bytes_in_use,
                                       .peak_bytes_reserved = be->peak_bytes};
}

size_t ddp_backend_trim(ddp_backend_t *be) {
  return be->ops->trim ? be->ops->trim(be) : 0;
}

/* One matrix as stored: rows x cols with row pitch ld. */
static ddp_status_t check_operand(const char *what, const void *ptr, int64_t cols, int64_t ld,
                                  int64_t stride, int64_t batch) {
  if (!ptr) DDP_FAIL(DDP_ERR_INVALID_ARG, "gemm: matrix %s is NULL", what);
  if (ld < (cols > 1 ? cols : 1))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gemm: ld%s = %lld is smaller than its %lld columns", what,
             (long long)ld, (long long)cols);
  if (ld > INT32_MAX) DDP_FAIL(DDP_ERR_UNSUPPORTED, "gemm: ld%s exceeds 2^31-1", what);
  if (batch > 1 && stride < 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gemm: negative batch stride for %s", what);
  return DDP_OK;
}

ddp_status_t ddp_gemm_validate(const ddp_gemm_t *g) {
  if (!g) DDP_FAIL(DDP_ERR_INVALID_ARG, "gemm: NULL descriptor");
  if (g->m < 0 || g->n < 0 || g->k < 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gemm: negative size m=%lld n=%lld k=%lld", (long long)g->m,
             (long long)g->n, (long long)g->k);
  /* BLAS libraries take 32-bit sizes. */
  if (g->m > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX || g->batch > INT32_MAX)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "gemm: a size exceeds 2^31-1");
  if (g->batch < 1) DDP_FAIL(DDP_ERR_INVALID_ARG, "gemm: batch %lld < 1", (long long)g->batch);
  if (!ddp_dtype_is_float(g->ab_dtype) || !ddp_dtype_is_float(g->c_dtype))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gemm: operands must be floating point");
  if (g->m == 0 || g->n == 0) return DDP_OK;
  if (g->k > 0) {
    int ta = g->trans_a == DDP_TRANSPOSE_YES, tb = g->trans_b == DDP_TRANSPOSE_YES;
    DDP_CHECK(check_operand("A", g->a, ta ? g->m : g->k, g->lda, g->stride_a, g->batch));
    DDP_CHECK(check_operand("B", g->b, tb ? g->k : g->n, g->ldb, g->stride_b, g->batch));
  }
  DDP_CHECK(check_operand("C", g->c, g->n, g->ldc, g->stride_c, g->batch));
  return DDP_OK;
}
