/* Elapsed time and ETA of the progress lines (see progress_time.h). */
#include "train/progress_time.h"

#include <math.h>
#include <stdio.h>

void ddp_format_duration(double seconds, char *buf, size_t len) {
  if (!isfinite(seconds) || seconds < 0 || seconds > 1e9) {
    snprintf(buf, len, "?");
    return;
  }
  const long long s = llround(seconds);
  if (s < 60)
    snprintf(buf, len, "%llds", s);
  else if (s < 3600)
    snprintf(buf, len, "%lldm%02llds", s / 60, s % 60);
  else
    snprintf(buf, len, "%lldh%02lldm", s / 3600, s % 3600 / 60);
}

void ddp_progress_time_note(double elapsed_s, double window_s_per_step, int64_t steps_left,
                            char *buf, size_t len) {
  char elapsed[32], eta[32];
  ddp_format_duration(elapsed_s, elapsed, sizeof elapsed);
  ddp_format_duration(window_s_per_step * (double)(steps_left > 0 ? steps_left : 0), eta,
                      sizeof eta);
  snprintf(buf, len, "elapsed %s | ETA %s", elapsed, eta);
}
