/* The scaling model's formulas and its overlap simulation (see
 * train/scale_model.h for what it assumes). */
#include "train/scale_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ddptrain/check.h"
#include "train/bucket_plan.h"

#define MIB 1048576.0
#define GIB 1073741824.0

/* Bytes a link of gbps Gbit/s moves in one millisecond. */
static double bytes_per_ms(double gbps) {
  return gbps * 1e9 / 8.0 / 1e3;
}

double ddp_scale_ring_allreduce_ms(int n, double bytes, double gbps, double latency_us) {
  if (n <= 1) return 0.0;
  return 2.0 * (n - 1) / n * bytes / bytes_per_ms(gbps) + 2.0 * (n - 1) * latency_us / 1e3;
}

double ddp_scale_ring_gather_ms(int n, double bytes, double gbps, double latency_us) {
  if (n <= 1) return 0.0;
  return (double)(n - 1) / n * bytes / bytes_per_ms(gbps) + (double)(n - 1) * latency_us / 1e3;
}

/* ceil(log2(m)) for m >= 1: the depth of a binary tree over m nodes. */
static int tree_depth(int m) {
  int d = 0;
  while ((1 << d) < m) ++d;
  return d;
}

double ddp_scale_collective_ms(const ddp_scale_cluster_t *c, ddp_scale_collective_t kind, int n,
                               double bytes, const char **algo) {
  if (algo) *algo = "ring";
  if (n <= 1) return 0.0;
  const int g = c->gpus_per_node;
  const int twice = kind == DDP_SCALE_ALL_REDUCE;
  if (n <= g) /* one node: a ring over its GPUs */
    return twice ? ddp_scale_ring_allreduce_ms(n, bytes, c->intra_gbps, c->intra_latency_us)
                 : ddp_scale_ring_gather_ms(n, bytes, c->intra_gbps, c->intra_latency_us);
  const int nodes = (n + g - 1) / g;
  /* one ring through every GPU: each of its steps waits for the network */
  const double slow = fmin(c->intra_gbps, c->inter_gbps);
  const double ring = twice ? ddp_scale_ring_allreduce_ms(n, bytes, slow, c->inter_latency_us)
                            : ddp_scale_ring_gather_ms(n, bytes, slow, c->inter_latency_us);
  /* hierarchical: the node's part first (reduce-scatter, or for an
   * all-gather the last phase: the same cost), then between nodes on the
   * node's share; the g GPUs' shares add up to S on the node's NICs */
  const double local = ddp_scale_ring_gather_ms(g, bytes, c->intra_gbps, c->intra_latency_us);
  double tree;
  if (twice)
    tree = 2.0 * local + 2.0 * bytes / bytes_per_ms(c->inter_gbps) +
           2.0 * tree_depth(nodes) * c->inter_latency_us / 1e3;
  else
    tree = local + ddp_scale_ring_gather_ms(nodes, bytes, c->inter_gbps, c->inter_latency_us);
  if (tree < ring) {
    if (algo) *algo = "tree";
    return tree;
  }
  return ring;
}

double ddp_scale_overlap(const double *ready_ms, const double *comm_ms, int n, double backward_ms,
                         double *end_ms) {
  double end = 0.0; /* the stream is free from the start of backward */
  for (int k = 0; k < n; ++k) {
    const double start = fmax(ready_ms[k], end);
    end = start + comm_ms[k];
    if (end_ms) end_ms[k] = end;
  }
  return n > 0 ? fmax(0.0, end - backward_ms) : 0.0;
}

static int cluster_usable(const ddp_scale_cluster_t *c) {
  return c->gpus_per_node >= 1 && c->intra_gbps > 0 && c->inter_gbps > 0 &&
         c->intra_latency_us >= 0 && c->inter_latency_us >= 0 && c->gemm_tflops > 0 &&
         c->memory_gbytes_s > 0 && c->gpu_memory_gib > 0;
}

ddp_status_t ddp_scale_predict(const ddp_scale_cluster_t *c, const ddp_scale_workload_t *w, int n,
                               int zero, double bucket_mb, double first_bucket_mb,
                               ddp_scale_point_t *out) {
  if (!c || !w || !out || !w->tensors || w->n_tensors < 1 || w->n_params == 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "scale model: no parameter table");
  if (n < 1 || !(bucket_mb > 0) || !(first_bucket_mb > 0) || w->accum < 1 ||
      !(w->flops_per_step > 0))
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "scale model: %d GPUs, bucket %g MiB (first %g), accum %d, %g FLOPs per step: each "
             "must be > 0",
             n, bucket_mb, first_bucket_mb, w->accum, w->flops_per_step);
  if (!cluster_usable(c))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "scale model: cluster %s has a value that is not > 0", c->name);
  ddp_bucket_span_t *spans = malloc((size_t)w->n_tensors * sizeof *spans);
  double *ready = malloc((size_t)w->n_tensors * sizeof *ready);
  double *comm = malloc((size_t)w->n_tensors * sizeof *comm);
  if (!spans || !ready || !comm) {
    free(spans);
    free(ready);
    free(comm);
    DDP_FAIL(DDP_ERR_OOM, "scale model: out of host memory for %d buckets", w->n_tensors);
  }
  const int nb = ddp_bucket_plan_cut(w->tensors, w->n_tensors, bucket_mb * MIB,
                                     first_bucket_mb * MIB, spans, NULL);
  const double compute = w->flops_per_step / (c->gemm_tflops * 1e9);
  const double np = (double)w->n_params;
  ddp_scale_point_t p = {.n = n, .zero = zero != 0, .bucket_mb = bucket_mb, .n_buckets = nb};
  p.forward_ms = compute / 3.0;
  p.backward_ms = compute - p.forward_ms;
  p.compute_ms = compute;
  /* only the last micro-step's backward overlaps the reduction */
  const double last_backward = p.backward_ms / w->accum;
  for (int k = 0; k < nb; ++k) {
    ready[k] = last_backward * (double)(spans[k].offset + spans[k].count) / np;
    comm[k] = ddp_scale_collective_ms(c, p.zero ? DDP_SCALE_REDUCE_SCATTER : DDP_SCALE_ALL_REDUCE,
                                      n, (double)spans[k].count * w->grad_bytes, NULL);
    p.comm_ms += comm[k];
  }
  p.exposed_ms = ddp_scale_overlap(ready, comm, nb, last_backward, NULL);
  const double optimizer_full = np * w->optim_bytes / (c->memory_gbytes_s * 1e6);
  p.optimizer_ms = p.zero ? optimizer_full / n : optimizer_full;
  p.gather_ms =
      p.zero ? ddp_scale_collective_ms(c, DDP_SCALE_ALL_GATHER, n, np * w->weight_bytes, NULL)
             : 0.0;
  p.step_ms = p.compute_ms + p.exposed_ms + p.optimizer_ms + p.gather_ms;
  /* one GPU: no communication, the whole optimizer pass */
  p.efficiency = (compute + optimizer_full) / p.step_ms;
  /* --zero 1 keeps 1/N of the state, and adds the shard's reduced
   * gradients (fp32, 1/N of the parameters: train/zero.h) */
  const double sharded = p.zero ? w->optim_state_bytes * (1.0 - 1.0 / n) - 4.0 / n : 0.0;
  p.memory_gib = (np * (w->state_bytes - sharded) + 4.0 * (double)w->n_buffer_floats) / GIB;
  free(spans);
  free(ready);
  free(comm);
  *out = p;
  return DDP_OK;
}

ddp_status_t ddp_scale_recommend(const ddp_scale_cluster_t *c, const ddp_scale_workload_t *w, int n,
                                 const double *bucket_mbs, int n_sizes, double first_bucket_mb,
                                 ddp_scale_point_t *best, char *why, size_t why_len) {
  if (!bucket_mbs || n_sizes < 1 || !best || !why)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "scale model: no bucket sizes to choose from");
  ddp_scale_point_t top[2];
  for (int z = 0; z < 2; ++z)
    for (int i = 0; i < n_sizes; ++i) {
      ddp_scale_point_t p;
      DDP_CHECK(ddp_scale_predict(c, w, n, z, bucket_mbs[i], first_bucket_mb, &p));
      if (i == 0 || p.step_ms < top[z].step_ms) top[z] = p;
    }
  const ddp_scale_point_t *z0 = &top[0], *z1 = &top[1];
  if (z0->memory_gib > c->gpu_memory_gib) {
    *best = *z1;
    snprintf(why, why_len,
             "the model states take %.3g GiB per GPU with --zero 0, more than the %.3g GiB of a "
             "GPU; --zero 1 takes %.3g GiB (activations not counted)",
             z0->memory_gib, c->gpu_memory_gib, z1->memory_gib);
  } else if (z1->step_ms <= z0->step_ms * 1.005) {
    *best = *z1;
    snprintf(why, why_len,
             "--zero 1 is not slower (%.4g ms per step against %.4g) and takes %.3g GiB of model "
             "states per GPU instead of %.3g",
             z1->step_ms, z0->step_ms, z1->memory_gib, z0->memory_gib);
  } else {
    *best = *z0;
    snprintf(why, why_len,
             "--zero 0 is %.1f%% faster (%.4g ms per step against %.4g: --zero 1's all-gather of "
             "the weights costs %.3g ms and saves %.3g ms of optimizer) and its %.3g GiB of model "
             "states fit the %.3g GiB of a GPU",
             100.0 * (z1->step_ms / z0->step_ms - 1.0), z0->step_ms, z1->step_ms, z1->gather_ms,
             z0->optimizer_ms - z1->optimizer_ms, z0->memory_gib, c->gpu_memory_gib);
  }
  return DDP_OK;
}
