/* The replay driver: runs one fuzz target's entry point over its seed corpus
 * and over every crash input kept for it, without libFuzzer or clang.
 *
 * The normal build links this file with each tests/fuzz/fuzz_<name>.c into
 * tests/fuzz/replay_<name>, a `make check` test (and so also a test of the
 * sanitizer build): every crash the fuzzer ever found stays a regression
 * test. Without arguments it reads $top_srcdir/tests/fuzz/corpus/<name> and
 * .../regressions/<name>; with arguments, the files and directories named
 * (to reproduce one crash under a debugger).
 *
 * Each input is read into a buffer of exactly its size, so a read past the
 * end is caught by the sanitizers as it would be under libFuzzer. Exit
 * status: 0 every input ran, 1 an input could not be read, 99 the corpus is
 * missing or empty (a replay of nothing would pass without testing
 * anything). A crash ends the process like any crash. */
#include "fuzz_input.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

/* Reads path into an exact-size buffer and runs the target on it; 0, or -1
 * when the file cannot be read. */
static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay %s: cannot open %s: %s\n", fuzz_target_name, path, strerror(errno));
    return -1;
  }
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0 || sb.st_size < 0) {
    fclose(f);
    return -1;
  }
  const size_t size = (size_t)sb.st_size;
  uint8_t *data = malloc(size ? size : 1);
  if (!data || fread(data, 1, size, f) != size) {
    fprintf(stderr, "replay %s: cannot read %s\n", fuzz_target_name, path);
    free(data);
    fclose(f);
    return -1;
  }
  fclose(f);
  /* named before it runs, so a crash's report says which input it was */
  printf("replay %s: %s (%zu bytes)\n", fuzz_target_name, path, size);
  fflush(stdout);
  LLVMFuzzerTestOneInput(data, size);
  free(data);
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of dir (sorted, dot files and README skipped);
 * adds the count to *runs. A missing directory is empty. */
static int run_dir(const char *dir, int *runs) {
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : -1;
  char **names = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.' || strcmp(e->d_name, "README") == 0) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **grown = realloc(names, cap * sizeof *grown);
      if (!grown) abort();
      names = grown;
    }
    names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2);
    if (!names[n]) abort();
    sprintf(names[n], "%s/%s", dir, e->d_name);
    ++n;
  }
  closedir(d);
  if (n) qsort(names, n, sizeof *names, by_name);
  for (size_t i = 0; i < n; ++i) {
    struct stat sb;
    if (stat(names[i], &sb) == 0 && S_ISREG(sb.st_mode)) {
      if (run_file(names[i]) != 0) rc = -1;
      ++*runs;
    }
    free(names[i]);
  }
  free(names);
  return rc;
}

static int run_path(const char *path, int *runs) {
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return run_dir(path, runs);
  ++*runs;
  return run_file(path);
}

int main(int argc, char **argv) {
  int rc = 0, runs = 0;
  if (argc > 1) {
    for (int i = 1; i < argc; ++i)
      if (run_path(argv[i], &runs) != 0) rc = 1;
    printf("replay %s: %d inputs ran\n", fuzz_target_name, runs);
    return rc;
  }
  const char *top = getenv("top_srcdir");
  char corpus[4096], regressions[4096];
  snprintf(corpus, sizeof corpus, "%s/tests/fuzz/corpus/%s", top && *top ? top : ".",
           fuzz_target_name);
  snprintf(regressions, sizeof regressions, "%s/tests/fuzz/regressions/%s", top && *top ? top : ".",
           fuzz_target_name);
  int seeds = 0, crashes = 0;
  if (run_dir(corpus, &seeds) != 0) rc = 1;
  if (run_dir(regressions, &crashes) != 0) rc = 1;
  if (seeds == 0) {
    fprintf(stderr, "replay %s: no seed corpus in %s (set top_srcdir to the source tree)\n",
            fuzz_target_name, corpus);
    return 99;
  }
  printf("replay %s: %d corpus inputs and %d regression inputs ran\n", fuzz_target_name, seeds,
         crashes);
  return rc;
}
