/* Stop signals and the per-step stop vote (see preempt.h). */
#define _POSIX_C_SOURCE 200809L
#include "train/preempt.h"

#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ddptrain/check.h"
#include "core/env.h"

static volatile sig_atomic_t g_signal;  /* first stop signal received, 0 = none */
static volatile sig_atomic_t g_sigints; /* SIGINTs received */

static const int k_signals[] = {SIGTERM, SIGUSR1, SIGINT};
enum { N_SIGNALS = sizeof k_signals / sizeof k_signals[0] };
static struct sigaction g_old[N_SIGNALS];
static int g_installed;

static void on_signal(int signo) {
  if (signo == SIGINT && ++g_sigints >= 2) _exit(DDP_PREEMPT_EXIT_SECOND_SIGINT);
  if (!g_signal) g_signal = signo;
}

ddp_status_t ddp_preempt_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART; /* a step's blocking calls carry on; the loop polls */
  g_signal = 0;
  g_sigints = 0;
  for (int i = 0; i < N_SIGNALS; ++i)
    if (sigaction(k_signals[i], &sa, &g_old[i]) != 0)
      DDP_FAIL(DDP_ERR_INTERNAL, "cannot install the handler of signal %d", k_signals[i]);
  g_installed = 1;
  return DDP_OK;
}

void ddp_preempt_restore(void) {
  if (!g_installed) return;
  for (int i = 0; i < N_SIGNALS; ++i) sigaction(k_signals[i], &g_old[i], NULL);
  g_installed = 0;
}

ddp_status_t ddp_preempt_vote(ddp_comm_t *comm, int world, int *stop, int *signo) {
  *signo = (int)g_signal;
  int32_t v = *signo != 0;
  if (world > 1) DDP_CHECK(ddp_comm_allreduce_sum(comm, &v, 1, DDP_DTYPE_I32, NULL, NULL));
  *stop = v != 0;
  return DDP_OK;
}

ddp_status_t ddp_preempt_fault_sleep(void) {
  double ms = 0;
  DDP_CHECK(ddp_env_get_double(DDP_ENV_FAULT_STEP_SLEEP_MS, &ms));
  if (ms > 0) {
    const struct timespec full = {.tv_sec = (time_t)(ms / 1e3),
                                  .tv_nsec = (long)((ms - 1e3 * (double)(time_t)(ms / 1e3)) * 1e6)};
    struct timespec left;
    /* A signal restarts the whole pause: a test that sends a second signal
     * shortly after the first knows the run is still inside the step. */
    while (nanosleep(&full, &left) != 0) {
    }
  }
  return DDP_OK;
}
