/* Fuzz target: the token shard reader (src/data/shard.c and the index it
 * builds in src/data/corpus.c; docs/design.md §5.1).
 *
 * The input is a whole shard file. The window length is taken from the
 * input's size, so the corpus exercises many ways of cutting documents
 * without a byte of the file being reserved for it. When the reader accepts
 * a file, every window is read back and checked against the reader's
 * promises: windows inside their segment, 2 .. seq_len + 1 tokens long, and
 * every token below the vocabulary. */
#include "fuzz_input.h"

#include <string.h>

#include "ddptrain/data.h"

const char fuzz_target_name[] = "shard";

/* Window lengths tried: 1 .. 64 (1 is the smallest the reader accepts). */
#define MAX_SEQ_LEN 64

static void check_corpus(const ddp_corpus_t *c, int seq_len) {
  int32_t tokens[MAX_SEQ_LEN + 1];
  FUZZ_ASSERT(c->n_segs == 1 && c->seq_len == seq_len);
  FUZZ_ASSERT(c->vocab >= 1 && c->eot >= 0 && c->eot < c->vocab);
  const ddp_token_seg_t *s = &c->segs[0];
  for (int64_t w = 0; w < c->n_windows; ++w) {
    const ddp_window_t *win = &c->windows[w];
    FUZZ_ASSERT(win->seg == 0);
    FUZZ_ASSERT(win->len >= 2 && win->len <= seq_len + 1);
    FUZZ_ASSERT(win->start >= s->first &&
                win->start + win->len - (int64_t)win->ends_doc <= s->first + s->n_tokens);
    ddp_corpus_read_window(c, win, tokens);
    for (int i = 0; i < win->len; ++i) FUZZ_ASSERT(tokens[i] >= 0 && tokens[i] < c->vocab);
  }
  (void)ddp_corpus_fingerprint(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[80];
  fuzz_quiet_log();
  fuzz_write_input(data, size, path, sizeof path);
  const int seq_len = 1 + (int)(size % MAX_SEQ_LEN);
  ddp_corpus_t c;
  if (ddp_shard_read(&c, path, seq_len) == DDP_OK) {
    check_corpus(&c, seq_len);
    ddp_corpus_destroy(&c);
  } else {
    /* documented: a failed read leaves the corpus zeroed */
    FUZZ_ASSERT(c.segs == NULL && c.windows == NULL && c.n_segs == 0);
  }
  return 0;
}
