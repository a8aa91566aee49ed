/* ddpprep --images FORMAT: converts image data sets to image shards
 * (docs/design.md §5.6), PREFIX_train.img and, with --val-frac, PREFIX_val.img.
 *
 *   idx       MNIST's IDX pair (also Fashion-MNIST): an images file, magic
 *             0x00000803 with big-endian count, rows and columns, and a
 *             labels file, magic 0x00000801 with a count; given in either
 *             order. The class count is the largest label + 1.
 *   cifar10   CIFAR-10 binary batches: records of 1 label byte and
 *   cifar100  3072 pixel bytes (1024 red, then green, then blue, rows in
 *             order); CIFAR-100's records start with a coarse and a fine
 *             label byte, and the fine label (100 classes) is kept. Planes
 *             (CHW) are interleaved to the shards' HWC.
 *   folder    a folder per class of PNG and JPEG files (ddpprep_folder.c),
 *             which also writes PREFIX_classes.txt through this output.
 *
 * IDX and CIFAR inputs are read through zlib's gzread, which reads gzip and plain
 * files alike, so Debian's gzipped IDX files need no unpacking. Input is
 * streamed: one image at a time besides the labels of an IDX pair. Byte
 * offsets in messages count the uncompressed stream.
 *
 * A record's split is chosen from its pixels alone (ddpprep_split.h), so
 * duplicate images never straddle train and validation. Output is written by
 * the atomic image writer; on any failure both outputs are removed (a
 * finished train shard too, if the val shard then fails). */
#include "tools/ddpprep_images.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/image_shard.h"
#include "tools/ddpprep_folder.h"
#include "tools/ddpprep_split.h"

enum { RC_OK = 0, RC_RUNTIME = 1, RC_USAGE = 2 };
enum { IDX_IMAGES = 0x00000803, IDX_LABELS = 0x00000801 };
enum { CIFAR_SIDE = 32, CIFAR_PLANE = CIFAR_SIDE * CIFAR_SIDE, CIFAR_PIXELS = 3 * CIFAR_PLANE };

/* The signal flag main() passes in: a read that a signal interrupts is
 * reported as the interruption, not as a read error. */
static const volatile sig_atomic_t *g_stop;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("ddpprep: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

int ddpprep_images_known_format(const char *name) {
  return strcmp(name, "idx") == 0 || strcmp(name, "cifar10") == 0 ||
         strcmp(name, "cifar100") == 0 || strcmp(name, "folder") == 0;
}

/* ---- input ------------------------------------------------------------------ */

typedef struct src {
  gzFile f;
  const char *path;
  long long at; /* bytes read so far, uncompressed */
} src_t;

static int src_open(src_t *s, const char *path) {
  memset(s, 0, sizeof *s);
  s->path = path;
  struct stat sb;
  if (stat(path, &sb) != 0) {
    say("cannot read input '%s': %s", path, strerror(errno));
    return -1;
  }
  if (S_ISDIR(sb.st_mode)) {
    say("cannot read input '%s': it is a directory", path);
    return -1;
  }
  errno = 0;
  if (!(s->f = gzopen(path, "rb"))) {
    say("cannot read input '%s': %s", path, errno ? strerror(errno) : "out of memory");
    return -1;
  }
  gzbuffer(s->f, 1 << 17);
  return 0;
}

static void src_close(src_t *s) {
  if (s->f) gzclose(s->f);
  s->f = NULL;
}

/* Reads up to n bytes; *got says how many (fewer only at the end of the
 * input). -1 on a read or decompression error, already reported. */
static int src_read(src_t *s, void *buf, size_t n, size_t *got) {
  *got = 0;
  while (*got < n) {
    const size_t want = n - *got > (1u << 30) ? (1u << 30) : n - *got;
    const int r = gzread(s->f, (char *)buf + *got, (unsigned)want);
    if (r < 0 && g_stop && *g_stop) {
      say("interrupted by signal %d while reading '%s'", (int)*g_stop, s->path);
      return -1;
    }
    if (r < 0) {
      int errnum = 0;
      const char *msg = gzerror(s->f, &errnum);
      /* zlib's message starts with the path, which ours already names */
      const size_t plen = strlen(s->path);
      if (strncmp(msg, s->path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0) msg += plen + 2;
      say("cannot read input '%s' (reading from byte %lld%s): %s", s->path, s->at + (long long)*got,
          gzdirect(s->f) ? "" : " of its uncompressed data",
          errnum == Z_ERRNO ? strerror(errno) : msg);
      return -1;
    }
    if (r == 0) break;
    *got += (size_t)r;
  }
  s->at += (long long)*got;
  return 0;
}

/* Exactly n bytes of `what`, or a message that the input is truncated. */
static int src_need(src_t *s, void *buf, size_t n, const char *what) {
  const long long from = s->at;
  size_t got;
  if (src_read(s, buf, n, &got) != 0) return -1;
  if (got < n) {
    say("input '%s' is truncated: %s at byte %lld%s needs %zu bytes, the file ends after %zu",
        s->path, what, from, gzdirect(s->f) ? "" : " (uncompressed)", n, got);
    return -1;
  }
  return 0;
}

/* Nothing may follow the last record. */
static int src_expect_end(src_t *s, const char *after) {
  unsigned char b;
  size_t got;
  if (src_read(s, &b, 1, &got) != 0) return -1;
  if (got != 0) {
    say("input '%s' has trailing data at byte %lld, after %s", s->path, s->at - 1, after);
    return -1;
  }
  return 0;
}

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* ---- output ----------------------------------------------------------------- */

typedef struct ddpprep_img_out {
  const ddpprep_images_opts_t *o;
  char *path[2]; /* train, val */
  ddp_image_writer_t *w[2];
  ddp_image_shape_t shape;
  const volatile sig_atomic_t *stop;
  char *side_path, *side_text, *note; /* ddpprep_img_out_side; NULL: none */
} out_t;

static int out_open(out_t *out, const ddp_image_shape_t *shape) {
  static const char *const k_split[2] = {"train", "val"};
  out->shape = *shape;
  for (int i = 0; i < 2; ++i) {
    if (i == 1 && out->o->val_frac <= 0) break;
    const size_t len = strlen(out->o->prefix) + 16;
    if (!(out->path[i] = malloc(len))) {
      say("out of memory");
      return -1;
    }
    snprintf(out->path[i], len, "%s_%s.img", out->o->prefix, k_split[i]);
    if (ddp_image_writer_open(&out->w[i], out->path[i], shape) != DDP_OK) {
      say("cannot write '%s' (see the message above)", out->path[i]);
      return -1;
    }
  }
  return 0;
}

static int out_add(out_t *out, const uint8_t *pixels, size_t n, int32_t label) {
  if (*out->stop) {
    say("interrupted by signal %d", (int)*out->stop);
    return -1;
  }
  const int val = ddpprep_is_val(out->o->seed, out->o->val_frac, pixels, n);
  if (ddp_image_writer_add(out->w[val], pixels, label) != DDP_OK) {
    say("cannot write '%s' (see the message above)", out->path[val]);
    return -1;
  }
  return 0;
}

int ddpprep_img_out_open(ddpprep_img_out_t *out, const ddp_image_shape_t *shape) {
  return out_open(out, shape);
}

int ddpprep_img_out_add(ddpprep_img_out_t *out, const uint8_t *pixels, size_t n, int32_t label) {
  return out_add(out, pixels, n, label);
}

int ddpprep_img_out_side(ddpprep_img_out_t *out, const char *suffix, const char *text,
                         const char *note) {
  const size_t len = strlen(out->o->prefix) + strlen(suffix) + 2;
  if (!(out->side_path = malloc(len)) || !(out->side_text = strdup(text)) ||
      !(out->note = strdup(note))) {
    say("out of memory");
    return -1;
  }
  snprintf(out->side_path, len, "%s_%s", out->o->prefix, suffix);
  return 0;
}

/* Writes the side file to "<path>.tmp" and fsyncs it; the rename comes
 * after the shards'. On failure nothing is left. */
static int side_write(const out_t *out, const char *tmp) {
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    say("cannot write '%s': %s", tmp, strerror(errno));
    return -1;
  }
  const int ok = fputs(out->side_text, f) >= 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
  const int err = errno;
  if (fclose(f) != 0 || !ok) {
    say("cannot write '%s': %s", tmp, strerror(ok ? errno : err));
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* Renames both outputs (and the side file) into place, or removes every
 * trace of them. */
static int out_close(out_t *out, int ok) {
  const ddp_image_shape_t *shape = &out->shape;
  const int64_t n_train = ddp_image_writer_count(out->w[0]);
  const int64_t n_val = ddp_image_writer_count(out->w[1]);
  char *side_tmp = NULL;
  if (ok && n_train == 0) {
    say("every record went to validation: lower --val-frac");
    ok = 0;
  }
  if (ok && out->side_path) {
    const size_t len = strlen(out->side_path) + 5;
    ok = (side_tmp = malloc(len)) != NULL;
    if (ok) snprintf(side_tmp, len, "%s.tmp", out->side_path);
    ok = ok && side_write(out, side_tmp) == 0;
    if (!ok) {
      free(side_tmp);
      side_tmp = NULL;
    }
  }
  if (ok) {
    ok = ddp_image_writer_finish(out->w[0]) == DDP_OK;
    out->w[0] = NULL;
  }
  if (ok && n_val > 0) {
    ok = ddp_image_writer_finish(out->w[1]) == DDP_OK;
    out->w[1] = NULL;
    if (!ok) unlink(out->path[0]);
  }
  if (side_tmp && ok && rename(side_tmp, out->side_path) != 0) {
    say("cannot rename '%s' to '%s': %s", side_tmp, out->side_path, strerror(errno));
    unlink(out->path[0]);
    if (n_val > 0) unlink(out->path[1]);
    ok = 0;
  }
  if (side_tmp && !ok) unlink(side_tmp);
  for (int i = 0; i < 2; ++i) ddp_image_writer_abort(out->w[i]);
  if (ok)
    fprintf(stderr,
            "ddpprep: images: %lld (train %lld, val %lld), %dx%dx%d (height x width x channels), "
            "%d classes; wrote %s%s%s%s%s%s%s\n",
            (long long)(n_train + n_val), (long long)n_train, (long long)n_val, (int)shape->height,
            (int)shape->width, (int)shape->channels, (int)shape->n_classes, out->path[0],
            n_val > 0 ? " and " : "", n_val > 0 ? out->path[1] : "",
            out->side_path ? ", class names in " : "", out->side_path ? out->side_path : "",
            out->note ? "; " : "", out->note ? out->note : "");
  free(out->path[0]);
  free(out->path[1]);
  free(side_tmp);
  free(out->side_path);
  free(out->side_text);
  free(out->note);
  return ok ? RC_OK : RC_RUNTIME;
}

/* ---- idx -------------------------------------------------------------------- */

/* Reads one IDX header: its magic says which of the pair it is. */
static int idx_header(src_t *s, uint32_t *magic, uint32_t dims[3]) {
  unsigned char h[16];
  if (src_need(s, h, 4, "the IDX magic") != 0) return -1;
  *magic = be32(h);
  if (*magic != IDX_IMAGES && *magic != IDX_LABELS) {
    say("input '%s': magic 0x%08x at byte 0 is neither IDX images (0x%08x) nor IDX labels "
        "(0x%08x) of unsigned bytes",
        s->path, (unsigned)*magic, IDX_IMAGES, IDX_LABELS);
    return -1;
  }
  const int n_dims = *magic == IDX_IMAGES ? 3 : 1;
  if (src_need(s, h + 4, 4 * (size_t)n_dims, "the IDX dimensions") != 0) return -1;
  for (int d = 0; d < n_dims; ++d) dims[d] = be32(h + 4 + 4 * d);
  return 0;
}

static int run_idx(out_t *out, char *const *paths) {
  src_t s[2];
  int rc = -1;
  uint32_t magic[2], dims[2][3];
  unsigned char *labels = NULL, *img = NULL;
  memset(s, 0, sizeof s);
  for (int i = 0; i < 2; ++i)
    if (src_open(&s[i], paths[i]) != 0 || idx_header(&s[i], &magic[i], dims[i]) != 0) goto done;
  if (magic[0] == magic[1]) {
    say("inputs '%s' and '%s' are both IDX %s; --images idx needs one images and one labels file",
        paths[0], paths[1], magic[0] == IDX_IMAGES ? "images" : "labels");
    goto done;
  }
  src_t *si = magic[0] == IDX_IMAGES ? &s[0] : &s[1], *sl = magic[0] == IDX_IMAGES ? &s[1] : &s[0];
  const uint32_t *di = magic[0] == IDX_IMAGES ? dims[0] : dims[1];
  const uint32_t n = di[0], n_labels = magic[0] == IDX_IMAGES ? dims[1][0] : dims[0][0];
  if (n == 0 || n > INT32_MAX) {
    say("input '%s': image count %u at byte 4 is not in 1..%d", si->path, (unsigned)n, INT32_MAX);
    goto done;
  }
  if (n_labels != n) {
    say("inputs disagree: '%s' holds %u images (byte 4), but '%s' holds %u labels (byte 4)",
        si->path, (unsigned)n, sl->path, (unsigned)n_labels);
    goto done;
  }
  for (int d = 1; d <= 2; ++d)
    if (di[d] == 0 || di[d] > DDP_IMG_MAX_SIDE) {
      say("input '%s': %s %u at byte %d is not in 1..%d", si->path, d == 1 ? "rows" : "columns",
          (unsigned)di[d], 4 + 4 * d, DDP_IMG_MAX_SIDE);
      goto done;
    }
  if ((uint64_t)di[1] * di[2] > DDP_IMG_MAX_IMAGE_BYTES) {
    say("input '%s': %ux%u images exceed %d bytes", si->path, (unsigned)di[1], (unsigned)di[2],
        DDP_IMG_MAX_IMAGE_BYTES);
    goto done;
  }
  /* the labels whole, for the class count, before anything is written */
  if (!(labels = malloc(n))) {
    say("out of memory for %u labels", (unsigned)n);
    goto done;
  }
  if (src_need(sl, labels, n, "the labels") != 0 || src_expect_end(sl, "the last label") != 0)
    goto done;
  int max_label = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (labels[i] > max_label) max_label = labels[i];
  const ddp_image_shape_t shape = {(int32_t)di[1], (int32_t)di[2], 1, max_label + 1};
  const size_t bytes = (size_t)di[1] * di[2];
  if (!(img = malloc(bytes))) {
    say("out of memory");
    goto done;
  }
  if (out_open(out, &shape) != 0) goto done;
  char what[48];
  for (uint32_t i = 0; i < n; ++i) {
    snprintf(what, sizeof what, "image %u", (unsigned)i);
    if (src_need(si, img, bytes, what) != 0 || out_add(out, img, bytes, labels[i]) != 0) goto done;
  }
  if (src_expect_end(si, "the last image") != 0) goto done;
  rc = 0;
done:
  free(labels);
  free(img);
  src_close(&s[0]);
  src_close(&s[1]);
  return rc;
}

/* ---- cifar ------------------------------------------------------------------ */

/* Batches of label byte(s) + 3072 CHW pixels, in the order given. */
static int run_cifar(out_t *out, char *const *paths, int n_paths, int hundred) {
  const size_t head = hundred ? 2 : 1, rec = head + CIFAR_PIXELS;
  const int n_classes = hundred ? 100 : 10;
  const ddp_image_shape_t shape = {CIFAR_SIDE, CIFAR_SIDE, 3, n_classes};
  unsigned char in[2 + CIFAR_PIXELS], hwc[CIFAR_PIXELS];
  if (out_open(out, &shape) != 0) return -1;
  for (int p = 0; p < n_paths; ++p) {
    src_t s;
    if (src_open(&s, paths[p]) != 0) return -1;
    int rc = 0;
    for (long long r = 0; rc == 0; ++r) {
      const long long at = s.at;
      size_t got;
      if (src_read(&s, in, rec, &got) != 0) {
        rc = -1;
      } else if (got == 0 && r == 0) {
        say("input '%s' holds no CIFAR records (it is empty)", s.path);
        rc = -1;
      } else if (got == 0) {
        break;
      } else if (got < rec) {
        say("input '%s' is truncated: record %lld at byte %lld has %zu of its %zu bytes", s.path, r,
            at, got, rec);
        rc = -1;
      } else if (hundred && in[0] >= 20) {
        say("input '%s': coarse label %d of record %lld at byte %lld is not in 0..19", s.path,
            (int)in[0], r, at);
        rc = -1;
      } else if (in[head - 1] >= n_classes) {
        say("input '%s': %slabel %d of record %lld at byte %lld is not in 0..%d", s.path,
            hundred ? "fine " : "", (int)in[head - 1], r, at + (long long)head - 1, n_classes - 1);
        rc = -1;
      } else {
        /* CHW planes to HWC pixels */
        const unsigned char *px = in + head;
        for (int i = 0; i < CIFAR_PLANE; ++i)
          for (int c = 0; c < 3; ++c) hwc[3 * i + c] = px[c * CIFAR_PLANE + i];
        rc = out_add(out, hwc, sizeof hwc, in[head - 1]);
      }
    }
    src_close(&s);
    if (rc != 0) return -1;
  }
  return 0;
}

/* ---- entry ------------------------------------------------------------------ */

int ddpprep_images_run(const ddpprep_images_opts_t *o, char *const *paths, int n_paths,
                       const volatile sig_atomic_t *stop) {
  const int idx = strcmp(o->format, "idx") == 0, folder = strcmp(o->format, "folder") == 0;
  if (folder) {
    const int rc = ddpprep_folder_check(o, n_paths);
    if (rc != 0) return rc;
  }
  if (idx && n_paths != 2) {
    say("--images idx needs two inputs, an IDX images and an IDX labels file (got %d)", n_paths);
    return RC_USAGE;
  }
  if (n_paths < 1) {
    say("--images %s needs at least one input batch file", o->format);
    return RC_USAGE;
  }
  out_t out;
  memset(&out, 0, sizeof out);
  out.o = o;
  out.stop = stop;
  g_stop = stop;
  const int rc = folder ? ddpprep_folder_run(o, paths[0], &out, stop)
                 : idx  ? run_idx(&out, paths)
                        : run_cifar(&out, paths, n_paths, strcmp(o->format, "cifar100") == 0);
  return out_close(&out, rc == 0);
}
