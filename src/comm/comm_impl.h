/* What communicator implementations share (internal): the ops table each one
 * fills (with the capabilities its kind declares), the handle pool's slots,
 * and the communicator object itself.
 *
 * comm.c owns everything that is the same for every implementation: argument
 * checks, the handle pool (acquire at issue, release at wait), statistics
 * counters and the wait-time clock. An implementation only starts a
 * collective described by a slot and later completes it, so a device
 * communicator (events per slot, a comm stream) fits the same table. */
#ifndef DDPTRAIN_COMM_IMPL_H
#define DDPTRAIN_COMM_IMPL_H

#include <config.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "comm/comm.h"
#include "core/clock.h"

typedef enum ddp_comm_op {
  DDP_COMM_OP_ALLREDUCE = 0,
  DDP_COMM_OP_BROADCAST = 1,
  DDP_COMM_OP_ALLGATHER = 2,
  DDP_COMM_OP_BARRIER = 3,
  DDP_COMM_OP_REDUCE_SCATTER = 4
} ddp_comm_op_t;

/* One collective in flight. comm.c fills the description before start() and
 * does not touch the slot again until the implementation says it is done;
 * `done` and `status` belong to the implementation (and to its locking). */
typedef struct ddp_comm_slot {
  int index;    /* position in the pool; implementations key per-slot state on it */
  uint16_t gen; /* bumped at each acquire; part of the handle */
  int in_use;
  ddp_comm_op_t op;
  void *buf;        /* allreduce and broadcast data; allgather, reduce_scatter receive buffer */
  const void *send; /* allgather send block (NULL when in place); reduce_scatter send buffer */
  size_t count;     /* allreduce elements; broadcast bytes; allgather bytes per rank;
                       reduce_scatter elements per rank */
  ddp_dtype_t dtype;
  int root;
  int done;
  ddp_status_t status;
} ddp_comm_slot_t;

/* What a kind declares about itself (see ddp_comm_caps_t, which is this
 * resolved at run time plus the name and whether it is built). Selection
 * by capability reads only this, never a kind's name. Every registry entry of
 * one kind declares the same, so kinds with several entries share theirs
 * through the macros below. */
typedef struct ddp_comm_decl {
  const char *label;
  ddp_comm_role_t role;
  int multi_rank;
  int device_per_rank;
  unsigned reads; /* DDP_COMM_READS bits it always reads */
  /* A host communicator that may be device-aware: the DDP_COMM_READS bits
   * its library reads as well, asked at run time (the answer depends on the
   * MPI library found when the program starts, not on this build). NULL:
   * nothing beyond `reads`. */
  unsigned (*reads_at_run_time)(void);
} ddp_comm_decl_t;

typedef struct ddp_comm_ops {
  const char *name; /* the kind: "self", "mpi", "nccl" */
  const char *mode; /* progress mode: "thread" / "test" for MPI, "stream" for NCCL; NULL where a
                       kind has none */
  ddp_comm_decl_t caps;
  /* Nonzero when this implementation can serve `dist`; otherwise, when why
   * is not NULL, writes the reason there. */
  int (*available)(const ddp_dist_t *dist, char *why, size_t why_len);
  ddp_status_t (*init)(ddp_comm_t *c, const ddp_dist_t *dist);
  /* Completes whatever is still in flight, then frees c->impl. */
  void (*shutdown)(ddp_comm_t *c);
  /* Issues the collective described by s, ordered after the work on stream. */
  ddp_status_t (*start)(ddp_comm_t *c, ddp_comm_slot_t *s, void *stream);
  /* Block until s is done; return its status. */
  ddp_status_t (*wait)(ddp_comm_t *c, ddp_comm_slot_t *s);
  ddp_status_t (*test)(ddp_comm_t *c, ddp_comm_slot_t *s, int *done);
  ddp_status_t (*stream_wait)(ddp_comm_t *c, ddp_comm_slot_t *s, void *stream);
  void (*progress)(ddp_comm_t *c);
  ddp_status_t (*barrier)(ddp_comm_t *c);
  /* Optional (NULL: nothing to do): moves time measured on the device into
   * comm_ns before the statistics are read. The NCCL communicator times its
   * collectives with CUDA events and can read them only once they are done. */
  void (*harvest)(ddp_comm_t *c);
} ddp_comm_ops_t;

struct ddp_comm {
  const ddp_comm_ops_t *ops;
  int rank, world;
  int max_inflight;
  /* max_inflight slots handed out as handles, plus one more at index
   * max_inflight that implementations may use for the blocking barrier. */
  ddp_comm_slot_t *slots;
  int *free_slots; /* stack of free slot indices */
  int n_free;
  ddp_comm_stats_t stats; /* all but comm_ms, which is comm_ns below */
  /* Written by a progress thread as well as the caller. */
  _Atomic int64_t comm_ns;
  /* From the config, for device communicators: the backend whose GPU and
   * compute stream they use, and the host-wait timeout (0 = the kind's
   * default). Host communicators ignore both. */
  ddp_backend_t *be;
  double timeout_s;
  void *impl;
};

/* The MPI library's device-awareness as DDP_COMM_READS bits (CUDA memory
 * when it is CUDA-aware); 0 in a build without MPI. */
unsigned ddp_comm_mpi_reads_at_run_time(void);

/* The declarations of kinds that have several registry entries or that a
 * build may lack: the kind's own file uses them for its ops, and comm.c for
 * the entry that says a build lacks the kind (so "this build has no NCCL
 * communicator" needs no name in the code that selects). */
#define DDP_COMM_DECL_MPI                                                              \
  {                                                                                    \
    .label = "MPI", .role = DDP_COMM_ROLE_HOST, .multi_rank = 1, .device_per_rank = 0, \
    .reads = DDP_COMM_READS(DDP_DEVICE_KIND_CPU),                                      \
    .reads_at_run_time = ddp_comm_mpi_reads_at_run_time                                \
  }
/* GPU memory only (host buffers are refused), and a GPU per rank. */
#define DDP_COMM_DECL_NCCL                                                                \
  {                                                                                       \
    .label = "NCCL", .role = DDP_COMM_ROLE_DEVICE, .multi_rank = 1, .device_per_rank = 1, \
    .reads = DDP_COMM_READS(DDP_DEVICE_KIND_CUDA), .reads_at_run_time = NULL              \
  }

extern const ddp_comm_ops_t ddp_comm_self_ops;
#if DDP_HAVE_MPI
extern const ddp_comm_ops_t ddp_comm_mpi_thread_ops;
extern const ddp_comm_ops_t ddp_comm_mpi_test_ops;
#endif
/* NCCL needs a GPU (the CUDA backend) and MPI (to hand rank 0's unique id to
 * the other ranks). */
#define DDP_COMM_HAVE_NCCL (DDP_HAVE_NCCL && DDP_HAVE_CUDA && DDP_HAVE_MPI)
#if DDP_COMM_HAVE_NCCL
extern const ddp_comm_ops_t ddp_comm_nccl_ops;
#endif

static inline void ddp_comm_add_time(ddp_comm_t *c, int64_t ns) {
  atomic_fetch_add_explicit(&c->comm_ns, ns, memory_order_relaxed);
}

#endif
