/* --conv-algos: resolving the path, reading the record at set-up and
 * writing it when it grew (see train_conv_algos.h). */
#include <config.h>

#include "train/train_conv_algos.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddptrain/check.h"
#include "ddptrain/conv.h"
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

static ddp_status_t bcast(ddp_comm_t *comm, void *buf, size_t bytes) {
  ddp_comm_handle_t h;
  DDP_CHECK(ddp_comm_broadcast(comm, buf, bytes, 0, NULL, &h));
  return ddp_comm_wait(comm, h);
}

ddp_status_t ddp_train_conv_algos_agree(ddp_train_conv_algos_t *t, ddp_comm_t *comm, int world,
                                        int rank) {
  if (!t->path[0] || world < 2 || t->agreed) return DDP_OK;
  t->agreed = 1;
  char *text = NULL;
  uint64_t len = 0;
  /* rank 0 says 0 bytes when it cannot format its record (out of memory):
   * the other ranks then keep their own choices, none is left waiting */
  const ddp_status_t mine = rank == 0 ? ddp_conv_algos_format(&t->rec, &text) : DDP_OK;
  if (rank == 0 && mine == DDP_OK) len = strlen(text);
  ddp_status_t st = bcast(comm, &len, sizeof len);
  if (st == DDP_OK && len == 0) return mine;
  if (st == DDP_OK && rank != 0) {
    text = len < SIZE_MAX ? malloc((size_t)len + 1) : NULL;
    if (!text) DDP_FAIL(DDP_ERR_OOM, "--conv-algos: no memory for rank 0's record");
  }
  if (st == DDP_OK) st = bcast(comm, text, (size_t)len);
  if (st == DDP_OK && rank != 0) {
    ddp_conv_algos_t theirs = {0};
    st = ddp_conv_algos_parse(&theirs, text, (size_t)len, "rank 0's convolution algorithms");
    if (st == DDP_OK) {
      ddp_conv_algos_clear(&t->rec);
      t->rec = theirs; /* be->conv_algos points at t->rec */
      const ddp_conv_ops_t *cv = t->be->ops->conv;
      if (cv && cv->conv_algos_reload) st = cv->conv_algos_reload(t->be);
    }
  }
  free(text);
  return st;
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
