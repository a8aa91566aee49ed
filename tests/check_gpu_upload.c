/* GPU suite for the input path: pinned loader buffers and the model's token
 * staging (src/model/gpt_input.c) on the CUDA backend.
 *
 * - ddp_batch_init_host on the CUDA backend gives page-locked memory
 *   (cudaPointerGetAttributes says so), freed through the backend.
 * - Staging while the compute stream is busy (a queue of large GEMMs): each
 *   micro-step's tokens arrive intact in their slot, as the compute stream
 *   sees them (read back on the compute stream after the wait), over 40
 *   puts alternating the two slots, with the host overwriting its pinned
 *   buffer right after ddp_token_stager_wait_copied, as the loader does.
 * - A whole model on the GPU whose host token arrays are overwritten as soon
 *   as forward returns still computes the loss of the original tokens.
 *
 * Exit 77 (SKIP) without a usable CUDA device. In process (CK_NOFORK). */
#include <config.h>

#include <check.h>
#include <math.h>
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/data.h"
#include "gpu_twin.h"
#include "model/gpt.h"
#include "model/gpt_input.h"

START_TEST(test_gpu_batch_buffers_are_pinned) {
  ddp_batch_t b;
  ck_assert_int_eq(ddp_batch_init_host(&b, twin_gpu, 4096, 16), DDP_OK);
  struct cudaPointerAttributes at;
  ck_assert_int_eq(cudaPointerGetAttributes(&at, b.inputs), cudaSuccess);
  ck_assert_int_eq(at.type, cudaMemoryTypeHost);
  ck_assert_int_eq(cudaPointerGetAttributes(&at, b.targets), cudaSuccess);
  ck_assert_int_eq(at.type, cudaMemoryTypeHost);
  ddp_batch_destroy(&b);
}
END_TEST

/* Enqueues ~50 ms of GEMMs on the compute stream. */
static void keep_compute_busy(float *a, float *c, int n) {
  ddp_gemm_t g = ddp_gemm_packed_f32(n, n, n, a, a, c);
  for (int i = 0; i < 20; ++i) ck_assert_int_eq(ddp_backend_gemm(twin_gpu, &g, NULL), DDP_OK);
}

START_TEST(test_gpu_staged_tokens_arrive_under_load) {
  enum { N = 3000, GEMM_N = 2048, PUTS = 40 };
  ddp_token_stager_t st;
  ck_assert_int_eq(ddp_token_stager_init(&st, twin_gpu, N), DDP_OK);
  ddp_batch_t b;
  ck_assert_int_eq(ddp_batch_init_host(&b, twin_gpu, N, 4), DDP_OK);
  float *a = twin_dev_alloc(twin_gpu, sizeof(float) * GEMM_N * GEMM_N);
  float *c = twin_dev_alloc(twin_gpu, sizeof(float) * GEMM_N * GEMM_N);
  ck_assert_int_eq(
      twin_gpu->ops->fill(twin_gpu, a, DDP_DTYPE_F32, 0.001f, (size_t)GEMM_N * GEMM_N, NULL),
      DDP_OK);
  int32_t *seen_in = malloc(PUTS * N * sizeof *seen_in),
          *seen_tg = malloc(PUTS * N * sizeof *seen_tg);
  int32_t *d_in = NULL, *d_tg = NULL;
  for (int p = 0; p < PUTS; ++p) {
    if (p % 8 == 0) keep_compute_busy(a, c, GEMM_N);
    for (int i = 0; i < N; ++i) b.inputs[i] = p * 100000 + i, b.targets[i] = -(p * 100000 + i);
    ck_assert_int_eq(ddp_token_stager_put(&st, b.inputs, b.targets, N, &d_in, &d_tg), DDP_OK);
    /* what the compute stream sees, read on the compute stream */
    ck_assert_int_eq(ddp_backend_copy(twin_gpu, seen_in + (size_t)p * N, d_in, N * sizeof(int32_t),
                                      DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
                     DDP_OK);
    ck_assert_int_eq(ddp_backend_copy(twin_gpu, seen_tg + (size_t)p * N, d_tg, N * sizeof(int32_t),
                                      DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
                     DDP_OK);
    ck_assert_int_eq(ddp_token_stager_release(&st), DDP_OK);
    ck_assert_int_eq(ddp_token_stager_wait_copied(&st), DDP_OK);
    memset(b.inputs, 0xAB, N * sizeof(int32_t)); /* the loader refills at once */
    memset(b.targets, 0xCD, N * sizeof(int32_t));
  }
  ck_assert_int_eq(ddp_backend_sync(twin_gpu, NULL), DDP_OK);
  for (int p = 0; p < PUTS; ++p)
    for (int i = 0; i < N; ++i) {
      const int32_t want = p * 100000 + i;
      if (seen_in[(size_t)p * N + i] != want || seen_tg[(size_t)p * N + i] != -want)
        ck_abort_msg("put %d, token %d: saw %d / %d, want %d / %d", p, i,
                     seen_in[(size_t)p * N + i], seen_tg[(size_t)p * N + i], want, -want);
    }
  free(seen_in), free(seen_tg);
  ddp_backend_free(twin_gpu, a);
  ddp_backend_free(twin_gpu, c);
  ddp_batch_destroy(&b);
  ddp_token_stager_destroy(&st);
}
END_TEST

START_TEST(test_gpu_model_reads_tokens_before_the_host_reuses_them) {
  const ddp_gpt_config_t cfg = {
      .n_layer = 2, .n_head = 2, .n_embd = 64, .max_seq_len = 64, .vocab = 97};
  enum { B = 4, T = 64 };
  ddp_gpt_t *m = NULL;
  ck_assert_int_eq(ddp_gpt_create(&m, twin_gpu, &cfg, B * T), DDP_OK);
  ck_assert_int_eq(ddp_gpt_init_weights(m, 3), DDP_OK);
  int32_t in[B * T], tg[B * T];
  for (int i = 0; i < B * T; ++i) in[i] = (i * 13 + 5) % 97, tg[i] = (i * 7 + 1) % 97;
  /* the reference: host arrays left alone until the device is idle */
  double ref = 0.0, got = 0.0;
  ck_assert_int_eq(ddp_gpt_forward(m, in, tg, B, T, 1, 1.0f), DDP_OK);
  ck_assert_int_eq(ddp_gpt_backward(m, 0, 0), DDP_OK);
  ck_assert_int_eq(ddp_backend_sync(twin_gpu, NULL), DDP_OK);
  ck_assert_int_eq(ddp_gpt_take_loss(m, &ref), DDP_OK);
  for (int rep = 0; rep < 5; ++rep) {
    int32_t in2[B * T], tg2[B * T];
    memcpy(in2, in, sizeof in);
    memcpy(tg2, tg, sizeof tg);
    ck_assert_int_eq(ddp_gpt_forward(m, in2, tg2, B, T, 1, 1.0f), DDP_OK);
    memset(in2, 0, sizeof in2); /* reused at once: the copy must be done */
    memset(tg2, 0, sizeof tg2);
    ck_assert_int_eq(ddp_gpt_backward(m, 0, 0), DDP_OK);
    ck_assert_int_eq(ddp_gpt_take_loss(m, &got), DDP_OK);
    /* the same computation on the same tokens: the same bits */
    ck_assert_msg(got == ref, "rep %d: loss %.9g, want %.9g", rep, got, ref);
  }
  ddp_gpt_destroy(m);
}
END_TEST

int main(void) {
  twin_start(); /* exits 77 without a usable CUDA device */
  Suite *s = suite_create("gpu_upload");
  TCase *tc = tcase_create("input");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_gpu_batch_buffers_are_pinned);
  tcase_add_test(tc, test_gpu_staged_tokens_arrive_under_load);
  tcase_add_test(tc, test_gpu_model_reads_tokens_before_the_host_reuses_them);
  suite_add_tcase(s, tc);
  return twin_run_suite(s);
}
