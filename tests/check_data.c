/* The data side below the sampler: shard round trips and every
 * malformed-shard error (each message names the file and the byte offset),
 * atomic writes, memory-mapped corpora over a glob of shards (name order,
 * windows that never cross shards, disagreeing shards, headless shards, the
 * fingerprint ranks compare and its sampled content hash, the vocabulary
 * bound), a shard over 2 GiB read through 64-bit offsets,
 * the window index (long documents cut into windows overlapping by one
 * token, every target exactly once) and the built-in data set (determinism,
 * disjoint splits, length distribution, correct answers). Micro-batches and
 * the distributed plan are tested in check_sampler.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check_util.h"
#include "ddptrain/data.h"
#include "data/corpus_impl.h"

/* One scratch directory per test case, made and removed in the parent
 * process (an unchecked fixture), so that it goes even when a test fails
 * in its forked child; the tests use distinct file names. */
static char g_dir[64];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp_check_data_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

/* Removes dir and everything in it (one level of subdirectories is all the
 * tests make, but recursion costs nothing). */
static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      struct stat sb;
      if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        remove_tree(path);
      else
        unlink(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

static void teardown(void) {
  remove_tree(g_dir);
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

/* A corpus left as a failed constructor must leave it: zeroed. */
static void assert_zeroed(const ddp_corpus_t *c) {
  ck_assert_ptr_null(c->segs);
  ck_assert_ptr_null(c->windows);
  ck_assert_int_eq(c->n_segs, 0);
  ck_assert_int_eq(c->n_windows, 0);
}

/* Reads `path`, expects `want`, and returns the log (caller frees) after
 * checking that it names the file. */
static char *read_expect_error(const char *path, ddp_status_t want) {
  ddp_corpus_t c;
  memset(&c, 0xA5, sizeof c); /* garbage in: the reader must zero it */
  ddp_test_log_start();
  ddp_status_t st = ddp_shard_read(&c, path, 64);
  char *log = ddp_test_log_stop();
  ck_assert_msg(st == want, "read of %s gave %s, want %s; log: %s", path, ddp_status_name(st),
                ddp_status_name(want), log);
  assert_zeroed(&c);
  ddp_assert_contains(log, path);
  return log;
}

/* All tokens of a corpus, read segment by segment (caller frees). */
static int32_t *corpus_tokens(const ddp_corpus_t *c) {
  int32_t *all = malloc((size_t)c->n_tokens * sizeof *all);
  ck_assert_ptr_nonnull(all);
  int64_t at = 0;
  for (int32_t s = 0; s < c->n_segs; ++s) {
    expect_eq(c->segs[s].first, at);
    ddp_corpus_read(c, s, c->segs[s].first, c->segs[s].n_tokens, all + at);
    at += c->segs[s].n_tokens;
  }
  expect_eq(at, c->n_tokens);
  return all;
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
  /* one segment, mapped in place at its width */
  ck_assert_int_eq(c.n_segs, 1);
  ck_assert_ptr_nonnull(c.segs[0].map);
  ck_assert_int_eq(c.segs[0].width, tsize);
  ck_assert_int_eq(c.segs[0].file_bytes, DDP_SHARD_HEADER_BYTES + n * tsize);
  ck_assert_str_eq(c.segs[0].name, path);
  int32_t *back = corpus_tokens(&c);
  ck_assert_int_eq(memcmp(back, tok, (size_t)n * sizeof *tok), 0);
  expect_eq(ddp_corpus_token(&c, n - 1), vocab - 2);
  ck_assert_int_gt(c.n_windows, 0);
  free(back);
  ddp_corpus_destroy(&c);
  assert_zeroed(&c);
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
  ck_assert_int_eq(ddp_corpus_token(&c, 1), 15496);
  ck_assert_int_eq(ddp_corpus_token(&c, 5), 1101);
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
  ck_assert_int_eq(c.n_headless, 0);
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
  ddp_assert_contains(log, "(byte 8) says 10 tokens = 20 bytes after the header");
  ddp_assert_contains(log, "but the file has 8");
  ddp_assert_contains(log, "truncated");
  free(log);
  const int32_t h2[5] = {DDP_SHARD_MAGIC_U16, 1, 3, 256, 257};
  write_raw(path, h2, tok, sizeof tok); /* says 3, holds 4 */
  log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "trailing data");
  free(log);
  const int32_t h3[5] = {DDP_SHARD_MAGIC_U16, 1, -4, 256, 257};
  write_raw(path, h3, tok, sizeof tok);
  log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "negative token count -4 at byte 8");
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
  ddp_assert_contains(log, "EOT id 300 (byte 12) is outside the vocabulary [0, 257) (byte 16)");
  free(log);
  const int32_t h2[5] = {DDP_SHARD_MAGIC_U16, 1, 2, 0, -5};
  write_raw(path, h2, tok, sizeof tok);
  log = read_expect_error(path, DDP_ERR_FORMAT);
  ddp_assert_contains(log, "vocab size -5 at byte 16");
  free(log);
}
END_TEST

START_TEST(test_data_shard_vocab_above_2_24_is_format_error) {
  char path[256], msg[200];
  path_in_dir(path, sizeof path, "vocab.bin");
  const uint32_t tok[3] = {0, 1, 2};
  /* the largest int32, llm.c's uint32 magic in the vocab slot, and one past
   * the bound: each would size a model by it */
  const int32_t bad[3] = {INT32_MAX, DDP_SHARD_MAGIC_U32, DDP_SHARD_MAX_VOCAB + 1};
  for (int i = 0; i < 3; ++i) {
    const int32_t h[5] = {DDP_SHARD_MAGIC_U32, DDP_SHARD_VERSION_U32, 3, 0, bad[i]};
    write_raw(path, h, tok, sizeof tok);
    char *log = read_expect_error(path, DDP_ERR_FORMAT);
    snprintf(msg, sizeof msg,
             "vocab size %d at byte 16 (header slot [4]) exceeds the largest supported, 16777216",
             (int)bad[i]);
    ddp_assert_contains(log, msg);
    free(log);
  }
  /* the bound itself is a vocabulary */
  const int32_t h[5] = {DDP_SHARD_MAGIC_U32, DDP_SHARD_VERSION_U32, 3, 0, DDP_SHARD_MAX_VOCAB};
  write_raw(path, h, tok, sizeof tok);
  ddp_corpus_t c;
  ck_assert_int_eq(ddp_shard_read(&c, path, 8), DDP_OK);
  ck_assert_int_eq(c.vocab, DDP_SHARD_MAX_VOCAB);
  ddp_corpus_destroy(&c);
}
END_TEST

START_TEST(test_data_vocab_above_2_24_is_refused_by_writer_and_host_corpus) {
  char path[256], tmp[300];
  path_in_dir(path, sizeof path, "big-vocab.bin");
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  const int32_t tok[3] = {0, 1, 2};
  ddp_corpus_t c;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_shard_write(path, tok, 3, 0, DDP_SHARD_MAX_VOCAB + 1), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_corpus_from_tokens(&c, tok, 3, 0, DDP_SHARD_MAX_VOCAB + 1, 8, "mem"),
                   DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "vocab size 16777217 exceeds the largest supported");
  ddp_assert_contains(log, "mem: vocabulary size 16777217 exceeds the largest supported");
  free(log);
  ck_assert(!file_exists(path));
  ck_assert(!file_exists(tmp));
  assert_zeroed(&c);
  /* the bound itself is written and read back */
  ck_assert_int_eq(ddp_shard_write(path, tok, 3, 0, DDP_SHARD_MAX_VOCAB), DDP_OK);
  ck_assert_int_eq(ddp_shard_read(&c, path, 8), DDP_OK);
  ck_assert_int_eq(c.vocab, DDP_SHARD_MAX_VOCAB);
  ddp_corpus_destroy(&c);
}
END_TEST

START_TEST(test_data_sample_hash_reads_the_sampled_blocks) {
  /* small: every byte counts */
  enum { SMALL = 64 * 4096, BIG = 16 << 20, BLOCK = 4096, STRIDE = 1 << 20 };
  unsigned char *b = calloc(BIG, 1);
  ck_assert_ptr_nonnull(b);
  for (int i = 0; i < BIG; ++i) b[i] = (unsigned char)(i * 131u >> 3);
  const uint64_t small = ddp_corpus_sample_hash(b, SMALL);
  for (int at = 0; at < SMALL; at += 4093) {
    b[at] ^= 1;
    ck_assert_msg(ddp_corpus_sample_hash(b, SMALL) != small, "byte %d of a small buffer", at);
    b[at] ^= 1;
  }
  /* the length is hashed: a prefix is another content */
  ck_assert(ddp_corpus_sample_hash(b, SMALL - 1) != small);
  /* large: the first, each stride's and the last block count, bytes
   * between them do not (what makes it cheap) */
  const uint64_t big = ddp_corpus_sample_hash(b, BIG);
  const int counted[] = {
      0, 1023, BLOCK - 1, STRIDE, STRIDE + BLOCK - 1, 7 * STRIDE + 17, BIG - BLOCK, BIG - 1};
  for (size_t k = 0; k < sizeof counted / sizeof counted[0]; ++k) {
    b[counted[k]] ^= 0x80;
    ck_assert_msg(ddp_corpus_sample_hash(b, BIG) != big, "byte %d is sampled", counted[k]);
    b[counted[k]] ^= 0x80;
  }
  b[STRIDE + BLOCK] ^= 0x80;
  ck_assert(ddp_corpus_sample_hash(b, BIG) == big);
  b[STRIDE + BLOCK] ^= 0x80;
  /* an empty buffer hashes its length alone */
  ck_assert(ddp_corpus_sample_hash(b, 0) != big);
  free(b);
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
  ck_assert_int_eq(ddp_corpus_token(&c, 2), 8);
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

/* ---- a shard over 2 GiB ----------------------------------------------------- */

/* Big enough that byte offsets of the last tokens pass 2^31 (and token
 * indices pass 2^30): N uint16 tokens are 2.2 GB. The file is sparse (one
 * ftruncate), so it costs no disk, only page cache while it is read. */
enum { BIG_SEQ = 1 << 20, BIG_DOC = 12 };
#define BIG_N INT64_C(1100003333)
#define BIG_MARK_AT (INT64_C(1) << 30) /* token index: byte offset 2^31 + 1024 */

static int pwrite_u16(int fd, int64_t token_index, uint16_t v) {
  const unsigned char b[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
  return pwrite(fd, b, 2, (off_t)(DDP_SHARD_HEADER_BYTES + 2 * token_index)) == 2 ? 0 : -1;
}

START_TEST(test_data_shard_over_2_gib_reads_through_64_bit_offsets) {
  if (sizeof(size_t) < 8 || sizeof(off_t) < 8) {
    printf("SKIP shard over 2 GiB: a 32-bit build cannot map it\n");
    return;
  }
  const char *tmp_root = getenv("TMPDIR");
  if (!tmp_root || !*tmp_root) tmp_root = "/tmp";
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s/ddp_check_big_XXXXXX", tmp_root);
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/big.bin", dir);
  const int64_t doc_at = BIG_N - BIG_DOC; /* the known document: EOT + 11 tokens */
  const uint16_t known[BIG_DOC] = {256, 'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};

  /* Made without ck_assert, so that nothing can leave the file behind. */
  const char *failed = NULL;
  int err = 0;
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    failed = "open";
  } else {
    unsigned char hdr[DDP_SHARD_HEADER_BYTES] = {0};
    const int32_t h[5] = {DDP_SHARD_MAGIC_U16, DDP_SHARD_VERSION_U16, (int32_t)BIG_N, 256, 257};
    for (int i = 0; i < 5; ++i) put32(hdr + 4 * i, (uint32_t)h[i]);
    if (ftruncate(fd, (off_t)(DDP_SHARD_HEADER_BYTES + 2 * BIG_N)) != 0)
      failed = "ftruncate";
    else if (pwrite(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr)
      failed = "pwrite header";
    else if (pwrite_u16(fd, 0, 256) != 0 || pwrite_u16(fd, BIG_MARK_AT, 77) != 0 ||
             pwrite_u16(fd, doc_at - 1, 99) != 0)
      failed = "pwrite tokens";
    for (int i = 0; !failed && i < BIG_DOC; ++i)
      if (pwrite_u16(fd, doc_at + i, known[i]) != 0) failed = "pwrite document";
    err = errno;
    close(fd);
  }
  if (failed) {
    unlink(path);
    rmdir(dir);
    if (err == ENOSPC || err == EFBIG || err == EDQUOT || err == EOPNOTSUPP) {
      printf("SKIP shard over 2 GiB: %s in %s refused a 2.2 GB sparse file: %s\n", failed, dir,
             strerror(err));
      return;
    }
    ck_abort_msg("making the sparse shard %s failed at %s: %s", path, failed, strerror(err));
  }

  const double t0 = (double)clock() / CLOCKS_PER_SEC;
  ddp_corpus_t c;
  const ddp_status_t st = ddp_shard_read(&c, path, BIG_SEQ);
  /* The mapping keeps the data; the name can go before anything can fail. */
  unlink(path);
  rmdir(dir);
  ck_assert_int_eq(st, DDP_OK);
  printf("shard over 2 GiB: indexed %lld tokens in %.2f s of CPU\n", (long long)c.n_tokens,
         (double)clock() / CLOCKS_PER_SEC - t0);
  ck_assert_int_eq(c.n_tokens, BIG_N);
  ck_assert_int_eq(c.segs[0].file_bytes, DDP_SHARD_HEADER_BYTES + 2 * BIG_N);
  ck_assert_int_eq(c.n_docs, 2);
  ck_assert_int_eq(c.n_headless, 0);
  /* the giant document [0, doc_at) in windows of BIG_SEQ targets (its
   * doc_at - 1 tokens after the EOT and its closing EOT), then ours */
  const int64_t giant = (doc_at + BIG_SEQ - 1) / BIG_SEQ;
  ck_assert_int_eq(c.n_windows, giant + 1);
  const ddp_window_t *last = &c.windows[c.n_windows - 1];
  ck_assert_int_eq(last->start, doc_at);
  ck_assert_int_eq(last->len, BIG_DOC + 1); /* and its closing EOT */
  ck_assert_int_eq(last->ends_doc, 1);
  ck_assert_int_eq(last->seg, 0);
  int32_t got[BIG_DOC + 1];
  ddp_corpus_read_window(&c, last, got);
  for (int i = 0; i < BIG_DOC; ++i) {
    ck_assert_int_eq(got[i], known[i]);
    ck_assert_int_eq(ddp_corpus_token(&c, doc_at + i), known[i]);
  }
  ck_assert_int_eq(got[BIG_DOC], c.eot);
  /* the giant document's last window ends with its closing EOT, which
   * stands where ours starts */
  const ddp_window_t *before = &c.windows[c.n_windows - 2];
  ck_assert_int_eq(before->start + before->len, doc_at + 1);
  ck_assert_int_eq(before->ends_doc, 1);
  ck_assert_int_eq(before->start, (giant - 1) * BIG_SEQ);
  ck_assert_int_le(before->len, BIG_SEQ + 1);
  int32_t tail[2];
  ddp_corpus_read(&c, 0, doc_at - 2, 2, tail);
  ck_assert_int_eq(tail[0], 0);
  ck_assert_int_eq(tail[1], 99);
  /* past 2^31 bytes inside the giant document */
  ck_assert_int_eq(ddp_corpus_token(&c, BIG_MARK_AT), 77);
  ck_assert_int_eq(ddp_corpus_token(&c, BIG_MARK_AT - 1), 0);
  ck_assert_int_eq(ddp_corpus_token(&c, BIG_MARK_AT + 1), 0);
  const ddp_window_t *holder = &c.windows[BIG_MARK_AT / BIG_SEQ];
  ck_assert_int_le(holder->start, BIG_MARK_AT);
  ck_assert_int_gt(holder->start + holder->len, BIG_MARK_AT);
  int32_t *row = malloc((size_t)holder->len * sizeof *row);
  ddp_corpus_read_window(&c, holder, row);
  ck_assert_int_eq(row[BIG_MARK_AT - holder->start], 77);
  free(row);
  ddp_corpus_destroy(&c);
}
END_TEST

/* ---- corpora over globs of shards ------------------------------------------- */

enum { GE = 256, GV = 257 };

/* Writes `name` in g_dir; the path goes to path (256 bytes). */
static void write_shard(char *path, const char *name, const int32_t *tok, int64_t n, int32_t eot,
                        int32_t vocab) {
  path_in_dir(path, 256, name);
  ck_assert_int_eq(ddp_shard_write(path, tok, n, eot, vocab), DDP_OK);
}

static void glob_pattern(char *out, size_t n, const char *tail) {
  snprintf(out, n, "%s/%s", g_dir, tail);
}

/* Checks every window against the segment table: inside one segment, in
 * token order, targets covered at most once. */
static void check_windows_in_segments(const ddp_corpus_t *c) {
  int64_t prev_end = 0;
  for (int64_t i = 0; i < c->n_windows; ++i) {
    const ddp_window_t *w = &c->windows[i];
    expect(w->seg >= 0);
    expect(w->seg < c->n_segs);
    const ddp_token_seg_t *s = &c->segs[w->seg];
    expect(w->start >= s->first);
    /* never crosses a shard (a closing EOT is not in the shard) */
    expect(w->start + w->len - (int64_t)w->ends_doc <= s->first + s->n_tokens);
    expect(w->len >= 2);
    expect(w->len <= c->seq_len + 1);
    expect(w->start >= prev_end - 1); /* in order; at most the one-token overlap */
    prev_end = w->start + w->len;
  }
}

START_TEST(test_data_corpus_open_concatenates_shards_in_name_order) {
  enum { T = 5 };
  /* Made out of name order; documents of many lengths, some over T + 1. */
  const int32_t s2[] = {GE, 20, 21, 22, GE, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
  const int32_t s0[] = {GE, 1, 2, 3, 4, 5, 6, 7, 8, GE, 9};
  const int32_t s1[] = {GE, 10, 11, GE, GE, 12, 13, 14, 15, 16, 17};
  const int32_t *parts[3] = {s0, s1, s2};
  const int64_t lens[3] = {11, 11, 15};
  char path[256];
  write_shard(path, "s2.bin", s2, 15, GE, GV);
  write_shard(path, "s0.bin", s0, 11, GE, GV);
  write_shard(path, "s1.bin", s1, 11, GE, GV);
  write_shard(path, "other.dat", s0, 11, GE, GV); /* not matched */
  char pattern[256];
  glob_pattern(pattern, sizeof pattern, "s*.bin");
  ddp_corpus_t c;
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, T), DDP_OK);
  ck_assert_int_eq(c.n_segs, 3);
  ck_assert_int_eq(c.n_tokens, 11 + 11 + 15);
  ck_assert_int_eq(c.eot, GE);
  ck_assert_int_eq(c.vocab, GV);
  ck_assert_int_eq(c.n_headless, 0);
  int64_t at = 0;
  for (int s = 0; s < 3; ++s) {
    char want[16];
    snprintf(want, sizeof want, "/s%d.bin", s);
    ddp_assert_contains(c.segs[s].name, want);
    ck_assert_int_eq(c.segs[s].first, at);
    ck_assert_int_eq(c.segs[s].n_tokens, lens[s]);
    ck_assert_int_eq(c.segs[s].file_bytes, DDP_SHARD_HEADER_BYTES + 2 * lens[s]);
    for (int64_t i = 0; i < lens[s]; ++i) expect_eq(ddp_corpus_token(&c, at + i), parts[s][i]);
    at += lens[s];
  }
  check_windows_in_segments(&c);
  /* Documents (T + 1 = 6 tokens a window; each document's closing EOT is
   * its last target): s0 {9 tokens + EOT: windows 6 + 5}, {GE, 9} + EOT;
   * s1 {GE, 10, 11} + EOT, a lone EOT, {7 + EOT: windows 6 + 3}; s2
   * {4} + EOT, {11 + EOT: windows 6 + 6 + 2}. */
  ck_assert_int_eq(c.n_docs, 6);
  ck_assert_int_eq(c.n_skipped, 1);
  const ddp_window_t want[] = {{0, 6, 0, 0},  {5, 5, 0, 1},  {9, 3, 0, 1},  {11, 4, 1, 1},
                               {15, 6, 1, 0}, {20, 3, 1, 1}, {22, 5, 2, 1}, {26, 6, 2, 0},
                               {31, 6, 2, 0}, {36, 2, 2, 1}};
  ck_assert_int_eq(c.n_windows, (int64_t)(sizeof want / sizeof want[0]));
  for (int64_t i = 0; i < c.n_windows; ++i) {
    ck_assert_int_eq(c.windows[i].start, want[i].start);
    ck_assert_int_eq(c.windows[i].len, want[i].len);
    ck_assert_int_eq(c.windows[i].seg, want[i].seg);
    ck_assert_int_eq(c.windows[i].ends_doc, want[i].ends_doc);
  }
  /* s0's last document {GE, 9} ends with its shard: it does not take s1's
   * head, and its closing EOT is not read from s1 */
  ck_assert_int_eq(c.windows[2].start + c.windows[2].len - 1, c.segs[1].first);
  int32_t closed[3];
  ddp_corpus_read_window(&c, &c.windows[2], closed);
  ck_assert_int_eq(closed[0], GE);
  ck_assert_int_eq(closed[1], 9);
  ck_assert_int_eq(closed[2], GE);
  ddp_corpus_destroy(&c);

  /* a plain path matches itself */
  path_in_dir(pattern, sizeof pattern, "s1.bin");
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, T), DDP_OK);
  ck_assert_int_eq(c.n_segs, 1);
  ck_assert_int_eq(c.n_tokens, 11);
  ck_assert_int_eq(ddp_corpus_token(&c, 5), 12);
  ddp_corpus_destroy(&c);
}
END_TEST

START_TEST(test_data_corpus_open_glob_without_match_is_io_error) {
  char pattern[256];
  glob_pattern(pattern, sizeof pattern, "train_*.bin");
  ddp_corpus_t c;
  memset(&c, 0xA5, sizeof c);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 64), DDP_ERR_IO);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "no file matches");
  ddp_assert_contains(log, pattern);
  free(log);
  assert_zeroed(&c);
  /* One bad shard among good ones fails the whole corpus, naming it. */
  const int32_t ok[] = {GE, 1, 2};
  char path[256];
  write_shard(path, "train_0.bin", ok, 3, GE, GV);
  path_in_dir(path, sizeof path, "train_1.bin");
  const int32_t h[5] = {DDP_SHARD_MAGIC_U16, 1, 9, GE, GV};
  write_raw(path, h, ok, 2 * 3); /* says 9 tokens, holds 3 */
  ddp_test_log_start();
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 64), DDP_ERR_FORMAT);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, path);
  ddp_assert_contains(log, "truncated");
  free(log);
  assert_zeroed(&c);
}
END_TEST

START_TEST(test_data_corpus_open_shards_that_disagree_are_format_errors) {
  const int32_t tok[] = {GE, 1, 2, 3};
  const int32_t tok_e[] = {255, 1, 2, 3};
  char a[256], b[256], pattern[256];
  write_shard(a, "d0.bin", tok, 4, GE, GV);
  write_shard(b, "d1.bin", tok_e, 4, 255, GV); /* another EOT */
  glob_pattern(pattern, sizeof pattern, "d*.bin");
  ddp_corpus_t c;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 64), DDP_ERR_FORMAT);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "shards disagree");
  ddp_assert_contains(log, a);
  ddp_assert_contains(log, b);
  ddp_assert_contains(log, "EOT 255");
  ddp_assert_contains(log, "EOT 256");
  free(log);
  assert_zeroed(&c);

  write_shard(b, "d1.bin", tok, 4, GE, 300); /* another vocabulary */
  ddp_test_log_start();
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 64), DDP_ERR_FORMAT);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, a);
  ddp_assert_contains(log, b);
  ddp_assert_contains(log, "vocabulary 300");
  ddp_assert_contains(log, "vocabulary 257");
  free(log);
  assert_zeroed(&c);

  write_shard(b, "d1.bin", tok, 4, GE, GV); /* agreeing now */
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 64), DDP_OK);
  ck_assert_int_eq(c.n_segs, 2);
  ddp_corpus_destroy(&c);
}
END_TEST

/* Occurrences of needle in text. */
static int count_in(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) ++n;
  return n;
}

START_TEST(test_data_corpus_open_headless_shard_head_is_a_document) {
  /* h1 starts mid-document (as llm.c's writers cut shards): its 3 tokens
   * before the first EOT are a document of their own, never glued to h0's
   * last document, and several EOTs after the head do not change its size. */
  const int32_t h0[] = {GE, 1, 2, 3, GE, 4, 5};
  const int32_t h1[] = {6, 7, 8, GE, 9, 9, GE, 10, 11, GE, 12};
  char path[256], pattern[256];
  write_shard(path, "h0.bin", h0, 7, GE, GV);
  write_shard(path, "h1.bin", h1, 11, GE, GV);
  glob_pattern(pattern, sizeof pattern, "h*.bin");
  ddp_corpus_t c;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 16), DDP_OK);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(count_in(log, "did not start with EOT"), 1); /* one warning in all */
  ddp_assert_contains(log, "1 segment did not start with EOT (id 256)");
  ddp_assert_contains(log, "the 3 tokens before their first EOT are kept");
  free(log);
  ck_assert_int_eq(c.n_headless, 1);
  ck_assert_int_eq(c.headless_tokens, 3);
  ck_assert_int_eq(c.n_docs, 6);
  /* each with its closing EOT */
  const ddp_window_t want[] = {{0, 5, 0, 1},  {4, 4, 0, 1},  {7, 4, 1, 1},
                               {10, 4, 1, 1}, {13, 4, 1, 1}, {16, 3, 1, 1}};
  ck_assert_int_eq(c.n_windows, 6);
  for (int i = 0; i < 6; ++i) {
    ck_assert_int_eq(c.windows[i].start, want[i].start);
    ck_assert_int_eq(c.windows[i].len, want[i].len);
    ck_assert_int_eq(c.windows[i].seg, want[i].seg);
    ck_assert_int_eq(c.windows[i].ends_doc, 1);
  }
  ck_assert_int_eq(ddp_corpus_token(&c, 7), 6); /* the head's first token, an input */
  ddp_corpus_destroy(&c);

  /* Two headless shards (one without any EOT): still one warning, summed. */
  const int32_t h2[] = {13, 14, 15, 16};
  write_shard(path, "h2.bin", h2, 4, GE, GV);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 16), DDP_OK);
  log = ddp_test_log_stop();
  ck_assert_int_eq(count_in(log, "did not start with EOT"), 1);
  ddp_assert_contains(log, "2 segments did not start with EOT");
  ddp_assert_contains(log, "the 7 tokens before their first EOT are kept");
  ddp_assert_contains(log, pattern); /* names the data */
  free(log);
  ck_assert_int_eq(c.n_headless, 2);
  ck_assert_int_eq(c.headless_tokens, 7);
  ck_assert_int_eq(c.n_windows, 7);
  ck_assert_int_eq(c.windows[6].start, 18);
  ck_assert_int_eq(c.windows[6].len, 5); /* 13 14 15 16 and the closing EOT */
  ck_assert_int_eq(c.windows[6].seg, 2);
  ddp_corpus_destroy(&c);
}
END_TEST

START_TEST(test_data_corpus_fingerprint_follows_names_sizes_and_content) {
  const int32_t a[] = {GE, 1, 2, 3, GE, 4};
  const int32_t b[] = {GE, 5, 6, 7, 8};
  char path[256], pattern[256];
  write_shard(path, "f0.bin", a, 6, GE, GV);
  write_shard(path, "f1.bin", b, 5, GE, GV);
  glob_pattern(pattern, sizeof pattern, "f*.bin");
  ddp_corpus_t c;
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 32), DDP_OK);
  const uint64_t base = ddp_corpus_fingerprint(&c);
  ddp_corpus_destroy(&c);

  /* the same files again, and the same names in another directory */
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 32), DDP_OK);
  ck_assert(ddp_corpus_fingerprint(&c) == base);
  ddp_corpus_destroy(&c);
  char sub[256], moved[300], sub_pattern[300];
  path_in_dir(sub, sizeof sub, "elsewhere");
  ck_assert_int_eq(mkdir(sub, 0755), 0);
  snprintf(moved, sizeof moved, "%s/f0.bin", sub);
  ck_assert_int_eq(ddp_shard_write(moved, a, 6, GE, GV), DDP_OK);
  snprintf(moved, sizeof moved, "%s/f1.bin", sub);
  ck_assert_int_eq(ddp_shard_write(moved, b, 5, GE, GV), DDP_OK);
  snprintf(sub_pattern, sizeof sub_pattern, "%s/f*.bin", sub);
  ck_assert_int_eq(ddp_corpus_open(&c, sub_pattern, 32), DDP_OK);
  ck_assert(ddp_corpus_fingerprint(&c) == base);
  ddp_corpus_destroy(&c);

  /* another seq_len cuts other windows: another fingerprint */
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 2), DDP_OK);
  ck_assert(ddp_corpus_fingerprint(&c) != base);
  ddp_corpus_destroy(&c);

  /* a shard's name changes (same bytes, same order) */
  char from[256], to[256];
  path_in_dir(from, sizeof from, "f1.bin");
  path_in_dir(to, sizeof to, "f2.bin");
  ck_assert_int_eq(rename(from, to), 0);
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 32), DDP_OK);
  const uint64_t renamed = ddp_corpus_fingerprint(&c);
  ck_assert(renamed != base);
  ddp_corpus_destroy(&c);
  ck_assert_int_eq(rename(to, from), 0);
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 32), DDP_OK);
  ck_assert(ddp_corpus_fingerprint(&c) == base); /* and back */
  ddp_corpus_destroy(&c);

  /* a shard's content changes, not its name, size or documents: the
   * shard's own fingerprint stays, its content hash and the corpus's do not */
  const int32_t b1[] = {GE, 5, 6, 9, 8};
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 32), DDP_OK);
  const uint64_t seg1 = ddp_corpus_segment_fingerprint(&c, 1);
  const uint64_t content1 = c.segs[1].content_hash;
  ddp_corpus_destroy(&c);
  write_shard(path, "f1.bin", b1, 5, GE, GV);
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 32), DDP_OK);
  ck_assert(ddp_corpus_segment_fingerprint(&c, 1) == seg1);
  ck_assert(c.segs[1].content_hash != content1);
  ck_assert(ddp_corpus_fingerprint(&c) != base);
  ddp_corpus_destroy(&c);
  write_shard(path, "f1.bin", b, 5, GE, GV);
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 32), DDP_OK);
  ck_assert(ddp_corpus_fingerprint(&c) == base); /* and back */
  ddp_corpus_destroy(&c);

  /* a shard's size changes (one more token, same windows count) */
  const int32_t b2[] = {GE, 5, 6, 7, 8, 9};
  write_shard(path, "f1.bin", b2, 6, GE, GV);
  ck_assert_int_eq(ddp_corpus_open(&c, pattern, 32), DDP_OK);
  ck_assert_int_eq(c.n_windows, 3);
  ck_assert(ddp_corpus_fingerprint(&c) != base);
  ck_assert(ddp_corpus_fingerprint(&c) != renamed);
  ddp_corpus_destroy(&c);
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
  ck_assert_int_eq(c.n_windows, 2);
  ck_assert_int_eq(c.windows[0].start, 1);
  ck_assert_int_eq(c.windows[0].len, 4); /* E 1 2 and the closing EOT */
  ck_assert_int_eq(c.windows[1].start, 6);
  ck_assert_int_eq(c.windows[1].len, 3);
  ck_assert_int_eq(c.n_segs, 1);
  ck_assert_ptr_null(c.segs[0].map); /* a host array, not a mapping */
  ck_assert_int_eq(c.segs[0].file_bytes, 0);
  ddp_corpus_destroy(&c);

  const int32_t only_eot[] = {E, E};
  ddp_test_log_start();
  ck_assert_int_eq(ddp_corpus_from_tokens(&c, only_eot, 2, E, 10, 16, "lonely"), DDP_ERR_FORMAT);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "lonely: no document has a token to predict");
  free(log);
  assert_zeroed(&c);
}
END_TEST

START_TEST(test_data_corpus_keeps_tokens_before_the_first_eot) {
  enum { E = 0 };
  const int32_t tok[] = {4, 5, 6, E, 7, E, 8};
  ddp_corpus_t c;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_corpus_from_tokens(&c, tok, 7, E, 10, 16, "mid.bin"), DDP_OK);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "mid.bin: 1 segment did not start with EOT (id 0)");
  ddp_assert_contains(log, "the 3 tokens before their first EOT are kept");
  free(log);
  ck_assert_int_eq(c.n_docs, 3);
  ck_assert_int_eq(c.n_headless, 1);
  ck_assert_int_eq(c.headless_tokens, 3);
  ck_assert_int_eq(c.windows[0].start, 0);
  ck_assert_int_eq(c.windows[0].len, 4); /* 4 5 6 and the closing EOT */
  ck_assert_int_eq(c.windows[1].start, 3);
  ck_assert_int_eq(c.windows[1].len, 3);
  ddp_corpus_destroy(&c);

  /* No EOT at all: everything is the head. */
  const int32_t none[] = {4, 5, 6, 7};
  ddp_test_log_start();
  ck_assert_int_eq(ddp_corpus_from_tokens(&c, none, 4, E, 10, 16, "raw"), DDP_OK);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "the 4 tokens before their first EOT are kept");
  free(log);
  ck_assert_int_eq(c.n_windows, 1);
  ck_assert_int_eq(c.windows[0].len, 5);
  ck_assert_int_eq(c.headless_tokens, 4);
  ddp_corpus_destroy(&c);
}
END_TEST

START_TEST(test_data_corpus_rejects_tokens_outside_the_vocabulary) {
  const int32_t tok[] = {9, 1, -2, 3};
  ddp_corpus_t c;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_corpus_from_tokens(&c, tok, 4, 9, 10, 16, "neg"), DDP_ERR_FORMAT);
  ck_assert_int_eq(ddp_corpus_from_tokens(&c, tok, 4, 10, 10, 16, "eot"), DDP_ERR_INVALID_ARG);
  const int32_t big[] = {9, 1, 10, 3};
  ck_assert_int_eq(ddp_corpus_from_tokens(&c, big, 4, 9, 10, 16, "big"), DDP_ERR_FORMAT);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "neg: token 2 has value -2, outside the vocabulary [0, 10)");
  ddp_assert_contains(log, "EOT id 10 is outside the vocabulary");
  ddp_assert_contains(log, "big: token 2 has value 10, outside the vocabulary [0, 10)");
  free(log);
  assert_zeroed(&c);
}
END_TEST

START_TEST(test_data_corpus_long_documents_become_windows_covering_every_target_once) {
  enum { S = 7, E = 50 };
  /* Lengths around the multiples of seq_len + 1, where off-by-ones live. */
  const int lens[] = {1,     2,         3,         S,         S + 1, S + 2, S + 3,
                      2 * S, 2 * S + 1, 2 * S + 2, 5 * S + 3, 1,     40,    8 * S + 1};
  const int nd = (int)(sizeof lens / sizeof lens[0]);
  int32_t tok[512];
  int doc_start[32], n = 0;
  for (int d = 0; d < nd; ++d) {
    doc_start[d] = n;
    tok[n++] = E;
    for (int k = 1; k < lens[d]; ++k) tok[n++] = (d * 31 + k * 7) % E;
  }
  ddp_corpus_t c;
  expect_eq(ddp_corpus_from_tokens(&c, tok, n, E, E + 1, S, "w"), DDP_OK);
  expect_eq(c.n_skipped, 2);
  expect_eq(c.n_docs, nd - 2);

  /* a document of L tokens has L targets: L - 1 tokens and its closing EOT */
  int covered[512] = {0}, closed[32] = {0};
  int64_t expect_windows = 0;
  for (int d = 0; d < nd; ++d) expect_windows += lens[d] > 1 ? (lens[d] + S - 1) / S : 0;
  expect_eq(c.n_windows, expect_windows);
  int d = -1, doc_windows = 0;
  for (int64_t i = 0; i < c.n_windows; ++i) {
    const ddp_window_t *w = &c.windows[i];
    expect_eq(w->seg, 0);
    expect(w->len >= 2);
    expect(w->len <= S + 1);
    if (d + 1 < nd && w->start == doc_start[d + 1 + (lens[d + 1] == 1)]) {
      /* the first window of the next trainable document starts at its EOT */
      if (d >= 0) expect_eq(doc_windows, lens[d] > 1 ? (lens[d] + S - 1) / S : 0);
      d += 1 + (lens[d + 1] == 1);
      doc_windows = 0;
      expect_eq(tok[w->start], E);
    } else {
      /* overlap by one: this window's first input was the last target before */
      const ddp_window_t *prev = &c.windows[i - 1];
      expect(i > 0);
      expect_eq(prev->len, S + 1);
      expect_eq(w->start, prev->start + prev->len - 1);
      expect(tok[w->start] != E);
    }
    ++doc_windows;
    /* never crosses documents; only a document's last window closes it */
    expect(w->start + w->len - (int64_t)w->ends_doc <= doc_start[d] + lens[d]);
    expect_eq(w->ends_doc, w->start + w->len == doc_start[d] + lens[d] + 1);
    for (int t = 1; t < w->len; ++t) {
      if (w->ends_doc && t == w->len - 1)
        closed[d]++;
      else
        covered[w->start + t]++;
    }
  }
  expect_eq(d, nd - 1);
  /* Every non-EOT token is a target exactly once; EOTs (document starts) never;
   * every trainable document is closed once. */
  for (int p = 0; p < n; ++p) expect_eq(covered[p], tok[p] == E ? 0 : 1);
  for (int k = 0; k < nd; ++k) expect_eq(closed[k], lens[k] > 1 ? 1 : 0);
  ddp_corpus_destroy(&c);
}
END_TEST

/* ---- the built-in data set ----------------------------------------------- */

START_TEST(test_data_builtin_is_deterministic) {
  ddp_corpus_t a, b, d, other;
  ck_assert_int_eq(ddp_builtin_corpus(&a, 42, NULL, DDP_SPLIT_TRAIN, 500, 256, 256), DDP_OK);
  ck_assert_int_eq(ddp_builtin_corpus(&b, 42, NULL, DDP_SPLIT_TRAIN, 500, 256, 256), DDP_OK);
  ck_assert_int_eq(a.n_tokens, b.n_tokens);
  int32_t *ta = corpus_tokens(&a), *tb = corpus_tokens(&b);
  ck_assert_int_eq(memcmp(ta, tb, (size_t)a.n_tokens * 4), 0);
  ck_assert_int_eq(memcmp(a.answer_at, b.answer_at, 500 * sizeof(int32_t)), 0);
  /* Document i does not depend on how many are made. */
  ck_assert_int_eq(ddp_builtin_corpus(&d, 42, NULL, DDP_SPLIT_TRAIN, 200, 256, 256), DDP_OK);
  int32_t *td = corpus_tokens(&d);
  ck_assert_int_eq(memcmp(ta, td, (size_t)d.n_tokens * 4), 0);
  /* The single-document generator is the same function. */
  int32_t doc[256];
  int len, eq;
  ck_assert_int_eq(ddp_builtin_document(42, NULL, DDP_SPLIT_TRAIN, 137, 256, doc, &len, &eq),
                   DDP_OK);
  ck_assert_int_eq(a.n_windows, 500);            /* max_len <= seq_len: one window each */
  ck_assert_int_eq(len + 1, a.windows[137].len); /* and its closing EOT */
  ck_assert_int_eq(eq, a.answer_at[137]);
  ck_assert_int_eq(memcmp(doc, ta + a.windows[137].start, (size_t)len * 4), 0);
  /* Another seed, other data. */
  ck_assert_int_eq(ddp_builtin_corpus(&other, 43, NULL, DDP_SPLIT_TRAIN, 500, 256, 256), DDP_OK);
  int32_t *to = corpus_tokens(&other);
  ck_assert(other.n_tokens != a.n_tokens || memcmp(to, ta, (size_t)a.n_tokens * 4) != 0);
  free(ta);
  free(tb);
  free(td);
  free(to);
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
  int32_t *tok = corpus_tokens(c);
  int64_t n = 0;
  for (int64_t i = 0; i < c->n_tokens; ++i) n += tok[i] == '\n';
  text_line_t *lines = calloc((size_t)n, sizeof *lines);
  int64_t k = 0;
  int at = 0;
  for (int64_t i = 0; i < c->n_tokens; ++i) {
    if (tok[i] == DDP_BUILTIN_EOT) continue;
    expect(at < 31);
    lines[k].s[at++] = (char)tok[i];
    if (tok[i] == '\n') {
      ++k;
      at = 0;
    }
  }
  expect_eq(k, n);
  free(tok);
  *count = n;
  return lines;
}

START_TEST(test_data_builtin_train_and_val_share_no_line) {
  ddp_corpus_t tr, va;
  ck_assert_int_eq(ddp_builtin_corpus(&tr, 7, NULL, DDP_SPLIT_TRAIN, 4000, 256, 256), DDP_OK);
  ck_assert_int_eq(ddp_builtin_corpus(&va, 7, NULL, DDP_SPLIT_VAL, 1000, 256, 256), DDP_OK);
  int32_t *ttr = corpus_tokens(&tr), *tva = corpus_tokens(&va);
  ck_assert(memcmp(ttr, tva, 64 * 4) != 0);
  free(ttr);
  free(tva);
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
    /* seq_len >= max_len: every document and its closing EOT is one window */
    expect_eq(ddp_builtin_corpus(&c, 3, NULL, split, 3000, max_len, max_len), DDP_OK);
    expect_eq(c.eot, DDP_BUILTIN_EOT);
    expect_eq(c.vocab, DDP_BUILTIN_VOCAB);
    expect_eq(c.n_docs, 3000);
    expect_eq(c.n_skipped, 0);
    expect_eq(c.n_windows, 3000);
    ck_assert_ptr_nonnull(c.answer_at);
    int32_t *tok = corpus_tokens(&c);
    for (int64_t i = 0; i < c.n_tokens; ++i) {
      expect(tok[i] >= 0);
      expect(tok[i] < DDP_BUILTIN_VOCAB);
    }
    int64_t expect_start = 0;
    for (int64_t d = 0; d < c.n_docs; ++d) {
      const int32_t *t = tok + c.windows[d].start;
      expect_eq(c.windows[d].ends_doc, 1);
      const int64_t len = c.windows[d].len - 1;    /* the document's own tokens */
      expect_eq(c.windows[d].start, expect_start); /* documents tile the tokens */
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
    free(tok);
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
  ck_assert_int_eq(ddp_builtin_corpus(&c, 1234, NULL, DDP_SPLIT_TRAIN, n, max_len, max_len),
                   DDP_OK);
  ck_assert_int_eq(c.n_windows, n);
  int64_t *len = malloc((size_t)n * sizeof *len);
  int64_t near_max = 0, max_seen = 0;
  for (int64_t i = 0; i < n; ++i) {
    len[i] = c.windows[i].len - 1; /* the document, without its closing EOT */
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
    expect(k >= 1 && k <= 5); /* operands of 1..5 letters */
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

/* The lines of each task in a corpus of `split` drawn with `mix`, every
 * line's answer checked. */
static void count_tasks(const ddp_builtin_mix_t *mix, int split, int counts[4]) {
  ddp_corpus_t c;
  memset(counts, 0, 4 * sizeof *counts);
  ck_assert_int_eq(ddp_builtin_corpus(&c, 99, mix, split, 2000, 256, 256), DDP_OK);
  int64_t n;
  text_line_t *lines = corpus_lines(&c, &n);
  for (int64_t i = 0; i < n; ++i) check_task_line(lines[i].s, counts);
  free(lines);
  ddp_corpus_destroy(&c);
}

START_TEST(test_data_builtin_answers_are_correct) {
  for (int split = 0; split < 2; ++split) {
    int counts[4];
    count_tasks(NULL, split, counts);                             /* checks every line's answer */
    for (int t = 0; t < 4; ++t) ck_assert_int_gt(counts[t], 1000); /* all four tasks occur */
  }
}
END_TEST

START_TEST(test_data_builtin_mix_parse) {
  ddp_builtin_mix_t m;
  char why[256];
  ck_assert_int_eq(ddp_builtin_mix_parse("copy=4,reverse,sort,add", &m, why, sizeof why), DDP_OK);
  ck_assert(m.weight[DDP_BUILTIN_COPY] == 4 && m.weight[DDP_BUILTIN_REVERSE] == 1 &&
            m.weight[DDP_BUILTIN_SORT] == 1 && m.weight[DDP_BUILTIN_ADD] == 1);
  ck_assert_int_eq(ddp_builtin_mix_parse("add=7,copy=0", &m, why, sizeof why), DDP_OK);
  ck_assert(m.weight[DDP_BUILTIN_COPY] == 0 && m.weight[DDP_BUILTIN_REVERSE] == 0 &&
            m.weight[DDP_BUILTIN_SORT] == 0 && m.weight[DDP_BUILTIN_ADD] == 7);
  ck_assert_int_eq(ddp_builtin_mix_parse(DDP_BUILTIN_DEFAULT_MIX, &m, NULL, 0), DDP_OK);
  static const struct {
    const char *text, *why;
  } bad[] = {
      {"", "'' is not a task"},
      {"copy,mul", "'mul' is not a task"},
      {"copy,", "'' is not a task"},
      {"cop", "'cop' is not a task"},
      {"sort,sort=2", "sort is named twice"},
      {"copy=", "the weight of copy is not a whole number from 0 to 1000"},
      {"copy=1001", "the weight of copy is not a whole number"},
      {"copy=-1", "the weight of copy is not a whole number"},
      {"copy=2x", "the weight of copy is not a whole number"},
      {"copy=99999999999999999999", "the weight of copy is not a whole number"},
      {"copy=0,add=0", "every weight is 0"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    why[0] = '\0';
    m.weight[0] = 12345;
    if (ddp_builtin_mix_parse(bad[i].text, &m, why, sizeof why) != DDP_ERR_INVALID_ARG)
      ck_abort_msg("mix '%s' was accepted", bad[i].text);
    if (!strstr(why, bad[i].why))
      ck_abort_msg("mix '%s': '%s' lacks '%s'", bad[i].text, why, bad[i].why);
    ck_assert_uint_eq(m.weight[0], 12345); /* untouched */
  }
}
END_TEST

/* A mix draws each task in proportion to its weight, leaves out a task of
 * weight 0, and the equal mix is the data set NULL gives. */
START_TEST(test_data_builtin_mix_draws_by_weight) {
  int counts[4];
  const ddp_builtin_mix_t copy_only = {{1, 0, 0, 0}}, heavy = {{4, 1, 1, 1}},
                          equal = {{1, 1, 1, 1}};
  for (int split = 0; split < 2; ++split) {
    count_tasks(&copy_only, split, counts);
    ck_assert_int_gt(counts[0], 1000);
    ck_assert_int_eq(counts[1] + counts[2] + counts[3], 0);
  }
  count_tasks(&heavy, DDP_SPLIT_TRAIN, counts);
  const double total = counts[0] + counts[1] + counts[2] + counts[3];
  /* several thousand lines: the copy share is 4/7 within a few percent */
  ck_assert_double_eq_tol(counts[0] / total, 4.0 / 7.0, 0.03);
  for (int t = 1; t < 4; ++t) ck_assert_double_eq_tol(counts[t] / total, 1.0 / 7.0, 0.03);
  ddp_corpus_t a, b;
  ck_assert_int_eq(ddp_builtin_corpus(&a, 5, NULL, DDP_SPLIT_VAL, 300, 128, 128), DDP_OK);
  ck_assert_int_eq(ddp_builtin_corpus(&b, 5, &equal, DDP_SPLIT_VAL, 300, 128, 128), DDP_OK);
  ck_assert_int_eq(a.n_tokens, b.n_tokens);
  int32_t *ta = corpus_tokens(&a), *tb = corpus_tokens(&b);
  ck_assert_int_eq(memcmp(ta, tb, (size_t)a.n_tokens * 4), 0);
  free(ta);
  free(tb);
  ddp_corpus_destroy(&a);
  ddp_corpus_destroy(&b);
  /* a mix no parser made is checked too */
  const ddp_builtin_mix_t none = {{0, 0, 0, 0}}, huge = {{1, 1, 1, DDP_BUILTIN_MAX_WEIGHT + 1}};
  ddp_test_log_start();
  ck_assert_int_eq(ddp_builtin_corpus(&a, 5, &none, DDP_SPLIT_VAL, 10, 128, 128),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_builtin_corpus(&a, 5, &huge, DDP_SPLIT_VAL, 10, 128, 128),
                   DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "every task weight is 0");
  ddp_assert_contains(log, "weight 1001 of add is above 1000");
  free(log);
}
END_TEST

START_TEST(test_data_builtin_rejects_bad_arguments) {
  ddp_corpus_t c;
  ddp_test_log_start();
  ck_assert_int_eq(
      ddp_builtin_corpus(&c, 1, NULL, DDP_SPLIT_TRAIN, 10, DDP_BUILTIN_MIN_LEN - 1, 64),
      DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_builtin_corpus(&c, 1, NULL, 2, 10, 64, 64), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_builtin_corpus(&c, 1, NULL, DDP_SPLIT_TRAIN, 0, 64, 64),
                   DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "max_len 18 is below 19");
  ddp_assert_contains(log, "split 2 is neither train (0) nor val (1)");
  free(log);
  assert_zeroed(&c);
  /* max_len == DDP_BUILTIN_MIN_LEN works: every line fits after the EOT
   * (seq_len max_len: a document and its closing EOT are one window). */
  ck_assert_int_eq(
      ddp_builtin_corpus(&c, 1, NULL, DDP_SPLIT_VAL, 300, DDP_BUILTIN_MIN_LEN, DDP_BUILTIN_MIN_LEN),
      DDP_OK);
  ck_assert_int_eq(c.n_windows, 300);
  ddp_corpus_destroy(&c);
}
END_TEST

/* Batch buffers from a backend's host memory (pinned on CUDA): usable like
 * plain ones, freed through the backend, and bad arguments refused. */
START_TEST(test_data_batch_init_host) {
  ddp_backend_t *be = ddp_test_cpu_backend();
  ddp_batch_t b;
  ck_assert_int_eq(ddp_batch_init_host(&b, be, 100, 7), DDP_OK);
  ck_assert_ptr_eq(b.host_of, be);
  ck_assert_int_eq(b.capacity, 100);
  ck_assert_int_eq(b.max_rows, 7);
  for (int i = 0; i < 100; ++i) b.inputs[i] = i, b.targets[i] = -i;
  ck_assert_int_eq(b.inputs[99] + b.targets[99], 0);
  ddp_batch_destroy(&b);
  ck_assert_ptr_null(b.inputs);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_batch_init_host(&b, NULL, 100, 7), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_batch_init_host(&b, be, 0, 7), DDP_ERR_INVALID_ARG);
  free(ddp_test_log_stop());
  ddp_backend_destroy(be);
}
END_TEST

static Suite *data_suite(void) {
  Suite *s = suite_create("data");
  TCase *tc = tcase_create("shard");
  tcase_add_unchecked_fixture(tc, setup, teardown);
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
  tcase_add_test(tc, test_data_shard_vocab_above_2_24_is_format_error);
  tcase_add_test(tc, test_data_vocab_above_2_24_is_refused_by_writer_and_host_corpus);
  tcase_add_test(tc, test_data_sample_hash_reads_the_sampled_blocks);
  tcase_add_test(tc, test_data_shard_write_refuses_bad_input_without_creating_files);
  tcase_add_test(tc, test_data_shard_failed_write_leaves_no_file);
  suite_add_tcase(s, tc);

  tc = tcase_create("big_shard");
  tcase_add_test(tc, test_data_shard_over_2_gib_reads_through_64_bit_offsets);
  tcase_set_timeout(tc, 60); /* reads 2.2 GB of (sparse) page cache once */
  suite_add_tcase(s, tc);

  tc = tcase_create("corpus_open");
  tcase_add_unchecked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_data_corpus_open_concatenates_shards_in_name_order);
  tcase_add_test(tc, test_data_corpus_open_glob_without_match_is_io_error);
  tcase_add_test(tc, test_data_corpus_open_shards_that_disagree_are_format_errors);
  tcase_add_test(tc, test_data_corpus_open_headless_shard_head_is_a_document);
  tcase_add_test(tc, test_data_corpus_fingerprint_follows_names_sizes_and_content);
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
  tcase_add_test(tc, test_data_builtin_mix_parse);
  tcase_add_test(tc, test_data_builtin_mix_draws_by_weight);
  tcase_add_test(tc, test_data_batch_init_host);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(data_suite());
}
