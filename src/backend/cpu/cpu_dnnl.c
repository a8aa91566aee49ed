/* oneDNN's engine, stream and primitive cache for the CPU backend (see
 * cpu_dnnl.h for why the primitives are cached and how). */
#include <config.h>

#include "backend/cpu/cpu_dnnl.h"

#include <pthread.h>
#if DDP_HAVE_DNNL_OMP
#include <omp.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/gemm_peak.h"
#include "ddptrain/check.h"
#include "ddptrain/log.h"

int ddp_cpu_dnnl_available(void) {
  return DDP_HAVE_DNNL;
}

ddp_status_t ddp_cpu_dnnl_admit(const ddp_backend_t *be, ddp_dtype_t dt, const char *op) {
  if (!be || be->device != -1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: the oneDNN ops need the CPU backend (got %s)", op,
             be ? "a GPU backend" : "no backend");
  if (dt != DDP_DTYPE_F32)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "%s: only fp32 is implemented on the CPU, not %s", op,
             ddp_dtype_name(dt));
  if (!DDP_HAVE_DNNL)
    DDP_FAIL(DDP_ERR_UNSUPPORTED,
             "%s: this build has no oneDNN (install libdnnl-dev and configure --with-dnnl)", op);
  return DDP_OK;
}

#if DDP_HAVE_DNNL

/* Room for every distinct shape of a ResNet-50 (about 25 convolution and 20
 * batch-norm shapes, forward and backward) with margin. */
enum { CACHE_CAPACITY = 256 };

typedef struct cache_entry {
  ddp_dnnl_key_t key;
  void *impl;
  ddp_dnnl_destroy_fn destroy;
  uint64_t last_use;
} cache_entry_t;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry_t g_cache[CACHE_CAPACITY];
static size_t g_entries;
static uint64_t g_clock, g_primitives;
static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;
/* The shared staging buffers (ddp_dnnl_staged_init with a slot): grown only when
 * an entry is created, so never in the step loop. */
static void *g_stage[DDP_DNNL_STAGE_SLOTS];
static size_t g_stage_bytes[DDP_DNNL_STAGE_SLOTS];

ddp_status_t ddp_dnnl_status(long code, const char *expr, const char *file, int line) {
  if (code == dnnl_success) return DDP_OK;
  const char *what = "error";
  ddp_status_t st = DDP_ERR_INTERNAL;
  switch ((dnnl_status_t)code) {
    case dnnl_out_of_memory:
      what = "out of memory", st = DDP_ERR_OOM;
      break;
    case dnnl_invalid_arguments:
      what = "invalid arguments";
      break;
    case dnnl_unimplemented:
      what = "no implementation for this shape", st = DDP_ERR_UNSUPPORTED;
      break;
    case dnnl_runtime_error:
      what = "runtime error";
      break;
    default:
      break;
  }
  ddp_log_at(DDP_LOG_LEVEL_ERROR, file, line, "%s failed: oneDNN: %s (status %ld)", expr, what,
             code);
  return st;
}

const char *ddp_cpu_dnnl_version(void) {
  static char buf[96];
  if (!buf[0]) {
    const dnnl_version_t *v = dnnl_version();
    /* Distribution builds carry no commit ("N/A"). */
    const int has_hash = v->hash && v->hash[0] && strcmp(v->hash, "N/A") != 0;
    snprintf(buf, sizeof buf, "%d.%d.%d%s%.12s%s", v->major, v->minor, v->patch,
             has_hash ? " (commit " : "", has_hash ? v->hash : "", has_hash ? ")" : "");
  }
  return buf;
}

int ddp_cpu_dnnl_avx512(void) {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

uint64_t ddp_cpu_dnnl_primitives_created(void) {
  pthread_mutex_lock(&g_lock);
  const uint64_t n = g_primitives;
  pthread_mutex_unlock(&g_lock);
  return n;
}

size_t ddp_cpu_dnnl_cache_entries(void) {
  pthread_mutex_lock(&g_lock);
  const size_t n = g_entries;
  pthread_mutex_unlock(&g_lock);
  return n;
}

void ddp_cpu_dnnl_cache_clear(void) {
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_entries; ++i) g_cache[i].destroy(g_cache[i].impl);
  g_entries = 0;
  for (int i = 0; i < DDP_DNNL_STAGE_SLOTS; ++i) {
    free(g_stage[i]);
    g_stage[i] = NULL, g_stage_bytes[i] = 0;
  }
  pthread_mutex_unlock(&g_lock);
}

size_t ddp_cpu_dnnl_staging_bytes(void) {
  pthread_mutex_lock(&g_lock);
  size_t n = 0;
  for (int i = 0; i < DDP_DNNL_STAGE_SLOTS; ++i) n += g_stage_bytes[i];
  pthread_mutex_unlock(&g_lock);
  return n;
}

/* The engine and stream, created on first use (under the lock) and kept for
 * the life of the process, as oneDNN's own examples do. */
static ddp_status_t ensure_engine(void) {
  if (g_stream) return DDP_OK;
  if (!g_engine) DDP_DNNL_CHECK(dnnl_engine_create(&g_engine, dnnl_cpu, 0));
  DDP_DNNL_CHECK(dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags));
  return DDP_OK;
}

dnnl_engine_t ddp_dnnl_engine(void) {
  return g_engine;
}

dnnl_stream_t ddp_dnnl_stream(void) {
  return g_stream;
}

ddp_status_t ddp_dnnl_acquire(const ddp_backend_t *be, const ddp_dnnl_key_t *key,
                              ddp_dnnl_create_fn create, ddp_dnnl_destroy_fn destroy, void **impl) {
  pthread_mutex_lock(&g_lock);
#if DDP_HAVE_DNNL_OMP
  /* OpenMP's team would be every core; the backend's count is what this
   * rank may use (it also sizes OpenBLAS). Per calling thread, and cheap. */
  if (be->threads > 0) omp_set_num_threads(be->threads);
#endif
  DDP_CHECK(ensure_engine());
  ++g_clock;
  size_t lru = 0;
  for (size_t i = 0; i < g_entries; ++i) {
    if (memcmp(&g_cache[i].key, key, sizeof *key) == 0) {
      g_cache[i].last_use = g_clock;
      *impl = g_cache[i].impl;
      return DDP_OK;
    }
    if (g_cache[i].last_use < g_cache[lru].last_use) lru = i;
  }
  void *made = NULL;
  DDP_CHECK(create(key, &made));
  size_t slot = g_entries;
  if (g_entries == CACHE_CAPACITY) {
    g_cache[lru].destroy(g_cache[lru].impl);
    slot = lru;
  } else {
    ++g_entries;
  }
  g_cache[slot] =
      (cache_entry_t){.key = *key, .impl = made, .destroy = destroy, .last_use = g_clock};
  *impl = made;
  return DDP_OK;
}

void ddp_dnnl_release(void) {
  pthread_mutex_unlock(&g_lock);
}

ddp_status_t ddp_dnnl_primitive(dnnl_primitive_t *prim, const_dnnl_primitive_desc_t pd) {
  DDP_DNNL_CHECK(dnnl_primitive_create(prim, pd));
  ++g_primitives; /* under the cache lock: primitives are made only in create callbacks */
  return DDP_OK;
}

ddp_status_t ddp_dnnl_user_scratchpad_attr(dnnl_primitive_attr_t *attr) {
  DDP_DNNL_CHECK(dnnl_primitive_attr_create(attr));
  ddp_status_t st = DDP_OK;
  DDP_DNNL_CHECK_GOTO(dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user), st,
                      fail);
  return DDP_OK;
fail:
  dnnl_primitive_attr_destroy(*attr);
  *attr = NULL;
  return st;
}

void ddp_dnnl_release_descs(dnnl_primitive_desc_t pd, dnnl_primitive_desc_t fwd_pd,
                            dnnl_primitive_attr_t attr) {
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
}

ddp_status_t ddp_dnnl_scratchpad(dnnl_memory_t *mem, const_dnnl_primitive_desc_t pd) {
  *mem = NULL;
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (!md || dnnl_memory_desc_get_size(md) == 0) return DDP_OK;
  DDP_DNNL_CHECK(dnnl_memory_create(mem, md, g_engine, DNNL_MEMORY_ALLOCATE));
  return DDP_OK;
}

ddp_status_t ddp_dnnl_user_memory(dnnl_memory_t *mem, const dnnl_memory_desc_t *md) {
  DDP_DNNL_CHECK(dnnl_memory_create(mem, md, g_engine, DNNL_MEMORY_NONE));
  return DDP_OK;
}

ddp_status_t ddp_dnnl_point(dnnl_memory_t mem, const void *buf) {
  DDP_DNNL_CHECK(dnnl_memory_set_data_handle_v2(mem, (void *)buf, g_stream));
  return DDP_OK;
}

ddp_status_t ddp_dnnl_execute(const_dnnl_primitive_t prim, int nargs, const dnnl_exec_arg_t *args) {
  DDP_DNNL_CHECK(dnnl_primitive_execute(prim, g_stream, nargs, args));
  DDP_DNNL_CHECK(dnnl_stream_wait(g_stream));
  return DDP_OK;
}

/* Grows staging buffer `slot` to at least `bytes` (under the cache lock:
 * entries are created only in ddp_dnnl_acquire). */
static ddp_status_t stage_reserve(int slot, size_t bytes) {
  if (slot < 0 || slot >= DDP_DNNL_STAGE_SLOTS)
    DDP_FAIL(DDP_ERR_INTERNAL, "oneDNN staging slot %d out of range", slot);
  if (bytes <= g_stage_bytes[slot]) return DDP_OK;
  const size_t rounded = (bytes + 63) / 64 * 64;
  void *grown = aligned_alloc(64, rounded);
  if (!grown) DDP_FAIL(DDP_ERR_OOM, "cannot allocate %zu bytes of oneDNN staging", rounded);
  free(g_stage[slot]);
  g_stage[slot] = grown, g_stage_bytes[slot] = rounded;
  return DDP_OK;
}

ddp_status_t ddp_dnnl_staged_init(ddp_dnnl_staged_t *s, const dnnl_memory_desc_t *user_md,
                                  const dnnl_memory_desc_t *inner_md, int to_inner, int slot) {
  *s = (ddp_dnnl_staged_t){.slot = DDP_DNNL_OWN_BUFFER};
  ddp_status_t st = DDP_OK;
  DDP_CHECK(ddp_dnnl_user_memory(&s->user, user_md));
  if (dnnl_memory_desc_equal(user_md, inner_md)) {
    s->inner = s->user;
    return DDP_OK;
  }
  /* The primitive wants its own (blocked) layout: a buffer for it, made
   * once (or the shared one), and the reorder that converts each call. */
  if (slot == DDP_DNNL_OWN_BUFFER) {
    DDP_DNNL_CHECK_GOTO(dnnl_memory_create(&s->inner, inner_md, g_engine, DNNL_MEMORY_ALLOCATE), st,
                        fail);
  } else {
    DDP_CHECK_GOTO(stage_reserve(slot, dnnl_memory_desc_get_size(inner_md)), st, fail);
    DDP_DNNL_CHECK_GOTO(dnnl_memory_create(&s->inner, inner_md, g_engine, DNNL_MEMORY_NONE), st,
                        fail);
    s->slot = slot;
  }
  dnnl_primitive_desc_t rpd = NULL;
  DDP_DNNL_CHECK_GOTO(
      dnnl_reorder_primitive_desc_create(&rpd, to_inner ? user_md : inner_md, g_engine,
                                         to_inner ? inner_md : user_md, g_engine, NULL),
      st, fail);
  st = ddp_dnnl_primitive(&s->reorder, rpd);
  dnnl_primitive_desc_destroy(rpd);
  if (st != DDP_OK) goto fail;
  return DDP_OK;
fail:
  ddp_dnnl_staged_destroy(s);
  return st;
}

ddp_status_t ddp_dnnl_staged_bind(const ddp_dnnl_staged_t *s) {
  /* Re-pointed every call: a later entry may have grown (moved) the buffer. */
  return s->slot == DDP_DNNL_OWN_BUFFER ? DDP_OK : ddp_dnnl_point(s->inner, g_stage[s->slot]);
}

ddp_status_t ddp_dnnl_staged_run(const ddp_dnnl_staged_t *s, int to_inner) {
  if (!s->reorder) return DDP_OK;
  DDP_CHECK(ddp_dnnl_staged_bind(s));
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, to_inner ? s->user : s->inner},
                                  {DNNL_ARG_TO, to_inner ? s->inner : s->user}};
  return ddp_dnnl_execute(s->reorder, 2, args);
}

void ddp_dnnl_staged_destroy(ddp_dnnl_staged_t *s) {
  if (s->reorder) dnnl_primitive_destroy(s->reorder);
  if (s->inner && s->inner != s->user) dnnl_memory_destroy(s->inner);
  if (s->user) dnnl_memory_destroy(s->user);
  *s = (ddp_dnnl_staged_t){.slot = DDP_DNNL_OWN_BUFFER};
}

typedef struct sgemm_ctx {
  int64_t n;
  const float *a, *b;
  float *c;
} sgemm_ctx_t;

static ddp_status_t sgemm_product(void *ctx) {
  const sgemm_ctx_t *m = ctx;
  return ddp_dnnl_status(dnnl_sgemm('N', 'N', m->n, m->n, m->n, 1.0f, m->a, m->n, m->b, m->n, 0.0f,
                                    m->c, m->n),
                         "dnnl_sgemm", __FILE__, __LINE__);
}

ddp_status_t ddp_cpu_dnnl_sgemm_gflops(int64_t n, double seconds, int threads, double *gflops) {
  if (n < 1 || n > 16384 || !(seconds >= 0) || !gflops)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "oneDNN GEMM rate: bad arguments (n = %lld)", (long long)n);
  const size_t elems = (size_t)(n * n);
  float *a = malloc(elems * sizeof *a), *b = malloc(elems * sizeof *b), *c = malloc(elems * sizeof *c);
  ddp_status_t st = DDP_OK;
  if (!a || !b || !c) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "oneDNN GEMM rate: out of host memory");
  for (size_t i = 0; i < elems; ++i) a[i] = 0.5f, b[i] = 0.25f; /* no zeros: no shortcuts */
#if DDP_HAVE_DNNL_OMP
  if (threads > 0) omp_set_num_threads(threads);
#else
  (void)threads;
#endif
  sgemm_ctx_t ctx = {.n = n, .a = a, .b = b, .c = c};
  st = ddp_gemm_fastest_window(sgemm_product, NULL, &ctx, n, seconds, gflops);
out:
  free(a);
  free(b);
  free(c);
  return st;
}

#else /* !DDP_HAVE_DNNL */

ddp_status_t ddp_cpu_dnnl_sgemm_gflops(int64_t n, double seconds, int threads, double *gflops) {
  (void)n, (void)seconds, (void)threads, (void)gflops;
  DDP_FAIL(DDP_ERR_UNSUPPORTED, "oneDNN GEMM rate: this build has no oneDNN");
}

const char *ddp_cpu_dnnl_version(void) {
  return "";
}

int ddp_cpu_dnnl_avx512(void) {
  return 0;
}

uint64_t ddp_cpu_dnnl_primitives_created(void) {
  return 0;
}

size_t ddp_cpu_dnnl_cache_entries(void) {
  return 0;
}

void ddp_cpu_dnnl_cache_clear(void) {}

size_t ddp_cpu_dnnl_staging_bytes(void) {
  return 0;
}

#endif
