/* ddptrain --plan-only: builds the first epoch's sampler plan for a given
 * world size and reports what it would cost to train on: micro-batches and
 * steps, padding, per-step load imbalance and the time the plan took. This
 * is how a user picks --tokens-per-batch and --bucket-chunk for a data set
 * before spending GPU hours, and how the sampler benchmark measures. */
#include <stdio.h>

#include "ddptrain/check.h"
#include "ddptrain/trainer.h"
#include "train/train_data.h"

static void print_text(FILE *out, const ddp_options_t *o, const ddp_corpus_t *c, int world,
                       const ddp_epoch_stats_t *s) {
  fprintf(out,
          "plan: %s sampler, world %d x accum %lld, %lld padded tokens per micro-batch, "
          "seq-len %lld\n",
          o->sampler, world, (long long)o->accum, (long long)o->tokens_per_batch,
          (long long)o->seq_len);
  fprintf(out, "  documents       %lld (%lld windows, %lld tokens)\n", (long long)c->n_docs,
          (long long)s->windows, (long long)c->n_tokens);
  fprintf(out, "  micro-batches   %lld per epoch (+%lld wrapped to complete the last step)\n",
          (long long)s->micro_batches, (long long)s->wrapped_micro_batches);
  fprintf(out, "  steps           %lld per epoch\n", (long long)s->steps);
  fprintf(out, "  wrapped rows    %lld (windows repeated to fill the last micro-batch)\n",
          (long long)s->wrapped_rows);
  fprintf(out, "  padding         %.2f%% of %lld padded tokens\n", 100.0 * s->pad_frac,
          (long long)s->padded);
  fprintf(out, "  imbalance       mean %.4f, worst %.4f (max/mean per-rank cost per step)\n",
          s->imbalance_mean, s->imbalance_max);
  fprintf(out, "  plan build      %.3f s, %.1f MiB (%.1f bytes per document)\n", s->build_seconds,
          (double)s->plan_bytes / 1048576.0, (double)s->plan_bytes / (double)c->n_docs);
}

static void print_json(FILE *out, const ddp_options_t *o, const ddp_corpus_t *c, int world,
                       const ddp_epoch_stats_t *s) {
  fprintf(out,
          "{\"sampler\": \"%s\", \"world\": %d, \"accum\": %lld, \"tokens_per_batch\": %lld, "
          "\"seq_len\": %lld, \"docs\": %lld, \"windows\": %lld, \"tokens\": %lld, "
          "\"micro_batches\": %lld, \"wrapped_micro_batches\": %lld, \"wrapped_rows\": %lld, "
          "\"steps\": %lld, \"useful_tokens\": %lld, \"padded_tokens\": %lld, "
          "\"pad_frac\": %.6f, \"imbalance_mean\": %.6f, \"imbalance_max\": %.6f, "
          "\"plan_seconds\": %.6f, \"plan_bytes\": %lld}\n",
          o->sampler, world, (long long)o->accum, (long long)o->tokens_per_batch,
          (long long)o->seq_len, (long long)c->n_docs, (long long)s->windows,
          (long long)c->n_tokens, (long long)s->micro_batches, (long long)s->wrapped_micro_batches,
          (long long)s->wrapped_rows, (long long)s->steps, (long long)s->useful,
          (long long)s->padded, s->pad_frac, s->imbalance_mean, s->imbalance_max, s->build_seconds,
          (long long)s->plan_bytes);
}

ddp_status_t ddp_plan_report(const ddp_options_t *o, const ddp_dist_t *dist, FILE *out) {
  const int world = o->world_size > 0 ? (int)o->world_size : dist->world;
  ddp_train_data_t d;
  ddp_sampler_t *s = NULL;
  ddp_status_t st = DDP_OK;
  DDP_CHECK_GOTO(ddp_train_data_load(o, &d), st, out);
  ddp_gpt_config_t mc;
  ddp_sampler_config_t cfg;
  DDP_CHECK_GOTO(ddp_train_model_config(o, d.train.vocab, &mc), st, out);
  DDP_CHECK_GOTO(ddp_train_sampler_config(o, &mc, world, &cfg), st, out);
  DDP_CHECK_GOTO(ddp_sampler_create(&d.train, &cfg, &s), st, out);
  ddp_epoch_stats_t stats;
  DDP_CHECK_GOTO(ddp_sampler_epoch_stats(s, 0, &stats), st, out);
  if (dist->rank == 0) {
    if (o->json)
      print_json(out, o, &d.train, world, &stats);
    else
      print_text(out, o, &d.train, world, &stats);
    fflush(out);
  }
out:
  ddp_sampler_destroy(s);
  ddp_train_data_destroy(&d);
  return st;
}
