/* The model registry and what the runtime does with any model (see
 * ddptrain/model.h): creation with the contract checked, the compute copy,
 * host copies of the weights, and the generic export and description. */
#include "ddptrain/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/safetensors.h"
#include "ddptrain/version.h"
#include "core/ascii.h"
#include "model/builtin.h"
#include "model/model_buffers.h"

/* ---- the registry ------------------------------------------------------------ */

enum { MAX_MODELS = 32 };

const ddp_model_ops_t *const *ddp_builtin_models(void) {
  static const ddp_model_ops_t *const k_models[] = {&ddp_gpt_model_ops, &ddp_resnet_model_ops, NULL};
  return k_models;
}

static const ddp_model_ops_t *g_models[MAX_MODELS];
static int g_n_models = -1; /* -1: the built-in models are not in yet */

/* The built-in models come first, so their flags keep their rows. */
static void ensure_builtins(void) {
  if (g_n_models >= 0) return;
  g_n_models = 0;
  const ddp_model_ops_t *const *b = ddp_builtin_models();
  for (int i = 0; b[i]; ++i)
    if (ddp_model_register(b[i]) != DDP_OK) /* a defect of ours: say so loudly */
      DDP_LOG_ERROR("the built-in model '%s' does not register (see above)", b[i]->name);
}

int ddp_model_count(void) {
  ensure_builtins();
  return g_n_models;
}

const ddp_model_ops_t *ddp_model_at(int index) {
  ensure_builtins();
  return index >= 0 && index < g_n_models ? g_models[index] : NULL;
}

const ddp_model_ops_t *ddp_model_find(const char *name) {
  ensure_builtins();
  for (int i = 0; name && i < g_n_models; ++i)
    if (ddp_ascii_ieq(g_models[i]->name, name)) return g_models[i];
  return NULL;
}

static int valid_name(const char *name, size_t max) {
  if (!name || !name[0] || strlen(name) >= max) return 0;
  for (const char *c = name; *c; ++c)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_')) return 0;
  return 1;
}

/* A flag name any row of the whole table (core or a model's) already has. */
static int flag_taken(const char *name) {
  for (int i = 0; i < ddp_options_count(); ++i)
    if (strcmp(ddp_options_name(i), name) == 0) return 1;
  return 0;
}

/* A flag of this model, or one of the runtime's (not another model's). */
static int own_or_core_flag(const ddp_model_ops_t *ops, const char *name) {
  for (int i = 0; i < ops->n_options; ++i)
    if (strcmp(ops->options[i].name, name) == 0) return 1;
  if (!flag_taken(name)) return 0;
  for (int m = 0; m < g_n_models; ++m)
    for (int i = 0; i < g_models[m]->n_options; ++i)
      if (strcmp(g_models[m]->options[i].name, name) == 0) return 0;
  return 1;
}

static ddp_status_t check_ops(const ddp_model_ops_t *ops) {
  if (!ops) DDP_FAIL(DDP_ERR_INVALID_ARG, "model_register: NULL model");
  const char *name = ops->name ? ops->name : "(unnamed)";
  if (!valid_name(ops->name, sizeof(((ddp_options_t *)0)->model)))
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "model '%s': a model name is 1 to %zu characters of a-z, 0-9, '-' and '_'", name,
             sizeof(((ddp_options_t *)0)->model) - 1);
  if (!ops->summary) DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s: no summary for --help", name);
  if (ops->batch_kind != DDP_BATCH_TOKENS && ops->batch_kind != DDP_BATCH_RECORDS)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s: unknown batch kind %d", name, (int)ops->batch_kind);
  const unsigned known = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU) | DDP_MODEL_ON(DDP_DEVICE_KIND_CUDA);
  if (!ops->devices || (ops->devices & ~known))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s: devices 0x%x name no known backend", name,
             ops->devices);
  const struct {
    const void *fn;
    const char *slot;
  } required[] = {{(const void *)ops->create, "create"},
                  {(const void *)ops->destroy, "destroy"},
                  {(const void *)ops->init_weights, "init_weights"},
                  {(const void *)ops->forward_backward, "forward_backward"},
                  {(const void *)ops->take_loss, "take_loss"}};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; ++i)
    if (!required[i].fn)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s: the required operation %s is missing", name,
               required[i].slot);
  if (ops->load_records && ops->batch_kind != DDP_BATCH_RECORDS)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s: load_records is for record models only", name);
  if (ops->n_options < 0 || (ops->n_options > 0 && !ops->options))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s: %d flags but no table", name, ops->n_options);
  int used = 0; /* the models' flag slots taken so far */
  for (int m = 0; m < g_n_models; ++m) used += g_models[m]->n_options;
  if (used + ops->n_options > DDP_MODEL_OPTION_SLOTS)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "model %s: %d flags do not fit (the models' flags share %d slots, %d in use)", name,
             ops->n_options, DDP_MODEL_OPTION_SLOTS, used);
  for (int i = 0; i < ops->n_options; ++i) {
    const ddp_option_def_t *d = &ops->options[i];
    if (!valid_name(d->name, 40) || !d->help || !d->def)
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "model %s: flag %d needs a name (a-z, 0-9, '-'), help and a default", name, i);
    if (d->type != DDP_OPTION_INT && d->type != DDP_OPTION_FLOAT && d->type != DDP_OPTION_STRING)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s: flag --%s has an unknown type", name, d->name);
    if (flag_taken(d->name))
      DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s: flag --%s exists already", name, d->name);
    for (int j = 0; j < i; ++j)
      if (strcmp(ops->options[j].name, d->name) == 0)
        DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s: flag --%s is declared twice", name, d->name);
  }
  return DDP_OK;
}

ddp_status_t ddp_model_register(const ddp_model_ops_t *ops) {
  ensure_builtins();
  if (ops && ops->name && ddp_model_find(ops->name))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s is registered already", ops->name);
  DDP_CHECK(check_ops(ops));
  if (g_n_models == MAX_MODELS)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s: the registry holds %d models at most", ops->name,
             MAX_MODELS);
  g_models[g_n_models++] = ops;
  /* Defaults parse like user input: a default its own row rejects is a
   * defect of the model, reported now rather than at the first run. */
  ddp_options_t *probe = malloc(sizeof *probe);
  ddp_status_t st = probe ? ddp_options_defaults(probe) : DDP_ERR_OOM;
  free(probe);
  if (st == DDP_OK) {
    for (const char *const *k = ops->ckpt_keys; k && *k; ++k)
      if (!own_or_core_flag(ops, *k)) {
        DDP_LOG_ERROR("model %s: checkpoint key --%s is neither its own flag nor a ddptrain flag",
                      ops->name, *k);
        st = DDP_ERR_INVALID_ARG;
      }
  }
  if (st != DDP_OK) {
    g_models[--g_n_models] = NULL;
    DDP_FAIL(st == DDP_ERR_OOM ? st : DDP_ERR_INVALID_ARG,
             "model %s: not registered (a flag's default or checkpoint key is invalid, see above)",
             ops->name);
  }
  return DDP_OK;
}

/* ---- instances ---------------------------------------------------------------- */

void ddp_model_destroy(ddp_model_t *m) {
  if (!m) return;
  m->ops->destroy(m);
  free(m);
}

/* The buffer table of a model that declares buffers: set, tiling [0,
 * n_buffer_floats) like the parameter table, kinds known. One logged line
 * naming the model on a defect. */
static ddp_status_t check_buffers(const ddp_model_t *m) {
  const char *name = m->ops->name;
  if (!m->buffer_tensors && !m->n_buffer_tensors && !m->n_buffer_floats && !m->buffers)
    return DDP_OK; /* none */
  if (!m->buffer_tensors || m->n_buffer_tensors < 1 || !m->n_buffer_floats || !m->buffers)
    DDP_FAIL(DDP_ERR_INTERNAL,
             "model %s: create declared buffers but left their table, count or memory unset "
             "(%d entries, %zu floats, buffers %s)",
             name, m->n_buffer_tensors, m->n_buffer_floats, m->buffers ? "set" : "NULL");
  ddp_param_t *t = malloc((size_t)m->n_buffer_tensors * sizeof *t);
  if (!t) DDP_FAIL(DDP_ERR_OOM, "model %s: out of host memory", name);
  for (int i = 0; i < m->n_buffer_tensors; ++i) t[i] = m->buffer_tensors[i].t;
  char who[96];
  snprintf(who, sizeof who, "model %s, buffer table", name);
  ddp_status_t st = ddp_param_table_check(t, m->n_buffer_tensors, m->n_buffer_floats, who);
  free(t);
  if (st != DDP_OK) return st;
  for (int i = 0; i < m->n_buffer_tensors; ++i) {
    const ddp_buffer_kind_t k = m->buffer_tensors[i].kind;
    if (k != DDP_BUFFER_MEAN && k != DDP_BUFFER_COUNT)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s: buffer %s has an unknown kind %d", name,
               m->buffer_tensors[i].t.name, (int)k);
  }
  return DDP_OK;
}

ddp_status_t ddp_model_create(const ddp_model_ops_t *ops, const ddp_model_setup_t *setup,
                              ddp_model_t **out) {
  if (!ops || !setup || !setup->be || !setup->opts || !out)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "model_create: NULL argument");
  *out = NULL;
  if (!(ops->devices & DDP_MODEL_ON(setup->be->ops->kind)))
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "model %s does not run on the %s backend", ops->name,
             setup->be->ops->name);
  if (setup->data.kind != ops->batch_kind)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "model %s trains on %s, the data are %s", ops->name,
             ddp_batch_kind_name(ops->batch_kind), ddp_batch_kind_name(setup->data.kind));
  ddp_model_t *m = calloc(1, sizeof *m);
  if (!m) DDP_FAIL(DDP_ERR_OOM, "model %s: out of host memory", ops->name);
  *m = (ddp_model_t){.ops = ops, .be = setup->be, .opts = setup->opts, .precision = DDP_DTYPE_F32};
  ddp_status_t st = ops->create(m, setup);
  if (st == DDP_OK && (!m->params || !m->grads || !m->n_params))
    DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, fail, "model %s: create left no parameter buffers",
                  ops->name);
  if (st == DDP_OK) st = ddp_param_table_check(m->tensors, m->n_tensors, m->n_params, ops->name);
  if (st == DDP_OK) st = check_buffers(m);
  if (st != DDP_OK) goto fail;
  *out = m;
  return DDP_OK;
fail:
  ddp_model_destroy(m);
  return st;
}

ddp_status_t ddp_model_refresh_compute(ddp_model_t *m) {
  if (!m->compute_params) return DDP_OK;
  return m->be->ops->convert(m->be, m->compute_params, m->precision, m->params, DDP_DTYPE_F32,
                             m->n_params, NULL);
}

ddp_status_t ddp_model_params_to_host(ddp_model_t *m, float *host) {
  DDP_CHECK(ddp_backend_copy(m->be, host, m->params, m->n_params * sizeof(float),
                             DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  return ddp_backend_sync(m->be, NULL);
}

ddp_status_t ddp_model_params_from_host(ddp_model_t *m, const float *host) {
  DDP_CHECK(ddp_backend_copy(m->be, m->params, host, m->n_params * sizeof(float),
                             DDP_COPY_KIND_HOST_TO_DEVICE, NULL));
  DDP_CHECK(ddp_model_refresh_compute(m));
  return ddp_backend_sync(m->be, NULL);
}

/* ---- buffers in an export (model/model_buffers.h) ------------------------------ */

void ddp_model_buffer_export_free(ddp_model_buffer_export_t *bx) {
  free(bx->tensors);
  free(bx->values);
  free(bx->counts);
  *bx = (ddp_model_buffer_export_t){0};
}

ddp_status_t ddp_model_buffer_export_prepare(ddp_model_t *m, ddp_model_buffer_export_t *bx) {
  *bx = (ddp_model_buffer_export_t){0};
  const int n = m->n_buffer_tensors;
  if (n == 0) return DDP_OK;
  ddp_status_t st = DDP_OK;
  bx->tensors = calloc((size_t)n, sizeof *bx->tensors);
  bx->values = malloc(m->n_buffer_floats * sizeof *bx->values);
  bx->counts = malloc(m->n_buffer_floats * sizeof *bx->counts);
  if (!bx->tensors || !bx->values || !bx->counts)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, fail, "export: out of host memory for model %s's buffers",
                  m->ops->name);
  DDP_CHECK_GOTO(ddp_backend_copy(m->be, bx->values, m->buffers, m->n_buffer_floats * sizeof(float),
                                  DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
                 st, fail);
  DDP_CHECK_GOTO(ddp_backend_sync(m->be, NULL), st, fail);
  for (int i = 0; i < n; ++i) {
    const ddp_buffer_t *b = &m->buffer_tensors[i];
    ddp_st_tensor_t *t = &bx->tensors[i];
    *t = (ddp_st_tensor_t){.name = b->t.name, .dtype = DDP_DTYPE_F32, .ndim = b->t.ndim};
    for (int d = 0; d < b->t.ndim; ++d) t->shape[d] = b->t.shape[d];
    t->data = bx->values + b->t.offset;
    if (b->kind != DDP_BUFFER_COUNT) continue;
    /* counters: int64, a single one as a scalar (PyTorch's num_batches_tracked) */
    int64_t *c = bx->counts + b->t.offset;
    for (size_t k = 0; k < b->t.count; ++k) {
      const float v = bx->values[b->t.offset + k];
      if (!(v >= 0.0f) || v != floorf(v))
        DDP_FAIL_GOTO(st, DDP_ERR_NUMERIC, fail,
                      "export: counter buffer %s of model %s holds %g, not a whole number",
                      b->t.name, m->ops->name, (double)v);
      c[k] = (int64_t)v;
    }
    t->dtype = DDP_ST_DTYPE_I64;
    t->data = c;
    if (b->t.count == 1) t->ndim = 0;
  }
  bx->n = n;
  return DDP_OK;
fail:
  ddp_model_buffer_export_free(bx);
  return st;
}

/* ---- generic export and description ------------------------------------------- */

enum { META_MAX = 2 * (4 + DDP_MODEL_OPTION_SLOTS) + 1 };

/* Every tensor of the table under its name, fp32, then the buffers
 * (ddp_model_buffer_export_prepare); the metadata names the producer, the
 * model and each of the model's own flags. */
static ddp_status_t export_generic(ddp_model_t *m, const char *path) {
  const int nt = m->n_tensors;
  ddp_status_t st = DDP_OK;
  ddp_model_buffer_export_t bx = {0};
  float *host = malloc(m->n_params * sizeof *host);
  ddp_st_tensor_t *t = calloc((size_t)nt + (size_t)m->n_buffer_tensors, sizeof *t);
  char(*values)[DDP_OPTION_TEXT_MAX + 32] = calloc(DDP_MODEL_OPTION_SLOTS, sizeof *values);
  const char *meta[META_MAX];
  if (!host || !t || !values) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "export: out of host memory");
  DDP_CHECK_GOTO(ddp_model_params_to_host(m, host), st, out);
  DDP_CHECK_GOTO(ddp_model_buffer_export_prepare(m, &bx), st, out);
  for (int i = 0; i < bx.n; ++i) t[nt + i] = bx.tensors[i];
  for (int i = 0; i < nt; ++i) {
    const ddp_param_t *p = &m->tensors[i];
    t[i] = (ddp_st_tensor_t){
        .name = p->name, .dtype = DDP_DTYPE_F32, .ndim = p->ndim, .data = host + p->offset};
    for (int d = 0; d < p->ndim; ++d) t[i].shape[d] = p->shape[d];
  }
  int k = 0;
  meta[k++] = "format", meta[k++] = "pt";
  meta[k++] = "producer", meta[k++] = "ddptrain";
  meta[k++] = "ddptrain_version", meta[k++] = ddp_version();
  meta[k++] = "ddptrain_model", meta[k++] = m->ops->name;
  for (int i = 0, v = 0; i < ddp_options_count() && m->opts; ++i) {
    if (!ddp_options_applies(m->opts, i)) continue;
    const char *flag = ddp_options_name(i);
    int own = 0;
    for (int j = 0; j < m->ops->n_options && !own; ++j)
      own = strcmp(m->ops->options[j].name, flag) == 0;
    if (!own || ddp_options_format(m->opts, i, values[v], sizeof values[v]) != 0) continue;
    meta[k++] = flag, meta[k++] = values[v++];
  }
  meta[k] = NULL;
  st = ddp_safetensors_write(path, t, nt + bx.n, meta);
out:
  ddp_model_buffer_export_free(&bx);
  free(values);
  free(t);
  free(host);
  return st;
}

ddp_status_t ddp_model_export(ddp_model_t *m, const char *path) {
  if (!m || !path) DDP_FAIL(DDP_ERR_INVALID_ARG, "model_export: NULL argument");
  return m->ops->export_weights ? m->ops->export_weights(m, path) : export_generic(m, path);
}

void ddp_model_describe(const ddp_model_t *m, char *buf, size_t len) {
  if (m->ops->describe) {
    m->ops->describe(m, buf, len);
    return;
  }
  const int n = snprintf(buf, len, "%s, %.3fM parameters in %d tensors", m->ops->name,
                         (double)m->n_params / 1e6, m->n_tensors);
  if (m->n_buffer_tensors && n > 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, ", %zu buffer values in %d buffers", m->n_buffer_floats,
             m->n_buffer_tensors);
}
