/* Recorded training passes replayed as device graphs (internal; the CUDA
 * backend's graph ops, ddptrain/backend.h).
 *
 * A model's forward-backward issues the same kernels, with the same
 * arguments and pointers, whenever the host-side values it depends on are
 * the same: the batch's size and device slot, dloss, accumulate, notify. The
 * model passes those bytes as a key, and its device work as a body. The
 * first pass of a key runs eagerly (it settles whatever a first pass sets
 * up: cuDNN's algorithm search, lazily built plans); the second is
 * recorded and from then on every pass of that key is one graph launch per
 * segment instead of some 500 kernel launches and 160 cuDNN calls.
 *
 * The gradient hook (ddp_model_grad_ready) is where the runtime starts a
 * bucket's all-reduce: it must run on the host, after the work that made
 * the gradient, and may enqueue work of its own on other streams. So a
 * recording is cut into segments at every hook call: each hook's arguments
 * are kept, and a replay launches segment i, then calls the hooks that
 * followed it, for real, in the same order, then segment i + 1. A hook
 * called later than its gradient's work is still correct (its work is
 * enqueued before), it only starts its collective later: a cut filter
 * (ddp_graph_replay_set_cuts) keeps the cuts to the hooks that may start
 * one, so a step is a few graphs, not one per tensor. Nothing is
 * run while recording, so a recording that fails (a call that cannot be
 * recorded, an allocation inside the pass) leaves no trace: replay is
 * switched off with a warning naming why, and the pass runs eagerly.
 *
 * What a model promises by using it: the body's device work depends only
 * on the key's bytes and on device memory, and the body neither reads
 * device memory on the host nor waits for the device. */
#ifndef DDPTRAIN_GRAPH_REPLAY_H
#define DDPTRAIN_GRAPH_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/model.h"

typedef struct ddp_graph_replay ddp_graph_replay_t;

/* What replay did, for the run's summary. */
typedef struct ddp_graph_replay_stats {
  int64_t replays;    /* passes launched as recorded graphs */
  int64_t recordings; /* keys recorded */
  int64_t segments;   /* graphs over all recordings */
  int64_t eager;      /* passes run kernel by kernel (first of a key, cache full) */
  int off;            /* replay switched off after a failed recording */
  char why[256];      /* why it was switched off */
} ddp_graph_replay_stats_t;

/* NULL-free: be must have the graph ops (graph_begin != NULL). */
ddp_status_t ddp_graph_replay_create(ddp_backend_t *be, ddp_graph_replay_t **out);
void ddp_graph_replay_destroy(ddp_graph_replay_t *rp);

/* The most distinct keys kept (the loader's slots x the kinds of micro-step);
 * a pass of a further key runs eagerly. */
#define DDP_GRAPH_REPLAY_KEYS 8
/* The longest key, in bytes. */
#define DDP_GRAPH_REPLAY_KEY_BYTES 64

/* Runs body(m, ctx) eagerly, or records it, or replays its recording, as
 * described above. m's grad_ready hook is called as the body calls it in an
 * eager pass. A body's error is returned as it is. */
ddp_status_t ddp_graph_replay_run(ddp_graph_replay_t *rp, ddp_model_t *m, const void *key,
                                  size_t key_len, ddp_status_t (*body)(ddp_model_t *m, void *ctx),
                                  void *ctx);

/* Cut recordings only at the hooks for which cut(ctx, offset, count) is
 * nonzero (the trainer: where a gradient bucket completes); without a
 * filter, at every hook. Applies to recordings made after the call. */
void ddp_graph_replay_set_cuts(ddp_graph_replay_t *rp,
                               int (*cut)(void *ctx, size_t offset, size_t count), void *ctx);

void ddp_graph_replay_get_stats(const ddp_graph_replay_t *rp, ddp_graph_replay_stats_t *out);

#endif
