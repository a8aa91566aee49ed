/* --resume: choosing, verifying and loading the checkpoint a run continues
 * from (src/train/resume.c). */
#ifndef DDPTRAIN_TRAIN_RESUME_H
#define DDPTRAIN_TRAIN_RESUME_H

#include "ddptrain/backend.h"
#include "comm/comm.h"
#include "runtime/dist.h"
#include "train/ckpt.h"

/* Collective. Rank 0 takes the newest checkpoint in `dir` that opens and
 * passes its CRC (reporting and skipping corrupt ones), checks its
 * configuration against `opts` (a flag that shapes the model or its state
 * differing is an error naming it; other differences are warnings) and
 * loads it; every rank then receives the parameters (into params), the
 * optimizer state (into state) and the model's buffers (into buffers, when
 * layout has a buffer table), all backend memory laid out as layout
 * describes, and the metadata in *meta. *found = 0 when `dir` holds
 * no checkpoint and missing_ok (--resume auto): nothing is changed. */
ddp_status_t ddp_train_resume(const ddp_options_t *opts, const ddp_dist_t *dist, ddp_comm_t *comm,
                              ddp_backend_t *be, const char *dir, int missing_ok,
                              const ddp_ckpt_image_t *layout, float *params, float *state,
                              float *buffers, ddp_ckpt_meta_t *meta, int *found);

#endif
