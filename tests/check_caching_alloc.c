/* The caching allocator over a counting fake raw allocator (malloc with a
 * byte budget): reuse without raw calls after warm-up, rounding and segment
 * sizes, best fit, splitting and merging, peak tracking, trim, the
 * out-of-memory retry (recovered and not), other raw errors, and no leaks
 * (every raw block is freed by destroy; ASan checks the host side). */
#include <stdint.h>

#include "backend/caching_alloc.h"
#include "check_util.h"

/* ---- the fake raw allocator ---------------------------------------------- */

typedef struct fake_raw {
  uint64_t allocs, frees, failures;
  size_t live_bytes, budget; /* budget 0 = unlimited */
  ddp_status_t fail_with;    /* when not DDP_OK, every alloc returns it */
} fake_raw_t;

static ddp_status_t fake_alloc(void *ctx, size_t bytes, void **ptr) {
  fake_raw_t *f = ctx;
  f->allocs++;
  *ptr = NULL;
  if (f->fail_with != DDP_OK) return f->failures++, f->fail_with;
  if (f->budget && f->live_bytes + bytes > f->budget) return f->failures++, DDP_ERR_OOM;
  /* Header with the size so free can keep live_bytes exact. */
  size_t *p = malloc(bytes + 16);
  if (!p) return DDP_ERR_OOM;
  p[0] = bytes;
  f->live_bytes += bytes;
  *ptr = (char *)p + 16;
  return DDP_OK;
}

static void fake_free(void *ctx, void *ptr) {
  fake_raw_t *f = ctx;
  size_t *p = (size_t *)((char *)ptr - 16);
  f->frees++;
  f->live_bytes -= p[0];
  free(p);
}

static fake_raw_t g_raw;
static ddp_caching_alloc_t *g_ca;

static void setup(void) {
  g_raw = (fake_raw_t){0};
  const ddp_raw_alloc_t raw = {.alloc = fake_alloc, .free = fake_free, .ctx = &g_raw};
  ck_assert_int_eq(ddp_caching_alloc_create(&raw, &g_ca), DDP_OK);
}

static void teardown(void) {
  ddp_caching_alloc_destroy(g_ca);
  g_ca = NULL;
  /* destroy returns everything, live blocks included */
  ck_assert_uint_eq(g_raw.allocs - g_raw.failures, g_raw.frees);
  ck_assert_uint_eq(g_raw.live_bytes, 0);
}

static ddp_caching_alloc_stats_t stats(void) {
  ddp_caching_alloc_stats_t s;
  ddp_caching_alloc_get_stats(g_ca, &s);
  return s;
}

static void *take(size_t bytes) {
  void *p = NULL;
  ck_assert_int_eq(ddp_caching_alloc_malloc(g_ca, bytes, &p), DDP_OK);
  ck_assert_ptr_nonnull(p);
  ck_assert_uint_eq((uintptr_t)p % 16, 0);
  return p;
}

#define MIB ((size_t)1 << 20)

/* ---- policy --------------------------------------------------------------- */

START_TEST(test_caching_alloc_rounding_and_segment_sizes) {
  ck_assert_uint_eq(ddp_caching_alloc_round(0), 0);
  ck_assert_uint_eq(ddp_caching_alloc_round(1), 512);
  ck_assert_uint_eq(ddp_caching_alloc_round(512), 512);
  ck_assert_uint_eq(ddp_caching_alloc_round(513), 1024);
  ck_assert_uint_eq(ddp_caching_alloc_round(SIZE_MAX), 0);
  ck_assert_uint_eq(ddp_caching_alloc_segment_size(1), 2 * MIB);
  ck_assert_uint_eq(ddp_caching_alloc_segment_size(MIB), 2 * MIB);
  ck_assert_uint_eq(ddp_caching_alloc_segment_size(MIB + 1), 2 * MIB);
  ck_assert_uint_eq(ddp_caching_alloc_segment_size(2 * MIB + 1), 4 * MIB);
  ck_assert_uint_eq(ddp_caching_alloc_segment_size(7 * MIB), 8 * MIB);
  ck_assert_uint_eq(ddp_caching_alloc_segment_size(SIZE_MAX - 100), 0);
}
END_TEST

START_TEST(test_caching_alloc_zero_bytes_is_null_and_free_null_is_noop) {
  void *p = &p;
  ck_assert_int_eq(ddp_caching_alloc_malloc(g_ca, 0, &p), DDP_OK);
  ck_assert_ptr_null(p);
  ck_assert_uint_eq(ddp_caching_alloc_free(g_ca, NULL), 0);
  int not_ours;
  ck_assert_uint_eq(ddp_caching_alloc_free(g_ca, &not_ours), 0);
  ck_assert_uint_eq(g_raw.allocs, 0);
  ck_assert_uint_eq(stats().live_blocks, 0);
}
END_TEST

/* Many small requests share one 2 MiB segment, back to back. */
START_TEST(test_caching_alloc_small_requests_share_a_segment) {
  char *a = take(100), *b = take(1000), *c = take(512);
  ck_assert_uint_eq(g_raw.allocs, 1);
  ck_assert_ptr_eq(b, a + 512);
  ck_assert_ptr_eq(c, b + 1024);
  const ddp_caching_alloc_stats_t s = stats();
  ck_assert_uint_eq(s.bytes_in_use, 512 + 1024 + 512);
  ck_assert_uint_eq(s.bytes_reserved, 2 * MIB);
  ck_assert_uint_eq(s.live_blocks, 3);
  ck_assert_uint_eq(ddp_caching_alloc_free(g_ca, b), 1000);
  ck_assert_uint_eq(ddp_caching_alloc_free(g_ca, a), 100);
  ck_assert_uint_eq(ddp_caching_alloc_free(g_ca, c), 512);
  ck_assert_uint_eq(stats().bytes_in_use, 0);
  ck_assert_uint_eq(stats().bytes_reserved, 2 * MIB); /* cached, not returned */
  ck_assert_uint_eq(g_raw.frees, 0);
}
END_TEST

/* The property the backend relies on: after the first cycle, the same
 * sequence of requests never reaches the raw allocator again. */
START_TEST(test_caching_alloc_steady_state_makes_no_raw_calls) {
  const size_t sizes[] = {3, 4096, 700 * 1024, 3 * MIB + 5, 64 * MIB, 17, 2 * MIB, 1};
  enum { N = sizeof sizes / sizeof sizes[0] };
  void *p[N];
  uint64_t after_warmup = 0;
  for (int cycle = 0; cycle < 6; ++cycle) {
    for (int i = 0; i < N; ++i) p[i] = take(sizes[i]);
    for (int i = 0; i < N; ++i)
      ck_assert_uint_eq(ddp_caching_alloc_free(g_ca, p[(i * 3) % N]), sizes[(i * 3) % N]);
    if (cycle == 0) after_warmup = g_raw.allocs;
  }
  ck_assert_uint_eq(g_raw.allocs, after_warmup);
  ck_assert_uint_eq(g_raw.frees, 0);
  ck_assert_uint_eq(stats().live_blocks, 0);
}
END_TEST

/* Best fit: of two cached free blocks the smaller one that fits is used. */
START_TEST(test_caching_alloc_best_fit_picks_the_smallest_block_that_fits) {
  void *big = take(8 * MIB), *mid = take(4 * MIB);
  ddp_caching_alloc_free(g_ca, big);
  ddp_caching_alloc_free(g_ca, mid);
  const uint64_t raw = g_raw.allocs;
  ck_assert_ptr_eq(take(3 * MIB + 1), mid);
  ck_assert_ptr_eq(take(5 * MIB), big);
  ck_assert_uint_eq(g_raw.allocs, raw);
}
END_TEST

/* Large segments are split only when the rest is more than 1 MiB; a small
 * rest stays with the block (and counts as in use). */
START_TEST(test_caching_alloc_large_split_threshold) {
  void *a = take(8 * MIB);
  ddp_caching_alloc_free(g_ca, a);
  /* rest 1 MiB: not split, the whole 8 MiB block is handed out */
  void *b = take(7 * MIB);
  ck_assert_ptr_eq(b, a);
  ck_assert_uint_eq(stats().bytes_in_use, 8 * MIB);
  ddp_caching_alloc_free(g_ca, b);
  /* rest 3 MiB: split; the rest serves the next request without a raw call */
  char *c = take(5 * MIB);
  ck_assert_uint_eq(stats().bytes_in_use, 5 * MIB);
  char *d = take(3 * MIB);
  ck_assert_ptr_eq(d, c + 5 * MIB);
  ck_assert_uint_eq(g_raw.allocs, 1);
}
END_TEST

/* Freed neighbours merge back into one block that serves a larger request. */
START_TEST(test_caching_alloc_free_merges_neighbours) {
  char *a = take(512 * 1024), *b = take(512 * 1024), *c = take(512 * 1024);
  ck_assert_uint_eq(g_raw.allocs, 1);
  ddp_caching_alloc_free(g_ca, a);
  ddp_caching_alloc_free(g_ca, c);
  ddp_caching_alloc_free(g_ca, b); /* merges with both sides */
  /* one 2 MiB free block again: a 2 MiB request fits without a raw call */
  ck_assert_ptr_eq(take(2 * MIB), a);
  ck_assert_uint_eq(g_raw.allocs, 1);
}
END_TEST

START_TEST(test_caching_alloc_peak_tracks_the_high_water_mark) {
  void *a = take(4 * MIB), *b = take(6 * MIB);
  ddp_caching_alloc_free(g_ca, a);
  void *c = take(1000);
  ddp_caching_alloc_stats_t s = stats();
  ck_assert_uint_eq(s.peak_bytes_in_use, 10 * MIB);
  ck_assert_uint_eq(s.bytes_in_use, 6 * MIB + 1024);
  /* the 1000 bytes came out of a's cached block: nothing new was reserved */
  ck_assert_uint_eq(s.peak_bytes_reserved, 10 * MIB);
  ck_assert_ptr_eq(c, a);
  ddp_caching_alloc_free(g_ca, b);
  ddp_caching_alloc_free(g_ca, c);
  s = stats();
  ck_assert_uint_eq(s.bytes_in_use, 0);
  ck_assert_uint_eq(s.peak_bytes_in_use, 10 * MIB);
}
END_TEST

/* trim returns only wholly free segments. */
START_TEST(test_caching_alloc_trim_releases_only_free_segments) {
  void *a = take(4 * MIB), *b = take(100), *c = take(200);
  ddp_caching_alloc_free(g_ca, a);
  ddp_caching_alloc_free(g_ca, b); /* its segment still holds c */
  ck_assert_uint_eq(ddp_caching_alloc_trim(g_ca), 4 * MIB);
  ck_assert_uint_eq(g_raw.frees, 1);
  ck_assert_uint_eq(stats().bytes_reserved, 2 * MIB);
  ddp_caching_alloc_free(g_ca, c);
  ck_assert_uint_eq(ddp_caching_alloc_trim(g_ca), 2 * MIB);
  ck_assert_uint_eq(stats().bytes_reserved, 0);
  ck_assert_uint_eq(ddp_caching_alloc_trim(g_ca), 0);
  ck_assert_uint_eq(g_raw.live_bytes, 0);
}
END_TEST

/* A raw OOM with cached segments: the cache is trimmed and the request is
 * retried once, and succeeds. */
START_TEST(test_caching_alloc_oom_trims_cache_and_retries) {
  g_raw.budget = 10 * MIB;
  void *a = take(6 * MIB);
  ddp_caching_alloc_free(g_ca, a); /* 6 MiB cached */
  void *b = take(8 * MIB);         /* 6 + 8 > 10: OOM, trim, retry */
  ck_assert_ptr_nonnull(b);
  const ddp_caching_alloc_stats_t s = stats();
  ck_assert_uint_eq(s.oom_retries, 1);
  ck_assert_uint_eq(s.raw_alloc_calls, 3);
  ck_assert_uint_eq(g_raw.allocs, 3);
  ck_assert_uint_eq(g_raw.failures, 1);
  ck_assert_uint_eq(g_raw.frees, 1);
  ck_assert_uint_eq(s.bytes_reserved, 8 * MIB);
}
END_TEST

/* A raw OOM with nothing cached fails at once (no pointless retry), silently
 * (the backend writes the message), and leaves everything as it was. */
START_TEST(test_caching_alloc_oom_without_cache_fails_cleanly) {
  g_raw.budget = 4 * MIB;
  void *a = take(3 * MIB);
  const ddp_caching_alloc_stats_t before = stats();
  void *p = &p;
  ddp_test_log_start();
  ck_assert_int_eq(ddp_caching_alloc_malloc(g_ca, 2 * MIB, &p), DDP_ERR_OOM);
  char *log = ddp_test_log_stop();
  ck_assert_str_eq(log, "");
  free(log);
  ck_assert_ptr_null(p);
  const ddp_caching_alloc_stats_t after = stats();
  ck_assert_uint_eq(after.raw_alloc_calls, before.raw_alloc_calls + 1);
  ck_assert_uint_eq(after.oom_retries, 0);
  ck_assert_uint_eq(after.bytes_in_use, before.bytes_in_use);
  ck_assert_uint_eq(after.bytes_reserved, before.bytes_reserved);
  /* still usable */
  ddp_caching_alloc_free(g_ca, a);
  ck_assert_ptr_eq(take(2 * MIB), a);
}
END_TEST

/* The retry also fails (cache trimmed, still too little): OOM, nothing held. */
START_TEST(test_caching_alloc_oom_retry_that_fails) {
  g_raw.budget = 5 * MIB;
  void *a = take(4 * MIB);
  ddp_caching_alloc_free(g_ca, a);
  void *p = &p;
  ck_assert_int_eq(ddp_caching_alloc_malloc(g_ca, 6 * MIB, &p), DDP_ERR_OOM);
  ck_assert_ptr_null(p);
  ck_assert_uint_eq(g_raw.failures, 2);
  ck_assert_uint_eq(stats().bytes_reserved, 0);
  ck_assert_uint_eq(g_raw.live_bytes, 0);
}
END_TEST

/* A request too large to round is OOM without reaching the raw allocator. */
START_TEST(test_caching_alloc_huge_request_is_oom) {
  void *p = &p;
  ck_assert_int_eq(ddp_caching_alloc_malloc(g_ca, SIZE_MAX - 3, &p), DDP_ERR_OOM);
  ck_assert_ptr_null(p);
  ck_assert_uint_eq(g_raw.allocs, 0);
}
END_TEST

/* Errors other than OOM pass through unchanged, with no retry. */
START_TEST(test_caching_alloc_other_raw_errors_pass_through) {
  void *a = take(4 * MIB);
  ddp_caching_alloc_free(g_ca, a);
  g_raw.fail_with = DDP_ERR_CUDA;
  void *p = &p;
  ck_assert_int_eq(ddp_caching_alloc_malloc(g_ca, 8 * MIB, &p), DDP_ERR_CUDA);
  ck_assert_ptr_null(p);
  ck_assert_uint_eq(g_raw.failures, 1);
  ck_assert_uint_eq(stats().bytes_reserved, 4 * MIB); /* the cache was kept */
  g_raw.fail_with = DDP_OK;
}
END_TEST

/* Destroy with blocks still live returns every raw segment (teardown checks
 * that the fake holds nothing). */
START_TEST(test_caching_alloc_destroy_releases_live_blocks) {
  for (int i = 0; i < 200; ++i) take((size_t)(i * 7919) % (3 * MIB) + 1);
  ck_assert_uint_eq(stats().live_blocks, 200);
}
END_TEST

/* Random alloc/free with distinct sizes: live blocks never overlap, free
 * returns each block's requested size, and the counters add up. */
START_TEST(test_caching_alloc_random_workload_is_consistent) {
  enum { N = 400 };
  char *p[N] = {NULL};
  size_t sz[N] = {0};
  uint64_t x = 88172645463325252ull;
  size_t rounded_live = 0;
  for (int it = 0; it < 20000; ++it) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const int i = (int)(x % N);
    if (p[i]) {
      expect_eq(ddp_caching_alloc_free(g_ca, p[i]), sz[i]);
      rounded_live -= ddp_caching_alloc_round(sz[i]);
      p[i] = NULL;
      continue;
    }
    sz[i] =
        (x >> 20) % 5 == 0 ? (size_t)((x >> 24) % (6 * MIB)) + 1 : (size_t)((x >> 24) % 9000) + 1;
    expect(ddp_caching_alloc_malloc(g_ca, sz[i], (void **)&p[i]) == DDP_OK);
    memset(p[i], i & 0xff, sz[i] < 64 ? sz[i] : 64);
    memset(p[i] + sz[i] - (sz[i] < 64 ? sz[i] : 64), i & 0xff, sz[i] < 64 ? sz[i] : 64);
    rounded_live += ddp_caching_alloc_round(sz[i]);
  }
  /* every live block still holds its own bytes (nobody else wrote there) */
  for (int i = 0; i < N; ++i)
    if (p[i])
      expect((unsigned char)p[i][0] == (i & 0xff) && (unsigned char)p[i][sz[i] - 1] == (i & 0xff));
  const ddp_caching_alloc_stats_t s = stats();
  expect(s.bytes_in_use >= rounded_live); /* unsplit large rests count too */
  expect(s.bytes_in_use <= s.bytes_reserved);
  expect(s.peak_bytes_in_use <= s.peak_bytes_reserved);
  expect_eq(s.raw_alloc_calls, g_raw.allocs);
  expect_eq(s.raw_free_calls, g_raw.frees);
}
END_TEST

START_TEST(test_caching_alloc_create_rejects_missing_raw_pair) {
  ddp_caching_alloc_t *ca = (ddp_caching_alloc_t *)&ca;
  const ddp_raw_alloc_t half = {.alloc = fake_alloc};
  ddp_test_log_start();
  ck_assert_int_eq(ddp_caching_alloc_create(&half, &ca), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_caching_alloc_create(NULL, &ca), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "no raw allocate/free pair");
  free(log);
  ck_assert_ptr_null(ca);
}
END_TEST

static Suite *caching_alloc_suite(void) {
  Suite *s = suite_create("caching_alloc");
  TCase *tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_caching_alloc_rounding_and_segment_sizes);
  tcase_add_test(tc, test_caching_alloc_zero_bytes_is_null_and_free_null_is_noop);
  tcase_add_test(tc, test_caching_alloc_small_requests_share_a_segment);
  tcase_add_test(tc, test_caching_alloc_steady_state_makes_no_raw_calls);
  tcase_add_test(tc, test_caching_alloc_best_fit_picks_the_smallest_block_that_fits);
  tcase_add_test(tc, test_caching_alloc_large_split_threshold);
  tcase_add_test(tc, test_caching_alloc_free_merges_neighbours);
  tcase_add_test(tc, test_caching_alloc_peak_tracks_the_high_water_mark);
  tcase_add_test(tc, test_caching_alloc_trim_releases_only_free_segments);
  tcase_add_test(tc, test_caching_alloc_oom_trims_cache_and_retries);
  tcase_add_test(tc, test_caching_alloc_oom_without_cache_fails_cleanly);
  tcase_add_test(tc, test_caching_alloc_oom_retry_that_fails);
  tcase_add_test(tc, test_caching_alloc_huge_request_is_oom);
  tcase_add_test(tc, test_caching_alloc_other_raw_errors_pass_through);
  tcase_add_test(tc, test_caching_alloc_destroy_releases_live_blocks);
  tcase_add_test(tc, test_caching_alloc_random_workload_is_consistent);
  tcase_add_test(tc, test_caching_alloc_create_rejects_missing_raw_pair);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(caching_alloc_suite());
}
