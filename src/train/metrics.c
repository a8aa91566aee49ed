/* JSONL metrics writer (see metrics.h), with jansson doing the JSON. */
#include "train/metrics.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "ddptrain/check.h"

ddp_status_t ddp_metrics_open(ddp_metrics_t *m, const char *path) {
  memset(m, 0, sizeof *m);
  if (!path || !*path) return DDP_OK;
  snprintf(m->path, sizeof m->path, "%s", path);
  m->f = fopen(path, "a");
  if (!m->f) DDP_FAIL(DDP_ERR_IO, "--metrics %s: %s", path, strerror(errno));
  return DDP_OK;
}

ddp_status_t ddp_metrics_write(ddp_metrics_t *m, int final, ...) {
  if (!m->f) return DDP_OK;
  json_t *o = json_object();
  if (final) json_object_set_new(o, "final", json_true());
  va_list ap;
  va_start(ap, final);
  for (const char *key = va_arg(ap, const char *); key; key = va_arg(ap, const char *)) {
    double v = va_arg(ap, double);
    json_t *j = !isfinite(v)                        ? json_null()
                : (v == floor(v) && fabs(v) < 9e15) ? json_integer((json_int_t)v)
                                                    : json_real(v);
    json_object_set_new(o, key, j);
  }
  va_end(ap);
  char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  if (!line) DDP_FAIL(DDP_ERR_OOM, "metrics: cannot format a record");
  int bad = fprintf(m->f, "%s\n", line) < 0 || fflush(m->f) != 0;
  free(line);
  if (bad) DDP_FAIL(DDP_ERR_IO, "cannot write metrics to %s: %s", m->path, strerror(errno));
  return DDP_OK;
}

void ddp_metrics_close(ddp_metrics_t *m) {
  if (m->f) fclose(m->f);
  m->f = NULL;
}
