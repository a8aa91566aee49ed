/* Start-up agreement and replica hashes (see consistency.h). */
#include "train/consistency.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "core/hash.h"

/* Width of one value text in the allgather that names differing values:
 * the longest flag value (a path) with room for its NUL. */
enum { VALUE_WIDTH = 1100, HASH_CHARS = 16, MAX_SHARDS_NAMED = 8 };

static uint64_t layout_hash(const ddp_model_t *m) {
  uint64_t h = DDP_FNV1A64_INIT;
  for (int i = 0; i < m->n_tensors; ++i) {
    const ddp_param_t *t = &m->tensors[i];
    h = ddp_fnv1a64(h, t->name, strlen(t->name) + 1);
    h = ddp_fnv1a64(h, &t->ndim, sizeof t->ndim);
    h = ddp_fnv1a64(h, t->shape, sizeof t->shape);
    h = ddp_fnv1a64(h, &t->offset, sizeof t->offset);
  }
  /* the buffer table too: rank 0's buffers are broadcast into it */
  for (int i = 0; i < m->n_buffer_tensors; ++i) {
    const ddp_buffer_t *b = &m->buffer_tensors[i];
    h = ddp_fnv1a64(h, b->t.name, strlen(b->t.name) + 1);
    h = ddp_fnv1a64(h, &b->t.ndim, sizeof b->t.ndim);
    h = ddp_fnv1a64(h, b->t.shape, sizeof b->t.shape);
    h = ddp_fnv1a64(h, &b->t.offset, sizeof b->t.offset);
    h = ddp_fnv1a64(h, &b->kind, sizeof b->kind);
  }
  return h;
}

/* The flags that may differ, for the message: "--threads, --nvtx". */
static void local_flags(const ddp_options_t *o, char *buf, size_t len) {
  char scratch[VALUE_WIDTH];
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < ddp_options_count(); ++i) {
    if (ddp_options_rank_value(o, i, scratch, sizeof scratch) != 1) continue;
    const int n = snprintf(buf + used, len - used, "%s--%s", used ? ", " : "", ddp_options_name(i));
    if (n < 0 || (size_t)n >= len - used) break;
    used += (size_t)n;
  }
}

/* Rank 0 names flag `index`'s two values: its own and the first rank's
 * that differs. Collective (every rank knows the flag differs). */
static ddp_status_t name_values(const ddp_dist_t *dist, const ddp_options_t *o, int index,
                                const char *locals) {
  char mine[VALUE_WIDTH], *all = NULL;
  if (ddp_options_rank_value(o, index, mine, sizeof mine) != 0) mine[0] = '\0';
  DDP_CHECK(ddp_dist_allgather_lines(dist, mine, sizeof mine, &all));
  int other = -1, n_differ = 0;
  for (int r = 1; r < dist->world; ++r)
    if (strcmp(all + (size_t)r * VALUE_WIDTH, all) != 0) {
      if (other < 0) other = r;
      ++n_differ;
    }
  const char *name = ddp_options_name(index);
  if (dist->rank == 0 && other > 0)
    ddp_log_at(DDP_LOG_LEVEL_ERROR, NULL, 0,
               "ranks disagree on flag --%s: %s'%.200s' on rank 0 and '%.200s' on rank %d "
               "(%d of %d ranks differ from rank 0); every rank of a job needs the same flags, "
               "except %s and the GPU number of --device",
               name, strcmp(name, "device") == 0 ? "the device kind is " : "", all,
               all + (size_t)other * VALUE_WIDTH, other, n_differ, dist->world, locals);
  free(all);
  return DDP_OK;
}

ddp_status_t ddp_train_check_flags(const ddp_dist_t *dist, const ddp_options_t *o) {
  if (dist->world == 1) return DDP_OK;
  const int n = ddp_options_count();
  /* Another program (other models registered) has other rows: the lines
   * below would not line up, so the tables are compared first. */
  uint64_t table = DDP_FNV1A64_INIT;
  for (int i = 0; i < n; ++i)
    table = ddp_fnv1a64(table, ddp_options_name(i), strlen(ddp_options_name(i)) + 1);
  if (ddp_dist_agree_u64(dist, "the table of flags (programs with different models?)", table) !=
      DDP_OK)
    DDP_FAIL(DDP_ERR_UNSUPPORTED, "the ranks run programs with different flags");
  /* One allgather of every flag's hash; the values themselves travel only
   * for the flags that differ. */
  const size_t width = (size_t)n * HASH_CHARS + 1;
  char *line = calloc(1, width), *all = NULL, value[VALUE_WIDTH];
  if (!line) DDP_FAIL(DDP_ERR_OOM, "flag agreement: out of host memory");
  for (int i = 0; i < n; ++i) {
    const int r = ddp_options_rank_value(o, i, value, sizeof value);
    if (r < 0) {
      free(line);
      DDP_FAIL(DDP_ERR_INTERNAL, "flag agreement: cannot format --%s", ddp_options_name(i));
    }
    /* a local flag hashes to a constant: it never differs */
    const uint64_t h = r == 1 ? 0 : ddp_fnv1a64(DDP_FNV1A64_INIT, value, strlen(value));
    snprintf(line + (size_t)i * HASH_CHARS, HASH_CHARS + 1, "%016" PRIx64, h);
  }
  ddp_status_t st = ddp_dist_allgather_lines(dist, line, width, &all);
  free(line);
  DDP_CHECK(st);
  char locals[512];
  local_flags(o, locals, sizeof locals);
  int differ = 0;
  for (int i = 0; i < n && st == DDP_OK; ++i) {
    int same = 1;
    for (int r = 1; r < dist->world && same; ++r)
      same = memcmp(all + (size_t)r * width + (size_t)i * HASH_CHARS, all + (size_t)i * HASH_CHARS,
                    HASH_CHARS) == 0;
    if (same) continue;
    ++differ;
    st = name_values(dist, o, i, locals);
  }
  free(all);
  DDP_CHECK(st);
  return differ ? DDP_ERR_MISMATCH : DDP_OK;
}

/* After a data fingerprint differed: which shards differ, by name and
 * content, the first few of them. Every rank knows the fingerprints
 * differ and takes part in the same collectives. */
static void name_differing_shards(const ddp_dist_t *dist, const ddp_corpus_t *c,
                                  const char *split) {
  char what[1200];
  snprintf(what, sizeof what, "the number of %s shards", split);
  if (ddp_dist_agree_u64(dist, what, (uint64_t)c->n_segs) != DDP_OK) return;
  int named = 0;
  for (int i = 0; i < c->n_segs && named < MAX_SHARDS_NAMED; ++i) {
    const char *slash = strrchr(c->segs[i].name, '/');
    const char *base = slash ? slash + 1 : c->segs[i].name;
    snprintf(what, sizeof what, "the name, size or token count of %s shard %d of %d (here '%s')",
             split, i + 1, c->n_segs, base);
    if (ddp_dist_agree_u64(dist, what, ddp_corpus_segment_fingerprint(c, i)) != DDP_OK) {
      ++named;
      continue;
    }
    snprintf(what, sizeof what,
             "the content of %s shard '%s' (same name and size; a hash of sampled blocks)", split,
             c->segs[i].name);
    if (ddp_dist_agree_u64(dist, what, c->segs[i].content_hash) != DDP_OK) ++named;
  }
}

/* The data fingerprint of one split; for token data, the shards that
 * differ are named after the summary line. */
static ddp_status_t agree_data(const ddp_dist_t *dist, const ddp_train_data_t *data, int split) {
  const int tokens = data->kind == DDP_BATCH_TOKENS;
  const char *name = split == DDP_SPLIT_VAL ? "validation" : "training";
  char what[160];
  snprintf(what, sizeof what,
           tokens ? "the %s data (shard names, sizes, token counts, sampled content)"
                  : "the %s records (shape, classes, contents)",
           name);
  if (ddp_dist_agree_u64(dist, what, ddp_train_data_fingerprint(data, split)) == DDP_OK)
    return DDP_OK;
  if (tokens)
    name_differing_shards(dist, split == DDP_SPLIT_VAL ? &data->val.corpus : &data->train.corpus,
                          name);
  return DDP_ERR_MISMATCH;
}

ddp_status_t ddp_train_check_agreement(const ddp_dist_t *dist, const ddp_options_t *o,
                                       const ddp_model_t *model, const ddp_train_data_t *data) {
  if (dist->world == 1) return DDP_OK;
  /* ddp_main compared the flags already; a caller of the trainer that did
   * not gets the same check here (one allgather when they agree). */
  ddp_status_t st = ddp_train_check_flags(dist, o);
  if (st != DDP_OK && st != DDP_ERR_MISMATCH) return st;
  if (ddp_dist_agree_u64(dist,
                         "the parameter and buffer layout (tensor names, shapes, order; buffer "
                         "kinds)",
                         layout_hash(model)) != DDP_OK)
    st = DDP_ERR_MISMATCH;
  if (agree_data(dist, data, DDP_SPLIT_TRAIN) != DDP_OK) st = DDP_ERR_MISMATCH;
  if (data->have_val && agree_data(dist, data, DDP_SPLIT_VAL) != DDP_OK) st = DDP_ERR_MISMATCH;
  if (st != DDP_OK)
    DDP_FAIL(st,
             "ranks were started with different settings or data (see above); every rank "
             "of a data-parallel job must run the same command on the same files");
  return DDP_OK;
}

ddp_status_t ddp_train_params_hash(ddp_model_t *model, float *host, uint64_t *hash) {
  DDP_CHECK(ddp_model_params_to_host(model, host));
  *hash = ddp_fnv1a64(DDP_FNV1A64_INIT, host, model->n_params * sizeof *host);
  return DDP_OK;
}
