/* Bucket tuning (see train/bucket_tune.h). */
#include "train/bucket_tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "core/clock.h"
#include "train/bucket_plan.h"

static const double k_mib = 1048576.0;

/* x rounded to two significant digits, through the text a log line prints,
 * so that the value shown can be given back as a flag and cuts the same;
 * never below the flags' minimum (0.001 MiB). */
static double nice_mb(double x) {
  char text[32];
  snprintf(text, sizeof text, "%.2g", x);
  const double v = strtod(text, NULL);
  return v < 0.001 ? 0.001 : v;
}

/* Index of an earlier candidate whose cut equals spans[0..n), or -1. */
static int same_cut(ddp_bucket_span_t *const *cuts, const ddp_bucket_candidate_t *cand, int n_cand,
                    const ddp_bucket_span_t *spans, int n) {
  for (int c = 0; c < n_cand; ++c)
    if (cand[c].n_buckets == n && memcmp(cuts[c], spans, (size_t)n * sizeof *spans) == 0) return c;
  return -1;
}

ddp_status_t ddp_bucket_tune_candidates(const ddp_param_t *tensors, int n_tensors, double first_mb,
                                        double bucket_mb, ddp_bucket_candidate_t *out, int *n) {
  const int first_auto = first_mb == DDP_OPTIONS_AUTO, bucket_auto = bucket_mb == DDP_OPTIONS_AUTO;
  if (!tensors || n_tensors < 1 || !out || !n || (!first_auto && !(first_mb > 0)) ||
      (!bucket_auto && !(bucket_mb > 0)))
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "bucket tuning: no tensors, or a bucket size (%g, first %g MiB) that is neither auto "
             "nor > 0",
             bucket_mb, first_mb);
  double total_mb = 0.0;
  for (int i = 0; i < n_tensors; ++i) total_mb += (double)tensors[i].count * sizeof(float) / k_mib;
  /* the bucket sizes to try, then for each the first-bucket sizes */
  double buckets[4] = {bucket_auto ? DDP_BUCKET_TUNE_DEFAULT_BUCKET_MB : bucket_mb};
  int n_b = 1;
  if (bucket_auto)
    for (int d = 2; d <= 8; d *= 2) buckets[n_b++] = nice_mb(total_mb / d);
  /* the cuts of the candidates kept so far (one per candidate) */
  ddp_bucket_span_t *cuts[DDP_BUCKET_TUNE_MAX_CANDIDATES] = {0};
  ddp_bucket_span_t *spans = malloc((size_t)n_tensors * sizeof *spans);
  ddp_status_t st = spans ? DDP_OK : DDP_ERR_OOM;
  *n = 0;
  for (int b = 0; b < n_b && st == DDP_OK; ++b) {
    const double firsts[2] = {first_auto ? DDP_BUCKET_TUNE_DEFAULT_FIRST_MB : first_mb,
                              nice_mb(buckets[b] / 4)};
    for (int f = 0; f < (first_auto ? 2 : 1) && st == DDP_OK; ++f) {
      /* zeroed: the spans are compared byte for byte */
      memset(spans, 0, (size_t)n_tensors * sizeof *spans);
      const int nb = ddp_bucket_plan_cut(tensors, n_tensors, buckets[b] * k_mib, firsts[f] * k_mib,
                                         spans, NULL);
      if (nb < 1) {
        st = DDP_ERR_INTERNAL;
        break;
      }
      /* the baseline always; another only with something to overlap and a cut of its own */
      if (*n > 0 && (nb == 1 || same_cut(cuts, out, *n, spans, nb) >= 0)) continue;
      if (*n == DDP_BUCKET_TUNE_MAX_CANDIDATES) break;
      cuts[*n] = malloc((size_t)nb * sizeof *spans);
      if (!cuts[*n]) {
        st = DDP_ERR_OOM;
        break;
      }
      memcpy(cuts[*n], spans, (size_t)nb * sizeof *spans);
      out[(*n)++] =
          (ddp_bucket_candidate_t){.first_mb = firsts[f], .bucket_mb = buckets[b], .n_buckets = nb};
    }
  }
  for (int c = 0; c < DDP_BUCKET_TUNE_MAX_CANDIDATES; ++c) free(cuts[c]);
  free(spans);
  if (st == DDP_ERR_OOM)
    DDP_FAIL(st, "bucket tuning: out of host memory for %d tensors", n_tensors);
  if (st != DDP_OK) DDP_FAIL(st, "bucket tuning: a candidate cut no bucket");
  return DDP_OK;
}

static int usable(const ddp_bucket_timing_t *t) {
  return isfinite(t->step_ms) && t->step_ms >= 0 && isfinite(t->exposed_ms) && t->exposed_ms >= 0;
}

int ddp_bucket_tune_decide(const ddp_bucket_timing_t *timings, int n) {
  int fastest = -1;
  for (int i = 0; i < n; ++i)
    if (usable(&timings[i]) && (fastest < 0 || timings[i].step_ms < timings[fastest].step_ms))
      fastest = i;
  if (fastest < 0) return 0;
  const double limit = timings[fastest].step_ms * (1.0 + DDP_BUCKET_TUNE_TOLERANCE);
  int best = -1;
  for (int i = 0; i < n; ++i)
    if (usable(&timings[i]) && timings[i].step_ms <= limit &&
        (best < 0 || timings[i].exposed_ms < timings[best].exposed_ms))
      best = i;
  return best;
}

ddp_status_t ddp_bucket_tune_init(ddp_bucket_tune_t *t, const ddp_options_t *o,
                                  const ddp_param_t *tensors, int n_tensors, ddp_comm_t *host,
                                  ddp_comm_t *grads, int rank, int world, ddp_metrics_t *metrics,
                                  ddp_reducer_config_t *rc) {
  *t = (ddp_bucket_tune_t){.first_step = -1,
                           .host = host,
                           .grads = grads,
                           .metrics = metrics,
                           .rank = rank,
                           .world = world};
  DDP_CHECK(ddp_bucket_tune_candidates(tensors, n_tensors, o->first_bucket_mb, o->bucket_mb,
                                       t->cand, &t->n_cand));
  rc->first_bucket_bytes = t->cand[0].first_mb * k_mib;
  rc->bucket_bytes = t->cand[0].bucket_mb * k_mib;
  t->rc = *rc;
  if (o->first_bucket_mb != DDP_OPTIONS_AUTO && o->bucket_mb != DDP_OPTIONS_AUTO) return DDP_OK;
  if (world < 2 || t->n_cand < 2) {
    DDP_LOG_INFO("bucket tuning: %s; keeping first %g MiB, bucket %g MiB (%d bucket%s)",
                 world < 2 ? "one rank, no communication to hide" : "every candidate cuts alike",
                 t->cand[0].first_mb, t->cand[0].bucket_mb, t->cand[0].n_buckets,
                 t->cand[0].n_buckets == 1 ? "" : "s");
    return DDP_OK;
  }
  t->gathered = malloc((size_t)world * sizeof t->sums);
  if (!t->gathered) DDP_FAIL(DDP_ERR_OOM, "bucket tuning: out of host memory for %d ranks", world);
  t->tuning = 1;
  return DDP_OK;
}

/* The reducer of candidate c in place of *reducer. Between steps: no
 * bucket is in flight (finish() waited for all). */
static ddp_status_t switch_to(ddp_bucket_tune_t *t, int c, ddp_reducer_t **reducer) {
  if (c == t->current) return DDP_OK;
  ddp_reducer_config_t rc = t->rc;
  rc.first_bucket_bytes = t->cand[c].first_mb * k_mib;
  rc.bucket_bytes = t->cand[c].bucket_mb * k_mib;
  ddp_reducer_destroy(*reducer);
  *reducer = NULL;
  DDP_CHECK(ddp_reducer_create(t->grads, &rc, reducer));
  t->current = c;
  return DDP_OK;
}

/* Every candidate's figures: each rank's sums, gathered, as means and
 * their maximum over ranks (the slowest rank sets the pace of all); one
 * log line per candidate. */
static ddp_status_t gather_timings(ddp_bucket_tune_t *t) {
  enum { MEASURED = DDP_BUCKET_TUNE_ROUNDS * DDP_BUCKET_TUNE_MEASURED_STEPS };
  ddp_comm_handle_t h;
  DDP_CHECK(ddp_comm_allgather(t->host, t->sums, t->gathered, sizeof t->sums, NULL, &h));
  DDP_CHECK(ddp_comm_wait(t->host, h));
  for (int c = 0; c < t->n_cand; ++c) {
    ddp_bucket_timing_t *tm = &t->timing[c];
    *tm = (ddp_bucket_timing_t){0.0, 0.0};
    for (int r = 0; r < t->world; ++r) {
      const double *theirs = t->gathered + (size_t)r * 2 * DDP_BUCKET_TUNE_MAX_CANDIDATES;
      tm->step_ms = fmax(tm->step_ms, theirs[2 * c] / MEASURED);
      tm->exposed_ms = fmax(tm->exposed_ms, theirs[2 * c + 1] / MEASURED);
    }
    const ddp_bucket_candidate_t *k = &t->cand[c];
    DDP_LOG_INFO(
        "bucket tuning: candidate %d/%d: first %g MiB, bucket %g MiB, %d bucket%s: step %.2f ms, "
        "exposed %.2f ms (slowest rank, mean of %d steps)",
        c + 1, t->n_cand, k->first_mb, k->bucket_mb, k->n_buckets, k->n_buckets == 1 ? "" : "s",
        tm->step_ms, tm->exposed_ms, (int)MEASURED);
  }
  return DDP_OK;
}

/* Rank 0's choice on every rank, the reducer switched to it, the log line
 * and the metrics record. */
static ddp_status_t conclude(ddp_bucket_tune_t *t, int64_t step, ddp_reducer_t **reducer) {
  DDP_CHECK(gather_timings(t));
  int32_t choice = t->rank == 0 ? ddp_bucket_tune_decide(t->timing, t->n_cand) : -1;
  ddp_comm_handle_t h;
  DDP_CHECK(ddp_comm_broadcast(t->host, &choice, sizeof choice, 0, NULL, &h));
  DDP_CHECK(ddp_comm_wait(t->host, h));
  if (choice < 0 || choice >= t->n_cand)
    DDP_FAIL(DDP_ERR_INTERNAL, "bucket tuning: rank 0 chose candidate %d of %d", (int)choice,
             t->n_cand);
  DDP_CHECK(switch_to(t, choice, reducer));
  t->tuning = 0;
  const ddp_bucket_candidate_t *c = &t->cand[choice], *b = &t->cand[0];
  const ddp_bucket_timing_t *tc = &t->timing[choice], *tb = &t->timing[0];
  DDP_LOG_INFO(
      "bucket tuning: chose first %g MiB, bucket %g MiB (%d bucket%s; step %.2f ms, exposed %.2f "
      "ms/step against %.2f ms and %.2f ms for the default, first %g MiB, bucket %g MiB)",
      c->first_mb, c->bucket_mb, c->n_buckets, c->n_buckets == 1 ? "" : "s", tc->step_ms,
      tc->exposed_ms, tb->step_ms, tb->exposed_ms, b->first_mb, b->bucket_mb);
  return ddp_metrics_write(
      t->metrics, DDP_METRICS_BUCKET_TUNE, "step", (double)step + 1, "first_bucket_mb", c->first_mb,
      "bucket_mb", c->bucket_mb, "n_buckets", (double)c->n_buckets, "step_ms", tc->step_ms,
      "exposed_comm_ms", tc->exposed_ms, "default_first_bucket_mb", b->first_mb,
      "default_bucket_mb", b->bucket_mb, "default_step_ms", tb->step_ms, "default_exposed_comm_ms",
      tb->exposed_ms, "candidates", (double)t->n_cand, NULL);
}

ddp_status_t ddp_bucket_tune_after_step(ddp_bucket_tune_t *t, int64_t step, int64_t end,
                                        double step_start, double exposed_ms,
                                        ddp_reducer_t **reducer, int *finished) {
  *finished = 0;
  if (!t->tuning) return DDP_OK;
  enum { PER = DDP_BUCKET_TUNE_SETTLE_STEPS + DDP_BUCKET_TUNE_MEASURED_STEPS };
  if (t->first_step < 0) { /* the run's first step */
    t->first_step = step;
    const int64_t needed =
        DDP_BUCKET_TUNE_WARMUP_STEPS + (int64_t)DDP_BUCKET_TUNE_ROUNDS * t->n_cand * PER;
    if (end - step < needed) {
      t->tuning = 0;
      DDP_LOG_INFO(
          "bucket tuning: %d candidates need %lld steps, the run has %lld; keeping first %g MiB, "
          "bucket %g MiB",
          t->n_cand, (long long)needed, (long long)(end - step), t->cand[0].first_mb,
          t->cand[0].bucket_mb);
      return DDP_OK;
    }
  }
  const int64_t since = step - t->first_step - DDP_BUCKET_TUNE_WARMUP_STEPS;
  if (since < 0) return DDP_OK; /* warming up: measured by no candidate */
  /* visit `since / PER` runs candidate visit % n_cand; its first SETTLE steps are not measured */
  const int64_t visit = since / PER, at = since % PER;
  if (at >= DDP_BUCKET_TUNE_SETTLE_STEPS) {
    if (t->rc.be) DDP_CHECK(ddp_backend_sync(t->rc.be, NULL));
    t->sums[2 * t->current] += 1e3 * (ddp_clock_seconds() - step_start);
    t->sums[2 * t->current + 1] += exposed_ms;
  }
  if (at < PER - 1) return DDP_OK;
  if (visit + 1 < (int64_t)DDP_BUCKET_TUNE_ROUNDS * t->n_cand)
    return switch_to(t, (int)((visit + 1) % t->n_cand), reducer);
  DDP_CHECK(conclude(t, step, reducer));
  *finished = 1;
  return DDP_OK;
}

void ddp_bucket_tune_destroy(ddp_bucket_tune_t *t) {
  free(t->gathered);
  t->gathered = NULL;
}
