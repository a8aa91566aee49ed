/* The trainer's checkpoint schedule (src/train/train_ckpt.c): resuming at
 * start-up, saving every --save-every steps, at --stop-at, on preemption and
 * at the end, through rank 0's background writer. */
#ifndef DDPTRAIN_TRAIN_TRAIN_CKPT_H
#define DDPTRAIN_TRAIN_TRAIN_CKPT_H

#include "ddptrain/model.h"
#include "comm/comm.h"
#include "optim/optim.h"
#include "runtime/dist.h"
#include "train/buffers.h"
#include "train/checkpoint_writer.h"
#include "train/ckpt.h"

typedef struct ddp_train_ckpt {
  const ddp_options_t *o;
  const ddp_dist_t *dist;
  ddp_comm_t *comm; /* host communicator: the ranks share the final write's outcome */
  ddp_backend_t *be;
  ddp_model_t *model;
  ddp_train_buffers_t *buffers; /* averaged (collectively) before each save */
  float *state;                 /* optimizer state, backend memory */
  ddp_ckpt_image_t layout;      /* views the model's parameter table */
  char *config;
  ddp_ckpt_writer_t *writer; /* rank 0 with --save */
  int64_t last_saved;        /* steps of the last checkpoint handed to the writer */
  /* --zero 1: the state is sharded (state is this rank's shard) and every
   * rank takes part in a save, which gathers it into rank 0's staging */
  struct ddp_zero *zero;
  ddp_comm_t *grad_comm; /* the communicator of backend memory */
} ddp_train_ckpt_t;

/* Sets up saving and, with --resume, loads the checkpoint on every rank
 * (the model's buffers included): *start_step = the optimizer steps
 * already done (0 for a fresh run) and *scaler = the saved loss-scaler
 * state (untouched for a fresh run). */
ddp_status_t ddp_train_ckpt_init(ddp_train_ckpt_t *tc, const ddp_options_t *o,
                                 const ddp_dist_t *dist, ddp_comm_t *comm, ddp_backend_t *be,
                                 ddp_model_t *model, ddp_train_buffers_t *buffers, float *state,
                                 const ddp_optim_config_t *ocfg, int64_t *start_step,
                                 ddp_ckpt_scaler_t *scaler);

/* --zero 1, after init: from now on state is this rank's shard (the
 * state a resume loaded into the full buffer given to init has been taken
 * out by the caller), and saves gather it over grad_comm. */
void ddp_train_ckpt_set_zero(ddp_train_ckpt_t *tc, struct ddp_zero *zero, float *shard_state,
                             ddp_comm_t *grad_comm);

/* Whether a checkpoint is due after `done` steps (--save-every). */
int ddp_train_ckpt_due(const ddp_train_ckpt_t *tc, int64_t done);

/* Rank 0 with --save hands the state after `done` steps to the writer; with
 * wait it also waits for the file and returns the write's status (the end
 * of a run); without, a failed write is only the writer's warning. With
 * --save, every rank first averages the model's buffers (ddp_train_buffers_
 * sync), and under --zero 1 every rank sends its shard: collective, every
 * rank calls it alike. Runs without --save do nothing. */
ddp_status_t ddp_train_ckpt_save(ddp_train_ckpt_t *tc, int64_t done,
                                 const ddp_ckpt_scaler_t *scaler, int wait);

/* Where the checkpoint of a run's last step stands, as every rank learns it
 * from rank 0 (ddp_train_ckpt_save_final). */
typedef enum ddp_train_ckpt_outcome {
  DDP_TRAIN_CKPT_NO_SAVE = 0, /* no --save directory: none was asked for */
  DDP_TRAIN_CKPT_ON_DISK = 1, /* written (or already there: nothing trained since) */
  DDP_TRAIN_CKPT_FAILED = 2   /* asked for and not written; the writer named the cause */
} ddp_train_ckpt_outcome_t;

/* Collective. The checkpoint of the last step: rank 0 with --save hands the
 * state after `done` steps to the writer and waits for the file; then one
 * all-reduce gives every rank the same *outcome, so all ranks end with the
 * same exit status and none exits before rank 0's file is complete (a
 * launcher may end the whole job as soon as one rank has exited). */
ddp_status_t ddp_train_ckpt_save_final(ddp_train_ckpt_t *tc, int64_t done,
                                       const ddp_ckpt_scaler_t *scaler,
                                       ddp_train_ckpt_outcome_t *outcome);

void ddp_train_ckpt_destroy(ddp_train_ckpt_t *tc);

#endif
