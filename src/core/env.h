/* Environment settings (DDPTRAIN_*), declared one per line.
 *
 * Flags configure a run; environment variables configure the *installation*
 * or a debugging session (log verbosity, debug checks) without touching job
 * scripts. Every variable is declared once in DDP_ENV_LIST with its default
 * and help, so --help can list them, ddp_env_log_overrides() can say which
 * ones a run changed, and a misspelt DDPTRAIN_ variable is reported instead
 * of silently ignored. */
#ifndef DDPTRAIN_ENV_H
#define DDPTRAIN_ENV_H

#include <stdio.h>

#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(ID, "DEFAULT", "help") -> variable DDPTRAIN_<ID> */
#define DDP_ENV_LIST(X)                                                                   \
  X(LOG_LEVEL, "info", "log verbosity: error, warn, info or debug")                       \
  X(LOG_ALL_RANKS, "0", "1: every rank prints info and debug lines, not only rank 0")     \
  X(DEBUG_CHECKS, "0", "1: poison fresh arena memory and check arena bounds (slower)")    \
  X(CPU_PEAK_GFLOPS, "0", "CPU peak GFLOP/s per rank for MFU; 0 measures it at start-up") \
  X(BIND, "auto",                                                                         \
    "auto: bind GPU ranks to the cores nearest their GPU; 1: bind CPU ranks too "         \
    "(the node's cores split between its ranks); 0: bind nothing")                        \
  X(LOADER_SYNC, "0",                                                                     \
    "1: fill micro-batches on the step loop's thread, not the loader thread (debugging)") \
  X(FAULT_PERTURB_RANK, "-1",                                                             \
    "fault injection for tests: this rank nudges one weight after step 1, which "         \
    "--check-replicas must catch")                                                        \
  X(FAULT_CKPT_FULL_STEP, "0",                                                            \
    "fault injection for tests: the checkpoint of this step fails part-way with ENOSPC, " \
    "as on a full disk; 0 = off")                                                         \
  X(FAULT_STEP_SLEEP_MS, "0",                                                             \
    "fault injection for tests: sleep this long after every step (so a signal lands "     \
    "mid-run); a signal restarts the sleep")                                              \
  X(FAULT_NAN_STEP, "0",                                                                  \
    "fault injection for tests: at this step put a NaN into DDPTRAIN_FAULT_NAN_TENSOR; "  \
    "0 = off")                                                                            \
  X(FAULT_NAN_TENSOR, "grad:transformer.h.0.mlp.c_fc.weight",                             \
    "with DDPTRAIN_FAULT_NAN_STEP: grad:NAME (that parameter's gradient, during "         \
    "backward) or weight:NAME (the parameter itself, before forward)")                    \
  X(FAULT_RANK, "-1", "fault injection for tests: the rank that fails (-1 = none)")       \
  X(FAULT_KIND, "KILL",                                                                   \
    "how it fails: KILL (SIGKILL), STOP (freezes for good) or PAUSE (freezes, then "      \
    "resumes after DDPTRAIN_FAULT_PAUSE_S)")                                              \
  X(FAULT_STEP, "1", "the step (counted from 1) at whose start the fault strikes")        \
  X(FAULT_PAUSE_S, "5", "seconds a PAUSE fault keeps the whole process stopped")          \
  X(FAULT_OVERFLOW_RANK, "-1",                                                            \
    "fault injection for tests: this rank turns one gradient into +inf (an fp16 "         \
    "overflow) at step DDPTRAIN_FAULT_OVERFLOW_STEP")                                     \
  X(FAULT_OVERFLOW_STEP, "1",                                                             \
    "the 1-based step of DDPTRAIN_FAULT_OVERFLOW_RANK's overflow")                        \
  X(FAULT_STARTUP_RANK, "-1",                                                             \
    "fault injection for tests: this rank (as the launcher numbers it) freezes for "      \
    "good as start-up point DDPTRAIN_FAULT_STARTUP_PHASE begins; -1 = none")              \
  X(FAULT_STARTUP_PHASE, "mpi-init",                                                      \
    "the start-up point of DDPTRAIN_FAULT_STARTUP_RANK's freeze: mpi-init, flags, "       \
    "device-probe, device-decision, backend, binding, heartbeat, or train (just after "   \
    "the start-up watchdog has handed over to the heartbeat)")                            \
  X(FAULT_STARTUP_KIND, "STOP",                                                           \
    "how DDPTRAIN_FAULT_STARTUP_RANK freezes: STOP (the whole process, SIGSTOP) or "      \
    "HANG (only the main thread blocks for good, as in a driver call that never returns)")

typedef enum ddp_env_id {
#define DDP_ENV_ENUM_(id, def, help) DDP_ENV_##id,
  DDP_ENV_LIST(DDP_ENV_ENUM_)
#undef DDP_ENV_ENUM_
      DDP_ENV_COUNT_
} ddp_env_id_t;

/* "DDPTRAIN_LOG_LEVEL" etc. */
const char *ddp_env_name(ddp_env_id_t id);

/* The value in the environment, or the declared default. Never NULL. */
const char *ddp_env_get(ddp_env_id_t id);

/* Nonzero when the variable is set in the environment. */
int ddp_env_is_set(ddp_env_id_t id);

/* Parses the value as a 0/1 switch or a finite number; a malformed value is
 * an error that names the variable (never silently the default). */
ddp_status_t ddp_env_get_bool(ddp_env_id_t id, int *value);
ddp_status_t ddp_env_get_double(ddp_env_id_t id, double *value);

/* Logs one info line per overridden variable ("DDPTRAIN_X=v (default d)")
 * and a warning for each DDPTRAIN_* variable that is not declared. Returns
 * the number of unknown variables. */
int ddp_env_log_overrides(void);

/* Applies the logging settings (level, all-ranks) to the logger. */
ddp_status_t ddp_env_apply_logging(void);

/* Writes the table of variables for --help. */
void ddp_env_print_help(FILE *out);

#ifdef __cplusplus
}
#endif
#endif
