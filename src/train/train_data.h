/* The trainer's data sources (internal): a shard glob or the built-in task
 * data set, as a corpus indexed for the model's sequence length. */
#ifndef DDPTRAIN_TRAIN_DATA_H
#define DDPTRAIN_TRAIN_DATA_H

#include "ddptrain/data.h"

/* Reads every shard matching glob_pattern (sorted by name) into one corpus.
 * Shards must agree on EOT and vocabulary. A pattern with no match is an
 * error naming it. */
ddp_status_t ddp_train_load_glob(ddp_corpus_t *corpus, const char *glob_pattern, int seq_len);

/* Documents in the built-in set's train and validation splits. */
enum { DDP_BUILTIN_TRAIN_DOCS = 20000, DDP_BUILTIN_VAL_DOCS = 1000 };

#endif
