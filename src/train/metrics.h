/* JSONL metrics (internal): one JSON object per line, appended and flushed
 * per record so a crash loses at most the line being written and `tail -f`
 * or a plotting script sees records as they come. */
#ifndef DDPTRAIN_TRAIN_METRICS_H
#define DDPTRAIN_TRAIN_METRICS_H

#include <stdio.h>

#include "ddptrain/status.h"

typedef struct ddp_metrics {
  FILE *f;
  char path[1024];
} ddp_metrics_t;

/* An empty path disables metrics (every call is then a no-op). */
ddp_status_t ddp_metrics_open(ddp_metrics_t *m, const char *path);
/* Fields as (key, double) pairs, NULL-terminated: "step", 3.0, "loss", 2.1,
 * NULL. Integral values print without a fraction. "final" adds final: true. */
ddp_status_t ddp_metrics_write(ddp_metrics_t *m, int final, ...);
void ddp_metrics_close(ddp_metrics_t *m);

#endif
