/* The built-in image set (see builtin_images.h).
 *
 * Every image is one shape or texture patch of a random colour, at a random
 * position and size, over a background of another random colour with a
 * random plaid texture (two triangle waves) and per-pixel noise. The ten
 * classes:
 *   0 disc       1 square     2 triangle   3 cross      4 ring
 *   5 h-stripes  6 v-stripes  7 checker    8 diagonal X 9 frame
 * Pairs share most of their pixels (disc/ring, square/frame/checker,
 * stripes h/v, cross/X), and the background texture has stripes of its
 * own, so a linear model on pixels learns some of it and a convolutional
 * one most: learnable, not trivial.
 *
 * Determinism: image i of a split is drawn from its own Philox stream,
 * derived from the split's stream (train and validation use different
 * streams, so the splits are held out by construction: a validation image
 * is never a training one); integer arithmetic only (no libm), so every
 * host makes the same bytes, which the ranks' data fingerprint relies on. */
#include "data/builtin_images.h"

#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/data.h"
#include "ddptrain/rng.h"

#define STREAM_TRAIN UINT64_C(0x696d672e74726e2e) /* "img.trn." */
#define STREAM_VAL UINT64_C(0x696d672e76616c2e)   /* "img.val." */

static const char *const k_class_names[DDP_BUILTIN_IMAGE_CLASSES] = {
    "disc",      "square",    "triangle", "cross",      "ring",
    "h-stripes", "v-stripes", "checker",  "diagonal-x", "frame"};

const char *ddp_builtin_image_class_name(int label) {
  return label >= 0 && label < DDP_BUILTIN_IMAGE_CLASSES ? k_class_names[label] : "unknown";
}

/* A small fast generator for the per-pixel noise, seeded from Philox
 * (splitmix64: one 64-bit value per pixel). */
static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* An integer in [lo, hi] from 32 random bits. */
static int in_range(uint32_t bits, int lo, int hi) {
  return lo + (int)(((uint64_t)bits * (uint64_t)(hi - lo + 1)) >> 32);
}

/* A triangle wave of period p (>= 2) and amplitude a: -a .. a. */
static int triangle(int t, int p, int a) {
  const int u = ((t % p) + p) % p; /* 0 .. p-1 */
  const int half = p / 2 > 0 ? p / 2 : 1;
  const int v = u <= half ? u : p - u; /* 0 .. half */
  return (2 * v - half) * a / half;
}

static int abs_i(int x) {
  return x < 0 ? -x : x;
}

static int max_i(int a, int b) {
  return a > b ? a : b;
}

/* Is offset (dx, dy) from the centre inside shape `label` of size s? */
static int inside(int label, int dx, int dy, int s, int period) {
  const int ax = abs_i(dx), ay = abs_i(dy), r2 = dx * dx + dy * dy;
  const int in_box = ax <= s && ay <= s;
  switch (label) {
    case 0:
      return r2 <= s * s;
    case 1:
      return ax <= s * 4 / 5 && ay <= s * 4 / 5;
    case 2:
      return dy >= -s && dy <= s && 2 * ax <= dy + s; /* apex up */
    case 3:
      return in_box && (ax <= s / 3 || ay <= s / 3);
    case 4:
      return r2 <= s * s && 4 * r2 >= s * s; /* inner radius s/2 */
    case 5:
      return in_box && ((dy + 64) / period) % 2 == 0;
    case 6:
      return in_box && ((dx + 64) / period) % 2 == 0;
    case 7:
      return in_box && ((dx + 64) / period + (dy + 64) / period) % 2 == 0;
    case 8:
      return in_box && abs_i(ax - ay) <= 1;
    default:
      return in_box && max_i(ax, ay) * 5 >= s * 3; /* frame: outer 2/5 */
  }
}

void ddp_builtin_image(uint64_t seed, int split, int64_t index, uint8_t *pixels, int32_t *label) {
  enum { N = DDP_BUILTIN_IMAGE_SIDE, C = DDP_BUILTIN_IMAGE_CHANNELS };
  ddp_rng_t root, rng;
  ddp_rng_init(&root, seed, split == DDP_SPLIT_VAL ? STREAM_VAL : STREAM_TRAIN);
  ddp_rng_derive(&root, (uint64_t)index, &rng);
  uint32_t w[20];
  ddp_rng_fill_u32(&rng, 0, w, 20);
  const int cls = (int)(index % DDP_BUILTIN_IMAGE_CLASSES);
  int bg[C], fg[C];
  for (int c = 0; c < C; ++c) {
    bg[c] = in_range(w[c], 0, 255);
    /* at least 72 levels apart in every channel: the shape is visible */
    fg[c] = (bg[c] + in_range(w[3 + c], 72, 184)) % 256;
  }
  const int s = in_range(w[6], 6, 11);                 /* shape size */
  const int cx = in_range(w[7], s - 2, N - 1 - s + 2); /* may touch the edge */
  const int cy = in_range(w[8], s - 2, N - 1 - s + 2);
  const int period = in_range(w[9], 2, 3);                            /* stripes, checker */
  const int px = in_range(w[10], 3, 12), py = in_range(w[11], 3, 12); /* background plaid */
  const int ox = in_range(w[12], 0, 11), oy = in_range(w[13], 0, 11);
  const int amp = in_range(w[14], 4, 28);
  const int noise = in_range(w[15], 4, 20);
  uint64_t state = (uint64_t)w[16] | (uint64_t)w[17] << 32;
  for (int y = 0; y < N; ++y)
    for (int x = 0; x < N; ++x) {
      const int shape = inside(cls, x - cx, y - cy, s, period);
      const int tex = triangle(x + ox, px, amp) + triangle(y + oy, py, amp) / 2;
      const uint64_t bits = splitmix64(&state);
      for (int c = 0; c < C; ++c) {
        const int n = (int)((bits >> (16 * c)) & 0xffff) % (2 * noise + 1) - noise;
        int v = (shape ? fg[c] : bg[c] + tex) + n;
        v = v < 0 ? 0 : v > 255 ? 255 : v;
        pixels[(y * N + x) * C + c] = (uint8_t)v;
      }
    }
  *label = cls;
}

ddp_status_t ddp_builtin_images(uint64_t seed, int split, int64_t n, uint8_t *pixels,
                                int32_t *labels) {
  if (n < 1 || !pixels || !labels)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "builtin images: %lld images requested", (long long)n);
  if (split != DDP_SPLIT_TRAIN && split != DDP_SPLIT_VAL)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "builtin images: unknown split %d", split);
  for (int64_t i = 0; i < n; ++i)
    ddp_builtin_image(seed, split, i, pixels + i * DDP_BUILTIN_IMAGE_BYTES, labels + i);
  return DDP_OK;
}
