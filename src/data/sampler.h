/* The distributed sampler: which windows form which micro-batch, and which
 * rank trains it at which step (docs/design.md §5.4, a contract).
 *
 * The plan of an epoch is a pure function of (seed, epoch, corpus, world,
 * accum, budget, chunk, cost): every rank computes the whole plan, so every
 * rank knows every step's global target count (the loss normaliser) without
 * communicating, and a run resumed on any world size continues from one
 * integer, the global step.
 *
 * Kind "bucket" (the default):
 *   1. shuffle the windows (Philox, keyed by seed and epoch);
 *   2. cut the shuffled order into chunks of `chunk` windows;
 *   3. sort each chunk by length, longest first (stable: ties keep the
 *      shuffled order);
 *   4. pack each chunk greedily into micro-batches within two budgets:
 *      rows x T <= budget (the memory bound) and cost <= the cost budget
 *      (below); a chunk's last, unfilled micro-batch goes back to a pool
 *      that is sorted and packed after all chunks (so partial batches do
 *      not scatter padding and small costs through the epoch); the pool's
 *      own last batch is topped up with windows from the start of the
 *      epoch's order, which then occur twice ("wrapped rows");
 *   5. shuffle the micro-batches and assemble steps of world x accum:
 *      those within 1/256 of the cost budget ("full cost": nearly all)
 *      keep the shuffled order; the cheaper ones are sorted by cost, and
 *      from the cheapest up, runs of world x accum neighbours whose
 *      imbalance is within a limit become steps of their own; the rest
 *      are dealt round-robin, costliest first, over the full-cost steps.
 *      The limit is the one (of 1 + k/2048, k < 64, or none) whose worse
 *      step, grouped or spread, is least. The steps are shuffled; if the
 *      micro-batch count is not a multiple of world x accum, the last,
 *      incomplete step stays last and is completed with the micro-batches
 *      just before it ("wrapped micro-batches");
 *   6. deal each step's micro-batches to ranks, exactly accum each,
 *      balancing per-rank cost: LPT (largest first onto the least loaded
 *      rank that still has room), then pairwise swaps that lower the most
 *      loaded rank while any does.
 *
 * Equal cost. A micro-batch of long rows costs more per token than one of
 * short rows (attention), so packing to the token budget alone leaves
 * micro-batch costs up to b T / a apart, which no deal can even out when
 * each rank gets one micro-batch a step. The cost budget is the token
 * budget filled with rows of the reference length, C = budget x (a + b
 * T_ref), T_ref being the longest length such that the rows shorter than
 * it hold at most 1% of the targets: the cheapest a full micro-batch of
 * the other 99% can be, so those can all reach it, and micro-batches of
 * long rows get fewer tokens instead. Packing closes a micro-batch only
 * when one more row of its length T would break a budget, so for T >=
 * T_ref its cost lies in (C - T (a + b T), C] (a row cap that binds
 * first, or a single row costing more than C, are the exceptions): a step
 * of such micro-batches, at any accum, has an imbalance below
 * C / (C - T (a + b T)) for its longest T. Long rows are coarse (one row
 * of 1024 is 6% of a 16384-token micro-batch; a row cap can leave rows of
 * one token at half the cost), hence step 5. A cheaper micro-batch idles
 * the other ranks for its shortfall wherever it goes, unless a whole step
 * of equally cheap ones lowers that step's maximum: so grouping pays where
 * a step's worth of neighbours in cost exists, and otherwise spreading
 * keeps every step's share of the idle time small. With the cost of padded
 * tokens (b = 0) the cost budget is the token budget.
 *
 * Dropping the remainder (drop_remainder, for fixed-size items: records
 * and images, which the trainer samples this way). Every item costs the
 * same, so the plan needs no wrap-around to balance anything: after step 1
 * an epoch keeps the first n - n mod (world x accum x R) items of its
 * shuffled order, R being the rows that fill a micro-batch, and drops the
 * rest (different items each epoch, since the shuffle is per epoch). Every
 * micro-batch then holds R items and every step world x accum micro-
 * batches: equal counts on every rank at every step, no wrapped rows or
 * micro-batches, and a step's target count (the loss normaliser) is always
 * world x accum x R. The number dropped depends on world x accum only as a
 * product, so W ranks x A micro-batches still equal 1 x WA. Fewer items
 * than one step is an error at create.
 *
 * Kind "random" is the common baseline kept for comparison: shuffled
 * windows, a fixed tokens_per_batch / seq_len rows per micro-batch padded to
 * the longest, dealt round-robin in order (DistributedSampler's way).
 *
 * Cost of a micro-batch = a * B*T + b * B*T^2: the work the model does on
 * it, dense layers plus causal attention, over the padded shape the backend
 * actually computes on. The trainer uses a = 6N, b = 6 L C (the FLOPs it
 * reports MFU with).
 *
 * Memory: 12 bytes per window (the epoch's order, its shuffle and a
 * scratch array kept for rebuilding) plus 16 bytes per micro-batch and 40
 * per step; building a plan also borrows 17 bytes per cheaper micro-batch
 * (step 5) while it runs. One epoch is kept; moving to another rebuilds.
 * Not thread safe: one thread (the loader's) uses a sampler at a time. */
#ifndef DDPTRAIN_SAMPLER_H
#define DDPTRAIN_SAMPLER_H

#include <stdint.h>

#include "ddptrain/data.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DDP_SAMPLER_BUCKET = 0, DDP_SAMPLER_RANDOM = 1 } ddp_sampler_kind_t;

/* "bucket" / "random" (ASCII case-insensitive); DDP_ERR_INVALID_ARG otherwise. */
ddp_status_t ddp_sampler_kind_parse(const char *name, ddp_sampler_kind_t *kind);
const char *ddp_sampler_kind_name(ddp_sampler_kind_t kind);

#define DDP_SAMPLER_DEFAULT_CHUNK 65536

typedef struct ddp_sampler_config {
  ddp_sampler_kind_t kind;
  uint64_t seed;
  int world, accum;         /* >= 1 */
  int64_t tokens_per_batch; /* budget on B * T of each micro-batch */
  int max_rows;             /* <= 0: the budget alone bounds B */
  int64_t chunk;            /* bucket: windows per sorted chunk; <= 0: default */
  double cost_a, cost_b;    /* both 0: a = 1, b = 0 (padded tokens) */
  /* Fixed-size items (records, images): 1 drops the epoch's remainder, see
   * "Dropping the remainder" above. Items must all have one length. */
  int drop_remainder;
} ddp_sampler_config_t;

typedef struct ddp_sampler ddp_sampler_t;

/* Checks the configuration against the corpus (every window must fit the
 * budget alone, in a row count the budget allows). The corpus is borrowed
 * and must outlive the sampler. */
ddp_status_t ddp_sampler_create(const ddp_corpus_t *corpus, const ddp_sampler_config_t *cfg,
                                ddp_sampler_t **out);
/* The same plan over any items with a length (2 .. max_len + 1, i.e. 1 ..
 * max_len targets): records are items of length 2. Such a sampler has no
 * corpus to read: ddp_sampler_rows says which items form a micro-batch,
 * and ddp_sampler_fill refuses. `items` is borrowed. */
ddp_status_t ddp_sampler_create_items(const ddp_window_t *items, int64_t n_items, int max_len,
                                      const ddp_sampler_config_t *cfg, ddp_sampler_t **out);
void ddp_sampler_destroy(ddp_sampler_t *s);

/* The rows of a batch buffer that can hold any micro-batch of this plan. */
int ddp_sampler_max_rows(const ddp_sampler_t *s);

typedef struct ddp_epoch_stats {
  int64_t windows;       /* in the corpus */
  int64_t dropped;       /* drop_remainder: items left out of the epoch */
  int64_t micro_batches; /* packed, before the wrap-around */
  int64_t steps;
  int64_t wrapped_micro_batches;
  int64_t wrapped_rows;
  int64_t useful, padded;               /* targets and B*T over the epoch's steps */
  double pad_frac;                      /* 1 - useful / padded */
  double imbalance_mean, imbalance_max; /* of cost_max / cost_mean per step */
  double build_seconds;                 /* wall time of building the plan */
  int64_t plan_bytes;                   /* host memory the sampler holds for the plan */
} ddp_epoch_stats_t;

ddp_status_t ddp_sampler_epoch_stats(ddp_sampler_t *s, int64_t epoch, ddp_epoch_stats_t *stats);
ddp_status_t ddp_sampler_steps_in_epoch(ddp_sampler_t *s, int64_t epoch, int64_t *steps);

/* A hash of the whole plan of an epoch (order, packing and deal). */
ddp_status_t ddp_sampler_epoch_digest(ddp_sampler_t *s, int64_t epoch, uint64_t *digest);

/* What every rank knows of global step `step`. */
ddp_status_t ddp_sampler_step_info(ddp_sampler_t *s, int64_t step, ddp_step_info_t *info);

/* Fills micro-batch `micro` (0 .. accum-1) of `rank` at global step `step`
 * into `batch` (no allocation), with batch->info set to the step's info. */
ddp_status_t ddp_sampler_fill(ddp_sampler_t *s, int64_t step, int rank, int micro,
                              ddp_batch_t *batch);
/* The item indices of that micro-batch (*rows of them, at most `capacity`)
 * and the step's info, for samplers of any items. */
ddp_status_t ddp_sampler_rows(ddp_sampler_t *s, int64_t step, int rank, int micro, int64_t *items,
                              int capacity, int *rows, ddp_step_info_t *info);

#ifdef __cplusplus
}
#endif
#endif
