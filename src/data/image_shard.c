/* Image shards (docs/design.md §5.6, a contract; layout in image_shard.h):
 * the reader, which maps a shard and checks all of it at open, and the
 * atomic streaming writer.
 *
 * Labels and padding are checked at open, not when a record is first used:
 * a bad label found hours into a run would waste the run, and the check
 * costs one sequential pass over the file (records are smaller than a page,
 * so it reads every page once) that also warms the page cache for the first
 * epoch. Token shards do the same for their tokens (§5.1).
 *
 * Bytes are decoded explicitly as little-endian, so the format means the
 * same on every host. Every message names the file, the field and its byte
 * offset, because "bad shard" without a location sends the user to a hex
 * editor. */
#include "data/image_shard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ddptrain/check.h"

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
  p[2] = (unsigned char)(v >> 16);
  p[3] = (unsigned char)(v >> 24);
}

int64_t ddp_image_record_bytes(const ddp_image_shape_t *shape) {
  const int64_t image = (int64_t)shape->height * shape->width * shape->channels;
  return 4 + (image + 3) / 4 * 4;
}

int32_t ddp_image_shard_label(const ddp_image_shard_t *s, int64_t i) {
  return (int32_t)le32(s->records + i * s->record_bytes);
}

/* The shape fields' bounds, shared by the reader (naming the header word)
 * and the writer; returns the name of the first field out of bounds. */
static const char *bad_shape_field(const ddp_image_shape_t *sh, int *word) {
  if (sh->height < 1 || sh->height > DDP_IMG_MAX_SIDE) return *word = 4, "height";
  if (sh->width < 1 || sh->width > DDP_IMG_MAX_SIDE) return *word = 5, "width";
  if (sh->channels < 1 || sh->channels > DDP_IMG_MAX_CHANNELS) return *word = 6, "channels";
  if (sh->n_classes < 1 || sh->n_classes > DDP_IMG_MAX_CLASSES) return *word = 7, "class count";
  if ((int64_t)sh->height * sh->width * sh->channels > DDP_IMG_MAX_IMAGE_BYTES)
    return *word = 4, "height × width × channels";
  return NULL;
}

static const char *shape_bounds_text(void) {
  return "height and width 1..65535, channels 1..4, classes 1..2^24, at most 2^28 bytes an image";
}

/* ---- reader ------------------------------------------------------------------ */

/* Every record's label in [0, n_classes) and its padding zero. */
static ddp_status_t check_records(const ddp_image_shard_t *s, const char *path) {
  const int64_t pad_from = 4 + s->image_bytes;
  for (int64_t i = 0; i < s->count; ++i) {
    const unsigned char *r = s->records + i * s->record_bytes;
    const long long at = (long long)(DDP_IMG_HEADER_BYTES + i * s->record_bytes);
    const int32_t label = (int32_t)le32(r);
    if (label < 0 || label >= s->shape.n_classes)
      DDP_FAIL(DDP_ERR_FORMAT,
               "image shard '%s': the label of record %lld at byte %lld is %d, outside "
               "[0, %d) (the class count, byte 28)",
               path, (long long)i, at, (int)label, (int)s->shape.n_classes);
    for (int64_t b = pad_from; b < s->record_bytes; ++b)
      if (r[b] != 0)
        DDP_FAIL(DDP_ERR_FORMAT,
                 "image shard '%s': padding byte %lld of record %lld (byte %lld) is %d, not 0",
                 path, (long long)(b - pad_from), (long long)i, at + (long long)b, (int)r[b]);
  }
  return DDP_OK;
}

/* The header fields against the file size; size ≥ the header. */
static ddp_status_t check_header(ddp_image_shard_t *s, const char *path, const unsigned char *h,
                                 long long size) {
  uint32_t w[16];
  for (int i = 0; i < 16; ++i) w[i] = le32(h + 4 * i);
  if (w[0] != DDP_IMG_MAGIC)
    DDP_FAIL(DDP_ERR_FORMAT,
             "image shard '%s': bad magic 0x%08x at byte 0 (expected 0x%08x, \"DIMG\"): not an "
             "image shard",
             path, (unsigned)w[0], DDP_IMG_MAGIC);
  if (w[1] != DDP_IMG_VERSION)
    DDP_FAIL(DDP_ERR_FORMAT, "image shard '%s': unsupported version %u at byte 4 (expected %d)",
             path, (unsigned)w[1], DDP_IMG_VERSION);
  if (w[2] != DDP_IMG_HEADER_BYTES)
    DDP_FAIL(DDP_ERR_FORMAT, "image shard '%s': header size %u at byte 8 (expected %d)", path,
             (unsigned)w[2], DDP_IMG_HEADER_BYTES);
  if (w[3] == 0 || w[3] > INT32_MAX)
    DDP_FAIL(DDP_ERR_FORMAT, "image shard '%s': record count %u at byte 12 is not in 1..%d", path,
             (unsigned)w[3], INT32_MAX);
  /* every shape word fits an int32 only if it is within bounds anyway */
  for (int i = 4; i <= 7; ++i)
    if (w[i] > INT32_MAX) w[i] = 0;
  s->shape = (ddp_image_shape_t){(int32_t)w[4], (int32_t)w[5], (int32_t)w[6], (int32_t)w[7]};
  int word = 0;
  const char *field = bad_shape_field(&s->shape, &word);
  if (field)
    DDP_FAIL(DDP_ERR_FORMAT, "image shard '%s': %s %u at byte %d is out of bounds (%s)", path,
             field, (unsigned)le32(h + 4 * word), 4 * word, shape_bounds_text());
  s->count = w[3];
  s->image_bytes = (int64_t)s->shape.height * s->shape.width * s->shape.channels;
  s->record_bytes = ddp_image_record_bytes(&s->shape);
  if ((int64_t)w[8] != s->record_bytes)
    DDP_FAIL(DDP_ERR_FORMAT,
             "image shard '%s': record size %u at byte 32 disagrees with the shape %dx%dx%d "
             "(4 label bytes + pixels padded to 4 = %lld)",
             path, (unsigned)w[8], (int)s->shape.height, (int)s->shape.width,
             (int)s->shape.channels, (long long)s->record_bytes);
  for (int i = 9; i < 16; ++i)
    if (w[i] != 0)
      DDP_FAIL(DDP_ERR_FORMAT, "image shard '%s': reserved header word %d at byte %d is %u, not 0",
               path, i, 4 * i, (unsigned)w[i]);
  const long long want = DDP_IMG_HEADER_BYTES + (long long)s->count * s->record_bytes;
  if (size != want)
    DDP_FAIL(DDP_ERR_FORMAT,
             "image shard '%s': the header says %lld records of %lld bytes (bytes 12 and 32) = "
             "%lld bytes in all, but the file has %lld (%s)",
             path, (long long)s->count, (long long)s->record_bytes, want, size,
             size < want ? "truncated" : "trailing data");
  return DDP_OK;
}

ddp_status_t ddp_image_shard_open(ddp_image_shard_t *s, const char *path) {
  if (!s || !path) DDP_FAIL(DDP_ERR_INVALID_ARG, "image_shard_open: NULL argument");
  memset(s, 0, sizeof *s);
  ddp_status_t st = DDP_OK;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) DDP_FAIL(DDP_ERR_IO, "cannot open image shard '%s': %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, close_fd, "cannot stat image shard '%s': %s", path,
                  strerror(errno));
  if (!S_ISREG(sb.st_mode))
    DDP_FAIL_GOTO(st, DDP_ERR_IO, close_fd, "image shard '%s' is not a regular file", path);
  const long long size = (long long)sb.st_size;
  if (size < DDP_IMG_HEADER_BYTES)
    DDP_FAIL_GOTO(st, DDP_ERR_FORMAT, close_fd,
                  "image shard '%s': truncated header: the file has %lld bytes, the header "
                  "needs %d",
                  path, size, DDP_IMG_HEADER_BYTES);
  if ((unsigned long long)size > SIZE_MAX)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, close_fd, "image shard '%s': %lld bytes cannot be mapped here",
                  path, size);
  /* Read-only and private: records are used in place, and the page cache
   * (not the heap) holds them, so ranks on one node share one copy. */
  void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, close_fd, "cannot map image shard '%s' (%lld bytes): %s", path,
                  size, strerror(errno));
  s->map = map;
  s->map_bytes = (size_t)size;
  s->records = (const unsigned char *)map + DDP_IMG_HEADER_BYTES;
  DDP_CHECK_GOTO(check_header(s, path, map, size), st, unmap);
  DDP_CHECK_GOTO(check_records(s, path), st, unmap);
  if (!(s->name = strdup(path)))
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, unmap, "image shard '%s': out of memory", path);
  close(fd);
  return DDP_OK;
unmap:
  munmap(map, (size_t)size);
close_fd:
  close(fd);
  memset(s, 0, sizeof *s);
  return st;
}

void ddp_image_shard_close(ddp_image_shard_t *s) {
  if (!s) return;
  if (s->map) munmap(s->map, s->map_bytes);
  free(s->name);
  memset(s, 0, sizeof *s);
}

/* ---- writer ------------------------------------------------------------------ */

struct ddp_image_writer {
  ddp_image_shape_t shape;
  int64_t count, image_bytes, record_bytes;
  char *path, *tmp;
  unsigned char *record; /* one record, its padding kept zero */
  FILE *f;
};

ddp_status_t ddp_image_writer_open(ddp_image_writer_t **out, const char *path,
                                   const ddp_image_shape_t *shape) {
  if (!out || !path || !*path || !shape)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "image_writer_open: NULL argument");
  *out = NULL;
  /* checked before a file exists: bad input leaves nothing behind */
  int word = 0;
  const char *field = bad_shape_field(shape, &word);
  if (field)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "image shard '%s': the %s is out of bounds (%s)", path, field,
             shape_bounds_text());
  ddp_image_writer_t *w = calloc(1, sizeof *w);
  if (!w) DDP_FAIL(DDP_ERR_OOM, "image shard '%s': out of memory", path);
  ddp_status_t st = DDP_OK;
  w->shape = *shape;
  w->image_bytes = (int64_t)shape->height * shape->width * shape->channels;
  w->record_bytes = ddp_image_record_bytes(shape);
  const size_t plen = strlen(path);
  w->path = strdup(path);
  w->tmp = malloc(plen + 5);
  w->record = calloc(1, (size_t)w->record_bytes);
  if (!w->path || !w->tmp || !w->record)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, fail, "image shard '%s': out of memory", path);
  memcpy(w->tmp, path, plen);
  memcpy(w->tmp + plen, ".tmp", 5);
  if (!(w->f = fopen(w->tmp, "wbe"))) {
    DDP_LOG_ERROR("image shard '%s': cannot create '%s': %s", path, w->tmp, strerror(errno));
    free(w->tmp); /* not ours: abort must not remove a file of that name */
    w->tmp = NULL;
    st = DDP_ERR_IO;
    goto fail;
  }
  /* the header is rewritten with the count by finish() */
  unsigned char header[DDP_IMG_HEADER_BYTES] = {0};
  if (fwrite(header, 1, sizeof header, w->f) != sizeof header) {
    st = DDP_ERR_IO;
    DDP_LOG_ERROR("image shard '%s': writing '%s' failed: %s", path, w->tmp, strerror(errno));
    ddp_image_writer_abort(w);
    return st;
  }
  *out = w;
  return DDP_OK;
fail:
  ddp_image_writer_abort(w);
  return st;
}

ddp_status_t ddp_image_writer_add(ddp_image_writer_t *w, const uint8_t *pixels, int32_t label) {
  if (!w || !pixels) DDP_FAIL(DDP_ERR_INVALID_ARG, "image_writer_add: NULL argument");
  if (label < 0 || label >= w->shape.n_classes)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "image shard '%s': label %d of record %lld is outside [0, %d)",
             w->path, (int)label, (long long)w->count, (int)w->shape.n_classes);
  if (w->count >= INT32_MAX)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "image shard '%s': more than %d records do not fit the header's count", w->path,
             INT32_MAX);
  put_le32(w->record, (uint32_t)label);
  memcpy(w->record + 4, pixels, (size_t)w->image_bytes);
  if (fwrite(w->record, 1, (size_t)w->record_bytes, w->f) != (size_t)w->record_bytes)
    DDP_FAIL(DDP_ERR_IO, "image shard '%s': writing record %lld to '%s' failed: %s", w->path,
             (long long)w->count, w->tmp, strerror(errno));
  w->count++;
  return DDP_OK;
}

int64_t ddp_image_writer_count(const ddp_image_writer_t *w) {
  return w ? w->count : 0;
}

/* Makes the rename durable; best effort, as for token shards (shard.c). */
static void sync_parent_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
  if (!dir) return;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)fsync(fd);
    close(fd);
  }
  free(dir);
}

ddp_status_t ddp_image_writer_finish(ddp_image_writer_t *w) {
  if (!w) DDP_FAIL(DDP_ERR_INVALID_ARG, "image_writer_finish: NULL writer");
  ddp_status_t st = DDP_OK;
  if (w->count == 0)
    DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, fail,
                  "image shard '%s': refusing to write a shard without records", w->path);
  unsigned char header[DDP_IMG_HEADER_BYTES] = {0};
  const uint32_t words[9] = {DDP_IMG_MAGIC,
                             DDP_IMG_VERSION,
                             DDP_IMG_HEADER_BYTES,
                             (uint32_t)w->count,
                             (uint32_t)w->shape.height,
                             (uint32_t)w->shape.width,
                             (uint32_t)w->shape.channels,
                             (uint32_t)w->shape.n_classes,
                             (uint32_t)w->record_bytes};
  for (int i = 0; i < 9; ++i) put_le32(header + 4 * i, words[i]);
  if (fflush(w->f) != 0 || fseek(w->f, 0, SEEK_SET) != 0 ||
      fwrite(header, 1, sizeof header, w->f) != sizeof header || fflush(w->f) != 0 ||
      fsync(fileno(w->f)) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, fail, "image shard '%s': writing '%s' failed: %s", w->path,
                  w->tmp, strerror(errno));
  const int rc = fclose(w->f);
  w->f = NULL;
  if (rc != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, fail, "image shard '%s': closing '%s' failed: %s", w->path,
                  w->tmp, strerror(errno));
  if (rename(w->tmp, w->path) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_IO, fail, "image shard '%s': cannot rename '%s' to it: %s", w->path,
                  w->tmp, strerror(errno));
  sync_parent_dir(w->path);
  free(w->tmp);
  w->tmp = NULL; /* renamed: abort must not remove it */
fail:
  ddp_image_writer_abort(w);
  return st;
}

void ddp_image_writer_abort(ddp_image_writer_t *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  if (w->tmp) unlink(w->tmp);
  free(w->tmp);
  free(w->path);
  free(w->record);
  free(w);
}
