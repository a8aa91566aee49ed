/* JPEG decoding through libjpeg(-turbo)'s classic API (image_decode.h).
 * Gray and YCbCr/RGB JPEGs decode to 8-bit gray or RGB (libjpeg converts
 * colour to gray by its luma, Y; gray is replicated to RGB here, as not
 * every libjpeg converts gray to RGB). CMYK and YCCK JPEGs are refused:
 * their inks need a colour profile to become RGB, and a guess would put
 * silently wrong colours into training data. Decoding uses the accurate
 * integer DCT at full size, as PIL does by default (no DCT-domain
 * downscaling: it would change the pixels the resampler sees).
 *
 * libjpeg's fatal errors call error_exit, which must not return: ours
 * formats the message and longjmps back. Its corrupt-data warnings (a
 * truncated file is padded with gray and decodes "successfully") are
 * treated as errors too, so a damaged image never reaches a shard. */
#include <config.h>

#include "tools/image_decode.h"

#include <stdio.h>
#include <string.h>

#if DDP_HAVE_JPEG
#include <setjmp.h>

#include <jpeglib.h>

typedef struct err_mgr {
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  char msg[JMSG_LENGTH_MAX];
} err_mgr_t;

static void on_error_exit(j_common_ptr cinfo) {
  err_mgr_t *e = (err_mgr_t *)cinfo->err;
  e->pub.format_message(cinfo, e->msg);
  longjmp(e->jump, 1);
}

/* Our own failures take the library's way out, so cleanup is in one place. */
static void fail(err_mgr_t *e, const char *msg) {
  snprintf(e->msg, sizeof e->msg, "%s", msg);
  longjmp(e->jump, 1);
}

/* level -1 is a warning about corrupt data; the others are trace output */
static void on_emit(j_common_ptr cinfo, int level) {
  if (level < 0) on_error_exit(cinfo);
}

int ddp_decode_jpeg(const uint8_t *data, size_t n, int channels, ddp_decoded_t *img, char *err,
                    size_t err_len) {
  memset(img, 0, sizeof *img);
  if (n < 3 || data[0] != 0xFF || data[1] != 0xD8) {
    snprintf(err, err_len, "not a JPEG file (no SOI marker at byte 0)");
    return -1;
  }
  struct jpeg_decompress_struct d;
  err_mgr_t e;
  memset(&d, 0, sizeof d);
  d.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = on_error_exit;
  e.pub.emit_message = on_emit;
  uint8_t *volatile pixels = NULL; /* written between setjmp and a longjmp */
  if (setjmp(e.jump)) {
    const size_t at = d.src ? (size_t)(d.src->next_input_byte - data) : 0;
    snprintf(err, err_len, "corrupt JPEG data at byte %zu: libjpeg: %s", at, e.msg);
    jpeg_destroy_decompress(&d);
    free(pixels);
    return -1;
  }
  jpeg_create_decompress(&d);
  jpeg_mem_src(&d, (unsigned char *)data, (unsigned long)n);
  jpeg_read_header(&d, TRUE);
  if (d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK) {
    snprintf(err, err_len, "%s JPEG: not supported (convert it to RGB first)",
             d.jpeg_color_space == JCS_CMYK ? "CMYK" : "YCCK");
    jpeg_destroy_decompress(&d);
    return -1;
  }
  if ((uint64_t)d.image_width * d.image_height > DDP_DECODE_MAX_PIXELS) {
    snprintf(err, err_len, "JPEG of %ux%u pixels is larger than %d pixels", (unsigned)d.image_width,
             (unsigned)d.image_height, DDP_DECODE_MAX_PIXELS);
    jpeg_destroy_decompress(&d);
    return -1;
  }
  const int gray = d.jpeg_color_space == JCS_GRAYSCALE || channels == 1;
  d.out_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
  d.dct_method = JDCT_ISLOW;
  jpeg_start_decompress(&d);
  const int got = d.output_components;
  const size_t row_bytes = (size_t)d.output_width * (size_t)got;
  if (got != (gray ? 1 : 3)) fail(&e, "unexpected number of colour components");
  if (!(pixels = malloc(row_bytes * d.output_height))) fail(&e, "out of memory for the pixels");
  while (d.output_scanline < d.output_height) {
    JSAMPROW row = pixels + (size_t)d.output_scanline * row_bytes;
    jpeg_read_scanlines(&d, &row, 1);
  }
  jpeg_finish_decompress(&d);
  const int width = (int)d.output_width, height = (int)d.output_height;
  jpeg_destroy_decompress(&d);
  return ddp_decoded_finish(img, width, height, got, pixels, channels, err, err_len);
}

#else

int ddp_decode_jpeg(const uint8_t *data, size_t n, int channels, ddp_decoded_t *img, char *err,
                    size_t err_len) {
  (void)data, (void)n, (void)channels;
  memset(img, 0, sizeof *img);
  snprintf(err, err_len, "this ddpprep was built without libjpeg");
  return -1;
}

#endif
