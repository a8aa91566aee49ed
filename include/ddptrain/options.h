/* Command-line options of the ddptrain program.
 *
 * Every flag is one row of a table (src/runtime/options.c): name, type, default,
 * range and help. Parsing, validation, defaults and --help are all driven by
 * that table, so a flag cannot be documented without being parsed or parsed
 * without being range-checked. Defaults go through the same parser as user
 * values, which proves they are valid (a test walks the table).
 * Bad input (unknown flag, missing value, malformed number, value out of
 * range) is reported in one line naming the flag, and parse returns
 * DDP_ERR_INVALID_ARG; the program exits with status 2. */
#ifndef DDPTRAIN_OPTIONS_H
#define DDPTRAIN_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- flags declared by models (ddptrain/model.h) --------------------------
 * A model lists its own flags as rows of the same kind as the runtime's; they
 * join the command line when the model is registered, and a program reads
 * them by name. */
typedef enum ddp_option_type {
  DDP_OPTION_INT = 0,
  DDP_OPTION_FLOAT = 1,
  DDP_OPTION_STRING = 2
} ddp_option_type_t;

typedef struct ddp_option_def {
  const char *name; /* long name without "--" */
  ddp_option_type_t type;
  const char *def; /* default, parsed like user input */
  double min, max; /* numbers: inclusive range */
  const char *metavar;
  const char *help;
  /* strings: the accepted values (ASCII case-insensitive), NULL-terminated;
   * NULL: any text */
  const char *const *choices;
  /* nonzero: may differ between ranks (a local setting); every other flag
   * must agree across the ranks of a job */
  int per_rank;
} ddp_option_def_t;

/* Room for the flags of every registered model together, and for one string
 * value (with its NUL). */
#define DDP_MODEL_OPTION_SLOTS 64
#define DDP_OPTION_TEXT_MAX 128
/* Room for the runtime's own rows (a static assertion checks it). */
#define DDP_CORE_OPTION_SLOTS 96

/* The value of a size flag given as "auto" (--bucket-mb, --first-bucket-mb):
 * no size is negative, so the sentinel cannot be a user's number. */
#define DDP_OPTIONS_AUTO (-1.0)

typedef struct ddp_option_value {
  int64_t i;
  double f;
  char s[DDP_OPTION_TEXT_MAX];
  int given; /* set on the command line (not the default) */
} ddp_option_value_t;

typedef struct ddp_options {
  /* data */
  char data[1024], val_data[1024];
  char tasks[64]; /* the built-in data set's task mix (ddp_builtin_mix_parse) */
  /* image models (docs/design.md §4.4): training augmentation, the
   * normalisation, and the threads of one micro-batch's fill */
  int64_t crop_pad; /* -1: 4 for images up to 64 pixels a side, else 0 */
  int64_t pad_to;   /* image models: canvas side the images are centred on (0: none) */
  int64_t hflip;
  char normalize[8]; /* "train" | "none" */
  int64_t loader_threads;
  /* model: which one (ddptrain/model.h) and the longest token row */
  char model[32];
  int64_t seq_len;
  /* batching */
  int64_t tokens_per_batch, batch_size, accum, steps, epochs;
  char sampler[16];
  int64_t bucket_chunk;
  /* optimisation */
  char optimizer[16];
  double lr, min_lr, weight_decay, grad_clip, beta1, beta2, adam_eps, momentum;
  int64_t warmup, nesterov;
  /* data parallelism */
  /* MiB, or DDP_OPTIONS_AUTO ("auto": chosen by bucket tuning, train/bucket_tune.h) */
  double bucket_mb, first_bucket_mb;
  int64_t zero; /* --zero: 1 shards the optimizer state across the ranks (train/zero.h) */
  char comm_progress[16];
  int64_t check_replicas;
  double heartbeat_timeout;
  double startup_timeout;
  /* mixed precision */
  char precision[8], loss_scaling[16], grad_reduce_dtype[8];
  double loss_scale_init, loss_scale_growth, loss_scale_backoff, loss_scale_min;
  int64_t loss_scale_window;
  /* run control */
  char device[32];
  char tf32[8]; /* "on" | "off" */
  char nvtx[8]; /* "on" | "off" */
  /* "auto" | "on" | "off": training passes recorded once and replayed as
   * CUDA graphs (model/graph_replay.h) */
  char cuda_graphs[8];
  /* "on" | "off": GPU convolutions by deterministic algorithms only */
  char deterministic[8];
  /* "on" | "off": CPU 3x3 stride-1 convolutions by Winograd where oneDNN has it */
  char winograd[8];
  /* --conv-algos FILE|auto|none: the convolution algorithm record
   * (train/train_conv_algos.h) */
  char conv_algos[1024];
  int64_t threads;
  int64_t seed;
  double peak_gflops;
  /* logging, evaluation, export */
  int64_t log_every, eval_every, eval_tokens;
  int64_t sample_every; /* train/sample_every.h */
  char tokenizer[1024]; /* the GPT-2 BPE the samples decode with ("" = none) */
  char metrics[1024], export_path[1024], dump_batches[1024];
  char trace[1024];    /* --trace FILE: the timeline (trace/timeline.h) */
  int64_t trace_steps; /* steps it records */
  /* checkpoints (see train/ckpt.h) */
  char save[1024], resume[1024];
  char init_from[1024]; /* start from these weights (model/gpt_init_from.h) */
  int64_t save_every, keep, stop_at;
  int detect_anomaly;
  /* actions */
  int help, version, build_info, self_test, plan_only, json;
  int64_t world_size;
  /* --plan-only --scale: the scaling model's report (train/scale_report.h)
   * for --cluster, a preset name or a JSON file (train/scale_cluster.h) */
  int scale;
  char cluster[1024];
  char scale_from[1024]; /* a run's --metrics file: its compute time */
  /* --config FILE: the JSON file read before the command line ("" = none) */
  char config[1024];
  /* the registered models' own flags, in registry order (read them with
   * ddp_options_get_*) */
  ddp_option_value_t model_values[DDP_MODEL_OPTION_SLOTS];
  /* the runtime's own flags set on the command line, by row (read them
   * with ddp_options_given) */
  unsigned char core_given[DDP_CORE_OPTION_SLOTS];
} ddp_options_t;

/* Fills every field with its declared default (the flags of the models
 * registered so far included). */
ddp_status_t ddp_options_defaults(ddp_options_t *opts);

/* Parses argv[1..argc-1] on top of the defaults. Accepts `--flag value` and
 * `--flag=value`. A model's flag given while --model names another model is
 * an error naming both. With --config FILE (anywhere on the line) the flags
 * of FILE, a JSON object {"flag-name": value}, are applied first and every
 * flag of the command line overrides them (docs/design.md §3.6). */
ddp_status_t ddp_options_parse(ddp_options_t *opts, int argc, char **argv);

void ddp_options_print_help(FILE *out);
/* The same with `program` in the usage line (a user's program built on the
 * library). */
void ddp_options_print_help_for(FILE *out, const char *program);

/* A flag's value by name (core flags and the registered models' own),
 * after defaults/parse. DDP_ERR_INVALID_ARG, logged, for an unknown name or
 * a flag of another type (an integer flag also reads as a float). */
ddp_status_t ddp_options_get_int(const ddp_options_t *opts, const char *name, int64_t *value);
ddp_status_t ddp_options_get_float(const ddp_options_t *opts, const char *name, double *value);
ddp_status_t ddp_options_get_string(const ddp_options_t *opts, const char *name,
                                    const char **value);

/* Whether row `index` applies to the run `opts` describes: every core flag
 * does; a model's own flag only when --model names that model.
 * Checkpoints record and compare only the flags that apply. */
int ddp_options_applies(const ddp_options_t *opts, int index);

/* Whether row `index` is part of the run's configuration (every flag but
 * the job's outputs and actions and the ranks' local settings), and a hash
 * of its value in `opts`: --resume compares these with a checkpoint's. */
int ddp_options_must_agree(int index);
uint64_t ddp_options_value_hash(const ddp_options_t *opts, int index);

/* The text of row `index` that every rank of a job must share, into buf:
 * its value as ddp_options_format writes it (for --device only the kind:
 * the GPU ordinal may differ). Returns 0, 1 for a row that may differ
 * between ranks (a rank's local hardware or profiling setting), or -1 for
 * a bad index or a value longer than len - 1. ddp_main compares these
 * across ranks before any other start-up work (docs/design.md §6.1). */
int ddp_options_rank_value(const ddp_options_t *opts, int index, char *buf, size_t len);

/* Checks the combinations of flags that single rows cannot express (e.g.
 * --tokens-per-batch below --seq-len, --min-lr above --lr), then the
 * model's own `validate`. Needs no data and no MPI, so ddp_main runs it
 * before the ranks start. A failure is one logged line naming the flags,
 * DDP_ERR_INVALID_ARG (exit status 2). */
ddp_status_t ddp_options_validate(const ddp_options_t *opts);

/* Row `index`'s value in `opts` as text that parses back to it (numbers
 * with full precision, strings as they are, actions 0/1); 0 on success, -1
 * for a bad index or a value longer than len - 1. */
int ddp_options_format(const ddp_options_t *opts, int index, char *buf, size_t len);

/* Whether the flag `name` (the runtime's or a model's) was set on the
 * command line rather than left at its default; 0 for an unknown name.
 * --init-from fills in only the architecture flags not given. */
int ddp_options_given(const ddp_options_t *opts, const char *name);

/* Number of rows (the runtime's, then each registered model's own), and a
 * row's long name. */
int ddp_options_count(void);
const char *ddp_options_name(int index);

#ifdef __cplusplus
}
#endif
#endif
