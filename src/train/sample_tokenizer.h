/* --tokenizer DIR, checked before the ranks start.
 *
 * The GPT-2 BPE (data/bpe.h) that --sample-every decodes its samples with
 * must be one this process can read and must have exactly the model's
 * vocabulary: the data's (the --data shards' headers, or the built-in
 * set's 257 byte-level tokens), or the --init-from file's where that is
 * larger; and it must end documents with the data's end-of-text token.
 * A wrong one is a bad flag like any other, so it is found where
 * ddp_main finds those (exit status 2, before MPI starts and before
 * anything is written), on every rank, rather than by rank 0 alone in the
 * middle of start-up. */
#ifndef DDPTRAIN_TRAIN_SAMPLE_TOKENIZER_H
#define DDPTRAIN_TRAIN_SAMPLE_TOKENIZER_H

#include "ddptrain/options.h"
#include "ddptrain/status.h"

/* A no-op without --tokenizer. DDP_ERR_INVALID_ARG, logged naming the flag
 * and the cause, for a model that is not the GPT, a DIR that is missing or
 * not a directory, a tokenizer that cannot be loaded (the loader's own line
 * says why), a vocabulary other than the model's and an end-of-text token
 * other than the data's. Shards or an
 * --init-from file that cannot be read are their own errors (DDP_ERR_IO or
 * DDP_ERR_FORMAT), the ones loading them would report. */
ddp_status_t ddp_sample_tokenizer_check(const ddp_options_t *o);

#endif
