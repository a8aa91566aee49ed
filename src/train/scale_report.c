/* ddptrain --plan-only --scale (see train/scale_report.h): gathers what the
 * scaling model needs from the run's flags, the data and the model, and
 * prints its predictions and recommendation. */
#include "train/scale_report.h"

#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "amp/amp.h"
#include "core/ascii.h"
#include "optim/optim.h"
#include "train/scale_cluster.h"
#include "train/scale_model.h"

#define MAX_WORLD 1024
#define MAX_ROWS 16                                   /* 1 .. 1024, and --world-size */
static const double k_bucket_mbs[] = {1, 5, 25, 100}; /* and --bucket-mb */
#define MAX_SIZES 5

/* Bytes per parameter that the run's optimizer and precision flags imply:
 * the optimizer pass reads weights, gradient and state and writes weights
 * and state (and the half compute copy); memory holds fp32 weights and
 * gradients, the state, and the compute copy. */
static ddp_status_t workload_bytes(const ddp_options_t *o, ddp_scale_workload_t *w) {
  ddp_optim_kind_t kind;
  ddp_precision_t precision, reduce;
  DDP_CHECK(ddp_optim_kind_parse(o->optimizer, &kind));
  DDP_CHECK(ddp_precision_parse(o->precision, &precision));
  DDP_CHECK(ddp_precision_parse(o->grad_reduce_dtype, &reduce));
  const double state = kind == DDP_OPTIM_KIND_SGD ? (o->momentum > 0 ? 4.0 : 0.0) : 8.0;
  const double half = precision == DDP_PRECISION_FP32 ? 0.0 : 2.0;
  w->grad_bytes = reduce == DDP_PRECISION_FP32 ? 4.0 : 2.0;
  w->weight_bytes = precision == DDP_PRECISION_FP32 ? 4.0 : 2.0;
  w->optim_bytes = 4.0 + 4.0 + 2.0 * state + 4.0 + half;
  w->optim_state_bytes = state;
  w->state_bytes = 4.0 + 4.0 + state + half;
  return DDP_OK;
}

/* FLOPs of one rank's step: accum micro-batches of the model's cost with
 * full rows (seq-len tokens; records count as rows of one), an upper
 * bound where the sampler packs shorter rows. */
static ddp_status_t step_flops(const ddp_options_t *o, const ddp_model_ops_t *model,
                               const ddp_train_data_t *d, double *flops) {
  if (!model->cost)
    DDP_FAIL(DDP_ERR_UNSUPPORTED,
             "--scale: model %s has no cost function, so its FLOPs per step are unknown",
             model->name);
  double a, b;
  DDP_CHECK(model->cost(o, &d->shape, &a, &b));
  const int tokens = d->kind == DDP_BATCH_TOKENS;
  const double rows_x_len = tokens ? (double)o->tokens_per_batch : (double)o->batch_size;
  const double len = tokens ? (double)d->shape.seq_len : 1.0;
  *flops = (double)o->accum * rows_x_len * (a + b * len);
  return DDP_OK;
}

/* The table's world sizes: powers of two to 1024, and --world-size. */
static int world_sizes(const ddp_options_t *o, int *n) {
  int k = 0;
  for (int w = 1; w <= MAX_WORLD; w *= 2) n[k++] = w;
  const int ws = (int)o->world_size;
  if (ws > 0 && (ws > MAX_WORLD || (ws & (ws - 1)) != 0)) n[k++] = ws;
  return k;
}

static int bucket_sizes(const ddp_options_t *o, double *mbs) {
  int k = 0;
  int have = 0;
  for (size_t i = 0; i < sizeof k_bucket_mbs / sizeof k_bucket_mbs[0]; ++i) {
    mbs[k++] = k_bucket_mbs[i];
    have |= k_bucket_mbs[i] == o->bucket_mb;
  }
  if (!have) mbs[k++] = o->bucket_mb;
  return k;
}

typedef struct report {
  ddp_scale_cluster_t cluster;
  ddp_scale_workload_t w;
  int n_rows, n_sizes, target;
  int worlds[MAX_ROWS];
  double sizes[MAX_SIZES];
  ddp_scale_point_t rows[MAX_ROWS][2];   /* at --bucket-mb, --zero 0 and 1 */
  ddp_scale_point_t sweep[MAX_SIZES][2]; /* at the target world size */
  ddp_scale_point_t best;
  char why[512];
  double measured_ms; /* --scale-from: forward and backward per step */
  int measured_records;
} report_t;

static ddp_status_t predict_all(const ddp_options_t *o, report_t *r) {
  for (int i = 0; i < r->n_rows; ++i)
    for (int z = 0; z < 2; ++z)
      DDP_CHECK(ddp_scale_predict(&r->cluster, &r->w, r->worlds[i], z, o->bucket_mb,
                                  o->first_bucket_mb, &r->rows[i][z]));
  for (int i = 0; i < r->n_sizes; ++i)
    for (int z = 0; z < 2; ++z)
      DDP_CHECK(ddp_scale_predict(&r->cluster, &r->w, r->target, z, r->sizes[i], o->first_bucket_mb,
                                  &r->sweep[i][z]));
  return ddp_scale_recommend(&r->cluster, &r->w, r->target, r->sizes, r->n_sizes,
                             o->first_bucket_mb, &r->best, r->why, sizeof r->why);
}

static void print_cluster_text(FILE *out, const ddp_scale_cluster_t *c) {
  fprintf(out,
          "cluster: %s: %d GPUs per node, in a node %.0f Gbit/s and %.3g us a step, between "
          "nodes %.0f Gbit/s per node and %.3g us; %.4g TFLOP/s sustained, %.0f GB/s memory, "
          "%.0f GiB\n",
          c->name, c->gpus_per_node, c->intra_gbps, c->intra_latency_us, c->inter_gbps,
          c->inter_latency_us, c->gemm_tflops, c->memory_gbytes_s, c->gpu_memory_gib);
}

static void print_text(FILE *out, const ddp_options_t *o, const report_t *r) {
  const ddp_scale_point_t *one = &r->rows[0][0];
  fprintf(out,
          "scale: model %s, %.2fM parameters in %d tensors, %d buckets at --bucket-mb %g "
          "(first %g), %.4g GFLOP per rank and step (accum %lld)\n",
          o->model, (double)r->w.n_params / 1e6, r->w.n_tensors, one->n_buckets, o->bucket_mb,
          o->first_bucket_mb, r->w.flops_per_step / 1e9, (long long)o->accum);
  print_cluster_text(out, &r->cluster);
  if (o->scale_from[0])
    fprintf(out, "  the FLOP rate is %s's: %.2f ms forward and backward per step (%d record%s)\n",
            o->scale_from, r->measured_ms, r->measured_records,
            r->measured_records == 1 ? "" : "s");
  fprintf(out, "%6s | %-58s | %-26s | %s\n", "", "--zero 0", "--zero 1", "model states GiB");
  fprintf(out, "%6s | %9s %9s %9s %9s %8s %7s | %9s %8s %6s | %7s %7s\n", "GPUs", "step ms",
          "compute", "comm", "exposed", "optim", "eff", "step ms", "gather", "eff", "zero 0",
          "zero 1");
  for (int i = 0; i < r->n_rows; ++i) {
    const ddp_scale_point_t *a = &r->rows[i][0], *b = &r->rows[i][1];
    fprintf(out,
            "%6d | %9.3f %9.3f %9.3f %9.3f %8.3f %6.1f%% | %9.3f %8.3f %5.1f%% | %7.2f %7.2f\n",
            a->n, a->step_ms, a->compute_ms, a->comm_ms, a->exposed_ms, a->optimizer_ms,
            100.0 * a->efficiency, b->step_ms, b->gather_ms, 100.0 * b->efficiency, a->memory_gib,
            b->memory_gib);
  }
  fprintf(out, "bucket sizes at %d GPUs (first bucket %g MiB):\n", r->target, o->first_bucket_mb);
  fprintf(out, "%10s %8s | %9s %9s %6s | %9s %9s %6s\n", "bucket-mb", "buckets", "z0 step",
          "exposed", "eff", "z1 step", "exposed", "eff");
  for (int i = 0; i < r->n_sizes; ++i) {
    const ddp_scale_point_t *a = &r->sweep[i][0], *b = &r->sweep[i][1];
    fprintf(out, "%10g %8d | %9.3f %9.3f %5.1f%% | %9.3f %9.3f %5.1f%%\n", a->bucket_mb,
            a->n_buckets, a->step_ms, a->exposed_ms, 100.0 * a->efficiency, b->step_ms,
            b->exposed_ms, 100.0 * b->efficiency);
  }
  fprintf(out, "recommend --bucket-mb %g --zero %d at %d GPUs (efficiency %.1f%%): %s\n",
          r->best.bucket_mb, r->best.zero, r->target, 100.0 * r->best.efficiency, r->why);
}

static void print_point_json(FILE *out, const ddp_scale_point_t *p) {
  fprintf(out,
          "{\"gpus\": %d, \"zero\": %d, \"bucket_mb\": %g, \"buckets\": %d, \"step_ms\": %.9g, "
          "\"compute_ms\": %.9g, \"comm_ms\": %.9g, \"exposed_ms\": %.9g, \"optimizer_ms\": %.9g, "
          "\"gather_ms\": %.9g, \"efficiency\": %.9g, \"memory_gib\": %.9g}",
          p->n, p->zero, p->bucket_mb, p->n_buckets, p->step_ms, p->compute_ms, p->comm_ms,
          p->exposed_ms, p->optimizer_ms, p->gather_ms, p->efficiency, p->memory_gib);
}

/* A JSON string: the cluster's name comes from the user's file. */
static void print_json_string(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; ++s) {
    const unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(out, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(out, "\\u%04x", ch);
    else
      fputc(ch, out);
  }
  fputc('"', out);
}

/* The reason is our own text: no quotes or backslashes to escape. */
static void print_json(FILE *out, const ddp_options_t *o, const report_t *r) {
  const ddp_scale_cluster_t *c = &r->cluster;
  fprintf(out, "{\"model\": ");
  print_json_string(out, o->model);
  fprintf(out, ", \"cluster\": {\"name\": ");
  print_json_string(out, c->name);
  fprintf(out,
          ", \"gpus_per_node\": %d, "
          "\"intra_gbps\": %g, \"inter_gbps\": %g, \"intra_latency_us\": %g, "
          "\"inter_latency_us\": %g, \"gemm_tflops\": %g, \"memory_gbytes_s\": %g, "
          "\"gpu_memory_gib\": %g}, \"params\": %zu, \"tensors\": %d, \"flops_per_step\": %.6g, "
          "\"accum\": %lld, \"table\": [",
          c->gpus_per_node, c->intra_gbps, c->inter_gbps, c->intra_latency_us, c->inter_latency_us,
          c->gemm_tflops, c->memory_gbytes_s, c->gpu_memory_gib, r->w.n_params, r->w.n_tensors,
          r->w.flops_per_step, (long long)o->accum);
  for (int i = 0; i < r->n_rows; ++i)
    for (int z = 0; z < 2; ++z) {
      if (i || z) fputs(", ", out);
      print_point_json(out, &r->rows[i][z]);
    }
  fputs("], \"buckets\": [", out);
  for (int i = 0; i < r->n_sizes; ++i)
    for (int z = 0; z < 2; ++z) {
      if (i || z) fputs(", ", out);
      print_point_json(out, &r->sweep[i][z]);
    }
  fprintf(
      out,
      "], \"recommend\": {\"bucket_mb\": %g, \"zero\": %d, \"gpus\": %d, \"reason\": \"%s\"}}\n",
      r->best.bucket_mb, r->best.zero, r->target, r->why);
}

ddp_status_t ddp_scale_report(const ddp_options_t *o, const ddp_dist_t *dist,
                              const ddp_model_ops_t *model, const ddp_train_data_t *d, FILE *out) {
  report_t *r = calloc(1, sizeof *r);
  if (!r) DDP_FAIL(DDP_ERR_OOM, "--scale: out of host memory");
  ddp_status_t st = DDP_OK;
  ddp_backend_t *be = NULL;
  ddp_model_t *m = NULL;
  char why[2 * 1024 + 256];
  if (ddp_scale_cluster_load(o->cluster, &r->cluster, why, sizeof why) != DDP_OK)
    DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, out, "--cluster %s: %s", o->cluster, why);
  DDP_CHECK_GOTO(workload_bytes(o, &r->w), st, out);
  DDP_CHECK_GOTO(step_flops(o, model, d, &r->w.flops_per_step), st, out);
  if (o->scale_from[0]) { /* the measured run's rate replaces the cluster's */
    if (ddp_scale_from_metrics(o->scale_from, o, &r->measured_ms, &r->measured_records, why,
                               sizeof why) != DDP_OK)
      DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, out, "--scale-from: %s", why);
    r->cluster.gemm_tflops = r->w.flops_per_step / (r->measured_ms * 1e9);
  }
  /* one thread: the model is only created, never run */
  const ddp_backend_config_t bc = {
      .device = "cpu", .threads = 1, .local_size = 1, .need_model_ops = model->uses_nn_ops};
  DDP_CHECK_GOTO(ddp_backend_create(&bc, &be), st, out);
  const ddp_model_setup_t setup = {
      .be = be, .opts = o, .data = d->shape, .max_batch = ddp_train_batch_budget(o, d)};
  DDP_CHECK_GOTO(ddp_model_create(model, &setup, &m), st, out);
  r->w.tensors = m->tensors;
  r->w.n_tensors = m->n_tensors;
  r->w.n_params = m->n_params;
  r->w.n_buffer_floats = m->n_buffer_floats;
  r->w.accum = (int)o->accum;
  r->n_rows = world_sizes(o, r->worlds);
  r->n_sizes = bucket_sizes(o, r->sizes);
  r->target = o->world_size > 0 ? (int)o->world_size : MAX_WORLD;
  DDP_CHECK_GOTO(predict_all(o, r), st, out);
  if (dist->rank == 0) {
    if (o->json)
      print_json(out, o, r);
    else
      print_text(out, o, r);
    fflush(out);
  }
out:
  ddp_model_destroy(m);
  ddp_backend_destroy(be);
  free(r);
  return st;
}
