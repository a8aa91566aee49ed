/* ddpprep --images folder: a folder per class of PNG and JPEG files to image
 * shards (docs/design.md §5.6), through ddpprep_images.c's output. */
#ifndef DDPTRAIN_TOOLS_DDPPREP_FOLDER_H
#define DDPTRAIN_TOOLS_DDPPREP_FOLDER_H

#include <signal.h>

#include "tools/ddpprep_images.h"

/* The command line's part: one folder, --image-size given, and a build
 * with libpng and libjpeg. Returns 0, or 2 after a message. */
int ddpprep_folder_check(const ddpprep_images_opts_t *o, int n_paths);

/* Converts root/<class>/... into out (opened here) and registers
 * PREFIX_classes.txt. Returns 0, or -1 after one line naming the folder or
 * file and the cause. */
int ddpprep_folder_run(const ddpprep_images_opts_t *o, const char *root, ddpprep_img_out_t *out,
                       const volatile sig_atomic_t *stop);

#endif
