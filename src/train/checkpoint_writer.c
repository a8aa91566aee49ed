/* The background checkpoint writer (see checkpoint_writer.h): one thread,
 * one staging buffer, one job at a time. A second save waits for the first
 * write to end rather than allocating another buffer: checkpoints are far
 * apart, and host memory for two copies of the training state is not. */
#include "train/checkpoint_writer.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ddptrain/check.h"
#include "core/clock.h"
#include "core/env.h"

/* A fault-injected write fails after this many bytes: part of the file is
 * on disk, as on a real full disk, so the clean-up path runs. */
enum { FAULT_BYTES = 4096 };

struct ddp_ckpt_writer {
  char dir[1024];
  int keep;
  int64_t protect; /* the step resumed from: never pruned; -1 none */
  int64_t fault_step;
  ddp_ckpt_image_t img; /* layout + staging buffers (params, state) */
  char *config;
  char last_good[1100]; /* newest checkpoint written by this run or found */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int started, busy, quit;
  ddp_status_t last_status;
};

/* mkdir -p; errors are left to the writes, which name the path. */
static void make_dirs(const char *dir) {
  char p[1024];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; ++s)
    if (*s == '/') {
      *s = '\0';
      mkdir(p, 0777);
      *s = '/';
    }
  if (mkdir(p, 0777) != 0 && errno != EEXIST)
    DDP_LOG_WARN(
        "cannot create checkpoint directory %s: %s; training continues, and each "
        "checkpoint will be tried there",
        dir, strerror(errno));
}

static void write_one(ddp_ckpt_writer_t *w) {
  const int64_t step = w->img.meta.step;
  char path[1100], tmp[1400]; /* tmp: path + host name + PID */
  const double t0 = ddp_clock_seconds();
  ddp_status_t st = ddp_ckpt_path(path, sizeof path, w->dir, step);
  if (st == DDP_OK) st = ddp_ckpt_tmp_path(tmp, sizeof tmp, w->dir, step);
  if (st == DDP_OK)
    st = ddp_ckpt_write(path, tmp, &w->img, step == w->fault_step ? FAULT_BYTES : 0);
  const double dt = ddp_clock_seconds() - t0;
  if (st == DDP_OK) {
    ddp_ckpt_prune(w->dir, w->keep, w->protect);
    snprintf(w->last_good, sizeof w->last_good, "%s", path);
    const double mib =
        ((double)w->img.n_params * (1 + w->img.n_slots) + (double)w->img.n_buffer_floats) * 4 /
        1048576.0;
    DDP_LOG_INFO("checkpoint: step %lld written to %s (%.1f MiB in %.2f s, in the background)",
                 (long long)step, path, mib, dt);
  } else {
    DDP_LOG_WARN(
        "checkpoint: step %lld NOT written to %s (see the error above); the newest "
        "checkpoint is still %s",
        (long long)step, path, w->last_good[0] ? w->last_good : "none");
  }
  w->last_status = st;
}

static void *writer_main(void *arg) {
  ddp_ckpt_writer_t *w = arg;
  sigset_t all; /* signals are the step loop's to handle */
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, NULL);
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->busy && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
    if (!w->busy) break;
    pthread_mutex_unlock(&w->mu);
    write_one(w);
    pthread_mutex_lock(&w->mu);
    w->busy = 0;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

/* Before the first write: the temporary files of killed writers go, and
 * checkpoints above the start step move aside (see checkpoint_dir.c). */
static ddp_status_t prepare_dir(ddp_ckpt_writer_t *w, int64_t resumed_from) {
  int removed = 0, kept = 0, moved = 0;
  ddp_ckpt_remove_stale_tmp(w->dir, &removed, &kept);
  DDP_CHECK(ddp_ckpt_set_aside(w->dir, resumed_from > 0 ? resumed_from : 0, &moved));
  int64_t *steps = NULL;
  int n = 0;
  if (ddp_ckpt_list(w->dir, &steps, &n) == DDP_OK && n > 0)
    ddp_ckpt_path(w->last_good, sizeof w->last_good, w->dir, steps[0]);
  free(steps);
  return DDP_OK;
}

ddp_status_t ddp_ckpt_writer_create(const char *dir, int keep, int64_t resumed_from,
                                    const ddp_ckpt_image_t *layout, const char *config,
                                    ddp_ckpt_writer_t **out) {
  *out = NULL;
  ddp_ckpt_writer_t *w = calloc(1, sizeof *w);
  if (!w) DDP_FAIL(DDP_ERR_OOM, "checkpoint writer: out of host memory");
  ddp_status_t st = DDP_OK;
  double fault = 0;
  DDP_CHECK_GOTO(ddp_env_get_double(DDP_ENV_FAULT_CKPT_FULL_STEP, &fault), st, fail);
  snprintf(w->dir, sizeof w->dir, "%s", dir);
  w->keep = keep;
  w->protect = resumed_from;
  w->fault_step = fault > 0 ? (int64_t)fault : -1;
  w->img = *layout;
  const size_t state_floats = layout->n_params * (size_t)(1 + layout->n_slots);
  const size_t floats = state_floats + layout->n_buffer_floats;
  w->img.params = malloc(floats * sizeof(float));
  w->config = strdup(config);
  if (!w->img.params || !w->config)
    DDP_FAIL_GOTO(st, DDP_ERR_OOM, fail, "checkpoint writer: %.1f MiB of staging memory",
                  (double)floats * 4 / 1048576.0);
  /* Touch every page now, so the first checkpoint's pause is a copy and not
   * page faults. Through a volatile pointer: the compiler may turn malloc +
   * memset(0) into calloc, whose fresh pages are mapped only on first use. */
  volatile char *touch = (volatile char *)w->img.params;
  for (size_t b = 0; b < floats * sizeof(float); b += 4096) touch[b] = 1;
  w->img.state = w->img.params + layout->n_params;
  w->img.buffers = layout->n_buffer_floats ? w->img.params + state_floats : NULL;
  w->img.config = w->config;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  if (pthread_create(&w->thread, NULL, writer_main, w) != 0)
    DDP_FAIL_GOTO(st, DDP_ERR_INTERNAL, fail, "checkpoint writer: cannot start a thread");
  w->started = 1;
  make_dirs(dir);
  DDP_CHECK_GOTO(prepare_dir(w, resumed_from), st, fail);
  *out = w;
  return DDP_OK;
fail:
  ddp_ckpt_writer_destroy(w);
  return st;
}

static void wait_idle(ddp_ckpt_writer_t *w) {
  pthread_mutex_lock(&w->mu);
  while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
  pthread_mutex_unlock(&w->mu);
}

ddp_status_t ddp_ckpt_writer_stage(ddp_ckpt_writer_t *w, float **params, float **state,
                                   float **buffers) {
  wait_idle(w);
  *params = w->img.params;
  *state = w->img.n_slots ? w->img.state : NULL;
  *buffers = w->img.buffers;
  return DDP_OK;
}

ddp_status_t ddp_ckpt_writer_commit(ddp_ckpt_writer_t *w, const ddp_ckpt_meta_t *meta) {
  pthread_mutex_lock(&w->mu);
  w->img.meta = *meta;
  w->busy = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return DDP_OK;
}

ddp_status_t ddp_ckpt_writer_save(ddp_ckpt_writer_t *w, ddp_backend_t *be, const float *params,
                                  const float *state, const float *buffers,
                                  const ddp_ckpt_meta_t *meta, double *pause_ms) {
  const double t0 = ddp_clock_seconds();
  float *hp, *hs, *hb;
  DDP_CHECK(ddp_ckpt_writer_stage(w, &hp, &hs, &hb));
  const size_t n = w->img.n_params;
  DDP_CHECK(
      ddp_backend_copy(be, hp, params, n * sizeof(float), DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  if (hs)
    DDP_CHECK(ddp_backend_copy(be, hs, state, (size_t)w->img.n_slots * n * sizeof(float),
                               DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  if (hb)
    DDP_CHECK(ddp_backend_copy(be, hb, buffers, w->img.n_buffer_floats * sizeof(float),
                               DDP_COPY_KIND_DEVICE_TO_HOST, NULL));
  DDP_CHECK(ddp_backend_sync(be, NULL));
  DDP_CHECK(ddp_ckpt_writer_commit(w, meta));
  if (pause_ms) *pause_ms = 1e3 * (ddp_clock_seconds() - t0);
  return DDP_OK;
}

ddp_status_t ddp_ckpt_writer_flush(ddp_ckpt_writer_t *w) {
  wait_idle(w);
  return w->last_status;
}

void ddp_ckpt_writer_destroy(ddp_ckpt_writer_t *w) {
  if (!w) return;
  if (w->started) {
    pthread_mutex_lock(&w->mu);
    w->quit = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL); /* finishes a write in progress first */
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
  }
  free(w->img.params);
  free(w->config);
  free(w);
}
