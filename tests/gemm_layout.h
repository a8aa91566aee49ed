/* Matrix layouts for the GEMM tests (CPU and GPU suites): a matrix stored
 * rows x cols with row pitch ld, `batch` of them `stride` elements apart, and
 * element access through an optional transpose, as ddp_gemm_t describes. */
#ifndef DDPTRAIN_TESTS_GEMM_LAYOUT_H
#define DDPTRAIN_TESTS_GEMM_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/backend.h"

typedef struct layout {
  int64_t rows, cols, ld, stride;
  size_t extent; /* elements from the first to one past the last element */
} layout_t;

static inline int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

/* ld 0 = packed (max(1, cols)); pad = extra elements between batches;
 * stride_zero = one matrix shared by every batch. */
static inline layout_t make_layout(int64_t rows, int64_t cols, int64_t ld, int64_t pad,
                                   int64_t batch, int stride_zero) {
  layout_t l = {.rows = rows, .cols = cols};
  l.ld = ld ? ld : max64(1, cols);
  l.stride = stride_zero ? 0 : rows * l.ld + pad;
  l.extent =
      (rows == 0 || cols == 0) ? 0 : (size_t)((batch - 1) * l.stride + (rows - 1) * l.ld + cols);
  return l;
}

/* Elements to allocate (at least one, so empty matrices still get a pointer). */
static inline size_t alloc_elems(const layout_t *l) {
  return l->extent ? l->extent : 1;
}

/* op(X)(r, c) of batch b, X stored rows x cols as the layout says. */
static inline double at_op(const float *x, const layout_t *l, ddp_transpose_t t, int64_t b,
                           int64_t r, int64_t c) {
  const int64_t base = b * l->stride;
  return t == DDP_TRANSPOSE_NO ? x[base + r * l->ld + c] : x[base + c * l->ld + r];
}

#endif
