/* CPU flash attention (nn.h flash_attention_fwd/bwd) against the matrix
 * attention (attention_fwd/bwd) on the CPU backend: milliseconds per
 * forward + backward and the memory each keeps between them or needs as
 * scratch, fp32.
 *
 * Saved/scratch memory per call: matrix attention keeps att (B,NH,T,T) for
 * the backward and takes a (B,NH,T,T) scratch by contract; flash keeps lse
 * (B,NH,T) and takes a (B,NH,T) scratch. Both read qkv, out and dout, which
 * the model holds anyway. Passes of the two ops interleave (the machine may
 * be shared: load comes in bursts) and the median over passes is reported.
 * Usage (see bench/flash_attention_cpu.sh):
 *   flash_attention_cpu threads B T C NH [passes] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ddptrain/backend.h"
#include "ddptrain/nn.h"
#include "ddptrain/rng.h"

#include "bench_timing.h"

enum { MAX_PASSES = 64 };

static float *alloc_f(size_t n) {
  float *p = malloc(n * sizeof *p);
  if (!p) {
    fprintf(stderr, "cannot allocate %zu floats\n", n);
    exit(1);
  }
  return p;
}

int main(int argc, char **argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s threads B T C NH [passes]\n", argv[0]);
    return 2;
  }
  const int threads = atoi(argv[1]), B = atoi(argv[2]), T = atoi(argv[3]), C = atoi(argv[4]);
  const int NH = atoi(argv[5]);
  int passes = argc > 6 ? atoi(argv[6]) : 9;
  if (passes < 1) passes = 1;
  if (passes > MAX_PASSES) passes = MAX_PASSES;
  ddp_backend_config_t cfg = {.device = "cpu", .threads = threads};
  ddp_backend_t *be = NULL;
  if (ddp_backend_create(&cfg, &be) != DDP_OK) return 1;
  const ddp_nn_ops_t *nn = &ddp_nn_cpu_ops;
  const size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nr = (size_t)B * NH * T;
  const size_t ntt = nr * (size_t)T;
  float *qkv = alloc_f(nq), *dout = alloc_f(no), *out = alloc_f(no), *dqkv = alloc_f(nq);
  float *att = alloc_f(ntt), *scratch = alloc_f(ntt), *lse = alloc_f(nr), *dsum = alloc_f(nr);
  ddp_rng_t rng;
  ddp_rng_init(&rng, 1, 2);
  ddp_rng_fill_normal(&rng, 0, 0.0f, 1.0f, qkv, nq);
  ddp_rng_fill_normal(&rng, nq, 0.0f, 1.0f, dout, no);
  memset(att, 0, ntt * sizeof *att); /* touch the pages before timing */
  memset(scratch, 0, ntt * sizeof *scratch);
  double tm[MAX_PASSES], tf[MAX_PASSES];
  for (int p = -1; p < passes; ++p) { /* pass -1 warms up */
    double t0 = bench_now_ms();
    if (nn->attention_fwd(be, DDP_DTYPE_F32, out, att, qkv, B, T, C, NH, NULL) != DDP_OK ||
        nn->attention_bwd(be, DDP_DTYPE_F32, dqkv, scratch, dout, qkv, att, B, T, C, NH, NULL) !=
            DDP_OK)
      return 1;
    const double t1 = bench_now_ms();
    if (nn->flash_attention_fwd(be, DDP_DTYPE_F32, out, lse, qkv, NULL, B, T, C, NH, NULL) !=
            DDP_OK ||
        nn->flash_attention_bwd(be, DDP_DTYPE_F32, dqkv, dsum, dout, qkv, out, lse, NULL, B, T, C,
                                NH, NULL) != DDP_OK)
      return 1;
    const double t2 = bench_now_ms();
    if (p >= 0) tm[p] = t1 - t0, tf[p] = t2 - t1;
  }
  const double mm = bench_median(tm, passes), mf = bench_median(tf, passes);
  const double mib = 1.0 / 1048576.0;
  printf("| %d | %d | %d | %d | %d | %d | %.1f | %.1f | %.2f | %.1f | %.2f |\n", threads, B, T, C,
         NH, B * T, mm, mf, mm / mf, 2.0 * (double)ntt * sizeof(float) * mib,
         2.0 * (double)nr * sizeof(float) * mib);
  free(qkv), free(dout), free(out), free(dqkv), free(att), free(scratch), free(lse), free(dsum);
  ddp_backend_destroy(be);
  return 0;
}
