/* Logging with levels and a rank prefix.
 *
 * Lines look like `[rank 1/4] WARN: message` (a singleton process prints
 * `[ddptrain] ...`). Errors and warnings are printed by every rank, because an
 * error that only rank 0 could report would leave the others silent; info and
 * debug lines come from rank 0 only unless DDPTRAIN_LOG_ALL_RANKS=1, so a
 * 64-rank job does not print every line 64 times. Each line is formatted into
 * one buffer and written with a single call so lines from threads or ranks
 * sharing a terminal do not interleave mid-line. */
#ifndef DDPTRAIN_LOG_H
#define DDPTRAIN_LOG_H

#include <stdio.h>

#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ddp_log_level {
  DDP_LOG_LEVEL_ERROR = 0,
  DDP_LOG_LEVEL_WARN = 1,
  DDP_LOG_LEVEL_INFO = 2,
  DDP_LOG_LEVEL_DEBUG = 3
} ddp_log_level_t;

/* Rank and world size shown in every prefix; (0, 1) until set. */
void ddp_log_set_rank(int rank, int world);
/* The rank set above: for messages that must name it in their text. */
int ddp_log_rank(void);

void ddp_log_set_level(ddp_log_level_t level);
ddp_log_level_t ddp_log_level(void);

/* Nonzero: every rank prints info/debug lines, not only rank 0. */
void ddp_log_set_all_ranks(int all_ranks);

/* Where lines go (default stderr). Tests point this at a temporary file. */
void ddp_log_set_stream(FILE *stream);

/* Parses "error", "warn", "info" or "debug". */
ddp_status_t ddp_log_level_parse(const char *text, ddp_log_level_t *level);

/* Nonzero when a line of this level would be printed by this rank. */
int ddp_log_enabled(ddp_log_level_t level);

/* file may be NULL; error and debug lines show file:line when given. */
void ddp_log_at(ddp_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define DDP_LOG_ERROR(...) ddp_log_at(DDP_LOG_LEVEL_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define DDP_LOG_WARN(...) ddp_log_at(DDP_LOG_LEVEL_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define DDP_LOG_INFO(...) ddp_log_at(DDP_LOG_LEVEL_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define DDP_LOG_DEBUG(...) ddp_log_at(DDP_LOG_LEVEL_DEBUG, __FILE__, __LINE__, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
