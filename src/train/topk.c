/* Top-k membership by rank (see topk.h). One pass that counts the classes
 * ranked above the true one: no sort, no scratch, and the same answer as
 * a stable sort by descending score would give. */
#include "train/topk.h"

#include <math.h>

int64_t ddp_topk_rank(const float *scores, int64_t n, int64_t label) {
  const float y = scores[label];
  /* A NaN true score ranks last; nothing can rank below it. */
  if (isnan(y)) return n;
  int64_t above = 0;
  for (int64_t c = 0; c < n; ++c)
    /* NaN > y and NaN == y are both false: a NaN never ranks above. */
    above += scores[c] > y || (scores[c] == y && c < label);
  return above;
}

int ddp_topk_hit(const float *scores, int64_t n, int64_t label, int64_t k) {
  const int64_t rank = ddp_topk_rank(scores, n, label);
  return rank < n && rank < k; /* rank n: a NaN true score, never a hit */
}
