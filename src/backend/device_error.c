/* Device error messages (see device_error.h). Pure formatting: the CUDA
 * backend and converters gather the numbers and log the result. */
#include <config.h>

#include <stdio.h>
#include <string.h>

#include "backend/device_error.h"

#define MIB 1048576.0

void ddp_device_op_name(char *out, size_t len, const char *expr) {
  if (!len) return;
  if (!expr) expr = "?";
  size_t n = strcspn(expr, "(");
  while (n > 0 && expr[n - 1] == ' ') --n;
  if (n == 0) n = strlen(expr);
  if (n >= len) n = len - 1;
  memcpy(out, expr, n);
  out[n] = '\0';
}

void ddp_device_error_message(char *out, size_t len, int rank, int device, const char *expr,
                              const char *lib, const char *msg, long code) {
  char op[96];
  ddp_device_op_name(op, sizeof op, expr);
  snprintf(out, len, "rank %d: %s failed on cuda:%d: %s (%s error %ld)", rank, op, device,
           msg ? msg : "unknown error", lib, code);
}

void ddp_device_oom_message(char *out, size_t len, const ddp_oom_report_t *r) {
  snprintf(out, len,
           "rank %d: %s of %zu bytes (%.1f MiB) failed on cuda:%d: out of memory with %.1f MiB "
           "free (%zu bytes) of %.1f MiB; ddptrain holds %.1f MiB (%.1f MiB in use); lower "
           "--tokens-per-batch",
           r->rank, r->what, r->requested, r->requested / MIB, r->device, r->free_bytes / MIB,
           r->free_bytes, r->total_bytes / MIB, r->reserved / MIB, r->in_use / MIB);
}
