/* Greedy-decoding task accuracy (see task_eval.h). Rows are decoded in
 * groups that respect the model's token budget; each decode step is one eval
 * forward over the group (no KV cache: answers are a few tokens, and this
 * runs at evaluation points, outside the step loop). */
#include "train/task_eval.h"

#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"

typedef struct row {
  int64_t doc;
  int line;           /* offset of the last line's task letter */
  int prompt, answer; /* lengths in tokens */
  int ok;             /* every generated token matched so far */
  int task;           /* DDP_BUILTIN_COPY, ...; -1 when the line has no known letter */
} row_t;

/* The start of document d's last line: just after the '\n' or EOT that
 * precedes its '=' at offset `at`. */
static int line_of(const ddp_corpus_t *val, int64_t d, int at) {
  const int64_t start = val->windows[d].start;
  int k = at;
  while (k > 0) {
    const int32_t t = ddp_corpus_token(val, start + k - 1);
    if (t == '\n' || t == val->eot) break;
    --k;
  }
  return k;
}

/* The task of the line starting at offset `line`: its letter. */
static int task_of(const ddp_corpus_t *val, int64_t d, int line) {
  return ddp_builtin_task_of_letter(ddp_corpus_token(val, val->windows[d].start + line));
}

/* tokens[from, to) as text into out (cap bytes), stopping at the first
 * '\n' (the line's end); bytes outside printable ASCII show as '?'. */
static void line_text(const int32_t *tokens, int from, int to, char *out, size_t cap) {
  size_t k = 0;
  for (int i = from; i < to && k + 1 < cap && tokens[i] != '\n'; ++i)
    out[k++] = tokens[i] >= 32 && tokens[i] < 127 ? (char)tokens[i] : '?';
  out[k] = '\0';
}

/* Keeps row r as its task's example when it is the task's first. */
static void keep_example(const row_t *r, const int32_t *doc, const int32_t *guess,
                         ddp_task_scores_t *by_task) {
  if (r->task < 0 || by_task->example[r->task][0]) return;
  char *ex = by_task->example[r->task];
  line_text(doc, r->line, r->prompt, ex, DDP_TASK_EXAMPLE_LEN);
  const size_t at = strlen(ex);
  line_text(guess, r->prompt, r->prompt + r->answer, ex + at, DDP_TASK_EXAMPLE_LEN - at);
  if (!r->ok)
    line_text(doc, r->prompt, r->prompt + r->answer, by_task->expected[r->task],
              DDP_TASK_EXAMPLE_LEN);
}

static int argmax(const float *x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

/* Decodes rows[0..n) together; T is the longest prompt + answer. Causal
 * attention means the padding after a row's current end cannot influence
 * the position being decoded, so rows of different lengths share forwards. */
static ddp_status_t decode_group(ddp_model_t *m, const ddp_corpus_t *val, row_t *rows, int n, int T,
                                 int32_t *inputs, int32_t *docs, float *logits) {
  const int V = (int)m->n_outputs;
  const ddp_batch_t batch = {.inputs = inputs, .targets = NULL, .B = n, .T = T};
  int steps = 0;
  for (int r = 0; r < n; ++r) {
    const ddp_window_t *w = &val->windows[rows[r].doc];
    int32_t *doc = docs + (size_t)r * T;
    ddp_corpus_read_window(val, w, doc); /* the answer ends with the closing EOT */
    for (int t = 0; t < T; ++t) inputs[r * T + t] = t < rows[r].prompt ? doc[t] : val->eot;
    rows[r].ok = 1;
    if (rows[r].answer > steps) steps = rows[r].answer;
  }
  for (int s = 0; s < steps; ++s) {
    DDP_CHECK(m->ops->eval_forward(m, &batch));
    DDP_CHECK(m->ops->copy_outputs(m, logits, (int64_t)n * T));
    for (int r = 0; r < n; ++r) {
      if (s >= rows[r].answer) continue;
      /* A row that went wrong is decoded on, for its example answer. */
      const int pos = rows[r].prompt + s; /* the token being predicted */
      const int32_t *doc = docs + (size_t)r * T;
      const int guess = argmax(logits + ((size_t)r * T + pos - 1) * V, V);
      rows[r].ok = rows[r].ok && guess == doc[pos];
      inputs[r * T + pos] = guess;
    }
  }
  return DDP_OK;
}

ddp_status_t ddp_task_accuracy(ddp_model_t *m, int64_t tokens_per_batch, int seq_len,
                               const ddp_corpus_t *val, int max_docs, double *acc, int *n_docs,
                               ddp_task_scores_t *by_task) {
  *acc = 0.0;
  *n_docs = 0;
  if (by_task) memset(by_task, 0, sizeof *by_task);
  /* answer_at exists only for the built-in set, whose documents are one
   * window each: document d is windows[d] */
  if (!val->answer_at || val->n_windows != val->n_docs) return DDP_OK;
  if (!m->ops->eval_forward || !m->ops->copy_outputs || m->n_outputs < 1) return DDP_OK;
  const int T_max = seq_len;
  row_t *rows = calloc((size_t)max_docs, sizeof *rows);
  if (!rows) DDP_FAIL(DDP_ERR_OOM, "task accuracy: out of memory");
  int n = 0, T = 0;
  for (int64_t d = 0; d < val->n_docs && n < max_docs; ++d) {
    const int at = val->answer_at[d];
    const int64_t len = val->windows[d].len;
    if (at < 0 || len > T_max) continue;
    /* the answer runs through the line's '\n'; the EOT after it is not
     * scored: whether a document ends after a line is drawn at random, not
     * a function of the prompt */
    const int closing = val->windows[d].ends_doc;
    const int line = line_of(val, d, at);
    rows[n] = (row_t){.doc = d,
                      .line = line,
                      .prompt = at + 1,
                      .answer = (int)(len - at - 1 - closing),
                      .task = task_of(val, d, line)};
    if (len > T) T = (int)len;
    n++;
  }
  ddp_status_t st = DDP_OK;
  int group = T > 0 ? (int)(tokens_per_batch / T) : 0;
  if (group < 1) group = 1;
  int32_t *inputs = malloc(sizeof(int32_t) * (size_t)group * (size_t)(T > 0 ? T : 1));
  int32_t *docs = malloc(sizeof(int32_t) * (size_t)group * (size_t)(T > 0 ? T : 1));
  float *logits =
      malloc(sizeof(float) * (size_t)group * (size_t)(T > 0 ? T : 1) * (size_t)m->n_outputs);
  if (!inputs || !docs || !logits)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "task accuracy: out of memory");
  int solved = 0;
  for (int first = 0; first < n; first += group) {
    const int count = n - first < group ? n - first : group;
    DDP_CHECK_GOTO(decode_group(m, val, rows + first, count, T, inputs, docs, logits), st, out);
    for (int r = first; r < first + count; ++r) {
      solved += rows[r].ok;
      if (by_task && rows[r].task >= 0) {
        by_task->total[rows[r].task]++;
        by_task->solved[rows[r].task] += rows[r].ok;
        keep_example(&rows[r], docs + (size_t)(r - first) * T, inputs + (size_t)(r - first) * T,
                     by_task);
      }
    }
  }
  *n_docs = n;
  *acc = n ? (double)solved / n : 0.0;
out:
  free(logits);
  free(inputs);
  free(docs);
  free(rows);
  return st;
}
