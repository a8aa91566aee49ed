/* GPT-2 BPE tokenizer: loading vocab.json and merges.txt, and decoding
 * (data/bpe.h). Encoding is in bpe_encode.c.
 *
 * GPT-2 writes tokens not as bytes but as strings over a 256-character
 * alphabet (its bytes_to_unicode): printable Latin-1 bytes stand for
 * themselves, the other 68 bytes for U+0100..U+0143, in byte order. The
 * loader turns every token back into its bytes once, so encoding and
 * decoding work on bytes and never see the alphabet again. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/hash.h"
#include "data/bpe_impl.h"
#include "ddptrain/check.h"

#define EOT_TEXT "<|endoftext|>"

/* GPT-2's bytes_to_unicode inverted: alphabet code point -> byte, -1 when
 * the code point is not in the alphabet. */
static void alphabet_inverse(int cp_to_byte[324]) {
  int n = 0;
  for (int cp = 0; cp < 324; ++cp) cp_to_byte[cp] = -1;
  for (int b = 0; b < 256; ++b) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
    cp_to_byte[printable ? b : 256 + n++] = b;
  }
}

/* Turns a token written in the alphabet (s[0..n)) into bytes (out, at most
 * n bytes). Returns the byte count, or -1 when s has a character outside the
 * alphabet or is not UTF-8. */
static long alphabet_to_bytes(const int cp_to_byte[324], const char *s, size_t n, char *out) {
  size_t i = 0;
  long k = 0;
  while (i < n) {
    uint32_t cp;
    int len = bpe_utf8_next((const unsigned char *)s + i, n - i, &cp);
    if (len == 0 || cp >= 324 || cp_to_byte[cp] < 0) return -1;
    out[k++] = (char)cp_to_byte[cp];
    i += (size_t)len;
  }
  return k;
}

/* ---- token bytes -> id, used only while loading ------------------------- */

typedef struct tok_index {
  int32_t *slot; /* id, or -1 */
  uint32_t mask;
} tok_index_t;

static const char *tok_bytes(const ddp_bpe_t *t, int32_t id, size_t *len) {
  *len = t->tok_off[id + 1] - t->tok_off[id];
  return t->blob + t->tok_off[id];
}

static uint32_t bytes_hash(const char *s, size_t n) {
  return (uint32_t)ddp_fnv1a64(DDP_FNV1A64_INIT, s, n);
}

static int32_t index_find(const tok_index_t *ix, const ddp_bpe_t *t, const char *s, size_t n) {
  for (uint32_t i = bytes_hash(s, n) & ix->mask;; i = (i + 1) & ix->mask) {
    int32_t id = ix->slot[i];
    if (id < 0) return -1;
    size_t len;
    const char *b = tok_bytes(t, id, &len);
    if (len == n && memcmp(b, s, n) == 0) return id;
  }
}

static uint32_t table_size(size_t n) {
  uint32_t size = 16;
  while (size < 2 * n) size *= 2;
  return size;
}

/* ---- vocab.json ----------------------------------------------------------- */

static ddp_status_t load_vocab(ddp_bpe_t *t, const char *path, const int cp_to_byte[324],
                               tok_index_t *ix) {
  ddp_status_t st = DDP_OK;
  FILE *probe = fopen(path, "rb");
  if (!probe) DDP_FAIL(DDP_ERR_IO, "tokenizer: cannot read '%s': %s", path, strerror(errno));
  fclose(probe);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root)
    DDP_FAIL(DDP_ERR_FORMAT, "tokenizer: %s:%d: malformed JSON: %s", path, err.line, err.text);
  char **bytes = NULL; /* per id, its bytes, until the blob is built */
  size_t *lens = NULL;
  const char **names = NULL;
  size_t n = json_is_object(root) ? json_object_size(root) : 0;
  if (n == 0)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done,
                  "tokenizer: %s: expected a non-empty JSON object of token -> id", path);
  if (n > INT32_MAX / 2)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done, "tokenizer: %s: %zu tokens are more than supported",
                  path, n);
  bytes = calloc(n, sizeof *bytes);
  lens = calloc(n, sizeof *lens);
  names = calloc(n, sizeof *names);
  if (!bytes || !lens || !names)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, done, "tokenizer: %s: out of memory", path);
  const char *key;
  json_t *val;
  size_t total = 0;
  json_object_foreach(root, key, val) {
    json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
    if (id < 0 || (size_t)id >= n)
      DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done,
                    "tokenizer: %s: token \"%s\" has id %s; the ids of %zu tokens must be 0..%zu",
                    path, key, json_is_integer(val) ? "out of range" : "that is not an integer", n,
                    n - 1);
    if (names[id])
      DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done,
                    "tokenizer: %s: id %lld is given to both \"%s\" and \"%s\"", path,
                    (long long)id, names[id], key);
    size_t klen = strlen(key);
    if (!(bytes[id] = malloc(klen + 1)))
      DDP_FAIL_GOTO(st, DDP_ERR_OOM, done, "tokenizer: out of memory");
    long blen = alphabet_to_bytes(cp_to_byte, key, klen, bytes[id]);
    if (blen <= 0)
      DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done,
                    "tokenizer: %s: token \"%s\" is empty or has a character outside GPT-2's "
                    "byte alphabet",
                    path, key);
    names[id] = key;
    lens[id] = (size_t)blen;
    total += (size_t)blen;
  }
  if (total > UINT32_MAX)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done, "tokenizer: %s: the tokens are too long in total",
                  path);
  t->n_vocab = (int32_t)n;
  t->blob = malloc(total ? total : 1);
  t->tok_off = malloc((n + 1) * sizeof *t->tok_off);
  ix->mask = table_size(n) - 1;
  ix->slot = malloc(((size_t)ix->mask + 1) * sizeof *ix->slot);
  if (!t->blob || !t->tok_off || !ix->slot)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, done, "tokenizer: %s: out of memory", path);
  memset(ix->slot, 0xff, ((size_t)ix->mask + 1) * sizeof *ix->slot);
  uint32_t off = 0;
  for (size_t id = 0; id < n; ++id) {
    t->tok_off[id] = off;
    memcpy(t->blob + off, bytes[id], lens[id]);
    off += (uint32_t)lens[id];
    t->tok_off[id + 1] = off;
    /* Distinct strings in a bijective alphabet are distinct bytes, and JSON
     * object keys are distinct, so no two ids can collide here. */
    uint32_t i = bytes_hash(bytes[id], lens[id]) & ix->mask;
    while (ix->slot[i] >= 0) i = (i + 1) & ix->mask;
    ix->slot[i] = (int32_t)id;
  }
  for (int b = 0; b < 256; ++b) {
    char c = (char)b;
    if ((t->byte_id[b] = index_find(ix, t, &c, 1)) < 0)
      DDP_FAIL_GOTO(
          st, DDP_ERR_FORMAT, done,
          "tokenizer: %s: no token for byte 0x%02x; a byte-level vocabulary needs all 256", path,
          b);
  }
  if ((t->eot = index_find(ix, t, EOT_TEXT, strlen(EOT_TEXT))) < 0)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done, "tokenizer: %s: no \"" EOT_TEXT "\" token (the EOT)",
                  path);
done:
  if (bytes)
    for (size_t i = 0; i < n; ++i) free(bytes[i]);
  free(bytes);
  free(lens);
  free(names);
  json_decref(root);
  return st;
}

/* ---- merges.txt ----------------------------------------------------------- */

static ddp_status_t add_merge(ddp_bpe_t *t, const char *path, long lineno, int32_t a, int32_t b,
                              int32_t merged, int32_t rank) {
  uint32_t i = bpe_pair_hash(a, b) & t->merge_mask;
  for (; t->merges[i].left >= 0; i = (i + 1) & t->merge_mask)
    if (t->merges[i].left == a && t->merges[i].right == b)
      DDP_FAIL(DDP_ERR_FORMAT, "tokenizer: %s:%ld: the same merge as rank %d (a repeated line)",
               path, lineno, (int)t->merges[i].rank);
  t->merges[i] = (bpe_merge_t){a, b, rank, merged};
  return DDP_OK;
}

static ddp_status_t load_merges(ddp_bpe_t *t, const char *path, const int cp_to_byte[324],
                                const tok_index_t *ix) {
  ddp_status_t st = DDP_OK;
  FILE *f = fopen(path, "rb");
  if (!f) DDP_FAIL(DDP_ERR_IO, "tokenizer: cannot read '%s': %s", path, strerror(errno));
  char *line = NULL, *buf = NULL;
  size_t cap = 0;
  ssize_t got;
  long lines = 0;
  /* Sized by the line count, so the table never grows while it is filled. */
  while ((got = getline(&line, &cap, f)) >= 0) ++lines;
  if (ferror(f))
    DDP_FAIL_GOTO(st, DDP_ERR_IO, done, "tokenizer: cannot read '%s': %s", path, strerror(errno));
  if (lines >= INT32_MAX / 2)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done, "tokenizer: %s: too many lines (%ld)", path, lines);
  t->merge_mask = table_size((size_t)lines) - 1;
  t->merges = malloc(((size_t)t->merge_mask + 1) * sizeof *t->merges);
  if (!t->merges) DDP_FAIL_GOTO(st, DDP_ERR_OOM, done, "tokenizer: %s: out of memory", path);
  memset(t->merges, 0xff, ((size_t)t->merge_mask + 1) * sizeof *t->merges);
  rewind(f);
  long lineno = 0;
  while ((got = getline(&line, &cap, f)) >= 0) {
    ++lineno;
    size_t n = (size_t)got;
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) --n;
    line[n] = '\0';
    if (lineno == 1 && strncmp(line, "#version", 8) == 0) continue;
    char *sp = memchr(line, ' ', n);
    if (!sp || sp == line || sp + 1 == line + n || memchr(sp + 1, ' ', (size_t)(line + n - sp - 1)))
      DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done,
                    "tokenizer: %s:%ld: expected two tokens separated by one space, got \"%s\"",
                    path, lineno, line);
    free(buf);
    if (!(buf = malloc(n + 1))) DDP_FAIL_GOTO(st, DDP_ERR_OOM, done, "tokenizer: out of memory");
    size_t la = (size_t)(sp - line);
    long ba = alphabet_to_bytes(cp_to_byte, line, la, buf);
    long bb = ba < 0 ? -1 : alphabet_to_bytes(cp_to_byte, sp + 1, n - la - 1, buf + ba);
    if (bb < 0)
      DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done,
                    "tokenizer: %s:%ld: \"%s\" has a character outside GPT-2's byte alphabet", path,
                    lineno, line);
    int32_t a = index_find(ix, t, buf, (size_t)ba), b = index_find(ix, t, buf + ba, (size_t)bb);
    int32_t merged = index_find(ix, t, buf, (size_t)(ba + bb));
    if (a < 0 || b < 0)
      DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done, "tokenizer: %s:%ld: merge of unknown token \"%.*s\"",
                    path, lineno, a < 0 ? (int)la : (int)(n - la - 1), a < 0 ? line : sp + 1);
    if (merged < 0)
      DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done,
                    "tokenizer: %s:%ld: merging \"%s\" gives a token that is not in vocab.json",
                    path, lineno, line);
    DDP_CHECK_GOTO(add_merge(t, path, lineno, a, b, merged, t->n_merges), st, done);
    t->n_merges++;
  }
  if (ferror(f))
    DDP_FAIL_GOTO(st, DDP_ERR_IO, done, "tokenizer: cannot read '%s': %s", path, strerror(errno));
done:
  free(buf);
  free(line);
  fclose(f);
  return st;
}

/* ---- the API -------------------------------------------------------------- */

ddp_status_t ddp_bpe_load(const char *dir, ddp_bpe_t **out) {
  if (!dir || !out) DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_bpe_load: NULL argument");
  *out = NULL;
  ddp_status_t st = DDP_OK;
  int cp_to_byte[324];
  alphabet_inverse(cp_to_byte);
  tok_index_t ix = {0};
  size_t plen = strlen(dir) + sizeof "/vocab.json" + 1;
  char *path = malloc(plen);
  ddp_bpe_t *t = calloc(1, sizeof *t);
  if (!path || !t) DDP_FAIL_GOTO(st, DDP_ERR_OOM, fail, "tokenizer '%s': out of memory", dir);
  snprintf(path, plen, "%s/vocab.json", dir);
  DDP_CHECK_GOTO(load_vocab(t, path, cp_to_byte, &ix), st, fail);
  snprintf(path, plen, "%s/merges.txt", dir);
  DDP_CHECK_GOTO(load_merges(t, path, cp_to_byte, &ix), st, fail);
  DDP_CHECK_GOTO(ddp_bpe_regex_compile(t), st, fail);
  free(ix.slot);
  free(path);
  *out = t;
  return DDP_OK;
fail:
  free(ix.slot);
  free(path);
  ddp_bpe_free(t);
  return st;
}

void ddp_bpe_free(ddp_bpe_t *tok) {
  if (!tok) return;
  ddp_bpe_regex_free(tok);
  free(tok->blob);
  free(tok->tok_off);
  free(tok->merges);
  free(tok);
}

int32_t ddp_bpe_vocab_size(const ddp_bpe_t *tok) {
  return tok->n_vocab;
}

int32_t ddp_bpe_eot(const ddp_bpe_t *tok) {
  return tok->eot;
}

const char *ddp_bpe_token_bytes(const ddp_bpe_t *tok, int32_t id, size_t *len) {
  if (id < 0 || id >= tok->n_vocab) return NULL;
  return tok_bytes(tok, id, len);
}

ddp_status_t ddp_bpe_decode(const ddp_bpe_t *tok, const int32_t *ids, size_t n, char **out,
                            size_t *out_len) {
  size_t total = 0, len;
  for (size_t i = 0; i < n; ++i) {
    if (!ddp_bpe_token_bytes(tok, ids[i], &len))
      DDP_FAIL(DDP_ERR_INVALID_ARG, "bpe decode: token %zu is %d, outside the vocabulary [0, %d)",
               i, (int)ids[i], (int)tok->n_vocab);
    total += len;
  }
  char *s = malloc(total + 1);
  if (!s) DDP_FAIL(DDP_ERR_OOM, "bpe decode: out of memory for %zu bytes", total);
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const char *b = ddp_bpe_token_bytes(tok, ids[i], &len);
    memcpy(s + k, b, len);
    k += len;
  }
  s[k] = '\0';
  *out = s;
  *out_len = k;
  return DDP_OK;
}
