/* The step arena: alignment, exhaustion with a clear error, mark/release,
 * reset, measuring mode, debug poisoning, and no backend allocations after
 * set-up (the property the step loop relies on). */
#include <math.h>
#include <stdint.h>

#include "ddptrain/backend.h"
#include "check_util.h"
#include "core/arena.h"

static ddp_backend_t *g_be;

static void setup(void) {
  g_be = ddp_test_cpu_backend();
}

static void teardown(void) {
  ddp_backend_destroy(g_be);
  g_be = NULL;
}

START_TEST(test_arena_slices_are_aligned_and_disjoint) {
  ddp_arena_t a;
  ck_assert_int_eq(ddp_arena_init(&a, g_be, "t", 10000), DDP_OK);
  const size_t sizes[] = {1, 255, 256, 257, 3, 1000};
  char *prev_end = NULL;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    void *p;
    ck_assert_int_eq(ddp_arena_alloc(&a, sizes[i], &p), DDP_OK);
    ck_assert_uint_eq((uintptr_t)p % DDP_ARENA_ALIGN, 0);
    if (prev_end) ck_assert((char *)p >= prev_end);
    prev_end = (char *)p + sizes[i];
  }
  ck_assert_uint_eq(a.offset, 256 * 2 + 512 + 256 + 1024 + 256);
  ddp_arena_destroy(&a);
}
END_TEST

START_TEST(test_arena_exhaustion_fails_with_sizes_in_message) {
  ddp_arena_t a;
  ck_assert_int_eq(ddp_arena_init(&a, g_be, "activations", 1 << 20), DDP_OK);
  void *p;
  ck_assert_int_eq(ddp_arena_alloc(&a, 600 << 10, &p), DDP_OK);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_arena_alloc(&a, 600 << 10, &p), DDP_ERR_OOM);
  ck_assert_int_eq(ddp_arena_alloc(&a, SIZE_MAX - 10, &p), DDP_ERR_OOM);
  char *out = ddp_test_log_stop();
  ck_assert_ptr_null(p);
  ddp_assert_contains(out, "arena 'activations': a request of 0.59 MiB does not fit");
  ddp_assert_contains(out, "--tokens-per-batch");
  /* A failed request changes nothing: the remaining space is still usable. */
  ck_assert_int_eq(ddp_arena_alloc(&a, 400 << 10, &p), DDP_OK);
  free(out);
  ddp_arena_destroy(&a);
}
END_TEST

START_TEST(test_arena_mark_release_and_reset) {
  ddp_arena_t a;
  ck_assert_int_eq(ddp_arena_init(&a, g_be, "t", 4096), DDP_OK);
  void *p, *q, *r;
  ck_assert_int_eq(ddp_arena_alloc(&a, 512, &p), DDP_OK);
  size_t mark = ddp_arena_mark(&a);
  ck_assert_int_eq(ddp_arena_alloc(&a, 1024, &q), DDP_OK);
  ddp_arena_release(&a, mark);
  ck_assert_int_eq(ddp_arena_alloc(&a, 256, &r), DDP_OK);
  ck_assert_ptr_eq(r, q); /* released space is reused */
  ck_assert_uint_eq(a.peak, 512 + 1024);
  ddp_arena_reset(&a);
  ck_assert_uint_eq(a.offset, 0);
  ck_assert_int_eq(ddp_arena_alloc(&a, 8, &r), DDP_OK);
  ck_assert_ptr_eq(r, p);
  ck_assert_uint_eq(a.peak, 512 + 1024);
  ddp_arena_destroy(&a);
}
END_TEST

START_TEST(test_arena_measure_then_exact_fit) {
  /* The measuring pass sizes the real arena; the same sequence then fits. */
  const size_t seq[] = {100, 5000, 1, 77777, 256};
  ddp_arena_t m;
  ddp_arena_init_measure(&m, "measure");
  for (size_t i = 0; i < 5; ++i) {
    void *p = (void *)1;
    ck_assert_int_eq(ddp_arena_alloc(&m, seq[i], &p), DDP_OK);
    ck_assert_ptr_null(p);
  }
  ddp_arena_t a;
  ck_assert_int_eq(ddp_arena_init(&a, g_be, "real", m.peak), DDP_OK);
  for (size_t i = 0; i < 5; ++i) {
    void *p;
    ck_assert_int_eq(ddp_arena_alloc(&a, seq[i], &p), DDP_OK);
  }
  ck_assert_uint_eq(a.offset, a.capacity);
  ddp_test_log_start();
  void *p;
  ck_assert_int_eq(ddp_arena_alloc(&a, 1, &p), DDP_ERR_OOM);
  free(ddp_test_log_stop());
  ddp_arena_destroy(&a);
  ddp_arena_destroy(&m);
}
END_TEST

START_TEST(test_arena_steps_do_not_touch_the_backend_allocator) {
  ddp_arena_t a;
  ck_assert_int_eq(ddp_arena_init(&a, g_be, "t", 1 << 16), DDP_OK);
  uint64_t allocs = g_be->alloc_calls, frees = g_be->free_calls;
  for (int step = 0; step < 100; ++step) {
    ddp_arena_reset(&a);
    for (int i = 0; i < 10; ++i) {
      void *p;
      ck_assert_int_eq(ddp_arena_alloc(&a, 1000 + 37 * (size_t)i, &p), DDP_OK);
    }
  }
  ck_assert_uint_eq(g_be->alloc_calls, allocs);
  ck_assert_uint_eq(g_be->free_calls, frees);
  ddp_arena_destroy(&a);
  ck_assert_uint_eq(g_be->free_calls, frees + 1);
  ck_assert_uint_eq(g_be->bytes_in_use, 0);
}
END_TEST

START_TEST(test_arena_debug_checks_poison_fresh_memory) {
  setenv("DDPTRAIN_DEBUG_CHECKS", "1", 1);
  ddp_arena_t a;
  ck_assert_int_eq(ddp_arena_init(&a, g_be, "t", 4096), DDP_OK);
  unsetenv("DDPTRAIN_DEBUG_CHECKS");
  float *p;
  ck_assert_int_eq(ddp_arena_alloc(&a, 100 * sizeof(float), (void **)&p), DDP_OK);
  for (int i = 0; i < 64; ++i) ck_assert(isnan(p[i])); /* host-visible on the CPU backend */
  ddp_arena_destroy(&a);
}
END_TEST

START_TEST(test_arena_rejects_null_arguments) {
  ddp_test_log_start();
  ck_assert_int_eq(ddp_arena_init(NULL, g_be, "t", 10), DDP_ERR_INVALID_ARG);
  ddp_arena_t a;
  ck_assert_int_eq(ddp_arena_init(&a, NULL, "t", 10), DDP_ERR_INVALID_ARG);
  free(ddp_test_log_stop());
}
END_TEST

static Suite *arena_suite(void) {
  Suite *s = suite_create("arena");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_arena_slices_are_aligned_and_disjoint);
  tcase_add_test(tc, test_arena_exhaustion_fails_with_sizes_in_message);
  tcase_add_test(tc, test_arena_mark_release_and_reset);
  tcase_add_test(tc, test_arena_measure_then_exact_fit);
  tcase_add_test(tc, test_arena_steps_do_not_touch_the_backend_allocator);
  tcase_add_test(tc, test_arena_debug_checks_poison_fresh_memory);
  tcase_add_test(tc, test_arena_rejects_null_arguments);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(arena_suite());
}
