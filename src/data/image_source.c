/* Images as records (see image_source.h): opening a shard or the built-in
 * set, the normalisation statistics, and the augmented fill.
 *
 * Speed: a fill is a gather with a per-channel lookup table (byte value ->
 * normalised float) and a per-image offset and direction; no per-pixel
 * random numbers and no floating-point arithmetic per pixel. Padding pixels
 * take the table's entry for 0. */
#include "data/image_source.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/rng.h"
#include "core/hash.h"
#include "data/builtin_images.h"

#define STREAM_AUGMENT UINT64_C(0x6175676d656e742e) /* "augment." */

int ddp_image_default_crop_pad(const ddp_image_shape_t *shape) {
  return shape->height <= 64 && shape->width <= 64 ? 4 : 0;
}

int ddp_image_shard_peek(const char *path) {
  FILE *f = path ? fopen(path, "rb") : NULL;
  if (!f) return -1;
  unsigned char b[4];
  const size_t got = fread(b, 1, 4, f);
  fclose(f);
  if (got != 4) return 0;
  const uint32_t magic =
      (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  return magic == DDP_IMG_MAGIC;
}

/* The sampler's index and the default normalisation (x/255). */
static ddp_status_t make_items(ddp_image_source_t *s) {
  s->items = malloc((size_t)s->n * sizeof *s->items);
  if (!s->items)
    DDP_FAIL(DDP_ERR_OOM, "%s: out of memory indexing %lld images", s->source, (long long)s->n);
  for (int64_t i = 0; i < s->n; ++i) s->items[i] = (ddp_window_t){.start = i, .len = 2};
  return ddp_image_source_set_normalization(s, NULL, NULL);
}

ddp_status_t ddp_image_source_open(ddp_image_source_t *s, const char *path) {
  memset(s, 0, sizeof *s);
  DDP_CHECK(ddp_image_shard_open(&s->shard, path));
  const ddp_image_shard_t *sh = &s->shard;
  s->shape = sh->shape;
  s->n = sh->count;
  s->image_bytes = sh->image_bytes;
  s->stride = sh->record_bytes;
  s->pixels = ddp_image_shard_pixels(sh, 0);
  snprintf(s->source, sizeof s->source, "%s", path);
  s->labels = malloc((size_t)s->n * sizeof *s->labels);
  ddp_status_t st = DDP_OK;
  if (s->labels) {
    for (int64_t i = 0; i < s->n; ++i) s->labels[i] = ddp_image_shard_label(sh, i);
    st = make_items(s);
  } else {
    st = DDP_ERR_OOM;
    DDP_LOG_ERROR("%s: out of memory for %lld labels", path, (long long)s->n);
  }
  if (st != DDP_OK) {
    ddp_image_source_destroy(s);
    return st;
  }
  /* The name without directories, the size and 64 sampled records: enough
   * to tell two shards apart without reading all of a large one. */
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  uint64_t h = ddp_fnv1a64(DDP_FNV1A64_INIT, base, strlen(base));
  h = ddp_fnv1a64(h, &sh->map_bytes, sizeof sh->map_bytes);
  for (int k = 0; k < 64; ++k) {
    const int64_t i = s->n * k / 64;
    h = ddp_fnv1a64(h, sh->records + i * sh->record_bytes, (size_t)sh->record_bytes);
  }
  s->content_hash = h;
  return DDP_OK;
}

ddp_status_t ddp_image_source_builtin(ddp_image_source_t *s, uint64_t seed, int split, int64_t n) {
  memset(s, 0, sizeof *s);
  if (n < 1) DDP_FAIL(DDP_ERR_INVALID_ARG, "built-in images: %lld images requested", (long long)n);
  s->shape = (ddp_image_shape_t){.height = DDP_BUILTIN_IMAGE_SIDE,
                                 .width = DDP_BUILTIN_IMAGE_SIDE,
                                 .channels = DDP_BUILTIN_IMAGE_CHANNELS,
                                 .n_classes = DDP_BUILTIN_IMAGE_CLASSES};
  s->n = n;
  s->image_bytes = s->stride = DDP_BUILTIN_IMAGE_BYTES;
  snprintf(s->source, sizeof s->source, "built-in images, seed %llu, %s split",
           (unsigned long long)seed, split == DDP_SPLIT_VAL ? "validation" : "training");
  s->owned = malloc((size_t)n * DDP_BUILTIN_IMAGE_BYTES);
  s->labels = malloc((size_t)n * sizeof *s->labels);
  ddp_status_t st = DDP_OK;
  if (!s->owned || !s->labels) {
    st = DDP_ERR_OOM;
    DDP_LOG_ERROR("built-in images: out of memory for %lld images", (long long)n);
  }
  if (st == DDP_OK) st = ddp_builtin_images(seed, split, n, s->owned, s->labels);
  if (st == DDP_OK) st = make_items(s);
  if (st != DDP_OK) {
    ddp_image_source_destroy(s);
    return st;
  }
  s->pixels = s->owned;
  /* the images are a function of these (and of the generator's code) */
  const uint64_t what[3] = {seed, (uint64_t)split, (uint64_t)n};
  s->content_hash = ddp_fnv1a64(DDP_FNV1A64_INIT, "builtin-images-1", 16);
  s->content_hash = ddp_fnv1a64(s->content_hash, what, sizeof what);
  return DDP_OK;
}

void ddp_image_source_destroy(ddp_image_source_t *s) {
  if (!s) return;
  ddp_image_shard_close(&s->shard);
  free(s->owned);
  free(s->labels);
  free(s->items);
  memset(s, 0, sizeof *s);
}

void ddp_image_source_channel_stats(const ddp_image_source_t *s, float *mean, float *std) {
  const int C = s->shape.channels;
  uint64_t sum[DDP_IMG_MAX_CHANNELS] = {0}, sq[DDP_IMG_MAX_CHANNELS] = {0};
  const int64_t px = s->image_bytes / C;
  /* every image of a set up to DDP_IMAGE_STATS_MAX, evenly spaced ones of
   * a larger set (the same ones on every rank) */
  const int64_t used = s->n < DDP_IMAGE_STATS_MAX ? s->n : DDP_IMAGE_STATS_MAX;
  for (int64_t u = 0; u < used; ++u) {
    const int64_t i = used == s->n ? u : u * s->n / used;
    const uint8_t *p = s->pixels + i * s->stride;
    for (int c = 0; c < C; ++c) {
      uint64_t a = 0, b = 0;
      for (int64_t k = 0; k < px; ++k) {
        const uint64_t v = p[k * C + c];
        a += v;
        b += v * v;
      }
      sum[c] += a;
      sq[c] += b;
    }
  }
  const double count = (double)used * (double)px;
  for (int c = 0; c < C; ++c) {
    const double m = (double)sum[c] / count;
    double var = (double)sq[c] / count - m * m;
    if (var < 0) var = 0;
    const double sd = var > 0 ? sqrt(var) : 255.0; /* one value: std 1 */
    mean[c] = (float)(m / 255.0);
    std[c] = (float)(sd / 255.0);
  }
}

ddp_status_t ddp_image_source_set_normalization(ddp_image_source_t *s, const float *mean,
                                                const float *std) {
  const int C = s->shape.channels;
  for (int c = 0; c < C; ++c) {
    const float m = mean ? mean[c] : 0.0f, sd = std ? std[c] : 1.0f;
    if (!(sd > 0.0f))
      DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: channel %d has standard deviation %g", s->source, c,
               (double)sd);
    s->mean[c] = m;
    s->std[c] = sd;
    for (int v = 0; v < 256; ++v) s->lut[c][v] = ((float)v / 255.0f - m) / sd;
  }
  return DDP_OK;
}

void ddp_image_aug_draw(const ddp_image_aug_t *aug, uint64_t seed, int64_t epoch, int64_t item,
                        int *dy, int *dx, int *flip) {
  ddp_rng_t root, rng;
  ddp_rng_init(&root, seed, STREAM_AUGMENT);
  ddp_rng_derive(&root, (uint64_t)epoch, &rng);
  uint32_t w[4];
  ddp_rng_fill_u32(&rng, 4 * (uint64_t)item, w, 4); /* one block per item */
  const uint64_t span = aug && aug->crop_pad > 0 ? 2 * (uint64_t)aug->crop_pad + 1 : 1;
  *dy = (int)(((uint64_t)w[0] * span) >> 32);
  *dx = (int)(((uint64_t)w[1] * span) >> 32);
  *flip = aug && aug->hflip ? (int)(w[2] >> 31) : 0;
}

/* One image: out[y,x,c] = lut[c][I(y + oy, x' + ox, c)] with x' = x or
 * W-1-x (flipped), and lut[c][0] outside the image (the zero padding).
 * The columns that read the image form one range [x0, x1) per image, so
 * the inner loops carry no bounds checks. */
static void fill_one(const ddp_image_source_t *s, const uint8_t *img, int oy, int ox, int flip,
                     float *out) {
  const int H = s->shape.height, W = s->shape.width, C = s->shape.channels;
  /* unflipped: sx = x + ox in [0, W); flipped: sx = W-1-x + ox in [0, W) */
  int x0 = flip ? ox : -ox, x1 = flip ? W + ox : W - ox;
  x0 = x0 < 0 ? 0 : x0 > W ? W : x0;
  x1 = x1 < x0 ? x0 : x1 > W ? W : x1;
  float pad[DDP_IMG_MAX_CHANNELS];
  for (int c = 0; c < C; ++c) pad[c] = s->lut[c][0];
  for (int y = 0; y < H; ++y) {
    const int sy = y + oy;
    float *row = out + (size_t)y * W * C;
    const int inside = sy >= 0 && sy < H;
    const int a = inside ? x0 : W, b = inside ? x1 : W;
    for (int x = 0; x < a; ++x)
      for (int c = 0; c < C; ++c) row[x * C + c] = pad[c];
    for (int x = b; x < W; ++x)
      for (int c = 0; c < C; ++c) row[x * C + c] = pad[c];
    if (a >= b) continue; /* the row lies wholly in the padding */
    const uint8_t *src = img + (size_t)sy * W * C;
    if (!flip) {
      const uint8_t *in = src + (ptrdiff_t)(a + ox) * C;
      float *o = row + (size_t)a * C;
      if (C == 1) {
        for (int x = a; x < b; ++x) *o++ = s->lut[0][*in++];
      } else if (C == 3) {
        for (int x = a; x < b; ++x, in += 3, o += 3) {
          o[0] = s->lut[0][in[0]];
          o[1] = s->lut[1][in[1]];
          o[2] = s->lut[2][in[2]];
        }
      } else {
        for (int x = a; x < b; ++x, in += C, o += C)
          for (int c = 0; c < C; ++c) o[c] = s->lut[c][in[c]];
      }
    } else {
      for (int x = a; x < b; ++x) {
        const uint8_t *in = src + (ptrdiff_t)(W - 1 - x + ox) * C;
        float *o = row + (size_t)x * C;
        for (int c = 0; c < C; ++c) o[c] = s->lut[c][in[c]];
      }
    }
  }
}

typedef struct fill_job {
  const ddp_image_source_t *s;
  const ddp_image_aug_t *aug;
  uint64_t seed;
  int64_t epoch;
  const int64_t *items;
  int first, end;
  float *out;
  int32_t *labels;
} fill_job_t;

static void *fill_rows(void *arg) {
  const fill_job_t *j = arg;
  const ddp_image_source_t *s = j->s;
  const int P = j->aug ? j->aug->crop_pad : 0;
  for (int r = j->first; r < j->end; ++r) {
    const int64_t k = j->items[r];
    int dy = P, dx = P, flip = 0;
    if (j->aug) ddp_image_aug_draw(j->aug, j->seed, j->epoch, k, &dy, &dx, &flip);
    fill_one(s, s->pixels + k * s->stride, dy - P, dx - P, flip, j->out + r * s->image_bytes);
    j->labels[r] = s->labels[k];
  }
  return NULL;
}

enum { MAX_FILL_THREADS = 64 };

ddp_status_t ddp_image_source_fill(const ddp_image_source_t *s, const ddp_image_aug_t *aug,
                                   uint64_t seed, int64_t epoch, const int64_t *items, int rows,
                                   int threads, float *out, int32_t *labels) {
  for (int r = 0; r < rows; ++r)
    if (items[r] < 0 || items[r] >= s->n)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: image %lld requested, the set has %lld", s->source,
               (long long)items[r], (long long)s->n);
  if (aug && aug->crop_pad < 0)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "image fill: crop padding %d is negative", aug->crop_pad);
  int T = threads < 1 ? 1 : threads > MAX_FILL_THREADS ? MAX_FILL_THREADS : threads;
  if (T > rows) T = rows > 0 ? rows : 1;
  fill_job_t jobs[MAX_FILL_THREADS];
  pthread_t tid[MAX_FILL_THREADS];
  int started = 0;
  for (int t = 0; t < T; ++t)
    jobs[t] = (fill_job_t){.s = s,
                           .aug = aug,
                           .seed = seed,
                           .epoch = epoch,
                           .items = items,
                           .first = (int)((int64_t)rows * t / T),
                           .end = (int)((int64_t)rows * (t + 1) / T),
                           .out = out,
                           .labels = labels};
  /* jobs 1.. on threads of their own; a thread that cannot start is done
   * here instead (the same bytes either way) */
  for (int t = 1; t < T; ++t) {
    if (pthread_create(&tid[t], NULL, fill_rows, &jobs[t]) != 0) {
      for (int u = t; u < T; ++u) fill_rows(&jobs[u]);
      break;
    }
    started = t;
  }
  fill_rows(&jobs[0]);
  for (int t = 1; t <= started; ++t) pthread_join(tid[t], NULL);
  return DDP_OK;
}

uint64_t ddp_image_source_fingerprint(const ddp_image_source_t *s) {
  uint64_t h = ddp_fnv1a64(DDP_FNV1A64_INIT, &s->content_hash, sizeof s->content_hash);
  h = ddp_fnv1a64(h, &s->shape, sizeof s->shape);
  h = ddp_fnv1a64(h, &s->n, sizeof s->n);
  h = ddp_fnv1a64(h, s->mean, sizeof s->mean);
  return ddp_fnv1a64(h, s->std, sizeof s->std);
}
