/* The GPT-2 model (see ddptrain/gpt.h): parameter layout, initialisation,
 * forward, backward and eval, written once against the backend's nn table.
 *
 * Backward walks the layers in reverse and, after each op that finishes
 * parameter gradients, announces the next tensors of the parameter table:
 * the table is laid out in exactly that completion order, so a cursor over
 * it is all the bookkeeping the gradient hook needs. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/rng.h"
#include "core/hash.h"
#include "model/gpt.h"
#include "model/gpt_input.h"
#include "trace/timeline.h"

/* One block's tensors; the same struct views parameters (elements of the
 * compute type: the fp32 masters, or the bf16/fp16 compute copy) and
 * gradients (always fp32), hence untyped. */
typedef struct block_views {
  void *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
  void *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
} block_views_t;

typedef struct model_views {
  void *wte, *wpe, *lnf_w, *lnf_b;
  block_views_t *blocks;
} model_views_t;

/* Activations of one training forward (views into the arena). The void
 * ones are act_dtype elements (nn.h); statistics, attention probabilities
 * and losses are fp32 under every precision. */
typedef struct block_acts {
  void *ln1, *qkv, *atty, *res2, *ln2, *fch, *fch_gelu, *res3;
  /* att: the softmax probabilities (B,NH,T,T) of matrix attention, or the
   * per-row log-sum-exp (B,NH,T) of flash attention */
  float *ln1_mean, *ln1_rstd, *att, *ln2_mean, *ln2_rstd;
} block_acts_t;

typedef struct acts {
  int32_t *tokens, *targets;
  int32_t *lens; /* flash attention: per-row lengths (device), NULL = all T */
  void *encoded;
  /* --recompute: every block's ln1, ln2 and fch_gelu views point at these
   * two shared buffers; backward recomputes them from what is saved (the
   * residual stream, fch) just before it needs them. */
  void *rc_ln, *rc_gelu;
  block_acts_t *blocks;
  void *lnf, *logits;
  float *lnf_mean, *lnf_rstd, *losses;
  /* backward scratch */
  void *dres, *dtmp, *dqkv, *dfch;
  float *datt;
} acts_t;

struct ddp_gpt {
  ddp_gpt_config_t cfg;
  ddp_backend_t *be;
  const ddp_nn_ops_t *nn;
  int64_t max_tokens;
  int n_tensors;
  ddp_param_t *tensors;
  size_t n_params;
  /* The vocabulary padded to a multiple of VOCAB_PAD: the logits' row pitch.
   * wte, last in the flat buffers, is followed by (vpad - V) * C zeros in
   * params, grads and the compute copy, so the LM head's product covers
   * the padded rows (zero logits, which the cross-entropy ignores and
   * gives zero gradients) with no special case; the optimizer, reducer and
   * checkpoints see n_params only. */
  int vpad;
  float *params, *grads, *loss_sum;
  /* bf16/fp16: the half-precision compute copy of the weights (uint16 bit
   * patterns, written by the optimizer pass) that the p views point to;
   * NULL in fp32, where p views the master weights. */
  void *wcompute;
  ddp_dtype_t act_dtype; /* storage type of activations and their gradients */
  int nn_reserved;       /* reserve() holds on the nn ops' workspace/scratch: one for
                            fp32 from creation (GPU ops need scratch in any precision),
                            one more after ddp_gpt_set_precision */
  model_views_t p, g;
  /* The activation arena is sized whenever the layout may change (creation,
   * precision, exec) but allocated by the first forward (ensure_arena):
   * creation sizes it for fp32 and the unfused classifier, which a bf16 run
   * with the fused classifier never uses. Allocated at once, that fp32
   * arena set the run's peak memory (an H200 held 136 GiB for a micro-batch
   * whose bf16 arena is 51 GiB) and the largest micro-batch that fits. */
  ddp_arena_t arena;
  size_t arena_bytes; /* the current layout's need */
  int arena_pending;  /* arena_bytes not allocated yet */
  acts_t a;
  int B, T, have_train_acts;
  ddp_gpt_exec_t exec;
  /* A fused forward-backward ran the LM head's backward chunk by chunk:
   * dtmp holds d(lnf) and dwte has the head's part. */
  int classifier_done;
  ddp_grad_ready_fn hook;
  void *hook_ctx;
  int cursor; /* next tensor to announce during backward */
  ddp_gpt_watch_fn watch;
  void *watch_ctx;
  ddp_token_stager_t in; /* tokens go to the device on a copy stream */
};

ddp_status_t ddp_gpt_config_validate(const ddp_gpt_config_t *c) {
  if (!c) DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt: NULL config");
  if (c->n_layer < 1 || c->n_layer > 1000)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--n-layer %d is outside [1, 1000]", c->n_layer);
  if (c->n_head < 1 || c->n_embd < 1 || c->n_embd > 65536)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--n-head %d / --n-embd %d must be positive (n-embd <= 65536)",
             c->n_head, c->n_embd);
  if (c->n_embd % c->n_head != 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--n-embd %d is not divisible by --n-head %d", c->n_embd,
             c->n_head);
  if (c->max_seq_len < 1 || c->max_seq_len > 1 << 20)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--seq-len %d is outside [1, 2^20]", c->max_seq_len);
  if (c->vocab < 2) DDP_FAIL(DDP_ERR_INVALID_ARG, "vocabulary size %d < 2", c->vocab);
  if (c->vocab_pad < 0 || c->vocab_pad > 4096 || (int64_t)c->vocab + c->vocab_pad > INT32_MAX)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "vocabulary padding %d is outside [0, 4096]", c->vocab_pad);
  return DDP_OK;
}

/* ---- parameter table ------------------------------------------------------ */

typedef struct slot {
  void **param, **grad;
} slot_t;

static ddp_status_t add_tensor(ddp_gpt_t *m, slot_t *slots, const char *name, int ndim, int64_t d0,
                               int64_t d1, int decay, void **param, void **grad) {
  const int64_t shape[2] = {d0, d1};
  ddp_param_t *t = &m->tensors[m->n_tensors];
  DDP_CHECK(ddp_param_set(t, name, ndim, shape, m->n_params, decay));
  m->n_params += t->count;
  slots[m->n_tensors] = (slot_t){param, grad};
  m->n_tensors++;
  return DDP_OK;
}

/* Backward completion order: ln_f; blocks last to first, each as
 * mlp.c_proj, mlp.c_fc, ln_2, attn.c_proj, attn.c_attn, ln_1; then wpe and
 * wte (the embedding backward completes both, wte last). */
static ddp_status_t build_table(ddp_gpt_t *m, slot_t *slots) {
  const int64_t C = m->cfg.n_embd;
  char name[DDP_PARAM_NAME_MAX];
  DDP_CHECK(add_tensor(m, slots, "transformer.ln_f.weight", 1, C, 0, 0, &m->p.lnf_w, &m->g.lnf_w));
  DDP_CHECK(add_tensor(m, slots, "transformer.ln_f.bias", 1, C, 0, 0, &m->p.lnf_b, &m->g.lnf_b));
  for (int l = m->cfg.n_layer - 1; l >= 0; --l) {
    block_views_t *p = &m->p.blocks[l], *g = &m->g.blocks[l];
    const struct {
      const char *suffix;
      int ndim;
      int64_t d0, d1;
      void **pp, **gg;
    } rows[] = {
        {"mlp.c_proj.weight", 2, C, 4 * C, &p->fcproj_w, &g->fcproj_w},
        {"mlp.c_proj.bias", 1, C, 0, &p->fcproj_b, &g->fcproj_b},
        {"mlp.c_fc.weight", 2, 4 * C, C, &p->fc_w, &g->fc_w},
        {"mlp.c_fc.bias", 1, 4 * C, 0, &p->fc_b, &g->fc_b},
        {"ln_2.weight", 1, C, 0, &p->ln2_w, &g->ln2_w},
        {"ln_2.bias", 1, C, 0, &p->ln2_b, &g->ln2_b},
        {"attn.c_proj.weight", 2, C, C, &p->proj_w, &g->proj_w},
        {"attn.c_proj.bias", 1, C, 0, &p->proj_b, &g->proj_b},
        {"attn.c_attn.weight", 2, 3 * C, C, &p->qkv_w, &g->qkv_w},
        {"attn.c_attn.bias", 1, 3 * C, 0, &p->qkv_b, &g->qkv_b},
        {"ln_1.weight", 1, C, 0, &p->ln1_w, &g->ln1_w},
        {"ln_1.bias", 1, C, 0, &p->ln1_b, &g->ln1_b},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; ++r) {
      snprintf(name, sizeof name, "transformer.h.%d.%s", l, rows[r].suffix);
      DDP_CHECK(add_tensor(m, slots, name, rows[r].ndim, rows[r].d0, rows[r].d1, rows[r].ndim == 2,
                           rows[r].pp, rows[r].gg));
    }
  }
  /* every 2-D weight decays, wpe included (nanoGPT's and llm.c's rule) */
  DDP_CHECK(add_tensor(m, slots, "transformer.wpe.weight", 2, m->cfg.max_seq_len, C, 1, &m->p.wpe,
                       &m->g.wpe));
  DDP_CHECK(
      add_tensor(m, slots, "transformer.wte.weight", 2, m->cfg.vocab, C, 1, &m->p.wte, &m->g.wte));
  return DDP_OK;
}

/* The default row padding of logits on a GPU: aligned rows for the
 * tensor-core GEMM that writes them and the vector loads that read them
 * (GPT-2's 50257 becomes 50304; 0.09% more LM-head work). On the CPU no
 * padding: the built-in byte vocabulary (257 -> 384) measured 3.3% slower
 * per step, for nothing OpenBLAS gains. */
#define GPU_VOCAB_PAD 128

static size_t pad_elems(const ddp_gpt_t *m) {
  return (size_t)(m->vpad - m->cfg.vocab) * (size_t)m->cfg.n_embd;
}

/* ---- activations ---------------------------------------------------------- */

#define ARENA_TAKE(arena, ptr, n) \
  DDP_CHECK(ddp_arena_alloc((arena), (size_t)(n) * sizeof(*(ptr)), (void **)&(ptr)))
/* An activation: n elements of the model's activation type. */
#define ARENA_ACT(arena, ptr, n) \
  DDP_CHECK(ddp_arena_alloc((arena), (size_t)(n)*ddp_dtype_size(m->act_dtype), &(ptr)))

/* Rows of logits the training layout holds: all N for the separate
 * forward and backward calls; with the fused classifier a chunk whose
 * logits are about as large as four N x C activations (at least 1024 rows,
 * so each chunk's GEMM stays large), so the N x Vp logits never exist at
 * once (GPT-2, N = 8192: 8 chunks of 1024 rows, 0.8 GB of bf16 logits
 * become 0.1 GB). */
static int64_t logits_rows(const ddp_gpt_t *m, int64_t N) {
  if (!m->exec.fused_classifier) return N;
  const int64_t per = 4 * (int64_t)m->cfg.n_embd;
  const int64_t chunks = (m->vpad + per - 1) / per;
  int64_t rows = (N + chunks - 1) / chunks;
  if (rows < 1024) rows = 1024;
  return rows < N ? rows : N;
}

/* Flash attention (ddp_gpt_exec_t.attention, auto = on GPUs): no T x T
 * probabilities, and no work on the padding at the end of each row. */
static int use_flash(const ddp_gpt_t *m) {
  if (!m->nn->flash_attention_fwd) return 0;
  return m->exec.attention == DDP_GPT_ATTENTION_FLASH ||
         (m->exec.attention == DDP_GPT_ATTENTION_AUTO && m->be->ops->kind == DDP_DEVICE_KIND_CUDA);
}

/* Floats of each block's saved attention state and of the shared backward
 * scratch for B rows of T tokens. */
static int64_t att_elems(const ddp_gpt_t *m, int64_t B, int64_t T) {
  const int64_t rows = (int64_t)m->cfg.n_head * B * T;
  return use_flash(m) ? rows : rows * T;
}

/* The training layout for N = B*T tokens and att_elems(). Run on a
 * measuring arena with the worst case to size the real one. */
static ddp_status_t take_train_acts(ddp_gpt_t *m, ddp_arena_t *ar, int64_t N, int64_t att_elems) {
  const int64_t C = m->cfg.n_embd;
  const int rc = m->exec.recompute;
  acts_t *a = &m->a;
  ARENA_ACT(ar, a->encoded, N * C);
  if (rc) {
    ARENA_ACT(ar, a->rc_ln, N * C);
    ARENA_ACT(ar, a->rc_gelu, N * 4 * C);
  }
  for (int l = 0; l < m->cfg.n_layer; ++l) {
    block_acts_t *b = &a->blocks[l];
    if (rc)
      b->ln1 = a->rc_ln;
    else
      ARENA_ACT(ar, b->ln1, N * C);
    ARENA_TAKE(ar, b->ln1_mean, N);
    ARENA_TAKE(ar, b->ln1_rstd, N);
    ARENA_ACT(ar, b->qkv, N * 3 * C);
    ARENA_TAKE(ar, b->att, att_elems);
    ARENA_ACT(ar, b->atty, N * C);
    ARENA_ACT(ar, b->res2, N * C);
    if (rc)
      b->ln2 = a->rc_ln;
    else
      ARENA_ACT(ar, b->ln2, N * C);
    ARENA_TAKE(ar, b->ln2_mean, N);
    ARENA_TAKE(ar, b->ln2_rstd, N);
    ARENA_ACT(ar, b->fch, N * 4 * C);
    if (rc)
      b->fch_gelu = a->rc_gelu;
    else
      ARENA_ACT(ar, b->fch_gelu, N * 4 * C);
    ARENA_ACT(ar, b->res3, N * C);
  }
  ARENA_ACT(ar, a->lnf, N * C);
  ARENA_TAKE(ar, a->lnf_mean, N);
  ARENA_TAKE(ar, a->lnf_rstd, N);
  ARENA_ACT(ar, a->logits, logits_rows(m, N) * m->vpad);
  ARENA_TAKE(ar, a->losses, N);
  ARENA_ACT(ar, a->dres, N * C);
  ARENA_ACT(ar, a->dtmp, N * C);
  ARENA_ACT(ar, a->dqkv, N * 3 * C);
  ARENA_ACT(ar, a->dfch, N * 4 * C);
  ARENA_TAKE(ar, a->datt, att_elems);
  return DDP_OK;
}

/* Eval reuses one block's worth of buffers for every block (a fixed
 * footprint, independent of depth) and saves nothing for backward. */
typedef struct eval_acts {
  int32_t *tokens, *targets;
  void *res[2], *ln, *qkv, *atty, *fch_gelu, *logits;
  float *losses;
} eval_acts_t;

static ddp_status_t take_eval_acts(ddp_gpt_t *m, ddp_arena_t *ar, int64_t N, eval_acts_t *e) {
  const int64_t C = m->cfg.n_embd;
  ARENA_ACT(ar, e->res[0], N * C);
  ARENA_ACT(ar, e->res[1], N * C);
  ARENA_ACT(ar, e->ln, N * C);
  ARENA_ACT(ar, e->qkv, N * 3 * C);
  ARENA_ACT(ar, e->atty, N * C);
  ARENA_ACT(ar, e->fch_gelu, N * 4 * C);
  ARENA_ACT(ar, e->logits, N * m->vpad);
  ARENA_TAKE(ar, e->losses, N);
  return DDP_OK;
}

/* Sizes the arena for the worst micro-batch under the current act_dtype
 * and execution options: N = B*T <= budget tokens, and B*T*T <= budget *
 * min(T_max, budget) for the attention probabilities; the eval layout
 * (full logits) must fit as well, which matters once the fused classifier
 * has shrunk the training one. */
static ddp_status_t size_arena(ddp_gpt_t *m) {
  const int64_t N = m->max_tokens;
  const int64_t t_max = m->cfg.max_seq_len < N ? m->cfg.max_seq_len : N;
  /* B*T*T <= N * t_max for the worst split of the budget into rows */
  const int64_t att = att_elems(m, N, 1) * (use_flash(m) ? 1 : t_max);
  ddp_arena_t measure, measure_eval;
  eval_acts_t e;
  ddp_arena_init_measure(&measure, "measure");
  ddp_arena_init_measure(&measure_eval, "measure");
  DDP_CHECK(take_train_acts(m, &measure, N, att));
  DDP_CHECK(take_eval_acts(m, &measure_eval, N, &e));
  const size_t bytes = measure.peak > measure_eval.peak ? measure.peak : measure_eval.peak;
  ddp_arena_destroy(&m->arena);
  m->arena_bytes = ddp_arena_round(bytes);
  m->arena_pending = 1;
  return DDP_OK;
}

/* Allocates the sized arena before the first forward of a layout: the
 * first step's allocation, never one in the step loop. */
static ddp_status_t ensure_arena(ddp_gpt_t *m) {
  if (!m->arena_pending) return DDP_OK;
  DDP_CHECK(ddp_arena_init(&m->arena, m->be, "activations", m->arena_bytes));
  m->arena_pending = 0;
  return DDP_OK;
}

/* ---- lifecycle --------------------------------------------------------------- */

ddp_status_t ddp_gpt_create(ddp_gpt_t **out, ddp_backend_t *be, const ddp_gpt_config_t *cfg,
                            int64_t tokens_per_batch) {
  if (!out || !be) DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt_create: NULL argument");
  *out = NULL;
  DDP_CHECK(ddp_gpt_config_validate(cfg));
  if (!be->ops->nn)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "the %s backend has no GPT kernels in this build", be->ops->name);
  if (tokens_per_batch < 1 || tokens_per_batch > (int64_t)1 << 30)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--tokens-per-batch %lld is outside [1, 2^30]",
             (long long)tokens_per_batch);
  ddp_status_t st = DDP_OK;
  ddp_gpt_t *m = calloc(1, sizeof *m);
  const int n_tensors = 4 + 12 * cfg->n_layer;
  slot_t *slots = calloc((size_t)n_tensors, sizeof *slots);
  if (!m || !slots) {
    free(m);
    free(slots);
    DDP_FAIL(DDP_ERR_OOM, "gpt_create: out of host memory");
  }
  m->cfg = *cfg;
  m->be = be;
  m->act_dtype = DDP_DTYPE_F32;
  m->nn = be->ops->nn;
  m->max_tokens = tokens_per_batch;
  m->tensors = calloc((size_t)n_tensors, sizeof *m->tensors);
  m->p.blocks = calloc((size_t)cfg->n_layer, sizeof *m->p.blocks);
  m->g.blocks = calloc((size_t)cfg->n_layer, sizeof *m->g.blocks);
  m->a.blocks = calloc((size_t)cfg->n_layer, sizeof *m->a.blocks);
  if (!m->tensors || !m->p.blocks || !m->g.blocks || !m->a.blocks)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, fail, "gpt_create: out of host memory");
  DDP_CHECK_GOTO(build_table(m, slots), st, fail);

  const int pad = cfg->vocab_pad > 0                      ? cfg->vocab_pad
                  : be->ops->kind == DDP_DEVICE_KIND_CUDA ? GPU_VOCAB_PAD
                                                          : 1;
  m->vpad = (cfg->vocab + pad - 1) / pad * pad;
  const size_t np = m->n_params + pad_elems(m);
  DDP_CHECK_GOTO(ddp_backend_alloc(be, np * sizeof(float), (void **)&m->params), st, fail);
  DDP_CHECK_GOTO(ddp_backend_alloc(be, np * sizeof(float), (void **)&m->grads), st, fail);
  DDP_CHECK_GOTO(be->ops->fill(be, m->params, DDP_DTYPE_F32, 0.0f, np, NULL), st, fail);
  DDP_CHECK_GOTO(be->ops->fill(be, m->grads, DDP_DTYPE_F32, 0.0f, np, NULL), st, fail);
  DDP_CHECK_GOTO(ddp_backend_alloc(be, sizeof(float), (void **)&m->loss_sum), st, fail);
  DDP_CHECK_GOTO(be->ops->fill(be, m->loss_sum, DDP_DTYPE_F32, 0.0f, 1, NULL), st, fail);
  for (int i = 0; i < m->n_tensors; ++i) {
    *slots[i].param = m->params + m->tensors[i].offset;
    *slots[i].grad = m->grads + m->tensors[i].offset;
  }

  DDP_CHECK_GOTO(size_arena(m), st, fail);
  DDP_CHECK_GOTO(ddp_token_stager_init(&m->in, be, tokens_per_batch), st, fail);
  /* the ops' scratch for fp32 (the CPU needs none; CUDA's attention, norms
   * and reductions do), before any step */
  DDP_CHECK_GOTO(m->nn->reserve(be, DDP_DTYPE_F32, tokens_per_batch, cfg->n_embd, m->vpad), st,
                 fail);
  m->nn_reserved++;
  free(slots);
  *out = m;
  return DDP_OK;
fail:
  free(slots);
  ddp_gpt_destroy(m);
  return st;
}

void ddp_gpt_destroy(ddp_gpt_t *m) {
  if (!m) return;
  ddp_token_stager_destroy(&m->in);
  ddp_arena_destroy(&m->arena);
  for (; m->nn_reserved > 0; --m->nn_reserved) m->nn->release(m->be);
  if (m->be) {
    ddp_backend_free(m->be, m->wcompute);
    ddp_backend_free(m->be, m->loss_sum);
    ddp_backend_free(m->be, m->grads);
    ddp_backend_free(m->be, m->params);
  }
  free(m->a.blocks);
  free(m->g.blocks);
  free(m->p.blocks);
  free(m->tensors);
  free(m);
}

const ddp_gpt_config_t *ddp_gpt_config(const ddp_gpt_t *m) {
  return &m->cfg;
}
size_t ddp_gpt_config_params(const ddp_gpt_config_t *c) {
  const size_t C = (size_t)c->n_embd, L = (size_t)c->n_layer;
  /* wte + wpe + per block (ln 2C, qkv 3C^2+3C, proj C^2+C, ln 2C, fc 4C^2+4C,
   * fc-proj 4C^2+C) + ln_f */
  return (size_t)c->vocab * C + (size_t)c->max_seq_len * C + L * (12 * C * C + 13 * C) + 2 * C;
}

void ddp_gpt_cost_model(const ddp_gpt_config_t *c, double *a, double *b) {
  *a = 6.0 * (double)ddp_gpt_config_params(c);
  *b = 6.0 * (double)c->n_layer * (double)c->n_embd;
}

size_t ddp_gpt_num_params(const ddp_gpt_t *m) {
  return m->n_params;
}
int ddp_gpt_num_tensors(const ddp_gpt_t *m) {
  return m->n_tensors;
}
const ddp_param_t *ddp_gpt_tensor(const ddp_gpt_t *m, int i) {
  return i >= 0 && i < m->n_tensors ? &m->tensors[i] : NULL;
}
float *ddp_gpt_params(ddp_gpt_t *m) {
  return m->params;
}
float *ddp_gpt_grads(ddp_gpt_t *m) {
  return m->grads;
}
size_t ddp_gpt_activation_bytes(const ddp_gpt_t *m) {
  return m->arena_bytes;
}
const void *ddp_gpt_logits(const ddp_gpt_t *m) {
  return m->a.logits;
}

ddp_status_t ddp_gpt_copy_params_to_host(ddp_gpt_t *m, float *host) {
  DDP_CHECK(ddp_backend_copy(m->be, host, m->params, m->n_params * sizeof(float),
                             DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  return ddp_backend_sync(m->be, NULL);
}

ddp_status_t ddp_gpt_copy_params_from_host(ddp_gpt_t *m, const float *host) {
  DDP_CHECK(ddp_backend_copy(m->be, m->params, host, m->n_params * sizeof(float),
                             DDP_COPY_KIND_HOST_TO_DEVICE, NULL));
  DDP_CHECK(ddp_gpt_refresh_compute_params(m));
  return ddp_backend_sync(m->be, NULL);
}

int ddp_gpt_vocab_padded(const ddp_gpt_t *m) {
  return m->vpad;
}

ddp_status_t ddp_gpt_copy_logits_to_host(ddp_gpt_t *m, float *host, int64_t n_rows) {
  /* An eval-time path: fetch whole padded rows (half logits as bits),
   * widen exactly and drop the padding columns on the host. */
  const size_t V = (size_t)m->cfg.vocab, Vp = (size_t)m->vpad, n = (size_t)n_rows * Vp;
  const size_t esz = ddp_dtype_size(m->act_dtype);
  unsigned char *bits = malloc(n * esz + 1);
  ddp_status_t st = DDP_OK;
  if (!bits) DDP_FAIL(DDP_ERR_OOM, "gpt: out of host memory for %zu logits", n);
  if (st == DDP_OK)
    st = ddp_backend_copy(m->be, bits, m->a.logits, n * esz, DDP_COPY_KIND_DEVICE_TO_HOST, NULL);
  if (st == DDP_OK) st = ddp_backend_sync(m->be, NULL);
  for (int64_t r = 0; st == DDP_OK && r < n_rows; ++r) {
    st = ddp_convert_host(host + (size_t)r * V, DDP_DTYPE_F32, bits + (size_t)r * Vp * esz,
                          m->act_dtype, V);
  }
  free(bits);
  return st;
}

void ddp_gpt_set_grad_hook(ddp_gpt_t *m, ddp_grad_ready_fn fn, void *ctx) {
  m->hook = fn;
  m->hook_ctx = ctx;
}

void ddp_gpt_set_watch(ddp_gpt_t *m, ddp_gpt_watch_fn fn, void *ctx) {
  m->watch = fn;
  m->watch_ctx = ctx;
}

/* Shows x (n elements of dtype) to the watcher; the name is formatted only
 * when there is one. */
__attribute__((format(printf, 5, 6))) static ddp_status_t watch(ddp_gpt_t *m, void *x,
                                                                ddp_dtype_t dtype, size_t n,
                                                                const char *fmt, ...) {
  if (!m->watch) return DDP_OK;
  char what[96];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return m->watch(m->watch_ctx, what, x, dtype, n);
}

/* ---- precision ------------------------------------------------------------------ */

/* Moves every view from one flat fp32 buffer to the same element offsets of
 * another whose elements are esize bytes. */
static void rebase_views(model_views_t *v, const float *from, void *to, size_t esize, int n_layer) {
#define REBASE(f) (f) = (char *)to + (size_t)((const float *)(f)-from) * esize
  REBASE(v->wte);
  REBASE(v->wpe);
  REBASE(v->lnf_w);
  REBASE(v->lnf_b);
  for (int l = 0; l < n_layer; ++l) {
    block_views_t *b = &v->blocks[l];
    void **p[] = {&b->ln1_w, &b->ln1_b, &b->qkv_w, &b->qkv_b, &b->proj_w,   &b->proj_b,
                  &b->ln2_w, &b->ln2_b, &b->fc_w,  &b->fc_b,  &b->fcproj_w, &b->fcproj_b};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; ++i) REBASE(*p[i]);
  }
#undef REBASE
}

ddp_status_t ddp_gpt_set_precision(ddp_gpt_t *m, ddp_dtype_t dtype) {
  if (!m || !ddp_dtype_is_float(dtype))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt_set_precision: NULL model or %s is not a float type",
             ddp_dtype_name(dtype));
  if (dtype == m->act_dtype) return DDP_OK;
  if (m->act_dtype != DDP_DTYPE_F32)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt_set_precision: precision is already %s",
             ddp_dtype_name(m->act_dtype));
  const size_t f32_bytes = m->arena_bytes;
  DDP_CHECK(m->nn->reserve(m->be, dtype, m->max_tokens, m->cfg.n_embd, m->vpad));
  m->nn_reserved++;
  const size_t np = m->n_params + pad_elems(m);
  DDP_CHECK(ddp_backend_alloc(m->be, np * ddp_dtype_size(dtype), &m->wcompute));
  DDP_CHECK(m->be->ops->fill(m->be, m->wcompute, dtype, 0.0f, np, NULL)); /* the padding rows */
  /* From here on the model is in the new precision; a failure below leaves
   * it without an arena, which ddp_gpt_destroy handles. */
  m->act_dtype = dtype;
  rebase_views(&m->p, m->params, m->wcompute, ddp_dtype_size(dtype), m->cfg.n_layer);
  DDP_CHECK(size_arena(m));
  DDP_LOG_INFO(
      "precision %s: %.1f MiB activations (fp32: %.1f MiB), %.1f MiB compute copy of "
      "the weights",
      ddp_dtype_name(dtype), (double)m->arena_bytes / 1048576.0, (double)f32_bytes / 1048576.0,
      (double)(m->n_params * ddp_dtype_size(dtype)) / 1048576.0);
  return ddp_gpt_refresh_compute_params(m);
}

ddp_dtype_t ddp_gpt_precision(const ddp_gpt_t *m) {
  return m->act_dtype;
}

ddp_status_t ddp_gpt_set_exec(ddp_gpt_t *m, const ddp_gpt_exec_t *x) {
  if (!m || !x) DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt_set_exec: NULL argument");
  if (x->recompute != 0 && x->recompute != 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt_set_exec: recompute must be 0 or 1, not %d", x->recompute);
  if (x->fused_classifier != 0 && x->fused_classifier != 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt_set_exec: fused_classifier must be 0 or 1, not %d",
             x->fused_classifier);
  if (x->attention != DDP_GPT_ATTENTION_AUTO && x->attention != DDP_GPT_ATTENTION_MATRIX &&
      x->attention != DDP_GPT_ATTENTION_FLASH)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt_set_exec: unknown attention kind %d", (int)x->attention);
  if (x->attention == DDP_GPT_ATTENTION_FLASH && !m->nn->flash_attention_fwd)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "--attention flash: the %s backend has no flash attention",
             m->be->ops->name);
  const ddp_gpt_exec_t old = m->exec;
  m->exec = *x;
  m->have_train_acts = 0; /* the layout changes: nothing saved survives */
  const ddp_status_t st = size_arena(m);
  if (st != DDP_OK) {
    m->exec = old;
    /* the old layout fitted before; without it the model has no arena */
    if (size_arena(m) != DDP_OK) DDP_LOG_ERROR("gpt_set_exec: cannot restore the activation arena");
  }
  return st;
}

const char *ddp_gpt_attention_name(const ddp_gpt_t *m) {
  return use_flash(m) ? "flash" : "matrix";
}

const ddp_gpt_exec_t *ddp_gpt_exec(const ddp_gpt_t *m) {
  return &m->exec;
}

void *ddp_gpt_compute_params(ddp_gpt_t *m) {
  return m->wcompute;
}

ddp_status_t ddp_gpt_refresh_compute_params(ddp_gpt_t *m) {
  if (!m->wcompute) return DDP_OK;
  return m->be->ops->convert(m->be, m->wcompute, m->act_dtype, m->params, DDP_DTYPE_F32,
                             m->n_params, NULL);
}

/* ---- initialisation --------------------------------------------------------- */

ddp_status_t ddp_gpt_init_weights(ddp_gpt_t *m, uint64_t seed) {
  float *host = malloc(m->n_params * sizeof(float));
  if (!host) DDP_FAIL(DDP_ERR_OOM, "gpt_init: out of host memory");
  const float resid_std = 0.02f / sqrtf(2.0f * (float)m->cfg.n_layer);
  ddp_rng_t root;
  ddp_rng_init(&root, seed, 0);
  for (int i = 0; i < m->n_tensors; ++i) {
    const ddp_param_t *t = &m->tensors[i];
    float *dst = host + t->offset;
    const char *leaf = strrchr(t->name, '.') + 1; /* "weight" or "bias" */
    const int is_ln = strstr(t->name, ".ln_") != NULL;
    if (strcmp(leaf, "bias") == 0 || is_ln) {
      const float v = is_ln && strcmp(leaf, "weight") == 0 ? 1.0f : 0.0f;
      for (size_t k = 0; k < t->count; ++k) dst[k] = v;
      continue;
    }
    /* The stream tag is the tensor's position in the *forward* naming
     * (hash of the name), so init does not depend on the layout order. */
    const uint64_t tag = ddp_fnv1a64(DDP_FNV1A64_INIT, t->name, strlen(t->name));
    ddp_rng_t sub;
    ddp_rng_derive(&root, tag, &sub);
    const int is_resid = strstr(t->name, "c_proj.weight") != NULL;
    ddp_rng_fill_normal(&sub, 0, 0.0f, is_resid ? resid_std : 0.02f, dst, t->count);
  }
  ddp_status_t st = ddp_gpt_copy_params_from_host(m, host);
  free(host);
  return st;
}

/* ---- forward ------------------------------------------------------------------ */

/* Host-side validation before anything is staged: a GPU kernel cannot
 * report a bad token without a host sync, so tokens and targets are
 * checked here, where the host has them anyway. */
static ddp_status_t check_batch(const ddp_gpt_t *m, const int32_t *inputs, const int32_t *targets,
                                int B, int T) {
  if (!inputs || B < 1 || T < 1) DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt: empty micro-batch");
  if (T > m->cfg.max_seq_len)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt: a sequence of %d tokens exceeds --seq-len %d", T,
             m->cfg.max_seq_len);
  if ((int64_t)B * T > m->max_tokens)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "gpt: a micro-batch of %d x %d tokens exceeds the %lld-token "
             "budget",
             B, T, (long long)m->max_tokens);
  for (int64_t i = 0; i < (int64_t)B * T; ++i)
    if (inputs[i] < 0 || inputs[i] >= m->cfg.vocab)
      DDP_FAIL(DDP_ERR_FORMAT,
               "gpt: token %d at row %lld, position %lld is outside the "
               "vocabulary [0, %d)",
               inputs[i], (long long)(i / T), (long long)(i % T), m->cfg.vocab);
  for (int64_t i = 0; targets && i < (int64_t)B * T; ++i)
    if (targets[i] < -1 || targets[i] >= m->cfg.vocab)
      DDP_FAIL(DDP_ERR_FORMAT,
               "gpt: target %d at row %lld, position %lld is outside the vocabulary [0, %d) "
               "(and is not the ignore index -1)",
               targets[i], (long long)(i / T), (long long)(i % T), m->cfg.vocab);
  return DDP_OK;
}

/* Stages the micro-batch; for flash attention with targets also each row's
 * length: one past its last target, since no position after it feeds a
 * loss (attention is causal), so those positions need no attention work. */
static ddp_status_t stage(ddp_gpt_t *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                          int32_t **tokens, int32_t **dev_targets, int32_t **lens) {
  int32_t *host_lens = NULL;
  if (targets && use_flash(m)) {
    host_lens = ddp_token_stager_lens_host(&m->in);
    for (int b = 0; b < B; ++b) {
      int len = T;
      while (len > 0 && targets[(size_t)b * T + len - 1] == -1) --len;
      host_lens[b] = len;
    }
  }
  return ddp_token_stager_put_rows(&m->in, inputs, targets, (int64_t)B * T, host_lens, B, tokens,
                                   dev_targets, lens);
}

/* resid = a + b, then out = LayerNorm(resid) (statistics saved unless
 * NULL): the residual add and the LayerNorm that reads its sum run as one op
 * (one pass over the row instead of a store and a reload), falling back to
 * the two ops for a backend table without the fused one. */
static ddp_status_t residual_layernorm(ddp_gpt_t *m, void *resid, void *out, float *mean,
                                       float *rstd, const void *a, const void *b, const void *w,
                                       const void *bias, int N, int C) {
  const ddp_nn_ops_t *nn = m->nn;
  if (nn->residual_layernorm_fwd)
    return nn->residual_layernorm_fwd(m->be, m->act_dtype, resid, out, mean, rstd, a, b, w, bias, N,
                                      C, NULL);
  DDP_CHECK(nn->add(m->be, m->act_dtype, resid, a, b, (size_t)N * C, NULL));
  return nn->layernorm_fwd(m->be, m->act_dtype, out, mean, rstd, resid, w, bias, N, C, NULL);
}

/* The MLP's c_fc and GELU: pre = inp @ w^T + bias, out = GELU(pre), as
 * one op where the backend fuses GELU into the GEMM's epilogue (pre NULL
 * in eval: only out is written), else as the two ops. */
static ddp_status_t mlp_up(ddp_gpt_t *m, void *out, void *pre, const void *inp, const void *w,
                           const void *bias, int N, int C) {
  const ddp_nn_ops_t *nn = m->nn;
  const ddp_dtype_t dt = m->act_dtype;
  if (nn->linear_gelu_fwd)
    return nn->linear_gelu_fwd(m->be, dt, out, pre, inp, w, bias, N, C, 4 * C, NULL);
  void *h = pre ? pre : out; /* eval: GELU in place */
  DDP_CHECK(nn->linear_fwd(m->be, dt, h, inp, w, bias, N, C, 4 * C, NULL));
  return nn->gelu_fwd(m->be, dt, out, h, (size_t)N * 4 * C, NULL);
}

static ddp_status_t announce(ddp_gpt_t *m, int notify, int n);

/* Backward of c_proj, GELU and c_fc: c_proj's weight and bias gradients,
 * then d(pre) = (dres @ c_proj.w) * GELU'(pre) with c_fc's bias gradient
 * in the same GEMM's epilogue where the backend fuses it, then c_fc's
 * weight gradient and d(ln_2) into dln. Announces c_proj's tensors after
 * the first step and c_fc's after the last (the table's order). */
static ddp_status_t mlp_bwd(ddp_gpt_t *m, const block_views_t *p, block_views_t *g,
                            const block_acts_t *b, void *dln, int N, int C, int acc, int notify) {
  const ddp_nn_ops_t *nn = m->nn;
  const ddp_dtype_t dt = m->act_dtype;
  ddp_backend_t *be = m->be;
  acts_t *a = &m->a;
  const int fused = nn->linear_dgelu_bwd != NULL;
  DDP_CHECK(nn->linear_bwd(be, dt, fused ? NULL : a->dfch, g->fcproj_w, g->fcproj_b, a->dres,
                           b->fch_gelu, p->fcproj_w, N, 4 * C, C, acc, 0, NULL));
  DDP_CHECK(announce(m, notify, 2));
  if (fused) {
    DDP_CHECK(nn->linear_dgelu_bwd(be, dt, a->dfch, g->fc_b, a->dres, p->fcproj_w, b->fch, N, 4 * C,
                                   C, acc, NULL));
  } else {
    DDP_CHECK(nn->gelu_bwd(be, dt, a->dfch, b->fch, a->dfch, (size_t)N * 4 * C, NULL));
  }
  if (m->exec.recompute)
    DDP_CHECK(
        nn->layernorm_fwd(be, dt, b->ln2, NULL, NULL, b->res2, p->ln2_w, p->ln2_b, N, C, NULL));
  DDP_CHECK(nn->linear_bwd(be, dt, dln, g->fc_w, fused ? NULL : g->fc_b, a->dfch, b->ln2, p->fc_w,
                           N, C, 4 * C, acc, 0, NULL));
  return announce(m, notify, 2);
}

/* The LM head and the cross-entropy fused with their backward, chunk by
 * chunk of logits_rows() rows: logits of the chunk, loss and d(logits) in
 * place, then d(lnf) of those rows into dtmp and their share of dwte (the
 * first chunk of the first micro-step overwrites it). Only a chunk of
 * logits exists at a time. With one chunk these are exactly the ops, in
 * the same order, that the separate forward and backward run. */
static ddp_status_t classifier_fused(ddp_gpt_t *m, int N, float dloss, int accumulate) {
  ddp_backend_t *be = m->be;
  const ddp_nn_ops_t *nn = m->nn;
  const ddp_dtype_t dt = m->act_dtype;
  const int C = m->cfg.n_embd, V = m->cfg.vocab, Vp = m->vpad;
  const int64_t rows = logits_rows(m, N);
  const size_t row_bytes = (size_t)C * ddp_dtype_size(dt);
  acts_t *a = &m->a;
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int n = (int)(N - r0 < rows ? N - r0 : rows);
    const void *lnf = (const char *)a->lnf + (size_t)r0 * row_bytes;
    DDP_CHECK(nn->linear_fwd(be, dt, a->logits, lnf, m->p.wte, NULL, n, C, Vp, NULL));
    DDP_CHECK(watch(m, a->logits, dt, (size_t)n * Vp, "forward: logits of rows %lld..%lld",
                    (long long)r0, (long long)(r0 + n - 1)));
    DDP_CHECK(nn->xent_fused(be, dt, a->losses + r0, m->loss_sum, a->logits, a->logits,
                             a->targets + r0, dloss, 0.0f, n, V, Vp, NULL));
    DDP_CHECK(nn->linear_bwd(be, dt, (char *)a->dtmp + (size_t)r0 * row_bytes, m->g.wte, NULL,
                             a->logits, lnf, m->p.wte, n, C, Vp, accumulate || r0 > 0, 0, NULL));
  }
  m->classifier_done = 1;
  return DDP_OK;
}

/* fused != 0: the classifier runs with its backward (classifier_fused),
 * for a backward with `accumulate` that must follow at once. */
static ddp_status_t forward_train(ddp_gpt_t *m, const int32_t *inputs, const int32_t *targets,
                                  int B, int T, float dloss, int fused, int accumulate) {
  ddp_backend_t *be = m->be;
  const ddp_nn_ops_t *nn = m->nn;
  const ddp_dtype_t dt = m->act_dtype;
  const int C = m->cfg.n_embd, NH = m->cfg.n_head, V = m->cfg.vocab, N = B * T;
  acts_t *a = &m->a;
  DDP_CHECK(ensure_arena(m));
  ddp_arena_reset(&m->arena);
  DDP_CHECK(take_train_acts(m, &m->arena, N, att_elems(m, B, T)));
  DDP_CHECK(stage(m, inputs, targets, B, T, &a->tokens, &a->targets, &a->lens));
  const size_t nc = (size_t)N * C;
  DDP_CHECK(nn->embed_fwd(be, dt, a->encoded, a->tokens, m->p.wte, m->p.wpe, B, T, C, NULL));
  DDP_CHECK(watch(m, a->encoded, m->act_dtype, nc, "forward: embedding output"));
  const void *res = a->encoded;
  /* Under bf16/fp16 every activation is stored in the half type by the op
   * that makes it (nn.h); LayerNorm statistics and the attention
   * probabilities stay fp32. */
  const int L = m->cfg.n_layer;
  /* Each residual sum is fused with the LayerNorm that reads it: the
   * attention branch's with ln_2, the MLP branch's with the next block's
   * ln_1 (or ln_f); only the first ln_1 reads the embedding alone. */
  if (L > 0)
    DDP_CHECK(nn->layernorm_fwd(be, dt, a->blocks[0].ln1, a->blocks[0].ln1_mean,
                                a->blocks[0].ln1_rstd, res, m->p.blocks[0].ln1_w,
                                m->p.blocks[0].ln1_b, N, C, NULL));
  else
    DDP_CHECK(nn->layernorm_fwd(be, dt, a->lnf, a->lnf_mean, a->lnf_rstd, res, m->p.lnf_w,
                                m->p.lnf_b, N, C, NULL));
  for (int l = 0; l < L; ++l) {
    const block_views_t *p = &m->p.blocks[l];
    block_acts_t *b = &a->blocks[l];
    DDP_SPAN_BEGIN(DDP_SPAN_FORWARD, l, "forward h.%d", l);
    DDP_CHECK(nn->linear_fwd(be, dt, b->qkv, b->ln1, p->qkv_w, p->qkv_b, N, C, 3 * C, NULL));
    DDP_CHECK(watch(m, b->qkv, m->act_dtype, 3 * nc, "forward: h.%d.attn.c_attn output", l));
    if (use_flash(m))
      DDP_CHECK(
          nn->flash_attention_fwd(be, dt, b->atty, b->att, b->qkv, a->lens, B, T, C, NH, NULL));
    else
      DDP_CHECK(nn->attention_fwd(be, dt, b->atty, b->att, b->qkv, B, T, C, NH, NULL));
    DDP_CHECK(watch(m, b->atty, m->act_dtype, nc, "forward: h.%d.attn output", l));
    DDP_CHECK(nn->linear_fwd(be, dt, b->res2, b->atty, p->proj_w, p->proj_b, N, C, C, NULL));
    DDP_CHECK(residual_layernorm(m, b->res2, b->ln2, b->ln2_mean, b->ln2_rstd, b->res2, res,
                                 p->ln2_w, p->ln2_b, N, C));
    DDP_CHECK(watch(m, b->res2, m->act_dtype, nc, "forward: h.%d.attn.c_proj + residual", l));
    DDP_CHECK(mlp_up(m, b->fch_gelu, b->fch, b->ln2, p->fc_w, p->fc_b, N, C));
    DDP_CHECK(watch(m, b->fch, m->act_dtype, 4 * nc, "forward: h.%d.mlp.c_fc output", l));
    DDP_CHECK(
        nn->linear_fwd(be, dt, b->res3, b->fch_gelu, p->fcproj_w, p->fcproj_b, N, 4 * C, C, NULL));
    if (l + 1 < L) {
      block_acts_t *nb = &a->blocks[l + 1];
      DDP_CHECK(residual_layernorm(m, b->res3, nb->ln1, nb->ln1_mean, nb->ln1_rstd, b->res3,
                                   b->res2, m->p.blocks[l + 1].ln1_w, m->p.blocks[l + 1].ln1_b, N,
                                   C));
    } else {
      DDP_CHECK(residual_layernorm(m, b->res3, a->lnf, a->lnf_mean, a->lnf_rstd, b->res3, b->res2,
                                   m->p.lnf_w, m->p.lnf_b, N, C));
    }
    DDP_CHECK(watch(m, b->res3, m->act_dtype, nc, "forward: h.%d.mlp.c_proj + residual", l));
    res = b->res3;
    DDP_SPAN_END();
  }
  /* the LM head over the padded vocabulary (zero rows of wte beyond V) */
  const int Vp = m->vpad;
  m->classifier_done = 0;
  if (fused) {
    DDP_SPAN_BEGIN(DDP_SPAN_CLASSIFIER, -1, "classifier + cross-entropy, fused with backward");
    DDP_CHECK(classifier_fused(m, N, dloss, accumulate));
    DDP_SPAN_END();
  } else {
    if (logits_rows(m, N) < N)
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "gpt: a training forward of %d tokens needs their full logits, but this model "
               "runs the fused classifier (ddp_gpt_forward_backward)",
               N);
    DDP_CHECK(nn->linear_fwd(be, dt, a->logits, a->lnf, m->p.wte, NULL, N, C, Vp, NULL));
    DDP_CHECK(watch(m, a->logits, m->act_dtype, (size_t)N * Vp, "forward: logits"));
    /* Loss and its gradient in one pass (fp32 softmax and loss); the logits
     * become their gradient, stored in the half type like every activation
     * gradient (fp16: this is where an unscaled gradient would underflow).
     * No label smoothing (0): the GPT's loss is the plain next-token one. */
    DDP_CHECK(nn->xent_fused(be, dt, a->losses, m->loss_sum, a->logits, a->logits, a->targets,
                             dloss, 0.0f, N, V, Vp, NULL));
  }
  DDP_CHECK(watch(m, a->losses, DDP_DTYPE_F32, (size_t)N, "forward: token losses"));
  /* the backward reads the tokens again and moves the release point on;
   * the caller may reuse its host arrays once the copy has read them */
  DDP_CHECK(ddp_token_stager_release(&m->in));
  DDP_CHECK(ddp_token_stager_wait_copied(&m->in));
  m->B = B;
  m->T = T;
  m->have_train_acts = 1;
  return DDP_OK;
}

static ddp_status_t forward_eval(ddp_gpt_t *m, const int32_t *inputs, const int32_t *targets, int B,
                                 int T) {
  ddp_backend_t *be = m->be;
  const ddp_nn_ops_t *nn = m->nn;
  const ddp_dtype_t dt = m->act_dtype;
  const int C = m->cfg.n_embd, NH = m->cfg.n_head, V = m->cfg.vocab, N = B * T;
  eval_acts_t e;
  DDP_CHECK(ensure_arena(m));
  ddp_arena_reset(&m->arena);
  m->have_train_acts = 0;
  DDP_CHECK(take_eval_acts(m, &m->arena, N, &e));
  int32_t *lens = NULL;
  DDP_CHECK(stage(m, inputs, targets, B, T, &e.tokens, &e.targets, &lens));
  DDP_CHECK(nn->embed_fwd(be, dt, e.res[0], e.tokens, m->p.wte, m->p.wpe, B, T, C, NULL));
  const int L = m->cfg.n_layer;
  /* residual sums fused with the LayerNorm that follows, as in training */
  DDP_CHECK(nn->layernorm_fwd(be, dt, e.ln, NULL, NULL, e.res[0],
                              L > 0 ? m->p.blocks[0].ln1_w : m->p.lnf_w,
                              L > 0 ? m->p.blocks[0].ln1_b : m->p.lnf_b, N, C, NULL));
  for (int l = 0; l < L; ++l) {
    const block_views_t *p = &m->p.blocks[l];
    void *res = e.res[0], *mid = e.res[1];
    DDP_CHECK(nn->linear_fwd(be, dt, e.qkv, e.ln, p->qkv_w, p->qkv_b, N, C, 3 * C, NULL));
    if (use_flash(m))
      DDP_CHECK(nn->flash_attention_fwd(be, dt, e.atty, NULL, e.qkv, lens, B, T, C, NH, NULL));
    else
      DDP_CHECK(nn->attention_fwd(be, dt, e.atty, NULL, e.qkv, B, T, C, NH, NULL));
    DDP_CHECK(nn->linear_fwd(be, dt, mid, e.atty, p->proj_w, p->proj_b, N, C, C, NULL));
    DDP_CHECK(residual_layernorm(m, mid, e.ln, NULL, NULL, mid, res, p->ln2_w, p->ln2_b, N, C));
    DDP_CHECK(mlp_up(m, e.fch_gelu, NULL, e.ln, p->fc_w, p->fc_b, N, C));
    DDP_CHECK(nn->linear_fwd(be, dt, res, e.fch_gelu, p->fcproj_w, p->fcproj_b, N, 4 * C, C, NULL));
    const int last = l + 1 == L;
    DDP_CHECK(residual_layernorm(m, res, e.ln, NULL, NULL, res, mid,
                                 last ? m->p.lnf_w : m->p.blocks[l + 1].ln1_w,
                                 last ? m->p.lnf_b : m->p.blocks[l + 1].ln1_b, N, C));
  }
  DDP_CHECK(nn->linear_fwd(be, dt, e.logits, e.ln, m->p.wte, NULL, N, C, m->vpad, NULL));
  m->a.logits = e.logits;
  if (targets) {
    DDP_CHECK(nn->xent_fused(be, dt, e.losses, m->loss_sum, NULL, e.logits, e.targets, 0.0f, 0.0f,
                             N, V, m->vpad, NULL));
  }
  DDP_CHECK(ddp_token_stager_release(&m->in));
  return ddp_token_stager_wait_copied(&m->in);
}

ddp_status_t ddp_gpt_forward(ddp_gpt_t *m, const int32_t *inputs, const int32_t *targets, int B,
                             int T, int train, float dloss) {
  if (!m) DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt_forward: NULL model");
  DDP_CHECK(check_batch(m, inputs, targets, B, T));
  if (train) {
    if (!targets) DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt_forward: training needs targets");
    return forward_train(m, inputs, targets, B, T, dloss, 0, 0);
  }
  return forward_eval(m, inputs, targets, B, T);
}

ddp_status_t ddp_gpt_forward_backward(ddp_gpt_t *m, const int32_t *inputs, const int32_t *targets,
                                      int B, int T, float dloss, int accumulate, int notify) {
  if (!m) DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt_forward_backward: NULL model");
  if (!targets) DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt_forward_backward: training needs targets");
  DDP_CHECK(check_batch(m, inputs, targets, B, T));
  DDP_CHECK(forward_train(m, inputs, targets, B, T, dloss, 1, accumulate != 0));
  return ddp_gpt_backward(m, accumulate, notify);
}

/* ---- backward ------------------------------------------------------------------ */

/* Announces the next n tensors of the table: their gradients are final
 * (shown to the watcher first: the hook may start reducing them). */
static ddp_status_t announce(ddp_gpt_t *m, int notify, int n) {
  for (int i = 0; i < n; ++i, ++m->cursor) {
    const ddp_param_t *t = &m->tensors[m->cursor];
    DDP_CHECK(watch(m, m->grads + t->offset, DDP_DTYPE_F32, t->count, "backward: gradient of %s",
                    t->name));
    if (notify && m->hook) m->hook(m->hook_ctx, t->offset, t->count);
  }
  return DDP_OK;
}

ddp_status_t ddp_gpt_backward(ddp_gpt_t *m, int accumulate, int notify) {
  if (!m || !m->have_train_acts)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gpt_backward: no training forward to differentiate");
  ddp_backend_t *be = m->be;
  const ddp_nn_ops_t *nn = m->nn;
  const ddp_dtype_t dt = m->act_dtype;
  const int B = m->B, T = m->T, C = m->cfg.n_embd, NH = m->cfg.n_head;
  const int N = B * T, acc = accumulate != 0;
  acts_t *a = &m->a;
  m->cursor = 0;
  /* LM head: logits = lnf @ wte^T. This writes dwte first (the embedding
   * backward adds its part last); a fused forward-backward has done it. */
  const size_t nc = (size_t)N * C;
  const int rc = m->exec.recompute;
  if (!m->classifier_done)
    DDP_CHECK(nn->linear_bwd(be, dt, a->dtmp, m->g.wte, NULL, a->logits, a->lnf, m->p.wte, N, C,
                             m->vpad, acc, 0, NULL));
  m->classifier_done = 0;
  /* The residual stream's gradient starts here; every later op adds to it. */
  DDP_CHECK(be->ops->fill(be, a->dres, dt, 0.0f, (size_t)N * C, NULL));
  const void *last = m->cfg.n_layer > 0 ? a->blocks[m->cfg.n_layer - 1].res3 : a->encoded;
  DDP_CHECK(nn->layernorm_bwd(be, dt, a->dres, m->g.lnf_w, m->g.lnf_b, a->dtmp, last, m->p.lnf_w,
                              a->lnf_mean, a->lnf_rstd, N, C, acc, NULL));
  DDP_CHECK(announce(m, notify, 2));
  for (int l = m->cfg.n_layer - 1; l >= 0; --l) {
    const block_views_t *p = &m->p.blocks[l];
    block_views_t *g = &m->g.blocks[l];
    const block_acts_t *b = &a->blocks[l];
    const void *res_in = l > 0 ? a->blocks[l - 1].res3 : a->encoded;
    DDP_SPAN_BEGIN(DDP_SPAN_BACKWARD, l, "backward h.%d", l);
    /* --recompute: GELU's output, then each LayerNorm's, rebuilt from what
     * forward saved (fch, the residual stream), just before its one use */
    if (rc) DDP_CHECK(nn->gelu_fwd(be, dt, b->fch_gelu, b->fch, 4 * nc, NULL));
    DDP_CHECK(mlp_bwd(m, p, g, b, a->dtmp, N, C, acc, notify));
    DDP_CHECK(nn->layernorm_bwd(be, dt, a->dres, g->ln2_w, g->ln2_b, a->dtmp, b->res2, p->ln2_w,
                                b->ln2_mean, b->ln2_rstd, N, C, acc, NULL));
    DDP_CHECK(announce(m, notify, 2));
    DDP_CHECK(nn->linear_bwd(be, dt, a->dtmp, g->proj_w, g->proj_b, a->dres, b->atty, p->proj_w, N,
                             C, C, acc, 0, NULL));
    DDP_CHECK(announce(m, notify, 2));
    DDP_CHECK(use_flash(m) ? nn->flash_attention_bwd(be, dt, a->dqkv, a->datt, a->dtmp, b->qkv,
                                                     b->atty, b->att, a->lens, B, T, C, NH, NULL)
                           : nn->attention_bwd(be, dt, a->dqkv, a->datt, a->dtmp, b->qkv, b->att, B,
                                               T, C, NH, NULL));
    if (rc)
      DDP_CHECK(
          nn->layernorm_fwd(be, dt, b->ln1, NULL, NULL, res_in, p->ln1_w, p->ln1_b, N, C, NULL));
    DDP_CHECK(nn->linear_bwd(be, dt, a->dtmp, g->qkv_w, g->qkv_b, a->dqkv, b->ln1, p->qkv_w, N, C,
                             3 * C, acc, 0, NULL));
    DDP_CHECK(announce(m, notify, 2));
    DDP_CHECK(nn->layernorm_bwd(be, dt, a->dres, g->ln1_w, g->ln1_b, a->dtmp, res_in, p->ln1_w,
                                b->ln1_mean, b->ln1_rstd, N, C, acc, NULL));
    DDP_CHECK(announce(m, notify, 2));
    DDP_SPAN_END();
  }
  DDP_CHECK(nn->embed_bwd(be, dt, m->g.wte, m->g.wpe, a->dres, a->tokens, B, T, C, acc, NULL));
  DDP_CHECK(ddp_token_stager_release(&m->in)); /* the last read of this micro-batch's tokens */
  /* The first micro-step writes dwpe rows 0..T-1 only; the positions this
   * batch does not reach get exact zeros, or the last step's values would
   * survive there (batches differ in T). */
  if (!acc && T < m->cfg.max_seq_len)
    DDP_CHECK(be->ops->fill(be, (float *)m->g.wpe + (size_t)T * C, DDP_DTYPE_F32, 0.0f,
                            (size_t)(m->cfg.max_seq_len - T) * C, NULL));
  DDP_CHECK(announce(m, notify, 2));
  m->have_train_acts = 0; /* activations are consumed (logits hold gradients) */
  return DDP_OK;
}

ddp_status_t ddp_gpt_take_loss(ddp_gpt_t *m, double *loss_sum) {
  float v = 0.0f;
  DDP_CHECK(ddp_backend_copy(m->be, &v, m->loss_sum, sizeof v, DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  DDP_CHECK(ddp_backend_sync(m->be, NULL));
  DDP_CHECK(m->be->ops->fill(m->be, m->loss_sum, DDP_DTYPE_F32, 0.0f, 1, NULL));
  *loss_sum = v;
  return DDP_OK;
}
