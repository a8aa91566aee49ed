/* The training loop (see train/trainer.h): data-parallel over the ranks
 * of the job, for any model of the registry (ddptrain/model.h), which it
 * reaches only through the model interface.
 *
 * Every rank holds a replica of the model. Rank 0's initial weights are
 * broadcast, and the ranks check that they agree on flags, parameter layout
 * and data before the first step. The sampler plan is computed on every
 * rank, so each rank knows the step's global target count and scales its
 * loss by its inverse; the reducer SUMs gradients bucket by bucket while
 * backward is still running, on the last micro-step only. Every rank then
 * takes the same optimizer step on the same reduced gradients.
 *
 * Host syncs: one per --log-every steps (loss, grad norm, per-rank timings);
 * the loader thread fills micro-batches ahead of the loop. */
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddptrain/check.h"
#include "ddptrain/model.h"
#include "amp/amp_train.h"
#include "comm/comm.h"
#include "core/ascii.h"
#include "core/clock.h"
#include "core/env.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "model/gpt_init_from.h"
#include "optim/optim.h"
#include "runtime/fault.h"
#include "trace/nvtx.h"
#include "train/train_conv_algos.h"
#include "trace/timeline.h"
#include "train/train_graphs.h"
#include "train/train_trace.h"
#include "train/anomaly.h"
#include "train/bucket_tune.h"
#include "train/buffers.h"
#include "train/consistency.h"
#include "train/dump_batches.h"
#include "train/metrics.h"
#include "train/preempt.h"
#include "train/progress_time.h"
#include "train/reducer.h"
#include "train/sample_every.h"
#include "train/task_eval.h"
#include "train/topk.h"
#include "train/train_ckpt.h"
#include "train/train_data.h"
#include "train/zero.h"

enum { TASK_EVAL_DOCS = 128, LOADER_DEPTH = 3 };

typedef struct trainer {
  const ddp_options_t *o;
  const ddp_dist_t *dist;
  ddp_backend_t *be;
  ddp_train_data_t data;
  ddp_sampler_t *sampler, *val_sampler;
  ddp_train_batch_t val_batch;
  ddp_eval_firsts_t val_firsts; /* record data: the repeats of the last step, left unscored */
  float *val_outputs; /* record models: a validation micro-batch's outputs, for top-1/top-5 */
  ddp_loader_t *loader;
  ddp_train_batch_t slots[LOADER_DEPTH];
  ddp_model_t *model;
  ddp_train_buffers_t buffers; /* the model's buffers across the ranks */
  /* what a step counts: "tok" (token models), "img" (image models) or
   * "samples" (other record models), and the metrics key of its rate */
  const char *unit, *rate_key;
  int have_flops; /* the model has a cost: MFU can be reported */
  /* comm: host values (agreement checks, the stop vote, allgathers of
   * timings, checkpoints, barriers). grad_comm: the gradients and the
   * initial weights in backend memory, when they need a communicator of
   * their own (NCCL on GPUs); NULL when comm serves both. */
  ddp_comm_t *comm, *grad_comm;
  ddp_reducer_t *reducer;
  ddp_bucket_tune_t bucket_tune; /* --bucket-mb auto: may replace the reducer early on */
  /* the reducer's half-precision epilogue unscales the gradients and takes
   * their norm: its buckets cover exactly the gradients [0, n) */
  int fused_epilogue;
  ddp_status_t hook_status; /* first reducer error raised inside backward */
  ddp_optim_config_t ocfg;
  ddp_optim_plan_t *optim_plan; /* made once, before the step loop */
  float *state, *grad_sumsq;    /* backend memory (--zero 1: state is this rank's shard) */
  ddp_zero_t zero;              /* --zero 1: the shard (zero.be is NULL without) */
  float *host_params;           /* --check-replicas */
  ddp_metrics_t metrics;
  double peak_gflops;
  int64_t steps;
  double train_loss; /* of the last log window */
  /* this rank's training loss an evaluation took out of the model's
   * accumulator mid-window (take_loss reads and resets it), for the
   * window's log point to count */
  double pending_loss;
  ddp_train_ckpt_t ckpt;
  ddp_anomaly_t anomaly;
  int64_t start_step; /* steps done before this run (--resume) */
  ddp_amp_train_t amp;
  int64_t step; /* the step in progress */
  int64_t end;  /* the step this run stops after (--steps, or --stop-at) */
  /* when the run started: unix seconds, and the monotonic clock the
   * progress lines' elapsed time and the metrics' elapsed_s count from */
  double start_unix, start_mono;
  ddp_sample_every_t sample_every; /* --sample-every */
  ddp_train_conv_algos_t conv_algos; /* --conv-algos */
  ddp_graph_replay_t *replay;        /* --cuda-graphs; NULL when not used */
  /* The run's first step, apart: it makes the activations and searches the
   * convolution algorithms, so it would skew the summary's launch-gap
   * verdict (a ResNet-50 on a GPU: 4.8 s of a 40-step run's 5.8 s). */
  double first_compute_s, first_host_wait_s;
} trainer_t;

/* ---- loader callbacks: this rank's micro-batches in consumption order ---- */

static ddp_status_t slot_init(void *ctx, int slot, void **item) {
  trainer_t *tr = ctx;
  /* pinned on a GPU: the model's batch copy then runs without the host */
  DDP_CHECK(ddp_train_batch_init(&tr->slots[slot], &tr->data, tr->be, tr->o, tr->sampler));
  *item = &tr->slots[slot];
  return DDP_OK;
}

static void slot_destroy(void *ctx, int slot, void *item) {
  (void)item;
  ddp_train_batch_destroy(&((trainer_t *)ctx)->slots[slot]);
}

/* Micro-batch `seq` of this rank (seq = step * accum + micro). */
static ddp_status_t fill_batch(trainer_t *tr, int64_t seq, ddp_train_batch_t *b) {
  const int64_t accum = tr->o->accum;
  return ddp_train_batch_fill(b, &tr->data, DDP_SPLIT_TRAIN, tr->sampler, seq / accum,
                              tr->dist->rank, (int)(seq % accum));
}

static ddp_status_t fill_slot(void *ctx, int64_t seq, void *item) {
  return fill_batch(ctx, seq, item);
}

static void on_grad_ready(void *ctx, size_t offset, size_t count) {
  trainer_t *tr = ctx;
  if (tr->hook_status != DDP_OK) return;
  if (offset == 0)
    tr->hook_status =
        ddp_amp_fault_inject(&tr->amp, tr->be, tr->dist->rank, tr->step, tr->model->grads);
  if (tr->hook_status != DDP_OK) return;
  tr->hook_status = ddp_reducer_mark_ready(tr->reducer, offset, count);
}

/* A recorded backward is cut where a gradient bucket may start its
 * collective (model/graph_replay.h): the reducer in use then (bucket
 * tuning may replace it; a stale cut costs overlap, never correctness). */
static int cut_at_bucket(void *ctx, size_t offset, size_t count) {
  (void)count;
  const trainer_t *tr = ctx;
  return ddp_reducer_completes_bucket(tr->reducer, offset);
}

/* ---- set-up ----------------------------------------------------------------- */

static ddp_status_t setup_optimizer(trainer_t *tr) {
  const ddp_options_t *o = tr->o;
  ddp_optim_kind_t kind;
  if (ddp_optim_kind_parse(o->optimizer, &kind) != DDP_OK)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "unknown optimizer '%s'", o->optimizer);
  tr->ocfg = (ddp_optim_config_t){.kind = kind,
                                  .beta1 = (float)o->beta1,
                                  .beta2 = (float)o->beta2,
                                  .eps = (float)o->adam_eps,
                                  .weight_decay = (float)o->weight_decay,
                                  .momentum = (float)o->momentum,
                                  .nesterov = (int)o->nesterov,
                                  .max_grad_norm = (float)o->grad_clip};
  ddp_model_t *m = tr->model;
  size_t n = m->n_params;
  const size_t spp = ddp_optim_state_per_param(&tr->ocfg);
  if (o->zero) {
    /* --zero 1: the optimizer state covers the elements this rank owns,
     * and one plan per bucket updates them (train/zero.h) */
    DDP_CHECK(ddp_zero_create(&tr->zero, tr->be, m, tr->dist->world, tr->dist->rank,
                              o->bucket_mb * 1048576.0, o->first_bucket_mb * 1048576.0, &tr->ocfg));
    n = tr->zero.layout.owned;
  } else {
    /* the model's parameter table is the optimizer's tensor list as it is */
    DDP_CHECK(
        ddp_optim_plan_create(tr->be, &tr->ocfg, m->tensors, m->n_tensors, n, &tr->optim_plan));
  }
  const size_t state_n = n * spp;
  if (state_n) {
    DDP_CHECK(ddp_backend_alloc(tr->be, state_n * sizeof(float), (void **)&tr->state));
    DDP_CHECK(tr->be->ops->fill(tr->be, tr->state, DDP_DTYPE_F32, 0.0f, state_n, NULL));
  }
  DDP_CHECK(ddp_backend_alloc(tr->be, sizeof(float), (void **)&tr->grad_sumsq));
  return DDP_OK;
}

/* The communicator of the gradients (and of anything else in backend memory). */
static ddp_comm_t *grad_comm(const trainer_t *tr) {
  return tr->grad_comm ? tr->grad_comm : tr->comm;
}

/* Statistics of the step's collectives, both communicators together (the
 * metrics count the stop vote with the bucket all-reduces), then reset. */
static void take_comm_stats(trainer_t *tr, ddp_comm_stats_t *cs) {
  ddp_comm_get_stats(tr->comm, cs);
  ddp_comm_reset_stats(tr->comm);
  if (!tr->grad_comm) return;
  ddp_comm_stats_t g;
  ddp_comm_get_stats(tr->grad_comm, &g);
  ddp_comm_reset_stats(tr->grad_comm);
  cs->n_allreduce += g.n_allreduce;
  cs->n_broadcast += g.n_broadcast;
  cs->n_allgather += g.n_allgather;
  cs->n_reduce_scatter += g.n_reduce_scatter;
  cs->n_barrier += g.n_barrier;
  cs->bytes += g.bytes;
  cs->comm_ms += g.comm_ms;
  cs->wait_ms += g.wait_ms;
}

/* Communicators, reducer, agreement checks and rank 0's weights everywhere. */
static ddp_status_t setup_parallel(trainer_t *tr) {
  const ddp_options_t *o = tr->o;
  ddp_comm_config_t cc = {.kind = NULL,
                          .progress = strcmp(o->comm_progress, "auto") ? o->comm_progress : NULL};
  DDP_CHECK(ddp_comm_create(tr->dist, &cc, &tr->comm));
  /* Gradients live in backend memory and the reducer hands their slices to
   * the communicator as they are: several GPU ranks get a device
   * communicator on its own stream, or the host one where it reads that
   * memory; a job nothing can serve stops here, at start-up. Every rank
   * takes the same branch (the launcher put every rank on the same kind of
   * backend: ddp_comm_choose), and creation is collective. */
  DDP_CHECK(ddp_comm_create_for_backend(tr->dist, tr->be, tr->comm, &tr->grad_comm));
  /* --zero 1 on one GPU: the reduce-scatter and all-gathers are copies of
   * device memory, which the host communicator would do with memcpy */
  if (o->zero && !tr->grad_comm && tr->be->ops->kind != DDP_DEVICE_KIND_CPU) {
    const ddp_comm_config_t sc = {.kind = "self", .be = tr->be};
    DDP_CHECK(ddp_comm_create(tr->dist, &sc, &tr->grad_comm));
  }
  ddp_reducer_config_t rc = {.grads = tr->model->grads,
                             .tensors = tr->model->tensors,
                             .n_tensors = tr->model->n_tensors,
                             .bucket_bytes = o->bucket_mb * 1048576.0,
                             .first_bucket_bytes = o->first_bucket_mb * 1048576.0,
                             .dtype = tr->amp.reduce_dtype,
                             .be = tr->be,
                             .zero = o->zero ? &tr->zero.layout : NULL,
                             .shard_grads = o->zero ? tr->zero.grads : NULL};
  /* the fixed sizes, or bucket tuning's first candidate for "auto" */
  DDP_CHECK(ddp_bucket_tune_init(&tr->bucket_tune, o, tr->model->tensors, tr->model->n_tensors,
                                 tr->comm, grad_comm(tr), tr->dist->rank, tr->dist->world,
                                 &tr->metrics, &rc));
  DDP_CHECK(ddp_reducer_create(grad_comm(tr), &rc, &tr->reducer));
  if (ddp_reducer_fused_epilogue(tr->reducer)) {
    size_t first_off, first_n, last_off, last_n;
    ddp_reducer_bucket(tr->reducer, 0, &first_off, &first_n);
    ddp_reducer_bucket(tr->reducer, ddp_reducer_num_buckets(tr->reducer) - 1, &last_off, &last_n);
    tr->fused_epilogue = first_off == 0 && last_off + last_n == tr->model->n_params;
  }
  tr->model->grad_ready_fn = on_grad_ready;
  tr->model->grad_ready_ctx = tr;
  DDP_CHECK(ddp_train_check_agreement(tr->dist, o, tr->model, &tr->data));
  if (tr->dist->world > 1) {
    ddp_comm_handle_t h;
    DDP_CHECK(ddp_comm_broadcast(grad_comm(tr), tr->model->params,
                                 tr->model->n_params * sizeof(float), 0, NULL, &h));
    DDP_CHECK(ddp_comm_wait(grad_comm(tr), h));
    DDP_CHECK(ddp_model_refresh_compute(tr->model));
  }
  /* the model's buffers travel with its weights; the model's sums over the
   * ranks (ddp_model_allreduce) run on the gradients' communicator */
  DDP_CHECK(ddp_train_buffers_init(&tr->buffers, tr->model, tr->dist, grad_comm(tr)));
  DDP_CHECK(ddp_train_buffers_broadcast(&tr->buffers));
  if (o->check_replicas > 0) {
    tr->host_params = malloc(tr->model->n_params * sizeof(float));
    if (!tr->host_params) DDP_FAIL(DDP_ERR_OOM, "--check-replicas: out of host memory");
  }
  if (tr->dist->world > 1) {
    size_t off, cnt;
    ddp_reducer_bucket(tr->reducer, 0, &off, &cnt);
    char host[96] = "";
    if (tr->grad_comm)
      snprintf(host, sizeof host, " (host values: %s, %s progress)", ddp_comm_name(tr->comm),
               ddp_comm_progress_mode(tr->comm));
    DDP_LOG_INFO(
        "data parallel: %d ranks, %s communicator (%s progress)%s, %d gradient buckets "
        "(first %.2f MiB, then <= %.1f MiB)",
        tr->dist->world, ddp_comm_name(grad_comm(tr)), ddp_comm_progress_mode(grad_comm(tr)), host,
        ddp_reducer_num_buckets(tr->reducer), (double)cnt * 4 / 1048576.0,
        rc.bucket_bytes / 1048576.0);
  }
  if (o->zero) {
    const double mib = 4.0 / 1048576.0, spp = (double)ddp_optim_state_per_param(&tr->ocfg);
    const double owned = (double)tr->zero.layout.owned, full = (double)tr->model->n_params;
    DDP_LOG_INFO(
        "--zero 1: this rank updates %.0f of %.0f parameters; optimizer state %.1f MiB per rank "
        "(%.1f MiB unsharded), plus %.1f MiB of reduced gradients; gradients are "
        "reduce-scattered, weights all-gathered after each step",
        owned, full, owned * spp * mib, full * spp * mib, (double)tr->zero.layout.shard * mib);
  }
  return DDP_OK;
}

/* The validation plan: world ranks x 1 micro-batch per step; a model
 * without an evaluation forward gets none. */
static ddp_status_t setup_eval(trainer_t *tr, const ddp_model_ops_t *mops) {
  if (!tr->data.have_val || !mops->eval_forward) return DDP_OK;
  ddp_sampler_config_t sc;
  DDP_CHECK(ddp_train_sampler_config(tr->o, mops, &tr->data, tr->dist->world, &sc));
  sc.accum = 1;
  DDP_CHECK(ddp_train_sampler_create(&tr->data, DDP_SPLIT_VAL, &sc, &tr->val_sampler));
  DDP_CHECK(ddp_train_batch_init(&tr->val_batch, &tr->data, NULL, tr->o, tr->val_sampler));
  if (tr->data.kind == DDP_BATCH_RECORDS && mops->copy_outputs && tr->model->n_outputs > 0) {
    const size_t n = (size_t)ddp_sampler_max_rows(tr->val_sampler) * (size_t)tr->model->n_outputs;
    tr->val_outputs = malloc(n * sizeof *tr->val_outputs);
    if (!tr->val_outputs) DDP_FAIL(DDP_ERR_OOM, "evaluation: out of host memory");
  }
  if (tr->data.kind == DDP_BATCH_RECORDS)
    DDP_CHECK(ddp_eval_firsts_init(&tr->val_firsts, &tr->data, tr->val_sampler, tr->dist->world,
                                   tr->dist->rank));
  return DDP_OK;
}

/* The loss scaler's state for checkpoints (saved as disabled when the run
 * has no scaler: fp32, bf16 by default). */
static ddp_ckpt_scaler_t loss_scaler_state(const trainer_t *tr) {
  const ddp_loss_scaler_t *s = &tr->amp.scaler;
  return (ddp_ckpt_scaler_t){.enabled = s->enabled,
                             .scale = s->enabled ? (double)s->state.scale : 1.0,
                             .growth_tracker = s->state.growth_tracker,
                             .skipped_steps = s->state.skipped_steps};
}

/* After --resume: the scaler continues where it was, and the optimizer's
 * step count excludes the skipped steps as it did before the stop. A
 * change of precision across the resume is allowed; the scale is then
 * started afresh or dropped, and the log says so. */
static ddp_status_t restore_loss_scaler(trainer_t *tr, const ddp_ckpt_scaler_t *s) {
  ddp_loss_scaler_t *ls = &tr->amp.scaler;
  tr->amp.applied = tr->start_step - s->skipped_steps;
  if (tr->start_step == 0) return DDP_OK; /* a fresh run */
  if (ls->enabled && s->enabled) {
    const ddp_loss_scaler_state_t st = {.scale = (float)s->scale,
                                        .growth_tracker = s->growth_tracker,
                                        .skipped_steps = s->skipped_steps};
    DDP_CHECK(ddp_loss_scaler_set_state(ls, &st));
  } else if (ls->enabled) {
    ls->state.skipped_steps = s->skipped_steps;
    DDP_LOG_INFO("resume: the checkpoint has no loss scaler; starting at scale %g",
                 (double)ls->state.scale);
  } else if (s->enabled) {
    DDP_LOG_WARN("resume: this run has no loss scaler; the checkpoint's scale %g is dropped",
                 s->scale);
  }
  /* the compute copy of the weights (bf16/fp16) from the loaded masters */
  return ddp_model_refresh_compute(tr->model);
}

/* The model of --model, created for the data, in the run's precision,
 * with its initial weights. */
static ddp_status_t setup_model(trainer_t *tr, const ddp_model_ops_t *mops) {
  const ddp_options_t *o = tr->o;
  ddp_model_setup_t ms = {.be = tr->be,
                          .opts = o,
                          .data = tr->data.shape,
                          .max_batch = ddp_train_batch_budget(o, &tr->data),
                          .world = tr->dist->world};
  /* --init-from: the file's vocabulary, then its weights */
  if (o->init_from[0]) DDP_CHECK(ddp_init_from_data_shape(o->init_from, mops, &ms.data));
  DDP_CHECK(ddp_model_create(mops, &ms, &tr->model));
  const ddp_dtype_t dtype = ddp_precision_dtype(tr->amp.precision);
  if (dtype != DDP_DTYPE_F32) {
    if (!mops->set_precision)
      DDP_FAIL(DDP_ERR_UNSUPPORTED, "--precision %s: model %s computes in fp32 only",
               ddp_precision_name(tr->amp.precision), mops->name);
    DDP_CHECK(mops->set_precision(tr->model, dtype));
  }
  if (o->init_from[0]) return ddp_init_from_load(o->init_from, tr->model);
  return mops->init_weights(tr->model, (uint64_t)o->seed);
}

/* Resuming and saving. A checkpoint always holds whole tensors (§5.5), so
 * under --zero 1 a resume loads the full optimizer state into a buffer that
 * lives only until this rank has taken its shard out of it; that is also
 * what lets a checkpoint of N ranks resume on M, sharded or not. */
static ddp_status_t setup_checkpoints(trainer_t *tr, ddp_ckpt_scaler_t *scaler) {
  const ddp_options_t *o = tr->o;
  float *full_state = tr->state;
  const size_t full_n = tr->model->n_params * ddp_optim_state_per_param(&tr->ocfg);
  if (o->zero) {
    full_state = NULL;
    if (o->resume[0] && full_n) {
      DDP_CHECK(ddp_backend_alloc(tr->be, full_n * sizeof(float), (void **)&full_state));
      DDP_CHECK(tr->be->ops->fill(tr->be, full_state, DDP_DTYPE_F32, 0.0f, full_n, NULL));
    }
  }
  ddp_status_t st =
      ddp_train_ckpt_init(&tr->ckpt, o, tr->dist, tr->comm, tr->be, tr->model, &tr->buffers,
                          full_state, &tr->ocfg, &tr->start_step, scaler);
  if (st == DDP_OK) st = restore_loss_scaler(tr, scaler);
  if (st == DDP_OK && o->zero) {
    if (full_state) st = ddp_zero_load_state(&tr->zero, full_state, tr->state);
    ddp_train_ckpt_set_zero(&tr->ckpt, &tr->zero, tr->state, grad_comm(tr));
  }
  if (o->zero && full_state) ddp_backend_free(tr->be, full_state);
  return st;
}

static ddp_status_t setup(trainer_t *tr) {
  const ddp_options_t *o = tr->o;
  /* the combination rules live in one place (ddp_options_validate); ddp_main
   * has run them before MPI, a library caller of ddp_train gets them here */
  DDP_CHECK(ddp_options_validate(o));
  DDP_CHECK(ddp_nvtx_enable(ddp_ascii_ieq(o->nvtx, "on")));
  if (ddp_nvtx_enabled())
    DDP_LOG_INFO("NVTX ranges on (--nvtx): steps, blocks, buckets, optimizer");
  const ddp_model_ops_t *mops = ddp_model_find(o->model);
  if (!mops) DDP_FAIL(DDP_ERR_INVALID_ARG, "--model %s is not registered", o->model);
  if (mops->validate) DDP_CHECK(mops->validate(o)); /* before loading: cheap errors first */
  DDP_CHECK(ddp_train_data_load(o, mops, &tr->data));
  if (tr->data.images && o->loader_threads == 0)
    tr->data.fill_threads =
        ddp_loader_threads_auto(tr->be->ops->kind != DDP_DEVICE_KIND_CPU, ddp_affinity_cpus());
  const int tokens = tr->data.kind == DDP_BATCH_TOKENS;
  tr->unit = tokens ? "tok" : mops->image_data ? "img" : "samples";
  tr->rate_key = tokens ? "tok_per_s" : "samples_per_s";
  tr->have_flops = mops->cost != NULL;
  ddp_sampler_config_t sc;
  DDP_CHECK(ddp_train_sampler_config(o, mops, &tr->data, tr->dist->world, &sc));
  DDP_CHECK(ddp_train_sampler_create(&tr->data, DDP_SPLIT_TRAIN, &sc, &tr->sampler));
  ddp_epoch_stats_t es;
  DDP_CHECK(ddp_sampler_epoch_stats(tr->sampler, 0, &es));
  tr->steps = o->steps;
  if (tr->steps == 0) tr->steps = (o->epochs > 0 ? o->epochs : 1) * es.steps;
  if (o->warmup > tr->steps && tr->dist->rank == 0)
    DDP_LOG_WARN(
        "--warmup %lld is longer than the run's %lld steps: the learning rate never "
        "reaches --lr %g (it ends at %g, still warming up)",
        (long long)o->warmup, (long long)tr->steps, o->lr,
        (double)ddp_lr_schedule(tr->steps - 1, (float)o->lr, (float)o->min_lr, o->warmup,
                                tr->steps));
  DDP_CHECK(ddp_amp_setup(&tr->amp, o, tr->dist->rank));
  /* before the model: its first forward searches the convolutions */
  DDP_CHECK(ddp_train_conv_algos_setup(&tr->conv_algos, o, tr->be, tr->dist->rank));
  DDP_CHECK(setup_model(tr, mops));
  DDP_CHECK(setup_optimizer(tr));
  DDP_CHECK(setup_parallel(tr));
  ddp_ckpt_scaler_t scaler = loss_scaler_state(tr);
  DDP_CHECK(setup_checkpoints(tr, &scaler));
  DDP_CHECK(ddp_anomaly_init(&tr->anomaly, o, tr->be, tr->model));
  /* after the watchers: one reads every activation, which rules graphs out */
  DDP_CHECK(ddp_train_graphs_setup(o, tr->be, tr->model, ddp_nvtx_enabled(), &tr->replay));
  if (tr->replay) ddp_graph_replay_set_cuts(tr->replay, cut_at_bucket, tr);
  DDP_CHECK(setup_eval(tr, mops));
  DDP_CHECK(ddp_sample_every_init(&tr->sample_every, o, tr->dist->rank, tr->model, tr->be,
                                  tr->data.train.corpus.eot));

  int sync = 0;
  DDP_CHECK(ddp_env_get_bool(DDP_ENV_LOADER_SYNC, &sync));
  ddp_loader_config_t lc = {.depth = LOADER_DEPTH,
                            .synchronous = sync,
                            .ctx = tr,
                            .slot_init = slot_init,
                            .slot_destroy = slot_destroy,
                            .fill = fill_slot};
  DDP_CHECK(ddp_loader_create(&lc, &tr->loader));
  const ddp_metrics_run_t run = {.opts = o,
                                 .world_size = tr->dist->world,
                                 .device = tr->be->description,
                                 .precision = ddp_precision_name(tr->amp.precision),
                                 .start_step = tr->start_step,
                                 .start_unix = tr->start_unix,
                                 .start_mono = tr->start_mono};
  DDP_CHECK(ddp_metrics_open(&tr->metrics, tr->dist->rank == 0 ? o->metrics : "", &run));
  tr->peak_gflops = o->peak_gflops;
  if (tr->peak_gflops <= 0)
    /* On a GPU the rate of the run's own GEMM type (bf16/fp16 tensor cores
     * in half precision); the CPU computes every GEMM in fp32. */
    DDP_CHECK(ddp_backend_measure_gemm_gflops_dtype(
        tr->be, tr->be->device < 0 ? DDP_DTYPE_F32 : tr->model->precision,
        tr->be->device < 0 ? 512 : 4096, 0.25, &tr->peak_gflops));
  char line[512];
  ddp_train_data_describe(o, &tr->data, line, sizeof line);
  DDP_LOG_INFO("data: %s", line);
  DDP_LOG_INFO(
      "plan: %s sampler, %lld steps per epoch of %d ranks x %lld micro-batches of <= %lld "
      "%s; padding %.1f%%, imbalance mean %.3f worst %.3f (built in %.2f s)",
      o->sampler, (long long)es.steps, tr->dist->world, (long long)o->accum,
      (long long)ddp_train_batch_budget(o, &tr->data), tokens ? "tokens" : "records",
      100.0 * es.pad_frac, es.imbalance_mean, es.imbalance_max, es.build_seconds);
  if (!tokens)
    DDP_LOG_INFO(
        "plan: %lld of %lld records per epoch dropped (the remainder of whole steps of "
        "%d x %lld x %lld)",
        (long long)es.dropped, (long long)es.windows, tr->dist->world, (long long)o->accum,
        (long long)o->batch_size);
  ddp_model_describe(tr->model, line, sizeof line);
  DDP_LOG_INFO("model: %s; %s, %lld steps; peak %.1f GFLOP/s per rank", line,
               ddp_optim_kind_name(tr->ocfg.kind), (long long)tr->steps, tr->peak_gflops);
  return DDP_OK;
}

/* ---- evaluation ---------------------------------------------------------------- */

/* What an evaluation gives: the validation loss and a held-out accuracy. */
typedef struct eval_result {
  double val_loss;           /* NAN: no validation */
  double acc;                /* token models: task accuracy; record models: top-1 */
  double top5;               /* record models of > 10 classes: top-5; NAN otherwise */
  int64_t n;                 /* documents or records the accuracy was measured on; 0: none */
  ddp_task_scores_t by_task; /* token models: the accuracy per built-in task */
} eval_result_t;

/* Top-1 and top-5 hits of the last evaluation forward over the batch's
 * records (ties to the lower class, train/topk.h). */
static ddp_status_t count_hits(trainer_t *tr, const ddp_record_batch_t *b, double *top1,
                               double *top5) {
  ddp_model_t *m = tr->model;
  DDP_CHECK(m->ops->copy_outputs(m, tr->val_outputs, b->B));
  for (int r = 0; r < b->B; ++r) {
    const float *row = tr->val_outputs + (size_t)r * (size_t)m->n_outputs;
    const int64_t rank = ddp_topk_rank(row, m->n_outputs, b->labels[r]);
    *top1 += rank == 0;
    *top5 += rank < 5 && rank < m->n_outputs;
  }
  return DDP_OK;
}

/* Validation loss over at least --eval-tokens targets, the micro-batches
 * shared out among the ranks (a plan of world ranks x 1 on the validation
 * data) and the sums combined: the same number on every rank. Record
 * models that report outputs also get their top-1 accuracy on the records
 * scored, and top-5 with more than 10 classes. */
static ddp_status_t evaluate(trainer_t *tr, eval_result_t *r) {
  *r = (eval_result_t){.val_loss = NAN, .top5 = NAN};
  if (!tr->val_sampler) return DDP_OK;
  /* every replica evaluates the same model: the ranks' averaged buffers */
  DDP_CHECK(ddp_train_buffers_sync(&tr->buffers, "an evaluation", 0));
  int64_t steps = 0, targets = 0;
  double sums[4] = {0.0, 0.0, 0.0, 0.0}; /* loss, top-1 hits, records scored, top-5 hits */
  ddp_train_batch_t *b = &tr->val_batch;
  double train_part = 0.0;
  DDP_CHECK(tr->model->ops->take_loss(tr->model, &train_part));
  tr->pending_loss += train_part;
  DDP_CHECK(ddp_sampler_steps_in_epoch(tr->val_sampler, 0, &steps));
  for (int64_t i = 0; i < steps && targets < tr->o->eval_tokens; ++i) {
    DDP_CHECK(
        ddp_train_batch_fill(b, &tr->data, DDP_SPLIT_VAL, tr->val_sampler, i, tr->dist->rank, 0));
    if (tr->val_firsts.keep) ddp_eval_firsts_apply(&tr->val_firsts, i, &b->records);
    targets += ddp_train_batch_info(b)->n_targets;
    /* a rank whose rows all repeat records sits the step out (no
     * collective runs inside the loop) */
    if (b->kind == DDP_BATCH_RECORDS && b->records.B == 0) continue;
    DDP_CHECK(tr->model->ops->eval_forward(tr->model, ddp_train_batch_input(b)));
    if (tr->val_outputs) {
      DDP_CHECK(count_hits(tr, &b->records, &sums[1], &sums[3]));
      sums[2] += b->records.B;
    }
  }
  DDP_CHECK(tr->model->ops->take_loss(tr->model, &sums[0]));
  for (int k = 0; k < 4; ++k) DDP_CHECK(ddp_dist_sum_double(tr->dist, &sums[k]));
  r->val_loss = targets ? sums[0] / (double)targets : NAN;
  if (sums[2] > 0) {
    r->acc = sums[1] / sums[2];
    r->n = (int64_t)sums[2];
    if (tr->model->n_outputs >= DDP_TOP5_MIN_CLASSES) r->top5 = sums[3] / sums[2];
  }
  return DDP_OK;
}

/* ---- the step ------------------------------------------------------------------- */

typedef struct window {
  double t0;
  double flops, loss_targets, compute_s, exposed_ms, imbalance;
  double host_wait_s; /* of compute_s: the host blocked on the device */
  int64_t useful, padded, steps;
} window_t;

typedef struct totals {
  double t0, t_end, compute_s, exposed_ms, comm_ms, wait_ms, flops, imbalance, imbalance_max;
  double host_wait_s;
  int64_t useful, padded, steps;
  /* Backend allocations (ops and raw device allocations) after the first
   * step, when every buffer exists: the step loop must add none. -1 until
   * measured (runs of one step). */
  int64_t loop_allocs, loop_raw_allocs;
  uint64_t allocs0, raw_allocs0;
} totals_t;

/* Snapshot after the first step; counted again when the loop ends. */
static void count_loop_allocs(const trainer_t *tr, totals_t *t, int first) {
  ddp_caching_alloc_stats_t s;
  ddp_backend_mem_stats(tr->be, &s);
  if (first) {
    t->allocs0 = tr->be->alloc_calls;
    t->raw_allocs0 = s.raw_alloc_calls;
    return;
  }
  t->loop_allocs = (int64_t)(tr->be->alloc_calls - t->allocs0);
  t->loop_raw_allocs = (int64_t)(s.raw_alloc_calls - t->raw_allocs0);
}

static ddp_status_t train_step(trainer_t *tr, int64_t step, window_t *w, float lr) {
  const int64_t accum = tr->o->accum;
  const double t0 = ddp_clock_seconds(), host_wait0 = tr->be->host_wait_s;
  double wait_s = 0.0;
  ddp_step_info_t info = {0};
  tr->step = step;
  DDP_CHECK(ddp_anomaly_begin_step(&tr->anomaly, step));
  for (int64_t k = 0; k < accum; ++k) {
    void *item;
    const double a0 = ddp_clock_seconds();
    DDP_CHECK(ddp_loader_acquire(tr->loader, step * accum + k, &item));
    const double a1 = ddp_clock_seconds();
    wait_s += a1 - a0;
    ddp_timeline_record(DDP_SPAN_DATA_WAIT, (int)k, 0, a0, a1);
    const ddp_train_batch_t *b = item;
    info = *ddp_train_batch_info(b);
    if (info.n_targets <= 0) DDP_FAIL(DDP_ERR_FORMAT, "step %lld has no targets", (long long)step);
    const float dloss = ddp_amp_loss_scale(&tr->amp) / (float)info.n_targets;
    /* the step in the name lets a profiler pick one step's kernels
     * (Nsight Compute's --nvtx-include "step 2/", the step span's range around it) */
    DDP_NVTX_PUSH("step %lld micro-step %lld (%lld targets)", (long long)step, (long long)k,
                  (long long)ddp_train_batch_targets(b));
    DDP_CHECK(tr->model->ops->forward_backward(tr->model, ddp_train_batch_input(b), dloss, k > 0,
                                               k == accum - 1));
    DDP_NVTX_POP();
    DDP_CHECK(tr->hook_status);
    /* after backward: a model's backward may read the batch (the GPT's
     * embedding backward reads its tokens) */
    DDP_CHECK(ddp_loader_release(tr->loader, item));
  }
  const double compute_end = ddp_clock_seconds();
  ddp_model_t *m = tr->model;
  const size_t n = m->n_params;
  const float unscale = ddp_amp_unscale(&tr->amp);
  /* A half reduce dtype widens the reduced gradients in a fused epilogue
   * that also unscales them and takes their squared norm, bucket by bucket
   * (train/reducer.h): no separate pass over the gradients for the norm,
   * and the optimizer sees unscaled gradients (grad_scale 1). Used when the
   * reducer's buckets are exactly the gradients [0, n) the norm is over. */
  const int fused = tr->fused_epilogue;
  if (fused) DDP_CHECK(ddp_reducer_set_scale(tr->reducer, unscale));
  double exposed_ms = 0.0;
  DDP_SPAN_BEGIN(DDP_SPAN_BUCKET_WAIT, -1, "wait for gradient buckets");
  DDP_CHECK(ddp_reducer_finish(tr->reducer, &exposed_ms));
  DDP_SPAN_END();
  w->compute_s += compute_end - t0 - wait_s;
  w->host_wait_s += tr->be->host_wait_s - host_wait0;
  if (step == tr->start_step) {
    tr->first_compute_s = compute_end - t0 - wait_s;
    tr->first_host_wait_s = tr->be->host_wait_s - host_wait0;
  }
  w->exposed_ms += exposed_ms;
  w->flops += info.cost_mean * tr->dist->world;
  w->imbalance += info.cost_mean > 0 ? info.cost_max / info.cost_mean : 1.0;
  w->useful += info.n_targets;
  w->padded += info.n_padded;
  w->loss_targets += (double)info.n_targets;

  /* The norm of the unscaled gradients (clipping sees the true norm); an
   * inf/NaN makes it non-finite, which is the loss scaler's overflow flag. */
  if (fused)
    DDP_CHECK(ddp_reducer_grad_sumsq(tr->reducer, tr->grad_sumsq));
  else
    DDP_CHECK(ddp_optim_grad_sumsq(tr->be, tr->grad_sumsq, m->grads, n, unscale, NULL));
  /* With a loss scaler an inf/NaN is an overflow: the step is skipped, not an error.
   * Without one it is an error: checked here on the CPU (a free read) and
   * under --detect-anomaly; on a GPU the optimizer skips such a step on the
   * device and the log interval reports it (checked_later), so the host
   * never waits for the device inside the step. */
  const int checked_later = tr->be->ops->kind != DDP_DEVICE_KIND_CPU && !tr->anomaly.detect;
  if (!tr->amp.scaler.enabled && !checked_later)
    DDP_CHECK(ddp_anomaly_check_grads(&tr->anomaly, tr->grad_sumsq));
  ddp_optim_step_args_t a = {.cfg = &tr->ocfg,
                             .params = m->params,
                             .grads = m->grads,
                             .state = tr->state,
                             .tensors = m->tensors,
                             .n_tensors = m->n_tensors,
                             .n = n,
                             .t = ddp_amp_optim_t(&tr->amp),
                             .lr = lr,
                             .grad_scale = fused ? 1.0f : unscale, /* fused: unscaled */
                             .grad_sumsq = tr->grad_sumsq,
                             .compute_params = m->compute_params,
                             .compute_dtype = m->precision,
                             .skip_nonfinite = tr->amp.scaler.enabled || checked_later};
  DDP_SPAN_BEGIN(DDP_SPAN_OPTIMIZER, -1, "optimizer");
  if (tr->zero.be) {
    /* --zero 1: this rank's owned weights, then everyone's gathered */
    DDP_CHECK(ddp_zero_step(&tr->zero, &a, tr->state, grad_comm(tr)));
    DDP_CHECK(ddp_zero_gather_weights(&tr->zero, grad_comm(tr)));
  } else {
    DDP_CHECK(ddp_optim_step(tr->be, tr->optim_plan, &a, NULL));
  }
  DDP_SPAN_END();
  DDP_CHECK(ddp_amp_after_step(&tr->amp, tr->be, tr->grad_sumsq, step));
  ddp_train_buffers_stepped(&tr->buffers);
  w->steps++;
  return DDP_OK;
}

/* Per-rank compute time of the window: slowest and fastest, with ranks. */
static ddp_status_t gather_compute(trainer_t *tr, double mine, double *max, double *min,
                                   int *slowest) {
  const int W = tr->dist->world;
  double stack[64];
  double *all = W <= 64 ? stack : malloc((size_t)W * sizeof *all);
  if (!all) DDP_FAIL(DDP_ERR_OOM, "out of host memory");
  ddp_comm_handle_t h;
  ddp_status_t st = ddp_comm_allgather(tr->comm, &mine, all, sizeof mine, NULL, &h);
  if (st == DDP_OK) st = ddp_comm_wait(tr->comm, h);
  if (st == DDP_OK) {
    *slowest = 0;
    *max = *min = all[0];
    for (int r = 1; r < W; ++r) {
      if (all[r] > *max) *max = all[r], *slowest = r;
      if (all[r] < *min) *min = all[r];
    }
  }
  if (all != stack) free(all);
  return st;
}

/* The log point: the one place the loss, grad norm and timings meet. */
static ddp_status_t log_progress(trainer_t *tr, int64_t step, window_t *w, float lr,
                                 totals_t *tot) {
  double loss_sum = 0.0;
  float sumsq = 0.0f;
  DDP_CHECK(tr->model->ops->take_loss(tr->model, &loss_sum));
  loss_sum += tr->pending_loss;
  tr->pending_loss = 0.0;
  DDP_CHECK(ddp_dist_sum_double(tr->dist, &loss_sum));
  if (!tr->amp.scaler.enabled) {
    /* steps the optimizer skipped on the device for a non-finite gradient
     * (GPU runs without a loss scaler: see train_step) */
    int64_t skipped = 0;
    DDP_CHECK(ddp_optim_plan_skipped_steps(
        tr->optim_plan ? tr->optim_plan : ddp_zero_first_plan(&tr->zero), &skipped));
    if (skipped > 0)
      DDP_FAIL(DDP_ERR_NUMERIC,
               "by step %lld: %lld step%s had a non-finite gradient norm; their weights were not "
               "updated. Lower --lr, use --grad-clip, or rerun with --detect-anomaly to name "
               "the layer",
               (long long)step + 1, (long long)skipped, skipped == 1 ? "" : "s");
  }
  DDP_CHECK(ddp_backend_copy(tr->be, &sumsq, tr->grad_sumsq, sizeof sumsq,
                             DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  DDP_CHECK(ddp_backend_sync(tr->be, NULL));
  const double dt = ddp_clock_seconds() - w->t0;
  const double ns = (double)w->steps;
  double cmax, cmin;
  int slowest;
  DDP_CHECK(gather_compute(tr, 1e3 * w->compute_s / ns, &cmax, &cmin, &slowest));
  ddp_comm_stats_t cs;
  take_comm_stats(tr, &cs);
  ddp_loader_stats_t ls;
  ddp_loader_get_stats(tr->loader, &ls);
  ddp_loader_reset_stats(tr->loader);

  const double loss = loss_sum / w->loss_targets, gnorm = sqrt((double)sumsq);
  const double tok_s = (double)w->useful / dt, ms = 1e3 * dt / ns;
  const double mfu = w->flops / dt / (tr->peak_gflops * 1e9 * tr->dist->world);
  const double pad = 1.0 - (double)w->useful / (double)w->padded;
  const double imb = w->imbalance / ns, comm_ms = cs.comm_ms / ns;
  const double exposed = w->exposed_ms / ns, wait_ms = ls.wait_ms / ns;
  tr->train_loss = loss;
  tot->compute_s += w->compute_s;
  tot->host_wait_s += w->host_wait_s;
  tot->exposed_ms += w->exposed_ms;
  tot->comm_ms += cs.comm_ms;
  tot->wait_ms += ls.wait_ms;
  tot->flops += w->flops;
  tot->imbalance += w->imbalance;
  if (imb > tot->imbalance_max) tot->imbalance_max = imb;
  tot->useful += w->useful;
  tot->padded += w->padded;
  tot->steps += w->steps;
  if (!isfinite(loss))
    DDP_FAIL(DDP_ERR_NUMERIC, "step %lld: the loss is %g; lower --lr or enable --grad-clip",
             (long long)step + 1, loss);
  const ddp_loss_scaler_state_t *ls_state = &tr->amp.scaler.state;
  char scale_note[64] = "", mfu_note[32] = "", time_note[64];
  if (tr->amp.scaler.enabled)
    snprintf(scale_note, sizeof scale_note, " | loss scale %g (%lld skipped)",
             (double)ls_state->scale, (long long)ls_state->skipped_steps);
  if (tr->have_flops) snprintf(mfu_note, sizeof mfu_note, " | MFU %.1f%%", 100.0 * mfu);
  ddp_progress_time_note(ddp_clock_seconds() - tr->start_mono, dt / ns, tr->end - (step + 1),
                         time_note, sizeof time_note);
  DDP_LOG_INFO(
      "step %5lld/%lld | loss %.4f | lr %.2e | grad-norm %.3f%s | %.0f %s/s | %.1f ms/step%s | "
      "pad %.1f%% | imb %.3f | comm %.1f ms (exposed %.1f) | data wait %.2f ms | %s",
      (long long)step + 1, (long long)tr->steps, loss, lr, gnorm, scale_note, tok_s, tr->unit, ms,
      mfu_note, 100.0 * pad, imb, comm_ms, exposed, wait_ms, time_note);
  DDP_CHECK(ddp_metrics_write(
      &tr->metrics, DDP_METRICS_STEP, "step", (double)step + 1, "loss", loss, "lr", (double)lr,
      "grad_norm", gnorm, tr->data.kind == DDP_BATCH_TOKENS ? "tokens" : "samples",
      (double)tot->useful, tr->rate_key, tok_s, "ms_per_step", ms, "mfu",
      tr->have_flops ? mfu : NAN, "pad_frac", pad, "imbalance", imb, "data_wait_ms", wait_ms,
      "comm_ms", comm_ms, "exposed_comm_ms", exposed, "compute_ms_max", cmax, "compute_ms_min",
      cmin, "slowest_rank", (double)slowest, "allreduce_per_step", (double)cs.n_allreduce / ns,
      "loss_scale", (double)ddp_amp_loss_scale(&tr->amp), "skipped_steps",
      (double)ls_state->skipped_steps, "peak_mem_mb", ddp_backend_peak_mem_mb(tr->be),
      "host_issue_ms", 1e3 * (w->compute_s - w->host_wait_s) / ns, NULL));
  *w = (window_t){.t0 = ddp_clock_seconds()};
  return DDP_OK;
}

/* An evaluation during training gets its own record, so a validation
 * curve can be drawn against steps and against the tokens seen so far. */
static ddp_status_t write_eval_record(trainer_t *tr, int64_t step, const eval_result_t *ev,
                                      int64_t useful) {
  const int tokens = tr->data.kind == DDP_BATCH_TOKENS;
  /* top5_acc last: without a top-5 its NULL key ends the list early */
  if (ev->n)
    return ddp_metrics_write(&tr->metrics, DDP_METRICS_EVAL, "step", (double)step + 1, "val_loss",
                             ev->val_loss, tokens ? "tokens" : "samples", (double)useful,
                             "top1_acc", ev->acc, isnan(ev->top5) ? NULL : "top5_acc", ev->top5,
                             NULL);
  return ddp_metrics_write(&tr->metrics, DDP_METRICS_EVAL, "step", (double)step + 1, "val_loss",
                           ev->val_loss, tokens ? "tokens" : "samples", (double)useful, NULL);
}

static ddp_status_t check_replicas(trainer_t *tr, int64_t step) {
  uint64_t h;
  if (tr->zero.be) DDP_CHECK(ddp_zero_gather_masters(&tr->zero, grad_comm(tr)));
  DDP_CHECK(ddp_train_params_hash(tr->model, tr->host_params, &h));
  char what[96];
  snprintf(what, sizeof what, "the parameters after step %lld (--check-replicas)",
           (long long)step + 1);
  if (ddp_dist_agree_u64(tr->dist, what, h) != DDP_OK)
    DDP_FAIL(DDP_ERR_MISMATCH,
             "replicas diverged by step %lld: the ranks named above hold different weights",
             (long long)step + 1);
  return DDP_OK;
}

/* DDPTRAIN_FAULT_PERTURB_RANK: the named rank nudges one weight, so tests
 * can prove that --check-replicas notices diverged replicas. */
static ddp_status_t maybe_perturb(trainer_t *tr) {
  double rank = -1;
  DDP_CHECK(ddp_env_get_double(DDP_ENV_FAULT_PERTURB_RANK, &rank));
  if ((int)rank != tr->dist->rank) return DDP_OK;
  float v;
  float *p = tr->model->params;
  DDP_CHECK(ddp_backend_copy(tr->be, &v, p, sizeof v, DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  v += 1e-3f;
  DDP_CHECK(ddp_backend_copy(tr->be, p, &v, sizeof v, DDP_COPY_KIND_HOST_TO_DEVICE, NULL));
  DDP_LOG_WARN("fault injection: rank %d perturbed one weight", tr->dist->rank);
  return DDP_OK;
}

/* One held-out answer per built-in task, as the model gave it greedily:
 * what "task accuracy" means, shown rather than told. */
static void log_task_examples(const ddp_task_scores_t *s) {
  for (int k = 0; k < DDP_BUILTIN_TASKS; ++k) {
    if (!s->example[k][0]) continue;
    if (s->expected[k][0])
      DDP_LOG_INFO("summary:   %-7s %s   wrong (the answer is %s)", ddp_builtin_task_name(k),
                   s->example[k], s->expected[k]);
    else
      DDP_LOG_INFO("summary:   %-7s %s   right", ddp_builtin_task_name(k), s->example[k]);
  }
}

static void print_summary(const trainer_t *tr, const totals_t *t, const eval_result_t *fe) {
  const double dt = t->t_end - t->t0, ns = (double)(t->steps ? t->steps : 1);
  const double tok_s = (double)t->useful / dt;
  const double step_ms = 1e3 * t->compute_s / ns + t->exposed_ms / ns;
  const int tokens = tr->data.kind == DDP_BATCH_TOKENS;
  char mfu_note[32] = "";
  if (tr->have_flops)
    snprintf(mfu_note, sizeof mfu_note, " | MFU %.1f%%",
             100.0 * t->flops / dt / (tr->peak_gflops * 1e9 * tr->dist->world));
  DDP_LOG_INFO(
      "summary: %lld steps in %.1f s on %d rank%s | %lld useful %s | %.0f %s/s "
      "(%.0f per rank)%s | peak mem %.1f MiB",
      (long long)t->steps, dt, tr->dist->world, tr->dist->world == 1 ? "" : "s",
      (long long)t->useful, tokens ? "tokens" : "samples", tok_s, tr->unit, tok_s / tr->dist->world,
      mfu_note, ddp_backend_peak_mem_mb(tr->be));
  DDP_LOG_INFO(
      "summary: per step %.1f ms compute, %.1f ms in collectives, %.2f ms exposed "
      "(%.1f%% of the step), %.2f ms waiting for data",
      1e3 * t->compute_s / ns, t->comm_ms / ns, t->exposed_ms / ns,
      step_ms > 0 ? 100.0 * (t->exposed_ms / ns) / step_ms : 0.0, t->wait_ms / ns);
  if (tr->be->ops->kind != DDP_DEVICE_KIND_CPU) {
    /* Launch gaps: when the host issues a step's work in less time than
     * the device runs it and never waits for the device to drain, the
     * device's queue is never empty, so no launch latency is exposed. */
    /* after the first step where there are others; its wall time is
     * taken as its compute time, which the search and allocations fill */
    const int skip = t->steps > 1;
    const double first_c = skip ? tr->first_compute_s : 0.0;
    const double n_after = ns - skip,
                 waited = t->host_wait_s - (skip ? tr->first_host_wait_s : 0.0);
    const double issue_ms = 1e3 * (t->compute_s - first_c - waited) / n_after,
                 wall_ms = 1e3 * (dt - first_c) / n_after;
    DDP_LOG_INFO(
        "summary: the host issued each step's forward and backward in %.1f ms (and "
        "waited %.2f ms for the device) of %.1f ms per step%s: %s",
        issue_ms, 1e3 * waited / n_after, wall_ms, skip ? " after the first" : "",
        issue_ms < 0.8 * wall_ms ? "launches stay ahead of the device"
                                 : "host-bound: launch gaps likely");
  }
  DDP_LOG_INFO("summary: padding %.1f%% | rank imbalance mean %.3f, worst window %.3f",
               t->padded ? 100.0 * (1.0 - (double)t->useful / (double)t->padded) : 0.0,
               t->imbalance / ns, t->imbalance_max);
  if (t->loop_allocs >= 0)
    DDP_LOG_INFO(
        "summary: the step loop made %lld backend allocations (%lld raw device "
        "allocations) after the first step",
        (long long)t->loop_allocs, (long long)t->loop_raw_allocs);
  ddp_train_graphs_report(tr->replay);
  if (fe->n) {
    char per_task[160] = "";
    if (tokens) { /* " (copy 61.0%, reverse 12.5%, ...)" for the tasks that occurred */
      size_t at = 0;
      for (int k = 0; k < DDP_BUILTIN_TASKS && at < sizeof per_task; ++k)
        if (fe->by_task.total[k])
          at += (size_t)snprintf(per_task + at, sizeof per_task - at, "%s%s %.1f%%",
                                 at ? ", " : " (", ddp_builtin_task_name(k),
                                 100.0 * fe->by_task.solved[k] / fe->by_task.total[k]);
      if (at && at < sizeof per_task) snprintf(per_task + at, sizeof per_task - at, ")");
    }
    char top5[32] = "";
    if (!isnan(fe->top5)) snprintf(top5, sizeof top5, ", top-5 %.1f%%", 100.0 * fe->top5);
    DDP_LOG_INFO(
        "summary: final train loss %.4f | val loss %.4f | %s %.1f%%%s on %lld held-out %s%s",
        tr->train_loss, fe->val_loss, tokens ? "task accuracy" : "top-1 accuracy", 100.0 * fe->acc,
        top5, (long long)fe->n, tokens ? "documents" : "records", per_task);
    if (tokens) log_task_examples(&fe->by_task);
  } else if (tr->val_sampler)
    DDP_LOG_INFO("summary: final train loss %.4f | val loss %.4f", tr->train_loss, fe->val_loss);
  else
    DDP_LOG_INFO("summary: final train loss %.4f", tr->train_loss);
}

/* After each step: periodic checkpoints, or the last one when the ranks
 * voted to stop (signo: this rank's stop signal, 0 if another rank's).
 * After a stop it returns DDP_OK when the checkpoint is on disk (the loop
 * then ends the run with DDP_ERR_INTERRUPTED, exit status 75: requeue and
 * resume) and DDP_ERR_PREEMPTED_UNSAVED when there is none (exit status
 * 76), the same on every rank. */
static ddp_status_t after_step(trainer_t *tr, int64_t step, int stop, int signo) {
  const ddp_ckpt_scaler_t scaler = loss_scaler_state(tr);
  /* the first step (and an evaluation's first batch) searched new shapes */
  ddp_train_conv_algos_save_new(&tr->conv_algos);
  if (stop) {
    DDP_LOG_INFO("preempted (%s) after step %lld: %s",
                 signo ? strsignal(signo) : "a stop signal on another rank", (long long)step + 1,
                 tr->o->save[0] ? "writing a checkpoint" : "no --save directory, nothing saved");
    ddp_train_ckpt_outcome_t got;
    DDP_CHECK(ddp_train_ckpt_save_final(&tr->ckpt, step + 1, &scaler, &got));
    if (got == DDP_TRAIN_CKPT_ON_DISK) {
      DDP_LOG_INFO(
          "preempted: the checkpoint of step %lld is on disk; exit status 75 (requeue "
          "and resume)",
          (long long)step + 1);
      return DDP_OK;
    }
    if (tr->dist->rank == 0)
      DDP_LOG_ERROR(
          "preempted after step %lld WITHOUT a checkpoint of it (%s): exit status 76, "
          "not 75; a requeued run would resume from an older checkpoint, if any, or "
          "start over",
          (long long)step + 1,
          got == DDP_TRAIN_CKPT_FAILED ? "its write failed, see above" : "no --save directory");
    return DDP_ERR_PREEMPTED_UNSAVED;
  }
  if (ddp_train_ckpt_due(&tr->ckpt, step + 1)) {
    ddp_timeline_begin(DDP_SPAN_CHECKPOINT, -1);
    DDP_CHECK(ddp_train_ckpt_save(&tr->ckpt, step + 1, &scaler, 0));
    ddp_timeline_end();
  }
  return DDP_OK;
}

static ddp_status_t run(trainer_t *tr) {
  const ddp_options_t *o = tr->o;
  tr->start_unix = ddp_metrics_unix_now();
  tr->start_mono = ddp_clock_seconds();
  DDP_CHECK(setup(tr));
  eval_result_t ev = {.val_loss = NAN};
  totals_t tot = {.t0 = ddp_clock_seconds(), .loop_allocs = -1, .loop_raw_allocs = -1};
  /* --stop-at ends this run early; the schedule still spans --steps. */
  int64_t end = o->stop_at > 0 && o->stop_at < tr->steps ? o->stop_at : tr->steps;
  if (end < tr->start_step) end = tr->start_step; /* never a checkpoint that rewinds the step */
  tr->end = end;
  if (tr->start_step >= end)
    DDP_LOG_INFO("resume: %lld steps already done; nothing to train", (long long)tr->start_step);
  DDP_CHECK(ddp_loader_start(tr->loader, tr->start_step * o->accum, end * o->accum));
  /* a bound on a step's spans: a block's forward and backward per micro-step
   * (blocks and buckets are each fewer than the tensors), a data wait each,
   * a bucket each, and a few singles */
  const size_t n_tensors = (size_t)tr->model->n_tensors;
  DDP_CHECK(ddp_train_trace_start(o, tr->comm, tr->be, tr->start_step, end,
                                  16 + n_tensors + (size_t)o->accum * (8 + 2 * n_tensors)));
  window_t w = {.t0 = ddp_clock_seconds()};
  for (int64_t step = tr->start_step; step < end; ++step) {
    DDP_CHECK(ddp_fault_maybe_inject(tr->dist->rank, step));
    const float lr = ddp_lr_schedule(step, (float)o->lr, (float)o->min_lr, o->warmup, tr->steps);
    ddp_timeline_step(step);
    DDP_SPAN_BEGIN(DDP_SPAN_STEP, -1, "step %lld", (long long)step);
    const double step_t0 = ddp_clock_seconds(), exposed0 = w.exposed_ms;
    DDP_CHECK(train_step(tr, step, &w, lr));
    DDP_SPAN_END();
    /* every rank on rank 0's convolution algorithms from here on (before
     * the allocation count starts: a rank may grow its workspace) */
    if (step == tr->start_step)
      DDP_CHECK(ddp_train_conv_algos_agree(&tr->conv_algos, tr->comm, tr->dist->world,
                                           tr->dist->rank));
    /* tuning re-creates the reducer: the allocation count starts after it */
    int tuned = 0;
    DDP_CHECK(ddp_bucket_tune_after_step(&tr->bucket_tune, step, end, step_t0,
                                         w.exposed_ms - exposed0, &tr->reducer, &tuned));
    if (step == tr->start_step || tuned) count_loop_allocs(tr, &tot, 1);
    /* the stop vote right after the step's own collectives, so the log
     * window that counts them also counts it */
    int stop = 0, signo = 0;
    DDP_CHECK(ddp_preempt_fault_sleep());
    DDP_CHECK(ddp_preempt_vote(tr->comm, tr->dist->world, &stop, &signo));
    if (step == 0) DDP_CHECK(maybe_perturb(tr));
    const int last = step + 1 == end;
    if ((step + 1) % o->log_every == 0 || last) DDP_CHECK(log_progress(tr, step, &w, lr, &tot));
    if (o->check_replicas > 0 && ((step + 1) % o->check_replicas == 0 || last))
      DDP_CHECK(check_replicas(tr, step));
    if (o->eval_every > 0 && (step + 1) % o->eval_every == 0 && !last) {
      const double e0 = ddp_clock_seconds();
      ddp_timeline_stop(); /* an evaluation's forwards are no training step's */
      DDP_CHECK(evaluate(tr, &ev));
      ddp_timeline_step(step);
      if (tr->val_sampler && !ev.n)
        DDP_LOG_INFO("step %5lld | val loss %.4f", (long long)step + 1, ev.val_loss);
      else if (tr->val_sampler && isnan(ev.top5))
        DDP_LOG_INFO("step %5lld | val loss %.4f | top-1 %.1f%%", (long long)step + 1, ev.val_loss,
                     100.0 * ev.acc);
      else if (tr->val_sampler)
        DDP_LOG_INFO("step %5lld | val loss %.4f | top-1 %.1f%% | top-5 %.1f%%",
                     (long long)step + 1, ev.val_loss, 100.0 * ev.acc, 100.0 * ev.top5);
      if (tr->val_sampler) DDP_CHECK(write_eval_record(tr, step, &ev, tot.useful + w.useful));
      const double spent = ddp_clock_seconds() - e0; /* evaluation time is not training time */
      w.t0 += spent;
      tot.t0 += spent;
    }
    if (o->sample_every > 0 && (step + 1) % o->sample_every == 0) {
      const double s0 = ddp_clock_seconds();
      DDP_CHECK(ddp_sample_every_run(&tr->sample_every, step + 1));
      const double sampled = ddp_clock_seconds() - s0; /* nor is sampling time */
      w.t0 += sampled;
      tot.t0 += sampled;
    }
    DDP_CHECK(after_step(tr, step, stop, signo));
    if (stop) return DDP_ERR_INTERRUPTED;
  }
  tot.t_end = ddp_clock_seconds();
  if (end - tr->start_step > 1) count_loop_allocs(tr, &tot, 0);
  DDP_CHECK(ddp_train_trace_finish(o, tr->dist, tr->comm));
  DDP_CHECK(ddp_loader_stop(tr->loader));
  const ddp_ckpt_scaler_t scaler = loss_scaler_state(tr);
  /* A failed final checkpoint does not stop the evaluation and the export
   * (the export is then the only copy of the weights); the run ends with
   * DDP_ERR_FINAL_UNSAVED (exit status 74) and says so last. */
  ddp_train_ckpt_outcome_t final_ckpt;
  DDP_CHECK(ddp_train_ckpt_save_final(&tr->ckpt, end, &scaler, &final_ckpt));
  if (end < tr->steps)
    DDP_LOG_INFO("--stop-at: stopped after step %lld of %lld", (long long)end,
                 (long long)tr->steps);
  eval_result_t fe;
  DDP_CHECK(evaluate(tr, &fe));
  ddp_train_conv_algos_save_new(&tr->conv_algos);
  if (tr->val_sampler && tr->data.kind == DDP_BATCH_TOKENS) {
    int n_docs = 0;
    DDP_CHECK(ddp_task_accuracy(tr->model, o->tokens_per_batch, (int)o->seq_len,
                                &tr->data.val.corpus, TASK_EVAL_DOCS, &fe.acc, &n_docs,
                                &fe.by_task));
    fe.n = n_docs;
  }
  print_summary(tr, &tot, &fe);
  const double rate = (double)tot.useful / (tot.t_end - tot.t0);
  if (fe.n)
    DDP_CHECK(ddp_metrics_write(
        &tr->metrics, DDP_METRICS_FINAL, "train_loss", tr->train_loss, "val_loss", fe.val_loss,
        tr->data.kind == DDP_BATCH_TOKENS ? "task_acc" : "top1_acc", fe.acc, tr->rate_key, rate,
        "peak_mem_mb", ddp_backend_peak_mem_mb(tr->be), "loop_allocs", (double)tot.loop_allocs,
        isnan(fe.top5) ? NULL : "top5_acc", fe.top5, NULL));
  else
    DDP_CHECK(ddp_metrics_write(&tr->metrics, DDP_METRICS_FINAL, "train_loss", tr->train_loss,
                                "val_loss", fe.val_loss, tr->rate_key, rate, "peak_mem_mb",
                                ddp_backend_peak_mem_mb(tr->be), "loop_allocs",
                                (double)tot.loop_allocs, NULL));
  if (o->dump_batches[0])
    DDP_CHECK(ddp_train_dump_batches(o->dump_batches, tr->dist, o->accum, tr->steps * o->accum,
                                     &tr->data, tr->sampler, o));
  if (o->export_path[0] && tr->zero.be)
    DDP_CHECK(ddp_zero_gather_masters(&tr->zero, grad_comm(tr)));
  if (o->export_path[0]) DDP_CHECK(ddp_train_buffers_sync(&tr->buffers, "the export", 1));
  if (o->export_path[0] && tr->dist->rank == 0) {
    DDP_CHECK(ddp_model_export(tr->model, o->export_path));
    DDP_LOG_INFO("exported %zu parameters to %s", tr->model->n_params, o->export_path);
  }
  if (final_ckpt == DDP_TRAIN_CKPT_FAILED) {
    if (tr->dist->rank == 0)
      DDP_LOG_ERROR(
          "the final checkpoint (step %lld) was NOT written to %s (see the warning "
          "above): exit status 74",
          (long long)end, o->save);
    return DDP_ERR_FINAL_UNSAVED;
  }
  return DDP_OK;
}

ddp_status_t ddp_train(const ddp_options_t *opts, const ddp_dist_t *dist, ddp_backend_t *be) {
  trainer_t tr = {.o = opts, .dist = dist, .be = be};
  ddp_status_t st = ddp_preempt_install();
  if (st == DDP_OK) st = run(&tr);
  ddp_preempt_restore();
  ddp_train_ckpt_destroy(&tr.ckpt);
  ddp_anomaly_destroy(&tr.anomaly);
  ddp_sample_every_destroy(&tr.sample_every);
  ddp_loader_destroy(tr.loader);
  ddp_metrics_close(&tr.metrics);
  ddp_timeline_destroy(); /* a run that failed mid-loop leaves its buffer */
  ddp_reducer_destroy(tr.reducer);
  ddp_bucket_tune_destroy(&tr.bucket_tune);
  ddp_comm_destroy(tr.grad_comm);
  ddp_comm_destroy(tr.comm);
  free(tr.host_params);
  ddp_backend_free(be, tr.grad_sumsq);
  ddp_backend_free(be, tr.state);
  ddp_optim_plan_destroy(tr.optim_plan);
  ddp_zero_destroy(&tr.zero);
  ddp_train_buffers_destroy(&tr.buffers);
  if (tr.model) tr.model->replay = NULL;
  ddp_graph_replay_destroy(tr.replay);
  ddp_model_destroy(tr.model);
  ddp_sampler_destroy(tr.sampler);
  ddp_sampler_destroy(tr.val_sampler);
  ddp_train_batch_destroy(&tr.val_batch);
  free(tr.val_outputs);
  ddp_eval_firsts_destroy(&tr.val_firsts);
  ddp_train_data_destroy(&tr.data);
  ddp_train_conv_algos_destroy(&tr.conv_algos);
  return st;
}
