/* The first micro-batch plan: shuffle windows per epoch, pack them in that
 * order under a padded-token budget, fill batches by global index.
 *
 * Deterministic by construction: epoch e's order is a Fisher-Yates shuffle
 * driven by the Philox stream derived from (seed, e), and packing is a greedy
 * pass over that order, so every rank and every resume computes the same
 * micro-batch for the same index without communicating (DESIGN.md, sampler
 * contract). Packing in shuffled order pads more than sorting by length
 * would; the length-bucketing sampler that replaces this plan fixes that.
 *
 * Because packing depends on the order, the number of micro-batches differs
 * between epochs, so finding the epoch of a global index needs the counts of
 * the epochs before it. They are learnt once, in order, and kept (8 bytes per
 * epoch); the packing of one epoch is cached, so filling consecutive indices
 * shuffles each epoch once. Batch buffers are sized from the budget up front:
 * filling never allocates. */
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/data.h"
#include "ddptrain/rng.h"

/* "sampler" in ASCII: the plan's stream, apart from the builtin data's. */
#define PLAN_STREAM UINT64_C(0x72656c706d6173)

void ddp_plan_destroy(ddp_plan_t *plan) {
  if (!plan) return;
  free(plan->perm);
  free(plan->batch_first);
  free(plan->batch_T);
  free(plan->batch_targets);
  free(plan->epoch_first);
  memset(plan, 0, sizeof *plan);
}

ddp_status_t ddp_plan_create(ddp_plan_t *plan, const ddp_corpus_t *corpus, uint64_t seed,
                             int64_t tokens_per_batch, int max_rows, int seq_len) {
  if (!plan || !corpus) DDP_FAIL(DDP_ERR_INVALID_ARG, "plan_create: NULL argument");
  memset(plan, 0, sizeof *plan);
  if (!corpus->windows || corpus->n_windows < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "plan: the corpus has no windows (not indexed?)");
  if (tokens_per_batch < 1 || tokens_per_batch > INT32_MAX)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "plan: --tokens-per-batch %lld is outside 1 .. %d",
             (long long)tokens_per_batch, INT32_MAX);
  if (seq_len < 1 || corpus->seq_len > seq_len)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "plan: --seq-len %d, but the corpus was cut into windows for seq_len %d", seq_len,
             corpus->seq_len);
  /* A window that cannot fit even alone would fail at whatever step first
   * draws it; find it now and say what to change. */
  int64_t longest = 0;
  for (int64_t i = 1; i < corpus->n_windows; ++i)
    if (corpus->windows[i].len > corpus->windows[longest].len) longest = i;
  const int64_t longest_T = corpus->windows[longest].len - 1;
  if (longest_T > tokens_per_batch)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "plan: window %lld has %lld tokens per row, more than the budget of "
             "--tokens-per-batch %lld; raise it to at least %lld or lower --seq-len",
             (long long)longest, (long long)longest_T, (long long)tokens_per_batch,
             (long long)longest_T);

  const int64_t n = corpus->n_windows;
  plan->corpus = corpus;
  plan->seed = seed;
  plan->tokens_per_batch = tokens_per_batch;
  plan->max_rows = max_rows > 0 && max_rows < tokens_per_batch ? max_rows : (int)tokens_per_batch;
  plan->seq_len = seq_len;
  plan->cached_epoch = -1;
  plan->epoch_first_cap = 16;
  plan->perm = malloc((size_t)n * sizeof *plan->perm);
  plan->batch_first = malloc((size_t)(n + 1) * sizeof *plan->batch_first);
  plan->batch_T = malloc((size_t)n * sizeof *plan->batch_T);
  plan->batch_targets = malloc((size_t)n * sizeof *plan->batch_targets);
  plan->epoch_first = malloc((size_t)plan->epoch_first_cap * sizeof *plan->epoch_first);
  if (!plan->perm || !plan->batch_first || !plan->batch_T || !plan->batch_targets ||
      !plan->epoch_first) {
    ddp_plan_destroy(plan);
    DDP_FAIL(DDP_ERR_OOM, "plan: out of memory for %lld windows", (long long)n);
  }
  plan->epoch_first[0] = 0;
  plan->n_epochs_known = 0;
  return DDP_OK;
}

/* Shuffles and packs epoch e into the cache. */
static void pack_epoch(ddp_plan_t *plan, int64_t e) {
  if (plan->cached_epoch == e) return;
  const ddp_corpus_t *c = plan->corpus;
  const int64_t n = c->n_windows;
  int64_t *perm = plan->perm;
  ddp_rng_t root, rng;
  ddp_rng_init(&root, plan->seed, PLAN_STREAM);
  ddp_rng_derive(&root, (uint64_t)e, &rng);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = (int64_t)ddp_rng_below(&rng, (uint64_t)(n - 1 - i), (uint64_t)i + 1);
    const int64_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }

  int64_t nb = 0, first = 0, rows = 0, T = 0, targets = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t tw = c->windows[perm[i]].len - 1;
    const int64_t grown_T = tw > T ? tw : T;
    if (rows > 0 && ((rows + 1) * grown_T > plan->tokens_per_batch || rows + 1 > plan->max_rows)) {
      plan->batch_first[nb] = first;
      plan->batch_T[nb] = (int32_t)T;
      plan->batch_targets[nb] = targets;
      ++nb;
      first = i;
      rows = T = targets = 0;
    }
    ++rows;
    if (tw > T) T = tw;
    targets += tw;
  }
  plan->batch_first[nb] = first;
  plan->batch_T[nb] = (int32_t)T;
  plan->batch_targets[nb] = targets;
  ++nb;
  plan->batch_first[nb] = n;
  plan->n_batches = nb;
  plan->cached_epoch = e;
}

/* Learns the micro-batch count of the next unknown epoch. */
static ddp_status_t learn_next_epoch(ddp_plan_t *plan) {
  const int64_t e = plan->n_epochs_known;
  if (e + 2 > plan->epoch_first_cap) {
    const int64_t cap = plan->epoch_first_cap * 2;
    int64_t *grown = realloc(plan->epoch_first, (size_t)cap * sizeof *grown);
    if (!grown)
      DDP_FAIL(DDP_ERR_OOM, "plan: out of memory for the table of %lld epochs", (long long)cap);
    plan->epoch_first = grown;
    plan->epoch_first_cap = cap;
  }
  pack_epoch(plan, e);
  plan->epoch_first[e + 1] = plan->epoch_first[e] + plan->n_batches;
  plan->n_epochs_known = e + 1;
  return DDP_OK;
}

/* Epoch and in-epoch index of global micro-batch g; packs that epoch. */
static ddp_status_t locate(ddp_plan_t *plan, int64_t g, int64_t *epoch, int64_t *j) {
  if (!plan || !plan->corpus) DDP_FAIL(DDP_ERR_INVALID_ARG, "plan: not created");
  if (g < 0) DDP_FAIL(DDP_ERR_INVALID_ARG, "plan: negative micro-batch index %lld", (long long)g);
  while (plan->epoch_first[plan->n_epochs_known] <= g) DDP_CHECK(learn_next_epoch(plan));
  int64_t lo = 0, hi = plan->n_epochs_known - 1; /* epoch_first[lo] <= g < epoch_first[hi+1] */
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (plan->epoch_first[mid] <= g)
      lo = mid;
    else
      hi = mid - 1;
  }
  pack_epoch(plan, lo);
  *epoch = lo;
  *j = g - plan->epoch_first[lo];
  return DDP_OK;
}

ddp_status_t ddp_plan_micro_batches_per_epoch(ddp_plan_t *plan, int64_t epoch, int64_t *count) {
  if (!plan || !plan->corpus || !count)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "plan_micro_batches_per_epoch: NULL argument");
  if (epoch < 0) DDP_FAIL(DDP_ERR_INVALID_ARG, "plan: negative epoch %lld", (long long)epoch);
  while (plan->n_epochs_known <= epoch) DDP_CHECK(learn_next_epoch(plan));
  *count = plan->epoch_first[epoch + 1] - plan->epoch_first[epoch];
  return DDP_OK;
}

ddp_status_t ddp_plan_peek(ddp_plan_t *plan, int64_t index, ddp_batch_info_t *info) {
  if (!info) DDP_FAIL(DDP_ERR_INVALID_ARG, "plan_peek: NULL info");
  int64_t e, j;
  DDP_CHECK(locate(plan, index, &e, &j));
  info->epoch = e;
  info->index_in_epoch = j;
  info->B = (int)(plan->batch_first[j + 1] - plan->batch_first[j]);
  info->T = plan->batch_T[j];
  info->n_targets = plan->batch_targets[j];
  return DDP_OK;
}

ddp_status_t ddp_plan_count_targets(ddp_plan_t *plan, int64_t first, int64_t count,
                                    int64_t *n_targets) {
  if (!n_targets || count < 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "plan_count_targets: NULL result or negative count");
  int64_t sum = 0;
  for (int64_t k = 0; k < count; ++k) {
    ddp_batch_info_t info;
    DDP_CHECK(ddp_plan_peek(plan, first + k, &info));
    sum += info.n_targets;
  }
  *n_targets = sum;
  return DDP_OK;
}

ddp_status_t ddp_batch_init(ddp_batch_t *batch, const ddp_plan_t *plan) {
  if (!batch || !plan || !plan->corpus)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "batch_init: NULL batch or plan");
  memset(batch, 0, sizeof *batch);
  const size_t cap = (size_t)plan->tokens_per_batch;
  batch->inputs = malloc(cap * sizeof *batch->inputs);
  batch->targets = malloc(cap * sizeof *batch->targets);
  batch->windows = malloc((size_t)plan->max_rows * sizeof *batch->windows);
  if (!batch->inputs || !batch->targets || !batch->windows) {
    ddp_batch_destroy(batch);
    DDP_FAIL(DDP_ERR_OOM, "batch: out of memory for %lld tokens", (long long)cap);
  }
  batch->capacity = plan->tokens_per_batch;
  batch->max_rows = plan->max_rows;
  batch->index = -1;
  return DDP_OK;
}

void ddp_batch_destroy(ddp_batch_t *batch) {
  if (!batch) return;
  free(batch->inputs);
  free(batch->targets);
  free(batch->windows);
  memset(batch, 0, sizeof *batch);
}

ddp_status_t ddp_plan_fill(ddp_plan_t *plan, int64_t index, ddp_batch_t *batch) {
  if (!batch || !batch->inputs) DDP_FAIL(DDP_ERR_INVALID_ARG, "plan_fill: batch not initialised");
  int64_t e, j;
  DDP_CHECK(locate(plan, index, &e, &j));
  if (batch->capacity < plan->tokens_per_batch || batch->max_rows < plan->max_rows)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "plan_fill: batch holds %lld tokens / %d rows, the plan needs %lld / %d",
             (long long)batch->capacity, batch->max_rows, (long long)plan->tokens_per_batch,
             plan->max_rows);
  const ddp_corpus_t *c = plan->corpus;
  const int64_t first = plan->batch_first[j];
  const int B = (int)(plan->batch_first[j + 1] - first);
  const int T = plan->batch_T[j];
  for (int r = 0; r < B; ++r) {
    const int64_t w = plan->perm[first + r];
    const ddp_window_t *win = &c->windows[w];
    const int32_t *src = c->tokens + win->start;
    const int tw = win->len - 1;
    int32_t *in = batch->inputs + (size_t)r * (size_t)T;
    int32_t *tg = batch->targets + (size_t)r * (size_t)T;
    memcpy(in, src, (size_t)tw * sizeof *in);
    memcpy(tg, src + 1, (size_t)tw * sizeof *tg);
    for (int t = tw; t < T; ++t) {
      in[t] = c->eot;
      tg[t] = -1;
    }
    batch->windows[r] = w;
  }
  batch->B = B;
  batch->T = T;
  batch->n_targets = plan->batch_targets[j];
  batch->n_padded = (int64_t)B * T;
  batch->epoch = e;
  batch->index = index;
  batch->index_in_epoch = j;
  return DDP_OK;
}
