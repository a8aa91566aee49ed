/* The built-in data set: synthetic byte-level documents a small GPT learns
 * within two minutes of CPU training, so an end-to-end run needs no download.
 *
 * A document is EOT followed by task lines, each line's task drawn by the
 * weights of a mix (--tasks; equal weights draw exactly the lines of the
 * data set before mixes existed):
 *   copy     c:hello=hello\n
 *   reverse  r:hello=olleh\n
 *   sort     s:hello=ehllo\n
 *   add      a:123+4567=4690\n
 * The answer span of a line is everything after its '=' up to and including
 * '\n'; it is a function of the prompt, so greedy decoding can be scored
 * exactly. The fixed structure (task letter, ':', '=', '\n', EOT) is learnt
 * in a few steps; copy takes a few hundred steps more (the model must learn
 * to look back to the operand), reverse and sort longer, and add keeps its
 * headroom.
 *
 * Lengths are heavy-tailed like real text: the number of lines is log-normal
 * (median 2, sigma 1.25), and a document stops at the first line that would
 * take it past max_len — so most documents are short and a few percent end
 * within one line of max_len, which is what the token-budget batcher must
 * cope with.
 *
 * Determinism: document i of a split is a pure function of (seed, mix,
 * split, i),
 * drawn from its own Philox stream derived from the split's stream (train and
 * val use different streams), independent of how many documents are made.
 * Different streams alone would still let a short line such as "c:a=a\n"
 * occur in both splits by chance, which would leak held-out answers; so each
 * line is also assigned to a split by a hash of its text (1/8 of all possible
 * lines are validation lines) and redrawn until it belongs to the document's
 * split. No task line of one split ever occurs in the other. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/data.h"
#include "ddptrain/rng.h"
#include "core/hash.h"

/* Operands of copy/reverse/sort have 1..5 letters. The bound decides how
 * fast a small model learns: the default job (2 layers, 2 CPU cores, about
 * two minutes) solves about 78% of held-out copy lines with 1..5 letters,
 * 49% with 1..6 and 26% with the 1..8 of earlier versions, where the model
 * has yet to learn to look back far enough. */
#define MAX_LETTERS 5
#define MAX_DIGITS 4 /* addends: 1..4 digits */
/* "c:" + 5 + "=" + 5 + "\n" is 14; the add line is longer: "a:" + 4 + "+" + 4 +
 * "=" + 5 + "\n" */
#define LETTERS_LINE (2 + MAX_LETTERS + 1 + MAX_LETTERS + 1)
#define ADD_LINE (2 + MAX_DIGITS + 1 + MAX_DIGITS + 1 + MAX_DIGITS + 1 + 1)
#define MAX_LINE (LETTERS_LINE > ADD_LINE ? LETTERS_LINE : ADD_LINE)
_Static_assert(1 + MAX_LINE == DDP_BUILTIN_MIN_LEN, "DDP_BUILTIN_MIN_LEN is EOT + longest line");

#define LINES_MU 0.69314718055994531 /* ln 2: median two lines */
#define LINES_SIGMA 1.25
#define LINES_MAX 100000 /* far beyond any max_len; keeps exp() finite */

/* "builtin" in ASCII: the builtin set's stream, apart from the sampler's. */
#define BUILTIN_STREAM UINT64_C(0x6e69746c697562)
#define VAL_HASH_BITS 3 /* 1 line in 2^3 belongs to validation */
/* Redraws of one line before giving up: the chance of needing more than this
 * is (7/8)^10000, i.e. never; the bound only keeps the loop provably finite. */
#define MAX_ATTEMPTS 10000

typedef struct line {
  char text[MAX_LINE + 1];
  int len;
  int eq; /* offset of '=' in text */
} line_t;

/* The split a line belongs to: FNV-1a 64 with the MurmurHash3 finaliser so
 * the top bits are well mixed. Ten lines, fixed forever (changing it changes
 * the data set); a checksum library would add a dependency for no gain. */
static int line_split(const line_t *ln) {
  uint64_t h = ddp_fnv1a64(DDP_FNV1A64_INIT, ln->text, (size_t)ln->len);
  h ^= h >> 33;
  h *= UINT64_C(0xff51afd7ed558ccd);
  h ^= h >> 33;
  h *= UINT64_C(0xc4ceb9fe1a85ec53);
  h ^= h >> 33;
  return (h >> (64 - VAL_HASH_BITS)) == 0 ? DDP_SPLIT_VAL : DDP_SPLIT_TRAIN;
}

static int cmp_char(const void *a, const void *b) {
  return *(const char *)a - *(const char *)b;
}

static const char *const k_task_names[DDP_BUILTIN_TASKS] = {"copy", "reverse", "sort", "add"};
/* The letter that starts each task's lines ("c:abc=abc"). */
static const char k_task_letters[DDP_BUILTIN_TASKS] = {'c', 'r', 's', 'a'};

const char *ddp_builtin_task_name(int task) {
  return task >= 0 && task < DDP_BUILTIN_TASKS ? k_task_names[task] : "?";
}

int ddp_builtin_task_of_letter(int32_t letter) {
  for (int k = 0; k < DDP_BUILTIN_TASKS; ++k)
    if (letter == k_task_letters[k]) return k;
  return -1;
}

/* Writes why a mix is refused, for the caller to report (options.c makes
 * it the one line of a usage error). */
#define MIX_REFUSE(...)                                      \
  do {                                                       \
    if (why && why_len) snprintf(why, why_len, __VA_ARGS__); \
    return DDP_ERR_INVALID_ARG;                              \
  } while (0)

ddp_status_t ddp_builtin_mix_parse(const char *text, ddp_builtin_mix_t *mix, char *why,
                                   size_t why_len) {
  if (!text || !mix) MIX_REFUSE("no task mix given");
  ddp_builtin_mix_t m = {{0}};
  int seen[DDP_BUILTIN_TASKS] = {0};
  const char *p = text;
  for (;;) {
    const size_t n = strcspn(p, ",=");
    int task = -1;
    for (int k = 0; k < DDP_BUILTIN_TASKS; ++k)
      if (strlen(k_task_names[k]) == n && strncmp(p, k_task_names[k], n) == 0) task = k;
    if (task < 0)
      MIX_REFUSE(
          "task mix '%s': '%.*s' is not a task (copy, reverse, sort or add, each "
          "optionally =WEIGHT, comma-separated)",
          text, (int)n, p);
    if (seen[task]++) MIX_REFUSE("task mix '%s': %s is named twice", text, k_task_names[task]);
    p += n;
    long w = 1;
    if (*p == '=') {
      char *end;
      errno = 0;
      w = strtol(++p, &end, 10);
      if (end == p || (*end && *end != ',') || errno || w < 0 || w > DDP_BUILTIN_MAX_WEIGHT)
        MIX_REFUSE("task mix '%s': the weight of %s is not a whole number from 0 to %d", text,
                   k_task_names[task], DDP_BUILTIN_MAX_WEIGHT);
      p = end;
    }
    m.weight[task] = (uint32_t)w;
    if (!*p) break;
    ++p; /* the ',' */
  }
  uint32_t total = 0;
  for (int k = 0; k < DDP_BUILTIN_TASKS; ++k) total += m.weight[k];
  if (total == 0) MIX_REFUSE("task mix '%s': every weight is 0 (no task to draw)", text);
  *mix = m;
  return DDP_OK;
}

/* One random task line from draws *draw, *draw + 1, ... of `r`: the task
 * by weight, then its operands. With equal weights the task draw is
 * below(4), the same draw as before weights existed, so the equal mix is
 * the data set it always was. */
static void make_line(const ddp_rng_t *r, const ddp_builtin_mix_t *mix, uint64_t *draw,
                      line_t *ln) {
  uint64_t d = *draw;
  uint32_t total = 0;
  for (int k = 0; k < DDP_BUILTIN_TASKS; ++k) total += mix->weight[k];
  uint32_t pick = (uint32_t)ddp_rng_below(r, d++, total);
  int task = 0;
  while (pick >= mix->weight[task]) pick -= mix->weight[task++];
  if (task == DDP_BUILTIN_ADD) {
    long v[2];
    for (int i = 0; i < 2; ++i) {
      const int digits = 1 + (int)ddp_rng_below(r, d++, MAX_DIGITS);
      long lo = 1;
      for (int k = 1; k < digits; ++k) lo *= 10;
      if (digits == 1) lo = 0;
      const long hi = digits == 1 ? 10 : lo * 10;
      v[i] = lo + (long)ddp_rng_below(r, d++, (uint64_t)(hi - lo));
    }
    ln->eq = snprintf(ln->text, sizeof ln->text, "a:%ld+%ld", v[0], v[1]);
    ln->len = ln->eq +
              snprintf(ln->text + ln->eq, sizeof ln->text - (size_t)ln->eq, "=%ld\n", v[0] + v[1]);
  } else {
    const int k = 1 + (int)ddp_rng_below(r, d++, MAX_LETTERS);
    char *p = ln->text;
    *p++ = k_task_letters[task];
    *p++ = ':';
    char *operand = p;
    for (int i = 0; i < k; ++i) *p++ = (char)('a' + ddp_rng_below(r, d++, 26));
    ln->eq = (int)(p - ln->text);
    *p++ = '=';
    char *answer = p;
    memcpy(answer, operand, (size_t)k);
    if (task == DDP_BUILTIN_REVERSE) {
      for (int i = 0; i < k / 2; ++i) {
        const char t = answer[i];
        answer[i] = answer[k - 1 - i];
        answer[k - 1 - i] = t;
      }
    } else if (task == DDP_BUILTIN_SORT) {
      qsort(answer, (size_t)k, 1, cmp_char);
    }
    p += k;
    *p++ = '\n';
    *p = '\0';
    ln->len = (int)(p - ln->text);
  }
  *draw = d;
}

ddp_status_t ddp_builtin_document(uint64_t seed, const ddp_builtin_mix_t *mix, int split,
                                  int64_t index, int max_len, int32_t *out, int *len,
                                  int *answer_at) {
  if (!out || !len || !answer_at) DDP_FAIL(DDP_ERR_INVALID_ARG, "builtin_document: NULL argument");
  const ddp_builtin_mix_t equal = {{1, 1, 1, 1}};
  if (!mix) mix = &equal;
  uint32_t total = 0;
  for (int k = 0; k < DDP_BUILTIN_TASKS; ++k) {
    if (mix->weight[k] > DDP_BUILTIN_MAX_WEIGHT)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "builtin data: weight %u of %s is above %d", mix->weight[k],
               k_task_names[k], DDP_BUILTIN_MAX_WEIGHT);
    total += mix->weight[k];
  }
  if (total == 0) DDP_FAIL(DDP_ERR_INVALID_ARG, "builtin data: every task weight is 0");
  if (split != DDP_SPLIT_TRAIN && split != DDP_SPLIT_VAL)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "builtin data: split %d is neither train (0) nor val (1)", split);
  if (max_len < DDP_BUILTIN_MIN_LEN)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "builtin data: max_len %d is below %d, the longest task line plus its EOT", max_len,
             DDP_BUILTIN_MIN_LEN);
  if (index < 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "builtin data: negative document index %lld", (long long)index);

  /* One stream per purpose (ddptrain/rng.h): the line count from a normal
   * stream, the lines from a `below` stream, both children of the document. */
  ddp_rng_t root, split_rng, doc_rng, count_rng, line_rng;
  ddp_rng_init(&root, seed, BUILTIN_STREAM);
  ddp_rng_derive(&root, (uint64_t)split, &split_rng);
  ddp_rng_derive(&split_rng, (uint64_t)index, &doc_rng);
  ddp_rng_derive(&doc_rng, 0, &count_rng);
  ddp_rng_derive(&doc_rng, 1, &line_rng);

  float z;
  ddp_rng_fill_normal(&count_rng, 0, 0.0f, 1.0f, &z, 1);
  const double x = exp(LINES_MU + LINES_SIGMA * (double)z);
  const int n_lines = x >= LINES_MAX ? LINES_MAX : x < 1.5 ? 1 : (int)(x + 0.5);

  int n = 0, eq = -1;
  out[n++] = DDP_BUILTIN_EOT;
  uint64_t draw = 0;
  for (int l = 0; l < n_lines; ++l) {
    line_t ln;
    int attempt = 0;
    do {
      if (++attempt > MAX_ATTEMPTS)
        DDP_FAIL(DDP_ERR_INTERNAL, "builtin data: no line for split %d after %d draws", split,
                 MAX_ATTEMPTS);
      make_line(&line_rng, mix, &draw, &ln);
    } while (line_split(&ln) != split);
    if (n + ln.len > max_len) break; /* the clip: never true for the first line */
    eq = n + ln.eq;
    for (int i = 0; i < ln.len; ++i) out[n++] = (unsigned char)ln.text[i];
  }
  *len = n;
  *answer_at = eq;
  return DDP_OK;
}

ddp_status_t ddp_builtin_corpus(ddp_corpus_t *c, uint64_t seed, const ddp_builtin_mix_t *mix,
                                int split, int64_t n_docs, int max_len, int seq_len) {
  if (!c) DDP_FAIL(DDP_ERR_INVALID_ARG, "builtin_corpus: NULL corpus");
  memset(c, 0, sizeof *c);
  if (n_docs < 1 || n_docs > INT32_MAX)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "builtin data: %lld documents requested (1 .. %d)",
             (long long)n_docs, INT32_MAX);
  if (max_len < DDP_BUILTIN_MIN_LEN)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "builtin data: max_len %d is below %d, the longest task line plus its EOT", max_len,
             DDP_BUILTIN_MIN_LEN);

  ddp_status_t st = DDP_OK;
  int32_t *doc = malloc((size_t)max_len * sizeof *doc);
  int32_t *answer = malloc((size_t)n_docs * sizeof *answer);
  /* Documents average ~38 tokens at max_len 128; grow by doubling. */
  size_t cap = (size_t)n_docs * 48, used = 0;
  int32_t *all = malloc(cap * sizeof *all);
  if (!doc || !answer || !all)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, free_buffers, "builtin data: out of memory for %lld documents",
                  (long long)n_docs);
  for (int64_t i = 0; i < n_docs; ++i) {
    int len, eq;
    DDP_CHECK_GOTO(ddp_builtin_document(seed, mix, split, i, max_len, doc, &len, &eq), st,
                   free_buffers);
    if (used + (size_t)len > cap) {
      size_t ncap = cap * 2 > used + (size_t)len ? cap * 2 : used + (size_t)len;
      int32_t *grown = realloc(all, ncap * sizeof *all);
      if (!grown)
        DDP_FAIL_GOTO(st, DDP_ERR_OOM, free_buffers, "builtin data: out of memory at document %lld",
                      (long long)i);
      all = grown;
      cap = ncap;
    }
    memcpy(all + used, doc, (size_t)len * sizeof *doc);
    used += (size_t)len;
    answer[i] = eq;
  }
  DDP_CHECK_GOTO(ddp_corpus_from_tokens(c, all, (int64_t)used, DDP_BUILTIN_EOT, DDP_BUILTIN_VOCAB,
                                        seq_len, "builtin"),
                 st, free_buffers);
  if (c->n_docs != n_docs) {
    const long long indexed = (long long)c->n_docs;
    ddp_corpus_destroy(c);
    DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, free_buffers,
                  "builtin data: %lld documents generated but %lld indexed", (long long)n_docs,
                  indexed);
  }
  /* answer_at[i] describes windows[i], which holds only while no document
   * is cut into several windows; otherwise there is no task accuracy. */
  if (max_len <= seq_len) { /* max_len tokens and the closing EOT */
    c->answer_at = answer;
    answer = NULL;
  }

free_buffers:
  free(all);
  free(answer);
  free(doc);
  return st;
}
