/* The background checkpoint writer of rank 0 (src/train/checkpoint_writer.c).
 *
 * The step loop pauses only to copy the parameters and optimizer state from
 * the backend into a staging buffer allocated (and touched) once, at
 * creation; a thread then writes the file, renames it into place and prunes
 * old checkpoints while training goes on. A failed write (full disk,
 * unwritable directory) is a warning naming the path: training continues
 * and the previous checkpoint is left as it was; ddp_ckpt_writer_flush
 * tells the caller, which decides what the run's end makes of it. */
#ifndef DDPTRAIN_TRAIN_CHECKPOINT_WRITER_H
#define DDPTRAIN_TRAIN_CHECKPOINT_WRITER_H

#include "ddptrain/backend.h"
#include "train/ckpt.h"

typedef struct ddp_ckpt_writer ddp_ckpt_writer_t;

/* layout: tensors, n_tensors, n_params, n_slots, slot_names and the buffer
 * table (buffer_tensors, n_buffer_tensors, n_buffer_floats) of the images
 * to write (the pointers must outlive the writer); config: JSON text, copied.
 * resumed_from: the step of the checkpoint the run resumed from, -1 for a
 * fresh run. Before its thread writes anything it prepares dir: removes the
 * temporary files of dead writers and sets aside (to dir/superseded/) every
 * checkpoint above the step the run starts at (an error if one cannot be
 * moved). Pruning (--keep) never deletes the checkpoint of resumed_from. */
ddp_status_t ddp_ckpt_writer_create(const char *dir, int keep, int64_t resumed_from,
                                    const ddp_ckpt_image_t *layout, const char *config,
                                    ddp_ckpt_writer_t **out);
void ddp_ckpt_writer_destroy(ddp_ckpt_writer_t *w);

/* Waits for the previous write, copies params (n_params), state
 * (n_slots x n_params) and buffers (n_buffer_floats; ignored without) from
 * backend memory into the staging buffer, and hands it to the thread with
 * meta. *pause_ms: how long the caller was held. */
ddp_status_t ddp_ckpt_writer_save(ddp_ckpt_writer_t *w, ddp_backend_t *be, const float *params,
                                  const float *state, const float *buffers,
                                  const ddp_ckpt_meta_t *meta, double *pause_ms);

/* The same in two halves, for a caller that fills the staging buffers
 * itself (--zero 1 gathers the sharded state into them): stage waits for
 * the previous write and gives the host buffers (params: n_params floats,
 * state: n_slots x n_params, NULL without slots; buffers: n_buffer_floats,
 * NULL without); commit hands them to the thread with meta. */
ddp_status_t ddp_ckpt_writer_stage(ddp_ckpt_writer_t *w, float **params, float **state,
                                   float **buffers);
ddp_status_t ddp_ckpt_writer_commit(ddp_ckpt_writer_t *w, const ddp_ckpt_meta_t *meta);

/* Waits until the thread is idle; returns the status of the last write. */
ddp_status_t ddp_ckpt_writer_flush(ddp_ckpt_writer_t *w);

#endif
