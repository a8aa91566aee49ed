/* Process bootstrap: who am I among the ranks, and how to stop them all.
 *
 * Under mpirun/srun this initialises MPI (thread level MULTIPLE, which the
 * gradient reducer's progress thread will need) and finds the node-local rank
 * through MPI_Comm_split_type(SHARED), which is what picks a GPU and sizes CPU
 * thread pools. A plain `./ddptrain` is an MPI singleton of world size 1, and
 * a build without MPI behaves the same way. abort() uses MPI_Abort so that a
 * fatal error on one rank ends the job instead of leaving the others blocked
 * in a collective. */
#ifndef DDPTRAIN_DIST_H
#define DDPTRAIN_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_dist {
  int rank, world;
  int local_rank, local_size; /* among ranks on this node */
  int thread_level;           /* MPI thread level provided (0 without MPI) */
  int using_mpi;              /* nonzero when MPI was initialised here */
  char host[64];
} ddp_dist_t;

ddp_status_t ddp_dist_init(int *argc, char ***argv, ddp_dist_t *dist);
void ddp_dist_finalize(ddp_dist_t *dist);
/* Ends every rank of the job with exit code `code`; does not return. */
void ddp_dist_abort(const ddp_dist_t *dist, int code) __attribute__((noreturn));

/* Collective: DDP_OK when every rank passed the same value; otherwise
 * DDP_ERR_MISMATCH on every rank, with one log line naming `what`, the lowest
 * and highest values and a rank holding each. */
ddp_status_t ddp_dist_agree_u64(const ddp_dist_t *dist, const char *what, uint64_t value);

/* Collective: sum of a double over ranks (the world-size-1 sum is the value). */
ddp_status_t ddp_dist_sum_double(const ddp_dist_t *dist, double *value);

/* Collective: every rank receives every rank's `line` (at most width - 1
 * chars, truncated beyond) in rank order, width bytes apart, in *all (caller
 * frees). */
ddp_status_t ddp_dist_allgather_lines(const ddp_dist_t *dist, const char *line, size_t width,
                                      char **all);

/* The rank the launcher gave this process, readable before MPI_Init (from
 * OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK or SLURM_PROCID); -1 when none
 * says, as for a plain `./ddptrain`. */
int ddp_dist_launcher_rank(void);

/* A one-line name of the MPI library ("Open MPI v4.1.4, ...") or "none". */
const char *ddp_dist_library(void);

#ifdef __cplusplus
}
#endif
#endif
