/* The checkpoint directory (see train/ckpt.h): listing, pruning, setting
 * aside checkpoints that a restarted run would otherwise lose to, and
 * removing the temporary files of writers that were killed.
 *
 * "Newest" is the highest step. That is only true of a directory whose
 * files belong to one line of training, so a run first moves any checkpoint
 * above the step it starts at into superseded/ (a corrupt file the resume
 * skipped, or the future of an abandoned run); from then on step order is
 * the order of writing, and pruning by step keeps the newest in time. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "ddptrain/check.h"
#include "train/ckpt.h"

enum { PATH_LEN = 4200 };

static int cmp_desc(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The step of "ckpt_%08lld.safetensors", or -1 for any other name. */
static int64_t step_of(const char *name) {
  long long step;
  int end = 0;
  if (sscanf(name, "ckpt_%lld.safetensors%n", &step, &end) != 1 || name[end] != '\0' || step < 0 ||
      strncmp(name, "ckpt_", 5) != 0 || name[5] < '0' || name[5] > '9')
    return -1;
  return step;
}

ddp_status_t ddp_ckpt_list(const char *dir, int64_t **steps, int *n) {
  *steps = NULL;
  *n = 0;
  DIR *d = opendir(dir);
  if (!d) {
    if (errno == ENOENT) return DDP_OK;
    DDP_FAIL(DDP_ERR_IO, "cannot read checkpoint directory %s: %s", dir, strerror(errno));
  }
  int cap = 0;
  ddp_status_t st = DDP_OK;
  for (struct dirent *e; (e = readdir(d));) {
    const int64_t s = step_of(e->d_name);
    if (s < 0) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 16;
      int64_t *g = realloc(*steps, (size_t)cap * sizeof *g);
      if (!g) {
        st = DDP_ERR_OOM;
        break;
      }
      *steps = g;
    }
    (*steps)[(*n)++] = s;
  }
  closedir(d);
  if (st != DDP_OK) {
    free(*steps);
    *steps = NULL;
    *n = 0;
    DDP_FAIL(st, "checkpoint directory %s: out of host memory", dir);
  }
  if (*n) qsort(*steps, (size_t)*n, sizeof **steps, cmp_desc);
  return DDP_OK;
}

void ddp_ckpt_prune(const char *dir, int keep, int64_t protect) {
  int64_t *steps = NULL;
  int n = 0;
  if (ddp_ckpt_list(dir, &steps, &n) != DDP_OK) return;
  char path[PATH_LEN];
  for (int i = keep; i < n; ++i)
    if (steps[i] != protect && ddp_ckpt_path(path, sizeof path, dir, steps[i]) == DDP_OK &&
        unlink(path) != 0)
      DDP_LOG_WARN("cannot delete old checkpoint %s: %s", path, strerror(errno));
  free(steps);
}

/* ---- setting aside ------------------------------------------------------------- */

/* Renames are durable only once their directory is synced. */
static void sync_dir(const char *dir) {
  const int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

/* A free name for `name` in `aside`: itself, else name.1, name.2, ... */
static ddp_status_t free_name(const char *aside, const char *name, char *out, size_t len) {
  struct stat sb;
  for (int k = 0; k < 10000; ++k) {
    const int n = k ? snprintf(out, len, "%s/%s.%d", aside, name, k)
                    : snprintf(out, len, "%s/%s", aside, name);
    if (n < 0 || (size_t)n >= len) DDP_FAIL(DDP_ERR_INVALID_ARG, "path too long: %s", aside);
    if (lstat(out, &sb) == 0) continue;
    if (errno == ENOENT) return DDP_OK;
    DDP_FAIL(DDP_ERR_IO, "cannot use %s: %s", out, strerror(errno));
  }
  DDP_FAIL(DDP_ERR_IO, "%s holds 10000 copies of %s already", aside, name);
}

ddp_status_t ddp_ckpt_set_aside(const char *dir, int64_t above, int *moved) {
  *moved = 0;
  int64_t *steps = NULL;
  int n = 0;
  /* an unreadable directory is the writes' problem: each names the path */
  if (ddp_ckpt_list(dir, &steps, &n) != DDP_OK) return DDP_OK;
  char aside[PATH_LEN], from[PATH_LEN], to[PATH_LEN + 64];
  ddp_status_t st = DDP_OK;
  if (snprintf(aside, sizeof aside, "%s/%s", dir, DDP_CKPT_SUPERSEDED) >= (int)sizeof aside)
    DDP_FAIL_GOTO(st, DDP_ERR_INVALID_ARG, out, "checkpoint path too long: %s", dir);
  for (int i = 0; i < n && steps[i] > above; ++i) {
    DDP_CHECK_GOTO(ddp_ckpt_path(from, sizeof from, dir, steps[i]), st, out);
    struct stat sb;
    if (*moved == 0 && mkdir(aside, 0777) != 0 &&
        (errno != EEXIST || stat(aside, &sb) != 0 || !S_ISDIR(sb.st_mode)))
      DDP_FAIL_GOTO(st, DDP_ERR_IO, out,
                    "cannot move %s (step %lld, above the step %lld this run starts at) to "
                    "%s/: %s; left where it is, it would outrank this run's checkpoints",
                    from, (long long)steps[i], (long long)above, aside,
                    errno == EEXIST ? "it is not a directory" : strerror(errno));
    DDP_CHECK_GOTO(free_name(aside, strrchr(from, '/') + 1, to, sizeof to), st, out);
    if (rename(from, to) != 0)
      DDP_FAIL_GOTO(st, DDP_ERR_IO, out,
                    "cannot move %s (step %lld, above the step %lld this run starts at) to %s: "
                    "%s; left where it is, it would outrank this run's checkpoints",
                    from, (long long)steps[i], (long long)above, to, strerror(errno));
    DDP_LOG_WARN(
        "checkpoint: moved %s to %s: its step %lld is above the step %lld this run "
        "starts at (a checkpoint the resume skipped, or from an abandoned run), so it "
        "must not outrank the checkpoints this run writes",
        from, to, (long long)steps[i], (long long)above);
    ++*moved;
  }
out:
  if (*moved) {
    sync_dir(aside);
    sync_dir(dir);
  }
  free(steps);
  return st;
}

/* ---- temporary files of dead writers ------------------------------------------- */

void ddp_ckpt_host_name(char *buf, size_t len) {
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  host[sizeof host - 1] = '\0';
  size_t n = 0;
  for (const char *c = host; *c && n + 1 < len; ++c)
    buf[n++] = isalnum((unsigned char)*c) || *c == '.' || *c == '_' || *c == '-' ? *c : '_';
  buf[n] = '\0';
  if (n == 0) snprintf(buf, len, "localhost");
}

/* ".ckpt_<digits>.safetensors.tmp.<host>.<pid>" or the older
 * ".ckpt_<digits>.safetensors.tmp.<pid>": 1 and the host ("" for the older
 * form) and the PID, or 0 for any other name. */
static int tmp_owner(const char *name, char *host, size_t len, long *pid) {
  static const char prefix[] = ".ckpt_", middle[] = ".safetensors.tmp.";
  if (strncmp(name, prefix, sizeof prefix - 1) != 0) return 0;
  const char *p = name + sizeof prefix - 1;
  if (!isdigit((unsigned char)*p)) return 0;
  while (isdigit((unsigned char)*p)) ++p;
  if (strncmp(p, middle, sizeof middle - 1) != 0) return 0;
  p += sizeof middle - 1;
  const char *dot = strrchr(p, '.');
  const char *digits = dot ? dot + 1 : p;
  if (!*digits) return 0;
  for (const char *d = digits; *d; ++d)
    if (!isdigit((unsigned char)*d)) return 0;
  const size_t host_len = dot ? (size_t)(dot - p) : 0;
  if ((dot && host_len == 0) || host_len >= len) return 0;
  memcpy(host, p, host_len);
  host[host_len] = '\0';
  errno = 0;
  *pid = strtol(digits, NULL, 10);
  return errno == 0 && *pid > 0;
}

/* Whether process `pid` exists on this host. EPERM means it does (someone
 * else's); only ESRCH says it is gone. */
static int pid_alive(long pid) {
  return (pid_t)pid == pid && (kill((pid_t)pid, 0) == 0 || errno != ESRCH);
}

void ddp_ckpt_remove_stale_tmp(const char *dir, int *removed, int *kept) {
  *removed = *kept = 0;
  DIR *d = opendir(dir);
  if (!d) return;
  char me[256], host[256], path[PATH_LEN];
  ddp_ckpt_host_name(me, sizeof me);
  long pid = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (!tmp_owner(e->d_name, host, sizeof host, &pid)) continue;
    if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
    const int here = !host[0] || strcmp(host, me) == 0;
    if (!here) {
      DDP_LOG_WARN(
          "checkpoint: kept %s: written by process %ld on host %s, which this host "
          "cannot check; delete it if no run on %s writes to %s",
          path, pid, host, host, dir);
      ++*kept;
    } else if (pid != (long)getpid() && pid_alive(pid)) {
      DDP_LOG_INFO(
          "checkpoint: kept %s: process %ld is running on this host (its writer, or "
          "another process that now has its PID); a later start removes it",
          path, pid);
      ++*kept;
    } else if (unlink(path) == 0) {
      DDP_LOG_INFO("checkpoint: removed %s, left by a writer (process %ld) that is gone", path,
                   pid);
      ++*removed;
    } else if (errno != ENOENT) {
      DDP_LOG_WARN("checkpoint: cannot remove %s, left by a writer that is gone: %s", path,
                   strerror(errno));
      ++*kept;
    }
  }
  closedir(d);
}
