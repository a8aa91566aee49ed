/* Images as records (docs/design.md §4.4): the uint8 HWC pixels of an image
 * shard (memory-mapped) or of the built-in image set (in memory) with their
 * labels, turned into fp32 micro-batches only when a batch is filled, so a
 * data set is never held as floats.
 *
 * Filling a micro-batch writes (B,H,W,C) fp32 for the items the sampler
 * chose: for training, a random crop of the image padded with P zero pixels
 * on each side (--crop-pad) and a horizontal flip with probability 1/2
 * (--hflip); then, for training and evaluation alike, per-channel
 * normalisation (x/255 - mean) / std, with mean and std measured once on the
 * training split (--normalize train) or mean 0, std 1 (--normalize none).
 * Padding is zero *before* normalisation, as in torchvision's RandomCrop
 * followed by Normalize.
 *
 * Determinism: the crop offsets and the flip of an item are a pure function
 * of (seed, epoch, item index) — one Philox block per image, never per pixel
 * — and never of the rank, world size, micro-batch, thread or the other
 * items of the batch; so N ranks equal 1 rank with accum N, and a resumed
 * run replays the same pixels. */
#ifndef DDPTRAIN_DATA_IMAGE_SOURCE_H
#define DDPTRAIN_DATA_IMAGE_SOURCE_H

#include <stdint.h>

#include "ddptrain/data.h"
#include "ddptrain/status.h"
#include "data/image_shard.h"

/* The training augmentation. */
typedef struct ddp_image_aug {
  int crop_pad; /* P >= 0: pad P zero pixels on each side, crop H x W at random; 0: no crop */
  int hflip;    /* 1: flip left-right with probability 1/2 */
} ddp_image_aug_t;

/* The --crop-pad default: 4 pixels for images up to 64 pixels a side, none
 * for larger ones (a 4-pixel shift means little at 224). */
int ddp_image_default_crop_pad(const ddp_image_shape_t *shape);

typedef struct ddp_image_source {
  ddp_image_shape_t shape;
  int64_t n;
  int64_t image_bytes; /* H * W * C */
  int64_t stride;      /* bytes from one image's pixels to the next */
  const uint8_t *pixels;
  int32_t *labels;     /* (n) */
  ddp_window_t *items; /* the sampler's index: n items of one target */
  /* (x/255 - mean[c]) / std[c] for every byte value x and channel c */
  float mean[DDP_IMG_MAX_CHANNELS], std[DDP_IMG_MAX_CHANNELS];
  float lut[DDP_IMG_MAX_CHANNELS][256];
  uint64_t content_hash; /* of the pixels and labels (sampled for shards) */
  char source[256];      /* the path, or "built-in images (seed S, split)" */
  /* ownership: a mapped shard, or the built-in set's arrays */
  ddp_image_shard_t shard;
  uint8_t *owned;
} ddp_image_source_t;

/* Is path an image shard? 1: it starts with the image shard magic; 0: it
 * does not (a record file, a token shard); -1: it cannot be read (the
 * loader reports why later). Reads 4 bytes. */
int ddp_image_shard_peek(const char *path);

/* Maps and checks an image shard (ddp_image_shard_open's errors). */
ddp_status_t ddp_image_source_open(ddp_image_source_t *s, const char *path);
/* The built-in image set's split (builtin_images.h): n images from seed. */
ddp_status_t ddp_image_source_builtin(ddp_image_source_t *s, uint64_t seed, int split, int64_t n);
void ddp_image_source_destroy(ddp_image_source_t *s);

/* The most images the normalisation statistics read: all of a set up to
 * this size, evenly spaced ones of a larger set, so that start-up does not
 * read all of a set of millions of images a second time. */
#define DDP_IMAGE_STATS_MAX 65536

/* Per-channel mean and standard deviation of the pixels in [0, 1] units,
 * from exact integer sums (the same on every rank and host), over the
 * images above. A channel of one value gets std 1 (nothing to scale). */
void ddp_image_source_channel_stats(const ddp_image_source_t *s, float *mean, float *std);
/* Sets the normalisation of every fill (NULL, NULL: mean 0, std 1, i.e.
 * x/255). std must be positive. */
ddp_status_t ddp_image_source_set_normalization(ddp_image_source_t *s, const float *mean,
                                                const float *std);

/* The draws of item `item` in `epoch`: crop offsets dy, dx in [0, 2P] (the
 * crop's top-left corner in the padded image) and the flip. A pure function
 * of its arguments. */
void ddp_image_aug_draw(const ddp_image_aug_t *aug, uint64_t seed, int64_t epoch, int64_t item,
                        int *dy, int *dx, int *flip);

/* Writes rows images (items[r] each) as (rows, H, W, C) fp32 into out and
 * their labels into labels. aug NULL: no augmentation (evaluation).
 * threads > 1 splits the rows over that many threads (the same bytes as
 * one). An item outside [0, n) is DDP_ERR_INVALID_ARG. */
ddp_status_t ddp_image_source_fill(const ddp_image_source_t *s, const ddp_image_aug_t *aug,
                                   uint64_t seed, int64_t epoch, const int64_t *items, int rows,
                                   int threads, float *out, int32_t *labels);

/* A fingerprint of the set (shape, count, sampled content) and the
 * normalisation; ranks compare it with the augmentation mixed in. */
uint64_t ddp_image_source_fingerprint(const ddp_image_source_t *s);

#endif
