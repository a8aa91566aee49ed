/* A test-only model with buffers (docs/design.md §3.9), trained by
 * ddp_main like a user's model: a linear classifier on centred inputs,
 * BatchNorm-style. Training centres a batch on its own feature mean;
 * evaluation centres on the running mean. Its buffers, in table order:
 *   norm.running_mean [D]      MEAN   running mean of the batches' features
 *   norm.running_var [D]       MEAN   running (biased) variance
 *   norm.num_batches_tracked   COUNT  micro-batches seen
 *   out.running_mean [K]       MEAN   running mean of the logits
 *   extra.running_mean [E]     MEAN   only with --bufnet-extra E > 0
 * Each rank updates them from its own batches, so without the runtime's
 * averaging the ranks' MEAN buffers differ. Each training pass also sums
 * the batch's feature sums and row count over the ranks with
 * ddp_model_allreduce and checks the row count against the step's target
 * count (1 / dloss with --accum 1 in fp32): a hook that does not sum fails
 * the run. --bufnet-dump DIR writes the buffers after every pass to
 * DIR/buffers.<pid>.bin (the ranks' values before any averaging);
 * --bufnet-bad-table 1|2 declares a defective table (a gap, an unknown
 * kind) for the runtime to refuse; --bufnet-skew 1|2 makes rank 1 (as the
 * launcher numbers it) advance its counter by 2, or declare
 * norm.running_var a COUNT buffer, for the runtime to notice. tests/test_buffers.sh drives it. */
#include <ddptrain/ddptrain.h>
#include <ddptrain/main.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const ddp_option_def_t k_flags[] = {
    {"bufnet-features", DDP_OPTION_INT, "8", 1, 4096, "D", "features", NULL, 0},
    {"bufnet-classes", DDP_OPTION_INT, "3", 2, 100, "K", "classes", NULL, 0},
    {"bufnet-extra", DDP_OPTION_INT, "0", 0, 64, "E", "floats of an extra MEAN buffer", NULL, 0},
    {"bufnet-bad-table", DDP_OPTION_INT, "0", 0, 2, "N", "1: a gap, 2: an unknown kind", NULL, 0},
    {"bufnet-dump", DDP_OPTION_STRING, "", 0, 0, "DIR", "write the buffers after each pass", NULL,
     0},
    {"bufnet-skew", DDP_OPTION_INT, "0", 0, 2, "N",
     "rank 1 differs: 1: counts each pass twice, 2: declares a MEAN buffer COUNT", NULL, 0},
};

enum { MOMENTUM_PCT = 10, N_BUF_MAX = 5 };

typedef struct bufnet {
  int D, K, accum;
  float count_step;       /* what a pass adds to num_batches_tracked */
  float *w, *b, *gw, *gb; /* w [K, D], b [K] */
  float *rmean, *rvar, *count, *omean;
  float *xc, *z, *sums; /* activations for the largest batch; sums: D + 1 */
  double loss_sum;
  const char *dump;
  ddp_param_t table[2];
  ddp_buffer_t buffers[N_BUF_MAX];
} bufnet_t;

static int64_t flag(const ddp_options_t *o, const char *name) {
  int64_t v = 0;
  ddp_options_get_int(o, name, &v);
  return v;
}

static ddp_status_t load_records(const ddp_options_t *o, int split, ddp_records_t *out, int *have) {
  const int64_t D = flag(o, "bufnet-features"), K = flag(o, "bufnet-classes");
  const int64_t n = split == DDP_SPLIT_TRAIN ? 512 : 128;
  float *x = malloc(sizeof(float) * (size_t)(n * D));
  int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
  if (!x || !y) return DDP_ERR_OOM;
  ddp_rng_t rng;
  ddp_rng_init(&rng, (uint64_t)o->seed, 31 + (uint64_t)split);
  ddp_rng_fill_normal(&rng, 0, 0.5f, 1.0f, x, (size_t)(n * D));
  for (int64_t i = 0; i < n; ++i) { /* the label shifts the first features */
    y[i] = (int32_t)ddp_rng_below(&rng, (uint64_t)(n * D + i), (uint64_t)K);
    x[i * D + y[i] % D] += 2.0f;
  }
  const ddp_status_t st = ddp_records_from_arrays(out, x, y, n, 1, &D, (int32_t)K, "bufnet");
  free(x);
  free(y);
  *have = 1;
  return st;
}

static ddp_status_t create(ddp_model_t *m, const ddp_model_setup_t *s) {
  bufnet_t *p = calloc(1, sizeof *p);
  if (!p) return DDP_ERR_OOM;
  m->impl = p;
  p->D = (int)s->data.record_floats, p->K = s->data.n_classes, p->accum = (int)s->opts->accum;
  ddp_options_get_string(s->opts, "bufnet-dump", &p->dump);
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = getenv("PMI_RANK");
  const int64_t skew = rank && atoi(rank) == 1 ? flag(s->opts, "bufnet-skew") : 0;
  p->count_step = skew == 1 ? 2.0f : 1.0f;
  const int64_t E = flag(s->opts, "bufnet-extra"), bad = flag(s->opts, "bufnet-bad-table");
  const int64_t ws[2] = {p->K, p->D}, bs[1] = {p->K};
  DDP_CHECK(ddp_param_set(&p->table[0], "fc.weight", 2, ws, 0, 1));
  DDP_CHECK(ddp_param_set(&p->table[1], "fc.bias", 1, bs, p->table[0].count, 0));
  const size_t n = p->table[0].count + p->table[1].count;
  const char *names[N_BUF_MAX] = {"norm.running_mean", "norm.running_var",
                                  "norm.num_batches_tracked", "out.running_mean",
                                  "extra.running_mean"};
  const int64_t sizes[N_BUF_MAX] = {p->D, p->D, 1, p->K, E};
  size_t nb = 0;
  int k = 0;
  for (; k < N_BUF_MAX && sizes[k] > 0; ++k) {
    const size_t at = nb + (bad == 1 && k == 3); /* 1: a gap before out.running_mean */
    DDP_CHECK(ddp_param_set(&p->buffers[k].t, names[k], 1, &sizes[k], at, 0));
    p->buffers[k].kind = k == 2 ? DDP_BUFFER_COUNT : DDP_BUFFER_MEAN;
    nb = at + (size_t)sizes[k];
  }
  if (bad == 2) p->buffers[1].kind = (ddp_buffer_kind_t)7;
  if (skew == 2) p->buffers[1].kind = DDP_BUFFER_COUNT;
  const size_t B = (size_t)s->max_batch;
  DDP_CHECK(ddp_backend_alloc(m->be, 2 * n * sizeof(float), (void **)&m->params));
  DDP_CHECK(ddp_backend_alloc(m->be, nb * sizeof(float), (void **)&m->buffers));
  DDP_CHECK(ddp_backend_alloc(m->be, (B * (size_t)(p->D + p->K) + (size_t)p->D + 1) * sizeof(float),
                              (void **)&p->xc));
  m->grads = m->params + n;
  p->z = p->xc + B * (size_t)p->D, p->sums = p->z + B * (size_t)p->K;
  p->w = m->params, p->b = p->w + p->table[1].offset;
  p->gw = m->grads, p->gb = p->gw + p->table[1].offset;
  p->rmean = m->buffers, p->rvar = p->rmean + p->D, p->count = p->rvar + p->D;
  p->omean = m->buffers + p->buffers[3].t.offset;
  m->tensors = p->table, m->n_tensors = 2, m->n_params = n, m->n_outputs = p->K;
  m->buffer_tensors = p->buffers, m->n_buffer_tensors = k, m->n_buffer_floats = nb;
  return DDP_OK;
}

static void destroy(ddp_model_t *m) {
  bufnet_t *p = m->impl;
  if (!p) return;
  ddp_backend_free(m->be, m->params);
  ddp_backend_free(m->be, m->buffers);
  ddp_backend_free(m->be, p->xc);
  free(p);
}

/* Weights from the seed; the running variance starts at 1, as PyTorch's. */
static ddp_status_t init_weights(ddp_model_t *m, uint64_t seed) {
  bufnet_t *p = m->impl;
  ddp_rng_t rng;
  ddp_rng_init(&rng, seed, 5);
  ddp_rng_fill_normal(&rng, 0, 0.0f, 0.1f, m->params, m->n_params);
  memset(m->buffers, 0, m->n_buffer_floats * sizeof(float));
  for (int d = 0; d < p->D; ++d) p->rvar[d] = 1.0f;
  return DDP_OK;
}

/* z = W (x - centre) + b per row; returns the summed cross-entropy and,
 * with grad, leaves dz = dloss * (softmax(z) - onehot(y)) in p->z. */
static double forward(bufnet_t *p, const ddp_record_batch_t *r, const float *centre, float dloss,
                      int grad) {
  double loss = 0.0;
  for (int i = 0; i < r->B; ++i) {
    float *xc = p->xc + (size_t)i * p->D, *z = p->z + (size_t)i * p->K, top = -INFINITY;
    for (int d = 0; d < p->D; ++d) xc[d] = r->inputs[(size_t)i * p->D + d] - centre[d];
    for (int k = 0; k < p->K; ++k) {
      float a = p->b[k];
      for (int d = 0; d < p->D; ++d) a += p->w[k * p->D + d] * xc[d];
      z[k] = a, top = a > top ? a : top;
    }
    double sum = 0.0;
    for (int k = 0; k < p->K; ++k) sum += exp((double)(z[k] - top));
    loss += log(sum) - (double)(z[r->labels[i]] - top);
    for (int k = 0; grad && k < p->K; ++k)
      z[k] = dloss * (float)(exp((double)(z[k] - top)) / sum - (k == r->labels[i]));
  }
  return loss;
}

static void ema(float *run, float now) {
  *run = (1.0f - MOMENTUM_PCT / 100.0f) * *run + (MOMENTUM_PCT / 100.0f) * now;
}

static ddp_status_t dump(const ddp_model_t *m, const bufnet_t *p) {
  char path[1200];
  snprintf(path, sizeof path, "%s/buffers.%ld.bin", p->dump, (long)getpid());
  FILE *f = fopen(path, "wb");
  const int ok =
      f && fwrite(m->buffers, sizeof(float), m->n_buffer_floats, f) == m->n_buffer_floats;
  if (f && fclose(f) != 0) return DDP_ERR_IO;
  return ok ? DDP_OK : DDP_ERR_IO;
}

static ddp_status_t forward_backward(ddp_model_t *m, const void *batch, float dloss, int acc,
                                     int notify) {
  bufnet_t *p = m->impl;
  const ddp_record_batch_t *r = batch;
  const int B = r->B, D = p->D, K = p->K;
  /* the batch's feature sums and rows, summed over the ranks */
  memset(p->sums, 0, (size_t)(D + 1) * sizeof(float));
  for (int i = 0; i < B; ++i)
    for (int d = 0; d < D; ++d) p->sums[d] += r->inputs[(size_t)i * D + d];
  p->sums[D] = (float)B;
  float mean[4096], var[4096];
  for (int d = 0; d < D; ++d) mean[d] = p->sums[d] / (float)B, var[d] = 0.0f;
  DDP_CHECK(ddp_model_allreduce(m, p->sums, (size_t)D + 1));
  const double targets = 1.0 / (double)dloss;
  if (p->accum == 1 && fabs((double)p->sums[D] - targets) > 0.5) {
    fprintf(stderr,
            "bufnet: the ranks' rows sum to %g, the step has %.0f targets: "
            "ddp_model_allreduce did not sum over the ranks\n",
            (double)p->sums[D], targets);
    return DDP_ERR_MISMATCH;
  }
  p->loss_sum += forward(p, r, mean, dloss, 1);
  float zmean[100] = {0};
  for (int i = 0; i < B; ++i) {
    for (int d = 0; d < D; ++d) var[d] += p->xc[(size_t)i * D + d] * p->xc[(size_t)i * D + d];
    for (int k = 0; k < K; ++k) {
      const float dz = p->z[(size_t)i * K + k];
      p->gb[k] = (acc || i ? p->gb[k] : 0.0f) + dz;
      for (int d = 0; d < D; ++d)
        p->gw[k * D + d] = (acc || i ? p->gw[k * D + d] : 0.0f) + dz * p->xc[(size_t)i * D + d];
    }
  }
  if (notify) {
    ddp_model_grad_ready(m, 0);
    ddp_model_grad_ready(m, 1);
  }
  /* the buffers: this rank's batch statistics (the logits' mean from an
   * evaluation pass over the batch) */
  for (int d = 0; d < D; ++d) ema(&p->rmean[d], mean[d]), ema(&p->rvar[d], var[d] / (float)B);
  forward(p, r, mean, 0.0f, 0);
  for (int i = 0; i < B; ++i)
    for (int k = 0; k < K; ++k) zmean[k] += p->z[(size_t)i * K + k] / (float)B;
  for (int k = 0; k < K; ++k) ema(&p->omean[k], zmean[k]);
  *p->count += p->count_step;
  return p->dump[0] ? dump(m, p) : DDP_OK;
}

static ddp_status_t eval_forward(ddp_model_t *m, const void *batch) {
  bufnet_t *p = m->impl;
  p->loss_sum += forward(p, batch, p->rmean, 0.0f, 0);
  return DDP_OK;
}

static ddp_status_t take_loss(ddp_model_t *m, double *loss_sum) {
  bufnet_t *p = m->impl;
  *loss_sum = p->loss_sum;
  p->loss_sum = 0.0;
  return DDP_OK;
}

static ddp_status_t copy_outputs(ddp_model_t *m, float *host, int64_t rows) {
  bufnet_t *p = m->impl;
  memcpy(host, p->z, (size_t)rows * (size_t)p->K * sizeof *host);
  return DDP_OK;
}

static const ddp_model_ops_t k_bufnet = {
    .name = "bufnet",
    .summary = "a linear classifier with BatchNorm-style buffers (tests/buffer_model.c)",
    .batch_kind = DDP_BATCH_RECORDS,
    .devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU),
    .options = k_flags,
    .n_options = (int)(sizeof k_flags / sizeof k_flags[0]),
    .load_records = load_records,
    .create = create,
    .destroy = destroy,
    .init_weights = init_weights,
    .forward_backward = forward_backward,
    .eval_forward = eval_forward,
    .take_loss = take_loss,
    .copy_outputs = copy_outputs,
};

int main(int argc, char **argv) {
  if (ddp_model_register(&k_bufnet) != DDP_OK) return 1;
  const ddp_main_config_t cfg = {.program = "buffer_model", .default_model = "bufnet"};
  return ddp_main(argc, argv, &cfg);
}
