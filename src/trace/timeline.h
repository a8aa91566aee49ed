/* The timeline behind --trace FILE (internal): host spans per rank, written
 * as one Chrome trace-event JSON file that Perfetto and chrome://tracing open.
 *
 * Spans go into a buffer allocated once before the step loop (no allocation,
 * no formatting and no I/O while recording); a span that does not fit is
 * counted as dropped, never grown into. Recording is switched on only for
 * the traced steps (ddp_timeline_step), so a long run keeps a bounded trace.
 * Times come from the runtime's monotonic clock (core/clock.h) relative to an
 * origin every rank takes right after a common barrier, so the ranks' tracks
 * line up to within that barrier's exit skew.
 *
 * On a backend that runs work asynchronously (a GPU), the host only launches
 * the work, so host times would show launches: ddp_timeline_use_device gives
 * the spans opened with DDP_SPAN_BEGIN a pair of timing events on the compute
 * stream, from a pool made with the buffer, and ddp_timeline_resolve turns
 * them into times on the host clock at the end (a reference event recorded
 * and waited for at start ties the device clock to the host's). Spans the
 * caller times itself (ddp_timeline_record: bucket all-reduces, data waits)
 * and checkpoint pauses stay host times.
 *
 * The markers are shared with --nvtx: DDP_SPAN_BEGIN/DDP_SPAN_END open an
 * NVTX range and a timeline span at once, and each costs one predictable
 * branch per facility when both are off. */
#ifndef DDPTRAIN_TRACE_TIMELINE_H
#define DDPTRAIN_TRACE_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/status.h"
#include "trace/nvtx.h"

/* What a span is; its name and track in the file follow from it. */
typedef enum ddp_span_kind {
  DDP_SPAN_STEP,        /* a training step (compute track) */
  DDP_SPAN_FORWARD,     /* one transformer block's forward; index = block */
  DDP_SPAN_BACKWARD,    /* one transformer block's backward; index = block */
  DDP_SPAN_CLASSIFIER,  /* the LM head with cross-entropy */
  DDP_SPAN_BUCKET_WAIT, /* the host waiting for the last gradient buckets */
  DDP_SPAN_OPTIMIZER,   /* the optimizer step */
  DDP_SPAN_ALLREDUCE,   /* one gradient bucket's all-reduce; index = bucket, bytes */
  DDP_SPAN_DATA_WAIT,   /* the trainer waiting for its next batch; index = micro-step */
  DDP_SPAN_CHECKPOINT,  /* a checkpoint pause */
  DDP_SPAN_KINDS
} ddp_span_kind_t;

/* One recorded span; plain data so that ranks can exchange arrays of them. */
typedef struct ddp_span {
  double t0, t1; /* seconds since the rank's origin */
  int64_t step;
  int64_t bytes; /* all-reduce payload; 0 otherwise */
  int32_t kind;  /* ddp_span_kind_t */
  int32_t index; /* block, bucket or micro-step; -1 when none */
} ddp_span_t;

/* Nonzero while spans are being recorded (read by the markers). */
extern int ddp_timeline_on;

/* Allocates room for `capacity` spans and sets the origin (a
 * ddp_clock_seconds() value). Recording stays off until ddp_timeline_step
 * enters [first_step, last_step]. */
ddp_status_t ddp_timeline_init(size_t capacity, double origin, int64_t first_step,
                               int64_t last_step);
/* Device spans (see above) on a backend with timing events; nothing on one
 * without (the CPU: its work is done when the call returns, so the host
 * clock is the work's clock). Call after ddp_timeline_init. */
struct ddp_backend;
ddp_status_t ddp_timeline_use_device(struct ddp_backend *be);
/* After the last traced step: waits for the device and replaces the device
 * spans' times by their events' times. A no-op on the host clock. */
ddp_status_t ddp_timeline_resolve(void);

/* Frees the buffer and switches recording off; safe when never initialised. */
void ddp_timeline_destroy(void);

/* The step about to run: recording is on inside the traced window. */
void ddp_timeline_step(int64_t step);
/* Ends recording (the run left the loop). */
void ddp_timeline_stop(void);

/* Opens a span at now; spans nest (a small fixed stack), each begin is
 * matched by one end on the same thread. */
void ddp_timeline_begin(ddp_span_kind_t kind, int index);
void ddp_timeline_end(void);
/* A span whose times the caller took itself (a bucket's launch and the
 * moment its completion was observed), in ddp_clock_seconds() values. */
void ddp_timeline_record(ddp_span_kind_t kind, int index, int64_t bytes, double t0, double t1);

/* What was recorded, and how many spans did not fit. */
const ddp_span_t *ddp_timeline_spans(size_t *n, size_t *dropped);
size_t ddp_timeline_capacity(void);

/* One rank's part of the file. */
typedef struct ddp_timeline_rank {
  const char *host;
  const ddp_span_t *spans;
  size_t n;
} ddp_timeline_rank_t;

/* Writes {"traceEvents":[...],"displayTimeUnit":"ms"}: per rank (pid) a
 * process name "rank R on HOST", named tracks (tid) and "X" events sorted by
 * start per track. Atomic: a temporary file beside `path`, then a rename;
 * on any failure the temporary file is removed, `path` is untouched, and the
 * error names the file and the cause. */
ddp_status_t ddp_timeline_write_json(const char *path, const ddp_timeline_rank_t *ranks,
                                     int n_ranks);

/* --trace's check before training: the file's directory exists and is
 * writable, and the path is not a directory. DDP_ERR_INVALID_ARG otherwise. */
ddp_status_t ddp_timeline_check_path(const char *path);

#define DDP_SPAN_BEGIN(kind, index, ...)                  \
  do {                                                    \
    DDP_NVTX_PUSH(__VA_ARGS__);                           \
    if (ddp_timeline_on) ddp_timeline_begin(kind, index); \
  } while (0)
#define DDP_SPAN_END()                       \
  do {                                       \
    DDP_NVTX_POP();                          \
    if (ddp_timeline_on) ddp_timeline_end(); \
  } while (0)

#endif
