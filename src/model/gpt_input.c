/* Token staging for the model's forward: see gpt_input.h. */
#include "model/gpt_input.h"

#include <string.h>

#include "ddptrain/check.h"

ddp_status_t ddp_token_stager_init(ddp_token_stager_t *s, ddp_backend_t *be, int64_t capacity) {
  memset(s, 0, sizeof *s);
  s->be = be;
  s->capacity = capacity;
  s->slot = 1; /* the first put takes slot 0 */
  const size_t bytes = (size_t)capacity * sizeof(int32_t);
  DDP_CHECK(be->ops->stream_create(be, &s->copy));
  for (int k = 0; k < 2; ++k) {
    DDP_CHECK(ddp_backend_alloc(be, bytes, (void **)&s->inputs[k]));
    DDP_CHECK(ddp_backend_alloc(be, bytes, (void **)&s->targets[k]));
    DDP_CHECK(ddp_backend_alloc(be, bytes, (void **)&s->lens[k]));
    DDP_CHECK(be->ops->alloc_host(be, bytes, (void **)&s->lens_host[k]));
    DDP_CHECK(be->ops->event_create(be, &s->ready[k]));
    DDP_CHECK(be->ops->event_create(be, &s->freed[k]));
    /* "free" from the start: the first copy into a slot waits for nothing */
    DDP_CHECK(be->ops->event_record(be, s->freed[k], NULL));
  }
  return DDP_OK;
}

void ddp_token_stager_destroy(ddp_token_stager_t *s) {
  ddp_backend_t *be = s->be;
  if (!be) return;
  if (s->copy) be->ops->synchronize(be, s->copy);
  for (int k = 0; k < 2; ++k) {
    if (s->ready[k]) be->ops->event_destroy(be, s->ready[k]);
    if (s->freed[k]) be->ops->event_destroy(be, s->freed[k]);
    ddp_backend_free(be, s->inputs[k]);
    ddp_backend_free(be, s->targets[k]);
    ddp_backend_free(be, s->lens[k]);
    if (s->lens_host[k]) be->ops->free_host(be, s->lens_host[k]);
  }
  if (s->copy) be->ops->stream_destroy(be, s->copy);
  memset(s, 0, sizeof *s);
}

ddp_status_t ddp_token_stager_put(ddp_token_stager_t *s, const int32_t *inputs,
                                  const int32_t *targets, int64_t n, int32_t **dev_inputs,
                                  int32_t **dev_targets) {
  return ddp_token_stager_put_rows(s, inputs, targets, n, NULL, 0, dev_inputs, dev_targets, NULL);
}

ddp_status_t ddp_token_stager_put_rows(ddp_token_stager_t *s, const int32_t *inputs,
                                       const int32_t *targets, int64_t n, const int32_t *lens,
                                       int64_t n_rows, int32_t **dev_inputs, int32_t **dev_targets,
                                       int32_t **dev_lens) {
  ddp_backend_t *be = s->be;
  if (n < 1 || n > s->capacity)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "token stager: %lld tokens, capacity %lld", (long long)n,
             (long long)s->capacity);
  if (lens && (n_rows < 1 || n_rows > n))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "token stager: %lld row lengths for %lld tokens",
             (long long)n_rows, (long long)n);
  const int k = s->slot ^ 1;
  const size_t bytes = (size_t)n * sizeof(int32_t);
  /* the copy stream may overwrite slot k once the compute stream is done
   * with it; the compute stream reads it once the copy is done */
  DDP_CHECK(be->ops->stream_wait_event(be, s->copy, s->freed[k]));
  DDP_CHECK(
      ddp_backend_copy(be, s->inputs[k], inputs, bytes, DDP_COPY_KIND_HOST_TO_DEVICE, s->copy));
  if (targets)
    DDP_CHECK(
        ddp_backend_copy(be, s->targets[k], targets, bytes, DDP_COPY_KIND_HOST_TO_DEVICE, s->copy));
  if (lens) {
    /* the pinned copy is free: the last copy out of it (two puts back) was
     * waited for by that put's wait_copied */
    if (lens != s->lens_host[k]) memcpy(s->lens_host[k], lens, (size_t)n_rows * sizeof *lens);
    DDP_CHECK(ddp_backend_copy(be, s->lens[k], s->lens_host[k], (size_t)n_rows * sizeof *lens,
                               DDP_COPY_KIND_HOST_TO_DEVICE, s->copy));
  }
  DDP_CHECK(be->ops->event_record(be, s->ready[k], s->copy));
  DDP_CHECK(be->ops->stream_wait_event(be, NULL, s->ready[k]));
  s->slot = k;
  *dev_inputs = s->inputs[k];
  if (dev_targets) *dev_targets = targets ? s->targets[k] : NULL;
  if (dev_lens) *dev_lens = lens ? s->lens[k] : NULL;
  return DDP_OK;
}

int32_t *ddp_token_stager_lens_host(ddp_token_stager_t *s) {
  return s->lens_host[s->slot ^ 1];
}

ddp_status_t ddp_token_stager_release(ddp_token_stager_t *s) {
  return s->be->ops->event_record(s->be, s->freed[s->slot], NULL);
}

ddp_status_t ddp_token_stager_wait_copied(ddp_token_stager_t *s) {
  return s->be->ops->event_synchronize(s->be, s->ready[s->slot]);
}
