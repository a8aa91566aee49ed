/* The start-up watchdog (see runtime/startup_watchdog.h). Besides dist.c,
 * the one file of src/runtime/ that calls MPI: it must, to name the ranks
 * that are missing and to end the job from its own thread. */
#define _GNU_SOURCE /* pthread_setname_np */
#include <config.h>

#include "runtime/startup_watchdog.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if DDP_HAVE_MPI
#include <mpi.h>
#endif

#include "ddptrain/check.h"
#include "ddptrain/log.h"
#include "comm/watchdog_clock.h"
#include "core/clock.h"
#include "runtime/dist.h"

/* Exit status of a job the watchdog ends: a runtime failure. */
enum { EXIT_STARTUP_TIMEOUT = 1 };
/* How long the rank that times out waits for the others' answers, and how
 * much longer than rank 0 the other ranks wait before they speak (rank 0's
 * line and MPI_Abort normally come first). */
#define ASK_WAIT_S 2.0
#define GRACE_S 3.0
/* Point-to-point tags on MPI_COMM_WORLD; nothing else sends point-to-point
 * there (the heartbeat and the communicators use duplicates). */
enum { TAG_ASK = 0x5741, TAG_ANSWER = 0x5742 };
/* Ranks a line names one by one; more are counted. */
enum { NAMED_SILENT = 16, NAMED_ELSEWHERE = 8 };

static const char *const k_keys[] = {
#define DDP_STARTUP_KEY_(id, key, label) key,
    DDP_STARTUP_PHASES(DDP_STARTUP_KEY_)
#undef DDP_STARTUP_KEY_
};
static const char *const k_labels[] = {
#define DDP_STARTUP_LABEL_(id, key, label) label,
    DDP_STARTUP_PHASES(DDP_STARTUP_LABEL_)
#undef DDP_STARTUP_LABEL_
};

const char *ddp_startup_phase_key(ddp_startup_phase_t phase) {
  return phase >= 0 && phase < DDP_STARTUP_PHASE_COUNT_ ? k_keys[phase] : NULL;
}

const char *ddp_startup_phase_label(ddp_startup_phase_t phase) {
  return phase >= 0 && phase < DDP_STARTUP_PHASE_COUNT_ ? k_labels[phase] : NULL;
}

/* The one watchdog; `lock` guards every field. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  int running, stop;
  double timeout_s;
  ddp_startup_phase_t phase;
  double since; /* when the phase began, ddp_clock_seconds() */
  int mpi_up, rank, world, multiple;
  char host[64];
  pthread_t thread;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* "rank R", or before MPI the launcher's number for this process. */
static void who(char *out, size_t len, int mpi_up, int rank) {
  const int r = mpi_up ? rank : ddp_dist_launcher_rank();
  if (r >= 0)
    snprintf(out, len, "rank %d", r);
  else
    snprintf(out, len, "this process");
}

/* The line's first part: who, where, which phase, for how long. */
static size_t headline(char *line, size_t len, int mpi_up, int rank, const char *host,
                       ddp_startup_phase_t phase, double age) {
  char me[32];
  who(me, sizeof me, mpi_up, rank);
  const int n = snprintf(line, len,
                         "%s on %s: start-up phase '%s' has not ended after %.1f s "
                         "(--startup-timeout %g)",
                         me, host, ddp_startup_phase_label(phase), age, g.timeout_s);
  return n < 0 ? 0 : (size_t)n < len ? (size_t)n : len - 1;
}

#if DDP_HAVE_MPI
/* Answers every question that has come ("which phase are you in?") with this
 * rank's phase and how long it has been in it; keeps one receive posted. */
static void answer(MPI_Request *asked, int *asked_buf, ddp_startup_phase_t phase, double age) {
  for (;;) {
    if (*asked == MPI_REQUEST_NULL && MPI_Irecv(asked_buf, 1, MPI_INT, MPI_ANY_SOURCE, TAG_ASK,
                                                MPI_COMM_WORLD, asked) != MPI_SUCCESS)
      return;
    int flag = 0;
    MPI_Status status;
    if (MPI_Test(asked, &flag, &status) != MPI_SUCCESS || !flag) return;
    long long reply[2] = {(long long)phase, (long long)(age * 1000.0)};
    /* Two numbers go eagerly: this returns at once, and the asker is alive. */
    MPI_Send(reply, 2, MPI_LONG_LONG, status.MPI_SOURCE, TAG_ANSWER, MPI_COMM_WORLD);
  }
}

/* Asks every other rank which phase it is in and appends to the line the
 * ranks that did not answer within ASK_WAIT_S and those that answered from
 * another phase. Keeps answering questions meanwhile: another rank may be
 * asking at the same time. */
static void ask_all(char *line, size_t len, size_t n, int rank, int world,
                    ddp_startup_phase_t phase, double age, MPI_Request *asked, int *asked_buf) {
  MPI_Request *reqs = calloc((size_t)world * 2, sizeof *reqs);
  long long(*replies)[2] = calloc((size_t)world, sizeof *replies);
  int *heard = calloc((size_t)world, sizeof *heard);
  static int question = 1;
  if (!reqs || !replies || !heard) {
    snprintf(line + n, len - n, "; the other ranks could not be asked (out of memory)");
    goto free_all;
  }
  for (int r = 0; r < world; ++r) {
    reqs[2 * r] = reqs[2 * r + 1] = MPI_REQUEST_NULL;
    if (r == rank) continue;
    MPI_Irecv(replies[r], 2, MPI_LONG_LONG, r, TAG_ANSWER, MPI_COMM_WORLD, &reqs[2 * r]);
    MPI_Isend(&question, 1, MPI_INT, r, TAG_ASK, MPI_COMM_WORLD, &reqs[2 * r + 1]);
  }
  int waiting = world - 1;
  const double until = ddp_clock_seconds() + ASK_WAIT_S;
  while (waiting > 0 && ddp_clock_seconds() < until) {
    for (int r = 0; r < world; ++r) {
      int flag = 0;
      if (r == rank || heard[r] || reqs[2 * r] == MPI_REQUEST_NULL) continue;
      if (MPI_Test(&reqs[2 * r], &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS && flag) {
        heard[r] = 1;
        --waiting;
      }
    }
    answer(asked, asked_buf, phase, age);
    const struct timespec pause = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  /* The silent ones, then the ones elsewhere. */
  int silent = 0, elsewhere = 0;
  for (int r = 0; r < world && n < len; ++r) {
    if (r == rank || heard[r]) continue;
    if (silent < NAMED_SILENT)
      n += (size_t)snprintf(line + n, len - n, "%s%d",
                            silent ? ", " : "; ranks not heard from: ", r);
    ++silent;
  }
  if (silent > NAMED_SILENT && n < len)
    n += (size_t)snprintf(line + n, len - n, " and %d more", silent - NAMED_SILENT);
  if (silent == 0 && n < len) n += (size_t)snprintf(line + n, len - n, "; every rank answered");
  for (int r = 0; r < world && n < len; ++r) {
    if (r == rank || !heard[r] || replies[r][0] == (long long)phase) continue;
    const char *where = replies[r][0] >= 0 && replies[r][0] < DDP_STARTUP_PHASE_COUNT_
                            ? ddp_startup_phase_label((ddp_startup_phase_t)replies[r][0])
                            : "?";
    if (elsewhere < NAMED_ELSEWHERE)
      n += (size_t)snprintf(line + n, len - n, "%srank %d in '%s' for %.1f s",
                            elsewhere ? ", " : "; elsewhere: ", r, where,
                            (double)replies[r][1] / 1000.0);
    ++elsewhere;
  }
  if (elsewhere > NAMED_ELSEWHERE && n < len)
    snprintf(line + n, len - n, " and %d more", elsewhere - NAMED_ELSEWHERE);
free_all:
  free(heard);
  free(replies);
  free(reqs);
}
#endif

/* The phase has overrun: one line, then the end of the job. Never returns. */
static void give_up(ddp_startup_phase_t phase, double age, int mpi_up, int rank, int world,
                    int multiple, const char *host, void *asked, int *asked_buf) {
  char line[1536];
  const size_t n = headline(line, sizeof line, mpi_up, rank, host, phase, age);
  if (!mpi_up) {
    snprintf(line + n, sizeof line - n,
             "; MPI is not up yet, so the ranks that are missing cannot be named; ending this "
             "process (the launcher ends the others)");
    DDP_LOG_ERROR("%s", line);
    fflush(stdout);
    /* _exit: the main thread is inside MPI_Init, whose exit handlers must
     * not run under it. */
    _exit(EXIT_STARTUP_TIMEOUT);
  }
#if DDP_HAVE_MPI
  if (world > 1 && multiple)
    ask_all(line, sizeof line, n, rank, world, phase, age, asked, asked_buf);
  else if (world > 1)
    snprintf(line + n, sizeof line - n,
             "; the other ranks cannot be asked which phase they are in (MPI does not provide "
             "MPI_THREAD_MULTIPLE)");
#else
  (void)world;
  (void)multiple;
  (void)asked;
  (void)asked_buf;
#endif
  const size_t m = strlen(line);
  snprintf(line + m, sizeof line - m, "; ending the job");
  DDP_LOG_ERROR("%s", line);
  fflush(stdout);
#if DDP_HAVE_MPI
  MPI_Abort(MPI_COMM_WORLD, EXIT_STARTUP_TIMEOUT);
#endif
  _exit(EXIT_STARTUP_TIMEOUT);
}

static void *watch_main(void *arg) {
  (void)arg;
  /* Named so `top -H` finds it (15 characters at most). */
  pthread_setname_np(pthread_self(), "ddp-startwatch");
  const double poll = ddp_watch_poll_s(g.timeout_s);
  ddp_watch_clock_t clock;
  ddp_watch_clock_init(&clock, poll, ddp_clock_seconds());
#if DDP_HAVE_MPI
  MPI_Request asked = MPI_REQUEST_NULL;
#else
  int asked = 0;
#endif
  static int asked_buf;
  pthread_mutex_lock(&g.lock);
  while (!g.stop) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    const double t = (double)until.tv_nsec * 1e-9 + poll;
    until.tv_sec += (time_t)t;
    until.tv_nsec = (long)((t - (double)(time_t)t) * 1e9);
    pthread_cond_timedwait(&g.wake, &g.lock, &until);
    if (g.stop) break;
    const double now = ddp_clock_seconds();
    ddp_watch_clock_look(&clock, now);
    const ddp_startup_phase_t phase = g.phase;
    const double age = ddp_watch_clock_age(&clock, g.since, now);
    const int mpi_up = g.mpi_up, rank = g.rank, world = g.world, multiple = g.multiple;
    char host[sizeof g.host];
    memcpy(host, g.host, sizeof host);
    pthread_mutex_unlock(&g.lock);
#if DDP_HAVE_MPI
    if (mpi_up && multiple && world > 1) answer(&asked, &asked_buf, phase, age);
#endif
    /* Rank 0 speaks first (see the header). */
    const double limit = g.timeout_s + (mpi_up && rank != 0 ? GRACE_S : 0.0);
    if (age > limit) give_up(phase, age, mpi_up, rank, world, multiple, host, &asked, &asked_buf);
    pthread_mutex_lock(&g.lock);
  }
  pthread_mutex_unlock(&g.lock);
#if DDP_HAVE_MPI
  if (asked != MPI_REQUEST_NULL) { /* the receive left posted */
    MPI_Cancel(&asked);
    MPI_Wait(&asked, MPI_STATUS_IGNORE);
  }
#endif
  return NULL;
}

ddp_status_t ddp_startup_watchdog_start(double timeout_s) {
  if (!(timeout_s > 0)) return DDP_OK;
  pthread_mutex_lock(&g.lock);
  if (g.running) {
    pthread_mutex_unlock(&g.lock);
    DDP_FAIL(DDP_ERR_INVALID_ARG, "start-up watchdog: already running");
  }
  pthread_condattr_t ca;
  int ok = pthread_condattr_init(&ca) == 0;
  if (ok) {
    ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
         pthread_cond_init(&g.wake, &ca) == 0;
    pthread_condattr_destroy(&ca);
  }
  if (!ok) {
    pthread_mutex_unlock(&g.lock);
    DDP_FAIL(DDP_ERR_INTERNAL, "start-up watchdog: pthread_cond_init failed");
  }
  g.stop = 0;
  g.timeout_s = timeout_s;
  g.phase = DDP_STARTUP_MPI_INIT;
  g.since = ddp_clock_seconds();
  g.mpi_up = g.rank = g.multiple = 0;
  g.world = 1;
  if (gethostname(g.host, sizeof g.host) != 0) snprintf(g.host, sizeof g.host, "?");
  g.host[sizeof g.host - 1] = '\0';
  /* Signals stay with the main thread (preemption handlers, Ctrl-C). */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const int rc = pthread_create(&g.thread, NULL, watch_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pthread_cond_destroy(&g.wake);
    pthread_mutex_unlock(&g.lock);
    DDP_FAIL(DDP_ERR_INTERNAL, "start-up watchdog: cannot start its thread");
  }
  g.running = 1;
  pthread_mutex_unlock(&g.lock);
  return DDP_OK;
}

void ddp_startup_watchdog_phase(ddp_startup_phase_t phase) {
  pthread_mutex_lock(&g.lock);
  if (g.running && phase >= 0 && phase < DDP_STARTUP_PHASE_COUNT_) {
    g.phase = phase;
    g.since = ddp_clock_seconds();
  }
  pthread_mutex_unlock(&g.lock);
}

void ddp_startup_watchdog_mpi_up(int rank, int world, int thread_level, const char *host) {
  pthread_mutex_lock(&g.lock);
  if (g.running) {
    g.rank = rank;
    g.world = world;
#if DDP_HAVE_MPI
    g.multiple = thread_level >= MPI_THREAD_MULTIPLE;
#else
    (void)thread_level;
#endif
    if (host) snprintf(g.host, sizeof g.host, "%s", host);
    g.mpi_up = 1;
  }
  pthread_mutex_unlock(&g.lock);
}

void ddp_startup_watchdog_stop(void) {
  pthread_mutex_lock(&g.lock);
  if (!g.running) {
    pthread_mutex_unlock(&g.lock);
    return;
  }
  g.stop = 1;
  pthread_cond_signal(&g.wake);
  pthread_mutex_unlock(&g.lock);
  pthread_join(g.thread, NULL);
  pthread_mutex_lock(&g.lock);
  pthread_cond_destroy(&g.wake);
  g.running = 0;
  pthread_mutex_unlock(&g.lock);
}
