/* The GPT's decode path (model/gpt_decode.h): prefill and one-token steps
 * over a qkv cache, written against the nn ops table like the forward in
 * gpt.c and computing what its eval forward computes, row for row.
 *
 * The weights are found through the model's public parameter table (by
 * name), so this file needs nothing private of gpt.c: a tensor's elements
 * start at its offset in the master weights (fp32) or in the compute copy
 * (bf16/fp16), whichever the model computes with. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/dtype.h"
#include "model/gpt_decode.h"

typedef struct dec_block {
  const void *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
  const void *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
} dec_block_t;

struct ddp_gpt_decoder {
  ddp_gpt_t *m;
  ddp_backend_t *be;
  const ddp_nn_ops_t *nn;
  ddp_dtype_t dt;
  size_t es; /* bytes per activation element */
  int B, T_max, C, NH, L, V, vpad, len;
  int reserved;
  const void *wte, *wpe, *lnf_w, *lnf_b;
  dec_block_t *blocks;
  void **cache; /* per layer (B, T_max, 3C) */
  /* prefill-sized (B * T_max rows) work buffers */
  void *res, *mid, *ln, *atty, *fch, *logits;
  int32_t *tokens;   /* backend memory, B * T_max */
  void *logits_host; /* B * vpad elements of dt */
};

/* Pointer to element i of a dt buffer. */
static void *at(const ddp_gpt_decoder_t *d, const void *p, size_t i) {
  return (char *)p + i * d->es;
}

static ddp_status_t find(const ddp_gpt_decoder_t *d, const char *name, const void **out) {
  const ddp_gpt_t *m = d->m;
  const void *base = ddp_gpt_compute_params(d->m);
  if (!base) base = ddp_gpt_params(d->m);
  for (int i = 0; i < ddp_gpt_num_tensors(m); ++i) {
    const ddp_param_t *t = ddp_gpt_tensor(m, i);
    if (strcmp(t->name, name) == 0) {
      *out = at(d, base, t->offset);
      return DDP_OK;
    }
  }
  DDP_FAIL(DDP_ERR_INTERNAL, "gpt decode: the model has no tensor %s", name);
}

static ddp_status_t find_weights(ddp_gpt_decoder_t *d) {
  DDP_CHECK(find(d, "transformer.wte.weight", &d->wte));
  DDP_CHECK(find(d, "transformer.wpe.weight", &d->wpe));
  DDP_CHECK(find(d, "transformer.ln_f.weight", &d->lnf_w));
  DDP_CHECK(find(d, "transformer.ln_f.bias", &d->lnf_b));
  for (int l = 0; l < d->L; ++l) {
    dec_block_t *b = &d->blocks[l];
    const struct {
      const char *suffix;
      const void **p;
    } rows[] = {
        {"ln_1.weight", &b->ln1_w},          {"ln_1.bias", &b->ln1_b},
        {"attn.c_attn.weight", &b->qkv_w},   {"attn.c_attn.bias", &b->qkv_b},
        {"attn.c_proj.weight", &b->proj_w},  {"attn.c_proj.bias", &b->proj_b},
        {"ln_2.weight", &b->ln2_w},          {"ln_2.bias", &b->ln2_b},
        {"mlp.c_fc.weight", &b->fc_w},       {"mlp.c_fc.bias", &b->fc_b},
        {"mlp.c_proj.weight", &b->fcproj_w}, {"mlp.c_proj.bias", &b->fcproj_b},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; ++r) {
      char name[DDP_PARAM_NAME_MAX];
      snprintf(name, sizeof name, "transformer.h.%d.%s", l, rows[r].suffix);
      DDP_CHECK(find(d, name, rows[r].p));
    }
  }
  return DDP_OK;
}

void ddp_gpt_decoder_destroy(ddp_gpt_decoder_t *d) {
  if (!d) return;
  if (d->reserved) d->nn->release(d->be);
  for (int l = 0; d->cache && l < d->L; ++l) ddp_backend_free(d->be, d->cache[l]);
  void *bufs[] = {d->res, d->mid, d->ln, d->atty, d->fch, d->logits, d->tokens};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i) ddp_backend_free(d->be, bufs[i]);
  free(d->logits_host);
  free(d->cache);
  free(d->blocks);
  free(d);
}

ddp_status_t ddp_gpt_decoder_create(ddp_gpt_decoder_t **out, ddp_gpt_t *m, ddp_backend_t *be,
                                    int B) {
  if (!out || !m || !be) DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt decode: NULL argument");
  *out = NULL;
  if (B < 1 || B > 4096)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt decode: %d sequences (need 1..4096)", B);
  const ddp_nn_ops_t *nn = be->ops->nn;
  if (!nn || !nn->attention_decode)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "gpt decode: the %s backend has no attention_decode op",
             be->ops->name);
  const ddp_gpt_config_t *cfg = ddp_gpt_config(m);
  ddp_status_t st = DDP_OK;
  ddp_gpt_decoder_t *d = calloc(1, sizeof *d);
  if (!d) DDP_FAIL(DDP_ERR_OOM, "gpt decode: out of host memory");
  d->m = m;
  d->be = be;
  d->nn = nn;
  d->dt = ddp_gpt_precision(m);
  d->es = ddp_dtype_size(d->dt);
  d->B = B;
  d->T_max = cfg->max_seq_len;
  d->C = cfg->n_embd;
  d->NH = cfg->n_head;
  d->L = cfg->n_layer;
  d->V = cfg->vocab;
  d->vpad = ddp_gpt_vocab_padded(m);
  d->blocks = calloc((size_t)d->L, sizeof *d->blocks);
  d->cache = calloc((size_t)d->L, sizeof *d->cache);
  d->logits_host = malloc((size_t)B * (size_t)d->vpad * d->es);
  if (!d->blocks || !d->cache || !d->logits_host)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, fail, "gpt decode: out of host memory");
  DDP_CHECK_GOTO(find_weights(d), st, fail);
  const size_t N = (size_t)B * (size_t)d->T_max, C = (size_t)d->C;
  for (int l = 0; l < d->L; ++l)
    DDP_CHECK_GOTO(ddp_backend_alloc(be, N * 3 * C * d->es, &d->cache[l]), st, fail);
  struct {
    void **p;
    size_t elems;
  } bufs[] = {{&d->res, N * C},  {&d->mid, N * C},     {&d->ln, N * C},
              {&d->atty, N * C}, {&d->fch, N * 4 * C}, {&d->logits, (size_t)B * d->vpad}};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i)
    DDP_CHECK_GOTO(ddp_backend_alloc(be, bufs[i].elems * d->es, bufs[i].p), st, fail);
  DDP_CHECK_GOTO(ddp_backend_alloc(be, N * sizeof(int32_t), (void **)&d->tokens), st, fail);
  /* half ops widen into the backend's workspace: make it big enough for
   * the prefill's rows (growing only, so the trainer's own hold stands) */
  DDP_CHECK_GOTO(nn->reserve(be, d->dt, (int64_t)N, d->C, d->vpad), st, fail);
  d->reserved = 1;
  *out = d;
  return DDP_OK;
fail:
  ddp_gpt_decoder_destroy(d);
  return st;
}

int ddp_gpt_decoder_length(const ddp_gpt_decoder_t *d) {
  return d ? d->len : 0;
}

int ddp_gpt_decoder_sequences(const ddp_gpt_decoder_t *d) {
  return d->B;
}

const ddp_gpt_config_t *ddp_gpt_decoder_config(const ddp_gpt_decoder_t *d) {
  return ddp_gpt_config(d->m);
}

static ddp_status_t upload_tokens(ddp_gpt_decoder_t *d, const int32_t *tokens, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= d->V)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt decode: token %d is outside the vocabulary [0, %d)",
               tokens[i], d->V);
  DDP_CHECK(ddp_backend_copy(d->be, d->tokens, tokens, n * sizeof(int32_t),
                             DDP_COPY_KIND_HOST_TO_DEVICE, NULL));
  return DDP_OK;
}

/* resid = a + b, out = LayerNorm(resid), as gpt.c's eval forward does it. */
static ddp_status_t residual_layernorm(ddp_gpt_decoder_t *d, void *resid, void *out, const void *a,
                                       const void *b, const void *w, const void *bias, int N) {
  const ddp_nn_ops_t *nn = d->nn;
  if (nn->residual_layernorm_fwd)
    return nn->residual_layernorm_fwd(d->be, d->dt, resid, out, NULL, NULL, a, b, w, bias, N, d->C,
                                      NULL);
  DDP_CHECK(nn->add(d->be, d->dt, resid, a, b, (size_t)N * d->C, NULL));
  return nn->layernorm_fwd(d->be, d->dt, out, NULL, NULL, resid, w, bias, N, d->C, NULL);
}

/* Everything after attention in block l, over N rows: projection, residual,
 * MLP, residual, and the LayerNorm the next block (or the head) starts with;
 * leaves the stream in res and its normalised rows in ln. */
static ddp_status_t block_tail(ddp_gpt_decoder_t *d, int l, int N) {
  const ddp_nn_ops_t *nn = d->nn;
  const dec_block_t *p = &d->blocks[l];
  const int C = d->C;
  DDP_CHECK(nn->linear_fwd(d->be, d->dt, d->mid, d->atty, p->proj_w, p->proj_b, N, C, C, NULL));
  DDP_CHECK(residual_layernorm(d, d->mid, d->ln, d->mid, d->res, p->ln2_w, p->ln2_b, N));
  if (nn->linear_gelu_fwd) {
    DDP_CHECK(nn->linear_gelu_fwd(d->be, d->dt, d->fch, NULL, d->ln, p->fc_w, p->fc_b, N, C, 4 * C,
                                  NULL));
  } else {
    DDP_CHECK(nn->linear_fwd(d->be, d->dt, d->fch, d->ln, p->fc_w, p->fc_b, N, C, 4 * C, NULL));
    DDP_CHECK(nn->gelu_fwd(d->be, d->dt, d->fch, d->fch, (size_t)N * 4 * C, NULL));
  }
  DDP_CHECK(
      nn->linear_fwd(d->be, d->dt, d->res, d->fch, p->fcproj_w, p->fcproj_b, N, 4 * C, C, NULL));
  const int last = l + 1 == d->L;
  return residual_layernorm(d, d->res, d->ln, d->res, d->mid,
                            last ? d->lnf_w : d->blocks[l + 1].ln1_w,
                            last ? d->lnf_b : d->blocks[l + 1].ln1_b, N);
}

/* The LM head over B rows of ln `pitch` rows apart (starting at row
 * `first`), then the logits to the host as fp32. */
static ddp_status_t head(ddp_gpt_decoder_t *d, int first, int pitch, float *logits) {
  const size_t C = (size_t)d->C, vp = (size_t)d->vpad;
  for (int b = 0; b < d->B; ++b)
    DDP_CHECK(d->nn->linear_fwd(d->be, d->dt, at(d, d->logits, (size_t)b * vp),
                                at(d, d->ln, ((size_t)b * pitch + first) * C), d->wte, NULL, 1,
                                d->C, d->vpad, NULL));
  DDP_CHECK(ddp_backend_copy(d->be, d->logits_host, d->logits, (size_t)d->B * vp * d->es,
                             DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  DDP_CHECK(ddp_backend_sync(d->be, NULL));
  for (int b = 0; b < d->B; ++b)
    DDP_CHECK(ddp_convert_host(logits + (size_t)b * d->V, DDP_DTYPE_F32,
                               at(d, d->logits_host, (size_t)b * vp), d->dt, (size_t)d->V));
  return DDP_OK;
}

ddp_status_t ddp_gpt_decoder_prefill(ddp_gpt_decoder_t *d, const int32_t *tokens, int T,
                                     float *logits) {
  if (!d || !tokens || !logits) DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt decode: NULL argument");
  if (T < 1 || T > d->T_max)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt decode: a prompt of %d tokens (the model takes 1..%d)", T,
             d->T_max);
  const ddp_nn_ops_t *nn = d->nn;
  const int B = d->B, C = d->C, N = B * T;
  const size_t row3 = 3 * (size_t)C, pitch = (size_t)d->T_max * row3;
  d->len = 0;
  DDP_CHECK(upload_tokens(d, tokens, (size_t)N));
  DDP_CHECK(nn->embed_fwd(d->be, d->dt, d->res, d->tokens, d->wte, d->wpe, B, T, C, NULL));
  DDP_CHECK(nn->layernorm_fwd(d->be, d->dt, d->ln, NULL, NULL, d->res, d->blocks[0].ln1_w,
                              d->blocks[0].ln1_b, N, C, NULL));
  for (int l = 0; l < d->L; ++l) {
    const dec_block_t *p = &d->blocks[l];
    /* per sequence: its qkv rows go straight into its cache rows 0..T-1,
     * and the ordinary causal attention runs over them there */
    for (int b = 0; b < B; ++b) {
      void *cache = at(d, d->cache[l], (size_t)b * pitch);
      DDP_CHECK(nn->linear_fwd(d->be, d->dt, cache, at(d, d->ln, (size_t)b * T * C), p->qkv_w,
                               p->qkv_b, T, C, 3 * C, NULL));
      DDP_CHECK(nn->attention_fwd(d->be, d->dt, at(d, d->atty, (size_t)b * T * C), NULL, cache, 1,
                                  T, C, d->NH, NULL));
    }
    DDP_CHECK(block_tail(d, l, N));
  }
  DDP_CHECK(head(d, T - 1, T, logits));
  d->len = T;
  return DDP_OK;
}

ddp_status_t ddp_gpt_decoder_step(ddp_gpt_decoder_t *d, const int32_t *tokens, float *logits) {
  if (!d || !tokens || !logits) DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt decode: NULL argument");
  if (d->len < 1) DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt decode: a step before any prefill");
  if (d->len >= d->T_max)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt decode: the cache is full (%d positions, --seq-len)",
             d->T_max);
  const ddp_nn_ops_t *nn = d->nn;
  const int B = d->B, C = d->C, t = d->len;
  const size_t row3 = 3 * (size_t)C, pitch = (size_t)d->T_max * row3;
  DDP_CHECK(upload_tokens(d, tokens, (size_t)B));
  /* one row per sequence at position t: wpe's row t is the table's row 0 */
  DDP_CHECK(nn->embed_fwd(d->be, d->dt, d->res, d->tokens, d->wte, at(d, d->wpe, (size_t)t * C), B,
                          1, C, NULL));
  DDP_CHECK(nn->layernorm_fwd(d->be, d->dt, d->ln, NULL, NULL, d->res, d->blocks[0].ln1_w,
                              d->blocks[0].ln1_b, B, C, NULL));
  for (int l = 0; l < d->L; ++l) {
    const dec_block_t *p = &d->blocks[l];
    for (int b = 0; b < B; ++b)
      DDP_CHECK(nn->linear_fwd(d->be, d->dt, at(d, d->cache[l], (size_t)b * pitch + t * row3),
                               at(d, d->ln, (size_t)b * C), p->qkv_w, p->qkv_b, 1, C, 3 * C, NULL));
    DDP_CHECK(
        nn->attention_decode(d->be, d->dt, d->atty, d->cache[l], B, d->T_max, t, C, d->NH, NULL));
    DDP_CHECK(block_tail(d, l, B));
  }
  DDP_CHECK(head(d, 0, 1, logits));
  d->len = t + 1;
  return DDP_OK;
}
