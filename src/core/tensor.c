/* Tensor descriptors: size arithmetic, validation and printing (see core/tensor.h).
 *
 * ddp_tensor_init is the one place a shape is checked, so it also rejects
 * shapes whose element count or byte size would overflow: numel and bytes can
 * then multiply without checks. */
#include "core/tensor.h"

#include <stdint.h>
#include <stdio.h>

#include "ddptrain/check.h"

int64_t ddp_tensor_numel(const ddp_tensor_t *t) {
  if (!t) return 0;
  /* Unsigned: a zero extent after huge ones (valid, see init) must not
   * overflow on the way to 0. */
  uint64_t n = 1;
  for (int i = 0; i < t->ndim && i < DDP_TENSOR_MAX_DIMS; ++i) n *= (uint64_t)t->shape[i];
  return (int64_t)n;
}

size_t ddp_tensor_bytes(const ddp_tensor_t *t) {
  if (!t) return 0;
  return (size_t)ddp_tensor_numel(t) * ddp_dtype_size(t->dtype);
}

ddp_status_t ddp_tensor_init(ddp_tensor_t *t, void *data, ddp_dtype_t dtype, int ndim,
                             const int64_t *shape) {
  if (!t) DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_tensor_init: NULL tensor");
  size_t elem = ddp_dtype_size(dtype);
  if (elem == 0) DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_tensor_init: invalid dtype %d", (int)dtype);
  if (ndim < 0 || ndim > DDP_TENSOR_MAX_DIMS)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_tensor_init: ndim %d outside [0, %d]", ndim,
             DDP_TENSOR_MAX_DIMS);
  if (ndim > 0 && !shape) DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_tensor_init: NULL shape");

  /* Bound by the byte count, which must fit both int64_t and size_t. */
  uint64_t limit =
      (uint64_t)INT64_MAX < (uint64_t)SIZE_MAX ? (uint64_t)INT64_MAX : (uint64_t)SIZE_MAX;
  uint64_t bytes = elem;
  int zero = 0;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] < 0)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_tensor_init: extent %d is negative (%lld)", i,
               (long long)shape[i]);
    if (shape[i] == 0) zero = 1;
  }
  if (!zero) {
    for (int i = 0; i < ndim; ++i) {
      uint64_t d = (uint64_t)shape[i];
      if (bytes > limit / d)
        DDP_FAIL(DDP_ERR_INVALID_ARG, "ddp_tensor_init: shape too large (overflows at dim %d)", i);
      bytes *= d;
    }
  }

  t->data = data;
  t->dtype = dtype;
  t->ndim = ndim;
  /* Unused extents are 1 so code that multiplies all DDP_TENSOR_MAX_DIMS
   * extents still gets numel. */
  for (int i = 0; i < DDP_TENSOR_MAX_DIMS; ++i) t->shape[i] = i < ndim ? shape[i] : 1;
  return DDP_OK;
}

const char *ddp_tensor_shape_str(const ddp_tensor_t *t, char *buf, size_t len) {
  if (!buf || len == 0) return buf;
  buf[0] = '\0';
  if (!t) return buf;
  size_t used = 0;
  int ndim = t->ndim < 0 ? 0 : t->ndim > DDP_TENSOR_MAX_DIMS ? DDP_TENSOR_MAX_DIMS : t->ndim;
  for (int i = -1; i <= ndim && used < len; ++i) {
    int w;
    if (i < 0)
      w = snprintf(buf + used, len - used, "[");
    else if (i == ndim)
      w = snprintf(buf + used, len - used, "]");
    else
      w = snprintf(buf + used, len - used, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
  return buf;
}
