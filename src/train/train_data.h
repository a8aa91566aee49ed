/* The trainer's data (internal): the training and validation splits of the
 * model's batch kind, the sampler over each, and the micro-batch buffers the
 * loader fills, shared by training, evaluation and --plan-only.
 *
 * Token models read token shards (--data/--val-data) or the built-in task
 * set; record models read record files (--data/--val-data) or the data set
 * their model supplies (load_records); image models (image_data) read image
 * shards (--data/--val-data) or the built-in image set. Records and images
 * are sampled with the epoch's remainder dropped (equal counts per rank). Both kinds go through one
 * sampler (data/sampler.h): token windows cost by length, records all alike. */
#ifndef DDPTRAIN_TRAIN_DATA_H
#define DDPTRAIN_TRAIN_DATA_H

#include "ddptrain/data.h"
#include "ddptrain/model.h"
#include "ddptrain/options.h"
#include "data/image_source.h"
#include "data/sampler.h"

/* One split: the corpus of a token model, the records of a record model,
 * or the images of an image model (a record model with image_data). */
typedef struct ddp_train_split {
  ddp_corpus_t corpus;
  ddp_records_t records;
  ddp_image_source_t images;
} ddp_train_split_t;

typedef struct ddp_train_data {
  ddp_batch_kind_t kind;
  ddp_train_split_t train, val;
  int have_val;
  ddp_data_shape_t shape; /* what the model is built for */
  /* image models: record batches are filled from `images`, training ones
   * augmented with `aug`, seeded with `seed` (docs/design.md §4.4) */
  int images;
  ddp_image_aug_t aug;
  uint64_t seed;
  /* threads that fill one micro-batch: --loader-threads, or 0 until the
   * trainer resolves "auto" (ddp_loader_threads_auto) */
  int fill_threads;
} ddp_train_data_t;

/* --loader-threads 0 (auto): on a GPU rank, the logical CPUs it may run on
 * less one for the thread that issues the device's work, at least 1 and at
 * most 8 (a ResNet-50 bf16 step on an H100 waited for one thread's fill:
 * 23 ms of a 25.9 ms step); on the CPU backend 1, since its math threads
 * already take the rank's cores. */
int ddp_loader_threads_auto(int on_gpu, int cpus);
/* The logical CPUs this process may run on (its affinity after binding),
 * at least 1. */
int ddp_affinity_cpus(void);

/* Loads the splits for `model` (see above). */
ddp_status_t ddp_train_data_load(const ddp_options_t *o, const ddp_model_ops_t *model,
                                 ddp_train_data_t *d);
void ddp_train_data_destroy(ddp_train_data_t *d);

/* One line naming the training data, for the start-up log. */
void ddp_train_data_describe(const ddp_options_t *o, const ddp_train_data_t *d, char *buf,
                             size_t len);
/* A fingerprint of split DDP_SPLIT_TRAIN or DDP_SPLIT_VAL (ranks compare it). */
uint64_t ddp_train_data_fingerprint(const ddp_train_data_t *d, int split);

/* The largest micro-batch in the model's unit: --tokens-per-batch padded
 * tokens, or --batch-size records. */
int64_t ddp_train_batch_budget(const ddp_options_t *o, const ddp_train_data_t *d);

/* The training sampler of the options for `world` ranks, costed with the
 * model's cost (FLOPs per micro-batch). */
ddp_status_t ddp_train_sampler_config(const ddp_options_t *o, const ddp_model_ops_t *model,
                                      const ddp_train_data_t *d, int world,
                                      ddp_sampler_config_t *cfg);
/* A sampler over split `split` (DDP_SPLIT_TRAIN / DDP_SPLIT_VAL). */
ddp_status_t ddp_train_sampler_create(const ddp_train_data_t *d, int split,
                                      const ddp_sampler_config_t *cfg, ddp_sampler_t **out);

/* ---- micro-batches ---------------------------------------------------------- */

/* A micro-batch of either kind: `tokens` or `records` is in use. */
typedef struct ddp_train_batch {
  ddp_batch_kind_t kind;
  ddp_batch_t tokens;
  ddp_record_batch_t records;
} ddp_train_batch_t;

/* Buffers for any micro-batch of sampler s; with `be`, in its host memory
 * for asynchronous copies (pinned on CUDA). */
ddp_status_t ddp_train_batch_init(ddp_train_batch_t *b, const ddp_train_data_t *d,
                                  ddp_backend_t *be, const ddp_options_t *o,
                                  const ddp_sampler_t *s);
void ddp_train_batch_destroy(ddp_train_batch_t *b);
/* Fills micro-batch `micro` of `rank` at global step `step` from split `split`. */
ddp_status_t ddp_train_batch_fill(ddp_train_batch_t *b, const ddp_train_data_t *d, int split,
                                  ddp_sampler_t *s, int64_t step, int rank, int micro);

/* Which rows of this rank's evaluation plan score a record for the first
 * time. A plan of whole steps repeats records to fill its last step (10,000
 * images in steps of 2 x 32 deal 10,048 rows); walking every rank's rows in
 * plan order (step, then rank) marks each repeat, so every rank drops the
 * same ones and each record counts exactly once across the ranks. */
typedef struct ddp_eval_firsts {
  uint8_t *keep;         /* [step * rows_max + row]: 1 for a first sight on this rank */
  int64_t *step_targets; /* [step]: first sights over all ranks (the step's normaliser) */
  int64_t steps;         /* of the epoch-0 plan */
  int rows_max;
} ddp_eval_firsts_t;
/* Only for record and image data; s is the validation sampler. */
ddp_status_t ddp_eval_firsts_init(ddp_eval_firsts_t *f, const ddp_train_data_t *d, ddp_sampler_t *s,
                                  int world, int rank);
void ddp_eval_firsts_destroy(ddp_eval_firsts_t *f);
/* Drops the rows of a record batch filled for `step` that are repeats,
 * keeping the others in order; B, n_targets and the step's global
 * n_targets follow (B may reach 0). */
void ddp_eval_firsts_apply(const ddp_eval_firsts_t *f, int64_t step, ddp_record_batch_t *b);

/* What the model's operations take: a ddp_batch_t or a ddp_record_batch_t. */
static inline const void *ddp_train_batch_input(const ddp_train_batch_t *b) {
  return b->kind == DDP_BATCH_TOKENS ? (const void *)&b->tokens : (const void *)&b->records;
}
/* The step the micro-batch belongs to, and its own targets and padded size. */
static inline const ddp_step_info_t *ddp_train_batch_info(const ddp_train_batch_t *b) {
  return b->kind == DDP_BATCH_TOKENS ? &b->tokens.info : &b->records.info;
}
static inline int64_t ddp_train_batch_targets(const ddp_train_batch_t *b) {
  return b->kind == DDP_BATCH_TOKENS ? b->tokens.n_targets : b->records.n_targets;
}

#endif
