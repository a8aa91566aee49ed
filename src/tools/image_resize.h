/* The geometry of ddpprep --images folder (docs/design.md §5.6): resize so
 * the shorter side is SIZE, then cut the centred SIZE x SIZE square, as
 * torchvision's Resize(SIZE) followed by CenterCrop(SIZE) does. */
#ifndef DDPTRAIN_TOOLS_IMAGE_RESIZE_H
#define DDPTRAIN_TOOLS_IMAGE_RESIZE_H

#include <stdint.h>

/* The resized width and height: the shorter side becomes size, the longer
 * int(size * long / short), truncated as torchvision computes it. */
void ddp_resize_shorter_dims(int width, int height, int size, int *out_width, int *out_height);

/* Where a centred window of crop pixels starts in len pixels: round((len -
 * crop) / 2) with Python's round-half-to-even, as torchvision's CenterCrop. */
int ddp_center_crop_offset(int len, int crop);

/* Resizes src (width x height x channels, HWC, uint8) so that its shorter
 * side is size and writes the centred size x size square to dst (size x
 * size x channels). Downscaling averages areas (each source pixel weighs by
 * the part of it an output pixel covers), upscaling interpolates bilinearly
 * between pixel centres; an axis of equal size is copied. Returns 0, or -1
 * when out of memory. */
int ddp_resize_crop(const uint8_t *src, int width, int height, int channels, int size,
                    uint8_t *dst);

#endif
