/* ddpprep --images FORMAT: MNIST IDX and CIFAR binary batches, and folders
 * of PNG and JPEG files (ddpprep_folder.c), to image shards (docs/design.md
 * §5.6). */
#ifndef DDPTRAIN_TOOLS_DDPPREP_IMAGES_H
#define DDPTRAIN_TOOLS_DDPPREP_IMAGES_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "data/image_shard.h"

typedef struct ddpprep_images_opts {
  const char *format; /* "idx", "cifar10", "cifar100" or "folder" */
  const char *prefix; /* writes PREFIX_train.img and PREFIX_val.img */
  double val_frac;
  uint64_t seed;
  int image_size; /* folder: the side of the square images; 0: not given */
  int channels;   /* folder: 1 (gray) or 3 (RGB) */
  int threads;    /* folder: decoding threads */
} ddpprep_images_opts_t;

/* Whether name is a format --images knows. */
int ddpprep_images_known_format(const char *name);

/* Converts paths[0..n_paths); returns 0 on success, 1 on a runtime failure
 * (bad or unreadable input, write failure, *stop set by a signal) and 2 on a
 * bad command line (wrong number of paths). Every failure prints one line
 * and leaves neither output file behind. */
int ddpprep_images_run(const ddpprep_images_opts_t *o, char *const *paths, int n_paths,
                       const volatile sig_atomic_t *stop);

/* The output of one conversion, for the folder source (ddpprep_folder.c):
 * the shard pair, and a side file written and removed together with them. */
typedef struct ddpprep_img_out ddpprep_img_out_t;

/* Opens the shard pair for shape; -1 after a message. */
int ddpprep_img_out_open(ddpprep_img_out_t *out, const ddp_image_shape_t *shape);
/* Adds one image of n bytes to train or val (by the split hash); -1 after a
 * message (also when a signal arrived). */
int ddpprep_img_out_add(ddpprep_img_out_t *out, const uint8_t *pixels, size_t n, int32_t label);
/* PREFIX_<suffix> with text, renamed into place only when both shards are;
 * note is appended to the summary line. Both are copied. -1 when out of
 * memory, after a message. */
int ddpprep_img_out_side(ddpprep_img_out_t *out, const char *suffix, const char *text,
                         const char *note);

#endif
