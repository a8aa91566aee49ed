/* The parameter table: the one description of a model's tensors.
 *
 * A model keeps its parameters in one flat fp32 buffer and its gradients in
 * another, laid out in the order backward finishes them (docs/design.md §3,
 * "Models"). One ddp_param_t per tensor says where it lives in those
 * buffers and what it is. Everything else that needs to know about tensors
 * reads this table as it is, with no copy of its own:
 *   - the optimizer: offset, count and decay of each tensor (LAMB's trust
 *     ratio is per tensor);
 *   - the gradient reducer: the tensor boundaries a bucket never splits;
 *   - checkpoints and exports: name and shape of each entry;
 *   - anomaly reports and the ranks' layout check: names, shapes, order.
 * The table of a model is sorted by offset and tiles [0, n) with no gaps. */
#ifndef DDPTRAIN_PARAM_H
#define DDPTRAIN_PARAM_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DDP_PARAM_NAME_MAX 64 /* bytes, with the NUL */
#define DDP_PARAM_MAX_DIMS 4  /* convolution weights are 4-D */

typedef struct ddp_param {
  char name[DDP_PARAM_NAME_MAX];     /* PyTorch state_dict key,
                                        e.g. "transformer.h.0.attn.c_attn.weight" */
  int ndim;                          /* 1 .. DDP_PARAM_MAX_DIMS */
  int64_t shape[DDP_PARAM_MAX_DIMS]; /* unused dimensions are 1 */
  size_t offset;                     /* elements into the flat buffers */
  size_t count;                      /* product of the shape */
  int decay;                         /* weight decay applies to this tensor */
} ddp_param_t;

/* Fills *p; the count is the product of the first ndim sizes. Rejects
 * (DDP_ERR_INVALID_ARG, logged) a name that does not fit, ndim outside
 * [1, DDP_PARAM_MAX_DIMS] and non-positive sizes. */
ddp_status_t ddp_param_set(ddp_param_t *p, const char *name, int ndim, const int64_t *shape,
                           size_t offset, int decay);

/* Checks that table[0..n) is a valid layout of `total` elements: n >= 1,
 * offsets ascending from 0 without gaps or overlaps, each count equal to
 * its shape's product, the last tensor ending at `total`, names non-empty
 * and unique. `who` names the table in the logged message. */
ddp_status_t ddp_param_table_check(const ddp_param_t *table, int n, size_t total, const char *who);

/* The index of the tensor named `name`, or -1. */
int ddp_param_find(const ddp_param_t *table, int n, const char *name);

/* The index of the tensor holding element `element`, or -1 (a binary
 * search: the table is sorted by offset). */
int ddp_param_at(const ddp_param_t *table, int n, size_t element);

#ifdef __cplusplus
}
#endif
#endif
