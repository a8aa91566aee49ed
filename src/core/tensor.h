/* A tensor descriptor: a pointer, an element type and a shape.
 *
 * Descriptors never own memory: parameters, gradients and activations live in
 * flat buffers and arenas owned elsewhere, and a tensor is a view into them.
 * `data` may be a device pointer that the host must never dereference. */
#ifndef DDPTRAIN_TENSOR_H
#define DDPTRAIN_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DDP_TENSOR_MAX_DIMS 4

typedef struct ddp_tensor {
  void *data;
  ddp_dtype_t dtype;
  int ndim;
  int64_t shape[DDP_TENSOR_MAX_DIMS];
} ddp_tensor_t;

/* Product of the shape (1 for a scalar, ndim == 0). */
int64_t ddp_tensor_numel(const ddp_tensor_t *t);

/* numel * element size. */
size_t ddp_tensor_bytes(const ddp_tensor_t *t);

/* Builds a descriptor; fails on ndim outside [0, DDP_TENSOR_MAX_DIMS] or a
 * negative extent. */
ddp_status_t ddp_tensor_init(ddp_tensor_t *t, void *data, ddp_dtype_t dtype, int ndim,
                             const int64_t *shape);

/* Writes "[2, 3, 4]" into buf (always NUL-terminated); returns buf. */
const char *ddp_tensor_shape_str(const ddp_tensor_t *t, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
