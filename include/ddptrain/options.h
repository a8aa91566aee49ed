/* Command-line options of the ddptrain program.
 *
 * Every flag is one row of a table (src/options.c): name, type, default,
 * range and help. Parsing, validation, defaults and --help are all driven by
 * that table, so a flag cannot be documented without being parsed or parsed
 * without being range-checked. Defaults go through the same parser as user
 * values, which proves they are valid (a test walks the table).
 * Bad input (unknown flag, missing value, malformed number, value out of
 * range) is reported in one line naming the flag, and parse returns
 * DDP_ERR_INVALID_ARG; the program exits with status 2. */
#ifndef DDPTRAIN_OPTIONS_H
#define DDPTRAIN_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddp_options {
  /* data */
  char data[1024], val_data[1024];
  /* model */
  int64_t seq_len, n_layer, n_head, n_embd;
  /* batching */
  int64_t tokens_per_batch, accum, steps, epochs;
  char sampler[16];
  int64_t bucket_chunk;
  /* optimisation */
  char optimizer[16];
  double lr, min_lr, weight_decay, grad_clip, beta1, beta2, momentum;
  int64_t warmup, nesterov;
  /* data parallelism */
  double bucket_mb, first_bucket_mb;
  char comm_progress[16];
  int64_t check_replicas;
  double heartbeat_timeout;
  /* mixed precision */
  char precision[8], loss_scaling[16], grad_reduce_dtype[8];
  double loss_scale_init, loss_scale_growth, loss_scale_backoff, loss_scale_min;
  int64_t loss_scale_window;
  /* run control */
  char device[32];
  char tf32[8];      /* "on" | "off" */
  char recompute[8]; /* "on" | "off" */
  char nvtx[8];      /* "on" | "off" */
  char attention[8]; /* "auto" | "flash" | "matrix" */
  int64_t threads;
  int64_t seed;
  double peak_gflops;
  /* logging, evaluation, export */
  int64_t log_every, eval_every, eval_tokens;
  char metrics[1024], export_path[1024], dump_batches[1024];
  /* checkpoints (see ddptrain/ckpt.h) */
  char save[1024], resume[1024];
  int64_t save_every, keep, stop_at;
  int detect_anomaly;
  /* actions */
  int help, version, build_info, self_test, plan_only, json;
  int64_t world_size;
} ddp_options_t;

/* Fills every field with its declared default. */
ddp_status_t ddp_options_defaults(ddp_options_t *opts);

/* Parses argv[1..argc-1] on top of the defaults. Accepts `--flag value` and
 * `--flag=value`. */
ddp_status_t ddp_options_parse(ddp_options_t *opts, int argc, char **argv);

void ddp_options_print_help(FILE *out);

/* Whether row `index` must have the same value on every rank (all but
 * per-rank outputs and local hardware settings), and a hash of its value
 * in `opts`: the trainer compares these across ranks at start-up. */
int ddp_options_must_agree(int index);
uint64_t ddp_options_value_hash(const ddp_options_t *opts, int index);

/* Row `index`'s value in `opts` as text that parses back to it (numbers
 * with full precision, strings as they are, actions 0/1); 0 on success, -1
 * for a bad index or a value longer than len - 1. */
int ddp_options_format(const ddp_options_t *opts, int index, char *buf, size_t len);

/* Number of table rows, and a row's long name (for tests). */
int ddp_options_count(void);
const char *ddp_options_name(int index);

#ifdef __cplusplus
}
#endif
#endif
