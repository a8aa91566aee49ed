/* The caching allocator (policy in backend/caching_alloc.h).
 *
 * Bookkeeping lives in host memory: device memory has no room for a
 * host-readable header. Each raw segment is a chain of blocks in address
 * order (prev/next), so a freed block can merge with its neighbours; free
 * blocks are also on one free list that a best-fit request scans, and live
 * blocks are found by pointer in an open-addressing table. The backend keeps
 * a few dozen large buffers, so a linear scan of the free list is cheaper
 * than maintaining a size-ordered tree, and it is never on the step path
 * (the step loop allocates from an arena). */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>

#include "ddptrain/check.h"
#include "backend/caching_alloc.h"

typedef struct block block_t;
struct block {
  char *ptr;
  size_t size;      /* bytes this block spans (a multiple of the rounding) */
  size_t requested; /* what the caller asked for (live blocks) */
  int live;
  int small;                      /* belongs to a small segment */
  block_t *prev, *next;           /* address-order neighbours in the segment */
  block_t *free_prev, *free_next; /* the free list (free blocks only) */
};

struct ddp_caching_alloc {
  ddp_raw_alloc_t raw;
  block_t *free_list;
  block_t **slots; /* live blocks by pointer; n_slots is a power of two */
  size_t n_slots, n_live;
  ddp_caching_alloc_stats_t stats;
};

size_t ddp_caching_alloc_round(size_t bytes) {
  if (bytes == 0 || bytes > SIZE_MAX - DDP_CACHING_ALLOC_ROUND) return 0;
  return (bytes + DDP_CACHING_ALLOC_ROUND - 1) / DDP_CACHING_ALLOC_ROUND * DDP_CACHING_ALLOC_ROUND;
}

size_t ddp_caching_alloc_segment_size(size_t bytes) {
  const size_t r = ddp_caching_alloc_round(bytes);
  if (r == 0 || r > SIZE_MAX - DDP_CACHING_ALLOC_SEGMENT) return 0;
  if (r <= DDP_CACHING_ALLOC_SMALL) return DDP_CACHING_ALLOC_SEGMENT;
  return (r + DDP_CACHING_ALLOC_SEGMENT - 1) / DDP_CACHING_ALLOC_SEGMENT *
         DDP_CACHING_ALLOC_SEGMENT;
}

/* ---- live blocks by pointer ---------------------------------------------- */

static size_t slot_index(const ddp_caching_alloc_t *ca, const void *ptr) {
  /* Fibonacci hashing: take the product's high bits. Raw segments are often
   * 2 MiB-aligned and blocks 512-byte aligned, so low bits carry nothing. */
  const size_t mask = ca->n_slots - 1;
  size_t i = (size_t)(((uint64_t)(uintptr_t)ptr * 0x9E3779B97F4A7C15ull) >> 32) & mask;
  while (ca->slots[i] && ca->slots[i]->ptr != ptr) i = (i + 1) & mask;
  return i;
}

static ddp_status_t slots_insert(ddp_caching_alloc_t *ca, block_t *b) {
  if (2 * (ca->n_live + 1) > ca->n_slots) {
    const size_t old_n = ca->n_slots;
    block_t **old = ca->slots;
    const size_t new_n = old_n ? 2 * old_n : 64;
    block_t **grown = calloc(new_n, sizeof *grown);
    if (!grown) DDP_FAIL(DDP_ERR_OOM, "caching allocator: out of host memory");
    ca->slots = grown;
    ca->n_slots = new_n;
    for (size_t i = 0; i < old_n; ++i)
      if (old[i]) ca->slots[slot_index(ca, old[i]->ptr)] = old[i];
    free(old);
  }
  ca->slots[slot_index(ca, b->ptr)] = b;
  ca->n_live++;
  return DDP_OK;
}

/* Backward-shift deletion keeps every probe chain intact without tombstones. */
static block_t *slots_remove(ddp_caching_alloc_t *ca, const void *ptr) {
  if (!ca->n_slots) return NULL;
  const size_t mask = ca->n_slots - 1;
  const size_t i = slot_index(ca, ptr);
  block_t *b = ca->slots[i];
  if (!b) return NULL;
  ca->slots[i] = NULL;
  ca->n_live--;
  for (size_t j = (i + 1) & mask; ca->slots[j]; j = (j + 1) & mask) {
    block_t *moved = ca->slots[j];
    ca->slots[j] = NULL;
    ca->slots[slot_index(ca, moved->ptr)] = moved;
  }
  return b;
}

/* ---- free list ----------------------------------------------------------- */

static void free_list_push(ddp_caching_alloc_t *ca, block_t *b) {
  b->free_prev = NULL;
  b->free_next = ca->free_list;
  if (ca->free_list) ca->free_list->free_prev = b;
  ca->free_list = b;
}

static void free_list_unlink(ddp_caching_alloc_t *ca, block_t *b) {
  if (b->free_prev)
    b->free_prev->free_next = b->free_next;
  else
    ca->free_list = b->free_next;
  if (b->free_next) b->free_next->free_prev = b->free_prev;
  b->free_prev = b->free_next = NULL;
}

/* ---- segments ------------------------------------------------------------ */

static void note_reserved(ddp_caching_alloc_t *ca, size_t bytes) {
  ca->stats.bytes_reserved += bytes;
  if (ca->stats.bytes_reserved > ca->stats.peak_bytes_reserved)
    ca->stats.peak_bytes_reserved = ca->stats.bytes_reserved;
}

static void release_segment(ddp_caching_alloc_t *ca, block_t *b) {
  ca->raw.free(ca->raw.ctx, b->ptr);
  ca->stats.raw_free_calls++;
  ca->stats.bytes_reserved -= b->size;
  free(b);
}

size_t ddp_caching_alloc_trim(ddp_caching_alloc_t *ca) {
  size_t released = 0;
  block_t *b = ca->free_list;
  while (b) {
    block_t *next = b->free_next;
    if (!b->prev && !b->next) { /* the whole segment is one free block */
      free_list_unlink(ca, b);
      released += b->size;
      release_segment(ca, b);
    }
    b = next;
  }
  return released;
}

/* A new segment for a request of `rounded` bytes, as one free block. */
static ddp_status_t new_segment(ddp_caching_alloc_t *ca, size_t rounded, block_t **out) {
  const size_t seg = ddp_caching_alloc_segment_size(rounded);
  if (seg == 0) return DDP_ERR_OOM;
  block_t *b = calloc(1, sizeof *b);
  if (!b) DDP_FAIL(DDP_ERR_OOM, "caching allocator: out of host memory");
  void *p = NULL;
  ca->stats.raw_alloc_calls++;
  ddp_status_t st = ca->raw.alloc(ca->raw.ctx, seg, &p);
  if (st == DDP_ERR_OOM && ddp_caching_alloc_trim(ca) > 0) {
    ca->stats.oom_retries++;
    ca->stats.raw_alloc_calls++;
    st = ca->raw.alloc(ca->raw.ctx, seg, &p);
  }
  if (st != DDP_OK) {
    free(b);
    return st;
  }
  *b = (block_t){.ptr = p, .size = seg, .small = rounded <= DDP_CACHING_ALLOC_SMALL};
  note_reserved(ca, seg);
  free_list_push(ca, b);
  *out = b;
  return DDP_OK;
}

static block_t *best_fit(const ddp_caching_alloc_t *ca, size_t rounded) {
  block_t *best = NULL;
  for (block_t *b = ca->free_list; b; b = b->free_next)
    if (b->size >= rounded && (!best || b->size < best->size)) best = b;
  return best;
}

/* Cuts b down to `rounded` bytes when the rest is worth keeping; the rest
 * becomes a free block right after it. */
static ddp_status_t maybe_split(ddp_caching_alloc_t *ca, block_t *b, size_t rounded) {
  const size_t rest = b->size - rounded;
  const int worth = b->small ? rest >= DDP_CACHING_ALLOC_ROUND : rest > DDP_CACHING_ALLOC_SMALL;
  if (!worth) return DDP_OK;
  block_t *r = calloc(1, sizeof *r);
  if (!r) DDP_FAIL(DDP_ERR_OOM, "caching allocator: out of host memory");
  *r = (block_t){
      .ptr = b->ptr + rounded, .size = rest, .small = b->small, .prev = b, .next = b->next};
  if (b->next) b->next->prev = r;
  b->next = r;
  b->size = rounded;
  free_list_push(ca, r);
  return DDP_OK;
}

/* Absorbs b->next (free) into b. */
static void merge_next(ddp_caching_alloc_t *ca, block_t *b) {
  block_t *n = b->next;
  free_list_unlink(ca, n);
  b->size += n->size;
  b->next = n->next;
  if (n->next) n->next->prev = b;
  free(n);
}

ddp_status_t ddp_caching_alloc_malloc(ddp_caching_alloc_t *ca, size_t bytes, void **ptr) {
  *ptr = NULL;
  if (bytes == 0) return DDP_OK;
  const size_t rounded = ddp_caching_alloc_round(bytes);
  if (rounded == 0) return DDP_ERR_OOM;
  block_t *b = best_fit(ca, rounded);
  if (!b) DDP_CHECK(new_segment(ca, rounded, &b));
  free_list_unlink(ca, b);
  ddp_status_t st = maybe_split(ca, b, rounded);
  if (st == DDP_OK) st = slots_insert(ca, b);
  if (st != DDP_OK) { /* host bookkeeping failed: put the block back, whole */
    free_list_push(ca, b);
    if (b->next && !b->next->live) merge_next(ca, b);
    return st;
  }
  b->live = 1;
  b->requested = bytes;
  ca->stats.live_blocks++;
  ca->stats.bytes_in_use += b->size;
  if (ca->stats.bytes_in_use > ca->stats.peak_bytes_in_use)
    ca->stats.peak_bytes_in_use = ca->stats.bytes_in_use;
  *ptr = b->ptr;
  return DDP_OK;
}

size_t ddp_caching_alloc_free(ddp_caching_alloc_t *ca, void *ptr) {
  if (!ptr) return 0;
  block_t *b = slots_remove(ca, ptr);
  if (!b) return 0;
  const size_t requested = b->requested;
  ca->stats.live_blocks--;
  ca->stats.bytes_in_use -= b->size;
  b->live = 0;
  b->requested = 0;
  free_list_push(ca, b);
  if (b->next && !b->next->live) merge_next(ca, b);
  if (b->prev && !b->prev->live) merge_next(ca, b->prev);
  return requested;
}

ddp_status_t ddp_caching_alloc_create(const ddp_raw_alloc_t *raw, ddp_caching_alloc_t **out) {
  *out = NULL;
  if (!raw || !raw->alloc || !raw->free)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "caching allocator: no raw allocate/free pair");
  ddp_caching_alloc_t *ca = calloc(1, sizeof *ca);
  if (!ca) DDP_FAIL(DDP_ERR_OOM, "caching allocator: out of host memory");
  ca->raw = *raw;
  *out = ca;
  return DDP_OK;
}

void ddp_caching_alloc_destroy(ddp_caching_alloc_t *ca) {
  if (!ca) return;
  /* Free every live block (merging), then every segment is one free block.
   * A removal may shift a later entry to an earlier slot, hence the passes. */
  while (ca->n_live)
    for (size_t i = 0; i < ca->n_slots; ++i)
      if (ca->slots[i]) ddp_caching_alloc_free(ca, ca->slots[i]->ptr);
  ddp_caching_alloc_trim(ca);
  free(ca->slots);
  free(ca);
}

void ddp_caching_alloc_get_stats(const ddp_caching_alloc_t *ca, ddp_caching_alloc_stats_t *stats) {
  *stats = ca->stats;
}
