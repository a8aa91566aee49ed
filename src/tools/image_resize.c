/* Resize-and-centre-crop for ddpprep --images folder (image_resize.h).
 *
 * torchvision's Resize filters with an antialiased bilinear kernel: PIL's
 * triangle filter, whose support widens by the scale factor when shrinking,
 * so every source pixel contributes; plain bilinear when enlarging. This
 * keeps that idea with the simplest antialiasing filter: when shrinking, an
 * output pixel is the mean of the source area it covers (fractional pixels
 * at its edges weigh by their coverage), which makes an integer factor an
 * exact box mean; when enlarging, bilinear interpolation between pixel
 * centres (half-pixel aligned, edges clamped), which is PIL's bilinear.
 *
 * The filter is separable: weights per axis are computed once, for the
 * cropped window only, then rows are filtered into a float buffer and
 * columns from it. Rounding is to nearest, halves up, as PIL rounds. */
#include "tools/image_resize.h"

#include <math.h>
#include <stdlib.h>

void ddp_resize_shorter_dims(int width, int height, int size, int *out_width, int *out_height) {
  if (width <= height) {
    *out_width = size;
    *out_height = (int)((int64_t)size * height / width);
  } else {
    *out_height = size;
    *out_width = (int)((int64_t)size * width / height);
  }
}

int ddp_center_crop_offset(int len, int crop) {
  const int diff = len - crop;
  int off = diff / 2;
  /* diff / 2 ends in .5 when diff is odd: Python rounds that to even */
  if (diff % 2 == 1 && off % 2 == 1) off += 1;
  return off;
}

/* The weights of one output axis: output pixel i reads n[i] source pixels
 * from first[i] on, with weights w[i * taps ...]. */
typedef struct axis {
  int *first, *n;
  float *w;
  int taps;
} axis_t;

static void axis_free(axis_t *a) {
  free(a->first);
  free(a->n);
  free(a->w);
}

/* Weights for the outputs off .. off + count - 1 of an axis resized from in
 * to out pixels. */
static int axis_init(axis_t *a, int in, int out, int off, int count) {
  const double scale = (double)in / out;
  a->taps = out < in ? (int)ceil(scale) + 1 : 2;
  a->first = malloc(sizeof *a->first * (size_t)count);
  a->n = malloc(sizeof *a->n * (size_t)count);
  a->w = calloc((size_t)count * (size_t)a->taps, sizeof *a->w);
  if (!a->first || !a->n || !a->w) return -1;
  for (int k = 0; k < count; ++k) {
    const int i = off + k;
    float *w = a->w + (size_t)k * (size_t)a->taps;
    if (out < in) {
      /* area: the source span [x0, x1) that output pixel i covers */
      const double x0 = i * scale, x1 = (i + 1) * scale;
      int j0 = (int)floor(x0), j1 = (int)ceil(x1);
      if (j1 > in) j1 = in;
      double sum = 0;
      a->first[k] = j0;
      a->n[k] = j1 - j0;
      for (int j = j0; j < j1; ++j) {
        const double lo = j > x0 ? j : x0, hi = j + 1 < x1 ? j + 1 : x1;
        w[j - j0] = (float)(hi - lo);
        sum += hi - lo;
      }
      /* normalised, so a constant image stays exactly constant */
      for (int j = 0; j < a->n[k]; ++j) w[j] = (float)(w[j] / sum);
    } else {
      /* bilinear between the centres of source pixels j0 and j0 + 1 */
      double x = (i + 0.5) * scale - 0.5;
      if (x < 0) x = 0;
      int j0 = (int)floor(x);
      double f = x - j0;
      if (j0 >= in - 1) {
        j0 = in - 1;
        f = 0;
      }
      a->first[k] = j0;
      a->n[k] = f > 0 ? 2 : 1;
      w[0] = (float)(1 - f);
      w[1] = (float)f;
    }
  }
  return 0;
}

static uint8_t to_byte(float v) {
  const float r = floorf(v + 0.5f);
  return r <= 0 ? 0 : r >= 255 ? 255 : (uint8_t)r;
}

int ddp_resize_crop(const uint8_t *src, int width, int height, int channels, int size,
                    uint8_t *dst) {
  int rw, rh;
  ddp_resize_shorter_dims(width, height, size, &rw, &rh);
  axis_t ax = {0}, ay = {0};
  float *tmp = NULL;
  int rc = -1;
  if (axis_init(&ax, width, rw, ddp_center_crop_offset(rw, size), size) != 0 ||
      axis_init(&ay, height, rh, ddp_center_crop_offset(rh, size), size) != 0)
    goto done;
  /* only the source rows that some output row reads */
  const int y0 = ay.first[0], y1 = ay.first[size - 1] + ay.n[size - 1];
  const size_t row_floats = (size_t)size * (size_t)channels;
  if (!(tmp = malloc(sizeof *tmp * row_floats * (size_t)(y1 - y0)))) goto done;
  for (int y = y0; y < y1; ++y) {
    const uint8_t *in = src + (size_t)y * width * channels;
    float *t = tmp + (size_t)(y - y0) * row_floats;
    for (int k = 0; k < size; ++k) {
      const float *w = ax.w + (size_t)k * (size_t)ax.taps;
      const uint8_t *p = in + (size_t)ax.first[k] * channels;
      for (int c = 0; c < channels; ++c) {
        float acc = 0;
        for (int j = 0; j < ax.n[k]; ++j) acc += w[j] * p[(size_t)j * channels + c];
        t[(size_t)k * channels + c] = acc;
      }
    }
  }
  for (int k = 0; k < size; ++k) {
    const float *w = ay.w + (size_t)k * (size_t)ay.taps;
    const float *t = tmp + (size_t)(ay.first[k] - y0) * row_floats;
    uint8_t *out = dst + (size_t)k * row_floats;
    for (size_t x = 0; x < row_floats; ++x) {
      float acc = 0;
      for (int j = 0; j < ay.n[k]; ++j) acc += w[j] * t[(size_t)j * row_floats + x];
      out[x] = to_byte(acc);
    }
  }
  rc = 0;
done:
  free(tmp);
  axis_free(&ax);
  axis_free(&ay);
  return rc;
}
