/* What a set of shards declares, read from a header alone: for checks made
 * before the data is loaded (the ranks have not started, and loading reads
 * every token), such as ddptrain's --tokenizer against the model's
 * vocabulary. Implemented beside the reader (shard.c), whose header checks
 * it shares. */
#ifndef DDPTRAIN_DATA_SHARD_VOCAB_H
#define DDPTRAIN_DATA_SHARD_VOCAB_H

#include <stdint.h>

#include "ddptrain/status.h"

/* The vocabulary size and EOT id of the first file (by name) matching the
 * glob `pattern`: what ddp_corpus_open's corpus gets when the shards agree
 * (it refuses them when they do not). The file's header is checked as a
 * full open checks it, with the same errors; no token is read. */
ddp_status_t ddp_shard_peek_vocab(const char *pattern, int32_t *vocab, int32_t *eot);

#endif
