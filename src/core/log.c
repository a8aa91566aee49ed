/* Rank-prefixed, level-filtered logging (see ddptrain/log.h). */
#include "ddptrain/log.h"

#include "core/ascii.h"

#include <stdarg.h>
#include <string.h>

static int g_rank = 0;
static int g_world = 1;
static int g_all_ranks = 0;
static ddp_log_level_t g_level = DDP_LOG_LEVEL_INFO;
static FILE *g_stream = NULL;

static const char *const k_level_names[] = {"ERROR", "WARN", "INFO", "DEBUG"};

void ddp_log_set_rank(int rank, int world) {
  g_rank = rank;
  g_world = world > 0 ? world : 1;
}

int ddp_log_rank(void) {
  return g_rank;
}

void ddp_log_set_level(ddp_log_level_t level) {
  g_level = level;
}

ddp_log_level_t ddp_log_level(void) {
  return g_level;
}

void ddp_log_set_all_ranks(int all_ranks) {
  g_all_ranks = all_ranks != 0;
}

void ddp_log_set_stream(FILE *stream) {
  g_stream = stream;
}

ddp_status_t ddp_log_level_parse(const char *text, ddp_log_level_t *level) {
  if (!text || !level) return DDP_ERR_INVALID_ARG;
  for (int i = 0; i <= (int)DDP_LOG_LEVEL_DEBUG; ++i) {
    if (ddp_ascii_ieq(text, k_level_names[i])) {
      *level = (ddp_log_level_t)i;
      return DDP_OK;
    }
  }
  if (ddp_ascii_ieq(text, "warning")) {
    *level = DDP_LOG_LEVEL_WARN;
    return DDP_OK;
  }
  return DDP_ERR_INVALID_ARG;
}

int ddp_log_enabled(ddp_log_level_t level) {
  if (level > g_level) return 0;
  if (level <= DDP_LOG_LEVEL_WARN) return 1;
  return g_rank == 0 || g_all_ranks;
}

void ddp_log_at(ddp_log_level_t level, const char *file, int line, const char *fmt, ...) {
  if (!ddp_log_enabled(level)) return;
  char buf[2048];
  size_t n;
  if (g_world > 1)
    n = (size_t)snprintf(buf, sizeof buf, "[rank %d/%d] ", g_rank, g_world);
  else
    n = (size_t)snprintf(buf, sizeof buf, "[ddptrain] ");
  if (level != DDP_LOG_LEVEL_INFO && n < sizeof buf)
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%s: ", k_level_names[level]);
  if (n < sizeof buf) {
    va_list ap;
    va_start(ap, fmt);
    n += (size_t)vsnprintf(buf + n, sizeof buf - n, fmt, ap);
    va_end(ap);
  }
  /* Where a failure was first seen matters to whoever debugs it; for info
   * lines it is noise. */
  if (file && (level == DDP_LOG_LEVEL_ERROR || level == DDP_LOG_LEVEL_DEBUG) && n < sizeof buf) {
    const char *base = strstr(file, "src/");
    if (!base) base = strstr(file, "kernels/");
    n += (size_t)snprintf(buf + n, sizeof buf - n, " (%s:%d)", base ? base : file, line);
  }
  if (n >= sizeof buf - 1) {
    n = sizeof buf - 2; /* truncated: keep the newline */
  }
  buf[n++] = '\n';
  FILE *out = g_stream ? g_stream : stderr;
  fwrite(buf, 1, n, out);
  fflush(out);
}
