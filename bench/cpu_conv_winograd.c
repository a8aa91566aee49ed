/* oneDNN's Winograd convolution kernels against its direct ones on the
 * CPU backend (--winograd on/off): milliseconds of forward, backward-data
 * and backward-weights for the 3x3 stride-1 convolutions of the CPU
 * benchmark's ResNet-18 (cifar stem, width 64, 32x32 images), each as the
 * ddptrain op runs it (the activations' reorders to and from NHWC
 * included), and how far Winograd's results are from the direct ones: the
 * largest difference over the largest direct value, per op.
 *
 * The two algorithms' passes interleave (the machine may be shared) and
 * the median over passes is reported; the last row sums one training
 * step's worth (each shape times the number of such layers in the
 * network). On a machine where oneDNN has no Winograd kernel (below
 * AVX-512) both columns run the direct kernels, and the table says so.
 * Usage (see bench/cpu_conv_winograd.sh):
 *   cpu_conv_winograd threads images [passes] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_conv.h"
#include "backend/cpu/cpu_dnnl.h"
#include "ddptrain/backend.h"
#include "ddptrain/rng.h"

#include "bench_timing.h"

enum { MAX_PASSES = 64, OPS = 3 };

/* A 3x3 stride-1 layer shape of the network, how many such layers a step
 * runs, and whether it runs their backward-data (not the stem's: the
 * images need no gradient). */
typedef struct layer {
  const char *name;
  int C, K, H, count, dinp;
} layer_t;

static const layer_t k_layers[] = {
    {"stem", 1, 64, 32, 1, 0},     {"layer1", 64, 64, 32, 4, 1},  {"layer2", 128, 128, 16, 3, 1},
    {"layer3", 256, 256, 8, 3, 1}, {"layer4", 512, 512, 4, 3, 1},
};
enum { LAYERS = sizeof k_layers / sizeof *k_layers };

static const char *const k_op_names[OPS] = {"forward", "backward-data", "backward-weights"};

static float *alloc_uniform(size_t n, uint64_t stream) {
  float *p = malloc(n * sizeof *p);
  if (!p) {
    fprintf(stderr, "cannot allocate %zu floats\n", n);
    exit(1);
  }
  ddp_rng_t rng;
  ddp_rng_init(&rng, 20261127, stream);
  ddp_rng_fill_uniform(&rng, 0, p, n);
  for (size_t i = 0; i < n; ++i) p[i] = 2.0f * p[i] - 1.0f;
  return p;
}

static void must(ddp_status_t st, const char *what) {
  if (st != DDP_OK) {
    fprintf(stderr, "%s failed: %s\n", what, ddp_status_name(st));
    exit(1);
  }
}

static void run_op(ddp_backend_t *be, int op, const ddp_conv_shape_t *sh, float *x, float *w,
                   float *y, float *dy, float *dx, float *dw) {
  if (op == 0) must(ddp_cpu_conv_fwd(be, DDP_DTYPE_F32, y, x, w, sh, NULL), "conv_fwd");
  if (op == 1) must(ddp_cpu_conv_bwd_data(be, DDP_DTYPE_F32, dx, dy, w, sh, NULL), "conv_bwd_data");
  if (op == 2)
    must(ddp_cpu_conv_bwd_weights(be, DDP_DTYPE_F32, dw, dy, x, sh, 0, NULL), "conv_bwd_weights");
}

static double max_rel_diff(const float *a, const float *ref, size_t n) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < n; ++i) {
    diff = fmax(diff, fabs((double)a[i] - ref[i]));
    scale = fmax(scale, fabs((double)ref[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: cpu_conv_winograd threads images [passes]\n");
    return 2;
  }
  const int threads = atoi(argv[1]), N = atoi(argv[2]);
  const int passes = argc > 3 ? atoi(argv[3]) : 7;
  if (threads < 1 || N < 1 || passes < 1 || passes > MAX_PASSES) {
    fprintf(stderr, "cpu_conv_winograd: threads and images >= 1, passes in 1..%d\n", MAX_PASSES);
    return 2;
  }
  ddp_backend_config_t cfg = {.device = "cpu", .threads = threads};
  ddp_backend_t *be = NULL;
  must(ddp_backend_create(&cfg, &be), "backend");
  double step[2][OPS] = {{0}};
  for (int l = 0; l < LAYERS; ++l) {
    const layer_t *L = &k_layers[l];
    const ddp_conv_shape_t sh = {
        .N = N, .H = L->H, .W = L->H, .C = L->C, .K = L->K, .R = 3, .S = 3, .stride = 1, .pad = 1};
    const size_t nx = (size_t)N * L->H * L->H * L->C, ny = (size_t)N * L->H * L->H * L->K;
    const size_t nw = (size_t)L->K * 9 * L->C;
    float *x = alloc_uniform(nx, 1), *w = alloc_uniform(nw, 2), *dy = alloc_uniform(ny, 3);
    float *out[2][OPS];
    for (int a = 0; a < 2; ++a) {
      out[a][0] = alloc_uniform(ny, 4);
      out[a][1] = alloc_uniform(nx, 5);
      out[a][2] = alloc_uniform(nw, 6);
    }
    char impl[2][OPS][96];
    for (int a = 0; a < 2; ++a) { /* a = 0: direct, 1: Winograd; builds the primitives */
      ddp_cpu_conv_set_winograd(a);
      for (int op = 0; op < OPS; ++op) {
        must(ddp_cpu_conv_describe(be, op, &sh, impl[a][op], sizeof impl[a][op]), "describe");
        run_op(be, op, &sh, x, w, out[a][0], dy, out[a][1], out[a][2]);
      }
    }
    for (int op = 0; op < OPS; ++op) {
      if (op == 1 && !L->dinp) continue;
      double ms[2][MAX_PASSES];
      for (int p = 0; p < passes; ++p)
        for (int a = 0; a < 2; ++a) {
          ddp_cpu_conv_set_winograd(a);
          const double t0 = bench_now_ms();
          run_op(be, op, &sh, x, w, out[a][0], dy, out[a][1], out[a][2]);
          ms[a][p] = bench_now_ms() - t0;
        }
      const double direct = bench_median(ms[0], passes), wino = bench_median(ms[1], passes);
      const size_t n = op == 0 ? ny : op == 1 ? nx : nw;
      step[0][op] += L->count * direct;
      step[1][op] += L->count * wino;
      printf("| %s | %d -> %d, %dx%d | %d | %s | %.2f | %.2f | %.2f | %.1e | %s |\n", L->name, L->C,
             L->K, L->H, L->H, L->count, k_op_names[op], direct, wino, direct / wino,
             max_rel_diff(out[1][op], out[0][op], n), impl[1][op]);
    }
    free(x), free(w), free(dy);
    for (int a = 0; a < 2; ++a)
      for (int op = 0; op < OPS; ++op) free(out[a][op]);
  }
  for (int op = 0; op < OPS; ++op)
    printf("| one step | | | %s | %.1f | %.1f | %.2f | | |\n", k_op_names[op], step[0][op],
           step[1][op], step[0][op] / step[1][op]);
  const double d = step[0][0] + step[0][1] + step[0][2], wn = step[1][0] + step[1][1] + step[1][2];
  printf("| one step | | | all three | %.1f | %.1f | %.2f | | |\n", d, wn, d / wn);
  ddp_cpu_conv_set_winograd(1);
  ddp_backend_destroy(be);
  return 0;
}
