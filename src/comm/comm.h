/* The communicator: asynchronous collectives over the ranks of a job.
 *
 * The gradient reducer issues one all-reduce per bucket while backward is
 * still running and waits for them all before the optimizer, so every
 * collective here is asynchronous: a call *issues* the operation and returns a
 * completion handle; wait() (or test()/stream_wait()) completes it. One
 * interface serves three implementations, picked by name (or, for data in a
 * backend's memory, by what they declare they can read: see "capabilities"
 * below):
 *   - "self": world size 1; every collective is complete when issued;
 *   - "mpi":  host buffers over MPI, progressed by a helper thread running
 *             blocking collectives ("thread") or by nonblocking MPI requests
 *             tested whenever the caller calls in ("test");
 *   - "nccl": GPU buffers only (builds with NCCL, CUDA and MPI; the config
 *             names the CUDA backend). Progress mode "stream": a collective
 *             runs on the communicator's own high-priority stream after an
 *             event recorded on the caller's stream; stream_wait() makes a
 *             stream wait for it on the device, wait()/test() poll its
 *             completion event from the host. Host waits give up after the
 *             config's timeout, and an NCCL error or a timeout aborts the
 *             communicator: that call and every later one fail with the
 *             same cause (DDP_ERR_NCCL, DDP_ERR_TIMEOUT or DDP_ERR_CUDA)
 *             instead of hanging. A watchdog thread (comm/comm_watchdog.h)
 *             holds the collectives no host thread waits for to the same
 *             timeout, and ends the job when one overruns or NCCL fails.
 * The `stream` arguments exist for the device communicator: it orders the
 * collective after the work already queued on `stream` (NULL: the backend's
 * compute stream), and stream_wait() makes a stream wait for completion
 * without a host sync. Host communicators ignore them.
 *
 * Rules, the same for every implementation so a reducer bug shows up on one
 * rank too:
 *   - collectives must be issued in the same order, with the same sizes, on
 *     every rank;
 *   - a buffer belongs to the communicator from issue until its handle
 *     completes: do not read or write it in between (for "nccl": until the
 *     stream that reads it has waited through stream_wait(), or wait());
 *   - handles come from a fixed pool of max_inflight slots allocated at create
 *     (nothing is allocated per collective); issuing with every slot in use is
 *     DDP_ERR_INVALID_ARG, never a wait; each handle must be released by
 *     exactly one wait() or stream_wait(); using it again is an error;
 *   - one host thread uses a communicator (the internal progress thread aside);
 *   - create and destroy are collective (the MPI one duplicates
 *     MPI_COMM_WORLD, so its traffic never mixes with other MPI calls), and
 *     destroy must come before ddp_dist_finalize() (and, for "nccl", before
 *     the backend is destroyed). */
#ifndef DDPTRAIN_COMM_H
#define DDPTRAIN_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "ddptrain/dtype.h"
#include "ddptrain/status.h"
#include "runtime/dist.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_comm ddp_comm_t; /* opaque */

/* Completion handle: names a slot of the pool (and, in its upper bits, the
 * slot's generation, so a handle used after its release is reported instead
 * of silently waiting on whatever reuses the slot). Non-negative when valid;
 * DDP_COMM_HANDLE_NONE is never returned for an issued collective. */
typedef int32_t ddp_comm_handle_t;
#define DDP_COMM_HANDLE_NONE ((ddp_comm_handle_t)-1)

/* Largest accepted max_inflight (the slot index must fit 16 bits). */
#define DDP_COMM_MAX_INFLIGHT 4096

typedef struct ddp_comm_stats {
  int64_t n_allreduce, n_broadcast, n_allgather, n_barrier; /* issued since reset */
  int64_t n_reduce_scatter;
  /* Payload bytes: allreduce count x element size, broadcast bytes,
   * allgather bytes_per_rank x world (the gathered buffer), reduce_scatter
   * count_per_rank x world x element size (the buffer that is reduced). */
  int64_t bytes;
  /* Wall time spent inside the collectives: the progress thread's blocking
   * calls ("thread"), or every MPI call the caller made: issue, test, wait
   * ("test"). It can exceed wall time minus compute when collectives overlap. */
  double comm_ms;
  double wait_ms; /* time the caller spent blocked in wait()/stream_wait()/barrier() */
} ddp_comm_stats_t;

typedef struct ddp_comm_config {
  const char *kind;     /* "self", "mpi", "nccl"; NULL or "auto": self for world 1, else mpi
                           (nccl is only ever named explicitly) */
  const char *progress; /* MPI progress: "thread" | "test"; NULL: the measured default
                           (ddp_comm_default_progress()); other kinds accept and ignore it */
  int max_inflight;     /* handle pool size; 0 = 64; at most DDP_COMM_MAX_INFLIGHT */
  /* "nccl": the CUDA backend whose GPU the communicator uses and whose
   * compute stream a NULL stream argument means. Others ignore it. */
  ddp_backend_t *be;
  /* "nccl": seconds a host wait (wait, test, barrier, destroy), or the
   * watchdog for a collective only a stream waits for, allows a collective
   * from its issue before the communicator is aborted; 0 =
   * DDP_COMM_DEFAULT_TIMEOUT_S. Others ignore it. */
  double timeout_s;
} ddp_comm_config_t;

/* The NCCL timeout when the config names none. Not the heartbeat's 20 s: a
 * dead rank is already found by the heartbeat (which ends the job), while a
 * collective's time from issue includes its peers' compute backlog and, the
 * first time, NCCL's connection set-up; this is the last line against a hang
 * of live processes. */
#define DDP_COMM_DEFAULT_TIMEOUT_S 300.0

/* Collective over the world of `dist`. cfg may be NULL (all defaults). An
 * unknown kind or progress mode, a kind this build lacks, "self" with more
 * than one rank, or "thread" progress when MPI was not initialised with
 * MPI_THREAD_MULTIPLE are errors naming the problem (only a mode the config
 * asked for: an unusable default is replaced by a usable mode, with an info
 * line). */
ddp_status_t ddp_comm_create(const ddp_dist_t *dist, const ddp_comm_config_t *cfg,
                             ddp_comm_t **out);
/* Completes all outstanding collectives (ranks are blocked in them, so they
 * cannot be abandoned; a warning names how many were never waited for), stops
 * the progress thread, frees everything. Safe on NULL. */
void ddp_comm_destroy(ddp_comm_t *c);

int ddp_comm_rank(const ddp_comm_t *c);
int ddp_comm_world(const ddp_comm_t *c);
const char *ddp_comm_name(const ddp_comm_t *c); /* "self", "mpi", "nccl" */
/* "thread", "test" (mpi); "stream" (nccl); "none" for self */
const char *ddp_comm_progress_mode(const ddp_comm_t *c);
/* Nonzero when the communicator's collectives may read and write device
 * memory of some kind (its capabilities, ddp_comm_get_caps, name which):
 * "self" (nothing moves between ranks), "nccl" (GPU memory only: host
 * buffers are rejected), "mpi" only when the MPI library is CUDA-aware
 * (Open MPI's MPIX_Query_cuda_support). */
int ddp_comm_reads_device_memory(const ddp_comm_t *c);
/* Nonzero when this build has the kind ("self", "mpi", "nccl"). */
int ddp_comm_kind_built(const char *kind);
/* The MPI library's answer, for the above and for --build-info. */
int ddp_comm_mpi_cuda_aware(void);
/* The progress mode "mpi" uses when the config names none. */
const char *ddp_comm_default_progress(void);

/* In-place SUM over all ranks of count elements of dtype at buf. fp32 and
 * int32 reduce exactly as MPI does; bf16 and fp16 reduce through a custom MPI
 * operation that widens each pair to fp32, adds and rounds back (so every
 * partial sum is rounded to 16 bits; gradients are meant to be reduced in
 * fp32). ddp_dtype_t has no fp64 yet: when it gets one, it is one line in
 * comm_mpi.c's type map. count 0 is a valid (empty) collective and buf may
 * then be NULL. h may be NULL: the call then completes before returning. */
ddp_status_t ddp_comm_allreduce_sum(ddp_comm_t *c, void *buf, size_t count, ddp_dtype_t dtype,
                                    void *stream, ddp_comm_handle_t *h);
/* bytes at buf on rank `root` are copied to buf on every rank. */
ddp_status_t ddp_comm_broadcast(ddp_comm_t *c, void *buf, size_t bytes, int root, void *stream,
                                ddp_comm_handle_t *h);
/* recv (bytes_per_rank x world) receives each rank's send block in rank
 * order. send may be recv + rank x bytes_per_rank (in place); any other
 * overlap is an error. */
ddp_status_t ddp_comm_allgather(ddp_comm_t *c, const void *send, void *recv, size_t bytes_per_rank,
                                void *stream, ddp_comm_handle_t *h);
/* SUM over all ranks, scattered: send holds world blocks of count_per_rank
 * elements, and rank r receives in recv the sum of every rank's block r
 * (MPI_Reduce_scatter_block). Same dtypes and rounding as allreduce_sum.
 * There is no in-place form: recv must not overlap send. count_per_rank 0 is
 * a valid (empty) collective and the buffers may then be NULL. */
ddp_status_t ddp_comm_reduce_scatter(ddp_comm_t *c, const void *send, void *recv,
                                     size_t count_per_rank, ddp_dtype_t dtype, void *stream,
                                     ddp_comm_handle_t *h);
/* Blocking. Ordered with the queued collectives like any other ("nccl": a
 * one-element all-reduce on the comm stream, then a host wait). */
ddp_status_t ddp_comm_barrier(ddp_comm_t *c);

/* Blocks the host until the collective is done and releases the handle;
 * returns the collective's own status. */
ddp_status_t ddp_comm_wait(ddp_comm_t *c, ddp_comm_handle_t h);
/* Non-blocking: sets *done to 1 when the collective is complete (advancing
 * nonblocking requests first), and then returns the collective's status. It
 * does not release the handle: wait() still has to, and returns at once after
 * a test() that said done. */
ddp_status_t ddp_comm_test(ddp_comm_t *c, ddp_comm_handle_t h, int *done);
/* Device communicators: makes `stream` wait for the collective without
 * blocking the host, and releases the handle. Host communicators: wait(). */
ddp_status_t ddp_comm_stream_wait(ddp_comm_t *c, ddp_comm_handle_t h, void *stream);
/* Gives nonblocking requests a chance to advance; cheap when nothing is
 * outstanding. The reducer calls it between layers. */
void ddp_comm_progress(ddp_comm_t *c);

/* "nccl": comm_ms is the device time of the collectives (CUDA events around
 * each on the comm stream) that have completed by the time of the call. */
void ddp_comm_get_stats(const ddp_comm_t *c, ddp_comm_stats_t *s);
void ddp_comm_reset_stats(ddp_comm_t *c);

/* ---- capabilities: what each kind can read, as its registry entry says --
 *
 * Code outside the communicators picks one by what it can do, never by its
 * name, so a new device communicator is used by adding its registry entry.
 * Memory kinds are ddp_device_kind_t values, DDP_DEVICE_KIND_CPU standing
 * for host memory. */

/* The bit of a memory kind in ddp_comm_caps_t.reads. */
#define DDP_COMM_READS(device_kind) (1u << (unsigned)(device_kind))
/* Memory kinds a bit can name (the width of `reads`). */
#define DDP_COMM_MEMORY_KINDS 32
#define DDP_COMM_READS_ANY (~0u)

typedef enum ddp_comm_role {
  /* The job's communicator (created by kind, "auto" picks one): host
   * memory, and device memory where its library can read it, which is
   * decided at run time (a CUDA-aware MPI). */
  DDP_COMM_ROLE_HOST = 0,
  /* A dedicated device communicator, created beside the host one for data
   * in one device kind's memory ("nccl"). */
  DDP_COMM_ROLE_DEVICE = 1
} ddp_comm_role_t;

typedef struct ddp_comm_caps {
  const char *kind;  /* the registry name, for ddp_comm_config_t.kind and logs */
  const char *label; /* how messages name it: "MPI", "NCCL" */
  int built;         /* this build has it (the registry also lists kinds it lacks) */
  ddp_comm_role_t role;
  int multi_rank;      /* can serve more than one rank ("self" cannot) */
  int device_per_rank; /* needs a device of its own on every rank (NCCL
                          refuses two ranks on one GPU) */
  /* DDP_COMM_READS bits of the memory its collectives read and write. For a
   * built host communicator this includes what its library answers now;
   * for a kind this build lacks, what it would read. */
  unsigned reads;
} ddp_comm_caps_t;

/* The registry, one entry per kind, in order of preference (built kinds
 * first): copies min(n, cap) entries to out and returns n, the number of
 * kinds. out may be NULL when cap is 0. The strings are static. */
size_t ddp_comm_kinds(ddp_comm_caps_t *out, size_t cap);
/* The capabilities of c's kind; DDP_ERR_INVALID_ARG for a NULL argument. */
ddp_status_t ddp_comm_get_caps(const ddp_comm_t *c, ddp_comm_caps_t *out);

/* Pure (no I/O, no MPI): which communicator carries data in memory of
 * `mem` over the `world` ranks of a job whose host communicator declares
 * `host`, choosing among `kinds` (a ddp_comm_kinds() table, or a test's).
 *   - world > 1 and mem a device kind: the first built, multi-rank
 *     dedicated device communicator in `kinds` that reads mem (*grad points
 *     at its entry). It is preferred even when the host communicator could
 *     read mem too: it runs on its own stream, beside the compute, and it is
 *     what ddp_comm_choose() promised every rank;
 *   - otherwise, when the host communicator reads mem: *grad = NULL (the
 *     host communicator serves; always so for host memory and for "self");
 *   - otherwise DDP_ERR_UNSUPPORTED, with a message for `rank` naming the
 *     world, the host communicator, what this build lacks, and the advice.
 * Bad input (NULL host or grad, NULL kinds with n_kinds > 0, world < 1, rank
 * outside [0, world), a host entry that is not a built host communicator,
 * mem outside [0, DDP_COMM_MEMORY_KINDS)) is DDP_ERR_INVALID_ARG. why (when
 * not NULL) receives the message of every error, "" on success. */
ddp_status_t ddp_comm_select_for_memory(const ddp_comm_caps_t *kinds, size_t n_kinds,
                                        const ddp_comm_caps_t *host, ddp_device_kind_t mem,
                                        int rank, int world, const ddp_comm_caps_t **grad,
                                        char *why, size_t why_len);

/* Collective: the communicator for data in be's memory (the gradients, the
 * weights' broadcast) on a job whose host communicator is host_comm, by
 * ddp_comm_select_for_memory() over this build's registry. *out is the new
 * dedicated device communicator (config: its kind and be; destroy it before
 * the backend), or NULL when host_comm serves. Every rank must pass the same
 * kind of backend, so every rank decides the same. Errors, with one log
 * line: NULL arguments (or a backend without ops), or a host_comm whose rank
 * or world is not dist's, DDP_ERR_INVALID_ARG (before any collective);
 * nothing can read be's memory, DDP_ERR_UNSUPPORTED ("Run a single rank per
 * GPU job, or --device cpu"); or the communicator's own create error. */
ddp_status_t ddp_comm_create_for_backend(const ddp_dist_t *dist, ddp_backend_t *be,
                                         const ddp_comm_t *host_comm, ddp_comm_t **out);

/* ---- which device and which gradient communicator a job uses ----------
 *
 * Several ranks train on GPUs only when every rank has one of its own and
 * something can reduce GPU memory; otherwise every rank must take the same
 * fallback (an NCCL rank and an MPI rank would wait for each other
 * forever). The launcher gathers one probe per rank and every rank calls
 * ddp_comm_choose() on the same array, so every rank decides the same. */
typedef struct ddp_comm_gpu_probe {
  int usable;    /* this rank can train on a GPU */
  int device;    /* the CUDA ordinal it would use (-1 when !usable) */
  char host[64]; /* ranks on one host with the same ordinal share a GPU */
  char why[96];  /* when !usable: the reason ("no CUDA-capable device is detected") */
} ddp_comm_gpu_probe_t;

typedef struct ddp_comm_choice {
  const char *device; /* the backend to create: the requested device, or "cpu" */
  /* The kind of the dedicated device communicator that will reduce the
   * gradients (its registry name, "nccl", for logs), or NULL: the host
   * communicator reduces them. */
  const char *grad_comm;
  ddp_status_t status; /* DDP_OK, or the error every rank stops with */
  /* One line for the log, "" when there is nothing to say: the reason for a
   * fallback to the CPU (info, rank 0), or the error (every rank). */
  char message[512];
} ddp_comm_choice_t;

/* ddp_comm_choose_from() over this build's registry (ddp_comm_kinds(),
 * whose host communicator's CUDA-awareness is the MPI library's answer now).
 * Every rank of a job has the same build and library, so every rank decides
 * the same. */
void ddp_comm_choose(const char *device, int world, const ddp_comm_gpu_probe_t *probes,
                     ddp_comm_choice_t *out);
/* Pure: no I/O, no MPI. `kinds` is a capability table (ddp_comm_kinds(),
 * or a test's), `device` the --device text ("auto", "cpu", "cuda",
 * "cuda:N"; NULL = "auto"), `probes` one entry per rank (NULL when world is
 * 1). The communicators that matter are the first built, multi-rank
 * dedicated device communicator in `kinds` that reads CUDA memory (the
 * "device communicator") and the first built, multi-rank host communicator
 * (the one "auto" creates for several ranks). The rules, for world > 1 and a
 * device other than cpu:
 *   - every rank has a usable GPU, no two ranks of a host share one where the
 *     device communicator needs a GPU per rank, and a device communicator is
 *     built: the device as requested, gradients over it (grad_comm = its
 *     kind);
 *   - none is built but the host communicator reads CUDA memory (a
 *     CUDA-aware MPI): the device as requested, gradients over the host
 *     communicator;
 *   - otherwise "auto" falls back to "cpu" on every rank (and says which
 *     ranks lack a GPU, or what is missing), and an explicit cuda is an error
 *     (DDP_ERR_NO_DEVICE naming the ranks without a GPU, DDP_ERR_UNSUPPORTED
 *     for a shared GPU or a build that cannot reduce GPU gradients).
 * A job where no rank has a GPU under "auto" is the plain CPU case: "cpu",
 * and no message. World 1 or "cpu": the device as given, no gradient
 * communicator of its own. NULL kinds with n_kinds > 0 is
 * DDP_ERR_INVALID_ARG; a NULL out is ignored. */
void ddp_comm_choose_from(const ddp_comm_caps_t *kinds, size_t n_kinds, const char *device,
                          int world, const ddp_comm_gpu_probe_t *probes, ddp_comm_choice_t *out);

#ifdef __cplusplus
}
#endif
#endif
