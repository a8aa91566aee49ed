/* JSONL metrics (internal): one JSON object per line, appended and flushed
 * per record so a crash loses at most the line being written and `tail -f`
 * or a plotting script (tools/ddpplot) sees records as they come.
 *
 * Every run (a resumed run too: it is a new segment of the same training)
 * starts its part of the file with a header record, so one file can hold
 * several segments and each says what produced it. Every record carries
 * "record" (header, step, eval, final or bucket_tune), the wall clock "time" (unix
 * seconds) and "elapsed_s" since the run started. */
#ifndef DDPTRAIN_TRAIN_METRICS_H
#define DDPTRAIN_TRAIN_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "ddptrain/options.h"
#include "ddptrain/status.h"

typedef enum ddp_metrics_record {
  DDP_METRICS_STEP,        /* a log window: --log-every steps */
  DDP_METRICS_EVAL,        /* an evaluation during training (--eval-every) */
  DDP_METRICS_FINAL,       /* the end of the run; also keeps "final": true */
  DDP_METRICS_BUCKET_TUNE, /* bucket tuning's choice (--bucket-mb auto) */
} ddp_metrics_record_t;

/* What the header record says about the run. */
typedef struct ddp_metrics_run {
  const ddp_options_t *opts; /* every flag that applies, as a JSON object */
  int world_size;
  const char *device;    /* the backend's one-line description */
  const char *precision; /* fp32, bf16, fp16 */
  int64_t start_step;    /* steps done before this run (--resume) */
  /* when the run started: wall clock (unix seconds) and the monotonic clock
   * (ddp_clock_seconds), from which every record's elapsed_s is measured */
  double start_unix, start_mono;
} ddp_metrics_run_t;

typedef struct ddp_metrics {
  FILE *f;
  char path[1024];
  double start_mono;
} ddp_metrics_t;

/* The wall clock as unix seconds with a fraction. */
double ddp_metrics_unix_now(void);

/* An empty path disables metrics (every call is then a no-op). Otherwise
 * opens the file for appending and writes the run's header record. */
ddp_status_t ddp_metrics_open(ddp_metrics_t *m, const char *path, const ddp_metrics_run_t *run);
/* Fields as (key, double) pairs, NULL-terminated: "step", 3.0, "loss", 2.1,
 * NULL. Integral values print without a fraction, non-finite ones as null.
 * "record" comes first (and "final": true for DDP_METRICS_FINAL), "time"
 * and "elapsed_s" last. */
ddp_status_t ddp_metrics_write(ddp_metrics_t *m, ddp_metrics_record_t kind, ...);
void ddp_metrics_close(ddp_metrics_t *m);

#endif
