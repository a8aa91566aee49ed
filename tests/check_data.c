/* The data side: shard round trips and every malformed-shard error, atomic
 * writes, the corpus's document and window tables, the built-in data set
 * (determinism, disjoint splits, length distribution, correct answers) and
 * the micro-batch plan (budget, padding, coverage, shuffling, purity). */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_util.h"
#include "ddptrain/data.h"

/* ck_assert records a mark point on every call (a write to the parent
 * process in fork mode), which turns per-token checks over a corpus into
 * seconds; hot loops use these, which call into Check only on failure. */
#define expect(cond)                                                    \
  do {                                                                  \
    if (!(cond)) ck_abort_msg("line %d: '%s' failed", __LINE__, #cond); \
  } while (0)
#define expect_eq(a, b)                                                                    \
  do {                                                                                     \
    const long long expect_a_ = (long long)(a), expect_b_ = (long long)(b);                \
    if (expect_a_ != expect_b_)                                                            \
      ck_abort_msg("line %d: %s == %s failed (%lld != %lld)", __LINE__, #a, #b, expect_a_, \
                   expect_b_);                                                             \
  } while (0)

static char g_dir[64];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp_check_data_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void teardown(void) {
  DIR *d = opendir(g_dir);
  if (d) {
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      snprintf(path, sizeof path, "%s/%s", g_dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(g_dir);
}

static void path_in_dir(char *out, size_t n, const char *name) {
  snprintf(out, n, "%s/%s", g_dir, name);
}

static int file_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

static long long file_size(const char *path) {
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  return (long long)sb.st_size;
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

/* A hand-made shard: header words h[0..4] (rest zero), then `payload`. */
static void write_raw(const char *path, const int32_t h[5], const void *payload, size_t bytes) {
  unsigned char hdr[DDP_SHARD_HEADER_BYTES] = {0};
  for (int i = 0; i < 5; ++i) put32(hdr + 4 * i, (uint32_t)h[i]);
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(hdr, 1, sizeof hdr, f), sizeof hdr);
  if (bytes) ck_assert_uint_eq(fwrite(payload, 1, bytes, f), bytes);
  ck_assert_int_eq(fclose(f), 0);
}

/* Reads `path`, expects `want`, and returns the log (caller frees) after
 * checking that it names the file. */
static char *read_expect_error(const char *path, ddp_status_t want) {
  ddp_corpus_t c;
  ddp_test_log_start();
  ddp_status_t st = ddp_shard_read(&c, path, 64);
  char *log = ddp_test_log_stop();
  ck_assert_msg(st == want, "read of %s gave %s, want %s; log: %s", path, ddp_status_name(st),
                ddp_status_name(want), log);
  ck_assert_ptr_null(c.tokens);
  ddp_assert_contains(log, path);
  return log;
}

/* ---- shards ------------------------------------------------------------------ */

static void round_trip(int32_t vocab, int64_t n, int32_t magic, int32_t version, int tsize) {
  int32_t *tok = malloc((size_t)n * sizeof *tok);
  const int32_t eot = vocab - 1;
  for (int64_t i = 0; i < n; ++i) tok[i] = (int32_t)((i * 2654435761u) % (uint32_t)vocab);
  tok[0] = eot;
  tok[n - 1] = vocab - 2; /* the largest non-EOT id survives the narrowing */
  char path[256];
  path_in_dir(path, sizeof path, "rt.bin");
  ck_assert_int_eq(ddp_shard_write(path, tok, n, eot, vocab), DDP_OK);
  ck_assert_int_eq(file_size(path), DDP_SHARD_HEADER_BYTES + n * tsize);
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  ck_assert(!file_exists(tmp));

  unsigned char hdr[20];
  FILE *f = fopen(path, "rb");
  ck_assert_uint_eq(fread(hdr, 1, sizeof hdr, f), sizeof hdr);
  fclose(f);
  const int32_t want[5] = {magic, version, (int32_t)n, eot, vocab};
  for (int i = 0; i < 5; ++i) {
    const uint32_t v = (uint32_t)hdr[4 * i] | (uint32_t)hdr[4 * i + 1] << 8 |
                       (uint32_t)hdr[4 * i + 2] << 16 | (uint32_t)hdr[4 * i + 3] << 24;
    ck_assert_int_eq((int32_t)v, want[i]);
  }

  ddp_corpus_t c;
  ck_assert_int_eq(ddp_shard_read(&c, path, 128), DDP_OK);
  ck_assert_int_eq(c.n_tokens, n);
  ck_assert_int_eq(c.eot, eot);
  ck_assert_int_eq(c.vocab, vocab);
  ck_assert_int_eq(c.seq_len, 128);
  ck_assert_int_eq(memcmp(c.tokens, tok, (size_t)n * sizeof *tok), 0);
  ck_assert_int_gt(c.n_windows, 0);
  ddp_corpus_destroy(&c);
  free(tok);
}

START_TEST(test_data_shard_round_trip_uint16) {
  round_trip(DDP_BUILTIN_VOCAB, 5000, DDP_SHARD_MAGIC_U16, DDP_SHARD_VERSION_U16, 2);
  round_trip(65536, 100000, DDP_SHARD_MAGIC_U16, DDP_SHARD_VERSION_U16, 2); /* the edge */
}
END_TEST

START_TEST(test_data_shard_round_trip_uint32) {
  round_trip(65537, 5000, DDP_SHARD_MAGIC_U32, DDP_SHARD_VERSION_U32, 4);
  round_trip(200019, 70000, DDP_SHARD_MAGIC_U32, DDP_SHARD_VERSION_U32, 4); /* > one chunk */
}
END_TEST

START_TEST(test_data_shard_without_vocab_fields_is_gpt2) {
  /* A plain llm.c shard leaves [3] and [4] zero. */
  const uint16_t tok[6] = {50256, 15496, 995, 50256, 40, 1101};
  char path[256];
  path_in_dir(path, sizeof path, "gpt2.bin");
  const int32_t h[5] = {DDP_SHARD_MAGIC_U16, 1, 6, 0, 0};
  write_raw(path, h, tok, sizeof tok);
  ddp_corpus_t c;
  ck_assert_int_eq(ddp_shard_read(&c, path, 1024), DDP_OK);
  ck_assert_int_eq(c.eot, DDP_SHARD_GPT2_EOT);
  ck_assert_int_eq(c.vocab, DDP_SHARD_GPT2_VOCAB);
  ck_assert_int_eq(c.n_docs, 2);
  ck_assert_int_eq(c.tokens[1], 15496);
  ddp_corpus_destroy(&c);
}
END_TEST

START_TEST(test_data_shard_eot_id_zero_round_trips) {
  /* [3] = 0 is a real EOT id when [4] is set. */
  const int32_t tok[5] = {0, 5, 6, 0, 7};
  char path[256];
  path_in_dir(path, sizeof path, "eot0.bin");
  ck_assert_int_eq(ddp_shard_write(path, tok, 5, 0, 10), DDP_OK);
  ddp_corpus_t c;
  ck_assert_int_eq(ddp_shard_read(&c, path, 16), DDP_OK);
  ck_assert_int_eq(c.eot, 0);
  ck_assert_int_eq(c.vocab, 10);
  ck_assert_int_eq(c.n_docs, 2);
  ddp_corpus_destroy(&c);
}
END_TEST

START_TEST(test_data_shard_missing_or_unreadable_file_is_io_error) {
  char path[256];
  path_in_dir(path, sizeof path, "nope.bin");
  char *log = read_expect_error(path, DDP_ERR_IO);
  ddp_assert_contains(log, "cannot open shard");
  ddp_assert_contains(log, "No such file");
  free(log);
  log = read_expect_error(g_dir, DDP_ERR_IO); /* a directory */
  ddp_assert_contains(log, "not a regular file");
  free(log);
}
END_TEST

START_TEST(test_data_shard_bad_magic_is_format_error) {
  char path[256];
  path_in_dir(path, sizeof path, "magic.bin");
  const uint16_t tok[2] = {256, 1};
  const int32_t h[5] = {12345, 1, 2, 256, 257};
  write_raw(path, h, tok, sizeof tok);
  char *log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "bad magic 12345 at byte 0");
  free(log);
}
END_TEST

START_TEST(test_data_shard_bad_version_is_format_error) {
  char path[256];
  path_in_dir(path, sizeof path, "version.bin");
  const uint16_t tok[2] = {256, 1};
  const int32_t h[5] = {DDP_SHARD_MAGIC_U16, 7, 2, 256, 257}; /* v7 is for the uint32 magic */
  write_raw(path, h, tok, sizeof tok);
  char *log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "unsupported version 7 at byte 4");
  free(log);
}
END_TEST

START_TEST(test_data_shard_truncated_header_is_format_error) {
  char path[256];
  path_in_dir(path, sizeof path, "short.bin");
  FILE *f = fopen(path, "wb");
  const char junk[100] = {0x38, 0xd6, 0x34, 0x01};
  fwrite(junk, 1, sizeof junk, f);
  fclose(f);
  char *log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "truncated header: the file has 100 bytes, the header needs 1024");
  free(log);
  f = fopen(path, "wb"); /* zero bytes */
  fclose(f);
  log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "is empty (0 bytes");
  free(log);
}
END_TEST

START_TEST(test_data_shard_count_disagreeing_with_size_is_format_error) {
  char path[256];
  path_in_dir(path, sizeof path, "count.bin");
  const uint16_t tok[4] = {256, 1, 2, 3};
  const int32_t h[5] = {DDP_SHARD_MAGIC_U16, 1, 10, 256, 257};
  write_raw(path, h, tok, sizeof tok); /* says 10 tokens, holds 4 */
  char *log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "says 10 tokens = 20 bytes after the header, but the file has 8");
  ddp_assert_contains(log, "truncated");
  free(log);
  const int32_t h2[5] = {DDP_SHARD_MAGIC_U16, 1, 3, 256, 257};
  write_raw(path, h2, tok, sizeof tok); /* says 3, holds 4 */
  log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "trailing data");
  free(log);
}
END_TEST

START_TEST(test_data_shard_token_not_below_vocab_is_format_error) {
  char path[256];
  path_in_dir(path, sizeof path, "vocab16.bin");
  const uint16_t tok[8] = {256, 1, 2, 3, 4, 300, 6, 7};
  int32_t h[5] = {DDP_SHARD_MAGIC_U16, 1, 8, 256, 257};
  write_raw(path, h, tok, sizeof tok);
  char *log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "token 5 (byte 1034) has value 300, not below the vocab size 257");
  free(log);
  /* the boundary: a token equal to the vocab size */
  const uint16_t edge[3] = {256, 257, 1};
  h[2] = 3;
  write_raw(path, h, edge, sizeof edge);
  log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "token 1 (byte 1026) has value 257, not below the vocab size 257");
  free(log);
  /* uint32: a value that would be negative as int32 */
  path_in_dir(path, sizeof path, "vocab32.bin");
  const uint32_t tok32[3] = {70000, 1, 0xFFFFFFFFu};
  const int32_t h32[5] = {DDP_SHARD_MAGIC_U32, 7, 3, 70000, 70001};
  write_raw(path, h32, tok32, sizeof tok32);
  log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "token 2 (byte 1032) has value 4294967295");
  free(log);
}
END_TEST

START_TEST(test_data_shard_empty_is_format_error) {
  char path[256];
  path_in_dir(path, sizeof path, "empty.bin");
  const int32_t h[5] = {DDP_SHARD_MAGIC_U16, 1, 0, 256, 257};
  write_raw(path, h, NULL, 0);
  char *log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "is empty: the token count at byte 8 is 0");
  free(log);
}
END_TEST

START_TEST(test_data_shard_eot_not_below_vocab_is_format_error) {
  char path[256];
  path_in_dir(path, sizeof path, "eot.bin");
  const uint16_t tok[2] = {1, 2};
  const int32_t h[5] = {DDP_SHARD_MAGIC_U16, 1, 2, 300, 257};
  write_raw(path, h, tok, sizeof tok);
  char *log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "EOT id 300 (byte 12) is outside the vocabulary [0, 257)");
  free(log);
  const int32_t h2[5] = {DDP_SHARD_MAGIC_U16, 1, 2, 0, -5};
  write_raw(path, h2, tok, sizeof tok);
  log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "vocab size -5 at byte 16");
  free(log);
}
END_TEST

START_TEST(test_data_shard_write_refuses_bad_input_without_creating_files) {
  char path[256], tmp[300];
  path_in_dir(path, sizeof path, "bad.bin");
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  const int32_t tok[4] = {256, 1, 257, 3};
  ddp_test_log_start();
  ck_assert_int_eq(ddp_shard_write(path, tok, 0, 256, 257), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_shard_write(path, tok, 4, 256, 257), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_shard_write(path, tok, 2, 257, 257), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "without tokens");
  ddp_assert_contains(log, "token 2 has value 257, outside the vocabulary [0, 257)");
  ddp_assert_contains(log, "EOT id 257 is outside");
  ddp_assert_contains(log, path);
  free(log);
  ck_assert(!file_exists(path));
  ck_assert(!file_exists(tmp));
}
END_TEST

START_TEST(test_data_shard_failed_write_leaves_no_file) {
  char path[256], tmp[300];
  path_in_dir(path, sizeof path, "big.bin");
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  enum { N = 20000 };
  int32_t *tok = calloc(N, sizeof *tok);
  tok[0] = 256;

  /* A file-size limit makes the write fail part way, as a full disk would. */
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit old, lim;
  ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
  lim = old;
  lim.rlim_cur = 4096;
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
  ddp_test_log_start();
  ddp_status_t st = ddp_shard_write(path, tok, N, 256, 257);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(st, DDP_ERR_IO);
  ddp_assert_contains(log, path);
  ddp_assert_contains(log, "File too large");
  free(log);
  ck_assert(!file_exists(path));
  ck_assert(!file_exists(tmp));

  /* An existing shard survives a failed overwrite unchanged. */
  const int32_t small[3] = {256, 7, 8};
  ck_assert_int_eq(ddp_shard_write(path, small, 3, 256, 257), DDP_OK);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
  ddp_test_log_start();
  st = ddp_shard_write(path, tok, N, 256, 257);
  ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
  free(ddp_test_log_stop());
  ck_assert_int_eq(st, DDP_ERR_IO);
  ck_assert(!file_exists(tmp));
  ddp_corpus_t c;
  ck_assert_int_eq(ddp_shard_read(&c, path, 8), DDP_OK);
  ck_assert_int_eq(c.n_tokens, 3);
  ck_assert_int_eq(c.tokens[2], 8);
  ddp_corpus_destroy(&c);

  /* No directory to write in. */
  char nodir[300];
  snprintf(nodir, sizeof nodir, "%s/missing/x.bin", g_dir);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_shard_write(nodir, small, 3, 256, 257), DDP_ERR_IO);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, nodir);
  free(log);
  free(tok);
}
END_TEST

/* ---- corpus ------------------------------------------------------------------ */

START_TEST(test_data_corpus_skips_lone_eot_documents) {
  enum { E = 9 };
  const int32_t tok[] = {E, E, 1, 2, E, E, E, 3, E};
  ddp_corpus_t c;
  ck_assert_int_eq(ddp_corpus_from_tokens(&c, tok, 9, E, 10, 16, "t"), DDP_OK);
  ck_assert_int_eq(c.n_docs, 2);
  ck_assert_int_eq(c.n_skipped, 4); /* three lone EOTs inside, one at the end */
  ck_assert_int_eq(c.docs[0].start, 1);
  ck_assert_int_eq(c.docs[0].len, 3);
  ck_assert_int_eq(c.docs[1].start, 6);
  ck_assert_int_eq(c.docs[1].len, 2);
  ck_assert_int_eq(c.n_windows, 2);
  ddp_corpus_destroy(&c);

  const int32_t only_eot[] = {E, E};
  ddp_test_log_start();
  ck_assert_int_eq(ddp_corpus_from_tokens(&c, only_eot, 2, E, 10, 16, "lonely"), DDP_ERR_FORMAT);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "lonely: no document has a token to predict");
  free(log);
  ck_assert_ptr_null(c.tokens);
}
END_TEST

START_TEST(test_data_corpus_keeps_tokens_before_the_first_eot) {
  enum { E = 0 };
  const int32_t tok[] = {4, 5, 6, E, 7};
  ddp_corpus_t c;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_corpus_from_tokens(&c, tok, 5, E, 10, 16, "mid.bin"), DDP_OK);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "mid.bin: does not start with EOT");
  ddp_assert_contains(log, "the 3 tokens before the first EOT are kept");
  free(log);
  ck_assert_int_eq(c.n_docs, 2);
  ck_assert_int_eq(c.docs[0].start, 0);
  ck_assert_int_eq(c.docs[0].len, 3);
  ddp_corpus_destroy(&c);
}
END_TEST

START_TEST(test_data_corpus_rejects_tokens_outside_the_vocabulary) {
  const int32_t tok[] = {9, 1, -2, 3};
  ddp_corpus_t c;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_corpus_from_tokens(&c, tok, 4, 9, 10, 16, "neg"), DDP_ERR_FORMAT);
  ck_assert_int_eq(ddp_corpus_from_tokens(&c, tok, 4, 10, 10, 16, "eot"), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "neg: token 2 has value -2, outside the vocabulary [0, 10)");
  ddp_assert_contains(log, "EOT id 10 is outside the vocabulary");
  free(log);
}
END_TEST

START_TEST(test_data_corpus_long_documents_become_windows_covering_every_target_once) {
  enum { S = 7, E = 50 };
  /* Lengths around the multiples of seq_len + 1, where off-by-ones live. */
  const int lens[] = {1,     2,         3,         S,         S + 1, S + 2, S + 3,
                      2 * S, 2 * S + 1, 2 * S + 2, 5 * S + 3, 1,     40,    8 * S + 1};
  const int nd = (int)(sizeof lens / sizeof lens[0]);
  int32_t tok[512];
  int n = 0;
  for (int d = 0; d < nd; ++d) {
    tok[n++] = E;
    for (int k = 1; k < lens[d]; ++k) tok[n++] = (d * 31 + k * 7) % E;
  }
  ddp_corpus_t c;
  expect_eq(ddp_corpus_from_tokens(&c, tok, n, E, E + 1, S, "w"), DDP_OK);
  expect_eq(c.n_skipped, 2);
  expect_eq(c.n_docs, nd - 2);

  int covered[512] = {0};
  int64_t expect_windows = 0;
  for (int d = 0; d < nd; ++d) expect_windows += lens[d] > 1 ? (lens[d] - 1 + S - 1) / S : 0;
  expect_eq(c.n_windows, expect_windows);
  for (int64_t i = 0; i < c.n_windows; ++i) {
    const ddp_window_t *w = &c.windows[i];
    const ddp_doc_t *doc = &c.docs[w->doc];
    expect(w->len >= 2);
    expect(w->len <= S + 1);
    expect(w->start >= doc->start);
    expect(w->start + w->len <= doc->start + doc->len); /* never crosses documents */
    if (w->part == 0) {
      expect_eq(w->start, doc->start);
      expect_eq(tok[w->start], E);
    } else {
      /* overlap by one: this window's first input was the last target before */
      const ddp_window_t *prev = &c.windows[i - 1];
      expect_eq(prev->doc, w->doc);
      expect_eq(prev->part + 1, w->part);
      expect_eq(prev->len, S + 1);
      expect_eq(w->start, prev->start + prev->len - 1);
    }
    for (int t = 1; t < w->len; ++t) covered[w->start + t]++;
  }
  /* Every non-EOT token is a target exactly once; EOTs (document starts) never. */
  for (int p = 0; p < n; ++p) expect_eq(covered[p], tok[p] == E ? 0 : 1);
  ddp_corpus_destroy(&c);
}
END_TEST

/* ---- the built-in data set ----------------------------------------------- */

START_TEST(test_data_builtin_is_deterministic) {
  ddp_corpus_t a, b, d, other;
  ck_assert_int_eq(ddp_builtin_corpus(&a, 42, DDP_SPLIT_TRAIN, 500, 256, 256), DDP_OK);
  ck_assert_int_eq(ddp_builtin_corpus(&b, 42, DDP_SPLIT_TRAIN, 500, 256, 256), DDP_OK);
  ck_assert_int_eq(a.n_tokens, b.n_tokens);
  ck_assert_int_eq(memcmp(a.tokens, b.tokens, (size_t)a.n_tokens * 4), 0);
  ck_assert_int_eq(memcmp(a.answer_at, b.answer_at, 500 * sizeof(int32_t)), 0);
  /* Document i does not depend on how many are made. */
  ck_assert_int_eq(ddp_builtin_corpus(&d, 42, DDP_SPLIT_TRAIN, 200, 256, 256), DDP_OK);
  ck_assert_int_eq(memcmp(a.tokens, d.tokens, (size_t)d.n_tokens * 4), 0);
  /* The single-document generator is the same function. */
  int32_t doc[256];
  int len, eq;
  ck_assert_int_eq(ddp_builtin_document(42, DDP_SPLIT_TRAIN, 137, 256, doc, &len, &eq), DDP_OK);
  ck_assert_int_eq(len, a.docs[137].len);
  ck_assert_int_eq(eq, a.answer_at[137]);
  ck_assert_int_eq(memcmp(doc, a.tokens + a.docs[137].start, (size_t)len * 4), 0);
  /* Another seed, other data. */
  ck_assert_int_eq(ddp_builtin_corpus(&other, 43, DDP_SPLIT_TRAIN, 500, 256, 256), DDP_OK);
  ck_assert(other.n_tokens != a.n_tokens ||
            memcmp(other.tokens, a.tokens, (size_t)a.n_tokens * 4) != 0);
  ddp_corpus_destroy(&a);
  ddp_corpus_destroy(&b);
  ddp_corpus_destroy(&d);
  ddp_corpus_destroy(&other);
}
END_TEST

typedef struct text_line {
  char s[32];
} text_line_t;

static int cmp_line(const void *a, const void *b) {
  return strcmp(((const text_line_t *)a)->s, ((const text_line_t *)b)->s);
}

/* Every task line of a corpus as a string (without EOTs). */
static text_line_t *corpus_lines(const ddp_corpus_t *c, int64_t *count) {
  int64_t n = 0;
  for (int64_t i = 0; i < c->n_tokens; ++i) n += c->tokens[i] == '\n';
  text_line_t *lines = calloc((size_t)n, sizeof *lines);
  int64_t k = 0;
  int at = 0;
  for (int64_t i = 0; i < c->n_tokens; ++i) {
    if (c->tokens[i] == DDP_BUILTIN_EOT) continue;
    expect(at < 31);
    lines[k].s[at++] = (char)c->tokens[i];
    if (c->tokens[i] == '\n') {
      ++k;
      at = 0;
    }
  }
  expect_eq(k, n);
  *count = n;
  return lines;
}

START_TEST(test_data_builtin_train_and_val_share_no_line) {
  ddp_corpus_t tr, va;
  ck_assert_int_eq(ddp_builtin_corpus(&tr, 7, DDP_SPLIT_TRAIN, 4000, 256, 256), DDP_OK);
  ck_assert_int_eq(ddp_builtin_corpus(&va, 7, DDP_SPLIT_VAL, 1000, 256, 256), DDP_OK);
  ck_assert(memcmp(tr.tokens, va.tokens, 64 * 4) != 0);
  int64_t nt, nv;
  text_line_t *lt = corpus_lines(&tr, &nt), *lv = corpus_lines(&va, &nv);
  qsort(lv, (size_t)nv, sizeof *lv, cmp_line);
  /* Short lines like "c:a=a\n" would collide by chance if splits differed
   * only in their streams; the hash partition rules that out. */
  int64_t short_lines = 0;
  for (int64_t i = 0; i < nt; ++i) {
    short_lines += strlen(lt[i].s) <= 8;
    if (bsearch(&lt[i], lv, (size_t)nv, sizeof *lv, cmp_line) != NULL)
      ck_abort_msg("train line '%s' is also a val line", lt[i].s);
  }
  ck_assert_int_gt(short_lines, 100);
  free(lt);
  free(lv);
  ddp_corpus_destroy(&tr);
  ddp_corpus_destroy(&va);
}
END_TEST

START_TEST(test_data_builtin_documents_are_well_formed) {
  const int max_len = 200;
  for (int split = 0; split < 2; ++split) {
    ddp_corpus_t c;
    expect_eq(ddp_builtin_corpus(&c, 3, split, 3000, max_len, 128), DDP_OK);
    expect_eq(c.eot, DDP_BUILTIN_EOT);
    expect_eq(c.vocab, DDP_BUILTIN_VOCAB);
    expect_eq(c.n_docs, 3000);
    expect_eq(c.n_skipped, 0);
    ck_assert_ptr_nonnull(c.answer_at);
    for (int64_t i = 0; i < c.n_tokens; ++i) {
      expect(c.tokens[i] >= 0);
      expect(c.tokens[i] < DDP_BUILTIN_VOCAB);
    }
    int64_t expect_start = 0;
    for (int64_t d = 0; d < c.n_docs; ++d) {
      const int32_t *t = c.tokens + c.docs[d].start;
      const int64_t len = c.docs[d].len;
      expect_eq(c.docs[d].start, expect_start); /* documents tile the tokens */
      expect_start += len;
      expect_eq(t[0], DDP_BUILTIN_EOT);
      expect(len <= max_len);
      expect_eq(t[len - 1], '\n');
      for (int64_t k = 1; k < len; ++k) expect(t[k] != DDP_BUILTIN_EOT);
      /* answer_at: the last line's '=', followed only by the answer. */
      const int32_t a = c.answer_at[d];
      expect(a > 0);
      expect_eq(t[a], '=');
      for (int64_t k = a + 1; k < len - 1; ++k) {
        expect(t[k] != '\n');
        expect(t[k] != '=');
      }
      int64_t k = a;
      while (t[k - 1] != '\n' && t[k - 1] != DDP_BUILTIN_EOT) --k;
      expect_eq(t[k + 1], ':'); /* k is the start of the last line */
    }
    expect_eq(expect_start, c.n_tokens);
    ddp_corpus_destroy(&c);
  }
}
END_TEST

static int cmp_int64(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

START_TEST(test_data_builtin_lengths_are_heavy_tailed) {
  /* Measured at seed 1234, 20000 train documents, max_len 256 (tokens, EOT
   * included): p10 11, p25 15, p50 28, p75 63, p90 131, p95 204, p99 253,
   * max 256, mean 52.1; 3.9% of documents end within one line (21 tokens) of
   * max_len. With max_len 128: p90 116, p99 127, 13% near max_len. */
  const int max_len = 256;
  const int64_t n = 5000;
  ddp_corpus_t c;
  ck_assert_int_eq(ddp_builtin_corpus(&c, 1234, DDP_SPLIT_TRAIN, n, max_len, max_len), DDP_OK);
  int64_t *len = malloc((size_t)n * sizeof *len);
  int64_t near_max = 0, max_seen = 0;
  for (int64_t i = 0; i < n; ++i) {
    len[i] = c.docs[i].len;
    near_max += len[i] > max_len - DDP_BUILTIN_MIN_LEN;
    if (len[i] > max_seen) max_seen = len[i];
  }
  qsort(len, (size_t)n, sizeof *len, cmp_int64);
  ck_assert_int_le(len[n / 2], 40); /* most documents are short */
  ck_assert_int_le(len[n / 4], 20);
  ck_assert_int_ge(len[n * 99 / 100], 230); /* ... and some are long */
  ck_assert_int_le(max_seen, max_len);
  ck_assert_int_ge(near_max, n / 50); /* >= 2% hit the clip */
  ck_assert_int_le(near_max, n / 10);
  free(len);
  ddp_corpus_destroy(&c);
}
END_TEST

/* Recomputes the answer of one task line and compares the whole line. */
static void check_task_line(const char *line, int counts[4]) {
  char want[64];
  const char *eq = strchr(line, '=');
  ck_assert_ptr_nonnull(eq);
  expect_eq(line[1], ':');
  if (line[0] == 'a') {
    long x, y, sum;
    expect_eq(sscanf(line, "a:%ld+%ld=%ld", &x, &y, &sum), 3);
    snprintf(want, sizeof want, "a:%ld+%ld=%ld\n", x, y, x + y);
    counts[3]++;
  } else {
    const int k = (int)(eq - line - 2);
    char op[16];
    expect(k >= 1 && k <= 8);
    memcpy(op, line + 2, (size_t)k);
    op[k] = '\0';
    char ans[16];
    memcpy(ans, op, (size_t)k + 1);
    if (line[0] == 'r') {
      for (int i = 0; i < k; ++i) ans[i] = op[k - 1 - i];
      counts[1]++;
    } else if (line[0] == 's') {
      for (int i = 1; i < k; ++i) /* insertion sort: an independent oracle */
        for (int j = i; j > 0 && ans[j - 1] > ans[j]; --j) {
          const char t = ans[j];
          ans[j] = ans[j - 1];
          ans[j - 1] = t;
        }
      counts[2]++;
    } else {
      expect_eq(line[0], 'c');
      counts[0]++;
    }
    for (int i = 0; i < k; ++i) expect(op[i] >= 'a' && op[i] <= 'z');
    snprintf(want, sizeof want, "%c:%s=%s\n", line[0], op, ans);
  }
  if (strcmp(line, want) != 0) ck_abort_msg("task line '%s', want '%s'", line, want);
}

START_TEST(test_data_builtin_answers_are_correct) {
  int counts[4] = {0};
  for (int split = 0; split < 2; ++split) {
    ddp_corpus_t c;
    ck_assert_int_eq(ddp_builtin_corpus(&c, 99, split, 2000, 256, 256), DDP_OK);
    int64_t n;
    text_line_t *lines = corpus_lines(&c, &n);
    for (int64_t i = 0; i < n; ++i) check_task_line(lines[i].s, counts);
    free(lines);
    ddp_corpus_destroy(&c);
  }
  for (int t = 0; t < 4; ++t) ck_assert_int_gt(counts[t], 1000); /* all four tasks occur */
}
END_TEST

START_TEST(test_data_builtin_rejects_bad_arguments) {
  ddp_corpus_t c;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_builtin_corpus(&c, 1, DDP_SPLIT_TRAIN, 10, DDP_BUILTIN_MIN_LEN - 1, 64),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_builtin_corpus(&c, 1, 2, 10, 64, 64), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_builtin_corpus(&c, 1, DDP_SPLIT_TRAIN, 0, 64, 64), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "max_len 20 is below 21");
  ddp_assert_contains(log, "split 2 is neither train (0) nor val (1)");
  free(log);
  ck_assert_ptr_null(c.tokens);
  /* max_len == DDP_BUILTIN_MIN_LEN works: every line fits after the EOT. */
  ck_assert_int_eq(ddp_builtin_corpus(&c, 1, DDP_SPLIT_VAL, 300, DDP_BUILTIN_MIN_LEN, 20), DDP_OK);
  ck_assert_int_eq(c.n_windows, 300);
  ddp_corpus_destroy(&c);
}
END_TEST

/* ---- micro-batches ------------------------------------------------------------ */

enum { TPB = 512, ROWS = 12, SEQ = 64 };

/* Builtin documents up to 160 tokens cut into windows of <= 65. */
static void batch_corpus(ddp_corpus_t *c) {
  ck_assert_int_eq(ddp_builtin_corpus(c, 5, DDP_SPLIT_TRAIN, 600, 160, SEQ), DDP_OK);
  ck_assert_int_gt(c->n_windows, c->n_docs); /* some documents were split */
}

START_TEST(test_data_batch_rows_are_windows_shifted_by_one_with_padding) {
  ddp_corpus_t c;
  batch_corpus(&c);
  ddp_plan_t plan;
  expect_eq(ddp_plan_create(&plan, &c, 11, TPB, ROWS, SEQ), DDP_OK);
  ddp_batch_t b;
  expect_eq(ddp_batch_init(&b, &plan), DDP_OK);
  int64_t per_epoch;
  expect_eq(ddp_plan_micro_batches_per_epoch(&plan, 0, &per_epoch), DDP_OK);
  int64_t padded = 0, real = 0;
  for (int64_t g = 0; g < per_epoch; ++g) {
    expect_eq(ddp_plan_fill(&plan, g, &b), DDP_OK);
    expect(b.B >= 1);
    expect(b.B <= ROWS);
    expect((int64_t)b.B * b.T <= TPB); /* the budget is never exceeded */
    expect(b.T <= SEQ);
    expect_eq(b.n_padded, (int64_t)b.B * b.T);
    int longest = 0;
    int64_t n_targets = 0;
    for (int r = 0; r < b.B; ++r) {
      const ddp_window_t *w = &c.windows[b.windows[r]];
      const int tw = w->len - 1;
      if (tw > longest) longest = tw;
      for (int t = 0; t < b.T; ++t) {
        const int32_t in = b.inputs[r * b.T + t], tg = b.targets[r * b.T + t];
        if (t < tw) {
          expect_eq(in, c.tokens[w->start + t]);
          expect_eq(tg, c.tokens[w->start + t + 1]);
          expect(tg != -1);
          ++n_targets;
        } else {
          expect_eq(in, c.eot);
          expect_eq(tg, -1);
        }
      }
    }
    expect_eq(b.T, longest); /* padded to the longest row, no further */
    expect_eq(b.n_targets, n_targets);
    padded += b.n_padded;
    real += n_targets;
  }
  /* Shuffled packing pads a lot; recorded so the bucketing sampler can show
   * its gain (about half of the computed tokens here). */
  expect(real > padded / 4);
  ddp_batch_destroy(&b);
  ddp_plan_destroy(&plan);
  ddp_corpus_destroy(&c);
}
END_TEST

/* The window order of one epoch, read through fills. */
static int64_t *epoch_order(ddp_plan_t *plan, ddp_batch_t *b, int64_t epoch, int64_t n_windows) {
  int64_t first = 0, count = 0;
  for (int64_t e = 0; e <= epoch; ++e) {
    first += count;
    expect_eq(ddp_plan_micro_batches_per_epoch(plan, e, &count), DDP_OK);
  }
  int64_t *order = malloc((size_t)n_windows * sizeof *order);
  int64_t k = 0;
  for (int64_t j = 0; j < count; ++j) {
    expect_eq(ddp_plan_fill(plan, first + j, b), DDP_OK);
    expect_eq(b->epoch, epoch);
    expect_eq(b->index_in_epoch, j);
    for (int r = 0; r < b->B; ++r) {
      expect(k < n_windows);
      order[k++] = b->windows[r];
    }
  }
  expect_eq(k, n_windows);
  return order;
}

START_TEST(test_data_batch_every_window_once_per_epoch_in_a_new_order) {
  ddp_corpus_t c;
  batch_corpus(&c);
  ddp_plan_t plan;
  expect_eq(ddp_plan_create(&plan, &c, 11, TPB, ROWS, SEQ), DDP_OK);
  ddp_batch_t b;
  expect_eq(ddp_batch_init(&b, &plan), DDP_OK);
  int64_t *order[3];
  char *seen = malloc((size_t)c.n_windows);
  for (int e = 0; e < 3; ++e) {
    order[e] = epoch_order(&plan, &b, e, c.n_windows);
    memset(seen, 0, (size_t)c.n_windows);
    for (int64_t k = 0; k < c.n_windows; ++k) {
      expect_eq(seen[order[e][k]], 0);
      seen[order[e][k]] = 1;
    }
  }
  expect(memcmp(order[0], order[1], (size_t)c.n_windows * sizeof(int64_t)) != 0);
  expect(memcmp(order[1], order[2], (size_t)c.n_windows * sizeof(int64_t)) != 0);
  /* Not merely a rotation or the identity: most positions change. */
  int64_t same = 0;
  for (int64_t k = 0; k < c.n_windows; ++k) same += order[0][k] == order[1][k] || order[0][k] == k;
  expect(same < c.n_windows / 20);
  /* Epochs wrap: the index after epoch 0's last is epoch 1's first. */
  int64_t n0;
  expect_eq(ddp_plan_micro_batches_per_epoch(&plan, 0, &n0), DDP_OK);
  expect_eq(ddp_plan_fill(&plan, n0 - 1, &b), DDP_OK);
  expect_eq(b.epoch, 0);
  expect_eq(ddp_plan_fill(&plan, n0, &b), DDP_OK);
  expect_eq(b.epoch, 1);
  expect_eq(b.index_in_epoch, 0);
  expect_eq(b.windows[0], order[1][0]);
  for (int e = 0; e < 3; ++e) free(order[e]);
  free(seen);
  ddp_batch_destroy(&b);
  ddp_plan_destroy(&plan);
  ddp_corpus_destroy(&c);
}
END_TEST

static uint64_t batch_hash(const ddp_batch_t *b) {
  uint64_t h = 1469598103934665603u ^ (uint64_t)b->B ^ ((uint64_t)b->T << 20);
  for (int64_t i = 0; i < (int64_t)b->B * b->T; ++i) {
    h = (h ^ (uint32_t)b->inputs[i]) * 1099511628211u;
    h = (h ^ (uint32_t)b->targets[i]) * 1099511628211u;
  }
  return h ^ (uint64_t)b->epoch << 40;
}

START_TEST(test_data_batch_fill_is_a_pure_function_of_the_index) {
  ddp_corpus_t c;
  batch_corpus(&c);
  ddp_plan_t p1, p2;
  ck_assert_int_eq(ddp_plan_create(&p1, &c, 11, TPB, ROWS, SEQ), DDP_OK);
  ck_assert_int_eq(ddp_plan_create(&p2, &c, 11, TPB, ROWS, SEQ), DDP_OK);
  ddp_batch_t b;
  ck_assert_int_eq(ddp_batch_init(&b, &p1), DDP_OK);
  int32_t *const inputs = b.inputs, *const targets = b.targets;
  enum { N = 400 }; /* spans a few epochs */
  uint64_t want[N];
  for (int g = 0; g < N; ++g) {
    ck_assert_int_eq(ddp_plan_fill(&p1, g, &b), DDP_OK);
    want[g] = batch_hash(&b);
  }
  ck_assert_int_ge(b.epoch, 2);
  /* A fresh plan (another rank, a resumed run) visiting in a scrambled order,
   * jumping far ahead first, then back. */
  for (int k = 0; k < N; ++k) {
    const int g = (int)(((int64_t)k * 173 + 91) % N);
    ck_assert_int_eq(ddp_plan_fill(&p2, g, &b), DDP_OK);
    ck_assert_msg(batch_hash(&b) == want[g], "micro-batch %d differs", g);
  }
  /* The same buffers throughout: no allocation per micro-batch. */
  ck_assert_ptr_eq(b.inputs, inputs);
  ck_assert_ptr_eq(b.targets, targets);
  /* Another seed, another plan. */
  ddp_plan_t p3;
  ck_assert_int_eq(ddp_plan_create(&p3, &c, 12, TPB, ROWS, SEQ), DDP_OK);
  ck_assert_int_eq(ddp_plan_fill(&p3, 0, &b), DDP_OK);
  ck_assert(batch_hash(&b) != want[0]);
  ddp_plan_destroy(&p3);
  ddp_batch_destroy(&b);
  ddp_plan_destroy(&p1);
  ddp_plan_destroy(&p2);
  ddp_corpus_destroy(&c);
}
END_TEST

START_TEST(test_data_batch_step_target_count_matches_the_fills) {
  ddp_corpus_t c;
  batch_corpus(&c);
  ddp_plan_t plan;
  ck_assert_int_eq(ddp_plan_create(&plan, &c, 3, TPB, 0, SEQ), DDP_OK);
  ddp_batch_t b;
  ck_assert_int_eq(ddp_batch_init(&b, &plan), DDP_OK);
  int64_t n0;
  ck_assert_int_eq(ddp_plan_micro_batches_per_epoch(&plan, 0, &n0), DDP_OK);
  const int accum = 4;
  for (int64_t step = n0 / accum - 2; step < n0 / accum + 2; ++step) { /* across the wrap */
    int64_t counted, filled = 0;
    ck_assert_int_eq(ddp_plan_count_targets(&plan, step * accum, accum, &counted), DDP_OK);
    for (int k = 0; k < accum; ++k) {
      ddp_batch_info_t info;
      ck_assert_int_eq(ddp_plan_peek(&plan, step * accum + k, &info), DDP_OK);
      ck_assert_int_eq(ddp_plan_fill(&plan, step * accum + k, &b), DDP_OK);
      ck_assert_int_eq(info.B, b.B);
      ck_assert_int_eq(info.T, b.T);
      ck_assert_int_eq(info.epoch, b.epoch);
      filled += b.n_targets;
    }
    ck_assert_int_eq(counted, filled);
  }
  /* No row cap: only the budget limits rows. */
  ck_assert_int_eq(plan.max_rows, TPB);
  ddp_batch_destroy(&b);
  ddp_plan_destroy(&plan);
  ddp_corpus_destroy(&c);
}
END_TEST

START_TEST(test_data_batch_rejects_a_window_longer_than_the_budget) {
  int32_t tok[60];
  tok[0] = 9;
  for (int i = 1; i < 50; ++i) tok[i] = i % 9;
  tok[50] = 9;
  for (int i = 51; i < 60; ++i) tok[i] = 1;
  ddp_corpus_t c;
  ck_assert_int_eq(ddp_corpus_from_tokens(&c, tok, 60, 9, 10, 100, "t"), DDP_OK);
  ddp_plan_t plan;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_plan_create(&plan, &c, 1, 40, 0, 100), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_plan_create(&plan, &c, 1, 4096, 0, 64), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log,
                      "window 0 has 49 tokens per row, more than the budget of "
                      "--tokens-per-batch 40");
  ddp_assert_contains(log, "--seq-len 64, but the corpus was cut into windows for seq_len 100");
  free(log);
  ck_assert_ptr_null(plan.perm);
  ck_assert_int_eq(ddp_plan_create(&plan, &c, 1, 49, 0, 100), DDP_OK); /* exactly fits */
  ddp_batch_t b;
  ck_assert_int_eq(ddp_batch_init(&b, &plan), DDP_OK);
  for (int g = 0; g < 6; ++g) {
    ck_assert_int_eq(ddp_plan_fill(&plan, g, &b), DDP_OK);
    ck_assert_int_le((int64_t)b.B * b.T, 49);
  }
  ddp_batch_destroy(&b);
  ddp_plan_destroy(&plan);
  ddp_corpus_destroy(&c);
}
END_TEST

static Suite *data_suite(void) {
  Suite *s = suite_create("data");
  TCase *tc = tcase_create("shard");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_data_shard_round_trip_uint16);
  tcase_add_test(tc, test_data_shard_round_trip_uint32);
  tcase_add_test(tc, test_data_shard_without_vocab_fields_is_gpt2);
  tcase_add_test(tc, test_data_shard_eot_id_zero_round_trips);
  tcase_add_test(tc, test_data_shard_missing_or_unreadable_file_is_io_error);
  tcase_add_test(tc, test_data_shard_bad_magic_is_format_error);
  tcase_add_test(tc, test_data_shard_bad_version_is_format_error);
  tcase_add_test(tc, test_data_shard_truncated_header_is_format_error);
  tcase_add_test(tc, test_data_shard_count_disagreeing_with_size_is_format_error);
  tcase_add_test(tc, test_data_shard_token_not_below_vocab_is_format_error);
  tcase_add_test(tc, test_data_shard_empty_is_format_error);
  tcase_add_test(tc, test_data_shard_eot_not_below_vocab_is_format_error);
  tcase_add_test(tc, test_data_shard_write_refuses_bad_input_without_creating_files);
  tcase_add_test(tc, test_data_shard_failed_write_leaves_no_file);
  suite_add_tcase(s, tc);

  tc = tcase_create("corpus");
  tcase_add_test(tc, test_data_corpus_skips_lone_eot_documents);
  tcase_add_test(tc, test_data_corpus_keeps_tokens_before_the_first_eot);
  tcase_add_test(tc, test_data_corpus_rejects_tokens_outside_the_vocabulary);
  tcase_add_test(tc, test_data_corpus_long_documents_become_windows_covering_every_target_once);
  suite_add_tcase(s, tc);

  tc = tcase_create("builtin");
  tcase_add_test(tc, test_data_builtin_is_deterministic);
  tcase_add_test(tc, test_data_builtin_train_and_val_share_no_line);
  tcase_add_test(tc, test_data_builtin_documents_are_well_formed);
  tcase_add_test(tc, test_data_builtin_lengths_are_heavy_tailed);
  tcase_add_test(tc, test_data_builtin_answers_are_correct);
  tcase_add_test(tc, test_data_builtin_rejects_bad_arguments);
  suite_add_tcase(s, tc);

  tc = tcase_create("batch");
  tcase_add_test(tc, test_data_batch_rows_are_windows_shifted_by_one_with_padding);
  tcase_add_test(tc, test_data_batch_every_window_once_per_epoch_in_a_new_order);
  tcase_add_test(tc, test_data_batch_fill_is_a_pure_function_of_the_index);
  tcase_add_test(tc, test_data_batch_step_target_count_matches_the_fills);
  tcase_add_test(tc, test_data_batch_rejects_a_window_longer_than_the_budget);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(data_suite());
}
