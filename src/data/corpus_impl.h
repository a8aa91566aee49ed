/* Internal to the data layer: the index builder shared by the in-memory
 * constructor (corpus.c) and the shard reader (shard.c). */
#ifndef DDPTRAIN_DATA_CORPUS_IMPL_H
#define DDPTRAIN_DATA_CORPUS_IMPL_H

#include "ddptrain/data.h"

/* Numbers c->segs (their `first`), checks every token against c->vocab and
 * builds the window index for seq_len. `source` names the data in messages.
 * On error the caller destroys the corpus. */
ddp_status_t ddp_corpus_build_index(ddp_corpus_t *c, int seq_len, const char *source);

#endif
