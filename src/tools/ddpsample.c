/* The ddpsample program: continues a prompt with a trained GPT.
 *
 * It loads an export (--export FILE, what `ddptrain --export` writes, or a
 * GPT-2 model.safetensors) or a training checkpoint (--checkpoint FILE|DIR),
 * encodes the prompt, and generates --num-samples continuations with the
 * KV-cache decoder (model/gpt_decode.h) and the sampler
 * (model/gpt_generate.h), each printed as prompt + continuation, samples
 * separated by a line "---". Generation stops at the end-of-text token, at
 * --max-new-tokens, or when the model's context is full. The output is a
 * function of the weights, the prompt, the flags and --seed.
 *
 * Exit status: 0 success, 1 runtime failure (a malformed file, a device
 * error), 2 bad command line (an unknown or malformed flag, a value out of
 * range, a file that does not exist, a prompt longer than the context). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ddptrain/backend.h"
#include "ddptrain/check.h"
#include "ddptrain/log.h"
#include "ddptrain/rng.h"
#include "model/gpt_generate.h"
#include "model/sample_text.h"
#include "tools/sample_load.h"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* The sampling stream's tag under --seed: any fixed value; it only has to
 * be the same in every run. */
#define SAMPLE_STREAM UINT64_C(0x73616d706c65)

typedef struct args {
  const char *export_path, *ckpt_path, *prompt, *prompt_file, *device, *tokenizer;
  long long max_new, top_k, seed, num_samples, threads;
  double temperature, top_p;
  int help;
} args_t;

static void say_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("ddpsample: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

typedef enum { K_STR, K_INT, K_NUM, K_FLAG } kind_t;

typedef struct row {
  const char *name;
  kind_t kind;
  double min, max; /* K_INT, K_NUM: inclusive */
  const char *metavar, *help;
} row_t;

static const row_t k_rows[] = {
    {"export", K_STR, 0, 0, "FILE",
     "the model: an export (ddptrain --export) or model.safetensors"},
    {"checkpoint", K_STR, 0, 0, "PATH", "the model: a checkpoint file, or a --save DIR's newest"},
    {"prompt", K_STR, 0, 0, "TEXT", "the text to continue [empty: start a new document]"},
    {"prompt-file", K_STR, 0, 0, "FILE", "read the prompt from FILE"},
    {"max-new-tokens", K_INT, 1, 1e9, "N", "tokens to generate at most [256]"},
    {"temperature", K_NUM, 0, 1e30, "F", "softmax temperature, >= 0; 0 is greedy [1.0]"},
    {"top-k", K_INT, 0, 2147483647.0, "N", "sample among the N most likely tokens; 0: all [0]"},
    {"top-p", K_NUM, -1e30, 1e30, "F",
     "nucleus: the most likely tokens up to mass F, in (0,1] [1]"},
    {"seed", K_INT, 0, 9007199254740991.0, "N", "the sampling seed [1337]"},
    {"num-samples", K_INT, 1, 4096, "N", "independent continuations [1]"},
    {"device", K_STR, 0, 0, "DEV", "cpu, cuda, cuda:N or auto [auto]"},
    {"threads", K_INT, 0, 4096, "N", "CPU math threads; 0: all cores [0]"},
    {"tokenizer", K_STR, 0, 0, "DIR",
     "the GPT-2 tokenizer (vocab.json + merges.txt) the model's data was made with; a prompt needs "
     "a build with PCRE2 [byte-level]"},
    {"help", K_FLAG, 0, 0, NULL, "print this help and exit"},
};
#define N_ROWS ((int)(sizeof k_rows / sizeof k_rows[0]))

static void print_help(FILE *out) {
  fprintf(out,
          "Usage: ddpsample (--export FILE | --checkpoint PATH) [OPTIONS]\n\n"
          "Continues a prompt with a trained GPT (KV-cache decoding). Text is byte-level\n"
          "(token = byte, end-of-text = 256), as the built-in data and ddpprep's shards.\n"
          "Each sample is printed as prompt + continuation; samples are separated by '---'.\n\n"
          "Options:\n");
  for (int i = 0; i < N_ROWS; ++i) {
    char left[40];
    snprintf(left, sizeof left, "--%s%s%s", k_rows[i].name, k_rows[i].metavar ? " " : "",
             k_rows[i].metavar ? k_rows[i].metavar : "");
    fprintf(out, "  %-22s %s\n", left, k_rows[i].help);
  }
  fprintf(out, "\nExit status: 0 success, 1 runtime failure, 2 bad command line.\n");
}

static int set(args_t *a, const row_t *r, const char *v) {
  char *end = NULL;
  double x = 0;
  if (r->kind == K_INT || r->kind == K_NUM) {
    errno = 0;
    x = r->kind == K_INT ? (double)strtoll(v, &end, 10) : strtod(v, &end);
    if (end == v || *end != '\0' || !isfinite(x) || errno == ERANGE) {
      say_error("option --%s: '%s' is not %s", r->name, v,
                r->kind == K_INT ? "an integer" : "a finite number");
      return -1;
    }
    if (x < r->min || x > r->max) {
      say_error("option --%s: %s is out of range [%g, %g]", r->name, v, r->min, r->max);
      return -1;
    }
  }
  const char *n = r->name;
  if (!strcmp(n, "export"))
    a->export_path = v;
  else if (!strcmp(n, "checkpoint"))
    a->ckpt_path = v;
  else if (!strcmp(n, "prompt"))
    a->prompt = v;
  else if (!strcmp(n, "prompt-file"))
    a->prompt_file = v;
  else if (!strcmp(n, "max-new-tokens"))
    a->max_new = (long long)x;
  else if (!strcmp(n, "temperature"))
    a->temperature = x;
  else if (!strcmp(n, "top-k"))
    a->top_k = (long long)x;
  else if (!strcmp(n, "top-p"))
    a->top_p = x;
  else if (!strcmp(n, "seed"))
    a->seed = (long long)x;
  else if (!strcmp(n, "num-samples"))
    a->num_samples = (long long)x;
  else if (!strcmp(n, "device"))
    a->device = v;
  else if (!strcmp(n, "threads"))
    a->threads = (long long)x;
  else if (!strcmp(n, "tokenizer"))
    a->tokenizer = v;
  else
    a->help = 1;
  return 0;
}

static int parse_args(args_t *a, int argc, char **argv) {
  *a = (args_t){.device = "auto",
                .max_new = 256,
                .temperature = 1.0,
                .top_p = 1.0,
                .seed = 1337,
                .num_samples = 1};
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    const row_t *r = NULL;
    const char *value = NULL;
    if (!strcmp(arg, "-h")) arg = "--help";
    if (strncmp(arg, "--", 2) == 0) {
      const char *name = arg + 2, *eq = strchr(name, '=');
      const size_t len = eq ? (size_t)(eq - name) : strlen(name);
      for (int k = 0; k < N_ROWS && !r; ++k)
        if (strlen(k_rows[k].name) == len && !strncmp(k_rows[k].name, name, len)) r = &k_rows[k];
      if (r && eq) value = eq + 1;
    }
    if (!r) {
      say_error("unknown argument '%s' (see --help)", arg);
      return -1;
    }
    if (r->kind == K_FLAG && value) {
      say_error("option --%s takes no value", r->name);
      return -1;
    }
    if (r->kind != K_FLAG && !value) {
      if (i + 1 >= argc) {
        say_error("option --%s needs a value (%s)", r->name, r->metavar);
        return -1;
      }
      value = argv[++i];
    }
    if (set(a, r, value) != 0) return -1;
  }
  if (a->help) return 0;
  if (!a->export_path == !a->ckpt_path) {
    say_error("give exactly one of --export FILE and --checkpoint PATH");
    return -1;
  }
  if (a->prompt && a->prompt_file) {
    say_error("give --prompt or --prompt-file, not both");
    return -1;
  }
  const char *files[][2] = {
      {"export", a->export_path}, {"checkpoint", a->ckpt_path}, {"prompt-file", a->prompt_file}};
  for (int k = 0; k < 3; ++k) {
    struct stat s;
    if (files[k][1] && stat(files[k][1], &s) != 0) {
      say_error("option --%s: %s: %s", files[k][0], files[k][1], strerror(errno));
      return -1;
    }
  }
  return 0;
}

/* The prompt's text: --prompt, --prompt-file's bytes, or none. */
static ddp_status_t read_prompt(const args_t *a, char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  if (a->prompt) {
    *len = strlen(a->prompt);
    *text = malloc(*len + 1);
    if (!*text) DDP_FAIL(DDP_ERR_OOM, "out of host memory");
    memcpy(*text, a->prompt, *len + 1);
    return DDP_OK;
  }
  if (!a->prompt_file) return DDP_OK;
  FILE *f = fopen(a->prompt_file, "rb");
  if (!f) DDP_FAIL(DDP_ERR_IO, "--prompt-file %s: %s", a->prompt_file, strerror(errno));
  size_t cap = 4096;
  char *buf = malloc(cap);
  size_t n = 0, got = 0;
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
    n += got;
    if (n == cap) {
      char *bigger = realloc(buf, cap *= 2);
      if (!bigger) free(buf);
      buf = bigger;
    }
  }
  const int bad = ferror(f);
  fclose(f);
  if (!buf) DDP_FAIL(DDP_ERR_OOM, "--prompt-file %s: out of host memory", a->prompt_file);
  if (bad) {
    free(buf);
    DDP_FAIL(DDP_ERR_IO, "--prompt-file %s: read error", a->prompt_file);
  }
  *text = buf;
  *len = n;
  return DDP_OK;
}

/* Everything after the command line; a DDP_ERR_INVALID_ARG is a usage
 * error (exit 2), anything else a runtime failure. */
static ddp_status_t run(const args_t *a) {
  ddp_status_t st = DDP_OK;
  ddp_backend_t *be = NULL;
  sample_model_t *sm = calloc(1, sizeof *sm);
  ddp_gpt_decoder_t *dec = NULL;
  char *text = NULL;
  int32_t *prompt = NULL, *out = NULL;
  int *n_out = NULL;
  ddp_text_codec_t codec = {0};
  if (!sm) DDP_FAIL(DDP_ERR_OOM, "out of host memory");
  const ddp_generate_opts_t go = {.max_new_tokens = (int)a->max_new,
                                  .temperature = (float)a->temperature,
                                  .top_k = (int)a->top_k,
                                  .top_p = (float)a->top_p};
  DDP_CHECK_GOTO(ddp_generate_opts_validate(&go), st, done);
  const ddp_backend_config_t bc = {
      .device = a->device, .threads = (int)a->threads, .need_model_ops = 1};
  DDP_CHECK_GOTO(ddp_backend_create(&bc, &be), st, done);
  DDP_CHECK_GOTO(sample_model_load(sm, be, a->export_path, a->ckpt_path), st, done);
  ddp_gpt_t *gpt = sample_model_gpt(sm);
  const ddp_gpt_config_t *cfg = ddp_gpt_config(gpt);
  DDP_CHECK_GOTO(ddp_text_codec_open(&codec, cfg->vocab, a->tokenizer), st, done);
  size_t len = 0;
  DDP_CHECK_GOTO(read_prompt(a, &text, &len), st, done);
  const int B = (int)a->num_samples;
  prompt = malloc(sizeof(int32_t) * (size_t)cfg->max_seq_len);
  out = malloc(sizeof(int32_t) * (size_t)B * (size_t)go.max_new_tokens);
  n_out = calloc((size_t)B, sizeof *n_out);
  if (!prompt || !out || !n_out) DDP_FAIL_GOTO(st, DDP_ERR_OOM, done, "out of host memory");
  int T = 0;
  DDP_CHECK_GOTO(ddp_text_encode(&codec, text, len, prompt, cfg->max_seq_len, &T,
                                 a->prompt_file ? "--prompt-file" : "--prompt"),
                 st, done);
  /* an empty prompt starts a new document: the token that precedes one */
  const int start_doc = T == 0;
  if (start_doc) prompt[T++] = codec.eot;
  ddp_generate_opts_t g = go;
  g.eot = codec.eot;
  ddp_rng_t root, rng;
  ddp_rng_init(&root, (uint64_t)a->seed, 0);
  ddp_rng_derive(&root, SAMPLE_STREAM, &rng);
  DDP_CHECK_GOTO(ddp_gpt_decoder_create(&dec, gpt, be, B), st, done);
  DDP_CHECK_GOTO(ddp_gpt_generate(dec, prompt, T, &g, &rng, out, n_out), st, done);
  for (int b = 0; b < B; ++b) {
    if (b > 0) fputs("---\n", stdout);
    DDP_CHECK_GOTO(ddp_text_write(&codec, prompt + start_doc, T - start_doc, stdout), st, done);
    DDP_CHECK_GOTO(ddp_text_write(&codec, out + (size_t)b * g.max_new_tokens, n_out[b], stdout), st,
                   done);
    fputc('\n', stdout);
  }
  if (fflush(stdout) != 0) DDP_FAIL_GOTO(st, DDP_ERR_IO, done, "writing to stdout failed");
done:
  ddp_text_codec_close(&codec);
  ddp_gpt_decoder_destroy(dec);
  if (sm->model) sample_model_close(sm);
  free(sm);
  ddp_backend_destroy(be);
  free(text);
  free(prompt);
  free(out);
  free(n_out);
  return st;
}

int main(int argc, char **argv) {
  /* the loader's progress lines are the trainer's business; errors stay */
  ddp_log_set_level(DDP_LOG_LEVEL_WARN);
  args_t a;
  if (parse_args(&a, argc, argv) != 0) return EXIT_USAGE;
  if (a.help) {
    print_help(stdout);
    return 0;
  }
  const ddp_status_t st = run(&a);
  if (st == DDP_OK) return 0;
  return st == DDP_ERR_INVALID_ARG ? EXIT_USAGE : EXIT_RUNTIME;
}
