/* The convolution algorithm record (internal; --conv-algos): which algorithm
 * the GPU's autotuning chose for each convolution op, shape, storage type
 * and mode, kept in a text file so that another run, or a resumed one, uses
 * the same algorithms and so computes the same bits.
 *
 * Why: autotuning times every candidate once, and on small or near-tied
 * shapes the timings of two candidates swap from run to run (an H100 timed
 * one forward at 0.074 ms and at 0.039 ms in two runs); candidates round
 * differently, so two runs that chose differently train to different
 * weights. A run handed a record looks each shape up there first and
 * searches only the shapes it lacks, adding them.
 *
 * The file: a header line, then one line per choice, e.g.
 *   # ddptrain convolution algorithms v1
 *   conv_fwd bf16 N=32 H=32 W=32 C=3 K=8 R=3 S=3 stride=1 pad=1 det=1 tf32=1 algo=1 math=1
 * det and tf32 are the mode the choice was made under (--deterministic,
 * --tf32): a run in another mode searches afresh. Blank lines and lines
 * starting with '#' after the header are ignored. Reading checks every
 * field and names the file and line of the first bad one; writing replaces
 * the file atomically (a temporary file, then a rename). */
#ifndef DDPTRAIN_BACKEND_CONV_ALGOS_H
#define DDPTRAIN_BACKEND_CONV_ALGOS_H

#include <stddef.h>

#include "ddptrain/conv.h"

#define DDP_CONV_ALGOS_HEADER "# ddptrain convolution algorithms v1"

typedef enum ddp_conv_algo_op {
  DDP_CONV_ALGO_FWD = 0,
  DDP_CONV_ALGO_BWD_DATA = 1,
  DDP_CONV_ALGO_BWD_WEIGHTS = 2,
} ddp_conv_algo_op_t;

/* What a choice is keyed by. */
typedef struct ddp_conv_algo_key {
  ddp_conv_algo_op_t op;
  ddp_dtype_t dt;
  ddp_conv_shape_t sh;
  int deterministic; /* 1: deterministic algorithms only */
  int tf32;          /* 1: fp32 may use TF32 tensor cores */
} ddp_conv_algo_key_t;

typedef struct ddp_conv_algo_entry {
  ddp_conv_algo_key_t key;
  int algo; /* the library's algorithm number */
  int math; /* its math mode number */
} ddp_conv_algo_entry_t;

struct ddp_conv_algos {
  ddp_conv_algo_entry_t *entries;
  size_t n, cap;
  int dirty; /* entries added since the last save (or load) */
};
typedef struct ddp_conv_algos ddp_conv_algos_t;

/* The op's name in the file ("conv_fwd", "conv_bwd_data",
 * "conv_bwd_weights"). */
const char *ddp_conv_algo_op_name(ddp_conv_algo_op_t op);

/* The entry for key, or NULL. */
const ddp_conv_algo_entry_t *ddp_conv_algos_find(const ddp_conv_algos_t *r,
                                                 const ddp_conv_algo_key_t *key);
/* Adds the choice for key, or replaces the one there; marks the record
 * dirty when that changes it. */
ddp_status_t ddp_conv_algos_put(ddp_conv_algos_t *r, const ddp_conv_algo_key_t *key, int algo,
                                int math);

/* Parses text (len bytes) into r, which must be empty; `name` (the file)
 * goes into error messages with the line number. DDP_ERR_FORMAT on any bad
 * line, r then left empty. */
ddp_status_t ddp_conv_algos_parse(ddp_conv_algos_t *r, const char *text, size_t len,
                                  const char *name);
/* The file's text for r (malloc'd, NUL-terminated). */
ddp_status_t ddp_conv_algos_format(const ddp_conv_algos_t *r, char **text);

/* Reads path into r (empty). A missing file (or folder on the way), when
 * missing is not NULL:
 * DDP_ERR_IO with *missing set, nothing logged, r untouched; every other
 * failure is logged. */
ddp_status_t ddp_conv_algos_load(ddp_conv_algos_t *r, const char *path, int *missing);
/* Writes r to path atomically and clears dirty; on failure path is as it
 * was and no temporary file is left. */
ddp_status_t ddp_conv_algos_save(ddp_conv_algos_t *r, const char *path);

void ddp_conv_algos_clear(ddp_conv_algos_t *r);

#endif
