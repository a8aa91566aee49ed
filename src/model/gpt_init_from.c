/* --init-from FILE: recognising the layout of a weights file, deriving the
 * GPT architecture from its shapes, and copying its tensors into a model's
 * fp32 master weights (see model/gpt_init_from.h). */
#include "model/gpt_init_from.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/safetensors.h"
#include "core/ascii.h"
#include "core/clock.h"
#include "model/builtin.h"

#define PREFIX "transformer."
#define PREFIX_LEN (sizeof PREFIX - 1)

/* One load: the file and what its layout is. */
typedef struct ddp_init_from {
  char path[1024];
  ddp_safetensors_t *st;
  int gpt;    /* the built-in GPT: the GPT-2 layouts are recognised */
  int conv1d; /* the blocks' weights are stored (in, out), as Conv1D */
  double t0;  /* when the file began to be read, for the log */
} ddp_init_from_t;

/* A flag the file contradicts is the user's command line at fault: one
 * line without a source location, like any other bad flag. */
#define USAGE_ERROR(...) ddp_log_at(DDP_LOG_LEVEL_ERROR, NULL, 0, __VA_ARGS__)

static int is_gpt(const ddp_model_ops_t *ops) {
  return ops == &ddp_gpt_model_ops;
}

/* "(a, b, c)" */
static void shape_text(int ndim, const int64_t *shape, char *buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "(");
  for (int d = 0; d < ndim && n < len; ++d)
    n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (n < len) snprintf(buf + n, len - n, ")");
}

/* The file's tensor for the GPT name `name` (with the prefix): under that
 * name, or without "transformer." (the Hugging Face GPT2Model keys). Both
 * at once is ambiguous, and an error. *found = 0 when neither exists. */
static ddp_status_t find_gpt(const ddp_safetensors_t *st, const char *path, const char *name,
                             ddp_st_tensor_t *t, int *found) {
  ddp_st_tensor_t a, b;
  const int n = ddp_safetensors_count(st);
  int have_a = 0, have_b = 0;
  const char *bare = strncmp(name, PREFIX, PREFIX_LEN) == 0 ? name + PREFIX_LEN : NULL;
  for (int i = 0; i < n; ++i) {
    ddp_st_tensor_t x;
    DDP_CHECK(ddp_safetensors_get(st, i, &x));
    if (strcmp(x.name, name) == 0) a = x, have_a = 1;
    if (bare && strcmp(x.name, bare) == 0) b = x, have_b = 1;
  }
  if (have_a && have_b)
    DDP_FAIL(DDP_ERR_FORMAT, "--init-from %s: both '%s' and '%s' are in the file: which is meant?",
             path, name, bare);
  *found = have_a || have_b;
  if (*found) *t = have_a ? a : b;
  return DDP_OK;
}

/* A GPT tensor that must be there. */
static ddp_status_t need_gpt(const ddp_safetensors_t *st, const char *path, const char *name,
                             ddp_st_tensor_t *t) {
  int found = 0;
  DDP_CHECK(find_gpt(st, path, name, t, &found));
  if (!found)
    DDP_FAIL(DDP_ERR_FORMAT,
             "--init-from %s: no tensor '%s' (nor '%s'): not a GPT-2 weights file, or an "
             "incomplete one",
             path, name, name + PREFIX_LEN);
  return DDP_OK;
}

/* The block index of a GPT name "[transformer.]h.N.<rest>", or -1; *rest
 * points after "h.N.". */
static int block_of(const char *name, const char **rest) {
  const char *s = strncmp(name, PREFIX, PREFIX_LEN) == 0 ? name + PREFIX_LEN : name;
  if (s[0] != 'h' || s[1] != '.' || s[2] < '0' || s[2] > '9') return -1;
  char *end = NULL;
  const long l = strtol(s + 2, &end, 10);
  if (*end != '.' || l > 1000000) return -1;
  if (rest) *rest = end + 1;
  return (int)l;
}

/* Buffers of the Hugging Face GPT-2 that are no parameters: the causal
 * mask and its fill value. */
static int is_mask_buffer(const char *name) {
  const char *rest = NULL;
  return block_of(name, &rest) >= 0 &&
         (strcmp(rest, "attn.bias") == 0 || strcmp(rest, "attn.masked_bias") == 0);
}

/* The blocks' Linear weights, which Conv1D stores transposed. */
static int is_block_linear_weight(const char *name) {
  const char *rest = NULL;
  if (block_of(name, &rest) < 0) return 0;
  return strcmp(rest, "attn.c_attn.weight") == 0 || strcmp(rest, "attn.c_proj.weight") == 0 ||
         strcmp(rest, "mlp.c_fc.weight") == 0 || strcmp(rest, "mlp.c_proj.weight") == 0;
}

/* The layout of a GPT file: the fused qkv weight tells Linear (3C, C)
 * from Conv1D (C, 3C); the square c_proj could not. */
static ddp_status_t detect_conv1d(const ddp_safetensors_t *st, const char *path, int64_t C,
                                  int *conv1d) {
  ddp_st_tensor_t t;
  DDP_CHECK(need_gpt(st, path, PREFIX "h.0.attn.c_attn.weight", &t));
  if (t.ndim == 2 && t.shape[0] == 3 * C && t.shape[1] == C)
    *conv1d = 0;
  else if (t.ndim == 2 && t.shape[0] == C && t.shape[1] == 3 * C)
    *conv1d = 1;
  else {
    char s[96];
    shape_text(t.ndim, t.shape, s, sizeof s);
    DDP_FAIL(DDP_ERR_FORMAT,
             "--init-from %s: tensor '%s' has shape %s; with wte's %lld columns it must be "
             "(%lld, %lld) (Linear) or (%lld, %lld) (Conv1D)",
             path, t.name, s, (long long)C, (long long)(3 * C), (long long)C, (long long)C,
             (long long)(3 * C));
  }
  return DDP_OK;
}

/* ---- the architecture from the shapes ------------------------------------- */

/* n_head from a config.json beside the file (the Hugging Face layout keeps
 * it there); 0 when there is none or it does not say. */
static int n_head_from_config(const char *path) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  char cfg[1100];
  if (slash)
    snprintf(cfg, sizeof cfg, "%.*s/config.json", (int)(slash - dir), dir);
  else
    snprintf(cfg, sizeof cfg, "config.json");
  json_t *j = json_load_file(cfg, 0, NULL);
  if (!j) return 0;
  json_t *v = json_object_get(j, "n_head");
  if (!json_is_integer(v)) v = json_object_get(j, "num_attention_heads");
  const int h = json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) < 1 << 20
                    ? (int)json_integer_value(v)
                    : 0;
  json_decref(j);
  return h;
}

/* The number of blocks: one more than the largest h.N. */
static int count_blocks(const ddp_safetensors_t *st) {
  int L = 0;
  for (int i = 0; i < ddp_safetensors_count(st); ++i) {
    ddp_st_tensor_t t;
    if (ddp_safetensors_get(st, i, &t) != DDP_OK) continue;
    const int l = block_of(t.name, NULL);
    if (l + 1 > L) L = l + 1;
  }
  return L;
}

/* A given flag against the file's value; `why` names the tensor and shape. */
static ddp_status_t agree(const ddp_options_t *o, const char *flag, int64_t file_value,
                          const char *path, const char *why) {
  int64_t v = 0;
  DDP_CHECK(ddp_options_get_int(o, flag, &v));
  if (ddp_options_given(o, flag) && v != file_value) {
    USAGE_ERROR("option --%s %lld contradicts --init-from %s: %s, i.e. --%s %lld", flag,
                (long long)v, path, why, flag, (long long)file_value);
    return DDP_ERR_INVALID_ARG;
  }
  return DDP_OK;
}

static ddp_status_t configure_gpt(ddp_options_t *o, const ddp_safetensors_t *st) {
  const char *path = o->init_from;
  ddp_st_tensor_t wte, wpe;
  DDP_CHECK(need_gpt(st, path, PREFIX "wte.weight", &wte));
  DDP_CHECK(need_gpt(st, path, PREFIX "wpe.weight", &wpe));
  char s_wte[96], s_wpe[96], why[512];
  shape_text(wte.ndim, wte.shape, s_wte, sizeof s_wte);
  shape_text(wpe.ndim, wpe.shape, s_wpe, sizeof s_wpe);
  if (wte.ndim != 2 || wpe.ndim != 2 || wpe.shape[1] != wte.shape[1] || wte.shape[1] < 1)
    DDP_FAIL(DDP_ERR_FORMAT,
             "--init-from %s: '%s' %s and '%s' %s are not two embeddings of one width", path,
             wte.name, s_wte, wpe.name, s_wpe);
  const int64_t C = wte.shape[1], T = wpe.shape[0];
  const int L = count_blocks(st);
  if (L < 1) DDP_FAIL(DDP_ERR_FORMAT, "--init-from %s: no blocks (h.0.*): not a GPT-2 file", path);
  int conv1d = 0;
  DDP_CHECK(detect_conv1d(st, path, C, &conv1d));

  snprintf(why, sizeof why, "its blocks are h.0 .. h.%d", L - 1);
  DDP_CHECK(agree(o, "n-layer", L, path, why));
  snprintf(why, sizeof why, "'%s' has shape %s", wte.name, s_wte);
  DDP_CHECK(agree(o, "n-embd", C, path, why));
  snprintf(why, sizeof why, "'%s' has shape %s (one row per position)", wpe.name, s_wpe);
  DDP_CHECK(agree(o, "seq-len", T, path, why));

  /* n_head: no shape holds it */
  int64_t H = 0;
  const char *meta = ddp_safetensors_meta(st, "n_head");
  const char *source = "the file's metadata";
  if (meta) {
    char *end = NULL;
    H = strtoll(meta, &end, 10);
    if (*end || H < 1)
      DDP_FAIL(DDP_ERR_FORMAT,
               "--init-from %s: the metadata's n_head '%s' is not a positive integer", path, meta);
  } else if ((H = n_head_from_config(path)) > 0) {
    source = "the config.json beside it";
  }
  if (H > 0) {
    snprintf(why, sizeof why, "%s says n_head %lld", source, (long long)H);
    DDP_CHECK(agree(o, "n-head", H, path, why));
  } else if (!ddp_options_given(o, "n-head")) {
    USAGE_ERROR(
        "option --init-from %s: the number of attention heads is not in the tensor shapes, "
        "the file's metadata or a config.json beside it: give --n-head (GPT-2 124M has 12)",
        path);
    return DDP_ERR_INVALID_ARG;
  }

  /* a row must fit a micro-batch: said here, where --seq-len comes from */
  if (!ddp_options_given(o, "seq-len") && o->tokens_per_batch < T) {
    USAGE_ERROR(
        "option --tokens-per-batch %lld is smaller than --init-from %s's sequence length "
        "%lld ('%s' has shape %s): a micro-batch must hold at least one full row",
        (long long)o->tokens_per_batch, path, (long long)T, wpe.name, s_wpe);
    return DDP_ERR_INVALID_ARG;
  }
  /* the flags not given, through the parser: range checks as typed flags */
  char v_l[24], v_c[24], v_t[24], v_h[24];
  snprintf(v_l, sizeof v_l, "%d", L);
  snprintf(v_c, sizeof v_c, "%lld", (long long)C);
  snprintf(v_t, sizeof v_t, "%lld", (long long)T);
  snprintf(v_h, sizeof v_h, "%lld", (long long)H);
  char *argv[10] = {"ddptrain"};
  int argc = 1;
  if (!ddp_options_given(o, "n-layer")) argv[argc++] = "--n-layer", argv[argc++] = v_l;
  if (!ddp_options_given(o, "n-embd")) argv[argc++] = "--n-embd", argv[argc++] = v_c;
  if (!ddp_options_given(o, "seq-len")) argv[argc++] = "--seq-len", argv[argc++] = v_t;
  if (H > 0 && !ddp_options_given(o, "n-head")) argv[argc++] = "--n-head", argv[argc++] = v_h;
  return ddp_options_parse(o, argc, argv);
}

ddp_status_t ddp_init_from_configure(ddp_options_t *o) {
  if (!o->init_from[0]) return DDP_OK;
  const ddp_model_ops_t *ops = ddp_model_find(o->model);
  ddp_safetensors_t *st = NULL;
  DDP_CHECK(ddp_safetensors_open_header(o->init_from, &st)); /* shapes only: no data read */
  const ddp_status_t rc = ops && is_gpt(ops) ? configure_gpt(o, st) : DDP_OK;
  ddp_safetensors_close(st);
  return rc;
}

/* ---- loading ------------------------------------------------------------------ */

/* The GPT's wte, and the data's vocabulary against it. */
static ddp_status_t vocab_gpt(const ddp_safetensors_t *st, const char *path,
                              ddp_data_shape_t *data) {
  ddp_st_tensor_t wte;
  DDP_CHECK(need_gpt(st, path, PREFIX "wte.weight", &wte));
  if (wte.ndim != 2 || wte.shape[0] > INT32_MAX)
    DDP_FAIL(DDP_ERR_FORMAT, "--init-from %s: '%s' is not a matrix of at most 2^31 - 1 rows", path,
             wte.name);
  if (wte.shape[0] < data->vocab)
    DDP_FAIL(DDP_ERR_FORMAT,
             "--init-from %s: '%s' has shape (%lld, %lld): %lld tokens, fewer than the data's "
             "vocabulary of %d (tokens %lld and up would have no embedding)",
             path, wte.name, (long long)wte.shape[0], (long long)wte.shape[1],
             (long long)wte.shape[0], data->vocab, (long long)wte.shape[0]);
  if (wte.shape[0] > data->vocab)
    DDP_LOG_INFO(
        "--init-from: the model keeps the file's vocabulary of %lld tokens (the data "
        "use %d)",
        (long long)wte.shape[0], data->vocab);
  data->vocab = (int)wte.shape[0];
  return DDP_OK;
}

ddp_status_t ddp_init_from_data_shape(const char *path, const ddp_model_ops_t *ops,
                                      ddp_data_shape_t *data) {
  if (!is_gpt(ops) || data->kind != DDP_BATCH_TOKENS) return DDP_OK;
  ddp_safetensors_t *st = NULL;
  DDP_CHECK(ddp_safetensors_open_header(path, &st));
  const ddp_status_t rc = vocab_gpt(st, path, data);
  ddp_safetensors_close(st);
  return rc;
}

/* The file's tensor for table entry p: by name, and for the GPT also
 * without the prefix. */
static ddp_status_t source_of(const ddp_init_from_t *in, const ddp_param_t *p, ddp_st_tensor_t *t) {
  int found = 0;
  if (in->gpt) {
    DDP_CHECK(find_gpt(in->st, in->path, p->name, t, &found));
  } else {
    for (int i = 0; i < ddp_safetensors_count(in->st) && !found; ++i) {
      DDP_CHECK(ddp_safetensors_get(in->st, i, t));
      found = strcmp(t->name, p->name) == 0;
    }
  }
  if (!found)
    DDP_FAIL(DDP_ERR_FORMAT, "--init-from %s: the model's tensor '%s' is not in the file", in->path,
             p->name);
  return DDP_OK;
}

/* Every tensor of the file is a parameter, a skipped GPT-2 buffer, or the
 * tied LM head; anything else means the file is for another model. */
static ddp_status_t check_unused(const ddp_init_from_t *in, const ddp_model_t *m) {
  char full[DDP_PARAM_NAME_MAX + PREFIX_LEN];
  for (int i = 0; i < ddp_safetensors_count(in->st); ++i) {
    ddp_st_tensor_t t;
    DDP_CHECK(ddp_safetensors_get(in->st, i, &t));
    if (ddp_param_find(m->tensors, m->n_tensors, t.name) >= 0) continue;
    if (in->gpt) {
      snprintf(full, sizeof full, PREFIX "%s", t.name);
      if (ddp_param_find(m->tensors, m->n_tensors, full) >= 0) continue;
      if (is_mask_buffer(t.name) || strcmp(t.name, "lm_head.weight") == 0) continue;
    }
    DDP_FAIL(DDP_ERR_FORMAT,
             "--init-from %s: tensor '%s' is not a parameter of model %s (a file for another "
             "architecture, or more blocks than --n-layer)",
             in->path, t.name, m->ops->name);
  }
  return DDP_OK;
}

/* One tensor into dst (p->count floats): shape checked, widened to fp32,
 * transposed from Conv1D's (in, out), every value finite. */
static ddp_status_t load_tensor(const ddp_init_from_t *in, const ddp_param_t *p,
                                const ddp_st_tensor_t *t, float *dst, float *scratch) {
  const int transposed = in->gpt && in->conv1d && is_block_linear_weight(p->name);
  int64_t want[DDP_PARAM_MAX_DIMS];
  for (int d = 0; d < p->ndim; ++d) want[d] = p->shape[d];
  if (transposed) want[0] = p->shape[1], want[1] = p->shape[0];
  int same = t->ndim == p->ndim;
  for (int d = 0; same && d < p->ndim; ++d) same = t->shape[d] == want[d];
  if (!same) {
    char s_file[96], s_want[96];
    shape_text(t->ndim, t->shape, s_file, sizeof s_file);
    shape_text(p->ndim, want, s_want, sizeof s_want);
    DDP_FAIL(DDP_ERR_FORMAT,
             "--init-from %s: tensor '%s' has shape %s, the model's '%s' needs %s%s", in->path,
             t->name, s_file, p->name, s_want, transposed ? " (Conv1D layout: (in, out))" : "");
  }
  if (!ddp_dtype_is_float(t->dtype))
    DDP_FAIL(DDP_ERR_FORMAT, "--init-from %s: tensor '%s' is %s, not F32, BF16 or F16", in->path,
             t->name, ddp_dtype_name(t->dtype));
  float *to = transposed ? scratch : dst;
  DDP_CHECK(ddp_convert_host(to, DDP_DTYPE_F32, t->data, t->dtype, p->count));
  if (transposed) { /* (in, out) -> (out, in) */
    const size_t rows = (size_t)t->shape[0], cols = (size_t)t->shape[1];
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) dst[c * rows + r] = scratch[r * cols + c];
  }
  for (size_t i = 0; i < p->count; ++i)
    if (!isfinite(dst[i]))
      DDP_FAIL(DDP_ERR_FORMAT, "--init-from %s: tensor '%s' holds a non-finite value at %zu",
               in->path, t->name, i);
  return DDP_OK;
}

/* A stored lm_head.weight must be the tied wte (the model has no other). */
static ddp_status_t check_lm_head(const ddp_init_from_t *in, const ddp_model_t *m,
                                  const float *host, float *scratch) {
  ddp_st_tensor_t t;
  int found = 0;
  for (int i = 0; in->gpt && i < ddp_safetensors_count(in->st) && !found; ++i) {
    DDP_CHECK(ddp_safetensors_get(in->st, i, &t));
    found = strcmp(t.name, "lm_head.weight") == 0;
  }
  if (!found) return DDP_OK;
  const int w = ddp_param_find(m->tensors, m->n_tensors, PREFIX "wte.weight");
  if (w < 0) return DDP_OK;
  const ddp_param_t *p = &m->tensors[w];
  if (t.ndim != 2 || t.shape[0] != p->shape[0] || t.shape[1] != p->shape[1] ||
      !ddp_dtype_is_float(t.dtype))
    DDP_FAIL(DDP_ERR_FORMAT, "--init-from %s: 'lm_head.weight' does not have wte's shape",
             in->path);
  DDP_CHECK(ddp_convert_host(scratch, DDP_DTYPE_F32, t.data, t.dtype, p->count));
  if (memcmp(scratch, host + p->offset, p->count * sizeof(float)) != 0)
    DDP_FAIL(DDP_ERR_FORMAT,
             "--init-from %s: 'lm_head.weight' differs from the token embedding: an untied LM "
             "head, which model %s does not have",
             in->path, m->ops->name);
  return DDP_OK;
}

/* Reads the file and copies it into the model (see ddp_init_from_load). */
static ddp_status_t load(ddp_init_from_t *in, ddp_model_t *m) {
  if (in->gpt) {
    const int w = ddp_param_find(m->tensors, m->n_tensors, PREFIX "wte.weight");
    if (w < 0) DDP_FAIL(DDP_ERR_INTERNAL, "--init-from: model %s has no wte", m->ops->name);
    DDP_CHECK(detect_conv1d(in->st, in->path, m->tensors[w].shape[1], &in->conv1d));
  }
  DDP_CHECK(check_unused(in, m));
  size_t largest = 0;
  for (int i = 0; i < m->n_tensors; ++i)
    if (m->tensors[i].count > largest) largest = m->tensors[i].count;
  ddp_status_t st = DDP_OK;
  float *host = malloc(m->n_params * sizeof *host);
  float *scratch = malloc(largest * sizeof *scratch);
  if (!host || !scratch) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "--init-from: out of host memory");
  for (int i = 0; i < m->n_tensors; ++i) {
    const ddp_param_t *p = &m->tensors[i];
    ddp_st_tensor_t t;
    DDP_CHECK_GOTO(source_of(in, p, &t), st, out);
    DDP_CHECK_GOTO(load_tensor(in, p, &t, host + p->offset, scratch), st, out);
  }
  DDP_CHECK_GOTO(check_lm_head(in, m, host, scratch), st, out);
  DDP_CHECK_GOTO(ddp_model_params_from_host(m, host), st, out);
  DDP_LOG_INFO("--init-from: %zu parameters in %d tensors from %s (%s) in %.2f s", m->n_params,
               m->n_tensors, in->path,
               !in->gpt     ? "by name"
               : in->conv1d ? "GPT-2 Conv1D layout, weights transposed"
                            : "Linear layout",
               ddp_clock_seconds() - in->t0);
out:
  free(scratch);
  free(host);
  return st;
}

ddp_status_t ddp_init_from_load(const char *path, ddp_model_t *m) {
  if (!path || !m) DDP_FAIL(DDP_ERR_INVALID_ARG, "init_from_load: NULL argument");
  ddp_init_from_t in = {.gpt = is_gpt(m->ops), .t0 = ddp_clock_seconds()};
  snprintf(in.path, sizeof in.path, "%s", path);
  DDP_CHECK(ddp_safetensors_open(path, &in.st));
  const ddp_status_t rc = load(&in, m);
  ddp_safetensors_close(in.st);
  return rc;
}
