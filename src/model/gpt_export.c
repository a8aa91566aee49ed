/* GPT weights to safetensors: every parameter under its PyTorch state_dict
 * key, fp32, with the model configuration in the metadata so a reader can
 * rebuild the model. The tied LM head is stored once, as
 * transformer.wte.weight (safetensors cannot alias two names to one buffer). */
#include <stdio.h>
#include <stdlib.h>

#include "ddptrain/check.h"
#include "ddptrain/safetensors.h"
#include "ddptrain/version.h"
#include "model/gpt.h"

ddp_status_t ddp_gpt_export_safetensors(ddp_gpt_t *m, const char *path) {
  if (!m || !path) DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt_export: NULL argument");
  const size_t n = ddp_gpt_num_params(m);
  const int nt = ddp_gpt_num_tensors(m);
  ddp_status_t st = DDP_OK;
  float *host = malloc(n * sizeof(float));
  ddp_st_tensor_t *t = calloc((size_t)nt, sizeof *t);
  if (!host || !t) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "gpt_export: out of host memory");
  DDP_CHECK_GOTO(ddp_gpt_copy_params_to_host(m, host), st, out);
  for (int i = 0; i < nt; ++i) {
    const ddp_param_t *g = ddp_gpt_tensor(m, i);
    t[i] = (ddp_st_tensor_t){
        .name = g->name, .dtype = DDP_DTYPE_F32, .ndim = g->ndim, .data = host + g->offset};
    for (int d = 0; d < g->ndim; ++d) t[i].shape[d] = g->shape[d];
  }
  const ddp_gpt_config_t *c = ddp_gpt_config(m);
  char nl[16], nh[16], ne[16], sl[16], vs[16];
  snprintf(nl, sizeof nl, "%d", c->n_layer);
  snprintf(nh, sizeof nh, "%d", c->n_head);
  snprintf(ne, sizeof ne, "%d", c->n_embd);
  snprintf(sl, sizeof sl, "%d", c->max_seq_len);
  snprintf(vs, sizeof vs, "%d", c->vocab);
  const char *meta[] = {
      "format", "pt",   "producer",    "ddptrain", "ddptrain_version", ddp_version(),
      "model",  "gpt2", "n_layer",     nl,         "n_head",           nh,
      "n_embd", ne,     "max_seq_len", sl,         "vocab_size",       vs,
      NULL};
  DDP_CHECK_GOTO(ddp_safetensors_write(path, t, nt, meta), st, out);
out:
  free(t);
  free(host);
  return st;
}
