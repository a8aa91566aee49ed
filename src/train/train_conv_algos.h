/* --conv-algos FILE|auto|none: the trainer's side of the convolution
 * algorithm record (backend/conv_algos.h). At set-up every rank reads the
 * file when it exists and hands the record to its backend, whose conv
 * table then takes each recorded shape's algorithm without timing; after a
 * step (or the final evaluation) that searched new shapes, rank 0 writes
 * the grown record back, atomically. So a second run with the same file,
 * and a run resumed from --save (auto keeps the file there), convolve with
 * the algorithms the first one chose, and compute the same bits.
 *
 * Ranks search on their own in a run that starts without a record; after
 * the first step they all take rank 0's choices, which are the ones
 * written, so every later run's ranks use those too.
 * On the CPU nothing is recorded (its default takes oneDNN's first choice,
 * which needs no record), and the file, if any, is only checked. */
#ifndef DDPTRAIN_TRAIN_TRAIN_CONV_ALGOS_H
#define DDPTRAIN_TRAIN_TRAIN_CONV_ALGOS_H

#include "backend/conv_algos.h"
#include "comm/comm.h"
#include "ddptrain/backend.h"
#include "ddptrain/options.h"

typedef struct ddp_train_conv_algos {
  ddp_conv_algos_t rec;
  char path[1100]; /* "" = off */
  int writer;      /* rank 0 */
  int warned;      /* a failed save was reported; later saves are not tried */
  int agreed;      /* the ranks took rank 0's record (once, after the first step) */
  ddp_backend_t *be;
} ddp_train_conv_algos_t;

/* Resolves the flag (auto: DIR/conv-algos.txt with --save DIR, else off),
 * reads an existing file (a bad one is DDP_ERR_FORMAT naming file and
 * line), checks on rank 0 that a missing one can be created, and sets
 * be->conv_algos. */
ddp_status_t ddp_train_conv_algos_setup(ddp_train_conv_algos_t *t, const ddp_options_t *o,
                                        ddp_backend_t *be, int rank);
/* After the run's first step, on every rank of a job of several (a
 * collective there; nothing with one rank or with the record off): rank
 * 0's record is broadcast, the other ranks take it in place of their own
 * and re-take their shapes' algorithms from it (the conv table's
 * conv_algos_reload). So from the second step on every rank convolves with
 * rank 0's choices, as every rank of a rerun or a resume that reads the
 * record will, and a resume after the first step repeats the bits. The
 * first step itself was each rank's own search, as in any run that starts
 * without a record. */
ddp_status_t ddp_train_conv_algos_agree(ddp_train_conv_algos_t *t, ddp_comm_t *comm, int world,
                                        int rank);
/* Rank 0: writes the record when it has grown since the last write. A
 * failed write is a warning naming the file and the cause (the run goes
 * on; only the next run's reproducibility is at stake), said once. */
void ddp_train_conv_algos_save_new(ddp_train_conv_algos_t *t);
/* Detaches the record from the backend and frees it. */
void ddp_train_conv_algos_destroy(ddp_train_conv_algos_t *t);

#endif
