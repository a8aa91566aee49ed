/* The activation arena ddptrain reserves for GPT-2 124M (L12 H12 C768,
 * vocabulary 50257 padded to 50304 as on a GPU, T 1024) in bf16, for each
 * combination of the execution options (ddptrain/gpt.h): matrix or flash
 * attention, logits kept whole or the fused classifier's chunks, and
 * --recompute. The arena is laid out by the same code on every backend, so
 * building the model on the CPU backend gives the GPU's figure without a
 * GPU (parameters, gradients, optimizer state and the compute copy are
 * printed separately). Usage: gpt_memory_plan [tokens per micro-batch] */
#include <stdio.h>
#include <stdlib.h>

#include "ddptrain/backend.h"
#include "model/gpt.h"

int main(int argc, char **argv) {
  const long long tokens = argc > 1 ? atoll(argv[1]) : 8192;
  const ddp_backend_config_t bc = {.device = "cpu", .threads = 1};
  ddp_backend_t *be = NULL;
  if (ddp_backend_create(&bc, &be) != DDP_OK) return 1;
  const ddp_gpt_config_t cfg = {.n_layer = 12,
                                .n_head = 12,
                                .n_embd = 768,
                                .max_seq_len = 1024,
                                .vocab = 50257,
                                .vocab_pad = 128};
  ddp_gpt_t *m = NULL;
  if (ddp_gpt_create(&m, be, &cfg, tokens) != DDP_OK ||
      ddp_gpt_set_precision(m, DDP_DTYPE_BF16) != DDP_OK)
    return 1;
  const double mib = 1048576.0, n = (double)ddp_gpt_num_params(m);
  printf("GPT-2 124M, bf16, %lld tokens per micro-batch (%lld x 1024)\n", tokens, tokens / 1024);
  printf(
      "fixed: fp32 weights %.0f MiB, fp32 gradients %.0f MiB, AdamW state %.0f MiB, bf16 "
      "compute copy %.0f MiB\n\n",
      4 * n / mib, 4 * n / mib, 8 * n / mib, 2 * n / mib);
  printf("| attention | classifier | recompute | activation arena MiB |\n|---|---|---|---|\n");
  for (int att = 0; att < 2; ++att)
    for (int fused = 0; fused < 2; ++fused)
      for (int rc = 0; rc < 2; ++rc) {
        const ddp_gpt_exec_t x = {
            .recompute = rc,
            .fused_classifier = fused,
            .attention = att ? DDP_GPT_ATTENTION_FLASH : DDP_GPT_ATTENTION_MATRIX};
        if (ddp_gpt_set_exec(m, &x) != DDP_OK) return 1;
        printf("| %s | %s | %s | %.0f |\n", att ? "flash" : "matrix",
               fused ? "fused, chunks of logits" : "whole logits", rc ? "on" : "off",
               ddp_gpt_activation_bytes(m) / mib);
      }
  ddp_gpt_destroy(m);
  ddp_backend_destroy(be);
  return 0;
}
