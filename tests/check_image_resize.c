/* The resize-and-centre-crop of ddpprep --images folder
 * (src/tools/image_resize.c): torchvision's output sizes and crop offsets
 * (round half to even), a constant image stays constant at any size, an
 * integer downscale is the exact box mean (rounded half up), a copy at equal
 * size, bilinear enlargement between pixel centres, area averaging over
 * fractional pixels, and the centred window of a non-square image. */
#include <stdint.h>

#include "check_util.h"
#include "tools/image_resize.h"

START_TEST(test_sizes_and_offsets) {
  int w, h;
  ddp_resize_shorter_dims(640, 480, 224, &w, &h);
  expect_eq(w, 298); /* int(224 * 640 / 480) = int(298.67) */
  expect_eq(h, 224);
  ddp_resize_shorter_dims(375, 500, 224, &w, &h);
  expect_eq(w, 224);
  expect_eq(h, 298); /* int(224 * 500 / 375) = int(298.67) */
  ddp_resize_shorter_dims(7, 7, 3, &w, &h);
  expect_eq(w, 3);
  expect_eq(h, 3);
  /* round((len - crop) / 2), half to even as Python's round */
  expect_eq(ddp_center_crop_offset(10, 10), 0);
  expect_eq(ddp_center_crop_offset(11, 10), 0); /* 0.5 -> 0 */
  expect_eq(ddp_center_crop_offset(12, 10), 1);
  expect_eq(ddp_center_crop_offset(13, 10), 2); /* 1.5 -> 2 */
  expect_eq(ddp_center_crop_offset(15, 10), 2); /* 2.5 -> 2 */
  expect_eq(ddp_center_crop_offset(17, 10), 4); /* 3.5 -> 4 */
  expect_eq(ddp_center_crop_offset(298, 224), 37);
}
END_TEST

START_TEST(test_constant_image_stays_constant) {
  static const int sizes[][3] = {{64, 48, 17}, {5, 9, 40}, {33, 33, 33}, {100, 7, 3}, {3, 2, 1}};
  for (int s = 0; s < 5; ++s) {
    const int w = sizes[s][0], h = sizes[s][1], size = sizes[s][2];
    for (int c = 1; c <= 3; c += 2) {
      uint8_t *src = malloc((size_t)w * h * c), *dst = malloc((size_t)size * size * c);
      for (int i = 0; i < w * h * c; ++i)
        src[i] = (uint8_t)(i % c == 0 ? 201 : i % c == 1 ? 7 : 255);
      ck_assert_int_eq(ddp_resize_crop(src, w, h, c, size, dst), 0);
      for (int i = 0; i < size * size * c; ++i)
        expect_eq(dst[i], i % c == 0 ? 201 : i % c == 1 ? 7 : 255);
      free(src);
      free(dst);
    }
  }
}
END_TEST

START_TEST(test_halving_is_the_box_mean) {
  enum { W = 8, H = 6, C = 3, S = 3 }; /* 8x6 -> 4x3 -> centre 3x3 from x = 0 (0.5 -> 0) */
  uint8_t src[W * H * C], dst[S * S * C];
  for (int i = 0; i < W * H * C; ++i) src[i] = (uint8_t)((i * 97 + 13) % 256);
  ck_assert_int_eq(ddp_resize_crop(src, W, H, C, S, dst), 0);
  for (int y = 0; y < S; ++y)
    for (int x = 0; x < S; ++x)
      for (int c = 0; c < C; ++c) {
        int sum = 0;
        for (int dy = 0; dy < 2; ++dy)
          for (int dx = 0; dx < 2; ++dx) sum += src[((2 * y + dy) * W + 2 * x + dx) * C + c];
        expect_eq(dst[(y * S + x) * C + c], (sum + 2) / 4);
      }
}
END_TEST

START_TEST(test_equal_size_copies_the_centre) {
  /* 5x9 gray, size 5: no resampling, the rows 2..6 (offset round(2) = 2) */
  uint8_t src[5 * 9], dst[5 * 5];
  for (int i = 0; i < 45; ++i) src[i] = (uint8_t)(i * 5);
  ck_assert_int_eq(ddp_resize_crop(src, 5, 9, 1, 5, dst), 0);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 5; ++x) expect_eq(dst[y * 5 + x], src[(y + 2) * 5 + x]);
}
END_TEST

START_TEST(test_doubling_is_bilinear_between_centres) {
  /* 2x2 -> 4x4: output centres at 0.25 and 0.75 of the way fall between
   * source centres with weights 3/4, 1/4; the outer ones clamp to edges */
  const uint8_t src[4] = {0, 100, 200, 40};
  uint8_t dst[16];
  ck_assert_int_eq(ddp_resize_crop(src, 2, 2, 1, 4, dst), 0);
  const double k[4][2] = {{1, 0}, {0.75, 0.25}, {0.25, 0.75}, {0, 1}};
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) {
      double v = 0;
      for (int j = 0; j < 2; ++j)
        for (int i = 0; i < 2; ++i) v += k[y][j] * k[x][i] * src[j * 2 + i];
      expect_eq(dst[y * 4 + x], (int)(v + 0.5));
    }
}
END_TEST

START_TEST(test_fractional_area) {
  /* a row of 3 to 2: each output covers 1.5 pixels, the middle one split */
  const uint8_t src[3] = {10, 40, 100};
  uint8_t dst[4];
  /* 3x3 gray with equal rows, size 2: rows average to themselves */
  uint8_t img[9];
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 3; ++x) img[y * 3 + x] = src[x];
  ck_assert_int_eq(ddp_resize_crop(img, 3, 3, 1, 2, dst), 0);
  /* (10 + 0.5 * 40) / 1.5 = 20, (0.5 * 40 + 100) / 1.5 = 80 */
  expect_eq(dst[0], 20);
  expect_eq(dst[1], 80);
  expect_eq(dst[2], 20);
  expect_eq(dst[3], 80);
}
END_TEST

static Suite *image_resize_suite(void) {
  Suite *s = suite_create("image_resize");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_sizes_and_offsets);
  tcase_add_test(tc, test_constant_image_stays_constant);
  tcase_add_test(tc, test_halving_is_the_box_mean);
  tcase_add_test(tc, test_equal_size_copies_the_centre);
  tcase_add_test(tc, test_doubling_is_bilinear_between_centres);
  tcase_add_test(tc, test_fractional_area);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(image_resize_suite());
}
