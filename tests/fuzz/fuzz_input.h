/* What every fuzz target shares (docs/fuzzing.md).
 *
 * A target is one file defining LLVMFuzzerTestOneInput and fuzz_target_name.
 * The same file is linked two ways: with clang's libFuzzer by
 * tests/fuzz/run-fuzz.sh, which mutates inputs, and with tests/fuzz/replay.c
 * by the normal build, which feeds it the seed corpus and every crash input
 * kept under regressions/ as part of `make check`.
 *
 * The readers under test take paths, so the input is handed to them as a
 * file: a memfd, reopened through /proc/self/fd, which costs no disk I/O per
 * execution; where memfd or /proc is missing, one temporary file. Their error
 * lines go to a sink instead of the terminal: rejecting bad input is their
 * job, and a million rejections a minute would bury the fuzzer's own report.
 *
 * A target calls abort() when a reader accepts input that breaks a promise
 * of its header (a token outside the vocabulary, bytes that do not match
 * what the file holds): the fuzzer treats that as a crash like any other. */
#ifndef DDPTRAIN_FUZZ_INPUT_H
#define DDPTRAIN_FUZZ_INPUT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ddptrain/log.h"

/* The entry point libFuzzer calls and the replay driver calls for each file;
 * returns 0 (libFuzzer reserves other values). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* The target's name: its corpus is tests/fuzz/corpus/<name>, its crash
 * inputs tests/fuzz/regressions/<name>. */
extern const char fuzz_target_name[];

/* Nonzero when FUZZ_LOG=1: the library's messages are shown, to see why a
 * replayed input is rejected. */
static inline int fuzz_verbose(void) {
  static int verbose = -1;
  if (verbose < 0) verbose = getenv("FUZZ_LOG") && getenv("FUZZ_LOG")[0] == '1';
  return verbose;
}

/* Where the library's log lines go during a fuzz run: nowhere, or stderr
 * under FUZZ_LOG=1. */
static inline void fuzz_quiet_log(void) {
  static FILE *sink;
  if (fuzz_verbose()) {
    ddp_log_set_stream(stderr);
    return;
  }
  if (!sink) sink = fopen("/dev/null", "w");
  if (sink) ddp_log_set_stream(sink);
}

/* The temporary file's name when there is no memfd; removed at exit. */
static char fuzz_tmp_path[64];

static inline void fuzz_remove_tmp(void) {
  if (fuzz_tmp_path[0]) unlink(fuzz_tmp_path);
}

/* The file the readers open: created once, rewritten for every input. */
static inline int fuzz_input_fd(char *path, size_t len) {
  static int fd = -1;
  static char name[64];
  if (fd < 0) {
    fd = memfd_create("ddptrain-fuzz-input", MFD_CLOEXEC);
    if (fd >= 0) {
      snprintf(name, sizeof name, "/proc/self/fd/%d", fd);
      if (access(name, R_OK) != 0) { /* no /proc: a plain file instead */
        close(fd);
        fd = -1;
      }
    }
    if (fd < 0) {
      const char *tmp = getenv("TMPDIR");
      snprintf(fuzz_tmp_path, sizeof fuzz_tmp_path, "%.40s/ddp-fuzz-XXXXXX",
               tmp && *tmp ? tmp : "/tmp");
      fd = mkstemp(fuzz_tmp_path);
      if (fd < 0) {
        perror("fuzz: cannot create the input file");
        abort();
      }
      atexit(fuzz_remove_tmp);
      snprintf(name, sizeof name, "%s", fuzz_tmp_path);
    }
  }
  snprintf(path, len, "%s", name);
  return fd;
}

/* Writes data[0..size) as the whole content of the input file and puts its
 * path in path[len]. */
static inline void fuzz_write_input(const uint8_t *data, size_t size, char *path, size_t len) {
  const int fd = fuzz_input_fd(path, len);
  if (ftruncate(fd, 0) != 0) {
    perror("fuzz: cannot truncate the input file");
    abort();
  }
  for (size_t done = 0; done < size;) {
    const ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);
    if (n <= 0) {
      perror("fuzz: cannot write the input file");
      abort();
    }
    done += (size_t)n;
  }
}

/* Reports a broken promise and crashes, so the fuzzer keeps the input. */
#define FUZZ_ASSERT(cond)                                                                   \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "fuzz %s: %s:%d: assertion failed: %s\n", fuzz_target_name, __FILE__, \
              __LINE__, #cond);                                                             \
      abort();                                                                              \
    }                                                                                       \
  } while (0)

#endif
