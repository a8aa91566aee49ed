/* The smallest program against the installed library: pick a backend (a GPU
 * when one is usable, else the CPU), multiply two seeded matrices on it, and
 * check one entry against the host. Build it against an installation with
 *   cc backend_gemm.c $(pkg-config --cflags --libs ddptrain) -o backend_gemm */
#include <ddptrain/ddptrain.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { M = 96, N = 80, K = 64 };

int main(void) {
  float *host = malloc(sizeof(float) * (M * K + K * N + M * N));
  float *a = host, *b = a + M * K, *c = b + K * N;
  ddp_rng_t rng;
  ddp_rng_init(&rng, 42, 0);
  ddp_rng_fill_normal(&rng, 0, 0.0f, 1.0f, a, M * K + K * N);

  ddp_backend_config_t cfg = {.device = "auto"};
  ddp_backend_t *be = NULL;
  if (!host || ddp_backend_create(&cfg, &be) != DDP_OK) return 1;
  void *da, *db, *dc;
  ddp_status_t st = DDP_OK;
  if ((st = ddp_backend_alloc(be, sizeof(float) * M * K, &da)) ||
      (st = ddp_backend_alloc(be, sizeof(float) * K * N, &db)) ||
      (st = ddp_backend_alloc(be, sizeof(float) * M * N, &dc)))
    return 1;
  ddp_gemm_t g = ddp_gemm_packed_f32(M, N, K, da, db, dc);
  if ((st = ddp_backend_copy(be, da, a, sizeof(float) * M * K, DDP_COPY_KIND_HOST_TO_DEVICE,
                             NULL)) ||
      (st = ddp_backend_copy(be, db, b, sizeof(float) * K * N, DDP_COPY_KIND_HOST_TO_DEVICE,
                             NULL)) ||
      (st = ddp_backend_gemm(be, &g, NULL)) ||
      (st = ddp_backend_copy(be, c, dc, sizeof(float) * M * N, DDP_COPY_KIND_DEVICE_TO_HOST,
                             NULL)) ||
      (st = ddp_backend_sync(be, NULL))) {
    fprintf(stderr, "backend_gemm: %s\n", ddp_status_string(st));
    return 1;
  }
  double ref = 0.0;
  for (int k = 0; k < K; ++k) ref += (double)a[(M - 1) * K + k] * b[k * N + (N - 1)];
  double err = fabs(c[M * N - 1] - ref);
  printf("ddptrain %s on %s: C[%d][%d] = %.6f (host %.6f)\n", ddp_version(), be->description, M - 1,
         N - 1, c[M * N - 1], ref);
  ddp_backend_free(be, dc);
  ddp_backend_free(be, db);
  ddp_backend_free(be, da);
  ddp_backend_destroy(be);
  free(host);
  return err <= 1e-4 * fmax(1.0, fabs(ref)) ? 0 : 1;
}
