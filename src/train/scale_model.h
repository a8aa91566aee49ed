/* The scaling model behind ddptrain --plan-only --scale (docs/design.md
 * §6.8): predicts one rank's step time, the communication it leaves
 * exposed and the scaling efficiency of data-parallel training on N GPUs
 * of a described cluster, from the model's parameter table (the reducer's
 * own bucket cut, in backward order) and its FLOPs per step.
 *
 * Pure functions of their arguments: no communicator, no device, no I/O,
 * so every formula is checked by hand-computed cases (check_scale_model).
 *
 * Collectives are an alpha-beta model: a step of a ring costs the link's
 * latency alpha, and the bytes a rank sends cost bytes / bandwidth. Inside
 * a node a ring runs at the GPUs' bus bandwidth; between nodes the traffic
 * of a node's GPUs shares the node's network bandwidth (all its NICs).
 * Two algorithms, the cheaper one taken per message (as NCCL picks ring or
 * tree by size):
 *   ring  one ring over all N GPUs: 2(N-1)/N * S/B + 2(N-1) alpha, B the
 *         slower of the two bandwidths, alpha the slower link's latency;
 *   tree  hierarchical: reduce-scatter inside each node, a binary-tree
 *         all-reduce between the M nodes (2 S/B_inter + 2 ceil(log2 M)
 *         alpha_inter: a pipelined tree moves every byte up and down once),
 *         all-gather inside each node.
 * Reduce-scatter and all-gather: (N-1)/N * S/B + (N-1) alpha (ring), or
 * the same inside a node then between nodes on the node's share. */
#ifndef DDPTRAIN_SCALE_MODEL_H
#define DDPTRAIN_SCALE_MODEL_H

#include <stddef.h>

#include "ddptrain/param.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A cluster of identical nodes (train/scale_cluster.h fills one from a
 * preset or a file). */
typedef struct ddp_scale_cluster {
  char name[64];
  int gpus_per_node;
  double intra_gbps;       /* Gbit/s: a GPU's all-reduce bus bandwidth inside a node */
  double inter_gbps;       /* Gbit/s: a node's network bandwidth, all its NICs together */
  double intra_latency_us; /* per ring step inside a node */
  double inter_latency_us; /* per step across the network */
  double gemm_tflops;      /* FLOP rate a GPU sustains on the model's step (not its peak) */
  double memory_gbytes_s;  /* device memory bandwidth: the optimizer pass is bound by it */
  double gpu_memory_gib;   /* device memory: decides whether --zero 0 fits */
} ddp_scale_cluster_t;

typedef enum ddp_scale_collective {
  DDP_SCALE_ALL_REDUCE,
  DDP_SCALE_REDUCE_SCATTER,
  DDP_SCALE_ALL_GATHER
} ddp_scale_collective_t;

/* The two textbook ring costs in ms, for n ranks, `bytes` per rank, a link
 * of gbps Gbit/s and latency_us per step. 0 for n <= 1. */
double ddp_scale_ring_allreduce_ms(int n, double bytes, double gbps, double latency_us);
double ddp_scale_ring_gather_ms(int n, double bytes, double gbps, double latency_us);

/* A collective of `bytes` per rank over n GPUs of cluster c, in ms: the
 * cheaper of ring and tree (above); 0 for n <= 1. *algo (optional) gets
 * "ring" or "tree". */
double ddp_scale_collective_ms(const ddp_scale_cluster_t *c, ddp_scale_collective_t kind, int n,
                               double bytes, const char **algo);

/* The overlap of bucket collectives with backward on one communication
 * stream: bucket k's gradients are ready at ready_ms[k] (from the start of
 * the last backward pass, ascending), its collective takes comm_ms[k] and
 * starts when it is ready and bucket k-1's has ended. Returns the exposed
 * time, max(0, end of the last collective - backward_ms); end_ms (optional,
 * n entries) gets each collective's end. */
double ddp_scale_overlap(const double *ready_ms, const double *comm_ms, int n, double backward_ms,
                         double *end_ms);

/* What one rank does per step, apart from the cluster. */
typedef struct ddp_scale_workload {
  const ddp_param_t *tensors; /* the parameter table, in backward order */
  int n_tensors;
  size_t n_params;
  double flops_per_step;    /* forward + backward of all micro-steps of one rank */
  int accum;                /* micro-steps per step: only the last one reduces */
  double grad_bytes;        /* bytes per gradient element on the wire (--grad-reduce-dtype) */
  double weight_bytes;      /* bytes per element of the compute weights (--zero 1's all-gather) */
  double optim_bytes;       /* device memory traffic of the optimizer pass per parameter */
  double state_bytes;       /* model-state memory per parameter with --zero 0 */
  double optim_state_bytes; /* the part of state_bytes that --zero 1 divides by N */
  size_t n_buffer_floats;   /* the model's buffers (fp32, never sharded) */
} ddp_scale_workload_t;

/* One prediction: N GPUs, one --zero setting and bucket size. Times in ms
 * per optimizer step of one rank. */
typedef struct ddp_scale_point {
  int n, zero;
  double bucket_mb;
  int n_buckets;
  double forward_ms, backward_ms; /* all micro-steps */
  double compute_ms;              /* forward + backward */
  double comm_ms;                 /* the gradient collectives, end to end if nothing overlapped */
  double exposed_ms;              /* what overlap leaves of them after backward */
  double optimizer_ms;            /* the optimizer pass (divided by N under --zero 1) */
  double gather_ms;               /* --zero 1: the all-gather of the updated weights */
  double step_ms;                 /* compute + exposed + optimizer + gather */
  double efficiency;              /* per-GPU throughput at N over that at 1 */
  double memory_gib;              /* model states per GPU, buffers included (no activations) */
} ddp_scale_point_t;

/* Predicts one point. Backward time is spread over the tensors in
 * proportion to their element counts (a 2-D weight of P elements costs
 * about 4PT FLOPs of backward over T tokens; the rest of the step scales
 * the same way), forward is a third of the FLOPs and backward two thirds.
 * Fails (DDP_ERR_INVALID_ARG) on n < 1, a cap that is not > 0, a workload
 * without tensors or FLOPs, or a cluster value that is not > 0; DDP_ERR_OOM
 * without memory for the bucket cut. */
ddp_status_t ddp_scale_predict(const ddp_scale_cluster_t *c, const ddp_scale_workload_t *w, int n,
                               int zero, double bucket_mb, double first_bucket_mb,
                               ddp_scale_point_t *out);

/* The choice for n GPUs among the bucket sizes given (MiB) and both
 * --zero settings: --zero 1 when the model states of --zero 0 do not fit
 * the GPU's memory, or when it is not slower (within 0.5%); otherwise 0.
 * The bucket size is the fastest for that setting (the first of equals).
 * why gets one sentence naming the figures. */
ddp_status_t ddp_scale_recommend(const ddp_scale_cluster_t *c, const ddp_scale_workload_t *w, int n,
                                 const double *bucket_mbs, int n_sizes, double first_bucket_mb,
                                 ddp_scale_point_t *best, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
