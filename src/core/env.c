/* DDPTRAIN_* environment settings (see core/env.h). */
#include "core/env.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/log.h"

extern char **environ;

typedef struct env_entry {
  const char *name;
  const char *def;
  const char *help;
} env_entry_t;

static const env_entry_t k_env[DDP_ENV_COUNT_] = {
#define DDP_ENV_ENTRY_(id, def, help) {"DDPTRAIN_" #id, def, help},
    DDP_ENV_LIST(DDP_ENV_ENTRY_)
#undef DDP_ENV_ENTRY_
};

const char *ddp_env_name(ddp_env_id_t id) {
  return (unsigned)id < DDP_ENV_COUNT_ ? k_env[id].name : "DDPTRAIN_?";
}

const char *ddp_env_get(ddp_env_id_t id) {
  if ((unsigned)id >= DDP_ENV_COUNT_) return "";
  const char *v = getenv(k_env[id].name);
  return v ? v : k_env[id].def;
}

int ddp_env_is_set(ddp_env_id_t id) {
  return (unsigned)id < DDP_ENV_COUNT_ && getenv(k_env[id].name) != NULL;
}

ddp_status_t ddp_env_get_bool(ddp_env_id_t id, int *value) {
  const char *v = ddp_env_get(id);
  if (strcmp(v, "0") == 0 || strcmp(v, "") == 0) {
    *value = 0;
    return DDP_OK;
  }
  if (strcmp(v, "1") == 0) {
    *value = 1;
    return DDP_OK;
  }
  DDP_FAIL(DDP_ERR_INVALID_ARG, "%s='%s': expected 0 or 1", ddp_env_name(id), v);
}

ddp_status_t ddp_env_get_double(ddp_env_id_t id, double *value) {
  const char *v = ddp_env_get(id);
  char *end = NULL;
  errno = 0;
  double d = strtod(v, &end);
  if (end == v || *end != '\0' || errno == ERANGE || !isfinite(d))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s='%s': expected a number", ddp_env_name(id), v);
  *value = d;
  return DDP_OK;
}

int ddp_env_log_overrides(void) {
  for (int i = 0; i < DDP_ENV_COUNT_; ++i) {
    const char *v = getenv(k_env[i].name);
    if (v) DDP_LOG_INFO("environment: %s=%s (default %s)", k_env[i].name, v, k_env[i].def);
  }
  int unknown = 0;
  for (char **e = environ; e && *e; ++e) {
    if (strncmp(*e, "DDPTRAIN_", 9) != 0) continue;
    size_t len = strcspn(*e, "=");
    int known = 0;
    for (int i = 0; i < DDP_ENV_COUNT_ && !known; ++i)
      known = strlen(k_env[i].name) == len && strncmp(k_env[i].name, *e, len) == 0;
    if (!known) {
      DDP_LOG_WARN("environment: %.*s is not a ddptrain setting and is ignored (see --help)",
                   (int)len, *e);
      ++unknown;
    }
  }
  return unknown;
}

ddp_status_t ddp_env_apply_logging(void) {
  ddp_log_level_t level;
  if (ddp_log_level_parse(ddp_env_get(DDP_ENV_LOG_LEVEL), &level) != DDP_OK)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s='%s': expected error, warn, info or debug",
             ddp_env_name(DDP_ENV_LOG_LEVEL), ddp_env_get(DDP_ENV_LOG_LEVEL));
  int all = 0;
  DDP_CHECK(ddp_env_get_bool(DDP_ENV_LOG_ALL_RANKS, &all));
  ddp_log_set_level(level);
  ddp_log_set_all_ranks(all);
  return DDP_OK;
}

void ddp_env_print_help(FILE *out) {
  fprintf(out, "Environment:\n");
  for (int i = 0; i < DDP_ENV_COUNT_; ++i)
    fprintf(out, "  %-26s %s (default %s)\n", k_env[i].name, k_env[i].help, k_env[i].def);
}
