/* --conv-algos: resolving the path, reading the record at set-up and
 * writing it when it grew (see train_conv_algos.h). */
#include <config.h>

#include "train/train_conv_algos.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ddptrain/check.h"
#include "ddptrain/log.h"

#define AUTO_NAME "conv-algos.txt"

/* The folder of path ("." for a bare name) into dir. */
static void parent_of(const char *path, char *dir, size_t len) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, len, ".");
  else if (slash == path)
    snprintf(dir, len, "/");
  else
    snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

ddp_status_t ddp_train_conv_algos_setup(ddp_train_conv_algos_t *t, const ddp_options_t *o,
                                        ddp_backend_t *be, int rank) {
  memset(t, 0, sizeof *t);
  const char *flag = o->conv_algos;
  if (strcmp(flag, "none") == 0 || (strcmp(flag, "auto") == 0 && !o->save[0])) return DDP_OK;
  const int n = strcmp(flag, "auto") == 0
                    ? snprintf(t->path, sizeof t->path, "%s/%s", o->save, AUTO_NAME)
                    : snprintf(t->path, sizeof t->path, "%s", flag);
  if (n < 0 || (size_t)n >= sizeof t->path)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "--conv-algos: the path is longer than %zu characters",
             sizeof t->path - 1);
  int missing = 0;
  const ddp_status_t st = ddp_conv_algos_load(&t->rec, t->path, &missing);
  if (st != DDP_OK && !missing) return st;
  if (st == DDP_OK)
    DDP_LOG_INFO("--conv-algos: %zu convolution algorithm choices from %s", t->rec.n, t->path);
  /* A missing file is written by rank 0 once something is searched; an
   * explicit path that cannot be is refused now, not after the first step.
   * (--save's folder is made by the checkpoints' own set-up.) */
  if (missing && rank == 0 && strcmp(flag, "auto") != 0) {
    char dir[sizeof t->path];
    parent_of(t->path, dir, sizeof dir);
    if (access(dir, W_OK) != 0)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "--conv-algos %s: cannot create a file in %s: %s", t->path,
               dir, strerror(errno));
  }
  t->writer = rank == 0;
  t->be = be;
  be->conv_algos = &t->rec;
  return DDP_OK;
}

void ddp_train_conv_algos_save_new(ddp_train_conv_algos_t *t) {
  if (!t->path[0] || !t->writer || !t->rec.dirty || t->warned) return;
  if (ddp_conv_algos_save(&t->rec, t->path) == DDP_OK) {
    DDP_LOG_INFO("--conv-algos: wrote %zu convolution algorithm choices to %s", t->rec.n,
                 t->path);
    return;
  }
  t->warned = 1;
  DDP_LOG_WARN(
      "--conv-algos: the record was not written to %s (above); training goes on, but a rerun "
      "or a resume may choose other algorithms",
      t->path);
}

void ddp_train_conv_algos_destroy(ddp_train_conv_algos_t *t) {
  if (t->be && t->be->conv_algos == &t->rec) t->be->conv_algos = NULL;
  ddp_conv_algos_clear(&t->rec);
  memset(t, 0, sizeof *t);
}
