/* Shard globs and the built-in data set for the trainer (see train_data.h). */
#include "train/train_data.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"

ddp_status_t ddp_train_load_glob(ddp_corpus_t *corpus, const char *pattern, int seq_len) {
  glob_t g;
  memset(&g, 0, sizeof g);
  int rc = glob(pattern, GLOB_ERR, NULL, &g);
  if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
    globfree(&g);
    DDP_FAIL(DDP_ERR_IO, "no file matches '%s'", pattern);
  }
  if (rc != 0) {
    globfree(&g);
    DDP_FAIL(DDP_ERR_IO, "cannot expand '%s'", pattern);
  }
  ddp_status_t st = DDP_OK;
  if (g.gl_pathc == 1) {
    st = ddp_shard_read(corpus, g.gl_pathv[0], seq_len);
    globfree(&g);
    return st;
  }
  /* Several shards: read each, then index their concatenation. */
  ddp_corpus_t *parts = calloc(g.gl_pathc, sizeof *parts);
  int32_t *all = NULL;
  if (!parts) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "out of memory reading '%s'", pattern);
  int64_t total = 0;
  for (size_t i = 0; i < g.gl_pathc; ++i) {
    DDP_CHECK_GOTO(ddp_shard_read(&parts[i], g.gl_pathv[i], seq_len), st, out);
    if (i > 0 && (parts[i].eot != parts[0].eot || parts[i].vocab != parts[0].vocab))
      DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, out,
                    "%s has EOT %d and vocabulary %d, but %s has EOT %d and vocabulary %d",
                    g.gl_pathv[i], parts[i].eot, parts[i].vocab, g.gl_pathv[0], parts[0].eot,
                    parts[0].vocab);
    total += parts[i].n_tokens;
  }
  all = malloc((size_t)total * sizeof *all);
  if (!all) DDP_FAIL_GOTO(st, DDP_ERR_OOM, out, "out of memory reading '%s'", pattern);
  int64_t at = 0;
  for (size_t i = 0; i < g.gl_pathc; ++i) {
    memcpy(all + at, parts[i].tokens, (size_t)parts[i].n_tokens * sizeof *all);
    at += parts[i].n_tokens;
  }
  st = ddp_corpus_from_tokens(corpus, all, total, parts[0].eot, parts[0].vocab, seq_len, pattern);
out:
  for (size_t i = 0; parts && i < g.gl_pathc; ++i) ddp_corpus_destroy(&parts[i]);
  free(parts);
  free(all);
  globfree(&g);
  return st;
}
