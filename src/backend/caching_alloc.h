/* A caching allocator over a pluggable raw allocate/free pair.
 *
 * cudaMalloc and cudaFree are slow and synchronise the device, so the CUDA
 * backend keeps the memory it got from the driver and hands it out again:
 * after warm-up the step loop never reaches the raw allocator. The raw pair
 * is a parameter (cudaMalloc/cudaFree on CUDA, malloc/free or a counting fake
 * in tests), so all of the policy below runs and is tested on the CPU.
 *
 * Policy (the numbers are DDP_CACHING_ALLOC_* below):
 *   - every request is rounded up to a multiple of 512 bytes, so blocks and
 *     the pointers inside segments stay 512-byte aligned;
 *   - a rounded request of at most 1 MiB takes its block from a 2 MiB "small"
 *     segment, so many small buffers share one raw allocation; a larger one
 *     gets a segment of its size rounded up to 2 MiB;
 *   - a request takes the best-fitting free block (the smallest that is large
 *     enough); the block is split when the rest is worth keeping (at least
 *     512 bytes in a small segment, more than 1 MiB in a large one, so large
 *     segments are not cut into slivers nobody can use);
 *   - freed blocks merge with free neighbours of the same segment and stay
 *     cached; only trim() (or an out-of-memory retry) returns whole free
 *     segments to the raw allocator;
 *   - when the raw allocator reports out-of-memory the cache is trimmed and,
 *     if that released anything, the raw allocation is tried once more.
 *
 * Not thread-safe: each backend owns one and calls it from one thread. Blocks
 * are reused at once on free: on an asynchronous device that is safe for work
 * ordered on one stream; the CUDA backend synchronises before a free. */
#ifndef DDPTRAIN_CACHING_ALLOC_H
#define DDPTRAIN_CACHING_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h" /* ddp_caching_alloc_stats_t */
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DDP_CACHING_ALLOC_ROUND 512u                /* request granularity */
#define DDP_CACHING_ALLOC_SMALL ((size_t)1 << 20)   /* largest small request */
#define DDP_CACHING_ALLOC_SEGMENT ((size_t)2 << 20) /* small segment; large round */

/* The raw allocator. alloc returns DDP_OK, DDP_ERR_OOM *without logging*
 * (the cache may recover by trimming and retrying; the caller reports a final
 * failure in its own words), or another status, logged where it happened. */
typedef struct ddp_raw_alloc {
  ddp_status_t (*alloc)(void *ctx, size_t bytes, void **ptr);
  void (*free)(void *ctx, void *ptr);
  void *ctx;
} ddp_raw_alloc_t;

typedef struct ddp_caching_alloc ddp_caching_alloc_t;

ddp_status_t ddp_caching_alloc_create(const ddp_raw_alloc_t *raw, ddp_caching_alloc_t **out);
/* Returns every segment to the raw allocator, live blocks included. */
void ddp_caching_alloc_destroy(ddp_caching_alloc_t *ca);

/* bytes == 0 gives NULL and DDP_OK. A final out-of-memory returns
 * DDP_ERR_OOM without logging (see ddp_raw_alloc_t); *ptr is then NULL. */
ddp_status_t ddp_caching_alloc_malloc(ddp_caching_alloc_t *ca, size_t bytes, void **ptr);
/* Returns the size that was asked for when ptr was allocated, or 0 (and does
 * nothing) when ptr is NULL or not a live block of this allocator. */
size_t ddp_caching_alloc_free(ddp_caching_alloc_t *ca, void *ptr);
/* Returns every wholly free segment to the raw allocator; the bytes released. */
size_t ddp_caching_alloc_trim(ddp_caching_alloc_t *ca);
void ddp_caching_alloc_get_stats(const ddp_caching_alloc_t *ca, ddp_caching_alloc_stats_t *stats);

/* The policy as numbers, for callers and tests: a request's rounded size, and
 * the raw segment a request of that size would get when nothing is cached
 * (0 for 0 or when rounding would overflow). */
size_t ddp_caching_alloc_round(size_t bytes);
size_t ddp_caching_alloc_segment_size(size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
