/* Recorded training passes replayed as device graphs: see graph_replay.h. */
#include <config.h>

#include "model/graph_replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/log.h"

typedef struct hook_call {
  size_t offset, count;
} hook_call_t;

/* A recorded graph and the hooks the body called after its work, before
 * the next segment's: hooks[first .. first + n). */
typedef struct segment {
  ddp_graph_t graph;
  int first, n;
} segment_t;

typedef struct entry {
  unsigned char key[DDP_GRAPH_REPLAY_KEY_BYTES];
  size_t key_len;
  int used;
  int seen; /* its first pass ran eagerly */
  segment_t *segs;
  int n_segs, cap_segs;
  hook_call_t *hooks;
  int n_hooks, cap_hooks;
} entry_t;

struct ddp_graph_replay {
  ddp_backend_t *be;
  entry_t entries[DDP_GRAPH_REPLAY_KEYS];
  ddp_graph_replay_stats_t stats;
  int (*cut)(void *ctx, size_t offset, size_t count); /* NULL: at every hook */
  void *cut_ctx;
  /* while recording */
  entry_t *rec;
  ddp_status_t rec_status; /* the first failure of this recording */
  int rec_lost;            /* a new segment could not be started: work ran for real */
};

static void entry_clear(ddp_backend_t *be, entry_t *e) {
  for (int i = 0; i < e->n_segs; ++i) be->ops->graph_destroy(be, e->segs[i].graph);
  free(e->segs);
  free(e->hooks);
  *e = (entry_t){0};
}

ddp_status_t ddp_graph_replay_create(ddp_backend_t *be, ddp_graph_replay_t **out) {
  *out = NULL;
  if (!be || !be->ops->graph_begin || !be->ops->graph_end || !be->ops->graph_launch ||
      !be->ops->graph_destroy)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "graph replay: the %s backend cannot record graphs",
             be ? be->ops->name : "(no)");
  ddp_graph_replay_t *rp = calloc(1, sizeof *rp);
  if (!rp) DDP_FAIL(DDP_ERR_OOM, "graph replay: out of host memory");
  rp->be = be;
  *out = rp;
  return DDP_OK;
}

void ddp_graph_replay_destroy(ddp_graph_replay_t *rp) {
  if (!rp) return;
  for (int i = 0; i < DDP_GRAPH_REPLAY_KEYS; ++i) entry_clear(rp->be, &rp->entries[i]);
  free(rp);
}

void ddp_graph_replay_set_cuts(ddp_graph_replay_t *rp,
                               int (*cut)(void *ctx, size_t offset, size_t count), void *ctx) {
  rp->cut = cut;
  rp->cut_ctx = ctx;
}

void ddp_graph_replay_get_stats(const ddp_graph_replay_t *rp, ddp_graph_replay_stats_t *out) {
  *out = rp ? rp->stats : (ddp_graph_replay_stats_t){0};
}

static int grow(void **p, int *cap, int need, size_t elem) {
  if (need <= *cap) return 1;
  int c = *cap ? *cap * 2 : 64;
  while (c < need) c *= 2;
  void *q = realloc(*p, (size_t)c * elem);
  if (!q) return 0;
  *p = q;
  *cap = c;
  return 1;
}

/* Ends the segment being recorded; its hooks are those kept since the
 * previous segment ended. */
static void close_segment(ddp_graph_replay_t *rp) {
  entry_t *e = rp->rec;
  ddp_graph_t g = NULL;
  const ddp_status_t st = rp->be->ops->graph_end(rp->be, &g);
  if (st != DDP_OK) {
    if (rp->rec_status == DDP_OK) rp->rec_status = st;
    return;
  }
  if (!grow((void **)&e->segs, &e->cap_segs, e->n_segs + 1, sizeof *e->segs)) {
    rp->be->ops->graph_destroy(rp->be, g);
    if (rp->rec_status == DDP_OK) rp->rec_status = DDP_ERR_OOM;
    return;
  }
  const int first = e->n_segs ? e->segs[e->n_segs - 1].first + e->segs[e->n_segs - 1].n : 0;
  e->segs[e->n_segs++] = (segment_t){.graph = g, .first = first, .n = e->n_hooks - first};
}

/* The model's gradient hook while recording: keep the call, cut the
 * recording there, and go on recording (so the body's later work is
 * recorded too, never run, even after a failure). */
static void recording_hook(void *ctx, size_t offset, size_t count) {
  ddp_graph_replay_t *rp = ctx;
  entry_t *e = rp->rec;
  if (!grow((void **)&e->hooks, &e->cap_hooks, e->n_hooks + 1, sizeof *e->hooks)) {
    if (rp->rec_status == DDP_OK) rp->rec_status = DDP_ERR_OOM;
  } else {
    e->hooks[e->n_hooks++] = (hook_call_t){offset, count};
  }
  if (rp->cut && !rp->cut(rp->cut_ctx, offset, count)) return; /* its hook waits for the next cut */
  close_segment(rp);
  if (rp->be->ops->graph_begin(rp->be) != DDP_OK) rp->rec_lost = 1;
}

static ddp_status_t replay(ddp_graph_replay_t *rp, ddp_model_t *m, const entry_t *e) {
  for (int i = 0; i < e->n_segs; ++i) {
    DDP_CHECK(rp->be->ops->graph_launch(rp->be, e->segs[i].graph));
    for (int k = 0; k < e->segs[i].n; ++k) {
      const hook_call_t *h = &e->hooks[e->segs[i].first + k];
      if (m->grad_ready_fn) m->grad_ready_fn(m->grad_ready_ctx, h->offset, h->count);
    }
  }
  rp->stats.replays++;
  return DDP_OK;
}

static ddp_status_t switch_off(ddp_graph_replay_t *rp, const char *why) {
  rp->stats.off = 1;
  snprintf(rp->stats.why, sizeof rp->stats.why, "%s", why);
  DDP_LOG_WARN("CUDA graphs off for the rest of the run: %s; the passes run kernel by kernel", why);
  return DDP_ERR_UNSUPPORTED;
}

/* Records body into e. On failure nothing has run; e is left empty. */
static ddp_status_t record(ddp_graph_replay_t *rp, ddp_model_t *m, entry_t *e,
                           ddp_status_t (*body)(ddp_model_t *m, void *ctx), void *ctx) {
  ddp_backend_t *be = rp->be;
  void (*hook)(void *, size_t, size_t) = m->grad_ready_fn;
  void *hook_ctx = m->grad_ready_ctx;
  const uint64_t allocs0 = be->alloc_calls;
  rp->rec = e;
  rp->rec_status = DDP_OK;
  rp->rec_lost = 0;
  if (be->ops->graph_begin(be) != DDP_OK) return switch_off(rp, "a recording could not start");
  m->grad_ready_fn = recording_hook;
  m->grad_ready_ctx = rp;
  const ddp_status_t st = body(m, ctx);
  m->grad_ready_fn = hook;
  m->grad_ready_ctx = hook_ctx;
  if (!rp->rec_lost) close_segment(rp);
  rp->rec = NULL;
  if (rp->rec_lost) {
    entry_clear(be, e);
    DDP_FAIL(DDP_ERR_INTERNAL,
             "graph replay: a recording could not be resumed after a gradient hook, so part of "
             "a training pass ran outside it; the step cannot be trusted");
  }
  const char *why = NULL;
  if (st != DDP_OK)
    why = "the pass failed while it was recorded (the error above)";
  else if (rp->rec_status != DDP_OK)
    why = "the recording failed (the error above)";
  else if (be->alloc_calls != allocs0)
    why = "the pass allocated device memory while it was recorded";
  if (why) {
    entry_clear(be, e);
    return switch_off(rp, why);
  }
  rp->stats.recordings++;
  rp->stats.segments += e->n_segs;
  return DDP_OK;
}

static entry_t *find(ddp_graph_replay_t *rp, const void *key, size_t key_len) {
  entry_t *free_slot = NULL;
  for (int i = 0; i < DDP_GRAPH_REPLAY_KEYS; ++i) {
    entry_t *e = &rp->entries[i];
    if (e->used && e->key_len == key_len && memcmp(e->key, key, key_len) == 0) return e;
    if (!e->used && !free_slot) free_slot = e;
  }
  if (free_slot) {
    free_slot->used = 1;
    free_slot->key_len = key_len;
    memcpy(free_slot->key, key, key_len);
  }
  return free_slot;
}

ddp_status_t ddp_graph_replay_run(ddp_graph_replay_t *rp, ddp_model_t *m, const void *key,
                                  size_t key_len, ddp_status_t (*body)(ddp_model_t *m, void *ctx),
                                  void *ctx) {
  if (!rp || rp->stats.off) return body(m, ctx);
  if (key_len > DDP_GRAPH_REPLAY_KEY_BYTES)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "graph replay: a key of %zu bytes (at most %d)", key_len,
             DDP_GRAPH_REPLAY_KEY_BYTES);
  entry_t *e = find(rp, key, key_len);
  if (e && e->n_segs > 0) return replay(rp, m, e);
  if (!e || !e->seen) {
    if (e) e->seen = 1;
    rp->stats.eager++;
    return body(m, ctx);
  }
  const ddp_status_t st = record(rp, m, e, body, ctx);
  if (st == DDP_ERR_UNSUPPORTED) {
    rp->stats.eager++;
    return body(m, ctx);
  }
  DDP_CHECK(st);
  return replay(rp, m, e);
}
