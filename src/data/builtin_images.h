/* The built-in image set: a procedural 10-class set of small colour images
 * (shapes and textures over noisy textured backgrounds), generated into
 * memory from the seed, so an image model trains with no files, as the
 * built-in task set does for token models (docs/design.md §4.4). */
#ifndef DDPTRAIN_DATA_BUILTIN_IMAGES_H
#define DDPTRAIN_DATA_BUILTIN_IMAGES_H

#include <stdint.h>

#include "ddptrain/status.h"

enum {
  DDP_BUILTIN_IMAGE_SIDE = 32, /* height = width */
  DDP_BUILTIN_IMAGE_CHANNELS = 3,
  DDP_BUILTIN_IMAGE_BYTES = DDP_BUILTIN_IMAGE_SIDE * DDP_BUILTIN_IMAGE_SIDE * 3,
  DDP_BUILTIN_IMAGE_CLASSES = 10,
  /* the splits as the trainer uses them */
  DDP_BUILTIN_IMAGES_TRAIN = 20000,
  DDP_BUILTIN_IMAGES_VAL = 2000,
};

/* The class names, in label order ("disc", "square", ...). */
const char *ddp_builtin_image_class_name(int label);

/* Image `index` of split DDP_SPLIT_TRAIN or DDP_SPLIT_VAL: a pure function
 * of (seed, split, index), in integer arithmetic only (the same bytes on
 * every host). pixels gets DDP_BUILTIN_IMAGE_BYTES bytes, HWC; the label is
 * index % DDP_BUILTIN_IMAGE_CLASSES, so any n consecutive images are
 * balanced to within one per class. */
void ddp_builtin_image(uint64_t seed, int split, int64_t index, uint8_t *pixels, int32_t *label);

/* Images 0 .. n-1 of a split into pixels (n * DDP_BUILTIN_IMAGE_BYTES) and
 * labels (n). */
ddp_status_t ddp_builtin_images(uint64_t seed, int split, int64_t n, uint8_t *pixels,
                                int32_t *labels);

#endif
