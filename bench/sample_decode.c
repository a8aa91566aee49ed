/* KV-cache decoding against recomputing the prefix (bench/sample_decode.sh):
 * a random GPT of L layers, C channels (heads of 64), context T, byte
 * vocabulary, on the CPU backend with the given sgemm threads. Generates T
 * tokens of one sequence (a one-token prefill, then T - 1 decoder steps)
 * and, for comparison, the logits of the same T positions by an eval
 * forward over the whole prefix at each length (what generation costs
 * without a cache). Prints one markdown row: median seconds of each over
 * `passes` runs, tokens per second and the ratio. */
#include <stdio.h>
#include <stdlib.h>

#include "../bench/bench_timing.h"
#include "ddptrain/backend.h"
#include "model/gpt.h"
#include "model/gpt_decode.h"

#define MAX_PASSES 32

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s THREADS L C T PASSES\n", argv[0]);
    return 2;
  }
  const int threads = atoi(argv[1]), L = atoi(argv[2]), C = atoi(argv[3]), T = atoi(argv[4]);
  int passes = atoi(argv[5]);
  if (passes < 1 || passes > MAX_PASSES) passes = 3;
  ddp_backend_config_t bc = {.device = "cpu", .threads = threads};
  ddp_backend_t *be = NULL;
  const ddp_gpt_config_t cfg = {
      .n_layer = L, .n_head = C / 64 > 0 ? C / 64 : 1, .n_embd = C, .max_seq_len = T, .vocab = 257};
  ddp_gpt_t *m = NULL;
  ddp_gpt_decoder_t *d = NULL;
  int32_t *tok = malloc(sizeof(int32_t) * (size_t)T);
  float *logits = malloc(sizeof(float) * 257 * (size_t)T);
  if (!tok || !logits || ddp_backend_create(&bc, &be) != DDP_OK ||
      ddp_gpt_create(&m, be, &cfg, T) != DDP_OK || ddp_gpt_init_weights(m, 1) != DDP_OK ||
      ddp_gpt_decoder_create(&d, m, be, 1) != DDP_OK) {
    fprintf(stderr, "set-up failed\n");
    return 1;
  }
  for (int i = 0; i < T; ++i) tok[i] = (i * 7) % 257;
  double kv[MAX_PASSES], full[MAX_PASSES];
  for (int p = 0; p < passes; ++p) {
    double t0 = bench_now_ms();
    int bad = ddp_gpt_decoder_prefill(d, tok, 1, logits) != DDP_OK;
    for (int t = 1; t < T && !bad; ++t) bad = ddp_gpt_decoder_step(d, tok + t, logits) != DDP_OK;
    kv[p] = (bench_now_ms() - t0) / 1e3;
    t0 = bench_now_ms();
    for (int t = 1; t <= T && !bad; ++t)
      bad = ddp_gpt_forward(m, tok, NULL, 1, t, 0, 0.0f) != DDP_OK ||
            ddp_gpt_copy_logits_to_host(m, logits, t) != DDP_OK;
    full[p] = (bench_now_ms() - t0) / 1e3;
    if (bad) {
      fprintf(stderr, "a decode or forward call failed\n");
      return 1;
    }
  }
  const double k = bench_median(kv, passes), f = bench_median(full, passes);
  printf("| %d | %d | %d | %d | %.3f | %.0f | %.3f | %.0f | %.1f |\n", threads, L, C, T, k, T / k,
         f, T / f, f / k);
  ddp_gpt_decoder_destroy(d);
  ddp_gpt_destroy(m);
  ddp_backend_destroy(be);
  free(tok);
  free(logits);
  return 0;
}
