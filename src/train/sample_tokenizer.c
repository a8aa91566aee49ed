/* --tokenizer DIR before the ranks start (train/sample_tokenizer.h). */
#include "train/sample_tokenizer.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "ddptrain/check.h"
#include "ddptrain/data.h"
#include "ddptrain/log.h"
#include "ddptrain/model.h"
#include "data/bpe.h"
#include "data/shard_vocab.h"
#include "model/gpt_init_from.h"

/* The user's input is at fault: one line, without a source location. */
#define FLAG_ERROR(...) ddp_log_at(DDP_LOG_LEVEL_ERROR, NULL, 0, __VA_ARGS__)

/* What the model will be created with and the data holds: its vocabulary
 * and where that comes from (for the message), and the data's end-of-text.
 * The model is created for the data's vocabulary, and --init-from keeps
 * the file's when that is larger (gpt_init_from.h). */
typedef struct model_tokens {
  int vocab;
  int32_t data_eot;
  const char *source;
} model_tokens_t;

static ddp_status_t model_tokens(const ddp_options_t *o, const ddp_model_ops_t *ops,
                                 model_tokens_t *mt) {
  ddp_data_shape_t shape = {
      .kind = DDP_BATCH_TOKENS, .vocab = DDP_BUILTIN_VOCAB, .seq_len = (int)o->seq_len};
  mt->source = "the built-in data's, byte-level";
  mt->data_eot = DDP_BUILTIN_EOT;
  if (o->data[0]) {
    int32_t v = 0;
    DDP_CHECK(ddp_shard_peek_vocab(o->data, &v, &mt->data_eot));
    shape.vocab = v;
    mt->source = "the --data shards'";
  }
  if (o->init_from[0]) {
    const int data_vocab = shape.vocab;
    DDP_CHECK(ddp_init_from_data_shape(o->init_from, ops, &shape));
    if (shape.vocab != data_vocab) mt->source = "the --init-from file's";
  }
  mt->vocab = shape.vocab;
  return DDP_OK;
}

ddp_status_t ddp_sample_tokenizer_check(const ddp_options_t *o) {
  const char *dir = o->tokenizer;
  if (!dir[0]) return DDP_OK;
  const ddp_model_ops_t *ops = ddp_model_find(o->model);
  /* only the GPT samples (--sample-every refuses other models too) */
  if (!ops || strcmp(ops->name, "gpt") != 0) {
    FLAG_ERROR("option --tokenizer: --model %s is not a GPT (it has no tokens to decode)",
               o->model);
    return DDP_ERR_INVALID_ARG;
  }
  struct stat sb;
  if (stat(dir, &sb) != 0) {
    FLAG_ERROR("option --tokenizer: %s: %s", dir, strerror(errno));
    return DDP_ERR_INVALID_ARG;
  }
  if (!S_ISDIR(sb.st_mode)) {
    FLAG_ERROR(
        "option --tokenizer: %s is not a directory (it names the one holding vocab.json "
        "and merges.txt)",
        dir);
    return DDP_ERR_INVALID_ARG;
  }
  ddp_bpe_t *bpe = NULL;
  const ddp_status_t loaded = ddp_bpe_load(dir, &bpe); /* logs the file and the cause */
  if (loaded != DDP_OK) {
    if (loaded == DDP_ERR_OOM) return loaded;
    FLAG_ERROR("option --tokenizer: %s is not a GPT-2 tokenizer this run can read (see above)",
               dir);
    return DDP_ERR_INVALID_ARG;
  }
  const int tokens = (int)ddp_bpe_vocab_size(bpe);
  const int32_t eot = ddp_bpe_eot(bpe);
  ddp_bpe_free(bpe);
  model_tokens_t mt;
  DDP_CHECK(model_tokens(o, ops, &mt));
  if (tokens != mt.vocab) {
    FLAG_ERROR(
        "option --tokenizer: %s has %d tokens, but the model's vocabulary is %d (%s): "
        "it is not the tokenizer the data was made with",
        dir, tokens, mt.vocab, mt.source);
    return DDP_ERR_INVALID_ARG;
  }
  /* one of the same size that ends documents with another token is
   * another tokenizer as well */
  if (eot != mt.data_eot) {
    FLAG_ERROR(
        "option --tokenizer: %s ends a document with token %d, but the data with %d: it "
        "is not the tokenizer the data was made with",
        dir, (int)eot, (int)mt.data_eot);
    return DDP_ERR_INVALID_ARG;
  }
  return DDP_OK;
}
