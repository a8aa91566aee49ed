/* Liveness watch between ranks: a background thread per rank that notices a
 * rank which has stopped (SIGSTOP, a hung node, a dead process the launcher
 * did not report) and ends the job instead of letting the others wait forever
 * in a collective.
 *
 * The ranks form a ring on a private duplicate of MPI_COMM_WORLD: each sends
 * a small beat to rank+1 every timeout/10 seconds and watches rank-1. A rank
 * that has heard nothing from rank-1 for `timeout` seconds logs
 * "rank R on HOST has not been heard from for S s" and calls MPI_Abort, which
 * ends every process of the job. The beats come from the thread, not the step
 * loop, so a slow step, an evaluation or a checkpoint never looks like a
 * silence; only a process that is not running at all does.
 *
 * Stopping is orderly: stop() sends a final "bye" to rank+1 and waits for the
 * bye of rank-1 (still watching it), so a rank that finishes first does not
 * make a slower neighbour (rank 0 exporting, say) look dead. */
#ifndef DDPTRAIN_COMM_HEARTBEAT_H
#define DDPTRAIN_COMM_HEARTBEAT_H

#include "ddptrain/status.h"
#include "runtime/dist.h"

typedef struct ddp_heartbeat ddp_heartbeat_t;

/* Collective over MPI_COMM_WORLD. timeout_s <= 0 or a world of one rank
 * gives *out = NULL (nothing to watch) and DDP_OK. Needs the MPI thread level
 * MPI_THREAD_MULTIPLE; with less it warns and disables itself (*out = NULL),
 * since a thread calling MPI next to the step loop would be unsafe. */
ddp_status_t ddp_heartbeat_start(const ddp_dist_t *dist, double timeout_s, ddp_heartbeat_t **out);

/* Says goodbye to the ring, waits for the left neighbour's goodbye, joins the
 * thread and frees everything. NULL is a no-op. */
void ddp_heartbeat_stop(ddp_heartbeat_t *hb);

#endif
