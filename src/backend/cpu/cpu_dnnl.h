/* oneDNN for the CPU backend: the process's one CPU engine and stream, the
 * status converter, and the primitive cache the convolution, batch-norm and
 * pooling ops (cpu_conv.h) share.
 *
 * Creating a oneDNN primitive costs milliseconds (it picks and JIT-compiles
 * an implementation for the shape); running it again costs only the
 * arithmetic. So each op looks its shape up in one small cache and builds
 * its primitives, their memory objects, weight reorders and scratchpad only
 * on a miss: the first step (or ddp_cpu_conv_prepare, ddp_cpu_bn_prepare,
 * ddp_cpu_maxpool_workspace_bytes, before the step loop) builds them, and
 * every later call only re-points the memory objects at the caller's
 * buffers and executes. (oneDNN's own primitive cache makes a re-created
 * primitive cheaper, but each creation would still build descriptors,
 * memory objects and scratchpads: allocations in the step loop that this
 * cache keeps out of it.) A ResNet has a few dozen distinct shapes, far
 * below the capacity; past it the least recently used entry is destroyed.
 *
 * The cache is process-wide, like the engine (one CPU engine serves every CPU
 * backend of the process), and one mutex guards it for the whole of an op:
 * an entry's memory objects are re-pointed per call, so two threads must not
 * run the same entry at once. Training runs one compute thread per rank, so
 * the lock is never contended there; oneDNN parallelises inside each call. */
#ifndef DDPTRAIN_CPU_DNNL_H
#define DDPTRAIN_CPU_DNNL_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "ddptrain/dtype.h"
#include "ddptrain/status.h"

/* 1 when the build has oneDNN (DDP_HAVE_DNNL). */
int ddp_cpu_dnnl_available(void);
/* oneDNN's version as loaded ("2.6.3", with its commit where the build
 * recorded one); "" without oneDNN. */
const char *ddp_cpu_dnnl_version(void);
/* 1 when oneDNN runs its AVX-512 kernels on this machine (the ISA it
 * detected, capped by ONEDNN_MAX_CPU_ISA); 0 without oneDNN. */
int ddp_cpu_dnnl_avx512(void);
/* Primitives created since the process started (reorders included): a
 * counter that stays constant while calls hit the cache. */
uint64_t ddp_cpu_dnnl_primitives_created(void);
/* Entries now cached. */
size_t ddp_cpu_dnnl_cache_entries(void);
/* Destroys every cached entry and the staging buffers (tests and shutdown;
 * never during a step). */
void ddp_cpu_dnnl_cache_clear(void);
/* Bytes of the shared staging buffers the cached entries' reordered
 * activations live in (ddp_dnnl_staged_init with a slot). */
size_t ddp_cpu_dnnl_staging_bytes(void);

/* oneDNN's own fp32 GEMM rate, GFLOP/s, on n x n x n row-major products
 * for at least `seconds` with `threads` threads (0: its default): the
 * fastest window of 4 products after one warm-up, as
 * ddp_backend_measure_gemm_gflops measures the backend's. The CPU's MFU
 * peak is the faster of the two, since its convolutions run on oneDNN's
 * kernels: on an AVX-512 host whose OpenBLAS falls back to its AVX2 code
 * (Debian's 0.3.21 on an AMD EPYC: 129 against oneDNN's 252 GFLOP/s on one
 * core) OpenBLAS's rate alone put a ResNet-18 at 144% "MFU".
 * DDP_ERR_UNSUPPORTED without oneDNN. */
ddp_status_t ddp_cpu_dnnl_sgemm_gflops(int64_t n, double seconds, int threads, double *gflops);

/* The checks every oneDNN op makes first: the CPU backend, fp32 and a build
 * with oneDNN (DDP_ERR_UNSUPPORTED naming what is missing); `op` names the
 * caller in the message. */
ddp_status_t ddp_cpu_dnnl_admit(const ddp_backend_t *be, ddp_dtype_t dt, const char *op);

#if DDP_HAVE_DNNL
#include <dnnl.h>

/* What a cache entry is for: the op and every size its primitives depend on
 * (unused slots stay 0). Keys compare bytewise. */
enum { DDP_DNNL_KEY_VALUES = 12 };
typedef struct ddp_dnnl_key {
  int32_t op;
  int32_t pad_;
  int64_t v[DDP_DNNL_KEY_VALUES];
} ddp_dnnl_key_t;

/* Builds an entry's state for key (primitives, memory objects, buffers);
 * on failure leaves nothing allocated. */
typedef ddp_status_t (*ddp_dnnl_create_fn)(const ddp_dnnl_key_t *key, void **impl);
typedef void (*ddp_dnnl_destroy_fn)(void *impl);

/* The oneDNN status converter (for DDP_FOREIGN_STATUS). */
ddp_status_t ddp_dnnl_status(long code, const char *expr, const char *file, int line);
#define DDP_DNNL_CHECK(expr) DDP_CHECK(DDP_FOREIGN_STATUS(ddp_dnnl_status, (expr)))
#define DDP_DNNL_CHECK_GOTO(expr, st, label) \
  DDP_CHECK_GOTO(DDP_FOREIGN_STATUS(ddp_dnnl_status, (expr)), st, label)

/* Takes the cache lock and returns the entry for key, creating it on a miss;
 * the caller runs it and calls ddp_dnnl_release() (also after a failure).
 * oneDNN's threads are set to be's math threads for what follows. */
ddp_status_t ddp_dnnl_acquire(const ddp_backend_t *be, const ddp_dnnl_key_t *key,
                              ddp_dnnl_create_fn create, ddp_dnnl_destroy_fn destroy, void **impl);
void ddp_dnnl_release(void);

/* The engine and stream (valid after the first ddp_dnnl_acquire). */
dnnl_engine_t ddp_dnnl_engine(void);
dnnl_stream_t ddp_dnnl_stream(void);

/* Creates a primitive from pd, counted in ddp_cpu_dnnl_primitives_created. */
ddp_status_t ddp_dnnl_primitive(dnnl_primitive_t *prim, const_dnnl_primitive_desc_t pd);
/* Attributes that hand the scratchpad to the caller (ddp_dnnl_scratchpad),
 * so executing never allocates. */
ddp_status_t ddp_dnnl_user_scratchpad_attr(dnnl_primitive_attr_t *attr);
/* Destroys what building a primitive needed and no longer does: its
 * descriptor, the forward descriptor a backward was hinted with, and the
 * attributes. Each may be NULL. */
void ddp_dnnl_release_descs(dnnl_primitive_desc_t pd, dnnl_primitive_desc_t fwd_pd,
                            dnnl_primitive_attr_t attr);
/* The memory for pd's scratchpad, allocated once (NULL when it needs none). */
ddp_status_t ddp_dnnl_scratchpad(dnnl_memory_t *mem, const_dnnl_primitive_desc_t pd);
/* A memory object for md whose buffer is set per call (ddp_dnnl_point). */
ddp_status_t ddp_dnnl_user_memory(dnnl_memory_t *mem, const dnnl_memory_desc_t *md);
/* Points mem at a caller's buffer. oneDNN's setter takes void *; inputs are
 * only read through it. */
ddp_status_t ddp_dnnl_point(dnnl_memory_t mem, const void *buf);
/* Executes prim on the stream and waits (the CPU backend's ops return with
 * their outputs written, as every other CPU op does). */
ddp_status_t ddp_dnnl_execute(const_dnnl_primitive_t prim, int nargs, const dnnl_exec_arg_t *args);

/* A tensor in the caller's plain layout (user) and in the layout the
 * primitive chose (inner, with the reorder between them), or the same memory
 * when the primitive takes the plain layout as it is. */
typedef struct ddp_dnnl_staged {
  dnnl_memory_t user, inner;
  dnnl_primitive_t reorder; /* NULL when inner == user */
  int slot;                 /* DDP_DNNL_OWN_BUFFER, or the shared staging buffer inner lives in */
} ddp_dnnl_staged_t;
enum { DDP_DNNL_OWN_BUFFER = -1, DDP_DNNL_STAGE_SLOTS = 2 };
/* to_inner: 1 reorders user -> inner (an operand the op reads), 0 inner ->
 * user (one it writes). slot DDP_DNNL_OWN_BUFFER: the inner buffer is the
 * entry's own; 0 .. DDP_DNNL_STAGE_SLOTS-1: it lives in that process-wide
 * staging buffer, grown here to fit (for activations, which are large and
 * used only for the length of one op, and ops run one at a time under the
 * cache lock, so one buffer a slot serves every entry). */
ddp_status_t ddp_dnnl_staged_init(ddp_dnnl_staged_t *s, const dnnl_memory_desc_t *user_md,
                                  const dnnl_memory_desc_t *inner_md, int to_inner, int slot);
/* Points a shared inner memory at its staging buffer (before an op writes
 * it); nothing for an own buffer. */
ddp_status_t ddp_dnnl_staged_bind(const ddp_dnnl_staged_t *s);
/* Binds, then reorders (nothing when inner is user). */
ddp_status_t ddp_dnnl_staged_run(const ddp_dnnl_staged_t *s, int to_inner);
void ddp_dnnl_staged_destroy(ddp_dnnl_staged_t *s);
#endif

#endif
