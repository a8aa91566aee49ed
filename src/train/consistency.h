/* Cross-rank consistency of a data-parallel run (internal): at start-up all
 * ranks must agree on the configuration, the parameter layout and the data;
 * during training, --check-replicas compares parameter hashes. Every check
 * is collective and ends on every rank with DDP_ERR_MISMATCH and a message
 * naming the differing ranks and what differs: a mismatch must never turn
 * into a hang or a silently wrong model. */
#ifndef DDPTRAIN_TRAIN_CONSISTENCY_H
#define DDPTRAIN_TRAIN_CONSISTENCY_H

#include "ddptrain/model.h"
#include "ddptrain/options.h"
#include "runtime/dist.h"
#include "train/train_data.h"

/* Every flag but a rank's local settings (ddp_options_rank_value): one
 * allgather of their hashes; for each flag that differs, rank 0 logs one
 * line naming the flag, rank 0's value and the first differing rank's.
 * DDP_ERR_MISMATCH on every rank when any differs (ddp_main: exit status
 * 2); another error when the ranks run programs with different flag
 * tables or a collective fails. */
ddp_status_t ddp_train_check_flags(const ddp_dist_t *dist, const ddp_options_t *o);

/* The flags as above, the model's tensor names, shapes and order, and the
 * training (and validation) data's fingerprint; for token data that
 * differs, the first shards that differ by name, size or sampled content
 * are named. All fields are checked before returning, so one run reports
 * every difference. */
ddp_status_t ddp_train_check_agreement(const ddp_dist_t *dist, const ddp_options_t *o,
                                       const ddp_model_t *model, const ddp_train_data_t *data);

/* FNV-1a of the parameters' bytes; `host` holds num_params floats. */
ddp_status_t ddp_train_params_hash(ddp_model_t *model, float *host, uint64_t *hash);

#endif
