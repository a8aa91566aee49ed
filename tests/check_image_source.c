/* Images as records (data/image_source.h), the built-in image set
 * (data/builtin_images.h) and the sampler's dropped remainder
 * (data/sampler.h):
 *  - the augmented fill against a direct reference (zero padding, crop at
 *    the drawn offsets, flip, then normalisation) on a small image;
 *  - padding is zero before normalisation: (0 - mean) / std;
 *  - the normalisation statistics against a direct computation;
 *  - the same (seed, epoch, item) gives the same pixels whatever the batch
 *    composition, its order or the threads; another epoch draws anew;
 *  - the built-in set: classes balanced, held out (no image in both
 *    splits), a pure function of the seed;
 *  - the sampler with drop_remainder: full micro-batches, equal counts,
 *    the dropped count, W x A = 1 x WA, and its refusals. */
#include <math.h>
#include <stdint.h>
#include <unistd.h>

#include "check_util.h"
#include "core/hash.h"
#include "data/builtin_images.h"
#include "data/image_source.h"
#include "data/sampler.h"

enum { H = 5, W = 6, CMAX = 4, NIMG = 7 };
static char g_dir[64], g_path[96];
/* channels of the shard under test: 2, and 1 .. 4 in the loop test (the
 * fill has paths of its own for 1 and 3) */
static int C = 2;

/* A shard of NIMG small images of C channels with distinct pixels (none 0)
 * and labels i % 3. */
static void write_shard(void) {
  const ddp_image_shape_t shape = {.height = H, .width = W, .channels = C, .n_classes = 3};
  ddp_image_writer_t *w = NULL;
  ck_assert_int_eq(ddp_image_writer_open(&w, g_path, &shape), DDP_OK);
  uint8_t px[H * W * CMAX];
  for (int i = 0; i < NIMG; ++i) {
    for (int k = 0; k < H * W * C; ++k) px[k] = (uint8_t)(1 + (i * 37 + k * 7) % 250);
    ck_assert_int_eq(ddp_image_writer_add(w, px, i % 3), DDP_OK);
  }
  ck_assert_int_eq(ddp_image_writer_finish(w), DDP_OK);
}

static void dir_setup(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp_imgsrc_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
  snprintf(g_path, sizeof g_path, "%s/small.img", g_dir);
  C = 2;
  write_shard();
}

static void dir_teardown(void) {
  unlink(g_path);
  rmdir(g_dir);
}

static const float k_mean[CMAX] = {0.25f, 0.5f, 0.375f, 0.0f},
                   k_std[CMAX] = {0.5f, 0.125f, 0.25f, 1.0f};

static float normalized(int v, int c) {
  return ((float)v / 255.0f - k_mean[c]) / k_std[c];
}

/* The reference: pad with P zeros, crop H x W at (dy, dx), flip, normalise. */
static void reference(const ddp_image_source_t *s, int64_t item, int P, int dy, int dx, int flip,
                      float *out) {
  const int PH = H + 2 * P, PW = W + 2 * P;
  uint8_t padded[(H + 16) * (W + 16) * CMAX];
  memset(padded, 0, sizeof padded);
  const uint8_t *img = s->pixels + item * s->stride;
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < C; ++c) padded[((y + P) * PW + x + P) * C + c] = img[(y * W + x) * C + c];
  ck_assert_int_le(dy + H, PH);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) {
      const int cx = flip ? W - 1 - x : x;
      for (int c = 0; c < C; ++c)
        out[(y * W + x) * C + c] = normalized(padded[((y + dy) * PW + cx + dx) * C + c], c);
    }
}

static void open_small(ddp_image_source_t *s) {
  ck_assert_int_eq(ddp_image_source_open(s, g_path), DDP_OK);
  ck_assert_int_eq(s->n, NIMG);
  ck_assert_int_eq(ddp_image_source_set_normalization(s, k_mean, k_std), DDP_OK);
}

START_TEST(test_fill_matches_reference) {
  C = 1 + _i; /* loop test: 1 .. 4 channels */
  write_shard();
  ddp_image_source_t s;
  open_small(&s);
  const ddp_image_aug_t aug = {.crop_pad = 2, .hflip = 1};
  float out[NIMG * H * W * CMAX], ref[H * W * CMAX];
  int32_t labels[NIMG];
  int64_t items[NIMG];
  int seen_dy[5] = {0}, seen_flip[2] = {0}, corner_pad = 0;
  for (int64_t epoch = 0; epoch < 12; ++epoch) {
    for (int i = 0; i < NIMG; ++i) items[i] = (i * 3 + epoch) % NIMG;
    ck_assert_int_eq(ddp_image_source_fill(&s, &aug, 42, epoch, items, NIMG, 1, out, labels),
                     DDP_OK);
    for (int r = 0; r < NIMG; ++r) {
      int dy, dx, flip;
      ddp_image_aug_draw(&aug, 42, epoch, items[r], &dy, &dx, &flip);
      ck_assert(dy >= 0 && dy <= 4 && dx >= 0 && dx <= 4 && (flip == 0 || flip == 1));
      seen_dy[dy]++, seen_flip[flip]++;
      reference(&s, items[r], 2, dy, dx, flip, ref);
      ck_assert_mem_eq(out + r * H * W * C, ref, H * W * C * sizeof(float));
      ck_assert_int_eq(labels[r], items[r] % 3);
      /* a crop from the top-left corner of the padded image: the padding
       * is zero before normalisation (no pixel of the image is 0) */
      if (dy == 0 && dx == 0 && !flip) {
        ++corner_pad;
        for (int c = 0; c < C; ++c)
          ck_assert_float_eq(out[r * H * W * C + c], -k_mean[c] / k_std[c]);
      }
    }
  }
  for (int d = 0; d < 5; ++d) ck_assert_int_gt(seen_dy[d], 0);
  ck_assert(seen_flip[0] > 0 && seen_flip[1] > 0);
  ck_assert_int_gt(corner_pad, 0);
  /* evaluation: no augmentation, the same normalisation */
  ck_assert_int_eq(ddp_image_source_fill(&s, NULL, 42, 3, items, NIMG, 1, out, labels), DDP_OK);
  for (int r = 0; r < NIMG; ++r) {
    reference(&s, items[r], 0, 0, 0, 0, ref);
    ck_assert_mem_eq(out + r * H * W * C, ref, H * W * C * sizeof(float));
  }
  /* crop-pad 0 and no flip: the augmented fill is the plain one */
  const ddp_image_aug_t none = {0, 0};
  float plain[NIMG * H * W * CMAX];
  ck_assert_int_eq(ddp_image_source_fill(&s, &none, 42, 3, items, NIMG, 1, plain, labels), DDP_OK);
  ck_assert_mem_eq(plain, out, NIMG * H * W * C * sizeof(float));
  ddp_image_source_destroy(&s);
}
END_TEST

START_TEST(test_padding_is_zero_before_normalisation) {
  ddp_image_source_t s;
  open_small(&s);
  /* P = 8 > H: some crop rows lie wholly in the padding; find an item whose
   * first row does and check the value there */
  const ddp_image_aug_t aug = {.crop_pad = 8, .hflip = 0};
  int found = 0;
  float out[H * W * CMAX];
  int32_t label;
  for (int64_t item = 0; item < NIMG; ++item)
    for (int64_t epoch = 0; epoch < 16 && !found; ++epoch) {
      int dy, dx, flip;
      ddp_image_aug_draw(&aug, 7, epoch, item, &dy, &dx, &flip);
      if (dy < 8 || dy >= 8 + H) { /* crop row 0 is padded row dy: padding */
        ck_assert_int_eq(ddp_image_source_fill(&s, &aug, 7, epoch, &item, 1, 1, out, &label),
                         DDP_OK);
        for (int x = 0; x < W; ++x)
          for (int c = 0; c < C; ++c) ck_assert_float_eq(out[x * C + c], -k_mean[c] / k_std[c]);
        found = 1;
      }
    }
  ck_assert(found);
  ddp_image_source_destroy(&s);
}
END_TEST

START_TEST(test_normalisation_statistics) {
  ddp_image_source_t s;
  ck_assert_int_eq(ddp_image_source_open(&s, g_path), DDP_OK);
  float mean[CMAX], std[CMAX];
  ddp_image_source_channel_stats(&s, mean, std);
  for (int c = 0; c < C; ++c) {
    double sum = 0, sq = 0, n = 0;
    for (int i = 0; i < NIMG; ++i)
      for (int k = 0; k < H * W; ++k) {
        const double v = s.pixels[i * s.stride + k * C + c] / 255.0;
        sum += v, sq += v * v, n += 1;
      }
    const double m = sum / n, sd = sqrt(sq / n - m * m);
    ck_assert_double_eq_tol(mean[c], m, 1e-6);
    ck_assert_double_eq_tol(std[c], sd, 1e-6);
  }
  /* none: x / 255 */
  ck_assert_int_eq(ddp_image_source_set_normalization(&s, NULL, NULL), DDP_OK);
  ck_assert_float_eq(s.lut[1][255], 1.0f);
  ck_assert_float_eq(s.lut[0][0], 0.0f);
  const float zero[CMAX] = {0.0f, 0.0f};
  ddp_test_log_start();
  const ddp_status_t st = ddp_image_source_set_normalization(&s, zero, zero);
  free(ddp_test_log_stop());
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_image_source_destroy(&s);
}
END_TEST

/* A set larger than DDP_IMAGE_STATS_MAX: the statistics read evenly
 * spaced images, all of which the reference reads too. */
START_TEST(test_statistics_of_a_large_set_are_sampled) {
  char path[128];
  snprintf(path, sizeof path, "%s/large.img", g_dir);
  const ddp_image_shape_t shape = {.height = 1, .width = 1, .channels = 1, .n_classes = 2};
  enum { N = DDP_IMAGE_STATS_MAX + 4465 };
  ddp_image_writer_t *w = NULL;
  ck_assert_int_eq(ddp_image_writer_open(&w, path, &shape), DDP_OK);
  for (int i = 0; i < N; ++i) {
    const uint8_t v = (uint8_t)((i * 131) % 251);
    ck_assert_int_eq(ddp_image_writer_add(w, &v, i % 2), DDP_OK);
  }
  ck_assert_int_eq(ddp_image_writer_finish(w), DDP_OK);
  ddp_image_source_t s;
  ck_assert_int_eq(ddp_image_source_open(&s, path), DDP_OK);
  float mean, std;
  ddp_image_source_channel_stats(&s, &mean, &std);
  double sum = 0, sq = 0;
  for (int64_t u = 0; u < DDP_IMAGE_STATS_MAX; ++u) {
    const double v = (double)((u * N / DDP_IMAGE_STATS_MAX * 131) % 251) / 255.0;
    sum += v, sq += v * v;
  }
  const double m = sum / DDP_IMAGE_STATS_MAX;
  ck_assert_double_eq_tol(mean, m, 1e-6);
  ck_assert_double_eq_tol(std, sqrt(sq / DDP_IMAGE_STATS_MAX - m * m), 1e-6);
  ddp_image_source_destroy(&s);
  unlink(path);
}
END_TEST

START_TEST(test_same_item_same_pixels_whatever_the_batch) {
  ddp_image_source_t s;
  open_small(&s);
  const ddp_image_aug_t aug = {.crop_pad = 3, .hflip = 1};
  enum { ROW = H * W * 2 }; /* the fixture's shard */
  ck_assert_int_eq(C, 2);
  float all[NIMG * ROW], part[3 * ROW], one[ROW], threaded[NIMG * ROW];
  int32_t lab[NIMG];
  const int64_t order[NIMG] = {6, 2, 4, 0, 5, 1, 3}, some[3] = {4, 6, 1};
  ck_assert_int_eq(ddp_image_source_fill(&s, &aug, 9, 5, order, NIMG, 1, all, lab), DDP_OK);
  ck_assert_int_eq(ddp_image_source_fill(&s, &aug, 9, 5, some, 3, 1, part, lab), DDP_OK);
  ck_assert_int_eq(ddp_image_source_fill(&s, &aug, 9, 5, order, NIMG, 3, threaded, lab), DDP_OK);
  ck_assert_mem_eq(all, threaded, sizeof all);
  for (int k = 0; k < 3; ++k) {
    int r = 0;
    while (order[r] != some[k]) ++r;
    ck_assert_mem_eq(part + k * ROW, all + r * ROW, sizeof one);
    ck_assert_int_eq(ddp_image_source_fill(&s, &aug, 9, 5, &some[k], 1, 1, one, lab), DDP_OK);
    ck_assert_mem_eq(one, all + r * ROW, sizeof one);
  }
  /* another epoch (or seed) draws again: some item's pixels change */
  float other[NIMG * ROW];
  ck_assert_int_eq(ddp_image_source_fill(&s, &aug, 9, 6, order, NIMG, 1, other, lab), DDP_OK);
  ck_assert(memcmp(other, all, sizeof all) != 0);
  ck_assert_int_eq(ddp_image_source_fill(&s, &aug, 10, 5, order, NIMG, 1, other, lab), DDP_OK);
  ck_assert(memcmp(other, all, sizeof all) != 0);
  /* an item outside the set is refused */
  const int64_t bad = NIMG;
  ddp_test_log_start();
  const ddp_status_t st = ddp_image_source_fill(&s, &aug, 9, 5, &bad, 1, 1, one, lab);
  char *log = ddp_test_log_stop();
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "image 7 requested, the set has 7");
  free(log);
  ddp_image_source_destroy(&s);
}
END_TEST

START_TEST(test_peek_tells_image_shards) {
  ck_assert_int_eq(ddp_image_shard_peek(g_path), 1);
  char other[128];
  snprintf(other, sizeof other, "%s/other.bin", g_dir);
  FILE *f = fopen(other, "wb");
  ck_assert_ptr_nonnull(f);
  fputs("not an image shard", f);
  fclose(f);
  ck_assert_int_eq(ddp_image_shard_peek(other), 0);
  unlink(other);
  ck_assert_int_eq(ddp_image_shard_peek(other), -1);
}
END_TEST

/* ---- the built-in set --------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
  const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

START_TEST(test_builtin_images) {
  enum { NT = DDP_BUILTIN_IMAGES_TRAIN, NV = DDP_BUILTIN_IMAGES_VAL, B = DDP_BUILTIN_IMAGE_BYTES };
  ddp_image_source_t t, v;
  ck_assert_int_eq(ddp_image_source_builtin(&t, 1337, DDP_SPLIT_TRAIN, NT), DDP_OK);
  ck_assert_int_eq(ddp_image_source_builtin(&v, 1337, DDP_SPLIT_VAL, NV), DDP_OK);
  ck_assert_int_eq(t.shape.height, 32);
  ck_assert_int_eq(t.shape.channels, 3);
  ck_assert_int_eq(t.shape.n_classes, 10);
  /* balanced classes */
  int count[10] = {0};
  for (int i = 0; i < NT; ++i) count[t.labels[i]]++;
  for (int k = 0; k < 10; ++k) ck_assert_int_eq(count[k], NT / 10);
  /* held out: no image in both splits (nor twice in one) */
  uint64_t *h = malloc((NT + NV) * sizeof *h);
  ck_assert_ptr_nonnull(h);
  for (int i = 0; i < NT + NV; ++i) {
    const uint8_t *p = i < NT ? t.pixels + (size_t)i * B : v.pixels + (size_t)(i - NT) * B;
    h[i] = ddp_fnv1a64(DDP_FNV1A64_INIT, p, B);
  }
  qsort(h, NT + NV, sizeof *h, cmp_u64);
  for (int i = 1; i < NT + NV; ++i) expect(h[i] != h[i - 1]);
  free(h);
  /* a pure function of (seed, split, index), whatever the count made */
  uint8_t px[B];
  int32_t label;
  for (int64_t i = 0; i < NT; i += 997) {
    ddp_builtin_image(1337, DDP_SPLIT_TRAIN, i, px, &label);
    ck_assert_mem_eq(px, t.pixels + i * B, B);
    ck_assert_int_eq(label, t.labels[i]);
  }
  ddp_image_source_t again;
  ck_assert_int_eq(ddp_image_source_builtin(&again, 1337, DDP_SPLIT_VAL, 10), DDP_OK);
  ck_assert_mem_eq(again.pixels, v.pixels, 10 * B);
  /* 10 images are another set than 2000 */
  ck_assert(ddp_image_source_fingerprint(&again) != ddp_image_source_fingerprint(&v));
  ddp_image_source_destroy(&again);
  /* another seed, other images */
  ck_assert_int_eq(ddp_image_source_builtin(&again, 1338, DDP_SPLIT_VAL, 10), DDP_OK);
  ck_assert(memcmp(again.pixels, v.pixels, 10 * B) != 0);
  ck_assert(ddp_image_source_fingerprint(&again) != ddp_image_source_fingerprint(&v));
  ddp_image_source_destroy(&again);
  /* the pixels use the whole range and vary within a class */
  int lo = 255, hi = 0;
  for (int k = 0; k < 100 * B; ++k) {
    lo = t.pixels[k] < lo ? t.pixels[k] : lo;
    hi = t.pixels[k] > hi ? t.pixels[k] : hi;
  }
  ck_assert(lo < 16 && hi > 240);
  ck_assert(memcmp(t.pixels, t.pixels + 10 * B, B) != 0);
  ddp_image_source_destroy(&t);
  ddp_image_source_destroy(&v);
}
END_TEST

/* ---- the sampler's dropped remainder ---------------------------------------------- */

enum { NITEMS = 103, BATCH = 4 };
static ddp_window_t g_items[NITEMS];

static ddp_sampler_t *item_sampler(int world, int accum, ddp_sampler_kind_t kind) {
  for (int i = 0; i < NITEMS; ++i) g_items[i] = (ddp_window_t){.start = i, .len = 2};
  const ddp_sampler_config_t cfg = {.kind = kind,
                                    .seed = 5,
                                    .world = world,
                                    .accum = accum,
                                    .tokens_per_batch = BATCH,
                                    .max_rows = BATCH,
                                    .drop_remainder = 1};
  ddp_sampler_t *s = NULL;
  ck_assert_int_eq(ddp_sampler_create_items(g_items, NITEMS, 1, &cfg, &s), DDP_OK);
  return s;
}

/* The items of step t, sorted (the step's multiset), and checks on the way. */
static void step_items(ddp_sampler_t *s, int world, int accum, int64_t t, int64_t *out) {
  int n = 0;
  for (int r = 0; r < world; ++r)
    for (int k = 0; k < accum; ++k) {
      int rows = 0;
      ddp_step_info_t info;
      ck_assert_int_eq(ddp_sampler_rows(s, t, r, k, out + n, BATCH, &rows, &info), DDP_OK);
      ck_assert_int_eq(rows, BATCH); /* every micro-batch full: equal counts */
      ck_assert_int_eq(info.n_targets, (int64_t)world * accum * BATCH);
      ck_assert_int_eq(info.wrapped, 0);
      n += rows;
    }
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && out[j] < out[j - 1]; --j) {
      const int64_t x = out[j];
      out[j] = out[j - 1];
      out[j - 1] = x;
    }
}

START_TEST(test_sampler_drops_the_remainder) {
  for (int kind = 0; kind < 2; ++kind) {
    ddp_sampler_t *a = item_sampler(2, 3, (ddp_sampler_kind_t)kind);
    ddp_sampler_t *b = item_sampler(1, 6, (ddp_sampler_kind_t)kind);
    ddp_epoch_stats_t st;
    ck_assert_int_eq(ddp_sampler_epoch_stats(a, 0, &st), DDP_OK);
    ck_assert_int_eq(st.dropped, NITEMS % 24);
    ck_assert_int_eq(st.steps, NITEMS / 24);
    ck_assert_int_eq(st.wrapped_rows, 0);
    ck_assert_int_eq(st.wrapped_micro_batches, 0);
    int kept_any[NITEMS] = {0};
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      int seen[NITEMS] = {0};
      for (int64_t t = epoch * 4; t < epoch * 4 + 4; ++t) {
        int64_t x[24], y[24];
        step_items(a, 2, 3, t, x);
        step_items(b, 1, 6, t, y);
        ck_assert_mem_eq(x, y, sizeof x); /* W x A = 1 x WA */
        for (int i = 0; i < 24; ++i) seen[x[i]]++, kept_any[x[i]] = 1;
      }
      int kept = 0;
      for (int i = 0; i < NITEMS; ++i) {
        ck_assert_int_le(seen[i], 1); /* none twice */
        kept += seen[i];
      }
      ck_assert_int_eq(kept, NITEMS - NITEMS % 24);
    }
    /* each epoch drops other items */
    int ever = 0;
    for (int i = 0; i < NITEMS; ++i) ever += kept_any[i];
    ck_assert_int_gt(ever, NITEMS - NITEMS % 24);
    ddp_sampler_destroy(a);
    ddp_sampler_destroy(b);
  }
}
END_TEST

START_TEST(test_sampler_drop_refusals) {
  for (int i = 0; i < NITEMS; ++i) g_items[i] = (ddp_window_t){.start = i, .len = 2};
  ddp_sampler_config_t cfg = {
      .seed = 5, .world = 4, .accum = 4, .tokens_per_batch = 8, .max_rows = 8, .drop_remainder = 1};
  ddp_sampler_t *s = NULL;
  char *log = NULL;
  /* 103 items do not fill one step of 4 x 4 x 8 = 128 */
  ddp_test_log_start();
  ddp_status_t st = ddp_sampler_create_items(g_items, NITEMS, 1, &cfg, &s);
  log = ddp_test_log_stop();
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "103 samples do not fill one step of 4 ranks x 4 micro-batches x 8");
  free(log);
  ck_assert_ptr_null(s);
  /* items of different lengths have no fixed step size */
  cfg.world = cfg.accum = 1;
  g_items[5].len = 3;
  ddp_test_log_start();
  st = ddp_sampler_create_items(g_items, NITEMS, 2, &cfg, &s);
  log = ddp_test_log_stop();
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "items of one size");
  free(log);
  ck_assert_ptr_null(s);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("image_source");
  TCase *tc = tcase_create("fill");
  tcase_add_checked_fixture(tc, dir_setup, dir_teardown);
  tcase_add_loop_test(tc, test_fill_matches_reference, 0, 4);
  tcase_add_test(tc, test_padding_is_zero_before_normalisation);
  tcase_add_test(tc, test_normalisation_statistics);
  tcase_add_test(tc, test_statistics_of_a_large_set_are_sampled);
  tcase_add_test(tc, test_same_item_same_pixels_whatever_the_batch);
  tcase_add_test(tc, test_peek_tells_image_shards);
  suite_add_tcase(s, tc);
  TCase *tb = tcase_create("builtin");
  tcase_set_timeout(tb, 60);
  tcase_add_test(tb, test_builtin_images);
  suite_add_tcase(s, tb);
  TCase *ts = tcase_create("sampler_drop");
  tcase_add_test(ts, test_sampler_drops_the_remainder);
  tcase_add_test(ts, test_sampler_drop_refusals);
  suite_add_tcase(s, ts);
  return s;
}

int main(void) {
  return ddp_test_run_suite(suite());
}
