/* ddpprep --images FORMAT: MNIST IDX and CIFAR binary batches to image
 * shards (docs/design.md §5.6). */
#ifndef DDPTRAIN_TOOLS_DDPPREP_IMAGES_H
#define DDPTRAIN_TOOLS_DDPPREP_IMAGES_H

#include <signal.h>
#include <stdint.h>

typedef struct ddpprep_images_opts {
  const char *format; /* "idx", "cifar10" or "cifar100" */
  const char *prefix; /* writes PREFIX_train.img and PREFIX_val.img */
  double val_frac;
  uint64_t seed;
} ddpprep_images_opts_t;

/* Whether name is a format --images knows. */
int ddpprep_images_known_format(const char *name);

/* Converts paths[0..n_paths); returns 0 on success, 1 on a runtime failure
 * (bad or unreadable input, write failure, *stop set by a signal) and 2 on a
 * bad command line (wrong number of paths). Every failure prints one line
 * and leaves neither output file behind. */
int ddpprep_images_run(const ddpprep_images_opts_t *o, char *const *paths, int n_paths,
                       const volatile sig_atomic_t *stop);

#endif
