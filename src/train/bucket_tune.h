/* Bucket tuning: --bucket-mb auto and --first-bucket-mb auto (docs/design.md
 * §6.2). During the first steps of a run the trainer tries a few bucket
 * cuts, measures each rank's step time and exposed communication, and keeps
 * the cut that was fastest on the slowest rank.
 *
 * Candidates come from the model's size, not from a fixed list: a flag
 * given as "auto" takes a few values (bucket: the default 25 MiB and 1/2,
 * 1/4, 1/8 of all gradients; first bucket: the default 1 MiB and a quarter
 * of the bucket), a flag given as a number keeps it. Candidates that cut
 * the tensors identically are one, and a cut into a single bucket (nothing
 * to overlap) is dropped unless it is the baseline. The baseline, candidate
 * 0, is the flags' numbers with the defaults in place of "auto": what the
 * run would have done without tuning.
 *
 * Schedule, the same on every rank: the run's first WARMUP steps are not
 * measured (the first steps of a process are slower); then, ROUNDS times
 * over, each candidate in turn gets SETTLE steps (the first messages of a
 * new size) and MEASURED steps. Interleaving the candidates spreads a
 * change of load on a shared machine over all of them. At the end the
 * ranks allgather their mean step and exposed times over the host
 * communicator and take the maximum over ranks; rank 0 decides and
 * broadcasts the index, so every rank adopts the same cut.
 * Switching a candidate destroys and re-creates the reducer between steps,
 * with nothing in flight; that is the only time tuning allocates, and the
 * trainer counts the step loop's allocations from the end of tuning on.
 *
 * The math does not depend on the choice: buckets only decide which
 * collective carries an element, and the SUM of each element is the same
 * up to the order MPI adds the ranks' values in. */
#ifndef DDPTRAIN_BUCKET_TUNE_H
#define DDPTRAIN_BUCKET_TUNE_H

#include <stdint.h>

#include "ddptrain/options.h"
#include "ddptrain/param.h"
#include "ddptrain/status.h"
#include "comm/comm.h"
#include "train/metrics.h"
#include "train/reducer.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  DDP_BUCKET_TUNE_MAX_CANDIDATES = 8,
  DDP_BUCKET_TUNE_WARMUP_STEPS = 3,   /* at the start of the run, not measured */
  DDP_BUCKET_TUNE_ROUNDS = 2,         /* visits of each candidate */
  DDP_BUCKET_TUNE_SETTLE_STEPS = 1,   /* per visit, not measured */
  DDP_BUCKET_TUNE_MEASURED_STEPS = 2, /* per visit, averaged */
};

/* Defaults that stand in for "auto" in the baseline (the flags' defaults). */
#define DDP_BUCKET_TUNE_DEFAULT_FIRST_MB 1.0
#define DDP_BUCKET_TUNE_DEFAULT_BUCKET_MB 25.0
/* Step times within this fraction of the fastest count as equally fast. */
#define DDP_BUCKET_TUNE_TOLERANCE 0.03

typedef struct ddp_bucket_candidate {
  double first_mb, bucket_mb; /* values --first-bucket-mb / --bucket-mb accept and print back */
  int n_buckets;
} ddp_bucket_candidate_t;

/* A candidate's figures: the maximum over ranks of each rank's mean. */
typedef struct ddp_bucket_timing {
  double step_ms, exposed_ms;
} ddp_bucket_timing_t;

/* The candidates for the tensors (buffer order) and the flags' values
 * (DDP_OPTIONS_AUTO or MiB) into out[0..DDP_BUCKET_TUNE_MAX_CANDIDATES),
 * the baseline first; *n gets their number (1 when nothing is auto or
 * every cut is the baseline's). DDP_ERR_INVALID_ARG for no tensors or a
 * size that is neither auto nor > 0; DDP_ERR_OOM. No I/O. */
ddp_status_t ddp_bucket_tune_candidates(const ddp_param_t *tensors, int n_tensors, double first_mb,
                                        double bucket_mb, ddp_bucket_candidate_t *out, int *n);

/* The candidate to keep, from timings[0..n): among those whose step time
 * is within DDP_BUCKET_TUNE_TOLERANCE of the fastest, the one with the
 * least exposed communication; a remaining tie goes to the lower index
 * (the baseline is 0). Timings that are not finite and >= 0 never win;
 * 0 when none is usable. Pure. */
int ddp_bucket_tune_decide(const ddp_bucket_timing_t *timings, int n);

typedef struct ddp_bucket_tune {
  int tuning; /* 1 while candidates are being measured */
  ddp_bucket_candidate_t cand[DDP_BUCKET_TUNE_MAX_CANDIDATES];
  ddp_bucket_timing_t timing[DDP_BUCKET_TUNE_MAX_CANDIDATES];
  int n_cand, current;
  int64_t first_step; /* the run's first step; -1 before it */
  /* this rank's sums over the measured steps: step ms, exposed ms per candidate */
  double sums[2 * DDP_BUCKET_TUNE_MAX_CANDIDATES];
  double *gathered;         /* every rank's sums, allocated at init */
  ddp_comm_t *host, *grads; /* host values; the reducer's communicator */
  ddp_reducer_config_t rc;  /* the reducer's configuration but for the sizes */
  ddp_metrics_t *metrics;
  int rank, world;
} ddp_bucket_tune_t;

/* Before the reducer exists: sets rc's two bucket sizes (bytes) to the
 * fixed ones or to the baseline, and prepares tuning when a flag is auto
 * and the job has 2+ ranks (one rank has nothing to overlap: the log says
 * so and the baseline stays). t keeps a copy of *rc and the pointers, which
 * must outlive it. */
ddp_status_t ddp_bucket_tune_init(ddp_bucket_tune_t *t, const ddp_options_t *o,
                                  const ddp_param_t *tensors, int n_tensors, ddp_comm_t *host,
                                  ddp_comm_t *grads, int rank, int world, ddp_metrics_t *metrics,
                                  ddp_reducer_config_t *rc);

/* After each step of the loop (step: its index; end: the step the run stops
 * before), with the clock (ddp_clock_seconds) at the step's start and this
 * rank's exposed communication of the step. While tuning it waits for the
 * backend (rc's be) before reading the clock, so a GPU's step time is the
 * device's, not the host's issue time; it may replace *reducer. *finished
 * is 1 after the step at which tuning ended (the last reducer is then in
 * place), else 0. A run too short for the schedule keeps the baseline and
 * says so. Collective on the host communicator at the end of tuning: every
 * rank calls it after every step. */
ddp_status_t ddp_bucket_tune_after_step(ddp_bucket_tune_t *t, int64_t step, int64_t end,
                                        double step_start, double exposed_ms,
                                        ddp_reducer_t **reducer, int *finished);

void ddp_bucket_tune_destroy(ddp_bucket_tune_t *t);

#ifdef __cplusplus
}
#endif
#endif
