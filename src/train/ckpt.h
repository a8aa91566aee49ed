/* Training checkpoints: the file format, its integrity check and the
 * checkpoint directory.
 *
 * A checkpoint is one safetensors file, DIR/ckpt_<step %08d>.safetensors,
 * holding everything a run needs to continue bit-exactly:
 *   tensors   model.<name>            the fp32 parameters (PyTorch names)
 *             optim.<slot>.<name>     optimizer state per parameter:
 *                                     exp_avg, exp_avg_sq (AdamW, LAMB) or
 *                                     momentum_buffer (SGD)
 *             buffer.<name>           the model's buffers (ddptrain/model.h,
 *                                     fp32, their table's shapes), only for
 *                                     a model that has them: a file without
 *                                     them is still format 2
 *   metadata  format    "ddptrain-checkpoint-2"
 *             step      optimizer steps completed = the sampler position
 *                       (the global step the next run starts at)
 *             config    every option of the run, {"flag": "value"}
 *             optimizer {"kind", "t", "slots", "eps"} (eps: --adam-eps)
 *             sampler   {"kind", "global_step", "world", "accum"}
 *             rng       {"generator", "seed", "step"}: the generator is
 *                       counter-based, so a key and a position are its state
 *             loss_scaler {"enabled", "scale", "growth_tracker", "skipped_steps"}:
 *                       optimizer t = step - skipped_steps
 *             crc32     CRC-32 (zlib) of the header and the data: for each
 *                       tensor in data order its name, dtype, shape and
 *                       offset, then its bytes; then each metadata key above
 *                       with its value, in that order. A file whose CRC
 *                       differs is corrupt: a flipped data byte, an edited
 *                       value and two swapped tensor names are all caught.
 *                       Format 1 summed only the data and the values, and is
 *                       refused with a message saying so.
 * Writes are atomic (DIR/.ckpt_<step>.safetensors.tmp.<host>.<pid>, fsync,
 * rename, fsync of DIR), so a crash or a full disk never leaves a damaged
 * file under a checkpoint name and never touches an older checkpoint.
 *
 * The directory (checkpoint_dir.c): ckpt_<step>.safetensors files, newest =
 * highest step; superseded/ holds checkpoints a run set aside because their
 * step was above the step it started at (ddp_ckpt_set_aside). */
#ifndef DDPTRAIN_CKPT_H
#define DDPTRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "ddptrain/model.h"
#include "ddptrain/options.h"
#include "ddptrain/param.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DDP_CKPT_FORMAT "ddptrain-checkpoint-2"
/* The format before the CRC covered the header: refused by name. */
#define DDP_CKPT_FORMAT_1 "ddptrain-checkpoint-1"
/* The sub-directory of a checkpoint directory that ddp_ckpt_set_aside
 * moves checkpoints into. */
#define DDP_CKPT_SUPERSEDED "superseded"

/* The dynamic loss scaler's state (GradScaler semantics). */
typedef struct ddp_ckpt_scaler {
  int enabled;
  double scale;
  int64_t growth_tracker; /* clean steps since the scale last changed */
  int64_t skipped_steps;  /* overflowed steps, not applied by the optimizer */
} ddp_ckpt_scaler_t;

/* What a checkpoint holds besides the tensors. */
typedef struct ddp_ckpt_meta {
  int64_t step;     /* optimizer steps completed */
  int world, accum; /* of the run that wrote it */
  uint64_t seed;    /* the RNG key */
  char optimizer[16], sampler[16];
  double adam_eps; /* --adam-eps of the run (1e-8 in files older than the flag) */
  ddp_ckpt_scaler_t scaler;
} ddp_ckpt_meta_t;

/* A host-side image of the training state, laid out as the model's flat
 * buffers: params[n_params], state[n_slots * n_params] (slot s at
 * s * n_params, the optimizer's own layout), buffers[n_buffer_floats]. */
typedef struct ddp_ckpt_image {
  const ddp_param_t *tensors; /* the model's parameter table */
  int n_tensors;
  size_t n_params;
  float *params, *state;
  /* the model's buffer table and its values (NULL, 0: a model without) */
  const ddp_buffer_t *buffer_tensors;
  int n_buffer_tensors;
  size_t n_buffer_floats;
  float *buffers;
  int n_slots;
  const char *const *slot_names; /* n_slots names */
  ddp_ckpt_meta_t meta;
  const char *config; /* JSON object text (ddp_ckpt_config_json) */
} ddp_ckpt_image_t;

/* Optimizer slot names for an optimizer kind name ("adamw", "lamb", "sgd"):
 * returns the slot count and sets *names (static). */
int ddp_ckpt_slot_names(const char *optimizer, const char *const **names);

/* "DIR/ckpt_%08lld.safetensors" and its temporary twin
 * "DIR/.ckpt_%08lld.safetensors.tmp.<host>.<pid>" (host: ddp_ckpt_host_name);
 * DDP_ERR_INVALID_ARG if too long. */
ddp_status_t ddp_ckpt_path(char *buf, size_t len, const char *dir, int64_t step);
ddp_status_t ddp_ckpt_tmp_path(char *buf, size_t len, const char *dir, int64_t step);

/* Every option of `opts` that applies to its run (the runtime's and its
 * model's own, ddp_options_applies) as a JSON object of strings; malloc'ed,
 * NULL on OOM. */
char *ddp_ckpt_config_json(const ddp_options_t *opts);

/* Writes img to `path` atomically. enospc_after_bytes > 0 makes the write
 * fail like a full disk after that many bytes (fault injection). */
ddp_status_t ddp_ckpt_write(const char *path, const char *tmp_path, const ddp_ckpt_image_t *img,
                            int64_t enospc_after_bytes);

/* An opened, verified checkpoint (format, CRC, metadata parsed). */
typedef struct ddp_ckpt ddp_ckpt_t;
ddp_status_t ddp_ckpt_open(const char *path, ddp_ckpt_t **out);
void ddp_ckpt_close(ddp_ckpt_t *ck);
const ddp_ckpt_meta_t *ddp_ckpt_meta(const ddp_ckpt_t *ck);
/* A configuration value the writing run had ("lr" -> "0.003"), or NULL. */
const char *ddp_ckpt_config_value(const ddp_ckpt_t *ck, const char *flag);
/* Copies the tensors into img->params / img->state / img->buffers after
 * checking that every tensor of img's layout is there with its shape
 * (errors name it; tensors the layout lacks, such as another model's
 * buffers, are not read). */
ddp_status_t ddp_ckpt_load(const ddp_ckpt_t *ck, ddp_ckpt_image_t *img);

/* This host's name as the temporary files carry it: gethostname(), with any
 * character other than [A-Za-z0-9._-] turned into '_' ("localhost" if it
 * has none). */
void ddp_ckpt_host_name(char *buf, size_t len);

/* The steps of the checkpoints in dir, newest first; *steps malloc'ed (NULL
 * when *n == 0). A missing directory is an empty list. */
ddp_status_t ddp_ckpt_list(const char *dir, int64_t **steps, int *n);
/* Deletes all but the `keep` newest checkpoints, never the one of step
 * `protect` (-1: none); failures are warnings. */
void ddp_ckpt_prune(const char *dir, int keep, int64_t protect);
/* Moves every checkpoint of dir whose step is above `above` into
 * dir/superseded/ (created if needed; a name already there gets a ".N"
 * suffix), so that it neither outranks the checkpoints a run starting at
 * step `above` writes nor gets pruned in their place. *moved: how many.
 * A directory that cannot be listed moves nothing; a file that cannot be
 * moved is an error naming it (nothing else is changed after it). */
ddp_status_t ddp_ckpt_set_aside(const char *dir, int64_t above, int *moved);
/* Deletes the temporary files (.ckpt_*.safetensors.tmp.<host>.<pid>) of
 * writers that are gone: those of this host (and of the older name without
 * a host) whose PID is not alive here, or is this process's own (it has not
 * written yet). Another host's files are kept, with a warning naming them:
 * their PID means nothing here. Call it before this process writes. */
void ddp_ckpt_remove_stale_tmp(const char *dir, int *removed, int *kept);

#ifdef __cplusplus
}
#endif
#endif
