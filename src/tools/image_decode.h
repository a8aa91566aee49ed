/* PNG and JPEG decoding for ddpprep --images folder: a whole file, held in
 * memory, to 8-bit pixels of 1 (gray) or 3 (RGB) channels, HWC. The library
 * errors come back as a one-line reason, never as an exit or a print. */
#ifndef DDPTRAIN_TOOLS_IMAGE_DECODE_H
#define DDPTRAIN_TOOLS_IMAGE_DECODE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Decoded images larger than this are refused before their pixels are
 * allocated (a few bytes of header can claim gigapixels). */
#define DDP_DECODE_MAX_PIXELS (1 << 26) /* 64 Mpixels, 192 MiB as RGB */

typedef struct ddp_decoded {
  int width, height, channels;
  uint8_t *pixels; /* malloc'd, height x width x channels */
} ddp_decoded_t;

/* Each returns 0 and fills *img (free img->pixels), or -1 with the reason in
 * err: what is wrong and the byte offset the decoder had read to, without
 * the file's name. channels is 1 or 3. Without the library, -1 says so. */
int ddp_decode_png(const uint8_t *data, size_t n, int channels, ddp_decoded_t *img, char *err,
                   size_t err_len);
int ddp_decode_jpeg(const uint8_t *data, size_t n, int channels, ddp_decoded_t *img, char *err,
                    size_t err_len);

/* Gray from RGB as PIL's convert("L") computes it: ITU-R 601-2 luma,
 * L = (19595 R + 38470 G + 7471 B + 2^15) >> 16. */
static inline uint8_t ddp_luma(const uint8_t *rgb) {
  return (uint8_t)((19595u * rgb[0] + 38470u * rgb[1] + 7471u * rgb[2] + 0x8000u) >> 16);
}

/* A decoder's last step: takes the decoded pixels (width x height x got,
 * malloc'd) into *img, converted to `channels` (1 or 3; gray is replicated
 * into RGB). Returns 0, or -1 with "out of memory" in err, the pixels freed
 * and *img zeroed. */
static inline int ddp_decoded_finish(ddp_decoded_t *img, int width, int height, int got,
                                     uint8_t *pixels, int channels, char *err, size_t err_len) {
  *img = (ddp_decoded_t){.width = width, .height = height, .channels = got, .pixels = pixels};
  if (got == channels) return 0;
  const size_t n = (size_t)width * (size_t)height;
  uint8_t *p = malloc(n * (size_t)channels);
  if (!p) {
    free(pixels);
    *img = (ddp_decoded_t){0};
    snprintf(err, err_len, "out of memory");
    return -1;
  }
  for (size_t i = 0; i < n; ++i) {
    if (channels == 1)
      p[i] = ddp_luma(img->pixels + 3 * i);
    else
      p[3 * i] = p[3 * i + 1] = p[3 * i + 2] = img->pixels[i];
  }
  free(img->pixels);
  img->pixels = p;
  img->channels = channels;
  return 0;
}

#endif
