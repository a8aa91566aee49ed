/* PNG decoding through libpng (image_decode.h). Every PNG kind becomes
 * 8-bit gray or RGB: palettes expand to RGB, gray below 8 bits to 8,
 * 16-bit samples scale to 8 with rounding (png_set_scale_16), and alpha is
 * dropped, not composited (as PIL's convert("RGB") does); a tRNS chunk is
 * ignored for the same reason. The file is read from memory through our own
 * read function, so an error can say how far the data had been read.
 *
 * libpng reports errors by calling an error function that must not
 * return: ours keeps the message and longjmps back to the decode call, which
 * frees what it allocated. Warnings are ignored (the image decodes). */
#include <config.h>

#include "tools/image_decode.h"

#include <stdio.h>
#include <string.h>

#if DDP_HAVE_PNG
#include <png.h>

typedef struct png_src {
  const uint8_t *data;
  size_t n, at;
  char msg[160];
} png_src_t;

static void on_error(png_structp png, png_const_charp msg) {
  png_src_t *s = png_get_error_ptr(png);
  snprintf(s->msg, sizeof s->msg, "%s", msg);
  png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg) {
  (void)png;
  (void)msg;
}

static void read_data(png_structp png, png_bytep out, size_t len) {
  png_src_t *s = png_get_io_ptr(png);
  if (len > s->n - s->at) {
    s->at = s->n;
    png_error(png, "the file ends early (truncated)");
  }
  memcpy(out, s->data + s->at, len);
  s->at += len;
}

int ddp_decode_png(const uint8_t *data, size_t n, int channels, ddp_decoded_t *img, char *err,
                   size_t err_len) {
  memset(img, 0, sizeof *img);
  if (n < 8 || png_sig_cmp(data, 0, 8) != 0) {
    snprintf(err, err_len, "not a PNG file (no PNG signature at byte 0)");
    return -1;
  }
  png_src_t src = {data, n, 0, ""};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_error, on_warning);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    png_destroy_read_struct(&png, NULL, NULL);
    snprintf(err, err_len, "out of memory for the PNG decoder");
    return -1;
  }
  /* written between setjmp and a longjmp, so volatile */
  uint8_t *volatile pixels = NULL;
  png_bytep *volatile rows = NULL;
  if (setjmp(png_jmpbuf(png))) {
    snprintf(err, err_len, "corrupt PNG data at byte %zu: libpng: %s", src.at, src.msg);
    png_destroy_read_struct(&png, &info, NULL);
    free(pixels);
    free(rows);
    return -1;
  }
  png_set_read_fn(png, &src, read_data);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  const int type = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  if ((uint64_t)w * h > DDP_DECODE_MAX_PIXELS) {
    snprintf(err, err_len, "PNG of %ux%u pixels is larger than %d pixels", (unsigned)w, (unsigned)h,
             DDP_DECODE_MAX_PIXELS);
    png_destroy_read_struct(&png, &info, NULL);
    return -1;
  }
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_scale_16(png);
  if (type & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int got = png_get_channels(png, info);
  const size_t row_bytes = png_get_rowbytes(png, info);
  if ((got != 1 && got != 3) || row_bytes != (size_t)w * got) png_error(png, "unexpected layout");
  pixels = malloc((size_t)h * row_bytes);
  rows = malloc(sizeof *rows * h);
  if (!pixels || !rows) png_error(png, "out of memory");
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = pixels + (size_t)y * row_bytes;
  png_read_image(png, rows);
  png_read_end(png, NULL); /* the chunks after the image, up to IEND: catches truncation */
  png_destroy_read_struct(&png, &info, NULL);
  free(rows);
  return ddp_decoded_finish(img, (int)w, (int)h, got, pixels, channels, err, err_len);
}

#else

int ddp_decode_png(const uint8_t *data, size_t n, int channels, ddp_decoded_t *img, char *err,
                   size_t err_len) {
  (void)data, (void)n, (void)channels;
  memset(img, 0, sizeof *img);
  snprintf(err, err_len, "this ddpprep was built without libpng");
  return -1;
}

#endif
