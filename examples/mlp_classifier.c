/* Bring your own model: a 2-layer MLP classifier, trained data-parallel by
 * the installed ddptrain library through its model interface.
 *
 * The program defines the model (parameters, CPU forward and backward) and a
 * seeded synthetic data set (points around NC random centres, labelled by
 * the centre they were drawn from); ddptrain supplies the rest: the command
 * line, MPI ranks, bucketed gradient all-reduce overlapped with backward,
 * gradient accumulation, loss scaling, optimizers, checkpoints, metrics and
 * export. Build and run against an installation:
 *   cc mlp_classifier.c $(pkg-config --cflags --libs ddptrain) -lm -o mlp_classifier
 *   mpirun -np 2 ./mlp_classifier --steps 200 --optimizer sgd --lr 0.1 */
#include <ddptrain/ddptrain.h>
#include <ddptrain/main.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ddp_option_def_t k_flags[] = {
    {"mlp-hidden", DDP_OPTION_INT, "64", 1, 65536, "H", "hidden units", NULL, 0},
    {"mlp-features", DDP_OPTION_INT, "16", 1, 65536, "D", "features of the synthetic data", NULL,
     0},
    {"mlp-classes", DDP_OPTION_INT, "4", 2, 1000, "K", "classes of the synthetic data", NULL, 0},
    {"mlp-samples", DDP_OPTION_INT, "8192", 16, 1 << 24, "N", "synthetic training records", NULL,
     0},
};
static const char *const k_ckpt_keys[] = {"mlp-hidden", NULL};

typedef struct mlp {
  int D, H, K;
  float *w2, *b2, *w1, *b1; /* views of the parameters, in backward order */
  float *g2, *gb2, *g1, *gb1;
  float *h, *z, *dh; /* activations for the largest micro-batch */
  double loss_sum;   /* the loss accumulator: host memory on the CPU */
  ddp_param_t table[4];
} mlp_t;

static int64_t flag(const ddp_options_t *o, const char *name) {
  int64_t v = 0;
  ddp_options_get_int(o, name, &v); /* our own flags: always there */
  return v;
}

/* The data: one seed for the centres, a split-specific stream for the points. */
static ddp_status_t load_records(const ddp_options_t *o, int split, ddp_records_t *out, int *have) {
  const int64_t D = flag(o, "mlp-features"), K = flag(o, "mlp-classes");
  const int64_t n = split == DDP_SPLIT_TRAIN ? flag(o, "mlp-samples") : 2048;
  float *x = malloc(sizeof(float) * (size_t)(n * D + K * D));
  int32_t *y = malloc(sizeof(int32_t) * (size_t)n);
  if (!x || !y) return DDP_ERR_OOM;
  float *centres = x + n * D;
  ddp_rng_t rng, pts;
  ddp_rng_init(&rng, (uint64_t)o->seed, 7);
  ddp_rng_fill_normal(&rng, 0, 0.0f, 0.6f, centres, (size_t)(K * D));
  ddp_rng_derive(&rng, 1 + (uint64_t)split, &pts);
  ddp_rng_fill_normal(&pts, 0, 0.0f, 1.0f, x, (size_t)(n * D));
  for (int64_t i = 0; i < n; ++i) {
    y[i] = (int32_t)ddp_rng_below(&pts, (uint64_t)(n * D + i), (uint64_t)K);
    for (int64_t d = 0; d < D; ++d) x[i * D + d] += centres[y[i] * D + d];
  }
  const ddp_status_t st = ddp_records_from_arrays(out, x, y, n, 1, &D, (int32_t)K, "synthetic");
  free(x);
  free(y);
  *have = 1;
  return st;
}

static ddp_status_t cost(const ddp_options_t *o, const ddp_data_shape_t *d, double *a, double *b) {
  const double H = (double)flag(o, "mlp-hidden");
  *a = 6.0 * (H * (double)d->record_floats + (double)d->n_classes * H); /* 6 FLOPs a weight */
  *b = 0.0;
  return DDP_OK;
}

static ddp_status_t create(ddp_model_t *m, const ddp_model_setup_t *s) {
  mlp_t *p = calloc(1, sizeof *p);
  if (!p) return DDP_ERR_OOM;
  m->impl = p;
  p->D = (int)s->data.record_floats, p->H = (int)flag(s->opts, "mlp-hidden");
  p->K = s->data.n_classes;
  const int64_t shapes[4][2] = {{p->K, p->H}, {p->K, 1}, {p->H, p->D}, {p->H, 1}};
  const char *names[4] = {"fc2.weight", "fc2.bias", "fc1.weight", "fc1.bias"};
  size_t n = 0;
  for (int i = 0; i < 4; ++i) { /* fc2 first: backward finishes it first */
    DDP_CHECK(ddp_param_set(&p->table[i], names[i], i % 2 ? 1 : 2, shapes[i], n, i % 2 == 0));
    n += p->table[i].count;
  }
  const size_t B = (size_t)s->max_batch, acts = B * (size_t)(2 * p->H + p->K);
  DDP_CHECK(ddp_backend_alloc(m->be, n * sizeof(float), (void **)&m->params));
  DDP_CHECK(ddp_backend_alloc(m->be, n * sizeof(float), (void **)&m->grads));
  DDP_CHECK(ddp_backend_alloc(m->be, acts * sizeof(float), (void **)&p->h));
  p->z = p->h + B * (size_t)p->H, p->dh = p->z + B * (size_t)p->K;
  float **views[8] = {&p->w2, &p->b2, &p->w1, &p->b1, &p->g2, &p->gb2, &p->g1, &p->gb1};
  for (int i = 0; i < 8; ++i) *views[i] = (i < 4 ? m->params : m->grads) + p->table[i % 4].offset;
  m->tensors = p->table, m->n_tensors = 4, m->n_params = n, m->n_outputs = p->K;
  return DDP_OK;
}

static void destroy(ddp_model_t *m) {
  mlp_t *p = m->impl;
  if (!p) return;
  ddp_backend_free(m->be, m->params);
  ddp_backend_free(m->be, m->grads);
  ddp_backend_free(m->be, p->h);
  free(p);
}

/* PyTorch's nn.Linear initialisation: uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)). */
static ddp_status_t init_weights(ddp_model_t *m, uint64_t seed) {
  ddp_rng_t rng;
  ddp_rng_init(&rng, seed, 11);
  ddp_rng_fill_uniform(&rng, 0, m->params, m->n_params);
  for (int i = 0; i < m->n_tensors; ++i) {
    const ddp_param_t *t = &m->tensors[i];
    const float bound = 1.0f / sqrtf((float)m->tensors[i < 2 ? 0 : 2].shape[1]);
    for (size_t k = 0; k < t->count; ++k)
      m->params[t->offset + k] = (2.0f * m->params[t->offset + k] - 1.0f) * bound;
  }
  return DDP_OK;
}

/* h = relu(x W1^T + b1), z = h W2^T + b2; returns the summed cross-entropy
 * and, with dz, writes dz = dloss * (softmax(z) - onehot(y)) over z. */
static double forward(mlp_t *p, const ddp_record_batch_t *b, float dloss, int with_grad) {
  double loss = 0.0;
  for (int r = 0; r < b->B; ++r) {
    const float *x = b->inputs + (size_t)r * p->D;
    float *h = p->h + (size_t)r * p->H, *z = p->z + (size_t)r * p->K;
    for (int j = 0; j < p->H; ++j) {
      float a = p->b1[j];
      for (int d = 0; d < p->D; ++d) a += p->w1[j * p->D + d] * x[d];
      h[j] = a > 0.0f ? a : 0.0f;
    }
    float top = -INFINITY;
    for (int k = 0; k < p->K; ++k) {
      float a = p->b2[k];
      for (int j = 0; j < p->H; ++j) a += p->w2[k * p->H + j] * h[j];
      z[k] = a;
      top = a > top ? a : top;
    }
    double sum = 0.0;
    for (int k = 0; k < p->K; ++k) sum += exp((double)(z[k] - top));
    loss += log(sum) - (double)(z[b->labels[r]] - top);
    for (int k = 0; with_grad && k < p->K; ++k)
      z[k] = dloss * (float)(exp((double)(z[k] - top)) / sum - (k == b->labels[r]));
  }
  return loss;
}

/* The first micro-step writes a gradient, later ones add to it. */
static void put(float *g, float v, int acc) {
  *g = acc ? *g + v : v;
}

static ddp_status_t forward_backward(ddp_model_t *m, const void *batch, float dloss, int acc,
                                     int notify) {
  mlp_t *p = m->impl;
  const ddp_record_batch_t *b = batch;
  const int B = b->B, D = p->D, H = p->H, K = p->K;
  p->loss_sum += forward(p, b, dloss, 1); /* p->z now holds dz */
  for (int k = 0; k < K; ++k) {
    float sb = 0.0f;
    for (int r = 0; r < B; ++r) sb += p->z[r * K + k];
    put(&p->gb2[k], sb, acc);
    for (int j = 0; j < H; ++j) {
      float s = 0.0f;
      for (int r = 0; r < B; ++r) s += p->z[r * K + k] * p->h[r * H + j];
      put(&p->g2[k * H + j], s, acc);
    }
  }
  if (notify) { /* fc2 is final: its bucket can be reduced while fc1's backward runs */
    ddp_model_grad_ready(m, 0);
    ddp_model_grad_ready(m, 1);
  }
  for (int r = 0; r < B; ++r)
    for (int j = 0; j < H; ++j) {
      float d = 0.0f;
      for (int k = 0; k < K && p->h[r * H + j] > 0.0f; ++k) d += p->z[r * K + k] * p->w2[k * H + j];
      p->dh[r * H + j] = d;
    }
  for (int j = 0; j < H; ++j) {
    float sb = 0.0f;
    for (int r = 0; r < B; ++r) sb += p->dh[r * H + j];
    put(&p->gb1[j], sb, acc);
    for (int e = 0; e < D; ++e) {
      float s = 0.0f;
      for (int r = 0; r < B; ++r) s += p->dh[r * H + j] * b->inputs[(size_t)r * D + e];
      put(&p->g1[j * D + e], s, acc);
    }
  }
  if (notify) {
    ddp_model_grad_ready(m, 2);
    ddp_model_grad_ready(m, 3);
  }
  return ddp_model_watch(m, "backward: gradient of fc1.weight", p->g1, DDP_DTYPE_F32,
                         m->tensors[2].count);
}

static ddp_status_t eval_forward(ddp_model_t *m, const void *batch) {
  mlp_t *p = m->impl;
  p->loss_sum += forward(p, batch, 0.0f, 0);
  return DDP_OK;
}

static ddp_status_t take_loss(ddp_model_t *m, double *loss_sum) {
  mlp_t *p = m->impl;
  *loss_sum = p->loss_sum;
  p->loss_sum = 0.0;
  return DDP_OK;
}

static ddp_status_t copy_outputs(ddp_model_t *m, float *host, int64_t rows) {
  mlp_t *p = m->impl;
  memcpy(host, p->z, (size_t)rows * (size_t)p->K * sizeof *host);
  return DDP_OK;
}

static void describe(const ddp_model_t *m, char *buf, size_t len) {
  const mlp_t *p = m->impl;
  snprintf(buf, len, "MLP %d-%d-%d (ReLU), %zu parameters", p->D, p->H, p->K, m->n_params);
}

static const ddp_model_ops_t k_mlp = {
    .name = "mlp",
    .summary = "a 2-layer MLP classifier on seeded synthetic clusters (examples/mlp_classifier.c)",
    .batch_kind = DDP_BATCH_RECORDS,
    .devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU),
    .options = k_flags,
    .n_options = (int)(sizeof k_flags / sizeof k_flags[0]),
    .ckpt_keys = k_ckpt_keys,
    .cost = cost,
    .load_records = load_records,
    .create = create,
    .destroy = destroy,
    .init_weights = init_weights,
    .forward_backward = forward_backward,
    .eval_forward = eval_forward,
    .take_loss = take_loss,
    .copy_outputs = copy_outputs,
    .describe = describe,
};

int main(int argc, char **argv) {
  if (ddp_model_register(&k_mlp) != DDP_OK) return 1;
  const ddp_main_config_t cfg = {.program = "mlp_classifier", .default_model = "mlp"};
  return ddp_main(argc, argv, &cfg);
}
