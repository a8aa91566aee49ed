/* The one monotonic clock of the runtime: seconds as a double, for step
 * timings, timeouts and plan build times. CLOCK_MONOTONIC never jumps with
 * the wall clock (NTP, a changed date), so intervals stay right. */
#ifndef DDPTRAIN_CORE_CLOCK_H
#define DDPTRAIN_CORE_CLOCK_H

#include <time.h>

#include <stdint.h>

static inline int64_t ddp_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline double ddp_clock_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
