/* The training loop (see ddptrain/trainer.h). Until data parallelism lands
 * every rank trains its own replica on the full plan (the default job runs
 * under mpirun all the same); the log names the rank count. */
#include "ddptrain/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddptrain/check.h"
#include "ddptrain/data.h"
#include "ddptrain/gpt.h"
#include "ddptrain/optim.h"
#include "ddptrain/safetensors.h"
#include "train/metrics.h"
#include "train/task_eval.h"
#include "train/train_data.h"

enum { TASK_EVAL_DOCS = 128 };

typedef struct trainer {
  const ddp_options_t *o;
  const ddp_dist_t *dist;
  ddp_backend_t *be;
  ddp_corpus_t train, val;
  int have_val;
  ddp_plan_t plan, val_plan;
  ddp_batch_t batch;
  ddp_gpt_t *model;
  ddp_optim_config_t ocfg;
  ddp_optim_segment_t *segs;
  float *state, *grad_sumsq; /* backend memory */
  ddp_metrics_t metrics;
  double peak_gflops;
  int64_t steps;
  double train_loss; /* of the last log window */
} trainer_t;

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ddp_status_t load_data(trainer_t *tr) {
  const ddp_options_t *o = tr->o;
  const int T = (int)o->seq_len;
  if (o->data[0]) {
    DDP_CHECK(ddp_train_load_glob(&tr->train, o->data, T));
    if (o->val_data[0]) {
      DDP_CHECK(ddp_train_load_glob(&tr->val, o->val_data, T));
      if (tr->val.vocab != tr->train.vocab || tr->val.eot != tr->train.eot)
        DDP_FAIL(DDP_ERR_FORMAT, "--val-data has vocabulary %d / EOT %d but --data has %d / %d",
                 tr->val.vocab, tr->val.eot, tr->train.vocab, tr->train.eot);
      tr->have_val = 1;
    }
  } else {
    if (o->val_data[0])
      DDP_FAIL(DDP_ERR_INVALID_ARG, "--val-data needs --data (the built-in set has its own split)");
    DDP_CHECK(ddp_builtin_corpus(&tr->train, (uint64_t)o->seed, DDP_SPLIT_TRAIN,
                                 DDP_BUILTIN_TRAIN_DOCS, T, T));
    DDP_CHECK(
        ddp_builtin_corpus(&tr->val, (uint64_t)o->seed, DDP_SPLIT_VAL, DDP_BUILTIN_VAL_DOCS, T, T));
    tr->have_val = 1;
  }
  return DDP_OK;
}

static ddp_status_t setup(trainer_t *tr) {
  const ddp_options_t *o = tr->o;
  if (o->tokens_per_batch < o->seq_len)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "--tokens-per-batch %lld is smaller than --seq-len %lld: a full "
             "sequence would not fit in a micro-batch",
             (long long)o->tokens_per_batch, (long long)o->seq_len);
  if (o->min_lr > o->lr)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--min-lr %g exceeds --lr %g", o->min_lr, o->lr);
  ddp_gpt_config_t mc = {.n_layer = (int)o->n_layer,
                         .n_head = (int)o->n_head,
                         .n_embd = (int)o->n_embd,
                         .max_seq_len = (int)o->seq_len};
  mc.vocab = 2; /* validated again below with the data's vocabulary */
  DDP_CHECK(ddp_gpt_config_validate(&mc));
  DDP_CHECK(load_data(tr));
  mc.vocab = tr->train.vocab;
  const int max_rows = (int)(o->tokens_per_batch / 2);
  DDP_CHECK(ddp_plan_create(&tr->plan, &tr->train, (uint64_t)o->seed, o->tokens_per_batch, max_rows,
                            (int)o->seq_len));
  if (tr->have_val)
    DDP_CHECK(ddp_plan_create(&tr->val_plan, &tr->val, (uint64_t)o->seed, o->tokens_per_batch,
                              max_rows, (int)o->seq_len));
  DDP_CHECK(ddp_batch_init(&tr->batch, &tr->plan));
  tr->steps = o->steps;
  if (tr->steps == 0) {
    int64_t per_epoch = 0;
    DDP_CHECK(ddp_plan_micro_batches_per_epoch(&tr->plan, 0, &per_epoch));
    tr->steps = (o->epochs > 0 ? o->epochs : 1) * per_epoch / o->accum;
    if (tr->steps < 1) tr->steps = 1;
  }
  DDP_CHECK(ddp_gpt_create(&tr->model, tr->be, &mc, o->tokens_per_batch));
  DDP_CHECK(ddp_gpt_init_weights(tr->model, (uint64_t)o->seed));

  ddp_optim_kind_t kind;
  if (ddp_optim_kind_parse(o->optimizer, &kind) != DDP_OK)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "unknown optimizer '%s'", o->optimizer);
  tr->ocfg = (ddp_optim_config_t){.kind = kind,
                                  .beta1 = (float)o->beta1,
                                  .beta2 = (float)o->beta2,
                                  .eps = 1e-8f,
                                  .weight_decay = (float)o->weight_decay,
                                  .momentum = (float)o->momentum,
                                  .nesterov = (int)o->nesterov,
                                  .max_grad_norm = (float)o->grad_clip};
  const int nt = ddp_gpt_num_tensors(tr->model);
  const size_t n = ddp_gpt_num_params(tr->model);
  tr->segs = calloc((size_t)nt, sizeof *tr->segs);
  if (!tr->segs) DDP_FAIL(DDP_ERR_OOM, "out of host memory");
  for (int i = 0; i < nt; ++i) {
    const ddp_gpt_tensor_t *t = ddp_gpt_tensor(tr->model, i);
    tr->segs[i] = (ddp_optim_segment_t){.offset = t->offset, .count = t->count, .decay = t->decay};
  }
  const size_t state_n = n * ddp_optim_state_per_param(&tr->ocfg);
  if (state_n) {
    DDP_CHECK(ddp_backend_alloc(tr->be, state_n * sizeof(float), (void **)&tr->state));
    DDP_CHECK(tr->be->ops->fill(tr->be, tr->state, DDP_DTYPE_F32, 0.0f, state_n, NULL));
  }
  DDP_CHECK(ddp_backend_alloc(tr->be, sizeof(float), (void **)&tr->grad_sumsq));
  DDP_CHECK(ddp_metrics_open(&tr->metrics, o->metrics));
  tr->peak_gflops = o->peak_gflops;
  if (tr->peak_gflops <= 0)
    DDP_CHECK(ddp_backend_measure_gemm_gflops(tr->be, tr->be->device < 0 ? 512 : 4096, 0.25,
                                              &tr->peak_gflops));
  DDP_LOG_INFO("data: %lld documents, %lld tokens, vocabulary %d (%s)", (long long)tr->train.n_docs,
               (long long)tr->train.n_tokens, tr->train.vocab,
               o->data[0] ? o->data : "built-in tasks: copy, reverse, sort, add");
  DDP_LOG_INFO(
      "model: GPT L%d H%d C%d T%d, %.2fM parameters, %.1f MiB activations; %s, "
      "%lld steps x %lld micro-batches of <= %lld tokens; peak %.1f GFLOP/s",
      mc.n_layer, mc.n_head, mc.n_embd, mc.max_seq_len, n / 1e6,
      ddp_gpt_activation_bytes(tr->model) / 1048576.0, ddp_optim_kind_name(kind),
      (long long)tr->steps, (long long)o->accum, (long long)o->tokens_per_batch, tr->peak_gflops);
  if (tr->dist->world > 1)
    DDP_LOG_INFO("%d ranks each train their own replica (data parallelism is not enabled yet)",
                 tr->dist->world);
  return DDP_OK;
}

/* Executed FLOPs of a micro-batch: padded tokens x (6N + 6 L C T). */
static double step_flops(const trainer_t *tr, int64_t padded, int T) {
  const ddp_gpt_config_t *c = ddp_gpt_config(tr->model);
  return (double)padded *
         (6.0 * (double)ddp_gpt_num_params(tr->model) + 6.0 * c->n_layer * c->n_embd * (double)T);
}

static ddp_status_t evaluate(trainer_t *tr, double *val_loss) {
  *val_loss = NAN;
  if (!tr->have_val) return DDP_OK;
  double loss = 0.0;
  int64_t targets = 0, per_epoch = 0;
  DDP_CHECK(ddp_plan_micro_batches_per_epoch(&tr->val_plan, 0, &per_epoch));
  ddp_batch_t b;
  DDP_CHECK(ddp_batch_init(&b, &tr->val_plan));
  ddp_status_t st = DDP_OK;
  for (int64_t i = 0; i < per_epoch && targets < tr->o->eval_tokens; ++i) {
    DDP_CHECK_GOTO(ddp_plan_fill(&tr->val_plan, i, &b), st, out);
    DDP_CHECK_GOTO(ddp_gpt_forward(tr->model, b.inputs, b.targets, b.B, b.T, 0, 0.0f), st, out);
    targets += b.n_targets;
  }
  DDP_CHECK_GOTO(ddp_gpt_take_loss(tr->model, &loss), st, out);
  *val_loss = targets ? loss / (double)targets : NAN;
out:
  ddp_batch_destroy(&b);
  return st;
}

typedef struct window {
  double t0, flops, loss_targets;
  int64_t useful, padded, steps;
} window_t;

static ddp_status_t train_step(trainer_t *tr, int64_t step, window_t *w, float lr) {
  const int64_t accum = tr->o->accum, first = step * accum;
  int64_t step_targets = 0;
  DDP_CHECK(ddp_plan_count_targets(&tr->plan, first, accum, &step_targets));
  if (step_targets <= 0)
    DDP_FAIL(DDP_ERR_FORMAT, "step %lld has no target tokens", (long long)step);
  const float dloss = 1.0f / (float)step_targets;
  for (int64_t k = 0; k < accum; ++k) {
    ddp_batch_t *b = &tr->batch;
    DDP_CHECK(ddp_plan_fill(&tr->plan, first + k, b));
    DDP_CHECK(ddp_gpt_forward(tr->model, b->inputs, b->targets, b->B, b->T, 1, dloss));
    DDP_CHECK(ddp_gpt_backward(tr->model, k > 0, k == accum - 1));
    w->flops += step_flops(tr, b->n_padded, b->T);
    w->useful += b->n_targets;
    w->padded += b->n_padded;
  }
  w->loss_targets += (double)step_targets;
  const size_t n = ddp_gpt_num_params(tr->model);
  DDP_CHECK(
      ddp_optim_grad_sumsq_cpu(tr->be, tr->grad_sumsq, ddp_gpt_grads(tr->model), n, 1.0f, NULL));
  ddp_optim_step_args_t a = {.cfg = &tr->ocfg,
                             .params = ddp_gpt_params(tr->model),
                             .grads = ddp_gpt_grads(tr->model),
                             .state = tr->state,
                             .segments = tr->segs,
                             .n_segments = ddp_gpt_num_tensors(tr->model),
                             .n = n,
                             .t = step + 1,
                             .lr = lr,
                             .grad_scale = 1.0f,
                             .grad_sumsq = tr->grad_sumsq};
  DDP_CHECK(ddp_optim_step_cpu(tr->be, &a, NULL));
  w->steps++;
  return DDP_OK;
}

/* The log point: the one place the loss and grad norm come to the host. */
static ddp_status_t log_progress(trainer_t *tr, int64_t step, window_t *w, float lr,
                                 int64_t *tokens_total) {
  double loss_sum = 0.0;
  float sumsq = 0.0f;
  DDP_CHECK(ddp_gpt_take_loss(tr->model, &loss_sum));
  DDP_CHECK(ddp_backend_copy(tr->be, &sumsq, tr->grad_sumsq, sizeof sumsq,
                             DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  DDP_CHECK(ddp_backend_sync(tr->be, NULL));
  const double dt = now_seconds() - w->t0;
  const double loss = loss_sum / w->loss_targets, gnorm = sqrt((double)sumsq);
  const double tok_s = w->useful / dt, ms = 1e3 * dt / (double)w->steps;
  const double mfu = w->flops / dt / (tr->peak_gflops * 1e9);
  *tokens_total += w->useful;
  tr->train_loss = loss;
  if (!isfinite(loss))
    DDP_FAIL(DDP_ERR_NUMERIC, "step %lld: the loss is %g; lower --lr or enable --grad-clip",
             (long long)step + 1, loss);
  DDP_LOG_INFO(
      "step %5lld/%lld | loss %.4f | lr %.2e | grad-norm %.3f | %.0f tok/s | %.1f ms/step "
      "| MFU %.1f%% | pad %.1f%%",
      (long long)step + 1, (long long)tr->steps, loss, lr, gnorm, tok_s, ms, 100.0 * mfu,
      100.0 * (1.0 - (double)w->useful / (double)w->padded));
  DDP_CHECK(ddp_metrics_write(&tr->metrics, 0, "step", (double)step + 1, "loss", loss, "lr",
                              (double)lr, "grad_norm", gnorm, "tokens", (double)*tokens_total,
                              "tok_per_s", tok_s, "ms_per_step", ms, "mfu", mfu, NULL));
  *w = (window_t){.t0 = now_seconds()};
  return DDP_OK;
}

/* The plan is a pure function of the micro-batch index, so the batches of
 * the run are rebuilt here rather than kept during it. */
static ddp_status_t dump_batches(trainer_t *tr, const char *path) {
  const int64_t n = tr->steps * tr->o->accum;
  ddp_st_tensor_t *t = calloc((size_t)(2 * n), sizeof *t);
  char *names = calloc((size_t)(2 * n), 48);
  int32_t **data = calloc((size_t)(2 * n), sizeof *data);
  ddp_status_t st = DDP_OK;
  if (!t || !names || !data) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "--dump-batches: out of memory");
  for (int64_t i = 0; i < n; ++i) {
    ddp_batch_t *b = &tr->batch;
    DDP_CHECK_GOTO(ddp_plan_fill(&tr->plan, i, b), st, out);
    for (int k = 0; k < 2; ++k) {
      const int64_t j = 2 * i + k;
      const size_t bytes = sizeof(int32_t) * (size_t)b->B * (size_t)b->T;
      if (!(data[j] = malloc(bytes)))
        DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "--dump-batches: out of memory");
      memcpy(data[j], k ? b->targets : b->inputs, bytes);
      snprintf(names + 48 * j, 48, "batch.%lld.%s", (long long)i, k ? "targets" : "inputs");
      t[j] = (ddp_st_tensor_t){.name = names + 48 * j,
                               .dtype = DDP_DTYPE_I32,
                               .ndim = 2,
                               .shape = {b->B, b->T},
                               .data = data[j]};
    }
  }
  char accum[24];
  snprintf(accum, sizeof accum, "%lld", (long long)tr->o->accum);
  const char *meta[] = {"accum", accum, NULL};
  DDP_CHECK_GOTO(ddp_safetensors_write(path, t, (int)(2 * n), meta), st, out);
  DDP_LOG_INFO("wrote %lld micro-batches to %s", (long long)n, path);
out:
  for (int64_t j = 0; data && j < 2 * n; ++j) free(data[j]);
  free(data);
  free(names);
  free(t);
  return st;
}

static ddp_status_t run(trainer_t *tr) {
  const ddp_options_t *o = tr->o;
  DDP_CHECK(setup(tr));
  double val_loss = NAN;
  int64_t tokens_total = 0;
  window_t w = {.t0 = now_seconds()};
  for (int64_t step = 0; step < tr->steps; ++step) {
    const float lr = ddp_lr_schedule(step, (float)o->lr, (float)o->min_lr, o->warmup, tr->steps);
    DDP_CHECK(train_step(tr, step, &w, lr));
    const int last = step + 1 == tr->steps;
    if ((step + 1) % o->log_every == 0 || last)
      DDP_CHECK(log_progress(tr, step, &w, lr, &tokens_total));
    if (o->eval_every > 0 && (step + 1) % o->eval_every == 0 && !last) {
      DDP_CHECK(evaluate(tr, &val_loss));
      if (tr->have_val) DDP_LOG_INFO("step %5lld | val loss %.4f", (long long)step + 1, val_loss);
      w.t0 = now_seconds(); /* evaluation time is not training time */
    }
  }
  /* Final figures: train_loss is that of the last log window. */
  DDP_CHECK(evaluate(tr, &val_loss));
  double acc = 0.0;
  int n_acc = 0;
  if (tr->have_val)
    DDP_CHECK(
        ddp_task_accuracy(tr->model, o->tokens_per_batch, &tr->val, TASK_EVAL_DOCS, &acc, &n_acc));
  if (n_acc)
    DDP_LOG_INFO("final: val loss %.4f | task accuracy %.1f%% on %d held-out documents", val_loss,
                 100.0 * acc, n_acc);
  else if (tr->have_val)
    DDP_LOG_INFO("final: val loss %.4f", val_loss);
  if (n_acc)
    DDP_CHECK(ddp_metrics_write(&tr->metrics, 1, "train_loss", tr->train_loss, "val_loss", val_loss,
                                "task_acc", acc, NULL));
  else
    DDP_CHECK(ddp_metrics_write(&tr->metrics, 1, "train_loss", tr->train_loss, "val_loss", val_loss,
                                NULL));
  if (o->dump_batches[0]) DDP_CHECK(dump_batches(tr, o->dump_batches));
  if (o->export_path[0]) {
    DDP_CHECK(ddp_gpt_export_safetensors(tr->model, o->export_path));
    DDP_LOG_INFO("exported %zu parameters to %s", ddp_gpt_num_params(tr->model), o->export_path);
  }
  return DDP_OK;
}

ddp_status_t ddp_train(const ddp_options_t *opts, const ddp_dist_t *dist, ddp_backend_t *be) {
  trainer_t tr = {.o = opts, .dist = dist, .be = be};
  ddp_status_t st = run(&tr);
  ddp_metrics_close(&tr.metrics);
  ddp_backend_free(be, tr.grad_sumsq);
  ddp_backend_free(be, tr.state);
  free(tr.segs);
  ddp_gpt_destroy(tr.model);
  ddp_batch_destroy(&tr.batch);
  if (tr.have_val) ddp_plan_destroy(&tr.val_plan);
  ddp_plan_destroy(&tr.plan);
  ddp_corpus_destroy(&tr.val);
  ddp_corpus_destroy(&tr.train);
  return st;
}
