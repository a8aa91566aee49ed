/* Batch staging for a model's forward: see slot_stager.h. */
#include <config.h>

#include "model/slot_stager.h"

#include <string.h>

#include "ddptrain/check.h"

ddp_status_t ddp_slot_stager_init(ddp_slot_stager_t *s, ddp_backend_t *be, int n_arrays,
                                  const size_t capacity[]) {
  memset(s, 0, sizeof *s);
  if (n_arrays < 1 || n_arrays > DDP_SLOT_STAGER_ARRAYS)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "slot stager: %d arrays (1 .. %d)", n_arrays,
             DDP_SLOT_STAGER_ARRAYS);
  s->be = be;
  s->n_arrays = n_arrays;
  s->slot = 1; /* the first put takes slot 0 */
  ddp_status_t st;
  DDP_CHECK_GOTO(be->ops->stream_create(be, &s->copy), st, fail);
  for (int k = 0; k < 2; ++k) {
    for (int a = 0; a < n_arrays; ++a) {
      s->capacity[a] = capacity[a];
      DDP_CHECK_GOTO(ddp_backend_alloc(be, capacity[a] ? capacity[a] : 1, &s->dev[k][a]), st,
                     fail);
    }
    DDP_CHECK_GOTO(be->ops->event_create(be, &s->ready[k]), st, fail);
    DDP_CHECK_GOTO(be->ops->event_create(be, &s->freed[k]), st, fail);
    /* "free" from the start: the first copy into a slot waits for nothing */
    DDP_CHECK_GOTO(be->ops->event_record(be, s->freed[k], NULL), st, fail);
  }
  return DDP_OK;
fail:
  ddp_slot_stager_destroy(s);
  return st;
}

void ddp_slot_stager_destroy(ddp_slot_stager_t *s) {
  ddp_backend_t *be = s->be;
  if (!be) return;
  if (s->copy) be->ops->synchronize(be, s->copy);
  for (int k = 0; k < 2; ++k) {
    if (s->ready[k]) be->ops->event_destroy(be, s->ready[k]);
    if (s->freed[k]) be->ops->event_destroy(be, s->freed[k]);
    for (int a = 0; a < s->n_arrays; ++a) ddp_backend_free(be, s->dev[k][a]);
  }
  if (s->copy) be->ops->stream_destroy(be, s->copy);
  memset(s, 0, sizeof *s);
}

ddp_status_t ddp_slot_stager_put(ddp_slot_stager_t *s, const char *what, const void *const src[],
                                 const size_t bytes[], void *dev[]) {
  ddp_backend_t *be = s->be;
  for (int a = 0; a < s->n_arrays; ++a)
    if (src[a] && bytes[a] > s->capacity[a])
      DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: %zu bytes for a slot of %zu", what, bytes[a],
               s->capacity[a]);
  const int k = s->slot ^ 1;
  /* the copy stream may overwrite slot k once the compute stream is done
   * with it; the compute stream reads it once the copy is done */
  DDP_CHECK(be->ops->stream_wait_event(be, s->copy, s->freed[k]));
  for (int a = 0; a < s->n_arrays; ++a)
    if (src[a] && bytes[a])
      DDP_CHECK(ddp_backend_copy(be, s->dev[k][a], src[a], bytes[a], DDP_COPY_KIND_HOST_TO_DEVICE,
                                 s->copy));
  DDP_CHECK(be->ops->event_record(be, s->ready[k], s->copy));
  DDP_CHECK(be->ops->stream_wait_event(be, NULL, s->ready[k]));
  s->slot = k;
  if (dev)
    for (int a = 0; a < s->n_arrays; ++a) dev[a] = s->dev[k][a];
  return DDP_OK;
}

ddp_status_t ddp_slot_stager_release(ddp_slot_stager_t *s) {
  return s->be->ops->event_record(s->be, s->freed[s->slot], NULL);
}

ddp_status_t ddp_slot_stager_wait_copied(ddp_slot_stager_t *s) {
  return s->be->ops->event_synchronize(s->be, s->ready[s->slot]);
}
