/* Fuzz target: the command-line parser (ddp_options_parse,
 * src/runtime/options.c), with the built-in models' own flags.
 *
 * The input is a command line: arguments separated by NUL bytes (at most
 * MAX_ARGS of them), after a program name. A command line the parser accepts
 * must survive a round trip, which is what checkpoints and the ranks'
 * agreement check rely on: every flag of the run, formatted with
 * ddp_options_format and parsed again as --flag=value, gives the same value
 * (compared with ddp_options_value_hash). The run's configuration is also
 * rendered as a checkpoint records it. */
#include "fuzz_input.h"

#include <string.h>

#include "ddptrain/options.h"
#include "train/ckpt.h"

const char fuzz_target_name[] = "options";

#define MAX_ARGS 64
#define MAX_ROWS 256
#define VALUE_MAX 1100 /* the longest formatted value: a 1023-byte path */

/* Which rows are actions (flags without a value): a bare --flag parses for
 * them and for no other kind. Learnt once. */
static int g_action[MAX_ROWS];

static void learn_actions(void) {
  static int done;
  if (done) return;
  done = 1;
  FILE *sink = fopen("/dev/null", "w"); /* the probes' errors are expected */
  if (sink) ddp_log_set_stream(sink);
  for (int i = 0; i < ddp_options_count() && i < MAX_ROWS; ++i) {
    char flag[80];
    snprintf(flag, sizeof flag, "--%s", ddp_options_name(i));
    char *argv[] = {"ddptrain", flag, NULL};
    ddp_options_t *o = malloc(sizeof *o);
    if (!o || ddp_options_defaults(o) != DDP_OK) abort();
    g_action[i] = ddp_options_parse(o, 2, argv) == DDP_OK;
    free(o);
  }
  fuzz_quiet_log();
  if (sink) fclose(sink);
}

/* Formats every flag that applies to opts and parses the lot again. */
static void round_trip(const ddp_options_t *opts) {
  const int n = ddp_options_count();
  FUZZ_ASSERT(n <= MAX_ROWS);
  char *argv[MAX_ROWS + 1];
  int argc = 0;
  argv[argc++] = "ddptrain";
  for (int i = 0; i < n; ++i) {
    char value[VALUE_MAX];
    if (!ddp_options_applies(opts, i)) continue;
    FUZZ_ASSERT(ddp_options_format(opts, i, value, sizeof value) == 0);
    if (g_action[i] && strcmp(value, "1") != 0) continue;
    const size_t len = strlen(ddp_options_name(i)) + strlen(value) + 4;
    argv[argc] = malloc(len);
    FUZZ_ASSERT(argv[argc] != NULL);
    if (g_action[i])
      snprintf(argv[argc], len, "--%s", ddp_options_name(i));
    else
      snprintf(argv[argc], len, "--%s=%s", ddp_options_name(i), value);
    ++argc;
  }
  argv[argc] = NULL;
  ddp_options_t *again = malloc(sizeof *again);
  FUZZ_ASSERT(again && ddp_options_defaults(again) == DDP_OK);
  FUZZ_ASSERT(ddp_options_parse(again, argc, argv) == DDP_OK);
  for (int i = 0; i < n; ++i)
    if (ddp_options_applies(opts, i))
      FUZZ_ASSERT(ddp_options_value_hash(again, i) == ddp_options_value_hash(opts, i));
  free(again);
  for (int i = 1; i < argc; ++i) free(argv[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_quiet_log();
  learn_actions();
  /* NUL-separated arguments, each in its own exact-size buffer so that a
   * read past an argument's end is caught */
  char *argv[MAX_ARGS + 2];
  int argc = 0;
  argv[argc++] = "ddptrain";
  for (size_t at = 0; at < size && argc <= MAX_ARGS;) {
    const uint8_t *nul = memchr(data + at, '\0', size - at);
    const size_t len = nul ? (size_t)(nul - (data + at)) : size - at;
    argv[argc] = malloc(len + 1);
    if (!argv[argc]) abort();
    memcpy(argv[argc], data + at, len);
    argv[argc][len] = '\0';
    ++argc;
    at += len + 1;
  }
  argv[argc] = NULL;
  ddp_options_t *opts = malloc(sizeof *opts);
  if (!opts || ddp_options_defaults(opts) != DDP_OK) abort();
  if (ddp_options_parse(opts, argc, argv) == DDP_OK) {
    round_trip(opts);
    char *config = ddp_ckpt_config_json(opts);
    FUZZ_ASSERT(config != NULL);
    free(config);
  }
  free(opts);
  for (int i = 1; i < argc; ++i) free(argv[i]);
  return 0;
}
