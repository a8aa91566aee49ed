/* --cluster NAME|FILE: the cluster the scaling model (train/scale_model.h)
 * predicts for, a preset by name or a JSON file.
 *
 * The file is one object; its fields (every one required, unless "preset"
 * names a preset whose values the file then overrides):
 *   "preset"            string, a preset name (optional)
 *   "name"              string, shown in the report (optional)
 *   "gpus_per_node"     integer 1 .. 65536
 *   "intra_gbps"        Gbit/s, a GPU's all-reduce bus bandwidth in a node
 *   "inter_gbps"        Gbit/s, a node's network bandwidth (all NICs)
 *   "intra_latency_us", "inter_latency_us"   per ring step, >= 0
 *   "gemm_tflops"       the FLOP rate a GPU sustains on the model's step
 *   "memory_gbytes_s"   device memory bandwidth (the optimizer pass)
 *   "gpu_memory_gib"    device memory
 * Numbers must be > 0 (latencies >= 0) and at most 1e6; an unknown key is
 * an error, so a misspelt field is never ignored.
 *
 * It also reads --scale-from: a measured run's compute time, which replaces
 * the FLOP rate of the cluster. */
#ifndef DDPTRAIN_SCALE_CLUSTER_H
#define DDPTRAIN_SCALE_CLUSTER_H

#include <stddef.h>

#include "ddptrain/options.h"
#include "ddptrain/status.h"
#include "train/scale_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The presets' names, comma-separated, for messages and --help. */
#define DDP_SCALE_PRESETS "dgx-a100, dgx-h100, dgx1-v100, horovod-p100"

/* Fills *out from a preset name or a file. On failure (DDP_ERR_INVALID_ARG,
 * DDP_ERR_IO) nothing is logged: why gets the cause, naming the field or
 * the file, for the caller's one line about --cluster. */
ddp_status_t ddp_scale_cluster_load(const char *spec, ddp_scale_cluster_t *out, char *why,
                                    size_t why_len);

/* --scale-from FILE, a run's --metrics JSONL: the mean forward-and-backward
 * time per step of its slowest rank (compute_ms_max) over the step records
 * after the first (which warms up) into *compute_ms, their number into
 * *records. The run must have had o's model and batch flags (--model, the
 * model's tensor flags, --seq-len, --tokens-per-batch, --batch-size,
 * --accum, --precision), which its header record lists; a difference is an
 * error naming the flag. Like ddp_scale_cluster_load, nothing is logged:
 * why gets the cause. */
ddp_status_t ddp_scale_from_metrics(const char *path, const ddp_options_t *o, double *compute_ms,
                                    int *records, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
