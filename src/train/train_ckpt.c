/* The trainer's checkpoint schedule (see train_ckpt.h). */
#include "train/train_ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "core/clock.h"
#include "train/resume.h"
#include "train/zero.h"

static ddp_status_t make_layout(ddp_train_ckpt_t *tc, const ddp_optim_config_t *ocfg) {
  tc->config = ddp_ckpt_config_json(tc->o);
  if (!tc->config) DDP_FAIL(DDP_ERR_OOM, "checkpoint: out of host memory");
  const char *const *slots = NULL;
  int n_slots = ddp_ckpt_slot_names(ddp_optim_kind_name(ocfg->kind), &slots);
  if ((size_t)n_slots != ddp_optim_state_per_param(ocfg))
    DDP_FAIL(DDP_ERR_INTERNAL, "checkpoint: %s keeps %zu state slots, the format names %d",
             ddp_optim_kind_name(ocfg->kind), ddp_optim_state_per_param(ocfg), n_slots);
  tc->layout = (ddp_ckpt_image_t){.tensors = tc->model->tensors,
                                  .n_tensors = tc->model->n_tensors,
                                  .n_params = tc->model->n_params,
                                  .buffer_tensors = tc->model->buffer_tensors,
                                  .n_buffer_tensors = tc->model->n_buffer_tensors,
                                  .n_buffer_floats = tc->model->n_buffer_floats,
                                  .n_slots = n_slots,
                                  .slot_names = slots,
                                  .config = tc->config};
  ddp_ckpt_meta_t *m = &tc->layout.meta;
  m->world = tc->dist->world;
  m->accum = (int)tc->o->accum;
  m->seed = (uint64_t)tc->o->seed;
  snprintf(m->optimizer, sizeof m->optimizer, "%s", ddp_optim_kind_name(ocfg->kind));
  m->adam_eps = ocfg->eps;
  snprintf(m->sampler, sizeof m->sampler, "%s", tc->o->sampler);
  return DDP_OK;
}

static ddp_status_t resume(ddp_train_ckpt_t *tc, ddp_comm_t *comm, int64_t *start_step,
                           ddp_ckpt_scaler_t *scaler, int *resumed) {
  const ddp_options_t *o = tc->o;
  const int automatic = strcmp(o->resume, "auto") == 0;
  ddp_ckpt_meta_t meta = {0};
  int found = 0;
  DDP_CHECK(ddp_train_resume(o, tc->dist, comm, tc->be, automatic ? o->save : o->resume, automatic,
                             &tc->layout, tc->model->params, tc->state, tc->model->buffers, &meta,
                             &found));
  if (!found) return DDP_OK;
  *resumed = 1;
  *start_step = meta.step;
  *scaler = meta.scaler;
  tc->last_saved = meta.step;
  if (meta.world != tc->dist->world || meta.accum != o->accum)
    DDP_LOG_INFO(
        "resume: the checkpoint comes from %d rank%s x accum %d, this run has %d x %lld: the "
        "data continues at global step %lld of this run's sampler plan (same seed and epoch "
        "order; each step's micro-batches are dealt for the new world size)",
        meta.world, meta.world == 1 ? "" : "s", meta.accum, tc->dist->world, (long long)o->accum,
        (long long)meta.step);
  return DDP_OK;
}

ddp_status_t ddp_train_ckpt_init(ddp_train_ckpt_t *tc, const ddp_options_t *o,
                                 const ddp_dist_t *dist, ddp_comm_t *comm, ddp_backend_t *be,
                                 ddp_model_t *model, ddp_train_buffers_t *buffers, float *state,
                                 const ddp_optim_config_t *ocfg, int64_t *start_step,
                                 ddp_ckpt_scaler_t *scaler) {
  *tc = (ddp_train_ckpt_t){.o = o,
                           .dist = dist,
                           .comm = comm,
                           .be = be,
                           .model = model,
                           .buffers = buffers,
                           .state = state};
  *start_step = 0;
  if (!o->save[0] && !o->resume[0]) return DDP_OK;
  DDP_CHECK(make_layout(tc, ocfg));
  int resumed = 0;
  if (o->resume[0]) DDP_CHECK(resume(tc, comm, start_step, scaler, &resumed));
  if (o->save[0] && dist->rank == 0)
    DDP_CHECK(ddp_ckpt_writer_create(o->save, (int)o->keep, resumed ? *start_step : -1, &tc->layout,
                                     tc->config, &tc->writer));
  return DDP_OK;
}

void ddp_train_ckpt_set_zero(ddp_train_ckpt_t *tc, ddp_zero_t *zero, float *shard_state,
                             ddp_comm_t *grad_comm) {
  tc->zero = zero;
  tc->state = shard_state;
  tc->grad_comm = grad_comm;
}

/* --zero 1: every rank takes part; rank 0's writer gets the whole image. */
static ddp_status_t save_sharded(ddp_train_ckpt_t *tc, const ddp_ckpt_meta_t *meta,
                                 double *pause_ms) {
  const double t0 = ddp_clock_seconds();
  float *hp = NULL, *hs = NULL, *hb = NULL;
  if (tc->writer) DDP_CHECK(ddp_ckpt_writer_stage(tc->writer, &hp, &hs, &hb));
  DDP_CHECK(ddp_zero_gather_masters(tc->zero, tc->grad_comm));
  if (hp)
    DDP_CHECK(ddp_backend_copy(tc->be, hp, tc->model->params, tc->model->n_params * sizeof(float),
                               DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  if (hb) /* buffers are not sharded: rank 0's are every rank's */
    DDP_CHECK(ddp_backend_copy(tc->be, hb, tc->model->buffers,
                               tc->model->n_buffer_floats * sizeof(float),
                               DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  DDP_CHECK(ddp_zero_gather_state(tc->zero, tc->grad_comm, tc->state, hs));
  if (tc->writer) DDP_CHECK(ddp_ckpt_writer_commit(tc->writer, meta));
  *pause_ms = 1e3 * (ddp_clock_seconds() - t0);
  return DDP_OK;
}

int ddp_train_ckpt_due(const ddp_train_ckpt_t *tc, int64_t done) {
  return tc->o->save_every > 0 && done % tc->o->save_every == 0;
}

ddp_status_t ddp_train_ckpt_save(ddp_train_ckpt_t *tc, int64_t done,
                                 const ddp_ckpt_scaler_t *scaler, int wait) {
  if (!tc->o->save[0]) return DDP_OK;
  if (done != tc->last_saved) {
    /* every rank: the buffers a checkpoint holds are the ranks' average */
    const double t0 = ddp_clock_seconds();
    if (tc->buffers) DDP_CHECK(ddp_train_buffers_sync(tc->buffers, "a checkpoint", 1));
    const double sync_ms = 1e3 * (ddp_clock_seconds() - t0);
    if (tc->writer || tc->zero) {
      ddp_ckpt_meta_t meta = tc->layout.meta;
      meta.step = done;
      meta.scaler = *scaler;
      double pause_ms = 0.0;
      if (tc->zero)
        DDP_CHECK(save_sharded(tc, &meta, &pause_ms));
      else
        DDP_CHECK(ddp_ckpt_writer_save(tc->writer, tc->be, tc->model->params, tc->state,
                                       tc->model->buffers, &meta, &pause_ms));
      char buffers[64] = "";
      if (tc->model->n_buffer_floats && tc->dist->world > 1)
        snprintf(buffers, sizeof buffers, " (%.2f ms of it making the buffers agree)", sync_ms);
      DDP_LOG_INFO("checkpoint: step %lld copied for writing; the step loop paused %.1f ms%s",
                   (long long)done, pause_ms + sync_ms, buffers);
    }
    tc->last_saved = done;
  }
  /* A failed write was reported by the writer and is not fatal. */
  if (wait && tc->writer) (void)ddp_ckpt_writer_flush(tc->writer);
  return DDP_OK;
}

ddp_status_t ddp_train_ckpt_save_final(ddp_train_ckpt_t *tc, int64_t done,
                                       const ddp_ckpt_scaler_t *scaler,
                                       ddp_train_ckpt_outcome_t *outcome) {
  int32_t v = DDP_TRAIN_CKPT_NO_SAVE;                  /* rank 0's answer; the others add 0 */
  DDP_CHECK(ddp_train_ckpt_save(tc, done, scaler, 0)); /* collective with --save */
  if (tc->writer) {
    /* the status of the last write, which is this step's (or, when nothing
     * was trained, the checkpoint resumed from, which is on disk) */
    v = ddp_ckpt_writer_flush(tc->writer) == DDP_OK ? DDP_TRAIN_CKPT_ON_DISK
                                                    : DDP_TRAIN_CKPT_FAILED;
  }
  if (tc->dist->world > 1)
    DDP_CHECK(ddp_comm_allreduce_sum(tc->comm, &v, 1, DDP_DTYPE_I32, NULL, NULL));
  *outcome = (ddp_train_ckpt_outcome_t)v;
  return DDP_OK;
}

void ddp_train_ckpt_destroy(ddp_train_ckpt_t *tc) {
  ddp_ckpt_writer_destroy(tc->writer);
  free(tc->config);
  *tc = (ddp_train_ckpt_t){0};
}
