/* Top-k accuracy of a classifier's outputs (internal): where the true class
 * ranks among a record's scores. The ranking is total and deterministic, so
 * a held-out accuracy never depends on how ties happen to be visited:
 * class c ranks above class d when its score is higher, or equal and c < d
 * (the lower class index wins a tie). A NaN score ranks below every number;
 * a record whose true class scores NaN is never a hit. */
#ifndef DDPTRAIN_TRAIN_TOPK_H
#define DDPTRAIN_TRAIN_TOPK_H

#include <stdint.h>

/* Top-5 accuracy is reported beside top-1 for models with more than this
 * many classes (with 5 of 10 or fewer it says little). */
enum { DDP_TOP5_MIN_CLASSES = 11 };

/* How many of the n classes rank above `label` in scores[0..n) (0: it is
 * the top-1 guess). label must be in [0, n). */
int64_t ddp_topk_rank(const float *scores, int64_t n, int64_t label);

/* 1 when `label` is among the k best-ranked of scores[0..n), else 0. */
int ddp_topk_hit(const float *scores, int64_t n, int64_t label, int64_t k);

#endif
