/* The time part of a progress line: how long the run has trained and how
 * long the rest will take ("elapsed 1m23s | ETA 4m05s"). */
#ifndef DDPTRAIN_TRAIN_PROGRESS_TIME_H
#define DDPTRAIN_TRAIN_PROGRESS_TIME_H

#include <stddef.h>
#include <stdint.h>

/* A duration for people: "42s", "1m23s", "2h05m" (hours drop the seconds,
 * which no one reads at that scale); "?" for a negative or non-finite one. */
void ddp_format_duration(double seconds, char *buf, size_t len);

/* "elapsed E | ETA T": T is the mean step time of the latest log window
 * times the steps left, so it follows a run that speeds up or slows down
 * rather than averaging over its whole history (start-up included). */
void ddp_progress_time_note(double elapsed_s, double window_s_per_step, int64_t steps_left,
                            char *buf, size_t len);

#endif
