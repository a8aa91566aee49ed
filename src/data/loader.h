/* A background batch loader: a producer thread fills a ring of staging slots
 * ahead of the step loop, so training waits for data only when producing is
 * truly slower than training.
 *
 * The loader knows nothing about what a slot holds. The caller supplies
 * callbacks that allocate a slot's buffers once (pinned host memory on CUDA,
 * plain memory on the CPU), fill a slot with the item of a given sequence
 * number, and free it. Items are this rank's micro-batches numbered
 * seq = first_seq, first_seq + 1, ... in consumption order; the producer
 * fills them strictly in that order.
 *
 * Holding slots. acquire() hands out a slot and release() gives it back; in
 * between the consumer owns it. That split exists for CUDA: the consumer will
 * enqueue an asynchronous host-to-device copy from the pinned slot on a copy
 * stream and release the slot only once an event says the copy finished, by
 * which time it has acquired the next item or two. So up to `depth` slots may
 * be held at once (acquire the next while holding depth - 1); slots are
 * released in the order they were acquired, which is what a FIFO of copy
 * events gives naturally and what lets the ring stay a ring. Releasing out of
 * order, or acquiring while holding all `depth` slots (which could never be
 * satisfied), is an error, never a hang.
 *
 * Errors. A failing fill() logs its own error (it knows what went wrong); the
 * loader keeps the status and returns it from the acquire() of that seq — not
 * earlier, since the items before it are good, and not lost. The producer
 * then stops; acquiring that seq again returns the same status until stop().
 *
 * Threads. acquire(), release(), start(), stop() and destroy() are called
 * from one consumer thread (the step loop); fill() runs on the loader thread
 * and must not touch state the consumer uses, other than its own item.
 * get_stats() and reset_stats() may be called from any thread.
 *
 * Memory. create() allocates every slot; start() creates the producer thread
 * (its stack is the only allocation after create, once per start, not per
 * item); acquire/release never allocate. */
#ifndef DDPTRAIN_LOADER_H
#define DDPTRAIN_LOADER_H

#include <stdint.h>

#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_loader ddp_loader_t;

typedef struct ddp_loader_config {
  int depth; /* slots in the ring, >= 2 (one being consumed, one being filled) */
  /* Nonzero: no thread; acquire() calls fill() inline on the consumer's
   * thread. For debugging (fill errors and crashes show on the step loop's
   * stack) and as the deterministic baseline in tests. Named so that a
   * zero-initialised config gets the normal, threaded loader. */
  int synchronous;
  void *ctx; /* passed to every callback */
  /* Allocates one slot's buffers into *item (non-NULL, distinct per slot).
   * Called depth times from create(), slot = 0 .. depth - 1. Required. */
  ddp_status_t (*slot_init)(void *ctx, int slot, void **item);
  /* Frees what slot_init made; called once per initialised slot from
   * destroy(). Optional (NULL when the items are owned elsewhere). */
  void (*slot_destroy)(void *ctx, int slot, void *item);
  /* Writes item seq into `item`. Runs on the loader thread (on the consumer's
   * in synchronous mode); logs its own error before returning one. Required. */
  ddp_status_t (*fill)(void *ctx, int64_t seq, void *item);
} ddp_loader_config_t;

/* Validates the config (depth >= 2, slot_init and fill set), allocates all
 * slots and starts nothing. On failure *out is NULL and every slot already
 * initialised has been destroyed. */
ddp_status_t ddp_loader_create(const ddp_loader_config_t *cfg, ddp_loader_t **out);

/* Starts producing items first_seq .. end_seq - 1 in order (end_seq < 0:
 * unbounded). The loader must be stopped (fresh, or after stop()); restarting
 * at another position is how eval passes and resumes work. */
ddp_status_t ddp_loader_start(ddp_loader_t *l, int64_t first_seq, int64_t end_seq);

/* Waits until item seq is filled and hands out its slot in *item. seq must be
 * the next one not yet acquired. Errors: the fill's own status when fill()
 * failed for seq (already logged by fill); DDP_ERR_INVALID_ARG, logged, for
 * seq out of order or at/past end_seq, a loader not started, or all depth
 * slots already held. */
ddp_status_t ddp_loader_acquire(ddp_loader_t *l, int64_t seq, void **item);

/* Gives the oldest held slot back for refilling; `item` must be that slot's
 * pointer (release order = acquire order). On CUDA, call it only after the
 * copy from the slot has finished: the loader cannot see device reads. */
ddp_status_t ddp_loader_release(ddp_loader_t *l, void *item);

/* Stops and joins the producer — also when it is waiting for a free slot or
 * the consumer holds slots — and drops every filled item. A fill() in
 * progress is not interrupted: stop() returns after it ends. Held slots are
 * taken back (do not release them afterwards), so the consumer must make sure
 * nothing still reads them (synchronize copies) before the next start().
 * Stopping a stopped loader is a no-op. */
ddp_status_t ddp_loader_stop(ddp_loader_t *l);

/* stop() + slot_destroy() for every slot + free. Safe on NULL. */
void ddp_loader_destroy(ddp_loader_t *l);

typedef struct ddp_loader_stats {
  double wait_ms;   /* total time acquire() blocked waiting for a fill (in
                       synchronous mode: the inline fills, the same cost) */
  int64_t waits;    /* acquires that had to block */
  int64_t acquired; /* successful acquires */
  double fill_ms;   /* time spent inside fill() */
} ddp_loader_stats_t;

/* Counters since create() or the last reset_stats(); start/stop keep them. */
void ddp_loader_get_stats(const ddp_loader_t *l, ddp_loader_stats_t *s);
void ddp_loader_reset_stats(ddp_loader_t *l);

#ifdef __cplusplus
}
#endif
#endif
