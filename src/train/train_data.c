/* Data sources, samplers and micro-batches of a training run (see
 * train_data.h). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "train/train_data.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/log.h"
#include "core/hash.h"
#include "data/builtin_images.h"

/* Which files a --data/--val-data glob matched, so a pattern that caught
 * too few shards (or the wrong ones) shows before hours are spent. */
static void log_matched(const char *flag, const char *pattern, const ddp_corpus_t *c) {
  if (c->n_segs == 1)
    DDP_LOG_INFO("%s '%s': 1 shard file, %s", flag, pattern, c->segs[0].name);
  else
    DDP_LOG_INFO("%s '%s': %d shard files, first %s, last %s", flag, pattern, c->n_segs,
                 c->segs[0].name, c->segs[c->n_segs - 1].name);
}

static ddp_status_t load_tokens(const ddp_options_t *o, ddp_train_data_t *d) {
  const int T = (int)o->seq_len;
  if (o->data[0]) {
    DDP_CHECK(ddp_corpus_open(&d->train.corpus, o->data, T));
    log_matched("--data", o->data, &d->train.corpus);
    if (o->val_data[0]) {
      DDP_CHECK(ddp_corpus_open(&d->val.corpus, o->val_data, T));
      log_matched("--val-data", o->val_data, &d->val.corpus);
      if (d->val.corpus.vocab != d->train.corpus.vocab || d->val.corpus.eot != d->train.corpus.eot)
        DDP_FAIL(DDP_ERR_FORMAT, "--val-data has vocabulary %d / EOT %d but --data has %d / %d",
                 d->val.corpus.vocab, d->val.corpus.eot, d->train.corpus.vocab,
                 d->train.corpus.eot);
      d->have_val = 1;
    }
  } else {
    if (o->val_data[0])
      DDP_FAIL(DDP_ERR_INVALID_ARG, "--val-data needs --data (the built-in set has its own split)");
    ddp_builtin_mix_t mix;
    char why[256];
    if (ddp_builtin_mix_parse(o->tasks, &mix, why, sizeof why) != DDP_OK)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "--tasks: %s", why);
    DDP_CHECK(ddp_builtin_corpus(&d->train.corpus, (uint64_t)o->seed, &mix, DDP_SPLIT_TRAIN,
                                 DDP_BUILTIN_TRAIN_DOCS, T, T));
    DDP_CHECK(ddp_builtin_corpus(&d->val.corpus, (uint64_t)o->seed, &mix, DDP_SPLIT_VAL,
                                 DDP_BUILTIN_VAL_DOCS, T, T));
    d->have_val = 1;
  }
  d->shape.vocab = d->train.corpus.vocab;
  d->shape.seq_len = T;
  return DDP_OK;
}

static ddp_status_t load_records(const ddp_options_t *o, const ddp_model_ops_t *model,
                                 ddp_train_data_t *d) {
  if (model->load_records) {
    int have = 0;
    DDP_CHECK(model->load_records(o, DDP_SPLIT_TRAIN, &d->train.records, &have));
    if (!have) DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s supplied no training records", model->name);
    DDP_CHECK(model->load_records(o, DDP_SPLIT_VAL, &d->val.records, &d->have_val));
  } else {
    if (!o->data[0])
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "model %s trains on records: give --data FILE (safetensors with 'inputs' F32 "
               "(n, ...) and 'labels' I32 (n))",
               model->name);
    DDP_CHECK(ddp_records_open(&d->train.records, o->data));
    if (o->val_data[0]) {
      DDP_CHECK(ddp_records_open(&d->val.records, o->val_data));
      d->have_val = 1;
    }
  }
  const ddp_records_t *t = &d->train.records, *v = &d->val.records;
  if (d->have_val && (v->floats != t->floats || memcmp(v->shape, t->shape, sizeof t->shape) ||
                      v->n_classes != t->n_classes))
    DDP_FAIL(DDP_ERR_FORMAT,
             "the validation records (%s: %lld features, %d classes) do not match the training "
             "records (%s: %lld features, %d classes)",
             v->source, (long long)v->floats, v->n_classes, t->source, (long long)t->floats,
             t->n_classes);
  d->shape.record_ndim = t->ndim;
  memcpy(d->shape.record_shape, t->shape, sizeof t->shape);
  d->shape.record_floats = t->floats;
  d->shape.n_classes = t->n_classes;
  return DDP_OK;
}

/* Image shards (--data/--val-data) or the built-in image set, the
 * augmentation and the normalisation (docs/design.md §4.4). */
static ddp_status_t load_images(const ddp_options_t *o, ddp_train_data_t *d) {
  ddp_image_source_t *t = &d->train.images, *v = &d->val.images;
  if (o->data[0]) {
    DDP_CHECK(ddp_image_source_open(t, o->data));
    if (o->val_data[0]) {
      DDP_CHECK(ddp_image_source_open(v, o->val_data));
      d->have_val = 1;
    }
  } else {
    if (o->val_data[0])
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "--val-data needs --data (the built-in image set has its own split)");
    DDP_CHECK(
        ddp_image_source_builtin(t, (uint64_t)o->seed, DDP_SPLIT_TRAIN, DDP_BUILTIN_IMAGES_TRAIN));
    DDP_CHECK(
        ddp_image_source_builtin(v, (uint64_t)o->seed, DDP_SPLIT_VAL, DDP_BUILTIN_IMAGES_VAL));
    d->have_val = 1;
  }
  const ddp_image_shape_t *ts = &t->shape, *vs = &v->shape;
  if (d->have_val && memcmp(ts, vs, sizeof *ts) != 0)
    DDP_FAIL(DDP_ERR_FORMAT,
             "the validation images (%s: %dx%dx%d, %d classes) do not match the training images "
             "(%s: %dx%dx%d, %d classes)",
             v->source, vs->height, vs->width, vs->channels, vs->n_classes, t->source, ts->height,
             ts->width, ts->channels, ts->n_classes);
  d->images = 1;
  d->seed = (uint64_t)o->seed;
  d->fill_threads = (int)o->loader_threads;
  d->aug.crop_pad = o->crop_pad < 0 ? ddp_image_default_crop_pad(ts) : (int)o->crop_pad;
  d->aug.hflip = (int)o->hflip;
  ddp_image_source_set_pad_to(t, (int)o->pad_to);
  if (d->have_val) ddp_image_source_set_pad_to(v, (int)o->pad_to);
  if (strcmp(o->normalize, "none") != 0) {
    /* the training split's statistics, for evaluation too */
    float mean[DDP_IMG_MAX_CHANNELS], std[DDP_IMG_MAX_CHANNELS];
    ddp_image_source_channel_stats(t, mean, std);
    DDP_CHECK(ddp_image_source_set_normalization(t, mean, std));
    if (d->have_val) DDP_CHECK(ddp_image_source_set_normalization(v, mean, std));
  }
  d->shape.record_ndim = 3;
  d->shape.record_shape[0] = t->out_h;
  d->shape.record_shape[1] = t->out_w;
  d->shape.record_shape[2] = ts->channels;
  d->shape.record_shape[3] = 1;
  d->shape.record_floats = t->out_floats;
  d->shape.n_classes = ts->n_classes;
  return DDP_OK;
}

ddp_status_t ddp_train_data_load(const ddp_options_t *o, const ddp_model_ops_t *model,
                                 ddp_train_data_t *d) {
  memset(d, 0, sizeof *d);
  d->kind = model->batch_kind;
  d->shape.kind = d->kind;
  if (d->kind == DDP_BATCH_TOKENS) return load_tokens(o, d);
  return model->image_data ? load_images(o, d) : load_records(o, model, d);
}

void ddp_train_data_destroy(ddp_train_data_t *d) {
  ddp_corpus_destroy(&d->val.corpus);
  ddp_corpus_destroy(&d->train.corpus);
  ddp_records_destroy(&d->val.records);
  ddp_records_destroy(&d->train.records);
  ddp_image_source_destroy(&d->val.images);
  ddp_image_source_destroy(&d->train.images);
  d->have_val = 0;
}

void ddp_train_data_describe(const ddp_options_t *o, const ddp_train_data_t *d, char *buf,
                             size_t len) {
  if (d->kind == DDP_BATCH_TOKENS) {
    const ddp_corpus_t *c = &d->train.corpus;
    snprintf(buf, len, "%lld documents, %lld tokens, vocabulary %d (%s%s)", (long long)c->n_docs,
             (long long)c->n_tokens, c->vocab, o->data[0] ? "" : "built-in tasks ",
             o->data[0] ? o->data : o->tasks);
    return;
  }
  if (d->images) {
    const ddp_image_source_t *t = &d->train.images;
    const ddp_image_shape_t *sh = &t->shape;
    const int C = sh->channels;
    char norm[160] = "none (x/255)", canvas[48] = "", threads[64] = "loader threads auto";
    if (d->fill_threads > 0)
      snprintf(threads, sizeof threads, "%d loader thread%s%s", d->fill_threads,
               d->fill_threads == 1 ? "" : "s", o->loader_threads == 0 ? " (auto)" : "");
    if (t->out_h != sh->height || t->out_w != sh->width)
      snprintf(canvas, sizeof canvas, "centred on %dx%d; ", t->out_h, t->out_w);
    if (strcmp(o->normalize, "none") != 0) {
      int at = snprintf(norm, sizeof norm, "mean");
      for (int c = 0; c < C; ++c)
        at += snprintf(norm + at, sizeof norm - (size_t)at, " %.4f", (double)t->mean[c]);
      at += snprintf(norm + at, sizeof norm - (size_t)at, ", std");
      for (int c = 0; c < C; ++c)
        at += snprintf(norm + at, sizeof norm - (size_t)at, " %.4f", (double)t->std[c]);
    }
    snprintf(buf, len,
             "%lld images %dx%dx%d, %d classes (%s)%s; %saugmentation: crop-pad %d, hflip %d; "
             "normalisation: %s; %s",
             (long long)t->n, sh->height, sh->width, C, sh->n_classes, t->source,
             d->have_val ? "" : "; no validation split", canvas, d->aug.crop_pad, d->aug.hflip,
             norm, threads);
    return;
  }
  const ddp_records_t *r = &d->train.records;
  snprintf(buf, len, "%lld records of %lld features, %d classes (%s)%s", (long long)r->n,
           (long long)r->floats, r->n_classes, r->source,
           d->have_val ? "" : "; no validation split");
}

uint64_t ddp_train_data_fingerprint(const ddp_train_data_t *d, int split) {
  const ddp_train_split_t *s = split == DDP_SPLIT_VAL ? &d->val : &d->train;
  if (d->images) { /* the set, its normalisation and the augmentation */
    const uint64_t h = ddp_image_source_fingerprint(&s->images);
    const int64_t aug[2] = {d->aug.crop_pad, d->aug.hflip};
    return ddp_fnv1a64(h, aug, sizeof aug);
  }
  return d->kind == DDP_BATCH_TOKENS ? ddp_corpus_fingerprint(&s->corpus)
                                     : ddp_records_fingerprint(&s->records);
}

int ddp_loader_threads_auto(int on_gpu, int cpus) {
  const int spare = cpus - 1;
  return !on_gpu || spare < 1 ? 1 : spare < 8 ? spare : 8;
}

int ddp_affinity_cpus(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  const int n = CPU_COUNT(&set);
  return n > 0 ? n : 1;
}

int64_t ddp_train_batch_budget(const ddp_options_t *o, const ddp_train_data_t *d) {
  return d->kind == DDP_BATCH_TOKENS ? o->tokens_per_batch : o->batch_size;
}

ddp_status_t ddp_train_sampler_config(const ddp_options_t *o, const ddp_model_ops_t *model,
                                      const ddp_train_data_t *d, int world,
                                      ddp_sampler_config_t *cfg) {
  if (d->kind == DDP_BATCH_TOKENS && o->tokens_per_batch < o->seq_len)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "--tokens-per-batch %lld is smaller than --seq-len %lld: a full "
             "sequence would not fit in a micro-batch",
             (long long)o->tokens_per_batch, (long long)o->seq_len);
  memset(cfg, 0, sizeof *cfg);
  DDP_CHECK(ddp_sampler_kind_parse(o->sampler, &cfg->kind));
  cfg->seed = (uint64_t)o->seed;
  cfg->world = world;
  cfg->accum = (int)o->accum;
  cfg->chunk = o->bucket_chunk;
  if (d->kind == DDP_BATCH_TOKENS) {
    cfg->tokens_per_batch = o->tokens_per_batch;
    /* Rows of one token are possible but useless; half the budget bounds
     * the activation arena's per-row tables without limiting real batches. */
    cfg->max_rows = (int)(o->tokens_per_batch / 2);
  } else {
    /* a record is a row of one target: the budget is the row count */
    cfg->tokens_per_batch = o->batch_size;
    cfg->max_rows = (int)o->batch_size;
    /* equal counts on every rank at every step (sampler.h) */
    cfg->drop_remainder = 1;
  }
  if (model->cost) DDP_CHECK(model->cost(o, &d->shape, &cfg->cost_a, &cfg->cost_b));
  return DDP_OK;
}

ddp_status_t ddp_train_sampler_create(const ddp_train_data_t *d, int split,
                                      const ddp_sampler_config_t *cfg, ddp_sampler_t **out) {
  const ddp_train_split_t *s = split == DDP_SPLIT_VAL ? &d->val : &d->train;
  if (d->kind == DDP_BATCH_TOKENS) return ddp_sampler_create(&s->corpus, cfg, out);
  /* records and images: items of one target each (length 2), so T is 1;
   * evaluation scores every record: its last step wraps, and the repeats
   * are dropped before scoring (ddp_eval_firsts_apply) */
  ddp_sampler_config_t c = *cfg;
  if (split == DDP_SPLIT_VAL) c.drop_remainder = 0;
  if (d->images) return ddp_sampler_create_items(s->images.items, s->images.n, 1, &c, out);
  return ddp_sampler_create_items(s->records.items, s->records.n, 1, &c, out);
}

ddp_status_t ddp_train_batch_init(ddp_train_batch_t *b, const ddp_train_data_t *d,
                                  ddp_backend_t *be, const ddp_options_t *o,
                                  const ddp_sampler_t *s) {
  memset(b, 0, sizeof *b);
  b->kind = d->kind;
  const int rows = ddp_sampler_max_rows(s);
  if (d->kind == DDP_BATCH_RECORDS)
    return ddp_record_batch_init(&b->records, be, rows, d->shape.record_floats);
  return be ? ddp_batch_init_host(&b->tokens, be, o->tokens_per_batch, rows)
            : ddp_batch_init(&b->tokens, o->tokens_per_batch, rows);
}

void ddp_train_batch_destroy(ddp_train_batch_t *b) {
  if (b->kind == DDP_BATCH_TOKENS)
    ddp_batch_destroy(&b->tokens);
  else
    ddp_record_batch_destroy(&b->records);
}

/* Gathers the records the plan put in this micro-batch. */
static ddp_status_t fill_records(ddp_record_batch_t *b, const ddp_records_t *r, ddp_sampler_t *s,
                                 int64_t step, int rank, int micro) {
  int rows = 0;
  DDP_CHECK(ddp_sampler_rows(s, step, rank, micro, b->items, b->capacity, &rows, &b->info));
  const size_t row_bytes = (size_t)r->floats * sizeof *r->x;
  for (int i = 0; i < rows; ++i) {
    const int64_t k = b->items[i];
    memcpy(b->inputs + (size_t)i * (size_t)r->floats, r->x + (size_t)k * (size_t)r->floats,
           row_bytes);
    b->labels[i] = r->y[k];
  }
  b->B = rows;
  b->n_targets = rows;
  b->micro = micro;
  return DDP_OK;
}

/* Decodes the images the plan put in this micro-batch: augmented for
 * training, in the epoch of the step (so an item's pixels depend on
 * (seed, epoch, item) alone), plain for evaluation. */
static ddp_status_t fill_images(ddp_record_batch_t *b, const ddp_train_data_t *d,
                                const ddp_image_source_t *src, int split, ddp_sampler_t *s,
                                int64_t step, int rank, int micro) {
  int rows = 0;
  DDP_CHECK(ddp_sampler_rows(s, step, rank, micro, b->items, b->capacity, &rows, &b->info));
  const ddp_image_aug_t *aug = split == DDP_SPLIT_TRAIN ? &d->aug : NULL;
  DDP_CHECK(ddp_image_source_fill(src, aug, d->seed, b->info.epoch, b->items, rows, d->fill_threads,
                                  b->inputs, b->labels));
  b->B = rows;
  b->n_targets = rows;
  b->micro = micro;
  return DDP_OK;
}

ddp_status_t ddp_train_batch_fill(ddp_train_batch_t *b, const ddp_train_data_t *d, int split,
                                  ddp_sampler_t *s, int64_t step, int rank, int micro) {
  if (b->kind == DDP_BATCH_TOKENS) return ddp_sampler_fill(s, step, rank, micro, &b->tokens);
  const ddp_train_split_t *sp = split == DDP_SPLIT_VAL ? &d->val : &d->train;
  if (d->images) return fill_images(&b->records, d, &sp->images, split, s, step, rank, micro);
  return fill_records(&b->records, &sp->records, s, step, rank, micro);
}

ddp_status_t ddp_eval_firsts_init(ddp_eval_firsts_t *f, const ddp_train_data_t *d, ddp_sampler_t *s,
                                  int world, int rank) {
  *f = (ddp_eval_firsts_t){.rows_max = ddp_sampler_max_rows(s)};
  const int64_t n = d->images ? d->val.images.n : d->val.records.n;
  DDP_CHECK(ddp_sampler_steps_in_epoch(s, 0, &f->steps));
  ddp_status_t st = DDP_OK;
  uint8_t *seen = calloc((size_t)(n + 7) / 8, 1);
  int64_t *items = malloc((size_t)f->rows_max * sizeof *items);
  f->keep = calloc((size_t)f->steps * (size_t)f->rows_max, 1);
  f->step_targets = calloc((size_t)f->steps, sizeof *f->step_targets);
  if (!seen || !items || !f->keep || !f->step_targets)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, done, "evaluation plan: out of host memory for %lld records",
                  (long long)n);
  for (int64_t t = 0; t < f->steps; ++t)
    for (int r = 0; r < world; ++r) {
      int rows = 0;
      ddp_step_info_t info;
      DDP_CHECK_GOTO(ddp_sampler_rows(s, t, r, 0, items, f->rows_max, &rows, &info), st, done);
      for (int i = 0; i < rows; ++i) {
        const int64_t k = items[i];
        if (k < 0 || k >= n)
          DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, done,
                        "evaluation plan: record %lld of a split of %lld", (long long)k,
                        (long long)n);
        const uint8_t bit = (uint8_t)(1u << (k % 8));
        if (seen[k / 8] & bit) continue;
        seen[k / 8] |= bit;
        ++f->step_targets[t];
        if (r == rank) f->keep[t * f->rows_max + i] = 1;
      }
    }
done:
  free(items);
  free(seen);
  if (st != DDP_OK) ddp_eval_firsts_destroy(f);
  return st;
}

void ddp_eval_firsts_destroy(ddp_eval_firsts_t *f) {
  free(f->keep);
  free(f->step_targets);
  *f = (ddp_eval_firsts_t){0};
}

void ddp_eval_firsts_apply(const ddp_eval_firsts_t *f, int64_t step, ddp_record_batch_t *b) {
  const uint8_t *keep = f->keep + step * f->rows_max;
  const size_t row_floats = (size_t)b->floats;
  int kept = 0;
  for (int i = 0; i < b->B; ++i) {
    if (!keep[i]) continue;
    if (kept != i) {
      memmove(b->inputs + (size_t)kept * row_floats, b->inputs + (size_t)i * row_floats,
              row_floats * sizeof *b->inputs);
      b->labels[kept] = b->labels[i];
      b->items[kept] = b->items[i];
    }
    ++kept;
  }
  b->B = kept;
  b->n_targets = kept;
  b->info.n_targets = f->step_targets[step];
}
