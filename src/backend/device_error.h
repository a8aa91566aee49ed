/* Device error messages (internal), formatted from plain numbers so their
 * wording is tested on machines without a GPU.
 *
 * Every message names the rank, the device and the operation: in a 64-rank
 * job "out of memory" alone does not say which GPU ran out or what asked. */
#ifndef DDPTRAIN_DEVICE_ERROR_H
#define DDPTRAIN_DEVICE_ERROR_H

#include <stddef.h>

/* The operation a checked call performs: the function name of `expr` (the
 * text before its first '('), or all of it. Writes at most len bytes. */
void ddp_device_op_name(char *out, size_t len, const char *expr);

/* "rank R: OP failed on cuda:D: MSG (LIB error CODE)". */
void ddp_device_error_message(char *out, size_t len, int rank, int device, const char *expr,
                              const char *lib, const char *msg, long code);

/* The out-of-memory message: what was asked for, what the device had free,
 * what ddptrain itself holds (in use / reserved by its caching allocator),
 * and what to change. */
typedef struct ddp_oom_report {
  int rank, device;
  const char *what; /* e.g. "cudaMalloc" */
  size_t requested, free_bytes, total_bytes;
  size_t in_use, reserved;
} ddp_oom_report_t;
void ddp_device_oom_message(char *out, size_t len, const ddp_oom_report_t *r);

#endif
