/* The checkpoint file format (see train/ckpt.h): writing an image,
 * verifying and loading a file (the directory is checkpoint_dir.c). JSON
 * through jansson, the checksum through zlib's crc32. */
#include "train/ckpt.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "ddptrain/check.h"
#include "ddptrain/safetensors.h"
#include "core/ascii.h"

/* The metadata entries the CRC covers, in order (after the tensors). */
static const char *const k_crc_keys[] = {"format",  "step", "config",      "optimizer",
                                         "sampler", "rng",  "loss_scaler", NULL};

static const char *const k_adam_slots[] = {"exp_avg", "exp_avg_sq"};
static const char *const k_sgd_slots[] = {"momentum_buffer"};

int ddp_ckpt_slot_names(const char *optimizer, const char *const **names) {
  if (ddp_ascii_ieq(optimizer, "sgd")) {
    *names = k_sgd_slots;
    return 1;
  }
  *names = k_adam_slots;
  return 2;
}

ddp_status_t ddp_ckpt_path(char *buf, size_t len, const char *dir, int64_t step) {
  int n = snprintf(buf, len, "%s/ckpt_%08lld.safetensors", dir, (long long)step);
  if (n < 0 || (size_t)n >= len) DDP_FAIL(DDP_ERR_INVALID_ARG, "checkpoint path too long: %s", dir);
  return DDP_OK;
}

ddp_status_t ddp_ckpt_tmp_path(char *buf, size_t len, const char *dir, int64_t step) {
  char host[256];
  ddp_ckpt_host_name(host, sizeof host);
  int n = snprintf(buf, len, "%s/.ckpt_%08lld.safetensors.tmp.%s.%ld", dir, (long long)step, host,
                   (long)getpid());
  if (n < 0 || (size_t)n >= len) DDP_FAIL(DDP_ERR_INVALID_ARG, "checkpoint path too long: %s", dir);
  return DDP_OK;
}

char *ddp_ckpt_config_json(const ddp_options_t *opts) {
  json_t *o = json_object();
  char value[1100];
  /* the flags of this run: the runtime's and its model's, not other models' */
  for (int i = 0; o && i < ddp_options_count(); ++i)
    if (ddp_options_applies(opts, i) && ddp_options_format(opts, i, value, sizeof value) == 0)
      json_object_set_new(o, ddp_options_name(i), json_string(value));
  char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(o);
  return text;
}

/* ---- writing ----------------------------------------------------------------- */

static uLong crc_bytes(uLong crc, const void *p, size_t n) {
  const unsigned char *b = p;
  while (n) { /* zlib takes uInt lengths */
    const uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
    crc = crc32(crc, b, chunk);
    b += chunk;
    n -= chunk;
  }
  return crc;
}

static size_t tensor_bytes(const ddp_st_tensor_t *t) {
  size_t n = ddp_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; ++d) n *= (size_t)t->shape[d];
  return n;
}

/* A text field and its terminating NUL: moving bytes from one field into
 * the next changes the sum. */
static uLong crc_text(uLong crc, const char *s) {
  return crc_bytes(crc, s, strlen(s) + 1);
}

/* One tensor as the CRC sees it: its header entry and where its data
 * starts, counted from the first tensor's data. */
typedef struct crc_entry {
  const ddp_st_tensor_t *t;
  size_t offset;
} crc_entry_t;

static int cmp_entry(const void *a, const void *b) {
  const crc_entry_t *x = a, *y = b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  return strcmp(x->t->name, y->t->name); /* empty tensors share an offset */
}

/* The header entries and the data of n tensors, in data order (the order
 * of the header's JSON keys carries no meaning, so it must not change the
 * sum): for each, its name, "dtype shape offset" and its bytes. A name moved
 * to another tensor's bytes, or a changed shape or offset, changes it. */
static uLong crc_tensors(uLong crc, crc_entry_t *e, int n) {
  qsort(e, (size_t)n, sizeof *e, cmp_entry);
  for (int i = 0; i < n; ++i) {
    const ddp_st_tensor_t *t = e[i].t;
    char desc[64 + 24 * DDP_SAFETENSORS_MAX_DIMS];
    size_t at = (size_t)snprintf(desc, sizeof desc, "%s [", ddp_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim && at < sizeof desc; ++d)
      at += (size_t)snprintf(desc + at, sizeof desc - at, "%s%lld", d ? "," : "",
                             (long long)t->shape[d]);
    if (at < sizeof desc) snprintf(desc + at, sizeof desc - at, "] %zu", e[i].offset);
    crc = crc_text(crc, t->name);
    crc = crc_text(crc, desc);
    crc = crc_bytes(crc, t->data, tensor_bytes(t));
  }
  return crc;
}

/* kv: key, value, ... NULL; each key of k_crc_keys with its value. */
static uLong crc_meta(uLong crc, const char *const *kv) {
  for (int k = 0; k_crc_keys[k]; ++k)
    for (int i = 0; kv[i]; i += 2)
      if (strcmp(kv[i], k_crc_keys[k]) == 0) {
        crc = crc_text(crc, kv[i]);
        crc = crc_text(crc, kv[i + 1]);
      }
  return crc;
}

static char *dump(json_t *j) {
  char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(j);
  return s;
}

ddp_status_t ddp_ckpt_write(const char *path, const char *tmp_path, const ddp_ckpt_image_t *img,
                            int64_t enospc_after_bytes) {
  const int n_state = img->n_tensors * (1 + img->n_slots);
  const int nt = n_state + img->n_buffer_tensors;
  ddp_status_t st = DDP_OK;
  ddp_st_tensor_t *t = calloc((size_t)nt, sizeof *t);
  char *names = calloc((size_t)nt, 96);
  char *opt = NULL, *smp = NULL, *rng = NULL, *scl = NULL, step[24];
  crc_entry_t *entries = NULL;
  if (!t || !names) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "checkpoint: out of host memory");
  for (int s = -1, j = 0; s < img->n_slots; ++s)
    for (int i = 0; i < img->n_tensors; ++i, ++j) {
      const ddp_param_t *g = &img->tensors[i];
      const float *base = s < 0 ? img->params : img->state + (size_t)s * img->n_params;
      if (s < 0)
        snprintf(names + 96 * j, 96, "model.%s", g->name);
      else
        snprintf(names + 96 * j, 96, "optim.%s.%s", img->slot_names[s], g->name);
      t[j] = (ddp_st_tensor_t){.name = names + 96 * j,
                               .dtype = DDP_DTYPE_F32,
                               .ndim = g->ndim,
                               .data = base + g->offset};
      for (int d = 0; d < g->ndim; ++d) t[j].shape[d] = g->shape[d];
    }
  for (int i = 0, j = n_state; i < img->n_buffer_tensors; ++i, ++j) {
    const ddp_param_t *g = &img->buffer_tensors[i].t;
    snprintf(names + 96 * j, 96, "buffer.%s", g->name);
    t[j] = (ddp_st_tensor_t){.name = names + 96 * j,
                             .dtype = DDP_DTYPE_F32,
                             .ndim = g->ndim,
                             .data = img->buffers + g->offset};
    for (int d = 0; d < g->ndim; ++d) t[j].shape[d] = g->shape[d];
  }
  const ddp_ckpt_meta_t *m = &img->meta;
  snprintf(step, sizeof step, "%lld", (long long)m->step);
  json_t *slots = json_array();
  for (int s = 0; s < img->n_slots; ++s)
    json_array_append_new(slots, json_string(img->slot_names[s]));
  opt = dump(json_pack("{s:s, s:I, s:o, s:f}", "kind", m->optimizer, "t", (json_int_t)m->step,
                       "slots", slots, "eps", m->adam_eps));
  smp = dump(json_pack("{s:s, s:I, s:i, s:i}", "kind", m->sampler, "global_step",
                       (json_int_t)m->step, "world", m->world, "accum", m->accum));
  rng = dump(json_pack("{s:s, s:I, s:I}", "generator", "philox4x32-10", "seed", (json_int_t)m->seed,
                       "step", (json_int_t)m->step));
  scl = dump(json_pack("{s:b, s:f, s:I, s:I}", "enabled", m->scaler.enabled, "scale",
                       m->scaler.scale, "growth_tracker", (json_int_t)m->scaler.growth_tracker,
                       "skipped_steps", (json_int_t)m->scaler.skipped_steps));
  if (!opt || !smp || !rng || !scl)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "checkpoint: cannot build the metadata");
  const char *kv[] = {"format",      DDP_CKPT_FORMAT,
                      "step",        step,
                      "config",      img->config,
                      "optimizer",   opt,
                      "sampler",     smp,
                      "rng",         rng,
                      "loss_scaler", scl,
                      NULL,          NULL,
                      NULL};
  /* the safetensors writer lays the tensors out in this order, back to back */
  entries = malloc((size_t)nt * sizeof *entries);
  if (!entries) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "checkpoint: out of host memory");
  for (size_t j = 0, at = 0; j < (size_t)nt; at += tensor_bytes(&t[j]), ++j)
    entries[j] = (crc_entry_t){.t = &t[j], .offset = at};
  uLong crc = crc_tensors(crc32(0L, Z_NULL, 0), entries, nt);
  crc = crc_meta(crc, kv);
  char crc_hex[16];
  snprintf(crc_hex, sizeof crc_hex, "%08lx", (unsigned long)crc);
  kv[14] = "crc32";
  kv[15] = crc_hex;
  const char *meta[17];
  memcpy(meta, kv, sizeof kv);
  meta[16] = NULL;
  ddp_st_write_opts_t wo = {.tmp_path = tmp_path, .enospc_after_bytes = enospc_after_bytes};
  st = ddp_safetensors_write_opts(path, t, nt, meta, &wo);
out:
  free(entries);
  free(opt);
  free(smp);
  free(rng);
  free(scl);
  free(names);
  free(t);
  return st;
}

/* ---- reading ----------------------------------------------------------------- */

struct ddp_ckpt {
  char *path;
  ddp_safetensors_t *st;
  json_t *config;
  ddp_ckpt_meta_t meta;
};

void ddp_ckpt_close(ddp_ckpt_t *ck) {
  if (!ck) return;
  ddp_safetensors_close(ck->st);
  json_decref(ck->config);
  free(ck->path);
  free(ck);
}

const ddp_ckpt_meta_t *ddp_ckpt_meta(const ddp_ckpt_t *ck) {
  return &ck->meta;
}

const char *ddp_ckpt_config_value(const ddp_ckpt_t *ck, const char *flag) {
  json_t *v = json_object_get(ck->config, flag);
  return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A metadata entry as a parsed JSON object; NULL (and a message) when it
 * is missing or not an object. */
static json_t *meta_object(const ddp_ckpt_t *ck, const char *key) {
  const char *text = ddp_safetensors_meta(ck->st, key);
  json_t *j = text ? json_loads(text, 0, NULL) : NULL;
  if (!json_is_object(j)) {
    json_decref(j);
    DDP_LOG_ERROR("%s: metadata '%s' is missing or not a JSON object", ck->path, key);
    return NULL;
  }
  return j;
}

static ddp_status_t parse_meta(ddp_ckpt_t *ck) {
  ddp_ckpt_meta_t *m = &ck->meta;
  json_t *opt = meta_object(ck, "optimizer"), *smp = meta_object(ck, "sampler");
  json_t *rng = meta_object(ck, "rng"), *scl = meta_object(ck, "loss_scaler");
  ck->config = meta_object(ck, "config");
  const char *okind = NULL, *skind = NULL;
  json_int_t step = -1, seed = 0, growth = 0, skipped = 0;
  int enabled = 0;
  double scale = 1.0;
  ddp_status_t st = DDP_OK;
  if (!opt || !smp || !rng || !scl || !ck->config ||
      json_unpack(opt, "{s:s}", "kind", &okind) != 0 ||
      json_unpack(smp, "{s:s, s:I, s:i, s:i}", "kind", &skind, "global_step", &step, "world",
                  &m->world, "accum", &m->accum) != 0 ||
      json_unpack(rng, "{s:I}", "seed", &seed) != 0 ||
      json_unpack(scl, "{s:b, s:F, s:I, s:I}", "enabled", &enabled, "scale", &scale,
                  "growth_tracker", &growth, "skipped_steps", &skipped) != 0 ||
      step < 0 || skipped < 0 || skipped > step || m->world < 1 || m->accum < 1)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, out, "%s: malformed checkpoint metadata", ck->path);
  m->step = step;
  m->seed = (uint64_t)seed;
  /* "eps" is recorded since --adam-eps exists; older files used 1e-8 */
  m->adam_eps = 1e-8;
  if (json_unpack(opt, "{s:F}", "eps", &m->adam_eps) != 0) m->adam_eps = 1e-8;
  m->scaler = (ddp_ckpt_scaler_t){
      .enabled = enabled, .scale = scale, .growth_tracker = growth, .skipped_steps = skipped};
  snprintf(m->optimizer, sizeof m->optimizer, "%s", okind);
  snprintf(m->sampler, sizeof m->sampler, "%s", skind);
out:
  json_decref(opt);
  json_decref(smp);
  json_decref(rng);
  json_decref(scl);
  return st;
}

ddp_status_t ddp_ckpt_open(const char *path, ddp_ckpt_t **out) {
  *out = NULL;
  ddp_ckpt_t *ck = calloc(1, sizeof *ck);
  if (!ck || !(ck->path = strdup(path))) {
    free(ck);
    DDP_FAIL(DDP_ERR_OOM, "checkpoint: out of host memory");
  }
  ddp_status_t st = DDP_OK;
  ddp_st_tensor_t *tensors = NULL;
  crc_entry_t *entries = NULL;
  DDP_CHECK_GOTO(ddp_safetensors_open(path, &ck->st), st, fail);
  const char *format = ddp_safetensors_meta(ck->st, "format");
  const char *crc_text_stored = ddp_safetensors_meta(ck->st, "crc32");
  if (format && strcmp(format, DDP_CKPT_FORMAT_1) == 0)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, fail,
                  "%s: format %s, written by an older ddptrain whose checksum does not cover "
                  "the tensor names and shapes; this version reads only %s (resume with the "
                  "ddptrain that wrote it, or start over)",
                  path, format, DDP_CKPT_FORMAT);
  if (!format || strcmp(format, DDP_CKPT_FORMAT) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, fail, "%s: not a ddptrain checkpoint (format '%s')", path,
                  format ? format : "missing");
  const int nt = ddp_safetensors_count(ck->st);
  tensors = calloc((size_t)nt + 1, sizeof *tensors);
  entries = calloc((size_t)nt + 1, sizeof *entries);
  if (!tensors || !entries) DDP_FAIL_GOTO(st, DDP_ERR_OOM, fail, "checkpoint: out of host memory");
  const char *first = NULL; /* the lowest data address: offsets count from it */
  for (int i = 0; i < nt; ++i) {
    DDP_CHECK_GOTO(ddp_safetensors_get(ck->st, i, &tensors[i]), st, fail);
    const char *at = tensors[i].data;
    if (!first || at < first) first = at;
  }
  for (int i = 0; i < nt; ++i)
    entries[i] =
        (crc_entry_t){.t = &tensors[i], .offset = (size_t)((const char *)tensors[i].data - first)};
  uLong crc = crc_tensors(crc32(0L, Z_NULL, 0), entries, nt);
  const char *kv[2 * 8 + 1];
  int n = 0;
  for (int k = 0; k_crc_keys[k]; ++k) {
    const char *v = ddp_safetensors_meta(ck->st, k_crc_keys[k]);
    if (!v) continue; /* a missing entry is missing from the sum */
    kv[n++] = k_crc_keys[k];
    kv[n++] = v;
  }
  kv[n] = NULL;
  crc = crc_meta(crc, kv);
  char want[16];
  snprintf(want, sizeof want, "%08lx", (unsigned long)crc);
  if (!crc_text_stored || strcmp(crc_text_stored, want) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, fail,
                  "%s: checksum mismatch (crc32 %s stored, %s computed): its tensors, their "
                  "names, shapes or offsets, or its metadata changed after it was written",
                  path, crc_text_stored ? crc_text_stored : "missing", want);
  DDP_CHECK_GOTO(parse_meta(ck), st, fail);
  free(tensors);
  free(entries);
  *out = ck;
  return DDP_OK;
fail:
  free(tensors);
  free(entries);
  ddp_ckpt_close(ck);
  return st;
}

/* "[2, 3]" */
static void shape_text(char *buf, size_t len, int ndim, const int64_t *shape) {
  size_t at = (size_t)snprintf(buf, len, "[");
  for (int d = 0; d < ndim && at < len; ++d)
    at += (size_t)snprintf(buf + at, len - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
  if (at < len) snprintf(buf + at, len - at, "]");
}

static ddp_status_t load_tensor(const ddp_ckpt_t *ck, const char *name, const ddp_param_t *g,
                                float *dst) {
  ddp_st_tensor_t t;
  if (ddp_safetensors_find(ck->st, name, &t) != DDP_OK)
    DDP_FAIL(DDP_ERR_MISMATCH, "%s: holds no tensor %s that this model has", ck->path, name);
  int same = t.dtype == DDP_DTYPE_F32 && t.ndim == g->ndim;
  for (int d = 0; same && d < g->ndim; ++d) same = t.shape[d] == g->shape[d];
  if (!same) {
    char there[96], here[96];
    shape_text(there, sizeof there, t.ndim, t.shape);
    shape_text(here, sizeof here, g->ndim, g->shape);
    DDP_FAIL(DDP_ERR_MISMATCH, "%s: tensor %s has shape %s there and %s in this model", ck->path,
             name, there, here);
  }
  memcpy(dst + g->offset, t.data, g->count * sizeof(float));
  return DDP_OK;
}

ddp_status_t ddp_ckpt_load(const ddp_ckpt_t *ck, ddp_ckpt_image_t *img) {
  char name[96];
  for (int s = -1; s < img->n_slots; ++s)
    for (int i = 0; i < img->n_tensors; ++i) {
      const ddp_param_t *g = &img->tensors[i];
      if (s < 0)
        snprintf(name, sizeof name, "model.%s", g->name);
      else
        snprintf(name, sizeof name, "optim.%s.%s", img->slot_names[s], g->name);
      DDP_CHECK(
          load_tensor(ck, name, g, s < 0 ? img->params : img->state + (size_t)s * img->n_params));
    }
  for (int i = 0; i < img->n_buffer_tensors; ++i) {
    snprintf(name, sizeof name, "buffer.%s", img->buffer_tensors[i].t.name);
    DDP_CHECK(load_tensor(ck, name, &img->buffer_tensors[i].t, img->buffers));
  }
  img->meta = ck->meta;
  return DDP_OK;
}
