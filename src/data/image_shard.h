/* Image shards (docs/design.md §5.6, a contract): fixed-size uint8 HWC
 * images, each stored beside its int32 class label, behind a 64-byte header.
 * A reader that memory-maps and checks a whole shard at open, and an atomic
 * streaming writer (temporary file, fsync, rename).
 *
 * Layout, all little-endian:
 *   header, 16 uint32 words (64 bytes):
 *     [0] magic 0x474D4944 (the bytes "DIMG"), [1] version 1,
 *     [2] header bytes (64), [3] record count, [4] height, [5] width,
 *     [6] channels, [7] class count, [8] record bytes, [9..15] zero;
 *   then count records of record bytes each:
 *     int32 label, height × width × channels uint8 pixels (HWC), zero
 *     padding to a multiple of 4 bytes. */
#ifndef DDPTRAIN_DATA_IMAGE_SHARD_H
#define DDPTRAIN_DATA_IMAGE_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/status.h"

#define DDP_IMG_MAGIC 0x474D4944u /* "DIMG" as bytes */
#define DDP_IMG_VERSION 1
#define DDP_IMG_HEADER_BYTES 64
#define DDP_IMG_MAX_SIDE 65535
#define DDP_IMG_MAX_CHANNELS 4
#define DDP_IMG_MAX_IMAGE_BYTES (1 << 28) /* 256 MiB: beyond any training image */
#define DDP_IMG_MAX_CLASSES (1 << 24)     /* as for record files (§5.2) */

typedef struct ddp_image_shape {
  int32_t height, width, channels, n_classes;
} ddp_image_shape_t;

/* An open shard: records point into the read-only mapping. */
typedef struct ddp_image_shard {
  ddp_image_shape_t shape;
  int64_t count;
  int64_t image_bytes;  /* height × width × channels */
  int64_t record_bytes; /* 4 + image_bytes rounded up to 4 */
  const unsigned char *records;
  void *map;
  size_t map_bytes;
  char *name;
} ddp_image_shard_t;

/* Record bytes for a shape: 4 (the label) + the pixels, padded to 4. */
int64_t ddp_image_record_bytes(const ddp_image_shape_t *shape);

/* Maps and checks path: every header field, the size against the count, and
 * every record's label and padding. On failure *s is zeroed and the message
 * (DDP_ERR_FORMAT) names the file, the field and its byte offset. */
ddp_status_t ddp_image_shard_open(ddp_image_shard_t *s, const char *path);
void ddp_image_shard_close(ddp_image_shard_t *s);

static inline const uint8_t *ddp_image_shard_pixels(const ddp_image_shard_t *s, int64_t i) {
  return s->records + i * s->record_bytes + 4;
}
int32_t ddp_image_shard_label(const ddp_image_shard_t *s, int64_t i);

/* Streaming writer: records go to "<path>.tmp"; finish() writes the count
 * into the header, fsyncs and renames to path. Any failure, and abort(),
 * removes the temporary file, so path is either complete or untouched. */
typedef struct ddp_image_writer ddp_image_writer_t;

ddp_status_t ddp_image_writer_open(ddp_image_writer_t **w, const char *path,
                                   const ddp_image_shape_t *shape);
/* Appends one image of the shape's image bytes; a label outside
 * [0, n_classes) is refused (the writer stays usable). */
ddp_status_t ddp_image_writer_add(ddp_image_writer_t *w, const uint8_t *pixels, int32_t label);
int64_t ddp_image_writer_count(const ddp_image_writer_t *w);
/* Completes the file and frees w, whatever the outcome. A writer without
 * records is refused (a reader would refuse the file) and removed. */
ddp_status_t ddp_image_writer_finish(ddp_image_writer_t *w);
void ddp_image_writer_abort(ddp_image_writer_t *w);

#endif
