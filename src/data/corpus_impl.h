/* Internal to the data layer: the index builder shared by the in-memory
 * constructor (corpus.c) and the shard reader (shard.c), and the sampled
 * content hash (also measured by bench/shard_fingerprint.c). */
#ifndef DDPTRAIN_DATA_CORPUS_IMPL_H
#define DDPTRAIN_DATA_CORPUS_IMPL_H

#include "ddptrain/data.h"

/* Numbers c->segs (their `first`), checks every token against c->vocab and
 * builds the window index for seq_len. `source` names the data in messages.
 * On error the caller destroys the corpus. */
ddp_status_t ddp_corpus_build_index(ddp_corpus_t *c, int seq_len, const char *source);

/* The content hash of n bytes from sampled blocks (corpus.c says which):
 * what build_index stores in each segment's content_hash. */
uint64_t ddp_corpus_sample_hash(const void *bytes, int64_t n);

#endif
