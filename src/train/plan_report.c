/* ddptrain --plan-only: builds the first epoch's sampler plan for a given
 * world size and reports what it would cost to train on: micro-batches and
 * steps, padding, per-step load imbalance and the time the plan took. This
 * is how a user picks --tokens-per-batch and --bucket-chunk for a data set
 * before spending GPU hours, and how the sampler benchmark measures. It
 * needs the model's cost only (ddptrain/model.h), never a model instance.
 * With --scale it prints the scaling model's report instead
 * (train/scale_report.h). */
#include <stdio.h>

#include "ddptrain/check.h"
#include "train/scale_report.h"
#include "train/train_data.h"
#include "train/trainer.h"

/* The data's size in the text report's terms: documents (token data) or
 * records, and their tokens. */
static void data_counts(const ddp_train_data_t *d, int64_t *docs, int64_t *tokens) {
  if (d->kind == DDP_BATCH_TOKENS) {
    *docs = d->train.corpus.n_docs;
    *tokens = d->train.corpus.n_tokens;
  } else {
    *docs = d->images ? d->train.images.n : d->train.records.n;
    *tokens = *docs;
  }
}

static void print_text(FILE *out, const ddp_options_t *o, const ddp_train_data_t *d, int world,
                       const ddp_epoch_stats_t *s) {
  int64_t docs, tokens;
  data_counts(d, &docs, &tokens);
  fprintf(out,
          "plan: %s sampler, world %d x accum %lld, %lld padded tokens per micro-batch, "
          "seq-len %lld\n",
          o->sampler, world, (long long)o->accum, (long long)o->tokens_per_batch,
          (long long)o->seq_len);
  if (d->kind == DDP_BATCH_TOKENS)
    fprintf(out, "  documents       %lld (%lld windows, %lld tokens)\n", (long long)docs,
            (long long)s->windows, (long long)tokens);
  else
    fprintf(out, "  records         %lld (%lld per micro-batch)\n", (long long)docs,
            (long long)o->batch_size);
  fprintf(out, "  micro-batches   %lld per epoch (+%lld wrapped to complete the last step)\n",
          (long long)s->micro_batches, (long long)s->wrapped_micro_batches);
  fprintf(out, "  steps           %lld per epoch\n", (long long)s->steps);
  if (d->kind == DDP_BATCH_RECORDS)
    fprintf(out, "  dropped         %lld records per epoch (the remainder of whole steps)\n",
            (long long)s->dropped);
  fprintf(out, "  wrapped rows    %lld (windows repeated to fill the last micro-batch)\n",
          (long long)s->wrapped_rows);
  fprintf(out, "  padding         %.2f%% of %lld padded tokens\n", 100.0 * s->pad_frac,
          (long long)s->padded);
  fprintf(out, "  imbalance       mean %.4f, worst %.4f (max/mean per-rank cost per step)\n",
          s->imbalance_mean, s->imbalance_max);
  fprintf(out, "  plan build      %.3f s, %.1f MiB (%.1f bytes per document)\n", s->build_seconds,
          (double)s->plan_bytes / 1048576.0, (double)s->plan_bytes / (double)docs);
}

static void print_json(FILE *out, const ddp_options_t *o, const ddp_train_data_t *d, int world,
                       const ddp_epoch_stats_t *s) {
  int64_t docs, tokens;
  data_counts(d, &docs, &tokens);
  fprintf(out,
          "{\"sampler\": \"%s\", \"world\": %d, \"accum\": %lld, \"tokens_per_batch\": %lld, "
          "\"seq_len\": %lld, \"docs\": %lld, \"windows\": %lld, \"tokens\": %lld, "
          "\"micro_batches\": %lld, \"wrapped_micro_batches\": %lld, \"wrapped_rows\": %lld, "
          "\"steps\": %lld, \"useful_tokens\": %lld, \"padded_tokens\": %lld, "
          "\"pad_frac\": %.6f, \"imbalance_mean\": %.6f, \"imbalance_max\": %.6f, "
          "\"plan_seconds\": %.6f, \"plan_bytes\": %lld, \"dropped\": %lld}\n",
          o->sampler, world, (long long)o->accum, (long long)o->tokens_per_batch,
          (long long)o->seq_len, (long long)docs, (long long)s->windows, (long long)tokens,
          (long long)s->micro_batches, (long long)s->wrapped_micro_batches,
          (long long)s->wrapped_rows, (long long)s->steps, (long long)s->useful,
          (long long)s->padded, s->pad_frac, s->imbalance_mean, s->imbalance_max, s->build_seconds,
          (long long)s->plan_bytes, (long long)s->dropped);
}

ddp_status_t ddp_plan_report(const ddp_options_t *o, const ddp_dist_t *dist, FILE *out) {
  const int world = o->world_size > 0 ? (int)o->world_size : dist->world;
  const ddp_model_ops_t *model = ddp_model_find(o->model);
  if (!model) DDP_FAIL(DDP_ERR_INVALID_ARG, "--model %s is not registered", o->model);
  if (model->validate) DDP_CHECK(model->validate(o));
  ddp_train_data_t d;
  ddp_sampler_t *s = NULL;
  ddp_status_t st = DDP_OK;
  DDP_CHECK_GOTO(ddp_train_data_load(o, model, &d), st, out);
  if (o->scale) { /* the scaling model instead of the sampler plan */
    st = ddp_scale_report(o, dist, model, &d, out);
    goto out;
  }
  ddp_sampler_config_t cfg;
  DDP_CHECK_GOTO(ddp_train_sampler_config(o, model, &d, world, &cfg), st, out);
  DDP_CHECK_GOTO(ddp_train_sampler_create(&d, DDP_SPLIT_TRAIN, &cfg, &s), st, out);
  ddp_epoch_stats_t stats;
  DDP_CHECK_GOTO(ddp_sampler_epoch_stats(s, 0, &stats), st, out);
  if (dist->rank == 0) {
    if (o->json)
      print_json(out, o, &d, world, &stats);
    else
      print_text(out, o, &d, world, &stats);
    fflush(out);
  }
out:
  ddp_sampler_destroy(s);
  ddp_train_data_destroy(&d);
  return st;
}
