/* ddpprep --images folder DIR (ddpprep_folder.h): the layout of
 * torchvision's ImageFolder, DIR/<class>/.../<image>, to image shards.
 *
 * Classes are DIR's subfolders (symbolic links to folders count; names
 * starting with '.' do not), sorted byte-wise; class i gets label i and its
 * name is line i + 1 of PREFIX_classes.txt. Below a class folder, files are
 * found at any depth (subfolders reached through symbolic links are not
 * entered, so a link loop cannot recurse) and taken in byte-wise order of
 * their path. .png, .jpg and .jpeg (any case) are decoded; other files are
 * skipped and counted in the summary line. So the output depends on the
 * tree alone, never on readdir's order or on --threads.
 *
 * Every image is decoded to 8-bit RGB (or gray with --channels 1), resized
 * so its shorter side is --image-size and centre-cropped to a square
 * (image_resize.h). Images are decoded by --threads workers in batches;
 * each batch is then written in order, and the first failing file in that
 * order is the one reported, whatever the thread count.
 *
 * Failures are one line naming the folder or file and the cause: DIR not a
 * readable folder, fewer than two classes, a class without images, a class
 * name with a newline (it could not be one line of the names file), an
 * unreadable, corrupt or truncated image. The caller then removes every
 * output. */
#include <config.h>

#include "tools/ddpprep_folder.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "tools/image_decode.h"
#include "tools/image_resize.h"

enum { RC_USAGE = 2 };
enum { KIND_OTHER, KIND_PNG, KIND_JPEG };
/* Images per batch and thread: enough work per thread to amortise the
 * start, little enough memory (size^2 x channels bytes each). */
enum { BATCH_PER_THREAD = 32 };
/* Larger files are refused before reading: no image we decode needs more. */
#define MAX_FILE_BYTES ((long long)1 << 30)

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("ddpprep: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

int ddpprep_folder_check(const ddpprep_images_opts_t *o, int n_paths) {
  if (!DDP_HAVE_PNG || !DDP_HAVE_JPEG) {
    say("this ddpprep was built without %s; --images folder needs libpng (libpng-dev) and libjpeg "
        "(libjpeg62-turbo-dev)",
        !DDP_HAVE_PNG && !DDP_HAVE_JPEG ? "libpng and libjpeg"
        : !DDP_HAVE_PNG                 ? "libpng"
                                        : "libjpeg");
    return RC_USAGE;
  }
  if (n_paths != 1) {
    say("--images folder needs one input, the folder that holds a folder per class (got %d)",
        n_paths);
    return RC_USAGE;
  }
  if (o->image_size <= 0) {
    say("--images folder needs --image-size N (the side of the square images)");
    return RC_USAGE;
  }
  return 0;
}

/* ---- the tree ---------------------------------------------------------------- */

typedef struct item {
  char *path;
  int label, kind;
} item_t;

typedef struct list {
  item_t *v;
  size_t n, cap;
} list_t;

static int list_push(list_t *l, char *path, int label, int kind) {
  if (l->n == l->cap) {
    const size_t cap = l->cap ? 2 * l->cap : 64;
    item_t *v = realloc(l->v, cap * sizeof *v);
    if (!v) return -1;
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = (item_t){path, label, kind};
  return 0;
}

static char *join(const char *a, const char *b) {
  const size_t len = strlen(a) + strlen(b) + 2;
  char *p = malloc(len);
  if (p) snprintf(p, len, "%s/%s", a, b);
  return p;
}

static int kind_of(const char *name) {
  const char *dot = strrchr(name, '.');
  if (!dot) return KIND_OTHER;
  if (strcasecmp(dot, ".png") == 0) return KIND_PNG;
  if (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0) return KIND_JPEG;
  return KIND_OTHER;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_item(const void *a, const void *b) {
  return strcmp(((const item_t *)a)->path, ((const item_t *)b)->path);
}

/* The sorted names of dir's entries, less "." and ".."; NULL after a
 * message. */
static char **read_names(const char *dir, size_t *n) {
  DIR *d = opendir(dir);
  if (!d) {
    say("cannot read folder '%s': %s", dir, strerror(errno));
    return NULL;
  }
  char **v = NULL;
  size_t cap = 0;
  *n = 0;
  struct dirent *e;
  errno = 0;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 32;
      char **nv = realloc(v, cap * sizeof *v);
      if (!nv) goto oom;
      v = nv;
    }
    if (!(v[*n] = strdup(e->d_name))) goto oom;
    ++*n;
    errno = 0;
  }
  if (errno) {
    say("cannot read folder '%s': %s", dir, strerror(errno));
    goto fail;
  }
  closedir(d);
  d = NULL;
  if (*n) qsort(v, *n, sizeof *v, cmp_str);
  if (!v && !(v = calloc(1, sizeof *v))) goto oom; /* an empty folder: a list of none */
  return v;
oom:
  say("out of memory reading folder '%s'", dir);
fail:
  for (size_t i = 0; i < *n; ++i) free(v[i]);
  free(v);
  if (d) closedir(d);
  return NULL;
}

static void free_names(char **v, size_t n) {
  for (size_t i = 0; i < n; ++i) free(v[i]);
  free(v);
}

/* Adds the images under dir (at any depth) to l with label; counts the
 * other files in *skipped. */
static int walk(const char *dir, int label, list_t *l, long long *skipped) {
  size_t n;
  char **names = read_names(dir, &n);
  if (!names) return -1;
  int rc = 0;
  for (size_t i = 0; i < n && rc == 0; ++i) {
    char *path = join(dir, names[i]);
    struct stat sb;
    if (!path) {
      say("out of memory");
      rc = -1;
    } else if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
      rc = walk(path, label, l, skipped);
    } else if (stat(path, &sb) != 0) {
      say("cannot read '%s': %s", path, strerror(errno));
      rc = -1;
    } else if (!S_ISREG(sb.st_mode) || kind_of(names[i]) == KIND_OTHER) {
      ++*skipped;
    } else if (list_push(l, path, label, kind_of(names[i])) != 0) {
      say("out of memory");
      rc = -1;
    } else {
      path = NULL; /* the list owns it */
    }
    free(path);
  }
  free_names(names, n);
  return rc;
}

/* ---- decoding ---------------------------------------------------------------- */

typedef struct job {
  const ddpprep_images_opts_t *o;
  const item_t *items;
  size_t n;
  size_t image_bytes;
  uint8_t *pixels;  /* n x image_bytes */
  char (*err)[320]; /* per item; "" when it converted */
  atomic_size_t next;
  const volatile sig_atomic_t *stop;
} job_t;

static int read_file(const char *path, uint8_t **data, size_t *n, char *err, size_t err_len) {
  FILE *f = fopen(path, "rb");
  struct stat sb;
  *data = NULL;
  if (!f || fstat(fileno(f), &sb) != 0) {
    snprintf(err, err_len, "cannot read it: %s", strerror(errno));
    if (f) fclose(f);
    return -1;
  }
  if (sb.st_size > MAX_FILE_BYTES) {
    snprintf(err, err_len, "%lld bytes: larger than %lld", (long long)sb.st_size, MAX_FILE_BYTES);
    fclose(f);
    return -1;
  }
  *n = (size_t)sb.st_size;
  if (!(*data = malloc(*n ? *n : 1))) {
    snprintf(err, err_len, "out of memory for its %zu bytes", *n);
    fclose(f);
    return -1;
  }
  const size_t got = fread(*data, 1, *n, f);
  const int bad = ferror(f);
  fclose(f);
  if (got != *n) {
    snprintf(err, err_len, "cannot read it: %s", bad ? strerror(errno) : "it shrank while read");
    free(*data);
    *data = NULL;
    return -1;
  }
  return 0;
}

/* Decodes, resizes and crops item i into its slot; the reason in err[i]. */
static void convert_one(job_t *j, size_t i) {
  const item_t *it = &j->items[i];
  char *err = j->err[i];
  const size_t err_len = sizeof j->err[i];
  uint8_t *data;
  size_t n;
  if (read_file(it->path, &data, &n, err, err_len) != 0) return;
  ddp_decoded_t img;
  const int rc = it->kind == KIND_PNG
                     ? ddp_decode_png(data, n, j->o->channels, &img, err, err_len)
                     : ddp_decode_jpeg(data, n, j->o->channels, &img, err, err_len);
  free(data);
  if (rc != 0) return;
  if (ddp_resize_crop(img.pixels, img.width, img.height, img.channels, j->o->image_size,
                      j->pixels + i * j->image_bytes) != 0)
    snprintf(err, err_len, "out of memory resizing its %dx%d pixels", img.width, img.height);
  free(img.pixels);
}

static void *worker(void *arg) {
  job_t *j = arg;
  for (;;) {
    const size_t i = atomic_fetch_add(&j->next, 1);
    if (i >= j->n || *j->stop) break;
    convert_one(j, i);
  }
  return NULL;
}

/* Converts items[0..n) into j->pixels with up to `threads` threads. */
static void run_batch(job_t *j, int threads) {
  pthread_t tid[256];
  int started = 0;
  atomic_store(&j->next, 0);
  for (size_t i = 0; i < j->n; ++i) j->err[i][0] = '\0';
  if (threads > (int)j->n) threads = (int)j->n;
  if (threads > 256) threads = 256;
  for (; started < threads - 1; ++started)
    if (pthread_create(&tid[started], NULL, worker, j) != 0) break;
  worker(j); /* this thread works too, and alone when no thread started */
  for (int t = 0; t < started; ++t) pthread_join(tid[t], NULL);
}

/* ---- entry ------------------------------------------------------------------- */

int ddpprep_folder_run(const ddpprep_images_opts_t *o, const char *root, ddpprep_img_out_t *out,
                       const volatile sig_atomic_t *stop) {
  struct stat sb;
  if (stat(root, &sb) != 0) {
    say("cannot read input folder '%s': %s", root, strerror(errno));
    return -1;
  }
  if (!S_ISDIR(sb.st_mode)) {
    say("input '%s' is not a folder (--images folder reads a folder per class)", root);
    return -1;
  }
  size_t n_names;
  char **names = read_names(root, &n_names);
  if (!names) return -1;
  list_t items = {0};
  long long skipped = 0;
  char *classes_text = NULL;
  size_t text_len = 0, n_classes = 0;
  job_t job = {.o = o, .stop = stop};
  int rc = -1;
  /* the class folders, then each one's images */
  for (size_t i = 0; i < n_names; ++i) {
    char *path = join(root, names[i]);
    if (!path) {
      say("out of memory");
      goto done;
    }
    const int is_dir = names[i][0] != '.' && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    if (!is_dir && names[i][0] != '.') ++skipped;
    if (is_dir) {
      if (strchr(names[i], '\n')) {
        /* the name is not printed: it would break the one-line message */
        say("a class folder in '%s': its name holds a newline, which %s_classes.txt cannot hold",
            root, o->prefix);
        free(path);
        goto done;
      }
      const size_t before = items.n;
      if (walk(path, (int)n_classes, &items, &skipped) != 0) {
        free(path);
        goto done;
      }
      if (items.n == before) {
        say("class folder '%s' holds no .png, .jpg or .jpeg file", path);
        free(path);
        goto done;
      }
      qsort(items.v + before, items.n - before, sizeof *items.v, cmp_item);
      const size_t len = strlen(names[i]);
      char *t = realloc(classes_text, text_len + len + 2);
      if (!t) {
        say("out of memory");
        free(path);
        goto done;
      }
      classes_text = t;
      memcpy(classes_text + text_len, names[i], len);
      text_len += len;
      classes_text[text_len++] = '\n';
      classes_text[text_len] = '\0';
      ++n_classes;
    }
    free(path);
  }
  if (n_classes < 2) {
    say("input folder '%s' holds %zu class folder%s; --images folder needs at least 2", root,
        n_classes, n_classes == 1 ? "" : "s");
    goto done;
  }
  char note[96];
  snprintf(note, sizeof note, "skipped %lld file%s that %s not .png, .jpg or .jpeg", skipped,
           skipped == 1 ? "" : "s", skipped == 1 ? "is" : "are");
  if (ddpprep_img_out_side(out, "classes.txt", classes_text, note) != 0) goto done;
  const ddp_image_shape_t shape = {o->image_size, o->image_size, o->channels, (int32_t)n_classes};
  if (ddpprep_img_out_open(out, &shape) != 0) goto done;
  /* batches: decoded in parallel, written in order */
  const int threads = o->threads < 1 ? 1 : o->threads;
  const size_t batch = (size_t)threads * BATCH_PER_THREAD;
  job.image_bytes = (size_t)o->image_size * o->image_size * o->channels;
  job.pixels = malloc(batch * job.image_bytes);
  job.err = malloc(batch * sizeof *job.err);
  if (!job.pixels || !job.err) {
    say("out of memory for a batch of %zu images", batch);
    goto done;
  }
  for (size_t at = 0; at < items.n; at += batch) {
    job.items = items.v + at;
    job.n = items.n - at < batch ? items.n - at : batch;
    run_batch(&job, threads);
    for (size_t i = 0; i < job.n; ++i) {
      if (job.err[i][0]) {
        say("input '%s': %s", job.items[i].path, job.err[i]);
        goto done;
      }
      /* out_add reports a signal, which may have cut the batch short */
      if (ddpprep_img_out_add(out, job.pixels + i * job.image_bytes, job.image_bytes,
                              job.items[i].label) != 0)
        goto done;
    }
  }
  rc = 0;
done:
  for (size_t i = 0; i < items.n; ++i) free(items.v[i].path);
  free(items.v);
  free_names(names, n_names);
  free(classes_text);
  free(job.pixels);
  free(job.err);
  return rc;
}
