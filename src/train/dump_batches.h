/* --dump-batches (internal): this rank's micro-batches of a run, rebuilt
 * from the sampler plan and written as one safetensors file, so another
 * framework can replay exactly what each rank trained on. */
#ifndef DDPTRAIN_TRAIN_DUMP_BATCHES_H
#define DDPTRAIN_TRAIN_DUMP_BATCHES_H

#include "runtime/dist.h"
#include "train/train_data.h"

/* Micro-batches 0 .. n-1 of this rank (seq = step * accum + micro) to
 * `path` (".rankN" appended when the job has several ranks): tensors
 * batch.K.inputs and batch.K.targets (token models, int32 (B, T)) or
 * batch.K.inputs (fp32 (B, record shape)) and batch.K.labels (int32 (B)),
 * and the metadata "accum". */
ddp_status_t ddp_train_dump_batches(const char *path, const ddp_dist_t *dist, int64_t accum,
                                    int64_t n, const ddp_train_data_t *d, ddp_sampler_t *s,
                                    const ddp_options_t *o);

#endif
