/* The --trace timeline: recording and the Chrome trace-event writer (see
 * trace/timeline.h). One recorder per process, driven by the training
 * thread only, so the buffer needs no lock. */
#include <config.h>

#include "trace/timeline.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "ddptrain/backend.h"
#include "ddptrain/check.h"

int ddp_timeline_on = 0;

/* Nesting is shallow (step > block > nothing deeper); deeper begins are
 * counted as dropped rather than overflowing. */
#define STACK_DEPTH 16

static struct {
  ddp_span_t *spans;
  size_t capacity, n, dropped;
  double origin;
  int64_t first_step, last_step, step;
  long open[STACK_DEPTH]; /* slot of each open span; -1 for one that did not fit */
  int depth;
  /* device spans: slot i owns events 2i and 2i+1 */
  ddp_backend_t *be;
  ddp_event_t *events, ref;
  size_t n_events;
  unsigned char *on_device;  /* per slot: both events recorded */
  double ref_t;              /* the reference event's completion, host clock - origin */
  ddp_status_t device_error; /* the first failed record; reported by resolve */
} tl;

ddp_status_t ddp_timeline_init(size_t capacity, double origin, int64_t first_step,
                               int64_t last_step) {
  ddp_timeline_destroy();
  if (capacity == 0 || last_step < first_step)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--trace: empty trace window (steps %lld..%lld, %zu spans)",
             (long long)first_step, (long long)last_step, capacity);
  tl.spans = malloc(capacity * sizeof *tl.spans);
  if (!tl.spans)
    DDP_FAIL(DDP_ERR_OOM, "--trace: out of host memory for %zu spans (%zu bytes)", capacity,
             capacity * sizeof *tl.spans);
  tl.capacity = capacity;
  tl.origin = origin;
  tl.first_step = first_step;
  tl.last_step = last_step;
  return DDP_OK;
}

ddp_status_t ddp_timeline_use_device(ddp_backend_t *be) {
  if (!tl.spans || !be || !be->ops->timing_event_create || !be->ops->event_elapsed_ms)
    return DDP_OK;
  tl.events = calloc(2 * tl.capacity, sizeof *tl.events);
  tl.on_device = calloc(tl.capacity, 1);
  if (!tl.events || !tl.on_device)
    DDP_FAIL(DDP_ERR_OOM, "--trace: out of host memory for %zu device events", 2 * tl.capacity);
  tl.be = be; /* from here destroy() releases what was made */
  DDP_CHECK(be->ops->timing_event_create(be, &tl.ref));
  for (; tl.n_events < 2 * tl.capacity; ++tl.n_events)
    DDP_CHECK(be->ops->timing_event_create(be, &tl.events[tl.n_events]));
  DDP_CHECK(be->ops->event_record(be, tl.ref, NULL));
  DDP_CHECK(be->ops->event_synchronize(be, tl.ref));
  tl.ref_t = ddp_clock_seconds() - tl.origin;
  return DDP_OK;
}

ddp_status_t ddp_timeline_resolve(void) {
  if (!tl.be) return DDP_OK;
  ddp_backend_t *be = tl.be;
  DDP_CHECK(tl.device_error);
  DDP_CHECK(be->ops->synchronize(be, NULL));
  for (size_t i = 0; i < tl.n; ++i) {
    if (!tl.on_device[i]) continue;
    float a = 0.0f, b = 0.0f;
    DDP_CHECK(be->ops->event_elapsed_ms(be, tl.ref, tl.events[2 * i], &a));
    DDP_CHECK(be->ops->event_elapsed_ms(be, tl.ref, tl.events[2 * i + 1], &b));
    tl.spans[i].t0 = tl.ref_t + 1e-3 * a;
    tl.spans[i].t1 = tl.ref_t + 1e-3 * b;
    tl.on_device[i] = 0;
  }
  return DDP_OK;
}

/* Records event `e` of slot's pair on the compute stream; a failure is
 * kept for resolve() (a marker cannot return one) and the slot stays a host
 * span. */
static int record_event(long slot, int e) {
  if (tl.device_error != DDP_OK) return 0;
  const ddp_status_t st = tl.be->ops->event_record(tl.be, tl.events[2 * slot + e], NULL);
  if (st != DDP_OK) tl.device_error = st;
  return st == DDP_OK;
}

void ddp_timeline_destroy(void) {
  if (tl.be) {
    for (size_t i = 0; i < tl.n_events; ++i) tl.be->ops->event_destroy(tl.be, tl.events[i]);
    if (tl.ref) tl.be->ops->event_destroy(tl.be, tl.ref);
  }
  free(tl.events);
  free(tl.on_device);
  free(tl.spans);
  memset(&tl, 0, sizeof tl);
  ddp_timeline_on = 0;
}

void ddp_timeline_step(int64_t step) {
  tl.step = step;
  ddp_timeline_on = tl.spans && step >= tl.first_step && step <= tl.last_step;
}

void ddp_timeline_stop(void) {
  ddp_timeline_on = 0;
}

static long take_slot(ddp_span_kind_t kind, int index, int64_t bytes, double t0) {
  if (tl.n == tl.capacity) {
    tl.dropped++;
    return -1;
  }
  tl.spans[tl.n] = (ddp_span_t){.t0 = t0 - tl.origin,
                                .t1 = t0 - tl.origin,
                                .step = tl.step,
                                .bytes = bytes,
                                .kind = (int32_t)kind,
                                .index = index};
  return (long)tl.n++;
}

void ddp_timeline_begin(ddp_span_kind_t kind, int index) {
  if (!ddp_timeline_on) return;
  const long slot = take_slot(kind, index, 0, ddp_clock_seconds());
  /* a checkpoint pause is the host's; the rest is work on the compute stream */
  if (slot >= 0 && tl.be) tl.on_device[slot] = kind != DDP_SPAN_CHECKPOINT && record_event(slot, 0);
  if (tl.depth < STACK_DEPTH)
    tl.open[tl.depth] = slot;
  else if (slot >= 0) { /* too deep to close later: give the slot back */
    tl.n--;
    tl.dropped++;
  }
  tl.depth++;
}

void ddp_timeline_end(void) {
  if (!ddp_timeline_on || tl.depth == 0) return;
  const double now = ddp_clock_seconds();
  tl.depth--;
  if (tl.depth < STACK_DEPTH && tl.open[tl.depth] >= 0) {
    const long slot = tl.open[tl.depth];
    tl.spans[slot].t1 = now - tl.origin;
    if (tl.be && tl.on_device[slot]) tl.on_device[slot] = record_event(slot, 1);
  }
}

void ddp_timeline_record(ddp_span_kind_t kind, int index, int64_t bytes, double t0, double t1) {
  if (!ddp_timeline_on) return;
  const long slot = take_slot(kind, index, bytes, t0);
  if (slot >= 0) tl.spans[slot].t1 = t1 - tl.origin;
  if (slot >= 0 && tl.be) tl.on_device[slot] = 0;
}

const ddp_span_t *ddp_timeline_spans(size_t *n, size_t *dropped) {
  if (n) *n = tl.n;
  if (dropped) *dropped = tl.dropped;
  return tl.spans;
}

size_t ddp_timeline_capacity(void) {
  return tl.capacity;
}

/* ---- the file ------------------------------------------------------------ */

/* Tracks (tid) per rank: the training thread's compute, its data waits, its
 * checkpoint pauses, and one track per gradient bucket, because buckets are
 * in flight together and overlapping spans need tracks of their own. */
enum { TID_COMPUTE = 1, TID_DATA = 2, TID_CHECKPOINT = 3, TID_BUCKET0 = 10 };

static int span_tid(const ddp_span_t *s) {
  switch ((ddp_span_kind_t)s->kind) {
    case DDP_SPAN_DATA_WAIT:
      return TID_DATA;
    case DDP_SPAN_CHECKPOINT:
      return TID_CHECKPOINT;
    case DDP_SPAN_ALLREDUCE:
      return TID_BUCKET0 + (s->index > 0 ? s->index : 0);
    default:
      return TID_COMPUTE;
  }
}

/* Earlier start first; at equal starts the longer (enclosing) span first,
 * so nesting reads right. */
static int by_track_then_start(const void *pa, const void *pb) {
  const ddp_span_t *a = *(const ddp_span_t *const *)pa, *b = *(const ddp_span_t *const *)pb;
  const int ta = span_tid(a), tb = span_tid(b);
  if (ta != tb) return ta < tb ? -1 : 1;
  if (a->t0 != b->t0) return a->t0 < b->t0 ? -1 : 1;
  const double da = a->t1 - a->t0, db = b->t1 - b->t0;
  return da > db ? -1 : da < db ? 1 : 0;
}

static void span_name(const ddp_span_t *s, char *buf, size_t len) {
  switch ((ddp_span_kind_t)s->kind) {
    case DDP_SPAN_STEP:
      snprintf(buf, len, "step %lld", (long long)s->step);
      break;
    case DDP_SPAN_FORWARD:
      snprintf(buf, len, "forward h.%d", s->index);
      break;
    case DDP_SPAN_BACKWARD:
      snprintf(buf, len, "backward h.%d", s->index);
      break;
    case DDP_SPAN_CLASSIFIER:
      snprintf(buf, len, "classifier + cross-entropy");
      break;
    case DDP_SPAN_BUCKET_WAIT:
      snprintf(buf, len, "wait for gradient buckets");
      break;
    case DDP_SPAN_OPTIMIZER:
      snprintf(buf, len, "optimizer");
      break;
    case DDP_SPAN_ALLREDUCE:
      snprintf(buf, len, "all-reduce bucket %d", s->index);
      break;
    case DDP_SPAN_DATA_WAIT:
      snprintf(buf, len, "data wait");
      break;
    case DDP_SPAN_CHECKPOINT:
      snprintf(buf, len, "checkpoint");
      break;
    default:
      snprintf(buf, len, "span kind %d", s->kind);
      break;
  }
}

/* What args calls the index, per kind. */
static const char *index_key(const ddp_span_t *s) {
  switch ((ddp_span_kind_t)s->kind) {
    case DDP_SPAN_FORWARD:
    case DDP_SPAN_BACKWARD:
      return "block";
    case DDP_SPAN_ALLREDUCE:
      return "bucket";
    case DDP_SPAN_DATA_WAIT:
      return "micro_step";
    default:
      return NULL;
  }
}

/* A host name as a JSON string body: quotes, backslashes and control
 * characters cannot break the file. */
static void put_json_text(FILE *f, const char *s) {
  for (; *s; ++s) {
    const unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
}

static void put_meta(FILE *f, int *first, int pid, int tid, const char *what, const char *name,
                     const char *host) {
  fprintf(f, "%s\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"args\":{\"name\":\"",
          *first ? "" : ",", pid, tid, what);
  put_json_text(f, name);
  if (host) {
    fputs(" on ", f);
    put_json_text(f, host);
  }
  fputs("\"}}", f);
  *first = 0;
}

static void put_rank(FILE *f, int *first, int rank, const ddp_timeline_rank_t *r,
                     const ddp_span_t **order) {
  char name[64];
  snprintf(name, sizeof name, "rank %d", rank);
  put_meta(f, first, rank, 0, "process_name", name, r->host ? r->host : "?");
  fprintf(f,
          ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_sort_index\","
          "\"args\":{\"sort_index\":%d}}",
          rank, rank);
  put_meta(f, first, rank, TID_COMPUTE, "thread_name", "compute", NULL);
  put_meta(f, first, rank, TID_DATA, "thread_name", "data", NULL);
  put_meta(f, first, rank, TID_CHECKPOINT, "thread_name", "checkpoint", NULL);
  int buckets = 0;
  for (size_t i = 0; i < r->n; ++i)
    if (r->spans[i].kind == DDP_SPAN_ALLREDUCE && r->spans[i].index + 1 > buckets)
      buckets = r->spans[i].index + 1;
  for (int b = 0; b < buckets; ++b) {
    snprintf(name, sizeof name, "comm: bucket %d", b);
    put_meta(f, first, rank, TID_BUCKET0 + b, "thread_name", name, NULL);
  }
  for (size_t i = 0; i < r->n; ++i) order[i] = &r->spans[i];
  qsort(order, r->n, sizeof *order, by_track_then_start);
  for (size_t i = 0; i < r->n; ++i) {
    const ddp_span_t *s = order[i];
    span_name(s, name, sizeof name);
    const double dur = s->t1 > s->t0 ? s->t1 - s->t0 : 0.0;
    fprintf(f,
            ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"ts\":%.3f,\"dur\":%.3f,"
            "\"args\":{\"step\":%lld",
            rank, span_tid(s), name, 1e6 * s->t0, 1e6 * dur, (long long)s->step);
    const char *key = index_key(s);
    if (key) fprintf(f, ",\"%s\":%d", key, s->index);
    if (s->bytes > 0) fprintf(f, ",\"bytes\":%lld", (long long)s->bytes);
    fputs("}}", f);
  }
}

ddp_status_t ddp_timeline_write_json(const char *path, const ddp_timeline_rank_t *ranks,
                                     int n_ranks) {
  if (!path || !path[0] || !ranks || n_ranks < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--trace: no file or no ranks to write");
  size_t most = 1;
  for (int r = 0; r < n_ranks; ++r)
    if (ranks[r].n > most) most = ranks[r].n;
  const ddp_span_t **order = malloc(most * sizeof *order);
  const size_t tmp_len = strlen(path) + 32;
  char *tmp = malloc(tmp_len);
  if (!order || !tmp) {
    free(order);
    free(tmp);
    DDP_FAIL(DDP_ERR_OOM, "--trace %s: out of host memory", path);
  }
  snprintf(tmp, tmp_len, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "w");
  if (!f) {
    const int e = errno;
    free(order);
    free(tmp);
    DDP_FAIL(DDP_ERR_IO, "--trace %s: cannot create the file: %s", path, strerror(e));
  }
  fputs("{\"traceEvents\":[", f);
  int first = 1;
  for (int r = 0; r < n_ranks; ++r) put_rank(f, &first, r, &ranks[r], order);
  fputs("\n],\"displayTimeUnit\":\"ms\"}\n", f);
  free(order);
  int failed = ferror(f), e = failed ? EIO : 0;
  if (fflush(f) != 0 && !failed) failed = 1, e = errno;
  if (fsync(fileno(f)) != 0 && !failed && errno != EINVAL) failed = 1, e = errno;
  if (fclose(f) != 0 && !failed) failed = 1, e = errno;
  if (!failed && rename(tmp, path) != 0) failed = 1, e = errno;
  if (failed) {
    unlink(tmp);
    free(tmp);
    DDP_FAIL(DDP_ERR_IO, "--trace %s: writing the trace failed: %s (nothing written)", path,
             strerror(e));
  }
  free(tmp);
  return DDP_OK;
}

ddp_status_t ddp_timeline_check_path(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "option --trace %s: is a directory (give a file name)", path);
  char *copy = strdup(path);
  if (!copy) DDP_FAIL(DDP_ERR_OOM, "option --trace: out of host memory");
  const char *dir = dirname(copy);
  ddp_status_t out = DDP_OK;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    DDP_LOG_ERROR("option --trace %s: its directory %s does not exist", path, dir);
    out = DDP_ERR_INVALID_ARG;
  } else if (access(dir, W_OK | X_OK) != 0) {
    DDP_LOG_ERROR("option --trace %s: its directory %s is not writable: %s", path, dir,
                  strerror(errno));
    out = DDP_ERR_INVALID_ARG;
  }
  free(copy);
  return out;
}
