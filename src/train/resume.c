/* --resume (see resume.h). Rank 0 reads the checkpoint and broadcasts it,
 * so the checkpoint directory need only be visible to rank 0 (the rank that
 * writes it), and the ranks cannot load two different files. */
#include "train/resume.h"

#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/model.h"

/* Flags whose change makes a checkpoint unusable: the runtime's own fix
 * which model it is, the optimizer's state and the data the sampler
 * position counts in (--data, or the built-in set's --tasks; for token
 * models --seq-len too: it cuts the windows); the model adds the flags that fix its tensors
 * (ddp_model_ops_t.ckpt_keys). A difference is an error; any other is a
 * warning (a new --lr or --steps is a legitimate choice, though the run is
 * then no longer the uninterrupted one). */
static const char *const k_structural[] = {"model", "data", "tasks", "optimizer", NULL};
/* Flags that are expected to change from one leg of a run to the next. */
static const char *const k_run_control[] = {"resume",         "stop-at", "save-every",
                                            "detect-anomaly", "zero",    NULL};

static int listed(const char *const *list, const char *name) {
  for (int i = 0; list[i]; ++i)
    if (strcmp(list[i], name) == 0) return 1;
  return 0;
}

static ddp_status_t check_config(const ddp_ckpt_t *ck, const char *path,
                                 const ddp_options_t *opts) {
  char now[1100];
  for (int i = 0; i < ddp_options_count(); ++i) {
    const char *name = ddp_options_name(i);
    if (!ddp_options_must_agree(i) || !ddp_options_applies(opts, i) || listed(k_run_control, name))
      continue;
    const char *then = ddp_ckpt_config_value(ck, name);
    if (ddp_options_format(opts, i, now, sizeof now) != 0 || !then || strcmp(then, now) == 0)
      continue;
    const ddp_model_ops_t *model = ddp_model_find(opts->model);
    const int tokens = model && model->batch_kind == DDP_BATCH_TOKENS;
    if (listed(k_structural, name) || (tokens && strcmp(name, "seq-len") == 0) ||
        (model && model->ckpt_keys && listed(model->ckpt_keys, name)))
      DDP_FAIL(DDP_ERR_MISMATCH,
               "cannot resume from %s: --%s is '%s' there and '%s' now (it shapes the model, "
               "its optimizer state or the data)",
               path, name, then, now);
    DDP_LOG_WARN("resume: --%s is '%s' now, '%s' in the run that wrote %s", name, now, then, path);
  }
  return DDP_OK;
}

/* Rank 0: the newest valid checkpoint of dir, opened, or *ck = NULL. */
static ddp_status_t pick(const char *dir, ddp_ckpt_t **ck, char *path, size_t len, int *any) {
  int64_t *steps = NULL;
  int n = 0;
  *ck = NULL;
  DDP_CHECK(ddp_ckpt_list(dir, &steps, &n));
  *any = n > 0;
  for (int i = 0; i < n && !*ck; ++i) {
    if (ddp_ckpt_path(path, len, dir, steps[i]) != DDP_OK) continue;
    if (ddp_ckpt_open(path, ck) != DDP_OK)
      DDP_LOG_WARN("resume: %s is corrupt or unreadable (see above); skipping it", path);
  }
  free(steps);
  return DDP_OK;
}

/* Rank 0's part: *found, the state in host memory (img) and its metadata. */
static ddp_status_t load_rank0(const ddp_options_t *opts, const char *dir, int missing_ok,
                               ddp_ckpt_image_t *img, int *found) {
  char path[1100];
  ddp_ckpt_t *ck = NULL;
  int any = 0;
  *found = 0;
  DDP_CHECK(pick(dir, &ck, path, sizeof path, &any));
  if (!ck) {
    if (!any && missing_ok) {
      DDP_LOG_INFO("resume: no checkpoint in %s yet; starting from step 0", dir);
      return DDP_OK;
    }
    DDP_FAIL(DDP_ERR_IO, "resume: %s holds no %scheckpoint", dir, any ? "valid " : "");
  }
  ddp_status_t st = check_config(ck, path, opts);
  if (st == DDP_OK) st = ddp_ckpt_load(ck, img);
  if (st == DDP_OK) {
    *found = 1;
    DDP_LOG_INFO("resume: loaded %s (step %lld)", path, (long long)img->meta.step);
  }
  ddp_ckpt_close(ck);
  return st;
}

static ddp_status_t bcast(ddp_comm_t *comm, void *buf, size_t bytes) {
  ddp_comm_handle_t h;
  DDP_CHECK(ddp_comm_broadcast(comm, buf, bytes, 0, NULL, &h));
  return ddp_comm_wait(comm, h);
}

ddp_status_t ddp_train_resume(const ddp_options_t *opts, const ddp_dist_t *dist, ddp_comm_t *comm,
                              ddp_backend_t *be, const char *dir, int missing_ok,
                              const ddp_ckpt_image_t *layout, float *params, float *state,
                              float *buffers, ddp_ckpt_meta_t *meta, int *found) {
  const size_t n = layout->n_params, state_n = n * (size_t)layout->n_slots;
  const size_t buf_n = layout->n_buffer_floats;
  ddp_ckpt_image_t img = *layout;
  int32_t hdr[2] = {DDP_OK, 0}; /* status, found */
  ddp_status_t st = DDP_OK;
  img.params = NULL;
  if (dist->rank == 0) {
    img.params = malloc((n + state_n + buf_n) * sizeof(float));
    if (img.params) {
      img.state = img.params + n;
      img.buffers = buf_n ? img.state + state_n : NULL;
      st = load_rank0(opts, dir, missing_ok, &img, found);
    } else {
      st = DDP_ERR_OOM;
      DDP_LOG_ERROR("resume: no host memory for the checkpoint (%zu floats)", n + state_n + buf_n);
    }
    hdr[0] = st;
    hdr[1] = st == DDP_OK && *found;
  }
  /* Every rank learns rank 0's outcome first, so none waits for tensors
   * that will not come. */
  if (dist->world > 1) DDP_CHECK_GOTO(bcast(comm, hdr, sizeof hdr), st, out);
  if (hdr[0] != DDP_OK) {
    if (dist->rank != 0)
      DDP_LOG_ERROR("resume: rank 0 could not load a checkpoint (see its error)");
    st = (ddp_status_t)hdr[0];
    goto out;
  }
  *found = hdr[1];
  if (!*found) goto out;
  if (dist->rank == 0) {
    DDP_CHECK_GOTO(ddp_backend_copy(be, params, img.params, n * sizeof(float),
                                    DDP_COPY_KIND_HOST_TO_DEVICE, NULL),
                   st, out);
    if (state_n)
      DDP_CHECK_GOTO(ddp_backend_copy(be, state, img.state, state_n * sizeof(float),
                                      DDP_COPY_KIND_HOST_TO_DEVICE, NULL),
                     st, out);
    if (buf_n)
      DDP_CHECK_GOTO(ddp_backend_copy(be, buffers, img.buffers, buf_n * sizeof(float),
                                      DDP_COPY_KIND_HOST_TO_DEVICE, NULL),
                     st, out);
    DDP_CHECK_GOTO(ddp_backend_sync(be, NULL), st, out);
    *meta = img.meta;
  }
  if (dist->world > 1) {
    DDP_CHECK_GOTO(bcast(comm, meta, sizeof *meta), st, out);
    DDP_CHECK_GOTO(bcast(comm, params, n * sizeof(float)), st, out);
    if (state_n) DDP_CHECK_GOTO(bcast(comm, state, state_n * sizeof(float)), st, out);
    if (buf_n) DDP_CHECK_GOTO(bcast(comm, buffers, buf_n * sizeof(float)), st, out);
  }
out:
  free(img.params);
  return st;
}
