/* The convolution algorithm record: lookup, the text format, atomic saves
 * (see conv_algos.h). Backend-neutral C, so the CPU build's tests cover the
 * format; the CUDA conv table is its one user. */
#include <config.h>

#include "backend/conv_algos.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/conv_check.h"
#include "ddptrain/check.h"

#define LINE_MAX_CHARS 512
#define FILE_MAX_BYTES ((size_t)16 << 20)

static const char *const k_op_names[] = {"conv_fwd", "conv_bwd_data", "conv_bwd_weights"};
#define N_OPS ((int)(sizeof k_op_names / sizeof k_op_names[0]))

const char *ddp_conv_algo_op_name(ddp_conv_algo_op_t op) {
  return (int)op >= 0 && (int)op < N_OPS ? k_op_names[op] : "?";
}

static int same_key(const ddp_conv_algo_key_t *a, const ddp_conv_algo_key_t *b) {
  const ddp_conv_shape_t *x = &a->sh, *y = &b->sh;
  return a->op == b->op && a->dt == b->dt && a->deterministic == b->deterministic &&
         a->tf32 == b->tf32 && x->N == y->N && x->H == y->H && x->W == y->W && x->C == y->C &&
         x->K == y->K && x->R == y->R && x->S == y->S && x->stride == y->stride &&
         x->pad == y->pad;
}

const ddp_conv_algo_entry_t *ddp_conv_algos_find(const ddp_conv_algos_t *r,
                                                 const ddp_conv_algo_key_t *key) {
  for (size_t i = 0; r && i < r->n; ++i)
    if (same_key(&r->entries[i].key, key)) return &r->entries[i];
  return NULL;
}

ddp_status_t ddp_conv_algos_put(ddp_conv_algos_t *r, const ddp_conv_algo_key_t *key, int algo,
                                int math) {
  ddp_conv_algo_entry_t *e = (ddp_conv_algo_entry_t *)ddp_conv_algos_find(r, key);
  if (e) {
    if (e->algo != algo || e->math != math) r->dirty = 1;
    e->algo = algo;
    e->math = math;
    return DDP_OK;
  }
  if (r->n == r->cap) {
    const size_t cap = r->cap ? 2 * r->cap : 64;
    ddp_conv_algo_entry_t *grown = realloc(r->entries, cap * sizeof *grown);
    if (!grown) DDP_FAIL(DDP_ERR_OOM, "conv algorithms: out of host memory");
    r->entries = grown;
    r->cap = cap;
  }
  r->entries[r->n++] = (ddp_conv_algo_entry_t){.key = *key, .algo = algo, .math = math};
  r->dirty = 1;
  return DDP_OK;
}

void ddp_conv_algos_clear(ddp_conv_algos_t *r) {
  if (!r) return;
  free(r->entries);
  memset(r, 0, sizeof *r);
}

/* ---- the text format --------------------------------------------------------- */

/* The integer fields after op and dtype, in file order. */
static const char *const k_fields[] = {"N",   "H",   "W",    "C",   "K",    "R",   "S",
                                       "stride", "pad", "det", "tf32", "algo", "math"};
#define N_FIELDS ((int)(sizeof k_fields / sizeof k_fields[0]))

/* Splits line (modified) at blanks into at most max tokens; *n = how many
 * there were (may exceed max: the rest are not stored). */
static void split(char *line, char **tok, int max, int *n) {
  *n = 0;
  for (char *p = strtok(line, " \t\r"); p; p = strtok(NULL, " \t\r")) {
    if (*n < max) tok[*n] = p;
    ++*n;
  }
}

/* "name=<int>" into *v. */
static int parse_field(const char *tok, const char *name, int *v) {
  const size_t nl = strlen(name);
  if (strncmp(tok, name, nl) != 0 || tok[nl] != '=' || tok[nl + 1] == '\0') return 0;
  errno = 0;
  char *end = NULL;
  const long x = strtol(tok + nl + 1, &end, 10);
  if (errno || *end || x < INT_MIN || x > INT_MAX) return 0;
  *v = (int)x;
  return 1;
}

/* One choice line into *e; errors name file and line. */
static ddp_status_t parse_line(char *line, const char *name, int lineno,
                               ddp_conv_algo_entry_t *e) {
  char *tok[2 + N_FIELDS];
  int n = 0;
  split(line, tok, 2 + N_FIELDS, &n);
  if (n != 2 + N_FIELDS)
    DDP_FAIL(DDP_ERR_FORMAT,
             "%s line %d: %d fields, expected %d (op, dtype, N= H= W= C= K= R= S= stride= pad= "
             "det= tf32= algo= math=)",
             name, lineno, n, 2 + N_FIELDS);
  int op = -1;
  for (int i = 0; i < N_OPS; ++i)
    if (strcmp(tok[0], k_op_names[i]) == 0) op = i;
  if (op < 0)
    DDP_FAIL(DDP_ERR_FORMAT,
             "%s line %d: unknown op '%s' (conv_fwd, conv_bwd_data or conv_bwd_weights)", name,
             lineno, tok[0]);
  ddp_dtype_t dt;
  if (ddp_dtype_parse(tok[1], &dt) != DDP_OK ||
      (dt != DDP_DTYPE_F32 && dt != DDP_DTYPE_BF16 && dt != DDP_DTYPE_F16))
    DDP_FAIL(DDP_ERR_FORMAT, "%s line %d: dtype '%s' is not fp32, bf16 or fp16", name, lineno,
             tok[1]);
  int v[N_FIELDS];
  for (int i = 0; i < N_FIELDS; ++i)
    if (!parse_field(tok[2 + i], k_fields[i], &v[i]))
      DDP_FAIL(DDP_ERR_FORMAT, "%s line %d: expected '%s=<integer>', found '%s'", name, lineno,
               k_fields[i], tok[2 + i]);
  *e = (ddp_conv_algo_entry_t){
      .key = {.op = (ddp_conv_algo_op_t)op,
              .dt = dt,
              .sh = {.N = v[0], .H = v[1], .W = v[2], .C = v[3], .K = v[4], .R = v[5], .S = v[6],
                     .stride = v[7], .pad = v[8]},
              .deterministic = v[9],
              .tf32 = v[10]},
      .algo = v[11],
      .math = v[12]};
  if (ddp_conv_check_shape("conv algorithms", &e->key.sh) != DDP_OK)
    DDP_FAIL(DDP_ERR_FORMAT, "%s line %d: not a valid convolution shape (above)", name, lineno);
  if ((v[9] != 0 && v[9] != 1) || (v[10] != 0 && v[10] != 1))
    DDP_FAIL(DDP_ERR_FORMAT, "%s line %d: det and tf32 must be 0 or 1, not %d and %d", name,
             lineno, v[9], v[10]);
  if (v[11] < 0 || v[11] > 255 || v[12] < 0 || v[12] > 255)
    DDP_FAIL(DDP_ERR_FORMAT, "%s line %d: algo and math must be 0..255, not %d and %d", name,
             lineno, v[11], v[12]);
  return DDP_OK;
}

ddp_status_t ddp_conv_algos_parse(ddp_conv_algos_t *r, const char *text, size_t len,
                                  const char *name) {
  if (r->n) DDP_FAIL(DDP_ERR_INTERNAL, "conv algorithms: parse into a record that is not empty");
  if (memchr(text, '\0', len))
    DDP_FAIL(DDP_ERR_FORMAT, "%s: holds a NUL byte; not a convolution algorithm record", name);
  ddp_status_t st = DDP_OK;
  int lineno = 0, header = 0;
  size_t pos = 0;
  while (pos < len) {
    const char *nl = memchr(text + pos, '\n', len - pos);
    const size_t ll = nl ? (size_t)(nl - (text + pos)) : len - pos;
    ++lineno;
    if (ll >= LINE_MAX_CHARS)
      DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, fail, "%s line %d: longer than %d characters", name,
                    lineno, LINE_MAX_CHARS - 1);
    char line[LINE_MAX_CHARS];
    memcpy(line, text + pos, ll);
    line[ll] = '\0';
    if (ll && line[ll - 1] == '\r') line[ll - 1] = '\0';
    pos += ll + (nl ? 1 : 0);
    if (!header) {
      if (strcmp(line, DDP_CONV_ALGOS_HEADER) != 0)
        DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, fail,
                      "%s line 1: not a convolution algorithm record (the first line must be "
                      "'%s')",
                      name, DDP_CONV_ALGOS_HEADER);
      header = 1;
      continue;
    }
    const char *p = line;
    while (*p == ' ' || *p == '\t') ++p;
    if (*p == '\0' || *p == '#') continue;
    ddp_conv_algo_entry_t e;
    DDP_CHECK_GOTO(parse_line(line, name, lineno, &e), st, fail);
    if (ddp_conv_algos_find(r, &e.key))
      DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, fail,
                    "%s line %d: a second choice for %s %s N=%d H=%d W=%d C=%d K=%d %dx%d/%d "
                    "det=%d tf32=%d (an earlier line has the first)",
                    name, lineno, ddp_conv_algo_op_name(e.key.op), ddp_dtype_name(e.key.dt),
                    e.key.sh.N, e.key.sh.H, e.key.sh.W, e.key.sh.C, e.key.sh.K, e.key.sh.R,
                    e.key.sh.S, e.key.sh.stride, e.key.deterministic, e.key.tf32);
    DDP_CHECK_GOTO(ddp_conv_algos_put(r, &e.key, e.algo, e.math), st, fail);
  }
  if (!header)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, fail, "%s: empty; not a convolution algorithm record",
                  name);
  r->dirty = 0;
  return DDP_OK;
fail:
  ddp_conv_algos_clear(r);
  return st;
}

ddp_status_t ddp_conv_algos_format(const ddp_conv_algos_t *r, char **text) {
  size_t cap = 64 + r->n * 160, len = 0;
  char *s = malloc(cap);
  if (!s) DDP_FAIL(DDP_ERR_OOM, "conv algorithms: out of host memory");
  len += (size_t)snprintf(s, cap, "%s\n", DDP_CONV_ALGOS_HEADER);
  for (size_t i = 0; i < r->n; ++i) {
    const ddp_conv_algo_entry_t *e = &r->entries[i];
    const ddp_conv_shape_t *sh = &e->key.sh;
    const int w = snprintf(
        s + len, cap - len,
        "%s %s N=%d H=%d W=%d C=%d K=%d R=%d S=%d stride=%d pad=%d det=%d tf32=%d algo=%d "
        "math=%d\n",
        ddp_conv_algo_op_name(e->key.op), ddp_dtype_name(e->key.dt), sh->N, sh->H, sh->W, sh->C,
        sh->K, sh->R, sh->S, sh->stride, sh->pad, e->key.deterministic, e->key.tf32, e->algo,
        e->math);
    if (w < 0 || (size_t)w >= cap - len) {
      free(s);
      DDP_FAIL(DDP_ERR_INTERNAL, "conv algorithms: a line longer than 160 characters");
    }
    len += (size_t)w;
  }
  *text = s;
  return DDP_OK;
}

/* ---- files ------------------------------------------------------------------- */

ddp_status_t ddp_conv_algos_load(ddp_conv_algos_t *r, const char *path, int *missing) {
  if (missing) *missing = 0;
  FILE *f = fopen(path, "rb");
  if (!f) {
    const int e = errno;
    if (missing && (e == ENOENT || e == ENOTDIR)) {
      *missing = 1; /* the caller's to report, or not */
      return DDP_ERR_IO;
    }
    DDP_FAIL(DDP_ERR_IO, "cannot open the convolution algorithm record %s: %s", path,
             strerror(e));
  }
  char *buf = malloc(FILE_MAX_BYTES + 1);
  if (!buf) {
    fclose(f);
    DDP_FAIL(DDP_ERR_OOM, "conv algorithms: out of host memory reading %s", path);
  }
  const size_t got = fread(buf, 1, FILE_MAX_BYTES + 1, f);
  const int read_error = ferror(f);
  fclose(f);
  ddp_status_t st = DDP_OK;
  if (read_error)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, done, "cannot read %s: %s", path, strerror(errno));
  if (got > FILE_MAX_BYTES)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, done,
                  "%s: larger than %zu bytes; not a convolution algorithm record", path,
                  FILE_MAX_BYTES);
  st = ddp_conv_algos_parse(r, buf, got, path);
done:
  free(buf);
  return st;
}

ddp_status_t ddp_conv_algos_save(ddp_conv_algos_t *r, const char *path) {
  char tmp[4096];
  if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "convolution algorithm record: path too long: %s", path);
  char *text = NULL;
  DDP_CHECK(ddp_conv_algos_format(r, &text));
  ddp_status_t st = DDP_OK;
  const size_t len = strlen(text);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    const int e = errno;
    free(text);
    DDP_FAIL(DDP_ERR_IO, "cannot create %s (the convolution algorithm record): %s", tmp,
             strerror(e));
  }
  if (fwrite(text, 1, len, f) != len || fflush(f) != 0 || fsync(fileno(f)) != 0) {
    const int e = errno;
    fclose(f);
    DDP_FAIL_GOTO(st, DDP_ERR_IO, fail, "cannot write %s: %s", tmp, strerror(e));
  }
  if (fclose(f) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, fail, "cannot write %s: %s", tmp, strerror(errno));
  if (rename(tmp, path) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, fail, "cannot rename %s to %s: %s", tmp, path,
                  strerror(errno));
  free(text);
  r->dirty = 0;
  return DDP_OK;
fail:
  unlink(tmp);
  free(text);
  return st;
}
