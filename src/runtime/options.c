/* The option table and its parser (see ddptrain/options.h). */
#include "ddptrain/options.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/backend.h"
#include "ddptrain/check.h"
#include "ddptrain/log.h"
#include "ddptrain/model.h"
#include "amp/amp.h"
#include "core/ascii.h"
#include "core/env.h"
#include "core/hash.h"
#include "data/image_source.h"
#include "data/sampler.h"
#include "optim/optim.h"
#include "runtime/options_config.h"
#include "trace/timeline.h"
#include "train/scale_cluster.h"

typedef enum opt_kind { OPT_INT, OPT_FLOAT, OPT_STRING, OPT_ACTION } opt_kind_t;

typedef struct opt_row {
  const char *name; /* long name without "--" */
  char short_name;  /* 0 when none */
  opt_kind_t kind;
  size_t offset;   /* field in ddp_options_t */
  size_t size;     /* field size, for strings */
  const char *def; /* default, parsed like user input; NULL for actions */
  double min, max; /* inclusive range for numbers */
  const char *metavar;
  const char *section;
  const char *help;
  /* Extra validation for strings: silent, the parser reports with the flag. */
  ddp_status_t (*validate)(const char *value);
  /* How the value may differ between the ranks of one job (SAME, LOCAL,
   * JOB or KIND below). Every flag must agree except a rank's own hardware
   * and profiling settings. */
  int per_rank;
} opt_row_t;

/* A number flag whose metavar offers "auto" (MB|auto) takes it as a value:
 * stored as DDP_OPTIONS_AUTO, written back as "auto". The metavar is what
 * --help shows and what shell completion offers, so all three agree. */
static int takes_auto(const opt_row_t *row) {
  const size_t n = row->metavar ? strlen(row->metavar) : 0;
  return row->kind == OPT_FLOAT && n >= 5 && strcmp(row->metavar + n - 5, "|auto") == 0;
}

/* The agreement rule of a row (docs/design.md §6.1). ddp_main compares
 * every flag but the LOCAL ones across ranks before any other start-up
 * work and refuses a difference as a command-line error.
 *  - SAME: part of the run's configuration; compared across ranks, and
 *    against a checkpoint's configuration on --resume.
 *  - JOB: an output or action of the whole job that rank 0 (or every
 *    rank alike) acts on: --save, --export, --metrics, --plan-only, ...
 *    Given to another rank alone it would be ignored silently, so it must
 *    agree too; it is not compared on resume (a new --export is no change
 *    to the run).
 *  - KIND: --device: the device kind must agree (a rank on the CPU and one
 *    on a GPU never meet in a collective), the GPU ordinal may differ,
 *    since each rank may be pointed at a GPU of its own.
 *  - LOCAL: this rank's hardware or profiling: --threads (its node's
 *    cores), --peak-gflops (its device, for its MFU), --nvtx (marks its
 *    own trace). None changes a number the ranks compute together.
 * Model flags declare 0 (SAME) or nonzero (LOCAL). */
enum { SAME = 0, LOCAL = 1, JOB = 2, KIND = 3 };

/* A row of the whole table: the runtime's own, or one made from a model's
 * ddp_option_def_t, with the model, its slot in ddp_options_t.model_values
 * and the accepted strings (NULL: any); NULL / -1 / NULL for the runtime's. */
typedef struct row_ref {
  opt_row_t r;
  const ddp_model_ops_t *model;
  int slot;
  const char *const *choices;
} row_ref_t;

static ddp_status_t validate_device(const char *value) {
  const char *name;
  int index;
  return ddp_device_parse(value, &name, &index);
}

#define OFF(f) offsetof(ddp_options_t, f), sizeof(((ddp_options_t *)0)->f)

static ddp_status_t validate_optimizer(const char *value) {
  ddp_optim_kind_t kind;
  return ddp_optim_kind_parse(value, &kind);
}

static ddp_status_t validate_sampler(const char *value) {
  ddp_sampler_kind_t kind;
  return ddp_sampler_kind_parse(value, &kind);
}

/* DDP_OK when value is one of the three names (ASCII, any case). */
static ddp_status_t one_of3(const char *value, const char *a, const char *b, const char *c) {
  return ddp_ascii_ieq(value, a) || ddp_ascii_ieq(value, b) || ddp_ascii_ieq(value, c)
             ? DDP_OK
             : DDP_ERR_INVALID_ARG;
}

static ddp_status_t validate_progress(const char *value) {
  return one_of3(value, "auto", "thread", "test");
}

static ddp_status_t validate_on_off(const char *value) {
  return one_of3(value, "on", "off", "off");
}

static ddp_status_t validate_auto_on_off(const char *value) {
  return one_of3(value, "auto", "on", "off");
}

static ddp_status_t validate_model(const char *value) {
  return ddp_model_find(value) ? DDP_OK : DDP_ERR_INVALID_ARG;
}

static ddp_status_t validate_precision(const char *value) {
  ddp_precision_t p;
  return ddp_precision_parse(value, &p);
}

static ddp_status_t validate_loss_scaling(const char *value) {
  return one_of3(value, "auto", "dynamic", "none");
}

static ddp_status_t validate_normalize(const char *value) {
  return one_of3(value, "train", "none", "none");
}

static const opt_row_t k_rows[] = {
    {"data", 0, OPT_STRING, OFF(data), "", 0, 0, "GLOB", "Data",
     "training shards (llm.c .bin format), or the model's record file or image shard; empty = "
     "the built-in task set (image models: the built-in image set)",
     NULL, 0},
    {"val-data", 0, OPT_STRING, OFF(val_data), "", 0, 0, "GLOB", "Data",
     "held-out shards (or record file, image shard); empty = the built-in validation split (or "
     "none with --data)",
     NULL, 0},
    {"tasks", 0, OPT_STRING, OFF(tasks), DDP_BUILTIN_DEFAULT_MIX, 0, 0, "MIX", "Data",
     "built-in data set: how often each task's lines are drawn, as NAME[=WEIGHT],... over copy, "
     "reverse, sort and add (a task not named is left out)",
     NULL, 0},
    {"crop-pad", 0, OPT_INT, OFF(crop_pad), "-1", -1, 4096, "P", "Data",
     "image models: random crop after padding P zero pixels on each side; 0 = no crop, -1 = 4 "
     "for images up to 64 pixels a side, else 0",
     NULL, 0},
    {"pad-to", 0, OPT_INT, OFF(pad_to), "0", 0, 4096, "S", "Data",
     "image models: centre each image on a zero canvas of at least S x S pixels (e.g. "
     "Fashion-MNIST's 28 x 28 to 32 x 32), before the crop; 0 = the images' own size",
     NULL, 0},
    {"hflip", 0, OPT_INT, OFF(hflip), "1", 0, 1, "0|1", "Data",
     "image models: flip each training image left-right with probability 1/2", NULL, 0},
    {"normalize", 0, OPT_STRING, OFF(normalize), "train", 0, 0, "train|none", "Data",
     "image models: per-channel (x/255 - mean) / std with the training split's statistics, or "
     "none (x/255)",
     validate_normalize, 0},
    {"loader-threads", 0, OPT_INT, OFF(loader_threads), "0", 0, 64, "N", "Data",
     "image models: threads that fill one micro-batch (the same pixels for any N); 0 = auto: "
     "on a GPU the rank's CPUs less one, at most 8; on the CPU 1",
     NULL, LOCAL},
    {"model", 0, OPT_STRING, OFF(model), "gpt", 0, 0, "NAME", "Model",
     "the model to train: one of the models below (its own flags are listed under it)",
     validate_model, 0},
    {"seq-len", 0, OPT_INT, OFF(seq_len), "128", 2, 1 << 20, "T", "Model",
     "token models: maximum sequence length (longer documents are split)", NULL, 0},
    {"tokens-per-batch", 0, OPT_INT, OFF(tokens_per_batch), "1024", 2, 1 << 30, "N", "Batching",
     "token models: padded tokens per micro-batch (rows x longest row)", NULL, 0},
    {"batch-size", 0, OPT_INT, OFF(batch_size), "32", 1, 1 << 24, "N", "Batching",
     "record models (fixed-size samples): records per micro-batch on each rank", NULL, 0},
    {"accum", 0, OPT_INT, OFF(accum), "1", 1, 1 << 20, "K", "Batching",
     "micro-batches per optimizer step (gradient accumulation)", NULL, 0},
    {"steps", 0, OPT_INT, OFF(steps), "1600", 0, 1e15, "N", "Batching",
     "optimizer steps; 0 = derive from --epochs", NULL, 0},
    {"epochs", 0, OPT_INT, OFF(epochs), "0", 0, 1e9, "E", "Batching",
     "epochs over the training data, used when --steps is 0", NULL, 0},
    {"sampler", 0, OPT_STRING, OFF(sampler), "bucket", 0, 0, "KIND", "Batching",
     "bucket: length-bucketed micro-batches dealt to ranks by cost (little padding, balanced "
     "ranks); random: shuffled, a fixed tokens-per-batch/seq-len rows padded to the longest, "
     "dealt round-robin (the common baseline)",
     validate_sampler, 0},
    {"bucket-chunk", 0, OPT_INT, OFF(bucket_chunk), "65536", 1, 2147483647.0, "N", "Batching",
     "bucket sampler: windows per length-sorted chunk (larger: less padding, less mixing)", NULL,
     0},
    {"optimizer", 0, OPT_STRING, OFF(optimizer), "adamw", 0, 0, "NAME", "Optimisation",
     "adamw, sgd (momentum, optionally Nesterov) or lamb", validate_optimizer, 0},
    {"lr", 0, OPT_FLOAT, OFF(lr), "3e-3", 0, 1e3, "X", "Optimisation", "peak learning rate", NULL,
     0},
    {"min-lr", 0, OPT_FLOAT, OFF(min_lr), "3e-4", 0, 1e3, "X", "Optimisation",
     "learning rate at the end of the cosine decay", NULL, 0},
    {"warmup", 0, OPT_INT, OFF(warmup), "50", 0, 1e15, "N", "Optimisation", "linear warmup steps",
     NULL, 0},
    {"weight-decay", 0, OPT_FLOAT, OFF(weight_decay), "0.1", 0, 10, "X", "Optimisation",
     "weight decay (2-D weights only; decoupled for adamw/lamb)", NULL, 0},
    {"grad-clip", 0, OPT_FLOAT, OFF(grad_clip), "1.0", 0, 1e9, "X", "Optimisation",
     "clip the global gradient norm to this; 0 = off", NULL, 0},
    {"beta1", 0, OPT_FLOAT, OFF(beta1), "0.9", 0, 0.999999, "X", "Optimisation",
     "adamw/lamb first-moment decay", NULL, 0},
    {"beta2", 0, OPT_FLOAT, OFF(beta2), "0.95", 0, 0.999999, "X", "Optimisation",
     "adamw/lamb second-moment decay", NULL, 0},
    {"adam-eps", 0, OPT_FLOAT, OFF(adam_eps), "1e-8", 1e-30, 1, "X", "Optimisation",
     "adamw/lamb epsilon, added to the root of the second moment", NULL, 0},
    {"momentum", 0, OPT_FLOAT, OFF(momentum), "0.9", 0, 0.999999, "X", "Optimisation",
     "sgd momentum", NULL, 0},
    {"nesterov", 0, OPT_INT, OFF(nesterov), "1", 0, 1, "0|1", "Optimisation",
     "sgd: Nesterov momentum", NULL, 0},
    {"bucket-mb", 0, OPT_FLOAT, OFF(bucket_mb), "25", 0.001, 1e6, "MB|auto", "Data parallelism",
     "gradient all-reduce bucket size in MiB; a bucket's reduction starts as soon as "
     "backward has produced it. auto: the first steps try a few sizes cut from the model's "
     "size (with 2+ ranks) and keep the fastest, the same on every rank",
     NULL, 0},
    {"first-bucket-mb", 0, OPT_FLOAT, OFF(first_bucket_mb), "1", 0.001, 1e6, "MB|auto",
     "Data parallelism",
     "size of the first bucket (small, so communication starts early); auto: tuned like "
     "--bucket-mb auto (both auto: tuned together)",
     NULL, 0},
    {"zero", 0, OPT_INT, OFF(zero), "0", 0, 1, "0|1", "Data parallelism",
     "1: shard the optimizer state and the weight update across the ranks (ZeRO-1): "
     "gradients are reduce-scattered, each rank updates the weights it owns, the weights are "
     "all-gathered (adamw, sgd and lamb, whose trust ratios take whole-tensor norms across the "
     "shards)",
     NULL, 0},
    {"comm-progress", 0, OPT_STRING, OFF(comm_progress), "auto", 0, 0, "MODE", "Data parallelism",
     "how MPI reductions advance during backward: thread (a progress thread), test "
     "(non-blocking collectives polled between layers) or auto",
     validate_progress, 0},
    {"check-replicas", 0, OPT_INT, OFF(check_replicas), "0", 0, 1e15, "N", "Data parallelism",
     "every N steps compare a hash of the parameters across ranks and stop if they differ; "
     "0 = off",
     NULL, 0},
    {"heartbeat-timeout", 0, OPT_FLOAT, OFF(heartbeat_timeout), "20", 0, 86400, "S",
     "Data parallelism",
     "end the job when a rank has not been heard from for S seconds (frozen or gone); 0 = off",
     NULL, 0},
    {"startup-timeout", 0, OPT_FLOAT, OFF(startup_timeout), "300", 0, 86400, "S",
     "Data parallelism",
     "end the job when a start-up phase (MPI init, device decision, binding, ...) has not "
     "ended after S seconds on some rank, naming the phase and the ranks not heard from; "
     "0 = off",
     NULL, 0},
    {"precision", 0, OPT_STRING, OFF(precision), "fp32", 0, 0, "TYPE", "Mixed precision",
     "fp32, bf16 or fp16: bf16/fp16 store activations and compute weights in the half type "
     "(fp32 master weights, optimizer state, gradients and reductions)",
     validate_precision, 0},
    {"loss-scaling", 0, OPT_STRING, OFF(loss_scaling), "auto", 0, 0, "MODE", "Mixed precision",
     "dynamic (GradScaler: skip overflowed steps, adapt the scale), none, or auto (dynamic for "
     "fp16 only)",
     validate_loss_scaling, 0},
    {"loss-scale-init", 0, OPT_FLOAT, OFF(loss_scale_init), "65536", 1e-30, 1e38, "X",
     "Mixed precision", "initial loss scale", NULL, 0},
    {"loss-scale-window", 0, OPT_INT, OFF(loss_scale_window), "2000", 1, 1e15, "N",
     "Mixed precision", "consecutive clean steps before the loss scale grows", NULL, 0},
    {"loss-scale-growth", 0, OPT_FLOAT, OFF(loss_scale_growth), "2", 1.0001, 1e6, "X",
     "Mixed precision", "loss scale growth factor", NULL, 0},
    {"loss-scale-backoff", 0, OPT_FLOAT, OFF(loss_scale_backoff), "0.5", 1e-6, 0.9999, "X",
     "Mixed precision", "loss scale factor after an overflowed (skipped) step", NULL, 0},
    {"loss-scale-min", 0, OPT_FLOAT, OFF(loss_scale_min), "1", 0, 1e38, "X", "Mixed precision",
     "stop with an error when the loss scale falls below this (the run is diverging); 0 = never",
     NULL, 0},
    {"grad-reduce-dtype", 0, OPT_STRING, OFF(grad_reduce_dtype), "fp32", 0, 0, "TYPE",
     "Mixed precision",
     "type of the gradient all-reduce: fp32, or bf16/fp16 to halve the traffic (rounds the "
     "gradients once and each partial sum)",
     validate_precision, 0},
    {"device", 0, OPT_STRING, OFF(device), "auto", 0, 0, "DEV", "Run control",
     "compute device: auto (a GPU if one is usable, else the CPU), cpu, cuda, or cuda:N",
     validate_device, KIND},
    {"tf32", 0, OPT_STRING, OFF(tf32), "on", 0, 0, "on|off", "Run control",
     "fp32 matrix products on GPUs use TF32 tensor cores (10-bit mantissa inputs, fp32 "
     "accumulation); off = exact fp32. bf16/fp16 products always use tensor cores with fp32 "
     "accumulation; the CPU ignores this",
     validate_on_off, SAME},
    {"deterministic", 0, OPT_STRING, OFF(deterministic), "on", 0, 0, "on|off", "Run control",
     "convolutions repeat their results bit for bit; off = cuDNN may also choose faster "
     "algorithms that sum with atomics, and the CPU times oneDNN's implementations of each "
     "shape and keeps the fastest (run-to-run differences in the last bits)",
     validate_on_off, SAME},
    {"winograd", 0, OPT_STRING, OFF(winograd), "on", 0, 0, "on|off", "Run control",
     "CPU: 3x3 stride-1 convolutions use oneDNN's Winograd kernels where it has them (AVX-512, "
     "channels in multiples of 16), 1.4-2x as fast as its direct ones there, rounding a little "
     "differently; off = direct kernels only. GPUs ignore this",
     validate_on_off, SAME},
    {"conv-algos", 0, OPT_STRING, OFF(conv_algos), "auto", 0, 0, "FILE|auto|none", "Run control",
     "GPUs: the record of the convolution algorithms autotuning chose: a run reads FILE when it "
     "exists, uses its choices without timing them, and adds what it searched, so a rerun with "
     "the same FILE (or a resume) computes the same bits; auto = DIR/conv-algos.txt with --save "
     "DIR, else none",
     NULL, JOB},
    {"nvtx", 0, OPT_STRING, OFF(nvtx), "off", 0, 0, "on|off", "Run control",
     "name each step, micro-step, block forward/backward, bucket all-reduce and optimizer pass "
     "with NVTX ranges, so an Nsight Systems trace (nsys profile) shows communication "
     "overlapping backward; needs a CUDA build",
     validate_on_off, LOCAL},
    {"cuda-graphs", 0, OPT_STRING, OFF(cuda_graphs), "auto", 0, 0, "auto|on|off", "Run control",
     "GPUs: record each kind of training pass once as CUDA graphs and replay it, so the host "
     "launches a few graphs a step instead of hundreds of kernels and cuDNN calls (the same "
     "kernels: the same bits); used by the ResNet; auto = on unless --nvtx, --trace or "
     "--detect-anomaly need the kernels launched one by one; on = as auto, but an error where "
     "it cannot be used",
     validate_auto_on_off, LOCAL},
    {"threads", 0, OPT_INT, OFF(threads), "0", 0, 4096, "N", "Run control",
     "CPU math threads per rank; 0 = physical cores on the node / ranks on the node", NULL, LOCAL},
    {"seed", 0, OPT_INT, OFF(seed), "1337", 0, 9007199254740991.0, "N", "Run control",
     "random seed; every rank and every resume draws the same numbers from it", NULL, 0},
    {"peak-gflops", 0, OPT_FLOAT, OFF(peak_gflops), "0", 0, 1e9, "X", "Run control",
     "peak GFLOP/s per rank used for MFU; 0 = measure with a short GEMM at start-up", NULL, LOCAL},
    /* JOB: the values it sets are compared as flags; its path is not, so a
     * resume may give the same values on the command line or another file */
    {"config", 0, OPT_STRING, OFF(config), "", 0, 0, "FILE", "Run control",
     "read flags from FILE first, a JSON object {\"flag-name\": value} (strings, numbers, true "
     "for a flag without a value); flags on the command line override it",
     NULL, JOB},
    {"log-every", 0, OPT_INT, OFF(log_every), "100", 1, 1e15, "N", "Logging and evaluation",
     "a progress line (and metrics record) every N steps: the only host sync", NULL, 0},
    {"eval-every", 0, OPT_INT, OFF(eval_every), "200", 0, 1e15, "N", "Logging and evaluation",
     "validation loss every N steps; 0 = only at the end", NULL, 0},
    {"eval-tokens", 0, OPT_INT, OFF(eval_tokens), "16384", 1, 1e15, "N", "Logging and evaluation",
     "target tokens per validation pass", NULL, 0},
    {"sample-every", 0, OPT_INT, OFF(sample_every), "0", 0, 1e15, "N", "Logging and evaluation",
     "rank 0 logs a sample of 64 tokens from the model every N steps (GPT; its own random "
     "stream, so training is unchanged); 0 = off",
     NULL, JOB},
    /* JOB: a path that rank 0 reads; a resume may name another copy */
    {"tokenizer", 0, OPT_STRING, OFF(tokenizer), "", 0, 0, "DIR", "Logging and evaluation",
     "the GPT-2 tokenizer (vocab.json + merges.txt) the --data shards were made with; "
     "--sample-every decodes with it",
     NULL, JOB},
    {"metrics", 0, OPT_STRING, OFF(metrics), "", 0, 0, "FILE", "Logging and evaluation",
     "append JSON records to FILE: a run header, one per log line and evaluation, a final one "
     "(ddpplot plots them)",
     NULL, JOB},
    {"export", 0, OPT_STRING, OFF(export_path), "", 0, 0, "FILE", "Logging and evaluation",
     "write the trained weights to FILE (safetensors, PyTorch state_dict names)", NULL, JOB},
    {"dump-batches", 0, OPT_STRING, OFF(dump_batches), "", 0, 0, "FILE", "Logging and evaluation",
     "write every micro-batch this run trained on to FILE (safetensors: batch.K.inputs/targets), "
     "to replay them elsewhere, e.g. in a PyTorch comparison",
     NULL, JOB},
    {"trace", 0, OPT_STRING, OFF(trace), "", 0, 0, "FILE", "Logging and evaluation",
     "write a timeline of the traced steps to FILE (Chrome trace-event JSON; open it in Perfetto): "
     "per rank, forward and backward per block, each bucket's all-reduce, optimizer, data waits, "
     "checkpoints",
     NULL, JOB},
    {"trace-steps", 0, OPT_INT, OFF(trace_steps), "20", 1, 100000, "N", "Logging and evaluation",
     "how many steps --trace records, from the second step of the run (the first warms up)", NULL,
     JOB},
    {"save", 0, OPT_STRING, OFF(save), "", 0, 0, "DIR", "Checkpoints",
     "write checkpoints (DIR/ckpt_<step>.safetensors) every --save-every steps and at the end; "
     "rank 0 writes them in the background",
     NULL, JOB},
    {"save-every", 0, OPT_INT, OFF(save_every), "0", 0, 1e15, "N", "Checkpoints",
     "with --save: a checkpoint every N steps; 0 = only at the end (and when preempted)", NULL, 0},
    {"keep", 0, OPT_INT, OFF(keep), "3", 1, 1e9, "K", "Checkpoints",
     "with --save: keep the K newest checkpoints, delete older ones", NULL, JOB},
    {"resume", 0, OPT_STRING, OFF(resume), "", 0, 0, "DIR|auto", "Checkpoints",
     "continue from the newest valid checkpoint in DIR (corrupt ones are reported and skipped); "
     "auto = from the --save directory when it holds one, else start fresh",
     NULL, 0},
    {"init-from", 0, OPT_STRING, OFF(init_from), "", 0, 0, "FILE", "Checkpoints",
     "start from the weights in FILE (a ddptrain --export, or a GPT-2 model.safetensors in the "
     "Hugging Face layout) instead of random ones; the architecture flags not given are taken "
     "from its tensor shapes; optimizer state and step count start fresh",
     NULL, JOB},
    {"stop-at", 0, OPT_INT, OFF(stop_at), "0", 0, 1e15, "N", "Checkpoints",
     "end the run after step N with a checkpoint, keeping the schedule --steps defines; 0 = off",
     NULL, 0},
    {"detect-anomaly", 0, OPT_ACTION, OFF(detect_anomaly), NULL, 0, 0, NULL, "Checkpoints",
     "check every layer's activations in forward and gradients in backward for NaN/inf and name "
     "the first non-finite one (slower; without it a non-finite gradient is still caught per "
     "step)",
     NULL, 0},
    {"plan-only", 0, OPT_ACTION, OFF(plan_only), NULL, 0, 0, NULL, "Information",
     "build the first epoch's sampler plan for --world-size ranks, print its padding, balance "
     "and build time, and exit without training",
     NULL, JOB},
    {"world-size", 0, OPT_INT, OFF(world_size), "0", 0, 1 << 24, "N", "Information",
     "with --plan-only: the number of ranks to plan for; 0 = the ranks of this job", NULL, JOB},
    {"json", 0, OPT_ACTION, OFF(json), NULL, 0, 0, NULL, "Information",
     "with --plan-only: print one JSON object instead of text", NULL, JOB},
    {"scale", 0, OPT_ACTION, OFF(scale), NULL, 0, 0, NULL, "Information",
     "with --plan-only: predict step time, exposed communication and scaling efficiency on 1 to "
     "1024 GPUs of --cluster (the bucket plan overlapped with backward, an alpha-beta model of "
     "ring and tree collectives, --zero 0 and 1), and recommend --bucket-mb and --zero",
     NULL, JOB},
    {"cluster", 0, OPT_STRING, OFF(cluster), "dgx-a100", 0, 0, "NAME|FILE", "Information",
     "with --scale: the cluster, a preset (" DDP_SCALE_PRESETS
     ") or a JSON file of its GPUs per node, bandwidths, latencies, FLOP rate and memory",
     NULL, JOB},
    {"scale-from", 0, OPT_STRING, OFF(scale_from), "", 0, 0, "FILE", "Information",
     "with --scale: the FLOP rate from a run's --metrics FILE (its forward and backward time "
     "per step) instead of the cluster's; the run must have had this model and batch",
     NULL, JOB},
    {"help", 'h', OPT_ACTION, OFF(help), NULL, 0, 0, NULL, "Information",
     "print this help and exit", NULL, JOB},
    {"version", 'V', OPT_ACTION, OFF(version), NULL, 0, 0, NULL, "Information",
     "print the version and exit", NULL, JOB},
    {"build-info", 0, OPT_ACTION, OFF(build_info), NULL, 0, 0, NULL, "Information",
     "print the backends and dependencies of this build and exit", NULL, JOB},
    {"self-test", 0, OPT_ACTION, OFF(self_test), NULL, 0, 0, NULL, "Information",
     "check this node instead of training: seeded RNG agreement across ranks, a GEMM and "
     "half-precision round trips on the backend, the GEMM peak",
     NULL, 0},
};

#define N_CORE ((int)(sizeof k_rows / sizeof k_rows[0]))
_Static_assert(N_CORE <= DDP_CORE_OPTION_SLOTS, "DDP_CORE_OPTION_SLOTS is too small");

/* ---- rows: the runtime's, then every registered model's own ---------------- */

/* Row `index` of the whole table into *out; 0, or -1 for a bad index. A
 * model's row is made on the fly from its ddp_option_def_t, its value living
 * in ddp_options_t.model_values[slot], so the parser, formatter and hash
 * treat both kinds alike. */
static int get_row(int index, row_ref_t *out) {
  if (index < 0) return -1;
  if (index < N_CORE) {
    *out = (row_ref_t){.r = k_rows[index], .slot = -1};
    return 0;
  }
  int slot = index - N_CORE;
  for (int m = 0; m < ddp_model_count(); ++m) {
    const ddp_model_ops_t *ops = ddp_model_at(m);
    if (slot >= ops->n_options) {
      slot -= ops->n_options;
      continue;
    }
    const ddp_option_def_t *d = &ops->options[slot];
    const int global = index - N_CORE;
    if (global >= DDP_MODEL_OPTION_SLOTS) return -1; /* ddp_model_register prevents it */
    const size_t base =
        offsetof(ddp_options_t, model_values) + (size_t)global * sizeof(ddp_option_value_t);
    out->r = (opt_row_t){.name = d->name,
                         .kind = d->type == DDP_OPTION_INT     ? OPT_INT
                                 : d->type == DDP_OPTION_FLOAT ? OPT_FLOAT
                                                               : OPT_STRING,
                         .def = d->def,
                         .min = d->min,
                         .max = d->max,
                         .metavar = d->metavar ? d->metavar : "VALUE",
                         .section = ops->name,
                         .help = d->help,
                         .per_rank = d->per_rank ? LOCAL : SAME};
    out->model = ops;
    out->slot = global;
    out->choices = d->choices;
    out->r.offset = base + (d->type == DDP_OPTION_INT     ? offsetof(ddp_option_value_t, i)
                            : d->type == DDP_OPTION_FLOAT ? offsetof(ddp_option_value_t, f)
                                                          : offsetof(ddp_option_value_t, s));
    out->r.size =
        d->type == DDP_OPTION_STRING ? DDP_OPTION_TEXT_MAX : sizeof(((ddp_option_value_t *)0)->i);
    return 0;
  }
  return -1;
}

static int n_rows(void) {
  int n = N_CORE;
  for (int m = 0; m < ddp_model_count(); ++m) n += ddp_model_at(m)->n_options;
  return n;
}

int ddp_options_must_agree(int index) {
  row_ref_t row;
  return get_row(index, &row) == 0 && row.r.per_rank == SAME;
}

int ddp_options_rank_value(const ddp_options_t *opts, int index, char *buf, size_t len) {
  row_ref_t row;
  if (get_row(index, &row) != 0 || !buf || !len) return -1;
  if (row.r.per_rank == LOCAL) return 1;
  if (ddp_options_format(opts, index, buf, len) != 0) return -1;
  if (row.r.per_rank == KIND) {
    /* "cuda:1" is of kind "cuda"; "auto", "cpu" and "cuda" are kinds */
    buf[strcspn(buf, ":")] = '\0';
    for (char *c = buf; *c; ++c)
      if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
  }
  return 0;
}

int ddp_options_applies(const ddp_options_t *opts, int index) {
  row_ref_t row;
  if (get_row(index, &row) != 0) return 0;
  return !row.model || ddp_ascii_ieq(row.model->name, opts->model);
}

uint64_t ddp_options_value_hash(const ddp_options_t *opts, int index) {
  row_ref_t row;
  if (get_row(index, &row) != 0) return 0;
  const char *field = (const char *)opts + row.r.offset;
  /* strings up to their NUL (bytes after it are not part of the value) */
  const size_t n = row.r.kind == OPT_STRING ? strnlen(field, row.r.size) : row.r.size;
  return ddp_fnv1a64(DDP_FNV1A64_INIT, field, n);
}

int ddp_options_format(const ddp_options_t *opts, int index, char *buf, size_t len) {
  row_ref_t row;
  if (get_row(index, &row) != 0 || !buf || !len) return -1;
  const char *field = (const char *)opts + row.r.offset;
  int n = -1;
  switch (row.r.kind) {
    case OPT_INT:
      n = snprintf(buf, len, "%lld", (long long)*(const int64_t *)field);
      break;
    case OPT_FLOAT:
      if (takes_auto(&row.r) && *(const double *)field == DDP_OPTIONS_AUTO)
        n = snprintf(buf, len, "auto");
      else
        n = snprintf(buf, len, "%.17g", *(const double *)field);
      break;
    case OPT_STRING:
      n = snprintf(buf, len, "%.*s", (int)strnlen(field, row.r.size), field);
      break;
    case OPT_ACTION:
      n = snprintf(buf, len, "%d", *(const int *)field);
      break;
  }
  return n >= 0 && (size_t)n < len ? 0 : -1;
}

int ddp_options_count(void) {
  return n_rows();
}

const char *ddp_options_name(int index) {
  row_ref_t row;
  return get_row(index, &row) == 0 ? row.r.name : NULL;
}

/* User errors: one line, no source location (the user's input is at fault,
 * not a line of ours). */
#define USAGE_ERROR(...) ddp_log_at(DDP_LOG_LEVEL_ERROR, NULL, 0, __VA_ARGS__)

static int one_of(const char *value, const char *const *choices) {
  for (int i = 0; choices[i]; ++i)
    if (ddp_ascii_ieq(value, choices[i])) return 1;
  return 0;
}

/* Sets the field of *ref from text as typed. origin prefixes an error: ""
 * for the command line, "config file F: " for a value read from a file. */
static ddp_status_t set_value(ddp_options_t *opts, const row_ref_t *ref, const char *text,
                              const char *origin) {
  const opt_row_t *row = &ref->r;
  char *field = (char *)opts + row->offset;
  char *end = NULL;
  switch (row->kind) {
    case OPT_INT: {
      errno = 0;
      long long v = strtoll(text, &end, 10);
      if (end == text || *end != '\0') {
        USAGE_ERROR("%soption --%s: '%s' is not an integer", origin, row->name, text);
        return DDP_ERR_INVALID_ARG;
      }
      if (errno == ERANGE || (double)v < row->min || (double)v > row->max) {
        USAGE_ERROR("%soption --%s: %s is out of range [%.0f, %.0f]", origin, row->name, text,
                    row->min, row->max);
        return DDP_ERR_INVALID_ARG;
      }
      *(int64_t *)field = v;
      return DDP_OK;
    }
    case OPT_FLOAT: {
      if (takes_auto(row) && ddp_ascii_ieq(text, "auto")) {
        *(double *)field = DDP_OPTIONS_AUTO;
        return DDP_OK;
      }
      errno = 0;
      double v = strtod(text, &end);
      if (end == text || *end != '\0' || !isfinite(v)) {
        USAGE_ERROR("%soption --%s: '%s' is not a finite number%s", origin, row->name, text,
                    takes_auto(row) ? " or auto" : "");
        return DDP_ERR_INVALID_ARG;
      }
      if (errno == ERANGE || v < row->min || v > row->max) {
        USAGE_ERROR("%soption --%s: %s is out of range [%g, %g]", origin, row->name, text, row->min,
                    row->max);
        return DDP_ERR_INVALID_ARG;
      }
      *(double *)field = v;
      return DDP_OK;
    }
    case OPT_STRING:
      if (strlen(text) >= row->size) {
        USAGE_ERROR("%soption --%s: value is longer than %zu characters", origin, row->name,
                    row->size - 1);
        return DDP_ERR_INVALID_ARG;
      }
      if ((row->validate && row->validate(text) != DDP_OK) ||
          (ref->choices && !one_of(text, ref->choices))) {
        USAGE_ERROR("%soption --%s: '%s' is not valid (%s)", origin, row->name, text, row->help);
        return DDP_ERR_INVALID_ARG;
      }
      memcpy(field, text, strlen(text) + 1);
      return DDP_OK;
    case OPT_ACTION:
      *(int *)field = 1;
      return DDP_OK;
  }
  return DDP_ERR_INTERNAL;
}

ddp_status_t ddp_options_defaults(ddp_options_t *opts) {
  memset(opts, 0, sizeof *opts);
  const int n = n_rows();
  row_ref_t row;
  for (int i = 0; i < n; ++i) {
    if (get_row(i, &row) != 0) return DDP_ERR_INTERNAL;
    if (row.r.def && set_value(opts, &row, row.r.def, "") != DDP_OK) return DDP_ERR_INTERNAL;
  }
  return DDP_OK;
}

/* Edit distance, for "did you mean"; names are short, so O(n*m) is nothing. */
static int edit_distance(const char *a, size_t la, const char *b) {
  size_t lb = strlen(b);
  if (la > 40 || lb > 40) return 99;
  int prev[41], cur[41];
  for (size_t j = 0; j <= lb; ++j) prev[j] = (int)j;
  for (size_t i = 1; i <= la; ++i) {
    cur[0] = (int)i;
    for (size_t j = 1; j <= lb; ++j) {
      int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      int del = prev[j] + 1, ins = cur[j - 1] + 1;
      cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
    }
    memcpy(prev, cur, sizeof(int) * (lb + 1));
  }
  return prev[lb];
}

/* The row with this long name into *out: its index, or -1. */
static int find_long(const char *name, size_t len, row_ref_t *out) {
  const int n = n_rows();
  for (int i = 0; i < n; ++i)
    if (get_row(i, out) == 0 && strlen(out->r.name) == len && strncmp(out->r.name, name, len) == 0)
      return i;
  return -1;
}

/* The flag closest to name[0..len) within two edits, or NULL. */
static const char *closest(const char *name, size_t len) {
  const char *best = NULL;
  int best_d = 3;
  const int n = n_rows();
  row_ref_t row;
  for (int i = 0; i < n; ++i) {
    if (get_row(i, &row) != 0) continue;
    int d = edit_distance(name, len, row.r.name);
    if (d < best_d) {
      best_d = d;
      best = row.r.name;
    }
  }
  return best;
}

static void report_unknown(const char *arg, const char *name, size_t len) {
  const char *best = closest(name, len);
  if (best)
    USAGE_ERROR("unknown option '%s'; did you mean '--%s'? (see --help)", arg, best);
  else
    USAGE_ERROR("unknown option '%s' (see --help)", arg);
}

/* A model's flag is accepted only for the model it belongs to: anything
 * else would be silently ignored, and a user who typed it meant something. */
static ddp_status_t check_model_flags(const ddp_options_t *opts) {
  const int n = n_rows();
  row_ref_t row;
  for (int i = N_CORE; i < n; ++i) {
    if (get_row(i, &row) != 0 || !opts->model_values[row.slot].given) continue;
    if (!ddp_ascii_ieq(row.model->name, opts->model)) {
      USAGE_ERROR("option --%s belongs to --model %s; this run trains --model %s", row.r.name,
                  row.model->name, opts->model);
      return DDP_ERR_INVALID_ARG;
    }
  }
  return DDP_OK;
}

/* The command line onto *opts, --config like any other flag (its file is
 * the caller's to read); given twice, it is an error: one file per run. */
static ddp_status_t parse_args(ddp_options_t *opts, int argc, char **argv) {
  int configs = 0;
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    row_ref_t row;
    int found = -1;
    const char *value = NULL;
    if (arg[0] == '-' && arg[1] == '-' && arg[2] != '\0') {
      const char *name = arg + 2;
      const char *eq = strchr(name, '=');
      size_t len = eq ? (size_t)(eq - name) : strlen(name);
      found = find_long(name, len, &row);
      if (found < 0) {
        report_unknown(arg, name, len);
        return DDP_ERR_INVALID_ARG;
      }
      if (eq) {
        if (row.r.kind == OPT_ACTION) {
          USAGE_ERROR("option --%s takes no value", row.r.name);
          return DDP_ERR_INVALID_ARG;
        }
        value = eq + 1;
      }
    } else if (arg[0] == '-' && arg[1] != '\0' && arg[2] == '\0') {
      for (int r = 0; r < N_CORE && found < 0; ++r)
        if (k_rows[r].short_name == arg[1]) found = get_row(r, &row) == 0 ? r : -1;
      if (found < 0) {
        USAGE_ERROR("unknown option '%s' (see --help)", arg);
        return DDP_ERR_INVALID_ARG;
      }
    } else {
      USAGE_ERROR("unexpected argument '%s': ddptrain takes only options (see --help)", arg);
      return DDP_ERR_INVALID_ARG;
    }
    if (row.r.kind != OPT_ACTION && !value) {
      if (i + 1 >= argc) {
        USAGE_ERROR("option --%s needs a value (%s)", row.r.name, row.r.metavar);
        return DDP_ERR_INVALID_ARG;
      }
      value = argv[++i];
    }
    if (row.r.offset == offsetof(ddp_options_t, config) && ++configs > 1) {
      USAGE_ERROR("option --config given twice: a run reads one config file");
      return DDP_ERR_INVALID_ARG;
    }
    ddp_status_t st = set_value(opts, &row, value ? value : "", "");
    if (st != DDP_OK) return st;
    if (row.model)
      opts->model_values[row.slot].given = 1;
    else
      opts->core_given[found] = 1;
  }
  return DDP_OK;
}

ddp_status_t ddp_options_parse(ddp_options_t *opts, int argc, char **argv) {
  /* The command line is parsed once on a copy to learn --config wherever it
   * stands, then, after the file, again onto the result: every flag of the
   * command line overrides the file's. */
  ddp_options_t *first = malloc(sizeof *first);
  if (!first) {
    USAGE_ERROR("options: out of host memory");
    return DDP_ERR_OOM;
  }
  *first = *opts;
  ddp_status_t st = parse_args(first, argc, argv);
  if (st == DDP_OK && first->config[0]) {
    st = ddp_options_read_config(opts, first->config);
    if (st == DDP_OK) st = parse_args(opts, argc, argv);
  } else if (st == DDP_OK) {
    *opts = *first;
  }
  free(first);
  return st == DDP_OK ? check_model_flags(opts) : st;
}

/* ---- setting flags by name (a config file) ---------------------------------------- */

int ddp_options_find(const char *name) {
  row_ref_t row;
  return name ? find_long(name, strlen(name), &row) : -1;
}

const char *ddp_options_suggest(const char *name) {
  return name ? closest(name, strlen(name)) : NULL;
}

ddp_option_kind_t ddp_options_kind(int index) {
  row_ref_t row;
  if (get_row(index, &row) != 0) return DDP_OPTION_KIND_ACTION;
  switch (row.r.kind) {
    case OPT_INT:
      return DDP_OPTION_KIND_INT;
    case OPT_FLOAT:
      return DDP_OPTION_KIND_FLOAT;
    case OPT_STRING:
      return DDP_OPTION_KIND_STRING;
    case OPT_ACTION:
      break;
  }
  return DDP_OPTION_KIND_ACTION;
}

ddp_status_t ddp_options_set_text(ddp_options_t *opts, int index, const char *text,
                                  const char *origin) {
  row_ref_t row;
  if (get_row(index, &row) != 0) return DDP_ERR_INTERNAL;
  DDP_CHECK(set_value(opts, &row, text, origin ? origin : ""));
  if (row.model) opts->model_values[row.slot].given = 1;
  return DDP_OK;
}

int ddp_options_given(const ddp_options_t *opts, const char *name) {
  row_ref_t row;
  const int i = name ? find_long(name, strlen(name), &row) : -1;
  if (i < 0) return 0;
  return row.model ? opts->model_values[row.slot].given : opts->core_given[i];
}

/* ---- combinations of flags ------------------------------------------------------ */

/* The kind of file --data/--val-data names against the model's: an image
 * shard for an image model, a record file or token shards otherwise. A
 * file that cannot be read is left to the loader, which names the cause. */
static ddp_status_t check_data_kind(const ddp_options_t *o, const ddp_model_ops_t *model) {
  const char *flags[2] = {"data", "val-data"}, *paths[2] = {o->data, o->val_data};
  for (int k = 0; k < 2; ++k) {
    if (!paths[k][0]) continue;
    const int image = ddp_image_shard_peek(paths[k]);
    if (image < 0) continue;
    if (model->image_data && !image) {
      USAGE_ERROR(
          "option --%s %s: model %s trains on images, and this is not an image shard (ddpprep "
          "--images writes them)",
          flags[k], paths[k], model->name);
      return DDP_ERR_INVALID_ARG;
    }
    if (!model->image_data && image) {
      USAGE_ERROR("option --%s %s is an image shard, but model %s trains on %s", flags[k], paths[k],
                  model->name,
                  model->batch_kind == DDP_BATCH_TOKENS ? "token shards" : "record files");
      return DDP_ERR_INVALID_ARG;
    }
  }
  if (model->image_data && o->val_data[0] && !o->data[0]) {
    USAGE_ERROR("option --val-data needs --data (the built-in image set has its own split)");
    return DDP_ERR_INVALID_ARG;
  }
  /* The loader's image flags do nothing for a token or record model: a
   * user who gives one expects augmentation that would never happen. */
  static const char *const image_flags[] = {"crop-pad", "pad-to", "hflip", "normalize",
                                            "loader-threads"};
  for (size_t i = 0; !model->image_data && i < sizeof image_flags / sizeof image_flags[0]; ++i)
    if (ddp_options_given(o, image_flags[i])) {
      USAGE_ERROR("option --%s applies to image models (such as --model resnet); model %s trains "
                  "on %s",
                  image_flags[i], model->name,
                  model->batch_kind == DDP_BATCH_TOKENS ? "token shards" : "record files");
      return DDP_ERR_INVALID_ARG;
    }
  return DDP_OK;
}

ddp_status_t ddp_options_validate(const ddp_options_t *o) {
  const ddp_model_ops_t *model = ddp_model_find(o->model);
  if (!model) {
    USAGE_ERROR("option --model: '%s' is not a registered model", o->model);
    return DDP_ERR_INVALID_ARG;
  }
  if (model->batch_kind == DDP_BATCH_TOKENS) {
    if (o->tokens_per_batch < o->seq_len) {
      USAGE_ERROR(
          "option --tokens-per-batch %lld is smaller than --seq-len %lld: a micro-batch "
          "must hold at least one full row",
          (long long)o->tokens_per_batch, (long long)o->seq_len);
      return DDP_ERR_INVALID_ARG;
    }
    if (o->val_data[0] && !o->data[0]) {
      USAGE_ERROR("option --val-data needs --data (the built-in data set has its own split)");
      return DDP_ERR_INVALID_ARG;
    }
    char why[256];
    ddp_builtin_mix_t mix;
    if (ddp_builtin_mix_parse(o->tasks, &mix, why, sizeof why) != DDP_OK) {
      USAGE_ERROR("option --tasks: %s", why);
      return DDP_ERR_INVALID_ARG;
    }
    if (o->data[0] && strcmp(o->tasks, DDP_BUILTIN_DEFAULT_MIX) != 0) {
      USAGE_ERROR(
          "option --tasks %s: the task mix is the built-in data set's; --data trains on "
          "shards",
          o->tasks);
      return DDP_ERR_INVALID_ARG;
    }
  } else if (!model->load_records && !model->image_data && !o->data[0]) {
    USAGE_ERROR(
        "model %s trains on records: give --data FILE (safetensors with 'inputs' F32 "
        "(n, ...) and 'labels' I32 (n))",
        model->name);
    return DDP_ERR_INVALID_ARG;
  }
  if (check_data_kind(o, model) != DDP_OK) return DDP_ERR_INVALID_ARG;
  if (o->min_lr > o->lr) {
    USAGE_ERROR("option --min-lr %g exceeds --lr %g (the decay goes from --lr down to --min-lr)",
                o->min_lr, o->lr);
    return DDP_ERR_INVALID_ARG;
  }
  ddp_precision_t precision = DDP_PRECISION_FP32;
  if (ddp_precision_parse(o->precision, &precision) != DDP_OK) return DDP_ERR_INTERNAL;
  if (precision != DDP_PRECISION_FP32 && !model->set_precision) {
    USAGE_ERROR("option --precision %s: model %s computes in fp32 only", o->precision, model->name);
    return DDP_ERR_INVALID_ARG;
  }
  /* the rule of the trainer's loss scaler (amp/amp_train.c) */
  const int scaler = ddp_ascii_ieq(o->loss_scaling, "dynamic") ||
                     (ddp_ascii_ieq(o->loss_scaling, "auto") && precision == DDP_PRECISION_FP16);
  if (scaler && o->loss_scale_min > o->loss_scale_init) {
    USAGE_ERROR("option --loss-scale-min %g exceeds --loss-scale-init %g", o->loss_scale_min,
                o->loss_scale_init);
    return DDP_ERR_INVALID_ARG;
  }
  /* --resume auto is the requeue-safe form: a checkpoint in --save wins,
   * and --init-from applies only when there is none yet */
  if (o->init_from[0] && o->resume[0] && strcmp(o->resume, "auto") != 0) {
    USAGE_ERROR(
        "option --init-from starts a new run from weights, --resume %s continues one from its "
        "checkpoint: give one of them (--resume auto with --save resumes when the directory "
        "holds a checkpoint and starts from --init-from when it does not)",
        o->resume);
    return DDP_ERR_INVALID_ARG;
  }
  if (strcmp(o->resume, "auto") == 0 && !o->save[0]) {
    USAGE_ERROR("option --resume auto needs --save DIR (the directory it resumes from)");
    return DDP_ERR_INVALID_ARG;
  }
  /* a checkpoint schedule with nowhere to write it would be a run the user
   * believes is protected and is not */
  if (o->save_every > 0 && !o->save[0]) {
    USAGE_ERROR("option --save-every %lld needs --save DIR (the directory it writes to)",
                (long long)o->save_every);
    return DDP_ERR_INVALID_ARG;
  }
  /* under --zero 1 the bucket cut decides which rank owns which weights
   * and optimizer state: trying other cuts mid-run would move them */
  if (o->zero && (o->bucket_mb == DDP_OPTIONS_AUTO || o->first_bucket_mb == DDP_OPTIONS_AUTO)) {
    USAGE_ERROR(
        "option --zero 1 needs fixed bucket sizes (--bucket-mb and --first-bucket-mb in MB, not "
        "auto): the buckets decide which rank holds which optimizer state");
    return DDP_ERR_INVALID_ARG;
  }
  if (o->scale && !o->plan_only) {
    USAGE_ERROR("option --scale needs --plan-only (it predicts instead of training)");
    return DDP_ERR_INVALID_ARG;
  }
  if ((ddp_options_given(o, "cluster") || strcmp(o->cluster, "dgx-a100") != 0) && !o->scale) {
    USAGE_ERROR("option --cluster needs --scale (only the scaling model reads it)");
    return DDP_ERR_INVALID_ARG;
  }
  if (o->scale_from[0] && !o->scale) {
    USAGE_ERROR("option --scale-from needs --scale (only the scaling model reads it)");
    return DDP_ERR_INVALID_ARG;
  }
  if (o->scale) {
    char why[2 * 1024 + 256];
    ddp_scale_cluster_t cluster;
    if (ddp_scale_cluster_load(o->cluster, &cluster, why, sizeof why) != DDP_OK) {
      USAGE_ERROR("option --cluster %s: %s", o->cluster, why);
      return DDP_ERR_INVALID_ARG;
    }
    double ms;
    int n;
    if (o->scale_from[0] &&
        ddp_scale_from_metrics(o->scale_from, o, &ms, &n, why, sizeof why) != DDP_OK) {
      USAGE_ERROR("option --scale-from: %s", why);
      return DDP_ERR_INVALID_ARG;
    }
  }
  /* --cuda-graphs on where it cannot be used: a command-line error here;
   * what only the backend knows (auto resolving to the CPU) is the
   * trainer's (train/train_graphs.c) */
  if (ddp_ascii_ieq(o->cuda_graphs, "on")) {
    const char *clash = ddp_ascii_ieq(o->device, "cpu")  ? "--device cpu"
                        : ddp_ascii_ieq(o->nvtx, "on")   ? "--nvtx on"
                        : o->trace[0]                    ? "--trace"
                        : o->detect_anomaly              ? "--detect-anomaly"
                                                         : NULL;
    if (clash) {
      USAGE_ERROR("option --cuda-graphs on cannot go with %s, which needs the kernels launched "
                  "one by one (or has none); use --cuda-graphs auto or off",
                  clash);
      return DDP_ERR_INVALID_ARG;
    }
  }
  /* the model's own combinations; it logs its one line */
  /* --trace is written at the end: a path that cannot take it fails now */
  if (o->trace[0] && ddp_timeline_check_path(o->trace) != DDP_OK) return DDP_ERR_INVALID_ARG;
  if (model->validate && model->validate(o) != DDP_OK) return DDP_ERR_INVALID_ARG;
  return DDP_OK;
}

/* ---- reading values by name ---------------------------------------------------- */

/* The value field of the flag `name` and its kind (*kind). */
static ddp_status_t lookup(const ddp_options_t *opts, const char *name, const char **field,
                           opt_kind_t *kind) {
  row_ref_t row;
  if (!opts || !name || find_long(name, strlen(name), &row) < 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "options: no flag --%s", name ? name : "(null)");
  *field = (const char *)opts + row.r.offset;
  *kind = row.r.kind;
  return DDP_OK;
}

#define WRONG_KIND(name, what) \
  DDP_FAIL(DDP_ERR_INVALID_ARG, "options: --%s is not %s flag", name, what)

ddp_status_t ddp_options_get_int(const ddp_options_t *opts, const char *name, int64_t *value) {
  const char *f;
  opt_kind_t kind;
  DDP_CHECK(lookup(opts, name, &f, &kind));
  if (kind != OPT_INT) WRONG_KIND(name, "an integer");
  *value = *(const int64_t *)f;
  return DDP_OK;
}

ddp_status_t ddp_options_get_float(const ddp_options_t *opts, const char *name, double *value) {
  const char *f;
  opt_kind_t kind;
  DDP_CHECK(lookup(opts, name, &f, &kind));
  if (kind != OPT_INT && kind != OPT_FLOAT) WRONG_KIND(name, "a number");
  *value = kind == OPT_INT ? (double)*(const int64_t *)f : *(const double *)f;
  return DDP_OK;
}

ddp_status_t ddp_options_get_string(const ddp_options_t *opts, const char *name,
                                    const char **value) {
  const char *f;
  opt_kind_t kind;
  DDP_CHECK(lookup(opts, name, &f, &kind));
  if (kind != OPT_STRING) WRONG_KIND(name, "a text");
  *value = f;
  return DDP_OK;
}

/* ---- --help ------------------------------------------------------------------ */

static void print_row(FILE *out, const row_ref_t *ref) {
  const opt_row_t *r = &ref->r;
  char left[48];
  if (r->short_name)
    snprintf(left, sizeof left, "-%c, --%s%s%s", r->short_name, r->name, r->metavar ? " " : "",
             r->metavar ? r->metavar : "");
  else
    snprintf(left, sizeof left, "    --%s%s%s", r->name, r->metavar ? " " : "",
             r->metavar ? r->metavar : "");
  fprintf(out, "  %-26s %s", left, r->help);
  if (ref->choices) {
    fprintf(out, " (");
    for (int i = 0; ref->choices[i]; ++i) fprintf(out, "%s%s", i ? ", " : "", ref->choices[i]);
    fprintf(out, ")");
  }
  if (r->def) fprintf(out, " [%s]", r->def);
  fputc('\n', out);
}

/* Each registered model's own section, right after the runtime's "Model". */
static void print_model_sections(FILE *out) {
  int index = N_CORE;
  for (int m = 0; m < ddp_model_count(); ++m) {
    const ddp_model_ops_t *ops = ddp_model_at(m);
    fprintf(out, "\nModel %s (--model %s): %s\n", ops->name, ops->name, ops->summary);
    if (ops->n_options == 0) fprintf(out, "  (no flags of its own)\n");
    row_ref_t row;
    for (int i = 0; i < ops->n_options; ++i, ++index)
      if (get_row(index, &row) == 0) print_row(out, &row);
  }
}

void ddp_options_print_help_for(FILE *out, const char *program) {
  const char *prog = program && program[0] ? program : "ddptrain";
  fprintf(out,
          "Usage: mpirun -np N %s [OPTIONS]\n"
          "       %s [OPTIONS]            (a single process)\n\n"
          "%s trains models data-parallel: one process per GPU (or CPU socket),\n"
          "started by mpirun or srun. Without a GPU it runs on the CPU backend.\n",
          prog, prog, prog);
  const char *section = NULL;
  for (int i = 0; i < N_CORE; ++i) {
    const row_ref_t ref = {.r = k_rows[i], .slot = -1};
    if (!section || strcmp(section, ref.r.section) != 0) {
      if (section && strcmp(section, "Model") == 0) print_model_sections(out);
      section = ref.r.section;
      fprintf(out, "\n%s:\n", section);
    }
    print_row(out, &ref);
  }
  fputc('\n', out);
  ddp_env_print_help(out);
  fprintf(out,
          "\nExit status: 0 success, 1 runtime failure, 2 bad command line, 75 preempted\n"
          "(SIGTERM, SIGUSR1 or SIGINT: the step finished and a checkpoint was written),\n"
          "76 preempted without a checkpoint (no --save, or its write failed), 74 trained\n"
          "to the end but the final checkpoint was not written,\n"
          "130 a second SIGINT (immediate exit).\n"
          "Errors name the rank that saw them; a fatal error on one rank ends every rank.\n");
}

void ddp_options_print_help(FILE *out) {
  ddp_options_print_help_for(out, NULL);
}
