/* Held-out task accuracy (internal): on documents of the built-in data set,
 * feed the prompt of the last task line (up to and including '=') and
 * greedy-decode; a document counts as solved when every answer token,
 * through the closing '\n', is reproduced exactly. The end-of-text token that follows is not
 * scored: whether a document ends after a line is drawn at random, so no model can know it from the
 * prompt. Scores are also kept per task (the last line's), with one example answer of each. */
#ifndef DDPTRAIN_TRAIN_TASK_EVAL_H
#define DDPTRAIN_TRAIN_TASK_EVAL_H

#include "ddptrain/data.h"
#include "ddptrain/model.h"

/* Room for one example line: "c:" + operand + '=' + answer, with room to
 * spare for a wrong answer that runs long. */
enum { DDP_TASK_EXAMPLE_LEN = 64 };
typedef struct ddp_task_scores {
  int solved[DDP_BUILTIN_TASKS];
  int total[DDP_BUILTIN_TASKS];
  /* The first scored line of each task as the model answered it
   * ("c:abc=abc"), and the right answer when it was wrong ("" when
   * right); empty strings for a task that did not occur. */
  char example[DDP_BUILTIN_TASKS][DDP_TASK_EXAMPLE_LEN];
  char expected[DDP_BUILTIN_TASKS][DDP_TASK_EXAMPLE_LEN];
} ddp_task_scores_t;

/* Evaluates up to max_docs documents of `val` that carry an answer and fit
 * in seq_len tokens, through the token model's eval_forward and
 * copy_outputs (logits). *n_docs says how many were scored (0 when the
 * corpus has no answers or the model cannot report outputs: then *acc is 0
 * and the caller reports none). by_task, when not NULL, gets the scores per
 * task. */
ddp_status_t ddp_task_accuracy(ddp_model_t *m, int64_t tokens_per_batch, int seq_len,
                               const ddp_corpus_t *val, int max_docs, double *acc, int *n_docs,
                               ddp_task_scores_t *by_task);

#endif
