/* The model interface: what the runtime needs from any model it trains.
 *
 * A model is a table of operations (ddp_model_ops_t) registered under a
 * name; --model NAME picks one. The trainer, checkpoints, anomaly checks,
 * the ranks' agreement checks, evaluation and --plan-only reach a model only
 * through this interface, so a new network (built in, or a user's own,
 * registered from their program before ddp_main) trains with everything the
 * runtime gives: bucketed all-reduce overlapped with backward, gradient
 * accumulation, mixed-precision state, checkpoints and resume, metrics.
 *
 * What a model owns (filled in by its create operation):
 *   - one flat fp32 parameter buffer and one gradient buffer, n_params
 *     elements each, in backend memory, laid out in the order backward
 *     finishes the gradients (so gradient buckets are slices that fill from
 *     the front);
 *   - the parameter table (ddptrain/param.h): one entry per tensor, in that
 *     order, tiling [0, n_params); optimizer, reducer, checkpoints and
 *     exports all read it;
 *   - under bf16/fp16, a compute copy of the weights in that type, which the
 *     optimizer pass writes as it updates the masters.
 *
 * The contract of a training micro-step (docs/design.md §5.3, loss
 * normalisation): forward_backward computes the SUM of the per-target
 * losses of its batch, adds it to a loss accumulator kept in backend memory
 * (read with take_loss, so nothing syncs per step), and back-propagates
 * dloss = loss scale / (targets of the whole optimizer step, all ranks), so
 * the gradients of every micro-step and rank add up to the gradient of the
 * step's mean loss. accumulate == 0 overwrites the gradients (the first
 * micro-step: no zeroing pass), accumulate != 0 adds to them. With notify
 * != 0 (the last micro-step) the model calls ddp_model_grad_ready once per
 * tensor, in table order, as soon as that tensor's gradient is final: that
 * is when the runtime starts the tensor's bucket all-reduce.
 *
 * Every operation returns a ddp_status_t and logs its own error. Slots
 * marked "optional" may be NULL; each says what the runtime does then. */
#ifndef DDPTRAIN_MODEL_H
#define DDPTRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "ddptrain/data.h"
#include "ddptrain/options.h"
#include "ddptrain/param.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_model ddp_model_t;

/* How the runtime keeps a buffer consistent across ranks. */
typedef enum ddp_buffer_kind {
  /* A statistic each rank updates from its own batches (BatchNorm's
   * running mean and variance without --sync-bn): averaged over the ranks
   * before every evaluation, checkpoint and export, so all replicas
   * evaluate and save the same model. */
  DDP_BUFFER_MEAN = 0,
  /* A counter every rank advances alike (num_batches_tracked): identical
   * without help; stored as fp32 (exact to 2^24), exported as an int64
   * scalar as PyTorch keeps it. */
  DDP_BUFFER_COUNT = 1,
} ddp_buffer_kind_t;

/* One entry of a model's buffer table: where it lives in m->buffers (the
 * parameter table's fields; `decay` unused) and how it is kept. */
typedef struct ddp_buffer {
  ddp_param_t t;
  ddp_buffer_kind_t kind;
} ddp_buffer_t;

/* The data a model is built for, known before it is created. */
typedef struct ddp_data_shape {
  ddp_batch_kind_t kind;
  /* DDP_BATCH_TOKENS */
  int vocab;   /* tokens are 0 .. vocab - 1 */
  int seq_len; /* the longest row of a batch (T) */
  /* DDP_BATCH_RECORDS */
  int record_ndim;                           /* dimensions of one record's features */
  int64_t record_shape[DDP_RECORD_MAX_DIMS]; /* unused dimensions are 1 */
  int64_t record_floats;                     /* features per record: the shape's product */
  int n_classes;                             /* labels are 0 .. n_classes - 1 */
} ddp_data_shape_t;

/* What create() gets. */
typedef struct ddp_model_setup {
  ddp_backend_t *be;
  const ddp_options_t *opts; /* the run's flags; a model reads its own with
                                ddp_options_int/_float/_string */
  ddp_data_shape_t data;
  /* The largest micro-batch: padded tokens (B x T) for token batches,
   * records for record batches. Size activation memory for it once. */
  int64_t max_batch;
  /* The ranks of the job (0 is taken as 1), for statistics a model takes
   * over all ranks (--sync-bn divides by the positions of every rank). */
  int world;
} ddp_model_setup_t;

/* Which backends a model runs on: bits (1u << ddp_device_kind_t). */
#define DDP_MODEL_ON(kind) (1u << (unsigned)(kind))

typedef struct ddp_model_ops {
  const char *name;    /* --model NAME: lower case, no spaces */
  const char *summary; /* one line for --help */
  ddp_batch_kind_t batch_kind;
  unsigned devices; /* DDP_MODEL_ON(DDP_DEVICE_KIND_CPU) | ...; never 0 */
  int uses_nn_ops;  /* 1: needs the backend's nn kernels (ddptrain/nn.h): under
                       --device auto a backend without them is skipped */
  /* Record models only: 1 when the records are images. --data then names
   * an image shard (ddpprep --images, docs/design.md §5.6), the built-in
   * image set without it; record batches hold (B,H,W,C) fp32 pixels the
   * loader has augmented and normalised (record_shape H, W, C). */
  int image_data;

  /* ---- flags ---------------------------------------------------------- */
  /* The model's own command-line flags: parsed, range-checked and listed by
   * --help (in a section "Model NAME") like every other flag, accepted only
   * with --model NAME, recorded in checkpoints and compared across ranks.
   * Optional (NULL, 0): no flags of its own. */
  const ddp_option_def_t *options;
  int n_options;
  /* Flags that fix the model's tensors (NULL-terminated names, its own or
   * core ones): resuming with another value is an error naming the flag.
   * Optional: NULL: only the runtime's own structural flags are checked
   * (--model, --data, --optimizer, and --seq-len for token models), and the
   * checkpoint's tensor names and shapes must still match the model's
   * table. */
  const char *const *ckpt_keys;
  /* Checks the combination of the model's flags (one line naming the flags)
   * before any data is read. Optional: NULL: only each flag's own range and
   * choices are checked. */
  ddp_status_t (*validate)(const ddp_options_t *o);

  /* ---- data ----------------------------------------------------------- */
  /* The sampler's cost and the FLOP count behind MFU: a micro-batch of B
   * rows padded to T (records: T = 1) costs B*T*(a + b*T) FLOPs, forward and
   * backward. Must not need a model instance (--plan-only has none).
   * Optional: NULL: a = 1, b = 0 (micro-batches are balanced by padded
   * tokens or records) and MFU is not reported. */
  ddp_status_t (*cost)(const ddp_options_t *o, const ddp_data_shape_t *data, double *a, double *b);
  /* Loads the model's own data set: split DDP_SPLIT_TRAIN or DDP_SPLIT_VAL
   * (*have = 0: no such split). For record models that generate or read
   * their own data. Optional: NULL: the runtime reads --data/--val-data as
   * the batch kind says (token shards or the built-in task set; record
   * files, see ddp_records_open). Only for record models. */
  ddp_status_t (*load_records)(const ddp_options_t *o, int split, ddp_records_t *out, int *have);

  /* ---- life cycle ------------------------------------------------------- */
  /* Allocates everything (parameters, gradients, activation memory for
   * setup->max_batch, the loss accumulator) and fills m's "set by create"
   * fields; m->ops, m->be are set. Nothing is allocated after this and
   * set_precision. Required. */
  ddp_status_t (*create)(ddp_model_t *m, const ddp_model_setup_t *setup);
  /* Frees what create and set_precision made; safe after a failed create.
   * Required. */
  void (*destroy)(ddp_model_t *m);
  /* Writes the initial weights, a pure function of the seed (every rank
   * draws the same; rank 0's are broadcast anyway). Required. */
  ddp_status_t (*init_weights)(ddp_model_t *m, uint64_t seed);
  /* Switches activations and the compute copy to dtype (bf16/fp16), once,
   * before training; sets m->precision and m->compute_params. Optional:
   * NULL: the model computes in fp32 only, and --precision bf16/fp16 is an
   * error naming the model. */
  ddp_status_t (*set_precision)(ddp_model_t *m, ddp_dtype_t dtype);

  /* ---- steps ------------------------------------------------------------ */
  /* One training micro-step on `batch` (a ddp_batch_t for token models, a
   * ddp_record_batch_t for record models; host memory), see the contract
   * above. Required. */
  ddp_status_t (*forward_backward)(ddp_model_t *m, const void *batch, float dloss, int accumulate,
                                   int notify);
  /* Evaluation forward: no activations kept for backward, the loss sum of
   * the batch's targets added to the accumulator (a token batch may have
   * NULL targets: outputs only), the outputs kept for copy_outputs.
   * Optional: NULL: no validation loss and no accuracy are reported. */
  ddp_status_t (*eval_forward)(ddp_model_t *m, const void *batch);
  /* Reads and zeroes the loss accumulator (one host sync). Required. */
  ddp_status_t (*take_loss)(ddp_model_t *m, double *loss_sum);
  /* Copies the first n_rows rows of the last eval_forward's outputs to
   * host memory as fp32, m->n_outputs values per row (logits: a token
   * model's per position, a classifier's per record). Optional: NULL: no
   * held-out accuracy is reported. */
  ddp_status_t (*copy_outputs)(ddp_model_t *m, float *host, int64_t n_rows);

  /* ---- reporting and export --------------------------------------------- */
  /* One line for the start-up log ("GPT L12 H12 C768 T1024, ..."). Optional:
   * NULL: the model's name and parameter count. */
  void (*describe)(const ddp_model_t *m, char *buf, size_t len);
  /* Writes the weights as a safetensors file under PyTorch state_dict
   * names, atomically. Optional: NULL: ddp_model_export writes every tensor
   * of the table under its name (fp32), with the model's name and flags in
   * the metadata. */
  ddp_status_t (*export_weights)(ddp_model_t *m, const char *path);
} ddp_model_ops_t;

/* A model instance. The runtime reads these fields directly (like
 * ddp_backend_t's) and never writes the model's own. */
struct ddp_model {
  const ddp_model_ops_t *ops;
  ddp_backend_t *be;
  const ddp_options_t *opts; /* the flags it was created with (borrowed) */
  void *impl;                /* the model's private state */

  /* ---- set by create --------------------------------------------------- */
  const ddp_param_t *tensors; /* the parameter table, owned by the model */
  int n_tensors;
  size_t n_params;
  float *params, *grads; /* backend memory, n_params each */
  int64_t n_outputs;     /* values per row of copy_outputs (0: none) */
  /* ---- buffers: model state that is not trained (docs/design.md §3.9),
   * set by create; optional (NULL, 0: none) --------------------------------
   * BatchNorm's running statistics and batch counters: one fp32 buffer in
   * backend memory, described by its own table (names are PyTorch
   * state_dict keys, entries tile [0, n_buffer_floats) like the parameter
   * table's). The runtime broadcasts them from rank 0 with the weights,
   * checkpoints and exports them, and keeps them consistent across ranks
   * as each entry's kind says; they never enter the gradients, the reducer
   * or the optimizer. */
  const ddp_buffer_t *buffer_tensors;
  int n_buffer_tensors;
  size_t n_buffer_floats;
  float *buffers;
  /* 1 when every rank computes the same buffers already (statistics over
   * all ranks, --sync-bn): the runtime then never averages them. */
  int buffers_in_sync;

  /* ---- set by create, changed by set_precision ------------------------- */
  ddp_dtype_t precision; /* activations and compute_params; DDP_DTYPE_F32 */
  void *compute_params;  /* n_params elements of precision, or NULL in fp32 */

  /* ---- set by the runtime; a model only calls them ----------------------- */
  void (*grad_ready_fn)(void *ctx, size_t offset, size_t count);
  void *grad_ready_ctx;
  /* A watcher (--detect-anomaly, fault injection): shown activations and
   * gradients as a pass produces them, with a name ("forward: h.0.mlp.c_fc
   * output", "backward: gradient of transformer.h.0.mlp.c_fc.weight"); x
   * is backend memory of n dtype elements. A status other than DDP_OK ends
   * the pass with it. A model that never calls it still gets the per-step
   * gradient check, which names the first non-finite tensor. */
  ddp_status_t (*watch_fn)(void *ctx, const char *what, void *x, ddp_dtype_t dtype, size_t n);
  void *watch_ctx;
  /* Sums n fp32 values of backend memory across the ranks, in place, for
   * statistics a model computes over the whole job inside a pass
   * (--sync-bn). x is written by work enqueued on the compute stream; the
   * sum is in place for work enqueued after the call. NULL in a single
   * process: the sum over one rank is x itself (ddp_model_allreduce). */
  ddp_status_t (*allreduce_fn)(void *ctx, float *x, size_t n);
  void *allreduce_ctx;
  /* Where training passes may be recorded once and replayed as device
   * graphs (--cuda-graphs): the runtime's replay cache, which a built-in
   * model hands its forward-backward to; NULL when the run does not allow
   * it. A model that ignores it runs eagerly as before. */
  struct ddp_graph_replay *replay;
};

/* For models: tensor `index` of the table has its final gradient for this
 * step (call only on passes with notify != 0, once per tensor, in order). */
static inline void ddp_model_grad_ready(ddp_model_t *m, int index) {
  if (m->grad_ready_fn)
    m->grad_ready_fn(m->grad_ready_ctx, m->tensors[index].offset, m->tensors[index].count);
}
/* For models: sums x (n fp32, backend memory) across the ranks, in place. */
static inline ddp_status_t ddp_model_allreduce(ddp_model_t *m, float *x, size_t n) {
  return m->allreduce_fn ? m->allreduce_fn(m->allreduce_ctx, x, n) : DDP_OK;
}
/* For models: shows x to the watcher, if there is one. */
static inline ddp_status_t ddp_model_watch(ddp_model_t *m, const char *what, void *x,
                                           ddp_dtype_t dtype, size_t n) {
  return m->watch_fn ? m->watch_fn(m->watch_ctx, what, x, dtype, n) : DDP_OK;
}

/* ---- the registry ------------------------------------------------------- */

/* Adds a model (the table is borrowed for the life of the process). Call
 * before parsing options: its flags join the command line then. Rejects,
 * with a logged message: a missing required slot, a bad name or batch kind,
 * no devices, a name already registered, a flag name that another flag
 * already has, a default its own row rejects, more flags than the options
 * have room for (DDP_MODEL_OPTION_SLOTS in all). The built-in models (gpt)
 * are registered from the start. */
ddp_status_t ddp_model_register(const ddp_model_ops_t *ops);
/* The registered model named `name`, or NULL. */
const ddp_model_ops_t *ddp_model_find(const char *name);
int ddp_model_count(void);
const ddp_model_ops_t *ddp_model_at(int index);

/* ---- using a model ----------------------------------------------------- */

/* Creates a model and checks its side of the contract: the table tiles
 * [0, n_params) (ddp_param_table_check), buffers are set. On failure
 * nothing is left allocated. */
ddp_status_t ddp_model_create(const ddp_model_ops_t *ops, const ddp_model_setup_t *setup,
                              ddp_model_t **out);
void ddp_model_destroy(ddp_model_t *m);
/* Rewrites the compute copy from the master weights after something other
 * than the optimizer changed them (a broadcast, a resume); a no-op in fp32. */
ddp_status_t ddp_model_refresh_compute(ddp_model_t *m);
/* All parameters (n_params floats) to / from host memory. from_host also
 * refreshes the compute copy. */
ddp_status_t ddp_model_params_to_host(ddp_model_t *m, float *host);
ddp_status_t ddp_model_params_from_host(ddp_model_t *m, const float *host);
/* ops->export_weights, or the generic export described there. */
ddp_status_t ddp_model_export(ddp_model_t *m, const char *path);
/* ops->describe, or the generic line. */
void ddp_model_describe(const ddp_model_t *m, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
