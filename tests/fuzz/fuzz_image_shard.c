/* Fuzz target: the image shard reader (src/data/image_shard.c;
 * docs/design.md §5.6).
 *
 * The input is a whole shard file. When the reader accepts it, the shard
 * must keep the promises of its header: a shape within bounds, a record
 * size of 4 + the pixels padded to 4, exactly header + count × record size
 * bytes mapped, and every label in [0, classes). Every pixel is read, so a
 * record that reaches past the mapping is caught by the sanitizers. A
 * rejected file leaves the shard zeroed. */
#include "fuzz_input.h"

#include <string.h>

#include "data/image_shard.h"

const char fuzz_target_name[] = "image_shard";

/* Where the pixel sums go, so the reads cannot be optimised away. */
static volatile unsigned g_sink;

static void check_shard(const ddp_image_shard_t *s) {
  const ddp_image_shape_t *sh = &s->shape;
  FUZZ_ASSERT(s->count >= 1);
  FUZZ_ASSERT(sh->height >= 1 && sh->height <= DDP_IMG_MAX_SIDE);
  FUZZ_ASSERT(sh->width >= 1 && sh->width <= DDP_IMG_MAX_SIDE);
  FUZZ_ASSERT(sh->channels >= 1 && sh->channels <= DDP_IMG_MAX_CHANNELS);
  FUZZ_ASSERT(sh->n_classes >= 1 && sh->n_classes <= DDP_IMG_MAX_CLASSES);
  FUZZ_ASSERT(s->image_bytes == (int64_t)sh->height * sh->width * sh->channels);
  FUZZ_ASSERT(s->record_bytes == ddp_image_record_bytes(sh) && s->record_bytes % 4 == 0);
  FUZZ_ASSERT((int64_t)s->map_bytes == DDP_IMG_HEADER_BYTES + s->count * s->record_bytes);
  unsigned sum = 0;
  for (int64_t i = 0; i < s->count; ++i) {
    const int32_t label = ddp_image_shard_label(s, i);
    FUZZ_ASSERT(label >= 0 && label < sh->n_classes);
    const uint8_t *px = ddp_image_shard_pixels(s, i);
    for (int64_t k = 0; k < s->image_bytes; ++k) sum += px[k];
  }
  g_sink = sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[80];
  fuzz_quiet_log();
  fuzz_write_input(data, size, path, sizeof path);
  ddp_image_shard_t s;
  if (ddp_image_shard_open(&s, path) == DDP_OK) {
    check_shard(&s);
    ddp_image_shard_close(&s);
  } else {
    /* documented: a failed open leaves the shard zeroed */
    FUZZ_ASSERT(s.map == NULL && s.name == NULL && s.count == 0);
  }
  return 0;
}
