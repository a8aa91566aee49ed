/* Sampling and the generation loop (model/gpt_generate.h). Sampling runs on
 * the host over one row of logits per sequence: a sort of V floats per
 * token is nothing next to a forward step, and keeps the rule (and its tie
 * order) in one place for every backend. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "model/gpt_generate.h"

ddp_status_t ddp_generate_opts_validate(const ddp_generate_opts_t *o) {
  if (o->max_new_tokens < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--max-new-tokens %d: must be at least 1", o->max_new_tokens);
  if (!(o->temperature >= 0.0f) || !isfinite(o->temperature))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--temperature %g: must be a finite number >= 0 (0: greedy)",
             (double)o->temperature);
  if (o->top_k < 0) DDP_FAIL(DDP_ERR_INVALID_ARG, "--top-k %d: must be >= 0 (0: off)", o->top_k);
  if (!(o->top_p > 0.0f && o->top_p <= 1.0f))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--top-p %g: must be in (0, 1]", (double)o->top_p);
  return DDP_OK;
}

/* Candidates: (probability, token) pairs sorted most likely first, lower
 * token first among equals. */
typedef struct cand {
  float p;
  int32_t tok;
} cand_t;

static int by_prob(const void *a, const void *b) {
  const cand_t *x = a, *y = b;
  if (x->p != y->p) return x->p > y->p ? -1 : 1;
  return (x->tok > y->tok) - (x->tok < y->tok);
}

int32_t ddp_generate_pick(const float *logits, int V, const ddp_generate_opts_t *o, float u,
                          float *scratch) {
  int32_t best = 0;
  for (int v = 1; v < V; ++v)
    if (logits[v] > logits[best]) best = v;
  if (o->temperature == 0.0f || o->top_k == 1) return best;
  cand_t *c = (cand_t *)scratch; /* 2 * V floats hold V pairs */
  const float inv_t = 1.0f / o->temperature;
  double sum = 0.0;
  for (int v = 0; v < V; ++v) {
    c[v] = (cand_t){expf((logits[v] - logits[best]) * inv_t), v};
    sum += c[v].p;
  }
  qsort(c, (size_t)V, sizeof *c, by_prob);
  /* the kept prefix: top-k, then the nucleus of top-p within it */
  int keep = o->top_k > 0 && o->top_k < V ? o->top_k : V;
  if (o->top_p < 1.0f) {
    double acc = 0.0;
    int n = 0;
    while (n < keep && acc < o->top_p * sum) acc += c[n++].p;
    keep = n > 0 ? n : 1;
  }
  double mass = 0.0;
  for (int i = 0; i < keep; ++i) mass += c[i].p;
  const double target = (double)u * mass;
  double acc = 0.0;
  for (int i = 0; i < keep; ++i) {
    acc += c[i].p;
    if (target < acc) return c[i].tok;
  }
  return c[keep - 1].tok; /* u * mass rounded up to the whole mass */
}

/* Draw i of sequence b: 24 random bits as a float in [0, 1). */
static float draw(const ddp_rng_t *rng, uint64_t index) {
  return (float)(ddp_rng_u32(rng, index) >> 8) * (1.0f / 16777216.0f);
}

ddp_status_t ddp_gpt_generate(ddp_gpt_decoder_t *d, const int32_t *prompt, int T,
                              const ddp_generate_opts_t *o, const ddp_rng_t *rng, int32_t *out,
                              int *n_out) {
  if (!d || !prompt || !o || !rng || !out || !n_out)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "generate: NULL argument");
  DDP_CHECK(ddp_generate_opts_validate(o));
  const int B = ddp_gpt_decoder_sequences(d);
  const ddp_gpt_config_t *cfg = ddp_gpt_decoder_config(d);
  const int V = cfg->vocab;
  if (T < 1 || T > cfg->max_seq_len)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "generate: the prompt is %d tokens; the model's context holds 1..%d", T,
             cfg->max_seq_len);
  ddp_status_t st = DDP_OK;
  float *logits = malloc(sizeof(float) * (size_t)B * V);
  float *scratch = malloc(sizeof(float) * 2 * (size_t)V);
  int32_t *rows = malloc(sizeof(int32_t) * (size_t)B * T), *next = malloc(sizeof(int32_t) * B);
  char *done = calloc((size_t)B, 1);
  if (!logits || !scratch || !rows || !next || !done)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, cleanup, "generate: out of host memory");
  for (int b = 0; b < B; ++b) {
    memcpy(rows + (size_t)b * T, prompt, sizeof(int32_t) * (size_t)T);
    n_out[b] = 0;
  }
  DDP_CHECK_GOTO(ddp_gpt_decoder_prefill(d, rows, T, logits), st, cleanup);
  for (int i = 0; i < o->max_new_tokens; ++i) {
    int running = 0;
    for (int b = 0; b < B; ++b) {
      next[b] = o->eot >= 0 ? o->eot : 0; /* what a finished sequence feeds */
      if (done[b]) continue;
      const float *row = logits + (size_t)b * V;
      for (int v = 0; v < V; ++v)
        if (!isfinite(row[v]))
          DDP_FAIL_GOTO(st, DDP_ERR_NUMERIC, cleanup,
                        "generate: sequence %d, new token %d: the logit of token %d is %g "
                        "(non-finite weights?)",
                        b, i, v, (double)row[v]);
      const int32_t tok =
          ddp_generate_pick(logits + (size_t)b * V, V, o, draw(rng, (uint64_t)i * B + b), scratch);
      if (tok == o->eot) {
        done[b] = 1;
        continue;
      }
      out[(size_t)b * o->max_new_tokens + n_out[b]++] = tok;
      next[b] = tok;
      running++;
    }
    /* the last token needs no logits, and a full context takes no more */
    if (!running || i + 1 == o->max_new_tokens || ddp_gpt_decoder_length(d) >= cfg->max_seq_len)
      break;
    DDP_CHECK_GOTO(ddp_gpt_decoder_step(d, next, logits), st, cleanup);
  }
cleanup:
  free(logits);
  free(scratch);
  free(rows);
  free(next);
  free(done);
  return st;
}
