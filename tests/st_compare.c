/* st_compare A B TOL: compares two safetensors files of f32 tensors, tensor
 * by tensor (matched by name), by relative L2 difference |a - b| / |b|.
 * Prints the worst tensor; exits 0 when every tensor is within TOL, 1 when
 * one is not, 2 when the files do not match up (names, shapes, dtypes). The
 * data-parallel equivalence test uses it on exported weights. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/safetensors.h"

static int64_t numel(const ddp_st_tensor_t *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: st_compare A.safetensors B.safetensors TOLERANCE\n");
    return 2;
  }
  const double tol = atof(argv[3]);
  ddp_safetensors_t *a = NULL, *b = NULL;
  if (ddp_safetensors_open(argv[1], &a) != DDP_OK || ddp_safetensors_open(argv[2], &b) != DDP_OK)
    return 2;
  int rc = 0;
  if (ddp_safetensors_count(a) != ddp_safetensors_count(b)) {
    fprintf(stderr, "st_compare: %d tensors vs %d\n", ddp_safetensors_count(a),
            ddp_safetensors_count(b));
    rc = 2;
  }
  double worst = 0.0;
  const char *worst_name = "(none)";
  for (int i = 0; rc != 2 && i < ddp_safetensors_count(a); ++i) {
    ddp_st_tensor_t ta, tb;
    if (ddp_safetensors_get(a, i, &ta) != DDP_OK ||
        ddp_safetensors_find(b, ta.name, &tb) != DDP_OK || ta.dtype != DDP_DTYPE_F32 ||
        tb.dtype != DDP_DTYPE_F32 || numel(&ta) != numel(&tb)) {
      fprintf(stderr, "st_compare: tensor %d (%s) is missing or differs in dtype/shape\n", i,
              ta.name ? ta.name : "?");
      rc = 2;
      break;
    }
    const float *x = ta.data, *y = tb.data;
    double diff = 0.0, ref = 0.0;
    for (int64_t k = 0; k < numel(&ta); ++k) {
      const double d = (double)x[k] - (double)y[k];
      diff += d * d;
      ref += (double)y[k] * (double)y[k];
    }
    const double rel = ref > 0 ? sqrt(diff / ref) : sqrt(diff);
    if (!(rel <= worst)) { /* NaN counts as worst */
      worst = rel;
      worst_name = ta.name;
    }
  }
  if (rc == 0) {
    printf("worst relative difference %.3g in %s (tolerance %g)\n", worst, worst_name, tol);
    if (!(worst <= tol)) rc = 1;
  }
  ddp_safetensors_close(a);
  ddp_safetensors_close(b);
  return rc;
}
