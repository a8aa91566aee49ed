/* JSONL metrics writer (see metrics.h), with jansson doing the JSON so that
 * flag values and device names are always escaped correctly. */
#include <config.h>

#include "train/metrics.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddptrain/check.h"
#include "ddptrain/version.h"
#include "core/clock.h"

double ddp_metrics_unix_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Appends "time" and "elapsed_s", then writes the object as one line. */
static ddp_status_t emit(ddp_metrics_t *m, json_t *o) {
  json_object_set_new(o, "time", json_real(ddp_metrics_unix_now()));
  json_object_set_new(o, "elapsed_s", json_real(ddp_clock_seconds() - m->start_mono));
  char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  if (!line) DDP_FAIL(DDP_ERR_OOM, "metrics: cannot format a record for %s", m->path);
  int bad = fprintf(m->f, "%s\n", line) < 0 || fflush(m->f) != 0;
  free(line);
  if (bad) DDP_FAIL(DDP_ERR_IO, "cannot write metrics to %s: %s", m->path, strerror(errno));
  return DDP_OK;
}

/* A JSON string of `s`. JSON text is UTF-8 and jansson refuses anything
 * else, so bytes of another encoding (a path, say) become '?' rather than
 * losing the field. */
static json_t *text(const char *s) {
  if (!s) return json_string("");
  json_t *j = json_string(s);
  if (j) return j;
  char *copy = strdup(s);
  if (!copy) return json_null();
  for (char *c = copy; *c; ++c)
    if ((unsigned char)*c >= 0x80) *c = '?';
  j = json_string(copy);
  free(copy);
  return j ? j : json_null();
}

/* Every flag that applies to the run, by long name, with the value as
 * ddp_options_format writes it (text that parses back to the same value),
 * so a run can be repeated from its header alone. */
static json_t *flags_object(const ddp_options_t *o) {
  json_t *flags = json_object();
  char value[4096];
  for (int i = 0; i < ddp_options_count(); ++i) {
    if (!ddp_options_applies(o, i)) continue;
    if (ddp_options_format(o, i, value, sizeof value) != 0)
      snprintf(value, sizeof value, "(too long to record)");
    json_object_set_new(flags, ddp_options_name(i), text(value));
  }
  return flags;
}

static ddp_status_t write_header(ddp_metrics_t *m, const ddp_metrics_run_t *run) {
  char iso[32];
  const time_t secs = (time_t)run->start_unix;
  struct tm tm;
  gmtime_r(&secs, &tm);
  strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
  json_t *o = json_object();
  json_object_set_new(o, "record", json_string("header"));
  json_object_set_new(o, "version", json_string(ddp_version()));
  json_object_set_new(o, "commit", text(DDP_COMMIT));
  json_object_set_new(o, "world_size", json_integer(run->world_size));
  json_object_set_new(o, "device", text(run->device));
  json_object_set_new(o, "precision", text(run->precision));
  json_object_set_new(o, "start_step", json_integer(run->start_step));
  json_object_set_new(o, "start_time", json_string(iso));
  json_object_set_new(o, "start_unix", json_real(run->start_unix));
  json_object_set_new(o, "flags", flags_object(run->opts));
  return emit(m, o);
}

ddp_status_t ddp_metrics_open(ddp_metrics_t *m, const char *path, const ddp_metrics_run_t *run) {
  memset(m, 0, sizeof *m);
  if (!path || !*path) return DDP_OK;
  snprintf(m->path, sizeof m->path, "%s", path);
  m->start_mono = run->start_mono;
  m->f = fopen(path, "a");
  if (!m->f) DDP_FAIL(DDP_ERR_IO, "--metrics %s: %s", path, strerror(errno));
  return write_header(m, run);
}

static const char *record_name(ddp_metrics_record_t kind) {
  switch (kind) {
    case DDP_METRICS_EVAL:
      return "eval";
    case DDP_METRICS_FINAL:
      return "final";
    case DDP_METRICS_BUCKET_TUNE:
      return "bucket_tune";
    case DDP_METRICS_STEP:
      break;
  }
  return "step";
}

ddp_status_t ddp_metrics_write(ddp_metrics_t *m, ddp_metrics_record_t kind, ...) {
  if (!m->f) return DDP_OK;
  json_t *o = json_object();
  json_object_set_new(o, "record", json_string(record_name(kind)));
  if (kind == DDP_METRICS_FINAL) json_object_set_new(o, "final", json_true());
  va_list ap;
  va_start(ap, kind);
  for (const char *key = va_arg(ap, const char *); key; key = va_arg(ap, const char *)) {
    double v = va_arg(ap, double);
    json_t *j = !isfinite(v)                        ? json_null()
                : (v == floor(v) && fabs(v) < 9e15) ? json_integer((json_int_t)v)
                                                    : json_real(v);
    json_object_set_new(o, key, j);
  }
  va_end(ap);
  return emit(m, o);
}

void ddp_metrics_close(ddp_metrics_t *m) {
  if (m->f) fclose(m->f);
  m->f = NULL;
}
