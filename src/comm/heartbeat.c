/* The heartbeat ring (see comm/heartbeat.h). It lives in src/comm/ because
 * it talks MPI; it uses its own duplicate of MPI_COMM_WORLD so its messages
 * can never match a receive of the training collectives. */
#define _GNU_SOURCE /* pthread_setname_np */
#include <config.h>

#include "comm/heartbeat.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if DDP_HAVE_MPI
#include <mpi.h>
#include <pthread.h>
#endif

#include "ddptrain/check.h"
#include "ddptrain/log.h"
#include "comm/watchdog_clock.h"
#include "core/clock.h"
#include "core/foreign_check.h"

#if DDP_HAVE_MPI
enum { MSG_BEAT = 1, MSG_BYE = 2, HB_TAG = 7 };

struct ddp_heartbeat {
  MPI_Comm comm;
  int left, right;
  double timeout, beat_every, poll;
  char left_host[sizeof(((ddp_dist_t *)0)->host)];
  atomic_int stop;
  pthread_t thread;
};

static void sleep_s(double s) {
  struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

/* An MPI failure inside the watch means the ring is broken, which is what the
 * watch exists to report; there is no caller to return a status to. */
static void hb_fail(const ddp_heartbeat_t *hb, const char *what, int code) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", code);
  DDP_LOG_ERROR("heartbeat: %s failed (%s); rank %d on %s may be gone, ending the job", what, msg,
                hb->left, hb->left_host);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static void *watch(void *arg) {
  ddp_heartbeat_t *hb = arg;
  /* Named so `top -H` and bench/heartbeat.sh can find it (15 chars at most). */
  pthread_setname_np(pthread_self(), "ddp-heartbeat");
  int in = 0, out = 0, rc, flag = 0;
  int left_done = 0, bye_sent = 0;
  MPI_Request rreq = MPI_REQUEST_NULL, sreq = MPI_REQUEST_NULL;
  if ((rc = MPI_Irecv(&in, 1, MPI_INT, hb->left, HB_TAG, hb->comm, &rreq)) != MPI_SUCCESS)
    hb_fail(hb, "MPI_Irecv", rc);
  double heard = ddp_clock_seconds(), sent = -1e300;
  /* A stall of this thread itself (the whole process stopped or starved) is
   * not the left neighbour's silence (comm/watchdog_clock.h). */
  ddp_watch_clock_t clock;
  ddp_watch_clock_init(&clock, hb->poll, heard);
  for (;;) {
    const double t = ddp_clock_seconds();
    ddp_watch_clock_look(&clock, t);
    while (!left_done) {
      if ((rc = MPI_Test(&rreq, &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
        hb_fail(hb, "MPI_Test (receive)", rc);
      if (!flag) break;
      heard = t;
      if (in == MSG_BYE) {
        left_done = 1;
      } else if ((rc = MPI_Irecv(&in, 1, MPI_INT, hb->left, HB_TAG, hb->comm, &rreq)) !=
                 MPI_SUCCESS) {
        hb_fail(hb, "MPI_Irecv", rc);
      }
    }
    const double silent = ddp_watch_clock_age(&clock, heard, t);
    if (!left_done && silent > hb->timeout) {
      DDP_LOG_ERROR("rank %d on %s has not been heard from for %.0f s; ending the job", hb->left,
                    hb->left_host, silent);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (sreq != MPI_REQUEST_NULL && (rc = MPI_Test(&sreq, &flag, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
      hb_fail(hb, "MPI_Test (send)", rc);
    /* One send in flight at most: a stopped receiver must not make beats
     * pile up, and `out` is not touched while MPI may still read it. */
    if (!bye_sent && sreq == MPI_REQUEST_NULL) {
      const int stopping = atomic_load(&hb->stop);
      if (stopping || t - sent >= hb->beat_every) {
        out = stopping ? MSG_BYE : MSG_BEAT;
        if ((rc = MPI_Isend(&out, 1, MPI_INT, hb->right, HB_TAG, hb->comm, &sreq)) != MPI_SUCCESS)
          hb_fail(hb, "MPI_Isend", rc);
        sent = t;
        bye_sent = stopping;
      }
    }
    if (bye_sent && left_done && sreq == MPI_REQUEST_NULL) break;
    sleep_s(hb->poll);
  }
  return NULL;
}

ddp_status_t ddp_heartbeat_start(const ddp_dist_t *dist, double timeout_s, ddp_heartbeat_t **out) {
  *out = NULL;
  if (timeout_s <= 0 || dist->world < 2) return DDP_OK;
  if (dist->thread_level < MPI_THREAD_MULTIPLE) {
    DDP_LOG_WARN("heartbeat disabled: MPI provides thread level %d, not MPI_THREAD_MULTIPLE",
                 dist->thread_level);
    return DDP_OK;
  }
  ddp_heartbeat_t *hb = calloc(1, sizeof *hb);
  if (!hb) DDP_FAIL(DDP_ERR_OOM, "heartbeat: out of memory");
  ddp_status_t st = DDP_OK;
  char *hosts = NULL;
  const size_t hl = sizeof hb->left_host;
  hb->left = (dist->rank + dist->world - 1) % dist->world;
  hb->right = (dist->rank + 1) % dist->world;
  hb->timeout = timeout_s;
  /* Ten beats per timeout: a pause must last 90% of the timeout before it
   * can look like a silence. Polling is finer so detection is prompt. */
  hb->beat_every = timeout_s / 10;
  hb->poll = ddp_watch_poll_s(timeout_s);
  atomic_init(&hb->stop, 0);
  DDP_MPI_CHECK_GOTO(MPI_Comm_dup(MPI_COMM_WORLD, &hb->comm), st, free_hb);
  hosts = calloc((size_t)dist->world, hl);
  if (!hosts) DDP_FAIL_GOTO(st, DDP_ERR_OOM, free_comm, "heartbeat: out of memory");
  char mine[sizeof hb->left_host];
  snprintf(mine, sizeof mine, "%s", dist->host);
  DDP_MPI_CHECK_GOTO(MPI_Allgather(mine, (int)hl, MPI_CHAR, hosts, (int)hl, MPI_CHAR, hb->comm), st,
                     free_hosts);
  memcpy(hb->left_host, hosts + (size_t)hb->left * hl, hl);
  hb->left_host[hl - 1] = '\0';
  free(hosts);
  hosts = NULL;
  /* Signals stay with the main thread (preemption handlers, Ctrl-C): the
   * thread starts with every signal blocked. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const int prc = pthread_create(&hb->thread, NULL, watch, hb);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (prc != 0) DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, free_comm, "heartbeat: cannot start thread");
  DDP_LOG_DEBUG("heartbeat: watching rank %d on %s, timeout %.1f s", hb->left, hb->left_host,
                timeout_s);
  *out = hb;
  return DDP_OK;
free_hosts:
  free(hosts);
free_comm:
  MPI_Comm_free(&hb->comm);
free_hb:
  free(hb);
  return st;
}

void ddp_heartbeat_stop(ddp_heartbeat_t *hb) {
  if (!hb) return;
  atomic_store(&hb->stop, 1);
  pthread_join(hb->thread, NULL);
  MPI_Comm_free(&hb->comm);
  free(hb);
}
#else
ddp_status_t ddp_heartbeat_start(const ddp_dist_t *dist, double timeout_s, ddp_heartbeat_t **out) {
  (void)dist;
  (void)timeout_s;
  *out = NULL;
  return DDP_OK;
}

void ddp_heartbeat_stop(ddp_heartbeat_t *hb) {
  (void)hb;
}
#endif
