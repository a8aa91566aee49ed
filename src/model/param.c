/* The parameter table (see ddptrain/param.h): construction and the checks
 * every consumer of a table relies on. */
#include "ddptrain/param.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"

ddp_status_t ddp_param_set(ddp_param_t *p, const char *name, int ndim, const int64_t *shape,
                           size_t offset, int decay) {
  if (!p || !name || !shape) DDP_FAIL(DDP_ERR_INVALID_ARG, "param: NULL argument");
  if (ndim < 1 || ndim > DDP_PARAM_MAX_DIMS)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "param '%s': %d dimensions (1 to %d allowed)", name, ndim,
             DDP_PARAM_MAX_DIMS);
  if (!name[0] || strlen(name) >= sizeof p->name)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "param '%s': the name is empty or longer than %d bytes", name,
             DDP_PARAM_NAME_MAX - 1);
  memset(p, 0, sizeof *p);
  memcpy(p->name, name, strlen(name) + 1);
  p->ndim = ndim;
  size_t count = 1;
  for (int d = 0; d < DDP_PARAM_MAX_DIMS; ++d) {
    p->shape[d] = d < ndim ? shape[d] : 1;
    if (p->shape[d] < 1)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "param '%s': dimension %d is %lld", name, d,
               (long long)p->shape[d]);
    count *= (size_t)p->shape[d];
  }
  p->count = count;
  p->offset = offset;
  p->decay = decay != 0;
  return DDP_OK;
}

static int by_name(const void *a, const void *b) {
  return strcmp((*(const ddp_param_t *const *)a)->name, (*(const ddp_param_t *const *)b)->name);
}

/* Names are checkpoint and export keys: sorted copies of the pointers find
 * a duplicate in n log n (a GPT of 1000 layers has 12002 tensors). */
static ddp_status_t check_unique_names(const ddp_param_t *t, int n, const char *who) {
  const ddp_param_t **sorted = malloc((size_t)n * sizeof *sorted);
  if (!sorted) DDP_FAIL(DDP_ERR_OOM, "%s: out of host memory", who);
  for (int i = 0; i < n; ++i) sorted[i] = &t[i];
  qsort(sorted, (size_t)n, sizeof *sorted, by_name);
  const char *dup = NULL;
  for (int i = 1; i < n && !dup; ++i)
    if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0) dup = sorted[i]->name;
  free(sorted);
  if (dup) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: two tensors are named %s", who, dup);
  return DDP_OK;
}

ddp_status_t ddp_param_table_check(const ddp_param_t *t, int n, size_t total, const char *who) {
  if (!t || n < 1) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: the parameter table is empty", who);
  size_t next = 0;
  for (int i = 0; i < n; ++i) {
    size_t count = 1;
    for (int d = 0; d < DDP_PARAM_MAX_DIMS; ++d)
      count *= (size_t)(t[i].shape[d] > 0 ? t[i].shape[d] : 0);
    if (!t[i].name[0] || memchr(t[i].name, '\0', sizeof t[i].name) == NULL)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: tensor %d has no name", who, i);
    if (t[i].ndim < 1 || t[i].ndim > DDP_PARAM_MAX_DIMS || count != t[i].count || !count)
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "%s: tensor %s: %d dimensions, count %zu does not match its shape (sizes beyond "
               "ndim must be 1, as ddp_param_set leaves them)",
               who, t[i].name, t[i].ndim, t[i].count);
    if (t[i].offset != next)
      DDP_FAIL(DDP_ERR_INVALID_ARG,
               "%s: tensor %s starts at element %zu, expected %zu (tensors must tile the buffer "
               "in order)",
               who, t[i].name, t[i].offset, next);
    next += t[i].count;
  }
  if (next != total)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: the tensors cover %zu elements, the buffer has %zu", who,
             next, total);
  return check_unique_names(t, n, who);
}

int ddp_param_find(const ddp_param_t *t, int n, const char *name) {
  for (int i = 0; t && name && i < n; ++i)
    if (strcmp(t[i].name, name) == 0) return i;
  return -1;
}

int ddp_param_at(const ddp_param_t *t, int n, size_t element) {
  int lo = 0, hi = n - 1;
  while (t && lo <= hi) {
    const int mid = lo + (hi - lo) / 2;
    if (element < t[mid].offset)
      hi = mid - 1;
    else if (element >= t[mid].offset + t[mid].count)
      lo = mid + 1;
    else
      return mid;
  }
  return -1;
}
