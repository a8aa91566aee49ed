/* The cost of one --trace marker (DDP_SPAN_BEGIN + DDP_SPAN_END): recording
 * (two monotonic clock reads and a buffer slot) and switched off (a branch
 * per facility), in nanoseconds per pair, best of `passes`. Driven by
 * bench/trace_overhead.sh. Usage: trace_overhead [pairs] [passes] */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>

#include "core/clock.h"
#include "trace/timeline.h"

/* One pass of `pairs` begin/end pairs; the barrier keeps the loop from being
 * folded away when the markers are off. */
static double pass_ns(long pairs) {
  const double t0 = ddp_clock_seconds();
  for (long i = 0; i < pairs; ++i) {
    DDP_SPAN_BEGIN(DDP_SPAN_FORWARD, 0, "forward h.%d", 0);
    DDP_SPAN_END();
    __asm__ volatile("" ::: "memory");
  }
  return 1e9 * (ddp_clock_seconds() - t0) / (double)pairs;
}

int main(int argc, char **argv) {
  const long pairs = argc > 1 ? atol(argv[1]) : 1000000;
  const int passes = argc > 2 ? atoi(argv[2]) : 5;
  if (pairs < 1 || passes < 1) {
    fprintf(stderr, "usage: trace_overhead [pairs >= 1] [passes >= 1]\n");
    return 2;
  }
  double on = 1e30, off = 1e30;
  for (int p = 0; p < passes; ++p) {
    /* a fresh buffer per pass, first touched while timed, as the trainer's
     * is during its first traced steps */
    if (ddp_timeline_init((size_t)pairs, ddp_clock_seconds(), 0, 0) != DDP_OK) return 1;
    ddp_timeline_step(0);
    const double r = pass_ns(pairs);
    ddp_timeline_destroy(); /* recording off from here */
    const double o = pass_ns(pairs);
    if (r < on) on = r;
    if (o < off) off = o;
  }
  printf("| %ld | %.1f | %.2f |\n", pairs, on, off);
  return 0;
}
