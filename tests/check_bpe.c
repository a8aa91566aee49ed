/* The GPT-2 BPE tokenizer (data/bpe.h) against Hugging Face `tokenizers`:
 * tests/data/bpe holds a small byte-level BPE trained by that package and
 * what it encodes for ~40 varied texts (tests/data/bpe/make-fixture.py), and
 * every one must come out token for token and decode back byte for byte.
 * Also: bytes that are not UTF-8 survive a round trip, long pre-tokens, the
 * pre-token cache (emptied and refilled) never changes a result, and every
 * malformed vocab.json / merges.txt is refused with the file, line and cause.
 * A build without PCRE2 cannot encode: then the encoder must say so. */
#include <jansson.h>
#include <stdint.h>
#include <sys/stat.h>

#include "check_util.h"
#include "data/bpe.h"

static char g_fixture[4096];
static char g_dir[64];

static void setup(void) {
  const char *src = getenv("top_srcdir");
  snprintf(g_fixture, sizeof g_fixture, "%s/tests/data/bpe", src ? src : ".");
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp_bpe_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
}

static ddp_bpe_t *load_fixture(void) {
  ddp_bpe_t *tok = NULL;
  ck_assert_int_eq(ddp_bpe_load(g_fixture, &tok), DDP_OK);
  return tok;
}

/* Encodes and checks the decode gives text back; returns the ids (owned by
 * the caller). */
static ddp_bpe_ids_t encode_roundtrip(const ddp_bpe_t *tok, ddp_bpe_cache_t *c, const char *text,
                                      size_t len) {
  ddp_bpe_ids_t ids = {0};
  ck_assert_int_eq(ddp_bpe_encode(tok, c, text, len, &ids), DDP_OK);
  char *back = NULL;
  size_t back_len = 0;
  ck_assert_int_eq(ddp_bpe_decode(tok, ids.v, ids.n, &back, &back_len), DDP_OK);
  ck_assert_uint_eq(back_len, len);
  ck_assert_msg(memcmp(back, text, len) == 0, "decode differs for '%.*s'", (int)len, text);
  free(back);
  return ids;
}

START_TEST(test_fixture_loads) {
  ddp_bpe_t *tok = load_fixture();
  ck_assert_int_eq(ddp_bpe_vocab_size(tok), 600);
  ck_assert_int_eq(ddp_bpe_eot(tok), 0); /* the fixture lists <|endoftext|> first */
  size_t len = 0;
  const char *b = ddp_bpe_token_bytes(tok, 0, &len);
  ck_assert_uint_eq(len, 13);
  ck_assert(memcmp(b, "<|endoftext|>", 13) == 0);
  ck_assert_ptr_null(ddp_bpe_token_bytes(tok, 600, &len));
  ck_assert_ptr_null(ddp_bpe_token_bytes(tok, -1, &len));
  ddp_bpe_free(tok);
}
END_TEST

START_TEST(test_encoding_matches_hugging_face) {
  ddp_bpe_t *tok = load_fixture();
  ddp_bpe_cache_t *c = NULL;
  if (!ddp_bpe_can_encode()) {
    ddp_test_log_start();
    ck_assert_int_eq(ddp_bpe_cache_create(tok, &c), DDP_ERR_UNSUPPORTED);
    char *log = ddp_test_log_stop();
    ddp_assert_contains(log, "this build has no PCRE2 (libpcre2-dev), which BPE encoding needs");
    free(log);
    ddp_bpe_free(tok);
    return;
  }
  ck_assert_int_eq(ddp_bpe_cache_create(tok, &c), DDP_OK);
  char path[4200];
  snprintf(path, sizeof path, "%s/expected.jsonl", g_fixture);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char *line = NULL;
  size_t cap = 0;
  int n_lines = 0;
  /* Twice: the second pass is served from the cache the first filled. */
  for (int pass = 0; pass < 2; ++pass) {
    rewind(f);
    while (getline(&line, &cap, f) > 0) {
      json_error_t err;
      json_t *row = json_loads(line, JSON_ALLOW_NUL, &err);
      ck_assert_ptr_nonnull(row);
      json_t *text = json_object_get(row, "text"), *want = json_object_get(row, "ids");
      ck_assert(json_is_string(text) && json_is_array(want));
      ddp_bpe_ids_t got =
          encode_roundtrip(tok, c, json_string_value(text), json_string_length(text));
      int same = got.n == json_array_size(want);
      for (size_t i = 0; same && i < got.n; ++i)
        same = got.v[i] == json_integer_value(json_array_get(want, i));
      if (!same) {
        char *w = json_dumps(want, JSON_COMPACT);
        fprintf(stderr, "got:");
        for (size_t i = 0; i < got.n; ++i) fprintf(stderr, " %d", (int)got.v[i]);
        fprintf(stderr, "\nwant: %s\n", w);
        free(w);
      }
      ck_assert_msg(same, "pass %d: ids differ from tokenizers for \"%s\"", pass,
                    json_string_value(text));
      free(got.v);
      json_decref(row);
      n_lines += pass == 0;
    }
  }
  ck_assert_int_ge(n_lines, 40);
  free(line);
  fclose(f);
  ddp_bpe_cache_free(c);
  ddp_bpe_free(tok);
}
END_TEST

START_TEST(test_any_bytes_round_trip) {
  ddp_bpe_t *tok = load_fixture();
  ddp_bpe_cache_t *c = NULL;
  if (!ddp_bpe_can_encode()) {
    ddp_bpe_free(tok);
    return;
  }
  ck_assert_int_eq(ddp_bpe_cache_create(tok, &c), DDP_OK);
  /* Not UTF-8: a lone continuation byte, a truncated sequence, an overlong
   * form, a surrogate, 0xff, and a NUL inside the text. */
  static const char bad[] = "ok\x80 x\xe2\x82 \xc0\xaf \xed\xa0\x80 \xff\xfe tail\0nul é";
  ddp_bpe_ids_t ids = encode_roundtrip(tok, c, bad, sizeof bad - 1);
  free(ids.v);
  /* Every single byte alone. */
  for (int b = 0; b < 256; ++b) {
    char s = (char)b;
    ids = encode_roundtrip(tok, c, &s, 1);
    ck_assert_uint_eq(ids.n, 1);
    free(ids.v);
  }
  /* Long pre-tokens: a whitespace run and a word of 200 KB each (the merge
   * heap keeps this linear-logarithmic). */
  size_t n = 200000;
  char *big = malloc(n);
  memset(big, ' ', n);
  big[n - 1] = 'x';
  ids = encode_roundtrip(tok, c, big, n);
  free(ids.v);
  for (size_t i = 0; i < n; ++i) big[i] = "the"[i % 3];
  ids = encode_roundtrip(tok, c, big, n);
  free(ids.v);
  free(big);
  ddp_bpe_cache_free(c);
  ddp_bpe_free(tok);
}
END_TEST

/* More distinct pre-tokens than the cache holds: it is emptied and refilled
 * on the way, and the ids must equal those of a fresh cache per word. */
START_TEST(test_cache_overflow_changes_nothing) {
  ddp_bpe_t *tok = load_fixture();
  if (!ddp_bpe_can_encode()) {
    ddp_bpe_free(tok);
    return;
  }
  ddp_bpe_cache_t *c = NULL, *fresh = NULL;
  ck_assert_int_eq(ddp_bpe_cache_create(tok, &c), DDP_OK);
  enum { WORDS = 50000 };
  char *text = malloc(WORDS * 16);
  size_t len = 0;
  for (int i = 0; i < WORDS; ++i) len += (size_t)sprintf(text + len, " the%dth", i * 7919);
  ddp_bpe_ids_t all = encode_roundtrip(tok, c, text, len);
  ddp_bpe_ids_t again = encode_roundtrip(tok, c, text, len);
  ck_assert_uint_eq(all.n, again.n);
  ck_assert(memcmp(all.v, again.v, all.n * sizeof *all.v) == 0);
  /* Word by word, each through a cache that has never seen it. */
  size_t k = 0;
  for (int i = 0; i < WORDS; i += 997) {
    char w[32];
    int wl = sprintf(w, " the%dth", i * 7919);
    ck_assert_int_eq(ddp_bpe_cache_create(tok, &fresh), DDP_OK);
    ddp_bpe_ids_t one = {0};
    ck_assert_int_eq(ddp_bpe_encode(tok, fresh, w, (size_t)wl, &one), DDP_OK);
    /* Find this word's ids in the whole: decode prefix lengths line up. */
    size_t bytes = 0, want_bytes = 0, len1;
    for (int j = 0; j < i; ++j) want_bytes += (size_t)snprintf(NULL, 0, " the%dth", j * 7919);
    for (k = 0; bytes < want_bytes; ++k) {
      ddp_bpe_token_bytes(tok, all.v[k], &len1);
      bytes += len1;
    }
    ck_assert_uint_eq(bytes, want_bytes);
    ck_assert(k + one.n <= all.n);
    ck_assert(memcmp(all.v + k, one.v, one.n * sizeof *one.v) == 0);
    free(one.v);
    ddp_bpe_cache_free(fresh);
  }
  free(all.v);
  free(again.v);
  free(text);
  ddp_bpe_cache_free(c);
  ddp_bpe_free(tok);
}
END_TEST

START_TEST(test_decode_refuses_unknown_ids) {
  ddp_bpe_t *tok = load_fixture();
  int32_t ids[] = {5, 600};
  char *out = NULL, *log = NULL;
  size_t n = 0;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_bpe_decode(tok, ids, 2, &out, &n), DDP_ERR_INVALID_ARG);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "token 1 is 600, outside the vocabulary [0, 600)");
  ck_assert_ptr_null(out);
  free(log);
  ddp_bpe_free(tok);
}
END_TEST

/* ---- malformed tokenizer files ------------------------------------------ */

static void write_file(const char *name, const char *text) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  ck_assert_int_eq(fclose(f), 0);
}

/* The fixture's vocabulary, changed by `edit` (NULL: unchanged). */
static void write_vocab(void (*edit)(json_t *)) {
  char path[4200];
  snprintf(path, sizeof path, "%s/vocab.json", g_fixture);
  json_error_t err;
  json_t *v = json_load_file(path, 0, &err);
  ck_assert_ptr_nonnull(v);
  if (edit) edit(v);
  snprintf(path, sizeof path, "%s/vocab.json", g_dir);
  ck_assert_int_eq(json_dump_file(v, path, 0), 0);
  json_decref(v);
}

static void expect_load_error(ddp_status_t want, const char *needle) {
  ddp_bpe_t *tok = (ddp_bpe_t *)1;
  ddp_test_log_start();
  ddp_status_t st = ddp_bpe_load(g_dir, &tok);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(st, want);
  ck_assert_ptr_null(tok);
  ddp_assert_contains(log, needle);
  free(log);
}

static void drop_eot(json_t *v) {
  json_object_del(v, "<|endoftext|>");
  json_object_set_new(v, "ab_", json_integer(0)); /* keep the ids dense */
}
static void drop_byte(json_t *v) {
  json_object_del(v, "a");
  json_object_set_new(v, "ab_", json_integer(65)); /* "a" is 65 in the fixture */
}
static void id_out_of_range(json_t *v) {
  json_object_set_new(v, "in", json_integer(600));
}
static void id_twice(json_t *v) {
  json_object_set_new(v, "in", json_integer(1));
}
static void id_not_integer(json_t *v) {
  json_object_set_new(v, "in", json_string("7"));
}
static void outside_alphabet(json_t *v) {
  json_int_t id = json_integer_value(json_object_get(v, "in"));
  json_object_del(v, "in");
  json_object_set_new(v, "i n", json_integer(id)); /* a raw space is not in the alphabet */
}

START_TEST(test_load_refuses_bad_vocab) {
  write_file("merges.txt", "#version: 0.2\ni n\n");
  expect_load_error(DDP_ERR_IO, "vocab.json': No such file or directory");

  write_file("vocab.json", "{\"a\": 0,\n \"b\": }\n");
  expect_load_error(DDP_ERR_FORMAT, "vocab.json:2: malformed JSON");
  write_file("vocab.json", "[1, 2]");
  expect_load_error(DDP_ERR_FORMAT, "expected a non-empty JSON object of token -> id");

  write_vocab(id_out_of_range);
  expect_load_error(DDP_ERR_FORMAT,
                    "token \"in\" has id out of range; the ids of 600 tokens must be 0..599");
  write_vocab(id_twice);
  expect_load_error(DDP_ERR_FORMAT, "id 1 is given to both");
  write_vocab(id_not_integer);
  expect_load_error(DDP_ERR_FORMAT, "token \"in\" has id that is not an integer");
  write_vocab(outside_alphabet);
  expect_load_error(DDP_ERR_FORMAT,
                    "token \"i n\" is empty or has a character outside GPT-2's byte alphabet");
  write_vocab(drop_byte);
  expect_load_error(DDP_ERR_FORMAT,
                    "no token for byte 0x61; a byte-level vocabulary needs all 256");
  write_vocab(drop_eot);
  expect_load_error(DDP_ERR_FORMAT, "no \"<|endoftext|>\" token (the EOT)");
}
END_TEST

START_TEST(test_load_refuses_bad_merges) {
  write_vocab(NULL);
  expect_load_error(DDP_ERR_IO, "merges.txt': No such file or directory");
  write_file("merges.txt", "#version: 0.2\ni n\nh e\nab\n");
  expect_load_error(DDP_ERR_FORMAT,
                    "merges.txt:4: expected two tokens separated by one space, got \"ab\"");
  write_file("merges.txt", "i n\nh  e\n");
  expect_load_error(DDP_ERR_FORMAT, "merges.txt:2: expected two tokens separated by one space");
  write_file("merges.txt", "i n\nzzzq e\n");
  expect_load_error(DDP_ERR_FORMAT, "merges.txt:2: merge of unknown token \"zzzq\"");
  write_file("merges.txt", "i n\nh zzzq\n");
  expect_load_error(DDP_ERR_FORMAT, "merges.txt:2: merge of unknown token \"zzzq\"");
  write_file("merges.txt", "#version: 0.2\ni n\nq x\n");
  expect_load_error(DDP_ERR_FORMAT,
                    "merges.txt:3: merging \"q x\" gives a token that is not in vocab.json");
  write_file("merges.txt", "i n\nh e\ni n\n");
  expect_load_error(DDP_ERR_FORMAT, "merges.txt:3: the same merge as rank 0");
  write_file("merges.txt", "i n\nh \xff\n");
  expect_load_error(DDP_ERR_FORMAT,
                    "merges.txt:2: \"h \xff\" has a character outside GPT-2's byte alphabet");
  /* A tokenizer with no merges at all is valid: every byte is a token. */
  write_file("merges.txt", "#version: 0.2\n");
  ddp_bpe_t *tok = NULL;
  ck_assert_int_eq(ddp_bpe_load(g_dir, &tok), DDP_OK);
  ddp_bpe_cache_t *c = NULL;
  if (ddp_bpe_can_encode()) {
    ck_assert_int_eq(ddp_bpe_cache_create(tok, &c), DDP_OK);
    ddp_bpe_ids_t ids = encode_roundtrip(tok, c, "in the", 6);
    ck_assert_uint_eq(ids.n, 6);
    free(ids.v);
    ddp_bpe_cache_free(c);
  }
  ddp_bpe_free(tok);
}
END_TEST

START_TEST(test_load_refuses_missing_dir) {
  char path[128];
  snprintf(path, sizeof path, "%s/nope", g_dir);
  ddp_bpe_t *tok = NULL;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_bpe_load(path, &tok), DDP_ERR_IO);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "nope/vocab.json': No such file or directory");
  free(log);
}
END_TEST

static Suite *bpe_suite(void) {
  Suite *s = suite_create("bpe");
  TCase *tc = tcase_create("bpe");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_fixture_loads);
  tcase_add_test(tc, test_encoding_matches_hugging_face);
  tcase_add_test(tc, test_any_bytes_round_trip);
  tcase_add_test(tc, test_cache_overflow_changes_nothing);
  tcase_add_test(tc, test_decode_refuses_unknown_ids);
  tcase_add_test(tc, test_load_refuses_bad_vocab);
  tcase_add_test(tc, test_load_refuses_bad_merges);
  tcase_add_test(tc, test_load_refuses_missing_dir);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(bpe_suite());
}
