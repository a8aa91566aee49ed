/* Fault injection (see fault.h). The faults act on the whole process, as a
 * real failure would: SIGKILL, SIGSTOP, and for PAUSE a SIGSTOP that a forked
 * child lifts with SIGCONT after the pause (a stopped process cannot wake
 * itself), so every thread, the heartbeat's included, is frozen meanwhile. */
#include "runtime/fault.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ddptrain/check.h"
#include "ddptrain/log.h"
#include "core/ascii.h"
#include "core/env.h"
#include "runtime/dist.h"
#include "runtime/startup_watchdog.h"

static ddp_status_t pause_process(double seconds) {
  const pid_t self = getpid();
  const pid_t child = fork();
  if (child < 0) DDP_FAIL(DDP_ERR_INTERNAL, "fault injection: fork failed");
  if (child == 0) { /* only async-signal-safe calls between fork and _exit */
    struct timespec ts = {.tv_sec = (time_t)seconds,
                          .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
    kill(self, SIGCONT);
    _exit(0);
  }
  raise(SIGSTOP);
  while (waitpid(child, NULL, 0) < 0) {
  }
  return DDP_OK;
}

ddp_status_t ddp_fault_maybe_inject(int rank, int64_t step) {
  if (!ddp_env_is_set(DDP_ENV_FAULT_RANK)) return DDP_OK; /* the common case: one getenv */
  double who = -1, when = 1, pause_s = 0;
  DDP_CHECK(ddp_env_get_double(DDP_ENV_FAULT_RANK, &who));
  DDP_CHECK(ddp_env_get_double(DDP_ENV_FAULT_STEP, &when));
  const char *kind = ddp_env_get(DDP_ENV_FAULT_KIND);
  const int kill9 = ddp_ascii_ieq(kind, "KILL"), stop = ddp_ascii_ieq(kind, "STOP"),
            pause = ddp_ascii_ieq(kind, "PAUSE");
  if (!kill9 && !stop && !pause)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s='%s': expected KILL, STOP or PAUSE",
             ddp_env_name(DDP_ENV_FAULT_KIND), kind);
  if (pause) {
    DDP_CHECK(ddp_env_get_double(DDP_ENV_FAULT_PAUSE_S, &pause_s));
    if (pause_s < 0 || pause_s > 86400)
      DDP_FAIL(DDP_ERR_INVALID_ARG, "%s='%g': expected 0 to 86400 seconds",
               ddp_env_name(DDP_ENV_FAULT_PAUSE_S), pause_s);
  }
  if ((int)who != rank || (int64_t)when != step + 1) return DDP_OK;
  DDP_LOG_WARN("fault injection: rank %d %s at step %lld", rank,
               kill9  ? "kills itself (SIGKILL)"
               : stop ? "stops itself (SIGSTOP) for good"
                      : "stops itself for a while",
               (long long)step + 1);
  if (kill9) raise(SIGKILL);
  if (stop) {
    for (;;) raise(SIGSTOP); /* a stray SIGCONT must not revive it */
  }
  DDP_CHECK(pause_process(pause_s));
  DDP_LOG_WARN("fault injection: rank %d resumes after %g s", rank, pause_s);
  return DDP_OK;
}

/* Whether `point` is a start-up point (fault.h). */
static int startup_point_known(const char *point) {
  if (strcmp(point, DDP_FAULT_STARTUP_TRAIN) == 0) return 1;
  for (int p = 0; p < DDP_STARTUP_PHASE_COUNT_; ++p)
    if (strcmp(point, ddp_startup_phase_key((ddp_startup_phase_t)p)) == 0) return 1;
  return 0;
}

ddp_status_t ddp_fault_startup_check(void) {
  if (!ddp_env_is_set(DDP_ENV_FAULT_STARTUP_RANK)) return DDP_OK;
  double who = -1;
  DDP_CHECK(ddp_env_get_double(DDP_ENV_FAULT_STARTUP_RANK, &who));
  if (who != (double)(int)who || who < -1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s='%s': expected a rank (0, 1, ...) or -1",
             ddp_env_name(DDP_ENV_FAULT_STARTUP_RANK), ddp_env_get(DDP_ENV_FAULT_STARTUP_RANK));
  const char *kind = ddp_env_get(DDP_ENV_FAULT_STARTUP_KIND);
  if (!ddp_ascii_ieq(kind, "STOP") && !ddp_ascii_ieq(kind, "HANG"))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s='%s': expected STOP or HANG",
             ddp_env_name(DDP_ENV_FAULT_STARTUP_KIND), kind);
  const char *point = ddp_env_get(DDP_ENV_FAULT_STARTUP_PHASE);
  if (!startup_point_known(point)) {
    char known[256] = "";
    size_t n = 0;
    for (int p = 0; p < DDP_STARTUP_PHASE_COUNT_ && n < sizeof known; ++p)
      n += (size_t)snprintf(known + n, sizeof known - n, "%s, ",
                            ddp_startup_phase_key((ddp_startup_phase_t)p));
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s='%s': expected one of %s%s",
             ddp_env_name(DDP_ENV_FAULT_STARTUP_PHASE), point, known, DDP_FAULT_STARTUP_TRAIN);
  }
  return DDP_OK;
}

void ddp_fault_at_startup(const char *point, int rank) {
  if (!ddp_env_is_set(DDP_ENV_FAULT_STARTUP_RANK)) return; /* the common case: one getenv */
  double who = -1;
  if (ddp_env_get_double(DDP_ENV_FAULT_STARTUP_RANK, &who) != DDP_OK) return;
  if (rank < 0) rank = ddp_dist_launcher_rank();
  if (rank < 0) rank = 0; /* a plain ./ddptrain is rank 0 of 1 */
  if ((int)who != rank || strcmp(point, ddp_env_get(DDP_ENV_FAULT_STARTUP_PHASE)) != 0) return;
  if (ddp_ascii_ieq(ddp_env_get(DDP_ENV_FAULT_STARTUP_KIND), "HANG")) {
    DDP_LOG_WARN("fault injection: rank %d hangs its main thread for good at start-up point '%s'",
                 rank, point);
    for (;;) pause(); /* the other threads, the watchdogs' included, run on */
  }
  DDP_LOG_WARN("fault injection: rank %d stops itself (SIGSTOP) for good at start-up point '%s'",
               rank, point);
  for (;;) raise(SIGSTOP); /* a stray SIGCONT must not revive it */
}
