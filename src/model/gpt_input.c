/* Token staging for the model's forward: see gpt_input.h. */
#include "model/gpt_input.h"

#include <string.h>

#include "ddptrain/check.h"

enum { TOK_INPUTS = 0, TOK_TARGETS = 1, TOK_LENS = 2 };

ddp_status_t ddp_token_stager_init(ddp_token_stager_t *s, ddp_backend_t *be, int64_t capacity) {
  memset(s, 0, sizeof *s);
  s->capacity = capacity;
  const size_t bytes = (size_t)capacity * sizeof(int32_t);
  const size_t caps[3] = {bytes, bytes, bytes};
  DDP_CHECK(ddp_slot_stager_init(&s->st, be, 3, caps));
  for (int k = 0; k < 2; ++k) {
    const ddp_status_t st = be->ops->alloc_host(be, bytes, (void **)&s->lens_host[k]);
    if (st != DDP_OK) {
      ddp_token_stager_destroy(s);
      return st;
    }
  }
  return DDP_OK;
}

void ddp_token_stager_destroy(ddp_token_stager_t *s) {
  ddp_backend_t *be = s->st.be;
  if (!be) return;
  ddp_slot_stager_destroy(&s->st); /* waits for the copies out of lens_host */
  for (int k = 0; k < 2; ++k)
    if (s->lens_host[k]) be->ops->free_host(be, s->lens_host[k]);
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
  if (n < 1 || n > s->capacity)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "token stager: %lld tokens, capacity %lld", (long long)n,
             (long long)s->capacity);
  if (lens && (n_rows < 1 || n_rows > n))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "token stager: %lld row lengths for %lld tokens",
             (long long)n_rows, (long long)n);
  const int k = s->st.slot ^ 1; /* the slot this put fills */
  const int32_t *lens_src = NULL;
  if (lens) {
    /* the pinned copy is free: the last copy out of it (two puts back) was
     * waited for by that put's wait_copied */
    if (lens != s->lens_host[k]) memcpy(s->lens_host[k], lens, (size_t)n_rows * sizeof *lens);
    lens_src = s->lens_host[k];
  }
  const size_t bytes = (size_t)n * sizeof(int32_t);
  const void *const src[3] = {inputs, targets, lens_src};
  const size_t sizes[3] = {bytes, bytes, (size_t)n_rows * sizeof(int32_t)};
  void *dev[3];
  DDP_CHECK(ddp_slot_stager_put(&s->st, "token stager", src, sizes, dev));
  *dev_inputs = dev[TOK_INPUTS];
  if (dev_targets) *dev_targets = targets ? dev[TOK_TARGETS] : NULL;
  if (dev_lens) *dev_lens = lens ? dev[TOK_LENS] : NULL;
  return DDP_OK;
}

int32_t *ddp_token_stager_lens_host(ddp_token_stager_t *s) {
  return s->lens_host[s->st.slot ^ 1];
}

ddp_status_t ddp_token_stager_release(ddp_token_stager_t *s) {
  return ddp_slot_stager_release(&s->st);
}

ddp_status_t ddp_token_stager_wait_copied(ddp_token_stager_t *s) {
  return ddp_slot_stager_wait_copied(&s->st);
}
