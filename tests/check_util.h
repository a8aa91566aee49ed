/* Shared helpers for the Check suites: cheap assertions for hot loops, a
 * main() runner and log capture. */
#ifndef DDPTRAIN_TESTS_CHECK_UTIL_H
#define DDPTRAIN_TESTS_CHECK_UTIL_H

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/backend.h"
#include "ddptrain/log.h"
#include "ddptrain/options.h"

/* ck_assert records a mark point on every call (a write to the parent
 * process in fork mode), which turns per-row or per-token checks into
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

/* Runs one suite; the exit code follows Automake (0 pass, 1 fail). */
static inline int ddp_test_run_suite(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

/* The CPU backend with one math thread: the fixture most suites share (one
 * thread keeps timings and summation order independent of the machine). */
static inline ddp_backend_t *ddp_test_cpu_backend(void) {
  ddp_backend_config_t cfg = {.device = "cpu", .threads = 1};
  ddp_backend_t *be = NULL;
  ck_assert_int_eq(ddp_backend_create(&cfg, &be), DDP_OK);
  ck_assert_ptr_nonnull(be);
  return be;
}

/* Log capture: start() points the logger at a temporary file; stop() returns
 * everything logged since (caller frees) and restores stderr. */
static FILE *ddp_test_log_file;

static inline void ddp_test_log_start(void) {
  ddp_test_log_file = tmpfile();
  ck_assert_ptr_nonnull(ddp_test_log_file);
  ddp_log_set_stream(ddp_test_log_file);
}

static inline char *ddp_test_log_stop(void) {
  ddp_log_set_stream(NULL);
  long n = ftell(ddp_test_log_file);
  char *text = calloc(1, (size_t)n + 1);
  rewind(ddp_test_log_file);
  if (n > 0 && fread(text, 1, (size_t)n, ddp_test_log_file) != (size_t)n) text[0] = '\0';
  fclose(ddp_test_log_file);
  ddp_test_log_file = NULL;
  return text;
}

/* Heap blocks a test hands over to the fixture: ddp_test_track() registers
 * one (and asserts the allocation worked), ddp_test_free_tracked() frees
 * them all (teardown), so tests need no free() on any path. */
#define DDP_TEST_MAX_BUFS 256
static void *ddp_test_bufs[DDP_TEST_MAX_BUFS];
static int ddp_test_nbufs;

static inline void *ddp_test_track(void *p) {
  ck_assert_ptr_nonnull(p);
  ck_assert_int_lt(ddp_test_nbufs, DDP_TEST_MAX_BUFS);
  ddp_test_bufs[ddp_test_nbufs++] = p;
  return p;
}

static inline void ddp_test_free_tracked(void) {
  for (int i = 0; i < ddp_test_nbufs; ++i) free(ddp_test_bufs[i]);
  ddp_test_nbufs = 0;
}

/* Asserts that `text` contains `needle`, showing both on failure. */
#define ddp_assert_contains(text, needle) \
  ck_assert_msg(strstr((text), (needle)) != NULL, "expected '%s' in: %s", (needle), (text))

/* Parses a NULL-terminated argument list on top of the defaults, as the
 * program would; what was logged goes to *log (freed by the caller) or is
 * dropped when log is NULL. */
static inline ddp_status_t ddp_test_parse(ddp_options_t *o, char **log, const char *first, ...) {
  char *argv[24] = {"ddptrain"};
  int argc = 1;
  va_list ap;
  va_start(ap, first);
  for (const char *a = first; a && argc < 23; a = va_arg(ap, const char *))
    argv[argc++] = (char *)a;
  va_end(ap);
  ck_assert_int_eq(ddp_options_defaults(o), DDP_OK);
  ddp_test_log_start();
  const ddp_status_t st = ddp_options_parse(o, argc, argv);
  char *out = ddp_test_log_stop();
  if (log)
    *log = out;
  else
    free(out);
  return st;
}

#endif
