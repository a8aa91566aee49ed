/* The length-bucketing distributed sampler and the random baseline (see
 * data/sampler.h for the algorithm and the contract).
 *
 * Everything is integer arithmetic over the window index plus a Philox
 * stream per (seed, epoch, purpose), so the plan is bit-identical on every
 * rank and every run. Sorting is a stable counting sort on length (lengths
 * are bounded by seq_len + 1), which keeps a chunk's sort linear and makes
 * ties resolve by the shuffled order rather than by a library qsort's
 * whims. Costs are doubles computed the same way on every rank; the deal
 * compares them with a deterministic tie-break (the slot index), so equal
 * costs never make ranks disagree, and the step assembly's qsort of the
 * cheaper micro-batches orders by (cost, id), a total order, so that its
 * algorithm cannot change the result. */
#include "data/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddptrain/backend.h"
#include "ddptrain/check.h"
#include "ddptrain/rng.h"
#include "core/ascii.h"
#include "core/clock.h"
#include "core/hash.h"

/* Philox stream tags, apart from the built-in data's and each other's. */
#define STREAM_WINDOWS UINT64_C(0x73616d706c65722e) /* window shuffle */
#define STREAM_BATCHES UINT64_C(0x6d6963726f2e2e2e) /* micro-batch shuffle */
#define STREAM_STEPS UINT64_C(0x73746570732e2e2e)   /* step shuffle */

/* Micro-batches within 1/COST_BINS of the cost budget count as full-cost
 * when steps are assembled; the grouping limits tried there are 1 +
 * k / LIMIT_STEPS for k = 0 .. LIMIT_CANDIDATES - 1 (see order_steps). */
enum { COST_BINS = 256, LIMIT_STEPS = 2048, LIMIT_CANDIDATES = 64 };

typedef struct micro_batch {
  uint32_t first; /* into order[] */
  uint32_t rows;
  int32_t T;
} micro_batch_t;

typedef struct step_stat {
  int64_t targets, padded;
  double cost_max, cost_mean;
  int32_t slowest, wrapped;
} step_stat_t;

struct ddp_sampler {
  const ddp_corpus_t *corpus; /* token samplers: where ddp_sampler_fill reads; NULL for items */
  const ddp_window_t *items;  /* what the plan deals: the corpus's windows, or records */
  int64_t n_items;
  /* items an epoch plans: n_items, less the remainder dropped
   * (drop_remainder: the last n_items mod step_items of the shuffled order) */
  int64_t n_used;
  int64_t step_items; /* drop_remainder: items of one full step */
  int max_len;        /* an item's length is 2 .. max_len + 1 */
  ddp_sampler_config_t cfg;
  int max_rows;   /* effective */
  int fixed_rows; /* random kind: rows per micro-batch */
  /* bucket kind: the most a micro-batch may cost (sampler.h, "equal cost");
   * HUGE_VAL for the random kind, whose rows are fixed */
  double cost_budget;
  int64_t chunk;

  /* the cached epoch */
  int64_t epoch;      /* -1: none */
  uint32_t *order;    /* n_windows + max_rows: windows in micro-batch layout */
  uint32_t *shuffled; /* n_windows: the epoch's shuffled windows */
  uint32_t *scratch;  /* n_windows: the pool and the sort's temporary */
  uint32_t *counts;   /* seq_len + 2 */
  micro_batch_t *mb;
  int64_t n_mb, mb_cap;
  uint32_t *deal; /* n_steps * world * accum micro-batch ids, rank-major per step */
  step_stat_t *steps;
  int64_t n_steps, steps_cap;
  ddp_epoch_stats_t stats;

  /* first global step of each epoch learnt so far */
  int64_t *epoch_first;
  int64_t n_epochs_known, epoch_first_cap;
};

static const char *const kind_names[] = {"bucket", "random"};

ddp_status_t ddp_sampler_kind_parse(const char *name, ddp_sampler_kind_t *kind) {
  for (int i = 0; i < 2; ++i)
    if (name && ddp_ascii_ieq(name, kind_names[i])) {
      *kind = (ddp_sampler_kind_t)i;
      return DDP_OK;
    }
  DDP_FAIL(DDP_ERR_INVALID_ARG, "unknown sampler '%s' (expected bucket or random)",
           name ? name : "(null)");
}

const char *ddp_sampler_kind_name(ddp_sampler_kind_t kind) {
  return (unsigned)kind < 2 ? kind_names[kind] : "unknown";
}

void ddp_sampler_destroy(ddp_sampler_t *s) {
  if (!s) return;
  free(s->order);
  free(s->scratch);
  free(s->shuffled);
  free(s->counts);
  free(s->mb);
  free(s->deal);
  free(s->steps);
  free(s->epoch_first);
  free(s);
}

int ddp_sampler_max_rows(const ddp_sampler_t *s) {
  return s->max_rows;
}

ddp_status_t ddp_sampler_create(const ddp_corpus_t *c, const ddp_sampler_config_t *cfg,
                                ddp_sampler_t **out) {
  if (!c || !cfg || !out) DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler_create: NULL argument");
  *out = NULL;
  if (!c->windows || c->n_windows < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler: the corpus has no windows (not indexed?)");
  DDP_CHECK(ddp_sampler_create_items(c->windows, c->n_windows, c->seq_len, cfg, out));
  (*out)->corpus = c;
  return DDP_OK;
}

/* Rows shorter than the reference length hold at most this fraction of the
 * targets (see cost_budget). */
#define SHORT_ROWS_SHARE 0.01

/* The token budget filled with rows of the reference length T_ref, the
 * longest length such that the rows shorter than it hold at most 1% of the
 * corpus's targets: the cheapest per token that a micro-batch of all but
 * those few rows can be, so that nearly every micro-batch can reach it.
 * Not the shortest row itself: in a corpus of full windows and their
 * 1-token remainders that would take a row or more from every micro-batch
 * for the sake of 1% of the tokens (the cheaper micro-batches of the
 * shortest rows get steps of their own, order_steps). Uses s->counts as a
 * histogram of lengths. */
static double cost_budget(ddp_sampler_t *s) {
  const int L = s->max_len + 1;
  memset(s->counts, 0, ((size_t)L + 1) * sizeof *s->counts);
  int64_t targets = 0;
  for (int64_t i = 0; i < s->n_items; ++i) {
    s->counts[s->items[i].len]++;
    targets += s->items[i].len - 1;
  }
  int32_t T_ref = 1;
  int64_t below = 0; /* targets in rows shorter than len */
  for (int len = 2; len <= L; ++len) {
    if (s->counts[len] == 0) continue;
    T_ref = len - 1;
    below += (int64_t)s->counts[len] * (len - 1);
    if ((double)below > SHORT_ROWS_SHARE * (double)targets) break;
  }
  const double budget = (double)s->cfg.tokens_per_batch;
  /* the operations of cost_of(budget / T_ref rows, T_ref) */
  return s->cfg.cost_a * budget + s->cfg.cost_b * budget * (double)T_ref;
}

static int fits(const ddp_sampler_t *s, int64_t rows, int32_t T);

/* drop_remainder: every micro-batch is full (all items are alike, so one
 * row count R fills a micro-batch) and every step is world x accum of them,
 * so an epoch keeps the largest multiple of world x accum x R items of its
 * shuffled order and drops the rest. */
static ddp_status_t plan_drop(ddp_sampler_t *s) {
  const int32_t len = s->items[0].len;
  for (int64_t i = 1; i < s->n_items; ++i)
    if (s->items[i].len != len)
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "sampler: dropping the remainder needs items of one size; item %lld has length "
               "%d, item 0 %d",
               (long long)i, s->items[i].len, len);
  int64_t rows = s->fixed_rows;
  if (s->cfg.kind == DDP_SAMPLER_BUCKET) /* what packing closes a micro-batch at */
    for (rows = 1; rows < s->max_rows && fits(s, rows + 1, len - 1);) ++rows;
  s->step_items = (int64_t)s->cfg.world * s->cfg.accum * rows;
  if (s->n_items < s->step_items)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "sampler: %lld samples do not fill one step of %d ranks x %d micro-batches x %lld "
             "samples (%lld); lower --batch-size or --accum, or use fewer ranks",
             (long long)s->n_items, s->cfg.world, s->cfg.accum, (long long)rows,
             (long long)s->step_items);
  s->n_used = s->n_items - s->n_items % s->step_items;
  return DDP_OK;
}

ddp_status_t ddp_sampler_create_items(const ddp_window_t *items, int64_t n_items, int max_len,
                                      const ddp_sampler_config_t *cfg, ddp_sampler_t **out) {
  if (!items || !cfg || !out) DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler_create: NULL argument");
  *out = NULL;
  if (n_items < 1) DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler: nothing to sample (0 items)");
  if (max_len < 1 || max_len > 1 << 24)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler: item length bound %d is outside 1 .. 2^24", max_len);
  for (int64_t i = 0; i < n_items; ++i)
    if (items[i].len < 2 || items[i].len > max_len + 1)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler: item %lld has length %d, outside 2 .. %d",
               (long long)i, items[i].len, max_len + 1);
  if ((unsigned)cfg->kind > DDP_SAMPLER_RANDOM)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler: unknown kind %d", (int)cfg->kind);
  if (cfg->world < 1 || cfg->accum < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler: world size %d and accum %d must be at least 1",
             cfg->world, cfg->accum);
  if ((int64_t)cfg->world * cfg->accum > INT32_MAX / 2)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler: world x accum = %lld is too large",
             (long long)cfg->world * cfg->accum);
  if (cfg->tokens_per_batch < 1 || cfg->tokens_per_batch > INT32_MAX)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler: --tokens-per-batch %lld is outside 1 .. %d",
             (long long)cfg->tokens_per_batch, INT32_MAX);
  if (cfg->cost_a < 0 || cfg->cost_b < 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler: cost coefficients %g, %g must not be negative",
             cfg->cost_a, cfg->cost_b);
  const int64_t budget = cfg->tokens_per_batch;
  const int T_max = max_len;
  /* A window that cannot fit even alone would fail at whatever step first
   * draws it; find it now and say what to change. */
  int64_t longest = 0;
  for (int64_t i = 1; i < n_items; ++i)
    if (items[i].len > items[longest].len) longest = i;
  const int64_t longest_T = items[longest].len - 1;
  if (longest_T > budget)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "sampler: window %lld has %lld tokens per row, more than the budget of "
             "--tokens-per-batch %lld; raise it to at least %lld or lower --seq-len",
             (long long)longest, (long long)longest_T, (long long)budget, (long long)longest_T);
  const int rows_cap = cfg->max_rows > 0 && cfg->max_rows < budget ? cfg->max_rows : (int)budget;
  if ((uint64_t)n_items + (uint64_t)rows_cap >= UINT32_MAX)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "sampler: %lld windows exceed the %u a plan can index; split the data set",
             (long long)n_items, UINT32_MAX - (unsigned)rows_cap);

  ddp_sampler_t *s = calloc(1, sizeof *s);
  if (!s) DDP_FAIL(DDP_ERR_OOM, "sampler: out of memory");
  s->items = items;
  s->n_items = n_items;
  s->max_len = max_len;
  s->cfg = *cfg;
  if (s->cfg.cost_a == 0 && s->cfg.cost_b == 0) s->cfg.cost_a = 1.0;
  s->max_rows = rows_cap;
  s->chunk = cfg->chunk > 0 ? cfg->chunk : DDP_SAMPLER_DEFAULT_CHUNK;
  if (cfg->kind == DDP_SAMPLER_RANDOM) {
    int64_t r = budget / T_max;
    if (r < 1) r = 1;
    if (r > rows_cap) r = rows_cap;
    s->fixed_rows = (int)r;
  }
  s->epoch = -1;
  const size_t n = (size_t)n_items;
  s->order = malloc((n + (size_t)rows_cap) * sizeof *s->order);
  s->scratch = malloc(n * sizeof *s->scratch);
  s->shuffled = malloc(n * sizeof *s->shuffled);
  s->counts = malloc(((size_t)T_max + 3) * sizeof *s->counts); /* keys 0 .. seq_len + 2 */
  s->epoch_first_cap = 16;
  s->epoch_first = malloc((size_t)s->epoch_first_cap * sizeof *s->epoch_first);
  if (!s->order || !s->scratch || !s->shuffled || !s->counts || !s->epoch_first) {
    ddp_sampler_destroy(s);
    DDP_FAIL(DDP_ERR_OOM, "sampler: out of memory for a plan of %lld windows", (long long)n_items);
  }
  s->epoch_first[0] = 0;
  s->cost_budget = cfg->kind == DDP_SAMPLER_BUCKET ? cost_budget(s) : HUGE_VAL;
  s->n_used = n_items;
  if (cfg->drop_remainder) {
    const ddp_status_t st = plan_drop(s);
    if (st != DDP_OK) {
      ddp_sampler_destroy(s);
      return st;
    }
  }
  *out = s;
  return DDP_OK;
}

/* ---- building an epoch ------------------------------------------------------ */

static int32_t wlen(const ddp_sampler_t *s, uint32_t w) {
  return s->items[w].len;
}

static void shuffle_u32(uint32_t *a, int64_t n, ddp_rng_t *rng) {
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = (int64_t)ddp_rng_below(rng, (uint64_t)(n - 1 - i), (uint64_t)i + 1);
    const uint32_t t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

/* Stable counting sort of a[0..n) by window length, longest first; tmp
 * holds n. */
static void sort_by_length(ddp_sampler_t *s, uint32_t *a, int64_t n, uint32_t *tmp) {
  const int L = s->max_len + 1; /* lengths are 2 .. L */
  uint32_t *cnt = s->counts;
  memset(cnt, 0, ((size_t)L + 2) * sizeof *cnt);
  for (int64_t i = 0; i < n; ++i) cnt[L - wlen(s, a[i])]++; /* key 0 = longest */
  uint32_t sum = 0;
  for (int k = 0; k <= L; ++k) {
    const uint32_t c = cnt[k];
    cnt[k] = sum;
    sum += c;
  }
  for (int64_t i = 0; i < n; ++i) tmp[cnt[L - wlen(s, a[i])]++] = a[i];
  memcpy(a, tmp, (size_t)n * sizeof *a);
}

/* Cost of rows x T padded tokens: a * B*T + b * B*T^2, in this order of
 * operations everywhere, so that comparisons against the cost budget give
 * the same answer on every rank. */
static double cost_of(const ddp_sampler_t *s, int64_t rows, int32_t T) {
  const double tokens = (double)rows * (double)T;
  return s->cfg.cost_a * tokens + s->cfg.cost_b * tokens * (double)T;
}

/* May a micro-batch grow to rows x T? Both budgets: padded tokens (the
 * memory bound) and cost (so that micro-batches weigh the same). */
static int fits(const ddp_sampler_t *s, int64_t rows, int32_t T) {
  return rows * T <= s->cfg.tokens_per_batch && rows <= s->max_rows &&
         cost_of(s, rows, T) <= s->cost_budget;
}

static ddp_status_t push_mb(ddp_sampler_t *s, uint32_t first, uint32_t rows, int32_t T) {
  if (s->n_mb == s->mb_cap) {
    const int64_t cap = s->mb_cap ? 2 * s->mb_cap : 1024;
    micro_batch_t *g = realloc(s->mb, (size_t)cap * sizeof *g);
    if (!g) DDP_FAIL(DDP_ERR_OOM, "sampler: out of memory for %lld micro-batches", (long long)cap);
    s->mb = g;
    s->mb_cap = cap;
  }
  s->mb[s->n_mb++] = (micro_batch_t){.first = first, .rows = rows, .T = T};
  return DDP_OK;
}

/* Greedy packing of src[0..n) (sorted longest first, so the first row of a
 * batch sets its T) appended to order[*at..]. Every batch but the last is
 * closed because the next window did not fit. The last one is returned open
 * (*open_first, *open_rows, *open_T) for the caller to decide about. */
static ddp_status_t pack_sorted(ddp_sampler_t *s, const uint32_t *src, int64_t n, uint32_t *at,
                                uint32_t *open_first, uint32_t *open_rows, int32_t *open_T) {
  uint32_t first = *at, rows = 0;
  int32_t T = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = wlen(s, src[i]) - 1;
    const int32_t grown = t > T ? t : T;
    if (rows > 0 && !fits(s, (int64_t)rows + 1, grown)) {
      DDP_CHECK(push_mb(s, first, rows, T));
      first = *at;
      rows = 0;
      T = 0;
    }
    s->order[(*at)++] = src[i];
    ++rows;
    if (t > T) T = t;
  }
  *open_first = first;
  *open_rows = rows;
  *open_T = T;
  return DDP_OK;
}

/* Could the open batch take one more row of its own length? */
static int has_room(const ddp_sampler_t *s, uint32_t rows, int32_t T) {
  return fits(s, (int64_t)rows + 1, T);
}

/* Tops up the last batch with windows from the start of the epoch's order
 * (shuffled[]) while the budget allows, T allowed to grow. */
static int64_t top_up(ddp_sampler_t *s, const uint32_t *shuffled, uint32_t *at, uint32_t *rows,
                      int32_t *T, uint32_t target_rows) {
  const int64_t n = s->n_used;
  int64_t added = 0;
  for (int64_t i = 0; i < n && *rows < target_rows; ++i) {
    const int32_t t = wlen(s, shuffled[i]) - 1;
    const int32_t grown = t > *T ? t : *T;
    if (!fits(s, (int64_t)*rows + 1, grown)) continue;
    s->order[(*at)++] = shuffled[i];
    ++*rows;
    *T = grown;
    ++added;
  }
  return added;
}

/* Closes the epoch's last open batch: topped up from the start of the
 * epoch's order when it has room, so no step carries a near-empty batch. */
static ddp_status_t close_last(ddp_sampler_t *s, const uint32_t *shuffled, uint32_t at,
                               uint32_t first, uint32_t rows, int32_t T, uint32_t target_rows) {
  if (rows == 0) return DDP_OK;
  s->stats.wrapped_rows = top_up(s, shuffled, &at, &rows, &T, target_rows);
  return push_mb(s, first, rows, T);
}

/* Steps 2-4 of the bucket plan (see sampler.h). Buffers: shuffled = the
 * epoch's order (kept for the top-up); pool = scratch, which also serves as
 * the sort's temporary; order[] receives the packed layout. A chunk is
 * copied to order[at..], sorted there and packed onto itself (packing writes
 * position at + i right after reading it). */
static ddp_status_t pack_bucket(ddp_sampler_t *s, const uint32_t *shuffled) {
  const int64_t n = s->n_used;
  uint32_t *pool = s->scratch;
  uint32_t at = 0, first, rows;
  int32_t T;
  int64_t pooled = 0;
  for (int64_t c0 = 0; c0 < n; c0 += s->chunk) {
    const int64_t len = n - c0 < s->chunk ? n - c0 : s->chunk;
    uint32_t *chunk = s->order + at;
    memcpy(chunk, shuffled + c0, (size_t)len * sizeof *chunk);
    sort_by_length(s, chunk, len, pool + pooled); /* n - pooled >= len free there */
    const uint32_t start = at;
    DDP_CHECK(pack_sorted(s, s->order + start, len, &at, &first, &rows, &T));
    if (has_room(s, rows, T)) { /* unfilled: back to the pool */
      memcpy(pool + pooled, s->order + first, (size_t)rows * sizeof *pool);
      pooled += rows;
      at = first;
    } else {
      DDP_CHECK(push_mb(s, first, rows, T));
    }
  }
  if (pooled == 0) return DDP_OK;
  sort_by_length(s, pool, pooled, s->order + at); /* at + pooled == n: room there */
  DDP_CHECK(pack_sorted(s, pool, pooled, &at, &first, &rows, &T));
  return close_last(s, shuffled, at, first, rows, T, (uint32_t)s->max_rows);
}

static ddp_status_t pack_random(ddp_sampler_t *s, const uint32_t *shuffled) {
  const int64_t n = s->n_used;
  const uint32_t R = (uint32_t)s->fixed_rows;
  uint32_t at = 0;
  for (int64_t i = 0; i < n; i += R) {
    const uint32_t rows = n - i < R ? (uint32_t)(n - i) : R;
    int32_t T = 0;
    for (uint32_t r = 0; r < rows; ++r) {
      const int32_t t = wlen(s, shuffled[i + r]) - 1;
      if (t > T) T = t;
      s->order[at + r] = shuffled[i + r];
    }
    if (rows < R) return close_last(s, shuffled, at + rows, at, rows, T, R);
    DDP_CHECK(push_mb(s, at, rows, T));
    at += rows;
  }
  return DDP_OK;
}

static double mb_cost(const ddp_sampler_t *s, uint32_t id) {
  return cost_of(s, s->mb[id].rows, s->mb[id].T);
}

static int64_t mb_targets(const ddp_sampler_t *s, uint32_t id) {
  const micro_batch_t *m = &s->mb[id];
  int64_t t = 0;
  for (uint32_t r = 0; r < m->rows; ++r) t += wlen(s, s->order[m->first + r]) - 1;
  return t;
}

enum { MAX_SWAP_ROUNDS = 64 };

/* Step 6 for one step: ids[0..S) in, rank-major out (rank r's micro-batches
 * at ids[r*accum ..]). LPT, then improving swaps. `load`, `cost`, `owner`
 * and `tmp` are scratch of world, S, S and S entries. */
static void deal_step(const ddp_sampler_t *s, uint32_t *ids, double *cost, int *owner,
                      uint32_t *tmp, double *load, int *count) {
  const int W = s->cfg.world, A = s->cfg.accum, S = W * A;
  for (int i = 0; i < S; ++i) cost[i] = mb_cost(s, ids[i]);
  /* slots by cost, largest first (insertion sort: S is small; ties by slot) */
  int *by_cost = owner + S; /* second half of owner's 2S scratch */
  for (int i = 0; i < S; ++i) {
    int j = i;
    while (j > 0 && cost[by_cost[j - 1]] < cost[i]) {
      by_cost[j] = by_cost[j - 1];
      --j;
    }
    by_cost[j] = i;
  }
  for (int r = 0; r < W; ++r) load[r] = 0.0, count[r] = 0;
  for (int k = 0; k < S; ++k) {
    const int i = by_cost[k];
    int best = -1;
    for (int r = 0; r < W; ++r)
      if (count[r] < A && (best < 0 || load[r] < load[best])) best = r;
    owner[i] = best;
    load[best] += cost[i];
    count[best]++;
  }
  /* Swaps: move work off the most loaded rank while that lowers the pair's
   * maximum below the current one. */
  for (int round = 0; round < MAX_SWAP_ROUNDS && W > 1 && A > 1; ++round) {
    int top = 0;
    for (int r = 1; r < W; ++r)
      if (load[r] > load[top]) top = r;
    double best_max = load[top];
    int bi = -1, bj = -1;
    for (int i = 0; i < S; ++i) {
      if (owner[i] != top) continue;
      for (int j = 0; j < S; ++j) {
        const int r = owner[j];
        if (r == top || cost[j] >= cost[i]) continue;
        const double d = cost[i] - cost[j];
        const double a = load[top] - d, b = load[r] + d;
        const double m = a > b ? a : b;
        if (m < best_max) {
          best_max = m;
          bi = i;
          bj = j;
        }
      }
    }
    if (bi < 0) break;
    const int r = owner[bj];
    const double d = cost[bi] - cost[bj];
    load[top] -= d;
    load[r] += d;
    owner[bi] = r;
    owner[bj] = top;
  }
  for (int r = 0, at = 0; r < W; ++r)
    for (int i = 0; i < S; ++i)
      if (owner[i] == r) tmp[at++] = ids[i];
  memcpy(ids, tmp, (size_t)S * sizeof *ids);
}

/* Is micro-batch `id` cheaper than full cost (more than 1/COST_BINS below
 * the cost budget)? A single row that costs more than the budget is not. */
static int is_cheaper(const ddp_sampler_t *s, uint32_t id) {
  return (s->cost_budget - mb_cost(s, id)) * COST_BINS > s->cost_budget;
}

/* A cheaper micro-batch and its cost, for sorting by cost. */
typedef struct priced {
  double cost;
  uint32_t id;
} priced_t;

/* Costliest first; equal costs by id, so that the order is total and the
 * same everywhere whatever qsort does with ties. */
static int by_cost_desc(const void *pa, const void *pb) {
  const priced_t *a = pa, *b = pb;
  if (a->cost != b->cost) return a->cost > b->cost ? -1 : 1;
  return (a->id > b->id) - (a->id < b->id);
}

/* One pass of the grouping in order_steps over the cheaper micro-batches
 * c[0..n) (costliest first): from the cheapest up, a run of S neighbours
 * becomes a step when its imbalance (its first's cost over its mean) is at
 * most `limit`; a micro-batch that ends no such run is left to spread.
 * Marks grouped ones in `grouped` (when not NULL) and returns the idle time
 * of those left, in units of C; *n_grouped gets the grouped count and
 * *worst the largest imbalance of a grouped run (1 if none). */
static double group_runs(const priced_t *c, int64_t n, int64_t S, double C, double limit,
                         uint8_t *grouped, int64_t *n_grouped, double *worst) {
  double idle = 0.0, sum = 0.0;
  int64_t p = n, count = 0;
  int fresh = 1;
  *worst = 1.0;
  while (p - S >= 0) {
    if (fresh) {
      sum = 0.0;
      for (int64_t i = p - S; i < p; ++i) sum += c[i].cost;
      fresh = 0;
    }
    const double imbalance = c[p - S].cost * (double)S / sum;
    if (imbalance <= limit) {
      if (grouped) memset(grouped + p - S, 1, (size_t)S);
      if (imbalance > *worst) *worst = imbalance;
      count += S;
      p -= S;
      fresh = 1;
    } else {
      --p;
      idle += 1.0 - c[p].cost / C;
      sum -= c[p].cost;
      if (p - S >= 0) sum += c[p - S].cost;
    }
  }
  for (int64_t i = 0; i < p; ++i) idle += 1.0 - c[i].cost / C;
  *n_grouped = count;
  return idle;
}

/* How many of m micro-batches spread over n places go to the places of
 * step k (places k S .. (k + 1) S, the last step maybe shorter): m in
 * proportion, rounded so that the shares add up to m. m, n < 2^32, so the
 * products fit. */
static int64_t spread_share(int64_t m, int64_t n, int64_t S, int64_t k) {
  const int64_t end = (k + 1) * S < n ? (k + 1) * S : n;
  return (int64_t)((uint64_t)m * (uint64_t)end / (uint64_t)n) -
         (int64_t)((uint64_t)m * (uint64_t)(k * S) / (uint64_t)n);
}

/* Step 5's assembly for the bucket kind, on the shuffled micro-batch ids in
 * s->deal[0..n_mb). With one micro-batch per rank a step takes as long as
 * its costliest member. Nearly every micro-batch costs the cost budget C to
 * within one bin (1/COST_BINS of C): those keep the shuffled order. The
 * cheaper ones (long rows a whole row short of C, rows of one token that
 * the row cap stops at half of C) can go
 * two ways. Grouped, S = world x accum neighbours in cost make a step whose
 * maximum falls with them; its imbalance is their own spread in cost.
 * Spread evenly between the full-cost ones, they leave those steps'
 * maximum at C and lower their mean by their share of the idle time, which
 * is the same wherever they go. The runs to group are chosen to minimise
 * the worse of the two: a run is grouped when its imbalance is at most a
 * limit, and the limit is the candidate whose worst grouped run and whose
 * spread steps, with what is left over, give the lowest maximum. The steps are then shuffled,
 * except an incomplete last one, which stays last and is completed with the micro-batches just
 * before it (the cyclic start when there is no full step). `tmp` holds n_mb ids. */
static ddp_status_t order_steps(ddp_sampler_t *s, int64_t epoch, int64_t n_steps, uint32_t *tmp) {
  const int64_t S = (int64_t)s->cfg.world * s->cfg.accum, n_mb = s->n_mb;
  const double C = s->cost_budget;
  uint32_t *ids = s->deal;
  /* full-cost ones first, then the cheaper, each in the shuffled order */
  int64_t at[2] = {0, 0};
  for (int64_t i = 0; i < n_mb; ++i) at[1] += !is_cheaper(s, ids[i]);
  const int64_t n_full_cost = at[1], n_cheap = n_mb - n_full_cost;
  for (int64_t i = 0; i < n_mb; ++i) tmp[at[is_cheaper(s, ids[i])]++] = ids[i];
  priced_t *c = malloc((size_t)(n_cheap > 0 ? n_cheap : 1) * sizeof *c);
  uint8_t *grouped = calloc((size_t)(n_cheap > 0 ? n_cheap : 1), 1);
  if (!c || !grouped) {
    free(c);
    free(grouped);
    DDP_FAIL(DDP_ERR_OOM, "sampler: out of memory ordering %lld micro-batches", (long long)n_cheap);
  }
  for (int64_t i = 0; i < n_cheap; ++i)
    c[i] = (priced_t){.cost = mb_cost(s, tmp[n_full_cost + i]), .id = tmp[n_full_cost + i]};
  qsort(c, (size_t)n_cheap, sizeof *c, by_cost_desc);
  /* the spread steps' own idle time and maximum: the full-cost ones' */
  double fixed_idle = 0.0, top = C;
  for (int64_t i = 0; i < n_full_cost; ++i) {
    const double cost = mb_cost(s, tmp[i]);
    fixed_idle += 1.0 - cost / C;
    if (cost > top) top = cost;
  }
  /* The limit: the candidate (1 + k / LIMIT_STEPS, or no limit, which is
   * the plain sorted cut) whose worse step, grouped or spread, is the
   * least; the spread steps' imbalance is their slots over their slots
   * less the idle time of the micro-batches spread into them. */
  const double slots = (double)(n_steps * S);
  double best_limit = HUGE_VAL, best_worst = HUGE_VAL;
  for (int k = LIMIT_CANDIDATES; k >= 0; --k) {
    const double limit = k == LIMIT_CANDIDATES ? HUGE_VAL : 1.0 + (double)k / LIMIT_STEPS;
    int64_t n_grouped;
    double worst;
    const double idle = group_runs(c, n_cheap, S, C, limit, NULL, &n_grouped, &worst) + fixed_idle;
    const double left = slots - (double)n_grouped;
    const double spread_worst = left > idle ? top / C * left / (left - idle) : HUGE_VAL;
    if (spread_worst > worst) worst = spread_worst;
    if (worst < best_worst) best_worst = worst, best_limit = limit;
  }
  int64_t n_grouped;
  double worst;
  group_runs(c, n_cheap, S, C, best_limit, grouped, &n_grouped, &worst);
  /* grouped runs first, cheapest run first, each run costliest first */
  int64_t g = 0;
  for (int64_t end = n_cheap; end > 0;) {
    if (!grouped[end - 1]) {
      --end;
      continue;
    }
    for (int64_t i = end - S; i < end; ++i) ids[g++] = c[i].id;
    end -= S;
  }
  /* the ones to spread after the full-cost ones in tmp: tmp[0..n_full_cost)
   * stays, tmp[w..n_mb) gets the m to spread, costliest first */
  int64_t w = n_mb;
  for (int64_t i = n_cheap - 1; i >= 0; --i)
    if (!grouped[i]) tmp[--w] = c[i].id;
  free(c);
  free(grouped);
  /* then the full-cost ones with the m others spread between them. The
   * n places left form K steps (the last one maybe incomplete); step k gets
   * a share of the m in proportion to its places, and the m, costliest
   * first, are dealt round-robin over the steps, so that each step gets as
   * many dear as cheap ones. */
  const int64_t m = n_mb - w, n = n_mb - g, K = (n + S - 1) / S;
  uint32_t *spread = ids + g;
  int64_t dealt = 0;
  for (int64_t round = 0; dealt < m; ++round)
    for (int64_t k = 0; k < K && dealt < m; ++k)
      if (spread_share(m, n, S, k) > round) spread[k * S + round] = tmp[w + dealt++];
  for (int64_t k = 0, f = 0; k < K; ++k) {
    const int64_t end = (k + 1) * S < n ? (k + 1) * S : n;
    for (int64_t i = k * S + spread_share(m, n, S, k); i < end; ++i) spread[i] = tmp[f++];
  }
  const int64_t full = n_mb / S;
  for (int64_t i = n_mb; i < n_steps * S; ++i)
    ids[i] = full > 0 ? ids[i - S] : ids[(i - n_mb) % n_mb];
  ddp_rng_t root, rng;
  ddp_rng_init(&root, s->cfg.seed, STREAM_STEPS);
  ddp_rng_derive(&root, (uint64_t)epoch, &rng);
  for (int64_t i = full - 1; i > 0; --i) {
    const int64_t j = (int64_t)ddp_rng_below(&rng, (uint64_t)(full - 1 - i), (uint64_t)i + 1);
    if (j == i) continue;
    memcpy(tmp, ids + i * S, (size_t)S * sizeof *ids);
    memcpy(ids + i * S, ids + j * S, (size_t)S * sizeof *ids);
    memcpy(ids + j * S, tmp, (size_t)S * sizeof *ids);
  }
  return DDP_OK;
}

static ddp_status_t deal_epoch(ddp_sampler_t *s, int64_t epoch) {
  const int W = s->cfg.world, A = s->cfg.accum, S = W * A;
  const int64_t n_mb = s->n_mb;
  const int64_t n_steps = (n_mb + S - 1) / S;
  ddp_status_t st = DDP_OK;
  if (n_steps > s->steps_cap) {
    uint32_t *deal = realloc(s->deal, (size_t)n_steps * (size_t)S * sizeof *deal);
    if (deal) s->deal = deal;
    step_stat_t *steps = deal ? realloc(s->steps, (size_t)n_steps * sizeof *steps) : NULL;
    if (steps) s->steps = steps;
    if (!deal || !steps)
      DDP_FAIL(DDP_ERR_OOM, "sampler: out of memory for %lld steps", (long long)n_steps);
    s->steps_cap = n_steps;
  }
  for (int64_t i = 0; i < n_mb; ++i) s->deal[i] = (uint32_t)i;
  if (s->cfg.kind == DDP_SAMPLER_BUCKET) {
    ddp_rng_t root, rng;
    ddp_rng_init(&root, s->cfg.seed, STREAM_BATCHES);
    ddp_rng_derive(&root, (uint64_t)epoch, &rng);
    shuffle_u32(s->deal, n_mb, &rng);
    /* packing is done: scratch is free, and n_mb <= n_items fit in it */
    DDP_CHECK(order_steps(s, epoch, n_steps, s->scratch));
  } else {
    /* the tail: the epoch's first micro-batches complete the last step */
    for (int64_t i = n_mb; i < n_steps * S; ++i) s->deal[i] = s->deal[(i - n_mb) % n_mb];
  }
  s->stats.wrapped_micro_batches = n_steps * S - n_mb;

  double *cost = malloc((size_t)S * sizeof *cost), *load = malloc((size_t)W * sizeof *load);
  int *owner = malloc(2 * (size_t)S * sizeof *owner), *count = malloc((size_t)W * sizeof *count);
  uint32_t *tmp = malloc((size_t)S * sizeof *tmp);
  if (!cost || !load || !owner || !count || !tmp)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "sampler: out of memory dealing %d micro-batches", S);
  double imb_sum = 0.0, imb_max = 0.0;
  s->stats.useful = s->stats.padded = 0;
  for (int64_t t = 0; t < n_steps; ++t) {
    uint32_t *ids = s->deal + t * S;
    if (s->cfg.kind == DDP_SAMPLER_BUCKET) deal_step(s, ids, cost, owner, tmp, load, count);
    step_stat_t *ss = &s->steps[t];
    *ss = (step_stat_t){.wrapped = (int32_t)((t + 1) * S > n_mb ? (t + 1) * S - n_mb : 0)};
    if (ss->wrapped > S) ss->wrapped = S;
    double total = 0.0;
    for (int r = 0; r < W; ++r) {
      double c = 0.0;
      for (int k = 0; k < A; ++k) {
        const uint32_t id = ids[r * A + k];
        c += mb_cost(s, id);
        ss->targets += mb_targets(s, id);
        ss->padded += (int64_t)s->mb[id].rows * s->mb[id].T;
      }
      total += c;
      if (r == 0 || c > ss->cost_max) {
        ss->cost_max = c;
        ss->slowest = r;
      }
    }
    ss->cost_mean = total / W;
    const double imb = ss->cost_mean > 0 ? ss->cost_max / ss->cost_mean : 1.0;
    imb_sum += imb;
    if (imb > imb_max) imb_max = imb;
    s->stats.useful += ss->targets;
    s->stats.padded += ss->padded;
  }
  s->n_steps = n_steps;
  s->stats.steps = n_steps;
  s->stats.imbalance_mean = imb_sum / (double)n_steps;
  s->stats.imbalance_max = imb_max;
  s->stats.pad_frac =
      s->stats.padded ? 1.0 - (double)s->stats.useful / (double)s->stats.padded : 0.0;
out:
  free(cost);
  free(load);
  free(owner);
  free(count);
  free(tmp);
  return st;
}

static ddp_status_t build_epoch(ddp_sampler_t *s, int64_t epoch) {
  if (s->epoch == epoch) return DDP_OK;
  const double t0 = ddp_clock_seconds();
  s->epoch = -1; /* until complete */
  s->n_mb = 0;
  memset(&s->stats, 0, sizeof s->stats);
  const int64_t n = s->n_items;
  uint32_t *shuffled = s->shuffled;
  for (int64_t i = 0; i < n; ++i) shuffled[i] = (uint32_t)i;
  ddp_rng_t root, rng;
  ddp_rng_init(&root, s->cfg.seed, STREAM_WINDOWS);
  ddp_rng_derive(&root, (uint64_t)epoch, &rng);
  shuffle_u32(shuffled, n, &rng);
  DDP_CHECK(s->cfg.kind == DDP_SAMPLER_BUCKET ? pack_bucket(s, shuffled)
                                              : pack_random(s, shuffled));
  DDP_CHECK(deal_epoch(s, epoch));
  s->stats.windows = n;
  s->stats.dropped = n - s->n_used;
  s->stats.micro_batches = s->n_mb;
  s->stats.build_seconds = ddp_clock_seconds() - t0;
  const int64_t S = (int64_t)s->cfg.world * s->cfg.accum;
  s->stats.plan_bytes = (int64_t)sizeof *s +
                        (3 * n + s->max_rows + s->max_len + 3) * (int64_t)sizeof(uint32_t) +
                        s->mb_cap * (int64_t)sizeof *s->mb +
                        s->steps_cap * (S * (int64_t)sizeof *s->deal + (int64_t)sizeof *s->steps) +
                        s->epoch_first_cap * (int64_t)sizeof *s->epoch_first;
  s->epoch = epoch;
  return DDP_OK;
}

/* ---- global steps ------------------------------------------------------------ */

static ddp_status_t learn_next_epoch(ddp_sampler_t *s) {
  const int64_t e = s->n_epochs_known;
  if (e + 2 > s->epoch_first_cap) {
    const int64_t cap = s->epoch_first_cap * 2;
    int64_t *g = realloc(s->epoch_first, (size_t)cap * sizeof *g);
    if (!g) DDP_FAIL(DDP_ERR_OOM, "sampler: out of memory for %lld epochs", (long long)cap);
    s->epoch_first = g;
    s->epoch_first_cap = cap;
  }
  DDP_CHECK(build_epoch(s, e));
  s->epoch_first[e + 1] = s->epoch_first[e] + s->n_steps;
  s->n_epochs_known = e + 1;
  return DDP_OK;
}

/* Builds the epoch of global step g; *local = its index in that epoch. */
static ddp_status_t locate(ddp_sampler_t *s, int64_t g, int64_t *local) {
  if (!s) DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler: NULL sampler");
  if (g < 0) DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler: negative step %lld", (long long)g);
  while (s->epoch_first[s->n_epochs_known] <= g) DDP_CHECK(learn_next_epoch(s));
  int64_t lo = 0, hi = s->n_epochs_known - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (s->epoch_first[mid] <= g)
      lo = mid;
    else
      hi = mid - 1;
  }
  DDP_CHECK(build_epoch(s, lo));
  *local = g - s->epoch_first[lo];
  return DDP_OK;
}

static ddp_status_t ensure_epoch(ddp_sampler_t *s, int64_t epoch) {
  if (!s) DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler: NULL sampler");
  if (epoch < 0) DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler: negative epoch %lld", (long long)epoch);
  while (s->n_epochs_known <= epoch) DDP_CHECK(learn_next_epoch(s));
  return build_epoch(s, epoch);
}

ddp_status_t ddp_sampler_epoch_stats(ddp_sampler_t *s, int64_t epoch, ddp_epoch_stats_t *stats) {
  if (!stats) DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler_epoch_stats: NULL result");
  DDP_CHECK(ensure_epoch(s, epoch));
  *stats = s->stats;
  return DDP_OK;
}

ddp_status_t ddp_sampler_steps_in_epoch(ddp_sampler_t *s, int64_t epoch, int64_t *steps) {
  if (!steps) DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler_steps_in_epoch: NULL result");
  DDP_CHECK(ensure_epoch(s, epoch));
  *steps = s->n_steps;
  return DDP_OK;
}

ddp_status_t ddp_sampler_epoch_digest(ddp_sampler_t *s, int64_t epoch, uint64_t *digest) {
  if (!digest) DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler_epoch_digest: NULL result");
  DDP_CHECK(ensure_epoch(s, epoch));
  const int64_t S = (int64_t)s->cfg.world * s->cfg.accum;
  uint64_t h = DDP_FNV1A64_INIT;
  for (int64_t i = 0; i < s->n_mb; ++i) {
    const micro_batch_t *m = &s->mb[i];
    h = ddp_fnv1a64(h, &m->T, sizeof m->T);
    h = ddp_fnv1a64(h, s->order + m->first, m->rows * sizeof *s->order);
  }
  *digest = ddp_fnv1a64(h, s->deal, (size_t)(s->n_steps * S) * sizeof *s->deal);
  return DDP_OK;
}

static void info_of(const ddp_sampler_t *s, int64_t g, int64_t local, ddp_step_info_t *info) {
  const step_stat_t *ss = &s->steps[local];
  *info = (ddp_step_info_t){.step = g,
                            .epoch = s->epoch,
                            .step_in_epoch = local,
                            .n_targets = ss->targets,
                            .n_padded = ss->padded,
                            .cost_max = ss->cost_max,
                            .cost_mean = ss->cost_mean,
                            .slowest_rank = ss->slowest,
                            .wrapped = ss->wrapped};
}

ddp_status_t ddp_sampler_step_info(ddp_sampler_t *s, int64_t step, ddp_step_info_t *info) {
  if (!info) DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler_step_info: NULL result");
  int64_t local;
  DDP_CHECK(locate(s, step, &local));
  info_of(s, step, local, info);
  return DDP_OK;
}

/* The micro-batch `micro` of `rank` at global step `step`, and the step's
 * local index in the cached epoch. */
static ddp_status_t find_mb(ddp_sampler_t *s, int64_t step, int rank, int micro, const char *who,
                            const micro_batch_t **mb, int64_t *local) {
  if (!s) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: NULL sampler", who);
  if (rank < 0 || rank >= s->cfg.world || micro < 0 || micro >= s->cfg.accum)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: rank %d / micro-step %d outside %d x %d", who, rank, micro,
             s->cfg.world, s->cfg.accum);
  DDP_CHECK(locate(s, step, local));
  *mb = &s->mb[s->deal[(*local * s->cfg.world + rank) * s->cfg.accum + micro]];
  return DDP_OK;
}

ddp_status_t ddp_sampler_fill(ddp_sampler_t *s, int64_t step, int rank, int micro, ddp_batch_t *b) {
  if (!b || !b->inputs) DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler_fill: batch not initialised");
  if (s && !s->corpus)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler_fill: this sampler deals items, not token windows");
  int64_t local;
  const micro_batch_t *m;
  DDP_CHECK(find_mb(s, step, rank, micro, "sampler_fill", &m, &local));
  if (b->capacity < (int64_t)m->rows * m->T || b->max_rows < (int)m->rows)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "sampler_fill: the batch holds %lld tokens / %d rows, the plan needs %lld / %u",
             (long long)b->capacity, b->max_rows, (long long)m->rows * m->T, m->rows);
  const ddp_corpus_t *c = s->corpus;
  const int T = m->T;
  int64_t targets = 0;
  for (uint32_t r = 0; r < m->rows; ++r) {
    const uint32_t w = s->order[m->first + r];
    const ddp_window_t *win = &c->windows[w];
    const int tw = win->len - 1;
    int32_t *in = b->inputs + (size_t)r * (size_t)T;
    int32_t *tg = b->targets + (size_t)r * (size_t)T;
    /* inputs are the window's first len - 1 tokens, targets its last; the
     * closing EOT of a document is only ever a target */
    ddp_corpus_read(c, win->seg, win->start, tw, in);
    memcpy(tg, in + 1, (size_t)(tw - 1) * sizeof *tg);
    if (win->ends_doc)
      tg[tw - 1] = c->eot;
    else
      ddp_corpus_read(c, win->seg, win->start + tw, 1, tg + tw - 1);
    for (int t = tw; t < T; ++t) {
      in[t] = c->eot;
      tg[t] = -1;
    }
    b->windows[r] = w;
    targets += tw;
  }
  b->B = (int)m->rows;
  b->T = T;
  b->n_targets = targets;
  b->n_padded = (int64_t)m->rows * T;
  b->micro = micro;
  info_of(s, step, local, &b->info);
  return DDP_OK;
}

ddp_status_t ddp_sampler_rows(ddp_sampler_t *s, int64_t step, int rank, int micro, int64_t *items,
                              int capacity, int *rows, ddp_step_info_t *info) {
  if (!items || !rows || !info) DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler_rows: NULL argument");
  int64_t local;
  const micro_batch_t *m;
  DDP_CHECK(find_mb(s, step, rank, micro, "sampler_rows", &m, &local));
  if (capacity < (int)m->rows)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "sampler_rows: room for %d rows, the plan needs %u", capacity,
             m->rows);
  for (uint32_t r = 0; r < m->rows; ++r) items[r] = s->order[m->first + r];
  *rows = (int)m->rows;
  info_of(s, step, local, info);
  return DDP_OK;
}

/* ---- batch buffers ------------------------------------------------------------ */

ddp_status_t ddp_batch_init(ddp_batch_t *b, int64_t tokens, int max_rows) {
  if (!b || tokens < 1 || max_rows < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "batch_init: %lld tokens / %d rows", (long long)tokens, max_rows);
  memset(b, 0, sizeof *b);
  b->inputs = malloc((size_t)tokens * sizeof *b->inputs);
  b->targets = malloc((size_t)tokens * sizeof *b->targets);
  b->windows = malloc((size_t)max_rows * sizeof *b->windows);
  if (!b->inputs || !b->targets || !b->windows) {
    ddp_batch_destroy(b);
    DDP_FAIL(DDP_ERR_OOM, "batch: out of memory for %lld tokens", (long long)tokens);
  }
  b->capacity = tokens;
  b->max_rows = max_rows;
  return DDP_OK;
}

ddp_status_t ddp_batch_init_host(ddp_batch_t *b, ddp_backend_t *be, int64_t tokens, int max_rows) {
  if (!b || !be || tokens < 1 || max_rows < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "batch_init_host: %lld tokens / %d rows", (long long)tokens,
             max_rows);
  memset(b, 0, sizeof *b);
  b->host_of = be;
  const size_t bytes = (size_t)tokens * sizeof *b->inputs;
  ddp_status_t st = be->ops->alloc_host(be, bytes, (void **)&b->inputs);
  if (st == DDP_OK) st = be->ops->alloc_host(be, bytes, (void **)&b->targets);
  if (st == DDP_OK) {
    b->windows = malloc((size_t)max_rows * sizeof *b->windows);
    if (!b->windows) st = DDP_ERR_OOM;
  }
  if (st != DDP_OK) {
    ddp_batch_destroy(b);
    DDP_FAIL(st, "batch: out of host memory for %lld tokens", (long long)tokens);
  }
  b->capacity = tokens;
  b->max_rows = max_rows;
  return DDP_OK;
}

void ddp_batch_destroy(ddp_batch_t *b) {
  if (!b) return;
  if (b->host_of) {
    b->host_of->ops->free_host(b->host_of, b->inputs);
    b->host_of->ops->free_host(b->host_of, b->targets);
  } else {
    free(b->inputs);
    free(b->targets);
  }
  free(b->windows);
  memset(b, 0, sizeof *b);
}
