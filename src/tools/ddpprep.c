/* ddpprep: turns text into llm.c-compatible token shards (docs/design.md §5.1),
 * byte-level by default (token = byte 0..255, EOT = 256 starts each
 * document, vocab 257) or, with --tokenizer DIR, GPT-2 BPE (data/bpe.h) with
 * the tokenizer's vocabulary and EOT in the header, as llm.c writes GPT-2
 * shards (vocab 50257, EOT 50256).
 *
 * BPE encoding is the expensive part, so documents are gathered into
 * batches of a few MiB and encoded by --threads workers, each with its own
 * tokenizer cache; large documents are cut into pieces at points where no
 * pre-token can span the cut (see safe_cut), so one big file also uses every
 * core. The main thread reads the next batch while the workers encode
 * one, and emits each batch's tokens in input order: the output is the same
 * for any thread count.
 *
 * Inputs are files, directories (recursed, entries in strcmp order so the
 * output does not depend on the file system or the locale) or stdin. A
 * document is a whole file (default), the lines between --doc-sep lines, or
 * the "text" field of each --jsonl line. Documents go to PREFIX_train_NNNNNN.bin
 * or, chosen by a hash of their bytes (and --seed) against --val-frac, to
 * PREFIX_val_NNNNNN.bin; the choice depends only on the document, never on its
 * position, so adding files or changing --shard-tokens moves no document
 * between splits. Shards are written by ddp_shard_write (atomic per shard).
 *
 * Memory: input is read as a stream; one document and, per split, at most
 * one shard's tokens are held. The document has to be held whole because its
 * split is known only once all its bytes are hashed. With --tokenizer, also
 * one batch (BATCH_BYTES of text and its ids) and a tokenizer cache of under
 * 3 MiB per thread.
 *
 * Exit codes: 0 success, 1 runtime failure (unreadable input or tokenizer,
 * malformed JSONL without --skip-bad, write failure, interrupted), 2 bad
 * command line (also --tokenizer in a build without PCRE2). The directory
 * of PREFIX is created when missing. On any failure the shards this run
 * already wrote are removed, and the directories it created: a
 * half-converted corpus under final names would look complete to a training
 * job.
 *
 * --images FORMAT converts image data sets to image shards instead
 * (ddpprep_images.c, §5.6); only -o, --val-frac and --seed apply there, and
 * --image-size, --channels and --threads to --images folder. */
#include <config.h>

#include <pthread.h>
#include <stdatomic.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "ddptrain/data.h"
#include "ddptrain/log.h"
#include "core/hash.h"
#include "data/bpe.h"
#include "tools/ddpprep_images.h"
#include "tools/ddpprep_split.h"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };
enum { MODE_FILE, MODE_SEP, MODE_JSONL };

/* llm.c's uint16 shards hold ids 0..65535. */
#define UINT16_VOCAB 65536
/* A batch is encoded when it holds this many bytes or documents; a
 * document is cut into pieces of about PIECE_BYTES for the workers. */
enum { BATCH_BYTES = 8 << 20, BATCH_DOCS = 8192, PIECE_BYTES = 256 << 10, MAX_THREADS = 256 };
enum { MAX_BAD_LINE_WARNINGS = 10 };

/* Set by the signal handler, read between documents and between reads: a
 * sig_atomic_t store is all a handler may safely do. */
static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
  g_stop = sig;
}

static void say_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("ddpprep: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

/* ---- options ---------------------------------------------------------------- */

typedef struct prep_opts {
  const char *prefix;
  const char *doc_sep;
  int mode;
  int64_t shard_tokens;
  double val_frac;
  uint64_t seed;
  int help;
  const char *tokenizer;   /* NULL: byte-level */
  const char *jsonl_field; /* the JSONL field that holds the document */
  int threads;
  int skip_bad;
  const char *images; /* --images FORMAT; NULL: text */
  int image_size;     /* --image-size; 0: not given */
  int channels;       /* --channels; 0: not given (3) */
} prep_opts_t;

typedef enum { K_STR, K_INT, K_FRAC, K_FLAG } kind_t;

typedef struct opt_row {
  const char *name;
  char short_name;
  kind_t kind;
  double min, max; /* K_INT: inclusive; K_FRAC: [min, max) */
  const char *metavar, *help;
} opt_row_t;

/* The header's token count is an int32, hence the shard-tokens cap. */
static const opt_row_t k_rows[] = {
    {"output", 'o', K_STR, 0, 0, "PREFIX",
     "write PREFIX_train_NNNNNN.bin (and PREFIX_val_*) (required)"},
    {"doc-sep", 0, K_STR, 0, 0, "LINE", "a line exactly equal to LINE separates documents"},
    {"jsonl", 0, K_FLAG, 0, 0, NULL,
     "each input line is a JSON object; its \"text\" (--jsonl-field) is a document"},
    {"shard-tokens", 0, K_INT, 1, 2147483647.0, "N", "tokens per shard at most [100000000]"},
    {"val-frac", 0, K_FRAC, 0, 1, "F", "fraction of documents for validation, in [0,1) [0]"},
    {"seed", 0, K_INT, 0, 9007199254740991.0, "N", "mixed into the per-document split hash [0]"},
    {"tokenizer", 0, K_STR, 0, 0, "DIR",
     "GPT-2 BPE from DIR/vocab.json and DIR/merges.txt instead of bytes"},
    {"threads", 0, K_INT, 1, MAX_THREADS, "N",
     "threads encoding with --tokenizer or decoding --images folder [the cores]"},
    {"jsonl-field", 0, K_STR, 0, 0, "NAME", "with --jsonl: the field that holds the text [text]"},
    {"skip-bad", 0, K_FLAG, 0, 0, NULL,
     "with --jsonl: skip and count bad lines instead of failing"},
    {"images", 0, K_STR, 0, 0, "FORMAT",
     "convert images, not text, from FORMAT (idx, cifar10, cifar100, folder)"},
    {"image-size", 0, K_INT, 1, 8192, "N", "--images folder: the side of the square images"},
    {"channels", 0, K_INT, 1, 3, "C", "--images folder: RGB or gray (3, 1) [3]"},
    {"help", 'h', K_FLAG, 0, 0, NULL, "print this help and exit"},
};
#define N_ROWS ((int)(sizeof k_rows / sizeof k_rows[0]))

static void print_help(FILE *out) {
  fprintf(out,
          "Usage: ddpprep -o PREFIX [OPTIONS] [PATH...]\n"
          "       ddpprep --images FORMAT -o PREFIX [--val-frac F] [--seed N] PATH...\n"
          "       ddpprep --images folder --image-size N -o PREFIX [--channels C] DIR\n\n"
          "Turns text into token shards: byte-level (token = byte, EOT = 256, vocab 257),\n"
          "or GPT-2 BPE with --tokenizer DIR (vocab and EOT from the tokenizer).\n"
          "The directory of PREFIX is created if missing.\n"
          "PATHs are files or directories (recursed); none or '-' reads stdin.\n"
          "By default each file is one document.\n\nOptions:\n");
  for (int i = 0; i < N_ROWS; ++i) {
    char left[40];
    snprintf(left, sizeof left, "%s%c%s--%s%s%s", k_rows[i].short_name ? "-" : "   ",
             k_rows[i].short_name ? k_rows[i].short_name : ' ', k_rows[i].short_name ? ", " : "",
             k_rows[i].name, k_rows[i].metavar ? " " : "",
             k_rows[i].metavar ? k_rows[i].metavar : "");
    fprintf(out, "  %-26s %s\n", left, k_rows[i].help);
  }
  fprintf(out,
          "\nWith --images FORMAT, PATHs are image data and the output is PREFIX_train.img\n"
          "(and PREFIX_val.img with --val-frac), image shards of uint8 pixels and labels:\n"
          "  idx       an IDX images and an IDX labels file (MNIST, Fashion-MNIST),\n"
          "            gzipped or not\n"
          "  cifar10   CIFAR-10 binary batches (data_batch_N.bin, test_batch.bin)\n"
          "  cifar100  CIFAR-100 binary batches (train.bin, test.bin); the fine labels\n"
          "  folder    DIR/CLASS/.../IMAGE: a folder per class (sorted names, labels\n"
          "            0, 1, ...; names in PREFIX_classes.txt) of PNG and JPEG files,\n"
          "            resized (shorter side N) and centre-cropped to N x N; other files\n"
          "            are skipped and counted\n"
          "Only --output, --val-frac and --seed apply to images, and --image-size,\n"
          "--channels and --threads to folder.\n");
  fprintf(out,
          "\nExit status: 0 success, 1 runtime failure, 2 bad command line (or --tokenizer\n"
          "in a build without PCRE2, --images folder in one without libpng or libjpeg).\n");
}

static int set_opt(prep_opts_t *o, const opt_row_t *row, const char *v) {
  char *end = NULL;
  if (row->kind == K_INT) {
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0') {
      say_error("option --%s: '%s' is not an integer", row->name, v);
      return -1;
    }
    if (errno == ERANGE || (double)x < row->min || (double)x > row->max) {
      say_error("option --%s: %s is out of range [%.0f, %.0f]", row->name, v, row->min, row->max);
      return -1;
    }
    if (strcmp(row->name, "seed") == 0)
      o->seed = (uint64_t)x;
    else if (strcmp(row->name, "image-size") == 0)
      o->image_size = (int)x;
    else if (strcmp(row->name, "channels") == 0 && x == 2) {
      say_error("option --channels: 2 is not 1 (gray) or 3 (RGB)");
      return -1;
    } else if (strcmp(row->name, "channels") == 0)
      o->channels = (int)x;
    else if (strcmp(row->name, "threads") == 0)
      o->threads = (int)x;
    else
      o->shard_tokens = x;
  } else if (row->kind == K_FRAC) {
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end != '\0' || !isfinite(x)) {
      say_error("option --%s: '%s' is not a finite number", row->name, v);
      return -1;
    }
    if (errno == ERANGE || x < row->min || x >= row->max) {
      say_error("option --%s: %s is out of range [%g, %g)", row->name, v, row->min, row->max);
      return -1;
    }
    o->val_frac = x;
  } else if (row->kind == K_STR && strcmp(row->name, "tokenizer") == 0) {
    o->tokenizer = v;
  } else if (row->kind == K_STR && strcmp(row->name, "images") == 0) {
    if (!ddpprep_images_known_format(v)) {
      say_error("option --images: unknown format '%s' (idx, cifar10, cifar100 or folder)", v);
      return -1;
    }
    o->images = v;
  } else if (row->kind == K_STR && strcmp(row->name, "jsonl-field") == 0) {
    if (!*v) {
      say_error("option --jsonl-field: the field name is empty");
      return -1;
    }
    o->jsonl_field = v;
  } else if (row->kind == K_STR) {
    if (row->short_name == 'o') {
      if (!*v) {
        say_error("option --output: the prefix is empty");
        return -1;
      }
      o->prefix = v;
    } else {
      o->doc_sep = v;
      o->mode = MODE_SEP;
    }
  } else if (row->short_name == 'h') {
    o->help = 1;
  } else if (strcmp(row->name, "skip-bad") == 0) {
    o->skip_bad = 1;
  } else {
    o->mode = MODE_JSONL;
  }
  return 0;
}

/* Returns 0 and the positional arguments (paths) in paths[0..*n_paths). */
static int parse_args(prep_opts_t *o, int argc, char **argv, char **paths, int *n_paths) {
  int only_paths = 0, have_sep = 0, have_jsonl = 0, have_field = 0;
  const char *text_only = NULL;   /* the first option that --images excludes */
  const char *folder_only = NULL; /* the first option only --images folder takes */
  int have_threads = 0;
  *n_paths = 0;
  for (int i = 1; i < argc; ++i) {
    char *arg = argv[i];
    const opt_row_t *row = NULL;
    const char *value = NULL;
    if (only_paths || arg[0] != '-' || arg[1] == '\0') {
      paths[(*n_paths)++] = arg;
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      only_paths = 1;
      continue;
    }
    if (arg[1] == '-') {
      const char *name = arg + 2, *eq = strchr(name, '=');
      size_t len = eq ? (size_t)(eq - name) : strlen(name);
      for (int r = 0; r < N_ROWS && !row; ++r)
        if (strlen(k_rows[r].name) == len && strncmp(k_rows[r].name, name, len) == 0)
          row = &k_rows[r];
      if (row && eq) {
        if (row->kind == K_FLAG) {
          say_error("option --%s takes no value", row->name);
          return -1;
        }
        value = eq + 1;
      }
    } else if (arg[2] == '\0') {
      for (int r = 0; r < N_ROWS && !row; ++r)
        if (k_rows[r].short_name == arg[1]) row = &k_rows[r];
    }
    if (!row) {
      say_error("unknown option '%s' (see --help)", arg);
      return -1;
    }
    if (row->kind != K_FLAG && !value) {
      if (i + 1 >= argc) {
        say_error("option --%s needs a value (%s)", row->name, row->metavar);
        return -1;
      }
      value = argv[++i];
    }
    if (set_opt(o, row, value) != 0) return -1;
    have_sep |= strcmp(row->name, "doc-sep") == 0;
    have_jsonl |= strcmp(row->name, "jsonl") == 0;
    have_field |= strcmp(row->name, "jsonl-field") == 0;
    have_threads |= strcmp(row->name, "threads") == 0;
    const int for_folder = strcmp(row->name, "image-size") == 0 ||
                           strcmp(row->name, "channels") == 0 || strcmp(row->name, "threads") == 0;
    if (!folder_only && for_folder && strcmp(row->name, "threads") != 0) folder_only = row->name;
    if (!text_only && strcmp(row->name, "output") != 0 && strcmp(row->name, "val-frac") != 0 &&
        strcmp(row->name, "seed") != 0 && strcmp(row->name, "images") != 0 &&
        strcmp(row->name, "help") != 0 && !for_folder)
      text_only = row->name;
  }
  if (o->help) return 0;
  if (o->images && text_only) {
    say_error("--%s applies to text input only, not to --images", text_only);
    return -1;
  }
  const int folder = o->images && strcmp(o->images, "folder") == 0;
  if (!folder && (folder_only || (o->images && have_threads))) {
    say_error("--%s applies to --images folder only", folder_only ? folder_only : "threads");
    return -1;
  }
  if (have_sep && have_jsonl) {
    say_error("--doc-sep and --jsonl exclude each other");
    return -1;
  }
  if (!o->prefix) {
    say_error("missing -o PREFIX (see --help)");
    return -1;
  }
  if ((have_field || o->skip_bad) && !have_jsonl) {
    say_error("%s applies to --jsonl input only", have_field ? "--jsonl-field" : "--skip-bad");
    return -1;
  }
  if (o->tokenizer && !ddp_bpe_can_encode()) {
    say_error("this ddpprep was built without PCRE2 (libpcre2-dev); --tokenizer needs it");
    return -1;
  }
  return 0;
}

/* ---- inputs ------------------------------------------------------------------- */

typedef struct str_list {
  char **v;
  size_t n, cap;
} str_list_t;

static int list_push(str_list_t *l, const char *s) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    char **v = realloc(l->v, cap * sizeof *v);
    if (!v) return -1;
    l->v = v;
    l->cap = cap;
  }
  if (!(l->v[l->n] = strdup(s))) return -1;
  l->n++;
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Expands one argument into files, checking now that each can be opened so
 * a typo fails before any shard is written. */
static int expand_path(const char *path, str_list_t *out) {
  struct stat sb;
  if (strcmp(path, "-") == 0) return list_push(out, "-");
  if (stat(path, &sb) != 0) {
    say_error("cannot read input '%s': %s", path, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(sb.st_mode)) {
    FILE *f = fopen(path, "rb");
    if (!f) {
      say_error("cannot read input '%s': %s", path, strerror(errno));
      return -1;
    }
    fclose(f);
    return list_push(out, path);
  }
  DIR *d = opendir(path);
  if (!d) {
    say_error("cannot read input directory '%s': %s", path, strerror(errno));
    return -1;
  }
  str_list_t names = {0};
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    rc = list_push(&names, e->d_name);
  }
  closedir(d);
  if (rc == 0) qsort(names.v, names.n, sizeof *names.v, cmp_str);
  for (size_t i = 0; i < names.n; ++i) {
    if (rc == 0) {
      size_t len = strlen(path) + strlen(names.v[i]) + 2;
      char *child = malloc(len);
      if (!child) {
        rc = -1;
      } else {
        snprintf(child, len, "%s/%s", path, names.v[i]);
        rc = expand_path(child, out);
        free(child);
      }
    }
    free(names.v[i]);
  }
  free(names.v);
  return rc;
}

/* ---- output --------------------------------------------------------------------- */

typedef struct bytes {
  unsigned char *p;
  size_t n, cap;
} bytes_t;

static int bytes_append(bytes_t *b, const void *src, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n) cap *= 2;
    unsigned char *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, src, n);
  b->n += n;
  return 0;
}

typedef struct split_out {
  const char *name; /* "train" / "val" */
  int32_t *tok;
  int64_t n, cap; /* cap grows up to shard_tokens */
  int64_t docs, tokens;
  int shards;
} split_out_t;

/* One document of a batch: its bytes at `off` in the batch buffer (or at
 * batch.ext), and its pieces units[first_unit .. first_unit + n_units). */
typedef struct batch_doc {
  size_t off, n;
  size_t first_unit, n_units;
  const char *name; /* the input it came from, for messages */
} batch_doc_t;

/* A piece of a document that one worker encodes on its own. */
typedef struct work_unit {
  size_t off, n;
  ddp_bpe_ids_t ids; /* kept between batches: the buffers are reused */
} work_unit_t;

struct prep;
struct batch;
typedef struct worker_arg {
  struct prep *p;
  struct batch *bt;
  int index; /* which tokenizer cache */
} worker_arg_t;

typedef struct batch {
  bytes_t buf;
  const unsigned char *ext; /* a document too big to copy, encoded in place */
  batch_doc_t *docs;
  size_t n_docs, cap_docs;
  work_unit_t *units;
  size_t n_units, cap_units;
  atomic_size_t next_unit;   /* the workers' shared cursor */
  atomic_size_t failed_unit; /* the first piece that failed; SIZE_MAX: none */
  pthread_t tid[MAX_THREADS];
  worker_arg_t args[MAX_THREADS];
  int n_started, running; /* workers encoding this batch now */
} batch_t;

typedef struct prep {
  prep_opts_t opt;
  int32_t eot, vocab; /* the header's; the tokenizer's with --tokenizer */
  split_out_t split[2];
  str_list_t written; /* shard paths, removed if the run fails */
  int64_t *lens;      /* per kept document: tokens, EOT included */
  size_t n_lens, cap_lens;
  int64_t skipped, bad_lines;
  ddp_bpe_t *bpe;
  ddp_bpe_cache_t **caches; /* one per thread */
  /* Two batches: the workers encode one while the main thread reads the
   * next into the other (batch[cur]). */
  batch_t batch[2];
  int cur;
} prep_t;

static int flush_shard(prep_t *p, split_out_t *s) {
  if (s->n == 0) return 0;
  char path[4096];
  int len = snprintf(path, sizeof path, "%s_%s_%06d.bin", p->opt.prefix, s->name, s->shards);
  if (len < 0 || (size_t)len >= sizeof path) {
    say_error("output prefix is too long");
    return -1;
  }
  if (ddp_shard_write(path, s->tok, s->n, p->eot, p->vocab) != DDP_OK) {
    say_error("cannot write shard '%s'", path);
    return -1;
  }
  if (list_push(&p->written, path) != 0) {
    unlink(path);
    say_error("out of memory");
    return -1;
  }
  s->shards++;
  s->n = 0;
  return 0;
}

static int push_token(prep_t *p, split_out_t *s, int32_t t) {
  if (s->n == p->opt.shard_tokens && flush_shard(p, s) != 0) return -1;
  if (s->n == s->cap) {
    int64_t cap = s->cap ? 2 * s->cap : 65536;
    if (cap > p->opt.shard_tokens) cap = p->opt.shard_tokens;
    int32_t *tok = realloc(s->tok, (size_t)cap * sizeof *tok);
    if (!tok) {
      say_error("out of memory for a shard of %lld tokens", (long long)cap);
      return -1;
    }
    s->tok = tok;
    s->cap = cap;
  }
  s->tok[s->n++] = t;
  return 0;
}

static int is_val(const prep_t *p, const unsigned char *b, size_t n) {
  return ddpprep_is_val(p->opt.seed, p->opt.val_frac, b, n);
}

/* A shard boundary falls between documents unless the document alone is
 * longer than a shard; then it continues in the next shard(s). The tokens
 * are ids[0..n_ids) with a tokenizer, else the bytes themselves; the split
 * is chosen by the bytes either way. */
static int emit_doc(prep_t *p, const unsigned char *b, size_t n, const int32_t *ids, size_t n_ids) {
  if (n == 0) {
    p->skipped++;
    return 0;
  }
  split_out_t *s = &p->split[is_val(p, b, n)];
  size_t n_tok = ids ? n_ids : n;
  int64_t len = (int64_t)n_tok + 1;
  if (s->n > 0 && s->n + len > p->opt.shard_tokens && flush_shard(p, s) != 0) return -1;
  if (push_token(p, s, p->eot) != 0) return -1;
  for (size_t i = 0; i < n_tok; ++i)
    if (push_token(p, s, ids ? ids[i] : b[i]) != 0) return -1;
  s->docs++;
  s->tokens += len;
  if (p->n_lens == p->cap_lens) {
    size_t cap = p->cap_lens ? 2 * p->cap_lens : 1024;
    int64_t *l = realloc(p->lens, cap * sizeof *l);
    if (!l) {
      say_error("out of memory");
      return -1;
    }
    p->lens = l;
    p->cap_lens = cap;
  }
  p->lens[p->n_lens++] = len;
  return 0;
}

/* ---- BPE encoding in batches ---------------------------------------------------- */

static int is_ascii_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* The first cut at or after `from` in b[0..n), or n when there is none: a
 * position whose byte is ASCII whitespace and whose previous byte is
 * printable ASCII. No pre-token of GPT-2's pattern contains both a non-space
 * and the space after it (letters, digits and punctuation runs stop at
 * whitespace; whitespace runs start with it), and matching from the cut
 * never looks back, so the pieces encode to exactly the whole's tokens. */
static size_t safe_cut(const unsigned char *b, size_t from, size_t n) {
  for (size_t i = from > 0 ? from : 1; i < n; ++i)
    if (is_ascii_space(b[i]) && b[i - 1] > ' ' && b[i - 1] < 0x7f) return i;
  return n;
}

static int add_unit(batch_t *bt, size_t off, size_t n) {
  if (bt->n_units == bt->cap_units) {
    size_t cap = bt->cap_units ? 2 * bt->cap_units : 1024;
    work_unit_t *u = realloc(bt->units, cap * sizeof *u);
    if (!u) return -1;
    memset(u + bt->cap_units, 0, (cap - bt->cap_units) * sizeof *u);
    bt->units = u;
    bt->cap_units = cap;
  }
  work_unit_t *u = &bt->units[bt->n_units++];
  u->off = off;
  u->n = n;
  u->ids.n = 0;
  return 0;
}

/* Takes pieces from the shared cursor until none is left; which thread
 * encodes a piece does not change its tokens. */
static void *encode_worker(void *arg) {
  worker_arg_t *w = arg;
  batch_t *bt = w->bt;
  const unsigned char *base = bt->ext ? bt->ext : bt->buf.p;
  for (;;) {
    size_t u = atomic_fetch_add(&bt->next_unit, 1);
    if (u >= bt->n_units || atomic_load(&bt->failed_unit) != SIZE_MAX) break;
    work_unit_t *wu = &bt->units[u];
    size_t none = SIZE_MAX;
    if (ddp_bpe_encode(w->p->bpe, w->p->caches[w->index], (const char *)base + wu->off, wu->n,
                       &wu->ids) != DDP_OK)
      atomic_compare_exchange_strong(&bt->failed_unit, &none, u);
  }
  return NULL;
}

/* Cuts the batch's documents into pieces and starts the workers on them;
 * they run until batch_join. */
static int batch_launch(prep_t *p, batch_t *bt) {
  int rc = 0;
  bt->n_units = 0;
  for (size_t d = 0; d < bt->n_docs && rc == 0; ++d) {
    batch_doc_t *doc = &bt->docs[d];
    const unsigned char *b = (bt->ext ? bt->ext : bt->buf.p) + doc->off;
    doc->first_unit = bt->n_units;
    for (size_t at = 0; at < doc->n && rc == 0;) {
      size_t end = doc->n - at > PIECE_BYTES ? safe_cut(b, at + PIECE_BYTES, doc->n) : doc->n;
      rc = add_unit(bt, doc->off + at, end - at);
      at = end;
    }
    doc->n_units = bt->n_units - doc->first_unit;
  }
  if (rc != 0) {
    say_error("out of memory");
    return -1;
  }
  atomic_store(&bt->next_unit, 0);
  atomic_store(&bt->failed_unit, SIZE_MAX);
  int n_threads = p->opt.threads;
  if ((size_t)n_threads > bt->n_units) n_threads = (int)bt->n_units;
  bt->n_started = 0;
  for (int t = 0; t < n_threads; ++t) {
    bt->args[bt->n_started] = (worker_arg_t){p, bt, bt->n_started};
    if (pthread_create(&bt->tid[bt->n_started], NULL, encode_worker, &bt->args[bt->n_started]) == 0)
      bt->n_started++;
  }
  /* A thread that cannot start only slows the batch down, since the others
   * take its pieces; with none at all, this thread encodes the batch. */
  if (bt->n_started == 0) {
    bt->args[0] = (worker_arg_t){p, bt, 0};
    encode_worker(&bt->args[0]);
  }
  bt->running = 1;
  return 0;
}

static void batch_join(batch_t *bt) {
  if (!bt->running) return;
  for (int t = 0; t < bt->n_started; ++t) pthread_join(bt->tid[t], NULL);
  bt->running = 0;
}

/* Emits a launched and joined batch's documents in order, and empties it. */
static int batch_emit(prep_t *p, batch_t *bt) {
  int rc = 0;
  size_t bad = atomic_load(&bt->failed_unit);
  if (bad != SIZE_MAX) {
    size_t d = 0;
    while (bt->docs[d].first_unit + bt->docs[d].n_units <= bad) ++d;
    say_error("cannot encode a document of '%s' (see the message above)", bt->docs[d].name);
    return -1;
  }
  /* A document's pieces are contiguous: concatenate them in place of the
   * first piece's buffer only when there are several. */
  const unsigned char *base = bt->ext ? bt->ext : bt->buf.p;
  for (size_t d = 0; d < bt->n_docs && rc == 0; ++d) {
    batch_doc_t *doc = &bt->docs[d];
    work_unit_t *first = &bt->units[doc->first_unit];
    for (size_t k = 1; k < doc->n_units && rc == 0; ++k) {
      ddp_bpe_ids_t *more = &bt->units[doc->first_unit + k].ids;
      if (first->ids.n + more->n > first->ids.cap) {
        size_t cap = first->ids.n + more->n;
        int32_t *v = realloc(first->ids.v, cap * sizeof *v);
        if (!v) {
          say_error("out of memory");
          rc = -1;
          break;
        }
        first->ids.v = v;
        first->ids.cap = cap;
      }
      memcpy(first->ids.v + first->ids.n, more->v, more->n * sizeof *more->v);
      first->ids.n += more->n;
    }
    if (rc == 0) rc = emit_doc(p, base + doc->off, doc->n, first->ids.v, first->ids.n);
  }
  bt->n_docs = 0;
  bt->buf.n = 0;
  bt->ext = NULL;
  return rc;
}

/* The batch being filled is full: wait for the one in flight (older), start
 * the workers on the full one, emit the older one while they run, and fill
 * the older one's buffers next. */
static int batch_rotate(prep_t *p) {
  batch_t *older = &p->batch[p->cur ^ 1], *full = &p->batch[p->cur];
  batch_join(older);
  int rc = batch_launch(p, full);
  if (rc == 0 && older->n_docs > 0) rc = batch_emit(p, older);
  p->cur ^= 1;
  return rc;
}

/* Encodes and emits everything submitted so far, in order. */
static int batch_flush(prep_t *p) {
  batch_t *older = &p->batch[p->cur ^ 1], *last = &p->batch[p->cur];
  batch_join(older);
  int rc = last->n_docs > 0 ? batch_launch(p, last) : 0;
  if (rc == 0 && older->n_docs > 0) rc = batch_emit(p, older);
  batch_join(last);
  if (rc == 0 && last->n_docs > 0) rc = batch_emit(p, last);
  return rc;
}

static int batch_add(batch_t *bt, const char *name, size_t off, size_t n) {
  if (bt->n_docs == bt->cap_docs) {
    size_t cap = bt->cap_docs ? 2 * bt->cap_docs : 256;
    batch_doc_t *d = realloc(bt->docs, cap * sizeof *d);
    if (!d) return -1;
    bt->docs = d;
    bt->cap_docs = cap;
  }
  bt->docs[bt->n_docs++] = (batch_doc_t){off, n, 0, 0, name};
  return 0;
}

/* One document of input `name`: emitted at once byte-level, or queued for
 * the BPE workers (a document larger than a batch is encoded where it is). */
static int submit_doc(prep_t *p, const char *name, const unsigned char *b, size_t n) {
  if (!p->bpe) return emit_doc(p, b, n, NULL, 0);
  if (n == 0) {
    p->skipped++;
    return 0;
  }
  batch_t *bt = &p->batch[p->cur];
  if (bt->n_docs > 0 && (bt->buf.n + n > BATCH_BYTES || bt->n_docs == BATCH_DOCS)) {
    if (batch_rotate(p) != 0) return -1;
    bt = &p->batch[p->cur];
  }
  if (n >= BATCH_BYTES) { /* b is the caller's: encoded and emitted before returning */
    if (batch_flush(p) != 0) return -1;
    bt->ext = b;
    if (batch_add(bt, name, 0, n) != 0) {
      say_error("out of memory");
      return -1;
    }
    if (batch_launch(p, bt) != 0) return -1;
    batch_join(bt);
    return batch_emit(p, bt);
  }
  if (batch_add(bt, name, bt->buf.n, n) != 0 || bytes_append(&bt->buf, b, n) != 0) {
    say_error("out of memory");
    return -1;
  }
  return 0;
}

static void batch_free(batch_t *bt) {
  batch_join(bt);
  for (size_t u = 0; u < bt->cap_units; ++u) free(bt->units[u].ids.v);
  free(bt->units);
  free(bt->docs);
  free(bt->buf.p);
}

/* ---- reading ----------------------------------------------------------------------- */

static int interrupted(void) {
  if (!g_stop) return 0;
  say_error("interrupted by signal %d", (int)g_stop);
  return 1;
}

static int read_error(FILE *f, const char *name) {
  if (g_stop) {
    interrupted();
    return -1;
  }
  if (ferror(f)) {
    say_error("cannot read '%s': %s", name, strerror(errno));
    return -1;
  }
  return 0;
}

/* A bad JSONL line: an error, or with --skip-bad a warning (the first few)
 * and a count in the summary. */
static int bad_line(prep_t *p, const char *name, long lineno, const char *what,
                    const char *detail) {
  if (!p->opt.skip_bad) {
    say_error("%s:%ld: %s%s", name, lineno, what, detail);
    return -1;
  }
  if (p->bad_lines++ < MAX_BAD_LINE_WARNINGS)
    fprintf(stderr, "ddpprep: warning: %s:%ld: %s%s; skipped (--skip-bad)\n", name, lineno, what,
            detail);
  return 0;
}

/* The --jsonl-field (default "text") of one JSONL line; blank lines are
 * allowed (editors leave them). */
static int jsonl_line(prep_t *p, const char *name, long lineno, const char *line, size_t n) {
  size_t k = 0;
  while (k < n && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r' || line[k] == '\n')) ++k;
  if (k == n) return 0;
  json_error_t err;
  /* JSON_ALLOW_NUL: a "\u0000" in a document is one more byte, not an error. */
  json_t *obj = json_loadb(line, n, JSON_ALLOW_NUL, &err);
  if (!obj) return bad_line(p, name, lineno, "malformed JSON: ", err.text);
  json_t *text = json_is_object(obj) ? json_object_get(obj, p->opt.jsonl_field) : NULL;
  if (!json_is_string(text)) {
    char what[300];
    snprintf(what, sizeof what, "expected a JSON object with a string \"%.200s\" field",
             p->opt.jsonl_field);
    json_decref(obj);
    return bad_line(p, name, lineno, what, "");
  }
  int rc =
      submit_doc(p, name, (const unsigned char *)json_string_value(text), json_string_length(text));
  json_decref(obj);
  return rc;
}

static int read_input(prep_t *p, const char *path, bytes_t *doc) {
  int is_stdin = strcmp(path, "-") == 0;
  const char *name = is_stdin ? "<stdin>" : path;
  FILE *f = is_stdin ? stdin : fopen(path, "rb");
  if (!f) {
    say_error("cannot read input '%s': %s", path, strerror(errno));
    return -1;
  }
  int rc = 0;
  doc->n = 0;
  if (p->opt.mode == MODE_FILE) {
    unsigned char buf[65536];
    size_t got;
    while (!g_stop && (got = fread(buf, 1, sizeof buf, f)) > 0)
      if (bytes_append(doc, buf, got) != 0) {
        say_error("out of memory reading '%s'", name);
        rc = -1;
        break;
      }
    if (rc == 0) rc = read_error(f, name);
    if (rc == 0) rc = submit_doc(p, name, doc->p, doc->n);
  } else {
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    long lineno = 0;
    size_t sep_len = p->opt.doc_sep ? strlen(p->opt.doc_sep) : 0;
    while (rc == 0 && !g_stop && (got = getline(&line, &cap, f)) >= 0) {
      ++lineno;
      if (p->opt.mode == MODE_JSONL) {
        rc = jsonl_line(p, name, lineno, line, (size_t)got);
        continue;
      }
      size_t body = (size_t)got - (got > 0 && line[got - 1] == '\n');
      if (body == sep_len && memcmp(line, p->opt.doc_sep, sep_len) == 0) {
        rc = submit_doc(p, name, doc->p, doc->n);
        doc->n = 0;
      } else if (bytes_append(doc, line, (size_t)got) != 0) {
        say_error("out of memory reading '%s'", name);
        rc = -1;
      }
    }
    free(line);
    if (rc == 0) rc = read_error(f, name);
    /* The end of a file ends its last document: documents never span files. */
    if (rc == 0 && p->opt.mode == MODE_SEP) rc = submit_doc(p, name, doc->p, doc->n);
  }
  if (!is_stdin) fclose(f);
  if (rc == 0 && interrupted()) rc = -1;
  return rc;
}

/* ---- summary ---------------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of the sorted lengths. */
static int64_t pct(const int64_t *v, size_t n, double q) {
  size_t r = (size_t)ceil(q * (double)n);
  return v[r ? r - 1 : 0];
}

static void summary(prep_t *p) {
  split_out_t *t = &p->split[0], *v = &p->split[1];
  fprintf(stderr,
          "ddpprep: documents: %lld (train %lld, val %lld); tokens: %lld (train %lld, val %lld); "
          "skipped empty: %lld; shards: %d train, %d val\n",
          (long long)(t->docs + v->docs), (long long)t->docs, (long long)v->docs,
          (long long)(t->tokens + v->tokens), (long long)t->tokens, (long long)v->tokens,
          (long long)p->skipped, t->shards, v->shards);
  if (p->opt.skip_bad)
    fprintf(stderr, "ddpprep: skipped bad JSONL lines: %lld\n", (long long)p->bad_lines);
  if (p->bpe)
    fprintf(stderr, "ddpprep: tokenizer %s: vocabulary %d, EOT %d; %d thread(s)\n",
            p->opt.tokenizer, (int)p->vocab, (int)p->eot, p->opt.threads);
  if (p->n_lens == 0) return;
  qsort(p->lens, p->n_lens, sizeof *p->lens, cmp_i64);
  fprintf(stderr,
          "ddpprep: document length in tokens (EOT included): p10 %lld, p50 %lld, p90 %lld, "
          "p99 %lld, max %lld\n",
          (long long)pct(p->lens, p->n_lens, 0.10), (long long)pct(p->lens, p->n_lens, 0.50),
          (long long)pct(p->lens, p->n_lens, 0.90), (long long)pct(p->lens, p->n_lens, 0.99),
          (long long)p->lens[p->n_lens - 1]);
}

/* ---- setup ------------------------------------------------------------------------ */

/* mkdir -p of the directory part of PREFIX; what it creates is recorded in
 * *created (outermost first) so that a failed run can remove it again. */
static int make_prefix_dir(const char *prefix, str_list_t *created) {
  const char *slash = strrchr(prefix, '/');
  if (!slash || slash == prefix) return 0;
  char *dir = strndup(prefix, (size_t)(slash - prefix));
  if (!dir) return -1;
  int rc = 0;
  for (char *c = dir + 1;; ++c) {
    if (*c != '/' && *c != '\0') continue;
    char saved = *c;
    *c = '\0';
    struct stat sb;
    if (stat(dir, &sb) != 0) {
      if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        say_error("cannot create output directory '%s': %s", dir, strerror(errno));
        rc = -1;
      } else if (list_push(created, dir) != 0) {
        say_error("out of memory");
        rc = -1;
      }
    } else if (!S_ISDIR(sb.st_mode)) {
      say_error("cannot create output directory '%s': a file of that name exists", dir);
      rc = -1;
    }
    *c = saved;
    if (rc != 0 || saved == '\0') break;
  }
  free(dir);
  return rc;
}

static int load_tokenizer(prep_t *p) {
  if (ddp_bpe_load(p->opt.tokenizer, &p->bpe) != DDP_OK) {
    say_error("cannot load the tokenizer in '%s' (see the message above)", p->opt.tokenizer);
    return -1;
  }
  p->vocab = ddp_bpe_vocab_size(p->bpe);
  p->eot = ddp_bpe_eot(p->bpe);
  if (p->vocab > UINT16_VOCAB) {
    say_error(
        "tokenizer '%s' has %d tokens, but llm.c's uint16 shards hold ids up to 65535 "
        "(a vocabulary of at most %d)",
        p->opt.tokenizer, (int)p->vocab, UINT16_VOCAB);
    return -1;
  }
  p->caches = calloc((size_t)p->opt.threads, sizeof *p->caches);
  if (!p->caches) {
    say_error("out of memory");
    return -1;
  }
  for (int t = 0; t < p->opt.threads; ++t)
    if (ddp_bpe_cache_create(p->bpe, &p->caches[t]) != DDP_OK) return -1;
  return 0;
}

/* ---- main ------------------------------------------------------------------------- */

int main(int argc, char **argv) {
  prep_t p;
  memset(&p, 0, sizeof p);
  p.opt.shard_tokens = 100000000;
  p.opt.jsonl_field = "text";
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  p.opt.threads = cores < 1 ? 1 : cores > MAX_THREADS ? MAX_THREADS : (int)cores;
  p.eot = DDP_BUILTIN_EOT;
  p.vocab = DDP_BUILTIN_VOCAB;
  p.split[0].name = "train";
  p.split[1].name = "val";
  char **paths = calloc((size_t)argc + 1, sizeof *paths);
  if (!paths) return EXIT_RUNTIME;
  int n_paths = 0;
  if (parse_args(&p.opt, argc, argv, paths, &n_paths) != 0) {
    free(paths);
    return EXIT_USAGE;
  }
  if (p.opt.help) {
    print_help(stdout);
    free(paths);
    return 0;
  }

  if (p.opt.images) {
    str_list_t made = {0};
    const ddpprep_images_opts_t io = {p.opt.images,     p.opt.prefix,
                                      p.opt.val_frac,   p.opt.seed,
                                      p.opt.image_size, p.opt.channels ? p.opt.channels : 3,
                                      p.opt.threads};
    int irc = make_prefix_dir(p.opt.prefix, &made) == 0 ? 0 : EXIT_RUNTIME;
    if (irc == 0) {
      struct sigaction isa;
      memset(&isa, 0, sizeof isa);
      isa.sa_handler = on_signal;
      sigemptyset(&isa.sa_mask);
      sigaction(SIGINT, &isa, NULL);
      sigaction(SIGTERM, &isa, NULL);
      irc = ddpprep_images_run(&io, paths, n_paths, &g_stop);
    }
    for (size_t i = made.n; i-- > 0;) {
      if (irc != 0) rmdir(made.v[i]);
      free(made.v[i]);
    }
    free(made.v);
    free(paths);
    return irc;
  }

  /* No SA_RESTART: a read blocked on stdin returns EINTR, so Ctrl-C is seen
   * without waiting for more input. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  int rc = 0;
  str_list_t inputs = {0}, made_dirs = {0};
  if (n_paths == 0) rc = list_push(&inputs, "-");
  for (int i = 0; i < n_paths && rc == 0; ++i) rc = expand_path(paths[i], &inputs);
  free(paths);
  if (rc == 0 && p.opt.tokenizer) rc = load_tokenizer(&p);
  if (rc == 0) rc = make_prefix_dir(p.opt.prefix, &made_dirs);

  bytes_t doc = {0};
  for (size_t i = 0; i < inputs.n && rc == 0; ++i) rc = read_input(&p, inputs.v[i], &doc);
  free(doc.p);
  if (rc == 0) rc = batch_flush(&p); /* the batches in flight and the last, partial one */
  if (rc == 0 && p.split[0].docs + p.split[1].docs == 0) {
    say_error("no documents in the input (%lld empty skipped)", (long long)p.skipped);
    rc = -1;
  }
  if (rc == 0 && p.split[0].docs == 0) {
    say_error("every document went to validation: lower --val-frac");
    rc = -1;
  }
  for (int s = 0; s < 2 && rc == 0; ++s) rc = flush_shard(&p, &p.split[s]);
  if (rc == 0 && interrupted()) rc = -1;

  if (rc == 0) {
    summary(&p);
  } else {
    for (size_t i = 0; i < p.written.n; ++i) unlink(p.written.v[i]);
    if (p.written.n)
      fprintf(stderr, "ddpprep: removed the %zu shard(s) this run had written\n", p.written.n);
    for (size_t i = made_dirs.n; i-- > 0;) rmdir(made_dirs.v[i]);
  }
  for (size_t i = 0; i < made_dirs.n; ++i) free(made_dirs.v[i]);
  free(made_dirs.v);
  /* Joins workers still running after a failure before anything is freed. */
  batch_free(&p.batch[0]);
  batch_free(&p.batch[1]);
  if (p.caches)
    for (int t = 0; t < p.opt.threads; ++t) ddp_bpe_cache_free(p.caches[t]);
  free(p.caches);
  ddp_bpe_free(p.bpe);
  for (size_t i = 0; i < inputs.n; ++i) free(inputs.v[i]);
  free(inputs.v);
  for (size_t i = 0; i < p.written.n; ++i) free(p.written.v[i]);
  free(p.written.v);
  free(p.split[0].tok);
  free(p.split[1].tok);
  free(p.lens);
  return rc == 0 ? 0 : EXIT_RUNTIME;
}
