/* The cluster presets and the --cluster file reader (see
 * train/scale_cluster.h). */
#include "train/scale_cluster.h"

#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/model.h"
#include "core/ascii.h"
#include "runtime/options_config.h"

/* Figures from the vendors' data sheets where they give one; bus
 * bandwidths are what NCCL's all-reduce test reaches on such machines, not
 * the link's peak, and the FLOP rate is a sustained share of the peak (a
 * GPU runs a whole training step well below its GEMM peak). */
static const ddp_scale_cluster_t k_presets[] = {
    /* NVIDIA DGX A100: 8 A100-SXM4-80GB; NVLink 3, 600 GB/s per GPU both
     * ways, about 240 GB/s all-reduce bus bandwidth; 8 ConnectX-6 HDR
     * 200 Gb/s InfiniBand ports for the compute fabric; 312 TFLOP/s bf16
     * dense peak, taken at half; 2039 GB/s HBM2e. */
    {"dgx-a100", 8, 1920, 1600, 3, 6, 150, 2039, 80},
    /* NVIDIA DGX H100: 8 H100-SXM5-80GB; NVLink 4, 900 GB/s per GPU both
     * ways, about 450 GB/s bus bandwidth; 8 ConnectX-7 NDR 400 Gb/s ports;
     * 989 TFLOP/s bf16 dense peak, taken at 40%; 3.35 TB/s HBM3. */
    {"dgx-h100", 8, 3600, 3200, 3, 6, 400, 3350, 80},
    /* NVIDIA DGX-1 (V100), the kind of server of the PyTorch DDP paper (Li
     * et al., VLDB 2020): 8 V100-SXM2-32GB in an NVLink 2 hybrid cube mesh,
     * about 130 GB/s bus bandwidth; 4 EDR 100 Gb/s InfiniBand ports; 125
     * TFLOP/s fp16 tensor-core peak, taken at a quarter (convolutional nets
     * of 2019 reached far less of it than GPT GEMMs do); 900 GB/s HBM2. */
    {"dgx1-v100", 8, 1040, 400, 4, 8, 30, 900, 32},
    /* The Horovod paper's servers (Sergeev and Del Balso, 2018): 4 Pascal
     * P100 per server on PCIe 3.0 x16 (about 10 GB/s bus bandwidth), 25
     * Gb/s RoCE/TCP between servers; 9.3 TFLOP/s fp32 peak (P100 PCIe),
     * taken at about half; 732 GB/s HBM2, 16 GB. */
    {"horovod-p100", 4, 80, 25, 10, 30, 5, 732, 16},
};
#define N_PRESETS ((int)(sizeof k_presets / sizeof k_presets[0]))

static const ddp_scale_cluster_t *find_preset(const char *name) {
  for (int i = 0; i < N_PRESETS; ++i)
    if (ddp_ascii_ieq(name, k_presets[i].name)) return &k_presets[i];
  return NULL;
}

/* The numeric fields, in the file's names. */
typedef struct field {
  const char *key;
  size_t offset;
  double min; /* exclusive when min_open */
  int min_open;
} field_t;

#define F(name) offsetof(ddp_scale_cluster_t, name)
static const field_t k_fields[] = {
    {"intra_gbps", F(intra_gbps), 0, 1},
    {"inter_gbps", F(inter_gbps), 0, 1},
    {"intra_latency_us", F(intra_latency_us), 0, 0},
    {"inter_latency_us", F(inter_latency_us), 0, 0},
    {"gemm_tflops", F(gemm_tflops), 0, 1},
    {"memory_gbytes_s", F(memory_gbytes_s), 0, 1},
    {"gpu_memory_gib", F(gpu_memory_gib), 0, 1},
};
#define N_FIELDS ((int)(sizeof k_fields / sizeof k_fields[0]))
#define FIELD_MAX 1e6

static ddp_status_t read_file(const char *path, ddp_scale_cluster_t *out, char *why,
                              size_t why_len) {
  json_error_t err;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    if (err.line < 1)
      snprintf(why, why_len, "not a preset (%s) and %s cannot be read: %s", DDP_SCALE_PRESETS, path,
               err.text);
    else
      snprintf(why, why_len, "%s line %d: %s", path, err.line, err.text);
    return DDP_ERR_IO;
  }
  ddp_status_t st = DDP_ERR_INVALID_ARG;
  ddp_scale_cluster_t c;
  memset(&c, 0, sizeof c);
  int have_gpus = 0, have[N_FIELDS] = {0};
  if (!json_is_object(root)) {
    snprintf(why, why_len, "%s: the cluster must be a JSON object", path);
    goto out;
  }
  const json_t *preset = json_object_get(root, "preset");
  if (preset) {
    const ddp_scale_cluster_t *p =
        json_is_string(preset) ? find_preset(json_string_value(preset)) : NULL;
    if (!p) {
      snprintf(why, why_len, "%s: \"preset\" must be one of %s", path, DDP_SCALE_PRESETS);
      goto out;
    }
    c = *p;
    have_gpus = 1;
    for (int i = 0; i < N_FIELDS; ++i) have[i] = 1;
  } else {
    snprintf(c.name, sizeof c.name, "%s", path);
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "preset") == 0) continue;
    if (strcmp(key, "name") == 0) {
      if (!json_is_string(v) || strlen(json_string_value(v)) >= sizeof c.name) {
        snprintf(why, why_len, "%s: \"name\" must be a string of at most %zu bytes", path,
                 sizeof c.name - 1);
        goto out;
      }
      snprintf(c.name, sizeof c.name, "%s", json_string_value(v));
      continue;
    }
    if (strcmp(key, "gpus_per_node") == 0) {
      const json_int_t g = json_is_integer(v) ? json_integer_value(v) : 0;
      if (g < 1 || g > 65536) {
        snprintf(why, why_len, "%s: \"gpus_per_node\" must be a whole number in [1, 65536]", path);
        goto out;
      }
      c.gpus_per_node = (int)g;
      have_gpus = 1;
      continue;
    }
    int f = 0;
    while (f < N_FIELDS && strcmp(key, k_fields[f].key) != 0) ++f;
    if (f == N_FIELDS) {
      snprintf(why, why_len, "%s: unknown field \"%s\"", path, key);
      goto out;
    }
    const double x = json_is_number(v) ? json_number_value(v) : -1.0;
    const field_t *fd = &k_fields[f];
    if (!json_is_number(v) || x > FIELD_MAX || (fd->min_open ? !(x > fd->min) : !(x >= fd->min))) {
      snprintf(why, why_len, "%s: \"%s\" must be a number in %s0, %g]", path, key,
               fd->min_open ? "(" : "[", FIELD_MAX);
      goto out;
    }
    *(double *)((char *)&c + fd->offset) = x;
    have[f] = 1;
  }
  if (!have_gpus) {
    snprintf(why, why_len, "%s: \"gpus_per_node\" is missing (or give \"preset\")", path);
    goto out;
  }
  for (int i = 0; i < N_FIELDS; ++i)
    if (!have[i]) {
      snprintf(why, why_len, "%s: \"%s\" is missing (or give \"preset\")", path, k_fields[i].key);
      goto out;
    }
  *out = c;
  st = DDP_OK;
out:
  json_decref(root);
  return st;
}

ddp_status_t ddp_scale_cluster_load(const char *spec, ddp_scale_cluster_t *out, char *why,
                                    size_t why_len) {
  if (!spec || !spec[0]) {
    snprintf(why, why_len, "empty: give a preset (%s) or a JSON file", DDP_SCALE_PRESETS);
    return DDP_ERR_INVALID_ARG;
  }
  const ddp_scale_cluster_t *p = find_preset(spec);
  if (p) {
    *out = *p;
    return DDP_OK;
  }
  return read_file(spec, out, why, why_len);
}

/* The run's flag `name` (its header's text) equals this command line's. */
static int same_flag(const json_t *flags, const ddp_options_t *o, const char *name, char *why,
                     size_t why_len, const char *path) {
  const int index = ddp_options_find(name);
  const json_t *v = json_object_get(flags, name);
  char ours[1100];
  if (index < 0 || ddp_options_format(o, index, ours, sizeof ours) < 0) return 1;
  if (json_is_string(v) && strcmp(json_string_value(v), ours) == 0) return 1;
  snprintf(why, why_len,
           "%s was a run with --%s %s, this command line has %s: the compute time "
           "would be another model's or batch's",
           path, name, json_is_string(v) ? json_string_value(v) : "(not recorded)", ours);
  return 0;
}

static int same_run(const json_t *header, const ddp_options_t *o, char *why, size_t why_len,
                    const char *path) {
  /* the batch flags of the model's batch kind (the others do not apply) */
  static const char *const tokens[] = {"model", "accum", "precision", "seq-len", "tokens-per-batch",
                                       NULL};
  static const char *const records[] = {"model", "accum", "precision", "batch-size", NULL};
  const json_t *flags = json_object_get(header, "flags");
  if (!json_is_object(flags)) {
    snprintf(why, why_len, "%s: its header record has no flags", path);
    return 0;
  }
  const ddp_model_ops_t *model = ddp_model_find(o->model);
  const char *const *core = model && model->batch_kind == DDP_BATCH_RECORDS ? records : tokens;
  for (int i = 0; core[i]; ++i)
    if (!same_flag(flags, o, core[i], why, why_len, path)) return 0;
  if (model && model->ckpt_keys)
    for (int i = 0; model->ckpt_keys[i]; ++i)
      if (!same_flag(flags, o, model->ckpt_keys[i], why, why_len, path)) return 0;
  return 1;
}

ddp_status_t ddp_scale_from_metrics(const char *path, const ddp_options_t *o, double *compute_ms,
                                    int *records, char *why, size_t why_len) {
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(why, why_len, "cannot open %s: %s", path, strerror(errno));
    return DDP_ERR_IO;
  }
  ddp_status_t st = DDP_ERR_INVALID_ARG;
  char *line = NULL;
  size_t cap = 0;
  int n_line = 0, steps = 0, header = 0;
  double sum = 0.0;
  while (getline(&line, &cap, f) >= 0) {
    ++n_line;
    json_error_t err;
    json_t *rec = json_loads(line, 0, &err);
    const char *kind = json_string_value(json_object_get(rec, "record"));
    if (!rec || !kind) {
      snprintf(why, why_len, "%s line %d: not a metrics record (%s)", path, n_line,
               rec ? "no \"record\"" : err.text);
      json_decref(rec);
      goto out;
    }
    /* each run appends a header: the last one's steps are the run's */
    if (strcmp(kind, "header") == 0) {
      const int same = same_run(rec, o, why, why_len, path);
      json_decref(rec);
      if (!same) goto out;
      header = 1;
      steps = 0;
      sum = 0.0;
      continue;
    }
    const json_t *ms = json_object_get(rec, "compute_ms_max");
    if (strcmp(kind, "step") == 0 && json_is_number(ms)) {
      if (steps++ > 0) sum += json_number_value(ms); /* the first record warms up */
    }
    json_decref(rec);
  }
  if (!header) {
    snprintf(why, why_len, "%s has no header record (not a ddptrain --metrics file)", path);
  } else if (steps < 2) {
    snprintf(why, why_len,
             "%s has %d step record%s; the first warms up, so at least 2 are needed (more steps "
             "or a smaller --log-every)",
             path, steps, steps == 1 ? "" : "s");
  } else if (!(sum > 0)) {
    snprintf(why, why_len, "%s: its compute times are not positive", path);
  } else {
    *records = steps - 1;
    *compute_ms = sum / (steps - 1);
    st = DDP_OK;
  }
out:
  free(line);
  fclose(f);
  return st;
}
