/* Loading ddpsample's model (sample_load.h). The model is created through
 * the runtime's --model gpt, from the flags a training run would have had,
 * so its parameter table is exactly the one exports and checkpoints are
 * written from. */
#include "tools/sample_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ddptrain/check.h"
#include "ddptrain/safetensors.h"
#include "model/gpt_init_from.h"
#include "train/ckpt.h"

/* Parses argv (a NULL-terminated list after the program name) as the
 * trainer's flags. */
static ddp_status_t parse(ddp_options_t *o, const char *const *args) {
  char *argv[16] = {"ddpsample"};
  int argc = 1;
  while (args[argc - 1] && argc < 15) {
    argv[argc] = (char *)args[argc - 1];
    argc++;
  }
  DDP_CHECK(ddp_options_defaults(o));
  return ddp_options_parse(o, argc, argv);
}

static ddp_status_t create(sample_model_t *sm, ddp_backend_t *be, int vocab) {
  const ddp_model_ops_t *ops = ddp_model_find("gpt");
  if (!ops) DDP_FAIL(DDP_ERR_INTERNAL, "this build has no gpt model");
  ddp_data_shape_t data = {
      .kind = DDP_BATCH_TOKENS, .vocab = vocab, .seq_len = (int)sm->opts.seq_len};
  if (sm->opts.init_from[0]) DDP_CHECK(ddp_init_from_data_shape(sm->path, ops, &data));
  const ddp_model_setup_t setup = {
      .be = be, .opts = &sm->opts, .data = data, .max_batch = sm->opts.seq_len};
  return ddp_model_create(ops, &setup, &sm->model);
}

static ddp_status_t load_export(sample_model_t *sm, ddp_backend_t *be) {
  const char *args[] = {"--model", "gpt", "--init-from", sm->path, NULL};
  DDP_CHECK(parse(&sm->opts, args));
  DDP_CHECK(ddp_init_from_configure(&sm->opts));
  DDP_CHECK(create(sm, be, 2)); /* the file's vocabulary replaces 2 */
  return ddp_init_from_load(sm->path, sm->model);
}

/* DIR: its newest checkpoint; FILE: itself. */
static ddp_status_t resolve_checkpoint(sample_model_t *sm, const char *path) {
  struct stat s;
  if (stat(path, &s) != 0 || !S_ISDIR(s.st_mode)) {
    snprintf(sm->path, sizeof sm->path, "%s", path);
    return DDP_OK;
  }
  int64_t *steps = NULL;
  int n = 0;
  DDP_CHECK(ddp_ckpt_list(path, &steps, &n));
  if (n == 0) DDP_FAIL(DDP_ERR_IO, "--checkpoint %s: the directory holds no checkpoint", path);
  const ddp_status_t st = ddp_ckpt_path(sm->path, sizeof sm->path, path, steps[0]);
  free(steps);
  return st;
}

static ddp_status_t load_checkpoint(sample_model_t *sm, ddp_backend_t *be) {
  ddp_ckpt_t *ck = NULL;
  ddp_safetensors_t *hdr = NULL;
  float *params = NULL;
  ddp_status_t st = DDP_OK;
  DDP_CHECK(ddp_ckpt_open(sm->path, &ck));
  const char *keys[] = {"model", "n-layer", "n-head", "n-embd", "seq-len"};
  const char *args[11] = {NULL};
  for (int i = 0; i < 5; ++i) {
    const char *v = ddp_ckpt_config_value(ck, keys[i]);
    if (!v)
      DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done, "--checkpoint %s: its configuration has no %s",
                    sm->path, keys[i]);
    args[2 * i] = i == 0   ? "--model"
                  : i == 1 ? "--n-layer"
                  : i == 2 ? "--n-head"
                  : i == 3 ? "--n-embd"
                           : "--seq-len";
    args[2 * i + 1] = v;
  }
  if (strcmp(args[1], "gpt") != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done,
                  "--checkpoint %s: a checkpoint of --model %s; ddpsample runs gpt models",
                  sm->path, args[1]);
  DDP_CHECK_GOTO(parse(&sm->opts, args), st, done);
  /* the vocabulary is the data's: wte's rows */
  ddp_st_tensor_t wte;
  DDP_CHECK_GOTO(ddp_safetensors_open_header(sm->path, &hdr), st, done);
  DDP_CHECK_GOTO(ddp_safetensors_find(hdr, "model.transformer.wte.weight", &wte), st, done);
  if (wte.ndim != 2 || wte.shape[0] < 2 || wte.shape[0] > INT32_MAX)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done, "--checkpoint %s: wte is not a (vocab, C) matrix",
                  sm->path);
  DDP_CHECK_GOTO(create(sm, be, (int)wte.shape[0]), st, done);
  ddp_model_t *m = sm->model;
  params = malloc(m->n_params * sizeof *params);
  if (!params) DDP_FAIL_GOTO(st, DDP_ERR_OOM, done, "--checkpoint: out of host memory");
  ddp_ckpt_image_t img = {
      .tensors = m->tensors, .n_tensors = m->n_tensors, .n_params = m->n_params, .params = params};
  DDP_CHECK_GOTO(ddp_ckpt_load(ck, &img), st, done);
  DDP_CHECK_GOTO(ddp_gpt_copy_params_from_host(sample_model_gpt(sm), params), st, done);
done:
  free(params);
  ddp_safetensors_close(hdr);
  ddp_ckpt_close(ck);
  return st;
}

ddp_status_t sample_model_load(sample_model_t *sm, ddp_backend_t *be, const char *export_path,
                               const char *ckpt_path) {
  memset(sm, 0, sizeof *sm);
  if (export_path) {
    snprintf(sm->path, sizeof sm->path, "%s", export_path);
    return load_export(sm, be);
  }
  DDP_CHECK(resolve_checkpoint(sm, ckpt_path));
  return load_checkpoint(sm, be);
}

void sample_model_close(sample_model_t *sm) {
  ddp_model_destroy(sm->model);
  sm->model = NULL;
}

ddp_gpt_t *sample_model_gpt(const sample_model_t *sm) {
  return (ddp_gpt_t *)sm->model->impl;
}
