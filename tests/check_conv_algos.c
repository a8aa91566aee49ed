/* The convolution algorithm record (src/backend/conv_algos.h): lookup and
 * replacement, the text format round trip, the atomic save, and every
 * refusal of a bad file, each naming the file and line. The GPU side (a
 * recorded choice used without timing, two runs with one record
 * bit-identical) is in tests/test_gpu_resnet.sh. */
#include <config.h>

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/conv_algos.h"
#include "check_util.h"

static char g_dir[256];

static void setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp-conv-algos-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void teardown(void) {
  DIR *d = opendir(g_dir);
  if (d) {
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
      if (e->d_name[0] != '.') {
        snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
        unlink(p);
      }
    closedir(d);
  }
  chmod(g_dir, 0700);
  rmdir(g_dir);
}

static ddp_conv_algo_key_t key(ddp_conv_algo_op_t op, ddp_dtype_t dt, int C) {
  return (ddp_conv_algo_key_t){
      .op = op,
      .dt = dt,
      .sh = {.N = 32, .H = 16, .W = 16, .C = C, .K = 32, .R = 3, .S = 3, .stride = 2, .pad = 1},
      .deterministic = 1,
      .tf32 = 1};
}

static int files_in_dir(void) {
  DIR *d = opendir(g_dir);
  ck_assert_ptr_nonnull(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

START_TEST(test_put_find_replace) {
  ddp_conv_algos_t r = {0};
  const ddp_conv_algo_key_t a = key(DDP_CONV_ALGO_FWD, DDP_DTYPE_BF16, 16);
  ddp_conv_algo_key_t b = a;
  b.op = DDP_CONV_ALGO_BWD_DATA;
  ddp_conv_algo_key_t c = a;
  c.deterministic = 0; /* another mode is another key */
  ck_assert_ptr_null(ddp_conv_algos_find(&r, &a));
  ck_assert_int_eq(ddp_conv_algos_put(&r, &a, 1, 1), DDP_OK);
  ck_assert_int_eq(r.dirty, 1);
  ck_assert_ptr_null(ddp_conv_algos_find(&r, &b));
  ck_assert_ptr_null(ddp_conv_algos_find(&r, &c));
  const ddp_conv_algo_entry_t *e = ddp_conv_algos_find(&r, &a);
  ck_assert_ptr_nonnull(e);
  ck_assert_int_eq(e->algo, 1);
  r.dirty = 0;
  ck_assert_int_eq(ddp_conv_algos_put(&r, &a, 1, 1), DDP_OK);
  ck_assert_int_eq(r.dirty, 0); /* the same choice again changes nothing */
  ck_assert_int_eq(ddp_conv_algos_put(&r, &a, 7, 0), DDP_OK);
  ck_assert_int_eq(r.dirty, 1);
  ck_assert_uint_eq(r.n, 1);
  ck_assert_int_eq(ddp_conv_algos_find(&r, &a)->algo, 7);
  /* growth past the first allocation */
  for (int C = 1; C <= 200; ++C) {
    const ddp_conv_algo_key_t k = key(DDP_CONV_ALGO_BWD_WEIGHTS, DDP_DTYPE_F32, C);
    ck_assert_int_eq(ddp_conv_algos_put(&r, &k, C % 5, C % 3), DDP_OK);
  }
  ck_assert_uint_eq(r.n, 201);
  const ddp_conv_algo_key_t k77 = key(DDP_CONV_ALGO_BWD_WEIGHTS, DDP_DTYPE_F32, 77);
  ck_assert_int_eq(ddp_conv_algos_find(&r, &k77)->algo, 77 % 5);
  ddp_conv_algos_clear(&r);
  ck_assert_uint_eq(r.n, 0);
}
END_TEST

START_TEST(test_save_load_round_trip) {
  ddp_conv_algos_t r = {0};
  const ddp_dtype_t dts[3] = {DDP_DTYPE_F32, DDP_DTYPE_BF16, DDP_DTYPE_F16};
  for (int op = 0; op < 3; ++op)
    for (int d = 0; d < 3; ++d) {
      ddp_conv_algo_key_t k = key((ddp_conv_algo_op_t)op, dts[d], 8 * (op + 1));
      k.tf32 = d == 0 ? 0 : 1;
      ck_assert_int_eq(ddp_conv_algos_put(&r, &k, op * 3 + d, d), DDP_OK);
    }
  char path[512];
  snprintf(path, sizeof path, "%s/algos.txt", g_dir);
  ck_assert_int_eq(ddp_conv_algos_save(&r, path), DDP_OK);
  ck_assert_int_eq(r.dirty, 0);
  ck_assert_int_eq(files_in_dir(), 1); /* no temporary file left */
  ddp_conv_algos_t back = {0};
  int missing = -1;
  ck_assert_int_eq(ddp_conv_algos_load(&back, path, &missing), DDP_OK);
  ck_assert_int_eq(missing, 0);
  ck_assert_int_eq(back.dirty, 0);
  ck_assert_uint_eq(back.n, r.n);
  for (size_t i = 0; i < r.n; ++i) {
    const ddp_conv_algo_entry_t *e = ddp_conv_algos_find(&back, &r.entries[i].key);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->algo, r.entries[i].algo);
    ck_assert_int_eq(e->math, r.entries[i].math);
  }
  /* the same text again: the format is canonical */
  char *t1 = NULL, *t2 = NULL;
  ck_assert_int_eq(ddp_conv_algos_format(&r, &t1), DDP_OK);
  ck_assert_int_eq(ddp_conv_algos_format(&back, &t2), DDP_OK);
  ck_assert_str_eq(t1, t2);
  ck_assert_ptr_nonnull(strstr(t1, "conv_bwd_weights fp16 N=32 H=16 W=16 C=24 K=32 R=3 S=3 "
                                   "stride=2 pad=1 det=1 tf32=1 algo=8 math=2\n"));
  free(t1);
  free(t2);
  ddp_conv_algos_clear(&back);
  ddp_conv_algos_clear(&r);
}
END_TEST

START_TEST(test_comments_blank_lines_and_crlf) {
  const char *text =
      DDP_CONV_ALGOS_HEADER "\r\n"
                            "\n"
                            "# chosen on an H100\n"
                            "   \n"
                            "conv_fwd bf16 N=2 H=9 W=9 C=8 K=16 R=3 S=3 stride=1 pad=1 det=1 tf32=1 "
                            "algo=1 math=1\r\n"
                            "conv_fwd bf16 N=2 H=9 W=9 C=8 K=16 R=3 S=3 stride=1 pad=1 det=0 tf32=1 "
                            "algo=6 math=2";
  ddp_conv_algos_t r = {0};
  ck_assert_int_eq(ddp_conv_algos_parse(&r, text, strlen(text), "t.txt"), DDP_OK);
  ck_assert_uint_eq(r.n, 2);
  ck_assert_int_eq(r.entries[1].algo, 6);
  ck_assert_int_eq(r.entries[1].key.deterministic, 0);
  ddp_conv_algos_clear(&r);
}
END_TEST

/* Parses text and expects DDP_ERR_FORMAT with `want` in the log, the record
 * left empty. */
static void expect_refused(const char *text, const char *want) {
  ddp_conv_algos_t r = {0};
  ddp_test_log_start();
  const ddp_status_t st = ddp_conv_algos_parse(&r, text, strlen(text), "bad.txt");
  char *log = ddp_test_log_stop();
  ck_assert_msg(st == DDP_ERR_FORMAT, "accepted (%d): %s", (int)st, text);
  ck_assert_msg(strstr(log, want), "log lacks '%s': %s", want, log);
  ck_assert_uint_eq(r.n, 0);
  ck_assert_ptr_null(r.entries);
  free(log);
}

#define GOOD "conv_fwd bf16 N=2 H=9 W=9 C=8 K=16 R=3 S=3 stride=1 pad=1 det=1 tf32=1 algo=1 math=1\n"

START_TEST(test_bad_files_are_refused_with_file_and_line) {
  expect_refused("", "bad.txt: empty");
  expect_refused("conv_fwd bf16\n", "bad.txt line 1: not a convolution algorithm record");
  expect_refused("# ddptrain convolution algorithms v2\n" GOOD,
                 "bad.txt line 1: not a convolution algorithm record");
  expect_refused(DDP_CONV_ALGOS_HEADER "\n" GOOD "conv_fwd bf16 N=2\n",
                 "bad.txt line 3: 3 fields, expected 15");
  expect_refused(DDP_CONV_ALGOS_HEADER "\n" GOOD GOOD "x\n",
                 "bad.txt line 3: a second choice for conv_fwd bf16");
  expect_refused(DDP_CONV_ALGOS_HEADER
                 "\nconv_up bf16 N=2 H=9 W=9 C=8 K=16 R=3 S=3 stride=1 pad=1 det=1 tf32=1 "
                 "algo=1 math=1\n",
                 "bad.txt line 2: unknown op 'conv_up'");
  expect_refused(DDP_CONV_ALGOS_HEADER
                 "\nconv_fwd int32 N=2 H=9 W=9 C=8 K=16 R=3 S=3 stride=1 pad=1 det=1 tf32=1 "
                 "algo=1 math=1\n",
                 "bad.txt line 2: dtype 'int32' is not fp32, bf16 or fp16");
  expect_refused(DDP_CONV_ALGOS_HEADER
                 "\nconv_fwd bf16 N=2 H=9 W=9 C=8 K=16 R=3 S=3 stride=1 pad=1 det=1 tf32=1 "
                 "algo=1x math=1\n",
                 "bad.txt line 2: expected 'algo=<integer>', found 'algo=1x'");
  expect_refused(DDP_CONV_ALGOS_HEADER
                 "\nconv_fwd bf16 N=2 W=9 H=9 C=8 K=16 R=3 S=3 stride=1 pad=1 det=1 tf32=1 "
                 "algo=1 math=1\n",
                 "bad.txt line 2: expected 'H=<integer>', found 'W=9'");
  expect_refused(DDP_CONV_ALGOS_HEADER
                 "\nconv_fwd bf16 N=2 H=9 W=9 C=8 K=16 R=3 S=3 stride=1 pad=1 det=1 tf32=1 "
                 "algo=99999999999 math=1\n",
                 "bad.txt line 2: expected 'algo=<integer>'");
  expect_refused(DDP_CONV_ALGOS_HEADER
                 "\nconv_fwd bf16 N=2 H=9 W=9 C=8 K=0 R=3 S=3 stride=1 pad=1 det=1 tf32=1 "
                 "algo=1 math=1\n",
                 "bad.txt line 2: not a valid convolution shape");
  expect_refused(DDP_CONV_ALGOS_HEADER
                 "\nconv_fwd bf16 N=2 H=9 W=9 C=8 K=16 R=3 S=3 stride=1 pad=1 det=2 tf32=1 "
                 "algo=1 math=1\n",
                 "bad.txt line 2: det and tf32 must be 0 or 1");
  expect_refused(DDP_CONV_ALGOS_HEADER
                 "\nconv_fwd bf16 N=2 H=9 W=9 C=8 K=16 R=3 S=3 stride=1 pad=1 det=1 tf32=1 "
                 "algo=-1 math=1\n",
                 "bad.txt line 2: algo and math must be 0..255");
  expect_refused(DDP_CONV_ALGOS_HEADER "\n" GOOD
                 "conv_fwd bf16 N=2 H=9 W=9 C=8 K=16 R=3 S=3 stride=1 pad=1 det=1 tf32=1 "
                 "algo=1 math=1 extra\n",
                 "bad.txt line 3: 16 fields, expected 15");
  char long_line[700];
  memset(long_line, 'a', sizeof long_line - 1);
  long_line[sizeof long_line - 1] = '\0';
  char text[800];
  snprintf(text, sizeof text, DDP_CONV_ALGOS_HEADER "\n%s\n", long_line);
  expect_refused(text, "bad.txt line 2: longer than 511 characters");
  /* a NUL byte: not text */
  const char nul[] = DDP_CONV_ALGOS_HEADER "\n\0" GOOD;
  ddp_conv_algos_t r = {0};
  ddp_test_log_start();
  ck_assert_int_eq(ddp_conv_algos_parse(&r, nul, sizeof nul - 1, "bad.txt"), DDP_ERR_FORMAT);
  free(ddp_test_log_stop());
}
END_TEST

START_TEST(test_missing_file_and_failed_save) {
  char path[512];
  snprintf(path, sizeof path, "%s/none.txt", g_dir);
  ddp_conv_algos_t r = {0};
  int missing = 0;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_conv_algos_load(&r, path, &missing), DDP_ERR_IO);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(missing, 1);
  ck_assert_str_eq(log, ""); /* the caller reports a missing file, or not */
  free(log);
  /* a bad file read from disk names the file */
  snprintf(path, sizeof path, "%s/bad.txt", g_dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(DDP_CONV_ALGOS_HEADER "\nconv_fwd bf16 N=2\n", f);
  fclose(f);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_conv_algos_load(&r, path, &missing), DDP_ERR_FORMAT);
  log = ddp_test_log_stop();
  ck_assert_int_eq(missing, 0);
  ck_assert_ptr_nonnull(strstr(log, "bad.txt line 2: 3 fields"));
  free(log);
  /* a save that cannot create its file leaves the old one and no temporary */
  const ddp_conv_algo_key_t k = key(DDP_CONV_ALGO_FWD, DDP_DTYPE_BF16, 8);
  ck_assert_int_eq(ddp_conv_algos_put(&r, &k, 1, 1), DDP_OK);
  snprintf(path, sizeof path, "%s/sub/algos.txt", g_dir); /* no such folder */
  ddp_test_log_start();
  ck_assert_int_eq(ddp_conv_algos_save(&r, path), DDP_ERR_IO);
  log = ddp_test_log_stop();
  ck_assert_ptr_nonnull(strstr(log, "cannot create"));
  ck_assert_int_eq(r.dirty, 1); /* still to be written */
  free(log);
  ck_assert_int_eq(files_in_dir(), 1); /* bad.txt alone */
  ddp_conv_algos_clear(&r);
}
END_TEST

int main(void) {
  Suite *s = suite_create("conv_algos");
  TCase *tc = tcase_create("record");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_put_find_replace);
  tcase_add_test(tc, test_save_load_round_trip);
  tcase_add_test(tc, test_comments_blank_lines_and_crlf);
  tcase_add_test(tc, test_bad_files_are_refused_with_file_and_line);
  tcase_add_test(tc, test_missing_file_and_failed_save);
  suite_add_tcase(s, tc);
  return ddp_test_run_suite(s);
}
