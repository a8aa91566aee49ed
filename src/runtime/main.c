/* The ddptrain program as a library call (see ddptrain/main.h): parses the
 * command line, starts the ranks, creates the backend and trains (or, with
 * --self-test, checks the node). The rest of the library returns statuses;
 * this is the one place that turns a failure into an exit code, and with
 * several ranks it aborts the whole job (MPI_Abort) so no rank is left
 * waiting for another. Exit codes: 0 success, 1 runtime failure, 2 bad
 * command line, 74 trained to the end but the final checkpoint was not
 * written (the run's last line says so), 75 preempted (a stop signal) with
 * the checkpoint of the last step on disk: requeue and resume, 76 preempted
 * without one (no --save, or its write failed), 130 a second SIGINT
 * (src/train/preempt.c). 74, 75 and 76 are the same on every rank: the
 * ranks share rank 0's write result before they exit. The `ddptrain`
 * program (src/tools/ddptrain.c) is this call with the built-in models. */
#include "ddptrain/main.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/backend.h"
#include "ddptrain/log.h"
#include "ddptrain/model.h"
#include "ddptrain/options.h"
#include "ddptrain/version.h"
#include "comm/comm.h"
#include "comm/heartbeat.h"
#include "core/ascii.h"
#include "core/env.h"
#include "model/gpt_init_from.h"
#include "runtime/binding.h"
#include "runtime/dist.h"
#include "runtime/fault.h"
#include "runtime/self_test.h"
#include "runtime/startup_watchdog.h"
#include "train/consistency.h"
#include "train/sample_tokenizer.h"
#include "train/trainer.h"

/* EXIT_PREEMPTED is EX_TEMPFAIL (sysexits.h): try again later, i.e. requeue
 * and resume from the checkpoint just written. EXIT_FINAL_UNSAVED is
 * EX_IOERR; EXIT_PREEMPTED_UNSAVED is ddptrain's own: not 75, so a requeue
 * script does not take it for a checkpoint. */
enum {
  EXIT_RUNTIME = 1,
  EXIT_USAGE = 2,
  EXIT_FINAL_UNSAVED = 74,
  EXIT_PREEMPTED = 75,
  EXIT_PREEMPTED_UNSAVED = 76
};

/* The exit code of an ending every rank agreed on (the stop vote and the
 * shared outcome of the last checkpoint), or 0 for any other status. */
static int agreed_exit(ddp_status_t st) {
  switch (st) {
    case DDP_ERR_INTERRUPTED:
      return EXIT_PREEMPTED;
    case DDP_ERR_PREEMPTED_UNSAVED:
      return EXIT_PREEMPTED_UNSAVED;
    case DDP_ERR_FINAL_UNSAVED:
      return EXIT_FINAL_UNSAVED;
    default:
      return 0;
  }
}

/* A start-up phase begins: the start-up watchdog times it from here, and a
 * test may freeze this rank as it begins (rank -1: MPI is not up yet). */
static void begin_phase(ddp_startup_phase_t phase, int rank) {
  ddp_startup_watchdog_phase(phase);
  ddp_fault_at_startup(ddp_startup_phase_key(phase), rank);
}

/* Why this rank has no GPU to train on, for the other ranks' log. */
static void gpu_why(ddp_status_t made, char *why, size_t len) {
  for (const ddp_backend_ops_t *const *r = ddp_backend_registry(); *r; ++r) {
    if (strcmp((*r)->name, "cuda") != 0) continue;
    if (!(*r)->available(why, len)) return;
    if (made != DDP_OK)
      snprintf(why, len, "the CUDA backend failed: %s (see this rank's log)",
               ddp_status_string(made));
    else
      snprintf(why, len, "the CUDA backend was not chosen");
    return;
  }
  snprintf(why, len, "this build has no CUDA backend");
}

/* Several ranks: every rank creates the backend asked for, the ranks share
 * what they got (one allgather) and all take the same decision
 * (ddp_comm_choose): GPUs with NCCL everywhere, or the CPU everywhere, or
 * the same error on every rank. Mixing would hang: an NCCL rank and an MPI
 * rank never meet in a collective. */
static ddp_status_t create_backend_together(const ddp_dist_t *dist, ddp_backend_config_t *cfg,
                                            ddp_backend_t **out) {
  enum { WIDTH = 256 };
  ddp_backend_t *be = NULL;
  begin_phase(DDP_STARTUP_DEVICE_PROBE, dist->rank);
  const ddp_status_t made = ddp_backend_create(cfg, &be);
  const int usable = made == DDP_OK && be->ops->kind == DDP_DEVICE_KIND_CUDA;
  char why[sizeof(((ddp_comm_gpu_probe_t *)0)->why)] = "";
  if (!usable) gpu_why(made, why, sizeof why);
  /* Where the GPU is: the host and, when known, the GPU's PCI bus id. The
   * ordinal alone cannot tell ranks sharing a GPU from ranks that were each
   * given their own CUDA_VISIBLE_DEVICES (srun --gpus-per-task, --gpu-bind),
   * which all see their GPU as cuda:0 and would be refused NCCL (and sent
   * to the CPU under auto); ranks that really share one have the same bus
   * id. A host name too long to carry the id keeps the ordinal test. */
  char where[sizeof(((ddp_comm_gpu_probe_t *)0)->host)];
  snprintf(where, sizeof where, "%s", dist->host);
  char pci[32] = "", with_pci[sizeof where];
  if (usable && be->ops->pci_bus_id && be->ops->pci_bus_id(be, pci, sizeof pci) == DDP_OK &&
      pci[0] && snprintf(with_pci, sizeof with_pci, "%s/%s", dist->host, pci) < (int)sizeof where)
    memcpy(where, with_pci, sizeof where);
  char line[WIDTH];
  /* host names have no spaces; the reason, last, may */
  snprintf(line, sizeof line, "%d %d %s %s", usable, usable ? be->device : -1, where, why);
  char *all = NULL;
  begin_phase(DDP_STARTUP_DEVICE_DECISION, dist->rank);
  ddp_status_t st = ddp_dist_allgather_lines(dist, line, WIDTH, &all);
  ddp_comm_gpu_probe_t *probes = calloc((size_t)dist->world, sizeof *probes);
  if (st == DDP_OK && !probes) {
    DDP_LOG_ERROR("rank %d: out of host memory", dist->rank);
    st = DDP_ERR_OOM;
  }
  ddp_comm_choice_t ch = {.status = DDP_OK};
  for (int r = 0; st == DDP_OK && r < dist->world; ++r) {
    const char *l = all + (size_t)r * WIDTH;
    int n = 0;
    if (sscanf(l, "%d %d %63s %n", &probes[r].usable, &probes[r].device, probes[r].host, &n) < 3) {
      DDP_LOG_ERROR("rank %d: rank %d's GPU probe '%.*s' is malformed", dist->rank, r, WIDTH, l);
      st = DDP_ERR_INTERNAL;
      break;
    }
    snprintf(probes[r].why, sizeof probes[r].why, "%s", l + n);
  }
  if (st == DDP_OK) {
    ddp_comm_choose(cfg->device, dist->world, probes, &ch);
    st = ch.status;
    if (st != DDP_OK)
      DDP_LOG_ERROR("rank %d: %s", dist->rank, ch.message);
    else if (ch.message[0])
      DDP_LOG_INFO("%s", ch.message);
  }
  free(probes);
  free(all);
  begin_phase(DDP_STARTUP_BACKEND, dist->rank);
  if (st == DDP_OK && strcmp(ch.device, "cpu") == 0 && be && be->ops->kind != DDP_DEVICE_KIND_CPU) {
    ddp_backend_destroy(be); /* a GPU this rank has, but not every rank can use one */
    be = NULL;
  }
  if (st == DDP_OK && !be) {
    cfg->device = ch.device;
    st = ddp_backend_create(cfg, &be);
  }
  if (st != DDP_OK) {
    ddp_backend_destroy(be);
    return st;
  }
  *out = be;
  return DDP_OK;
}

/* The device a model can run on under --device: a model that runs on the
 * CPU only turns "auto" into "cpu" and refuses a GPU by name. *device is
 * the text to create the backend with. */
static ddp_status_t model_device(const ddp_model_ops_t *m, const char *asked, const char **device) {
  *device = asked;
  if (m->devices & DDP_MODEL_ON(DDP_DEVICE_KIND_CUDA)) return DDP_OK;
  if (ddp_ascii_ieq(asked, "auto")) {
    *device = "cpu";
    return DDP_OK;
  }
  if (!ddp_ascii_ieq(asked, "cpu")) {
    ddp_log_at(DDP_LOG_LEVEL_ERROR, NULL, 0,
               "option --device: model %s runs on the CPU backend only, not '%s'", m->name, asked);
    return DDP_ERR_INVALID_ARG;
  }
  return DDP_OK;
}

/* srun without a PMI plugin MPI can use starts every task as an MPI
 * singleton: each sees a world of 1 and trains alone, N copies of one run.
 * Nothing fails, so say it where the world size is first known. */
static void warn_lone_slurm_task(const ddp_dist_t *dist) {
  const char *ntasks = getenv("SLURM_NTASKS");
  if (dist->world != 1 || !ntasks) return;
  char *end = NULL;
  const long n = strtol(ntasks, &end, 10);
  if (end == ntasks || *end != '\0' || n <= 1) return;
  DDP_LOG_WARN(
      "SLURM_NTASKS is %ld but this process sees an MPI world size of 1: every task "
      "trains alone (srun without PMI?); start it with srun --mpi=pmix, or mpirun/ddprun "
      "inside the allocation",
      n);
}

/* Defaults, the program's default model, then the command line. */
static ddp_status_t parse_command_line(ddp_options_t *opts, int argc, char **argv,
                                       const ddp_main_config_t *cfg) {
  if (ddp_options_defaults(opts) != DDP_OK) return DDP_ERR_INTERNAL;
  if (cfg && cfg->default_model) {
    if (!ddp_model_find(cfg->default_model) || strlen(cfg->default_model) >= sizeof opts->model) {
      DDP_LOG_ERROR("the default model '%s' is not registered", cfg->default_model);
      return DDP_ERR_INTERNAL;
    }
    snprintf(opts->model, sizeof opts->model, "%s", cfg->default_model);
  }
  return ddp_options_parse(opts, argc, argv);
}

int ddp_main(int argc, char **argv, const ddp_main_config_t *cfg) {
  const char *program = cfg && cfg->program ? cfg->program : "ddptrain";
  ddp_options_t opts;
  /* Logging settings first, so even option errors respect them. */
  if (ddp_env_apply_logging() != DDP_OK) return EXIT_USAGE;
  /* The command line is checked before MPI starts: --help and bad flags
   * need no launcher, and every rank rejects a bad flag identically. */
  const ddp_status_t parsed = parse_command_line(&opts, argc, argv, cfg);
  if (parsed != DDP_OK) return parsed == DDP_ERR_INVALID_ARG ? EXIT_USAGE : EXIT_RUNTIME;
  if (opts.help) {
    ddp_options_print_help_for(stdout, program);
    return 0;
  }
  if (opts.version) {
    printf("%s %s (backends: %s)\n", program, ddp_version(), ddp_build_backends());
    return 0;
  }
  if (opts.build_info) {
    ddp_build_info_print(stdout);
    return 0;
  }

  const ddp_model_ops_t *model = ddp_model_find(opts.model);
  const char *device = opts.device;
  if (!opts.self_test && model_device(model, opts.device, &device) != DDP_OK) return EXIT_USAGE;
  /* --init-from fills in the architecture flags not given from the file's
   * shapes before they are validated; a flag the file contradicts is a
   * command-line error (2), a file that cannot be read a runtime one (1). */
  if (!opts.self_test) {
    const ddp_status_t shaped = ddp_init_from_configure(&opts);
    if (shaped != DDP_OK) return shaped == DDP_ERR_INVALID_ARG ? EXIT_USAGE : EXIT_RUNTIME;
  }
  /* Combinations of flags (--tokens-per-batch below --seq-len, the model's
   * validate) are command-line errors too: one line, before MPI. */
  if (!opts.self_test) {
    const ddp_status_t valid = ddp_options_validate(&opts);
    if (valid != DDP_OK) return valid == DDP_ERR_INVALID_ARG ? EXIT_USAGE : EXIT_RUNTIME;
    /* --tokenizer: a directory that cannot be read, or a vocabulary that is
     * not the model's, is a bad flag as well */
    const ddp_status_t tok = ddp_sample_tokenizer_check(&opts);
    if (tok != DDP_OK) return tok == DDP_ERR_INVALID_ARG ? EXIT_USAGE : EXIT_RUNTIME;
  }

  /* Every start-up phase is bounded, from before MPI_Init until the
   * heartbeat takes over (runtime/startup_watchdog.h). A malformed start-up
   * fault is refused here, before any rank waits for another. */
  if (ddp_fault_startup_check() != DDP_OK) return EXIT_USAGE;
  if (ddp_startup_watchdog_start(opts.startup_timeout) != DDP_OK) return EXIT_RUNTIME;
  begin_phase(DDP_STARTUP_MPI_INIT, -1);
  ddp_dist_t dist;
  if (ddp_dist_init(&argc, &argv, &dist) != DDP_OK) {
    ddp_startup_watchdog_stop();
    return EXIT_RUNTIME;
  }
  warn_lone_slurm_task(&dist);
  /* Flags only some ranks were given are command-line errors as well, found
   * by the first collective: every rank learns of them and exits with 2. */
  begin_phase(DDP_STARTUP_FLAGS, dist.rank);
  const ddp_status_t agreed = ddp_train_check_flags(&dist, &opts);
  if (agreed == DDP_ERR_MISMATCH) {
    ddp_startup_watchdog_stop();
    ddp_dist_finalize(&dist);
    return EXIT_USAGE;
  }
  if (agreed != DDP_OK) ddp_dist_abort(&dist, EXIT_RUNTIME);
  ddp_env_log_overrides();
  if (opts.plan_only) { /* no backend, no model: the sampler alone */
    ddp_startup_watchdog_stop();
    if (ddp_plan_report(&opts, &dist, stdout) != DDP_OK) {
      DDP_LOG_ERROR("rank %d on %s stops: cannot build the plan", dist.rank, dist.host);
      ddp_dist_abort(&dist, EXIT_RUNTIME);
    }
    ddp_dist_finalize(&dist);
    return 0;
  }
  ddp_backend_config_t bc = {.device = device,
                             .local_rank = dist.local_rank,
                             .threads = (int)opts.threads,
                             .local_size = dist.local_size,
                             .need_model_ops = !opts.self_test && model->uses_nn_ops,
                             .allow_tf32 = ddp_ascii_ieq(opts.tf32, "on"),
                             .conv_nondeterministic = ddp_ascii_ieq(opts.deterministic, "off"),
                             .conv_no_winograd = ddp_ascii_ieq(opts.winograd, "off")};
  ddp_backend_t *be = NULL;
  /* "auto" means a GPU where training on it works: several ranks train on
   * GPUs when every rank has its own and NCCL (or a CUDA-aware MPI) reduces
   * GPU gradients; otherwise every rank trains on the CPU, and rank 0 says
   * why. Naming cuda explicitly makes that an error on every rank. The
   * self-test checks each rank's own device and needs no agreement. */
  const int together = dist.world > 1 && !opts.self_test && !ddp_ascii_ieq(device, "cpu");
  if (!together) begin_phase(DDP_STARTUP_BACKEND, dist.rank);
  ddp_status_t st =
      together ? create_backend_together(&dist, &bc, &be) : ddp_backend_create(&bc, &be);
  if (st == DDP_OK) {
    DDP_LOG_INFO("%s %s: %d rank%s, rank 0 on %s: %s", program, ddp_version(), dist.world,
                 dist.world == 1 ? "" : "s", dist.host, be->description);
    begin_phase(DDP_STARTUP_BINDING, dist.rank);
    st = ddp_binding_setup(&dist, be); /* binds GPU ranks near their GPU; logs the map */
  }
  if (st == DDP_OK) {
    ddp_heartbeat_t *hb = NULL; /* ends the job if a rank stops (see comm/heartbeat.h) */
    begin_phase(DDP_STARTUP_HEARTBEAT, dist.rank);
    st = ddp_heartbeat_start(&dist, opts.heartbeat_timeout, &hb);
    /* Start-up is over: a stopped rank is the heartbeat's to find now. */
    ddp_startup_watchdog_stop();
    if (st == DDP_OK) ddp_fault_at_startup(DDP_FAULT_STARTUP_TRAIN, dist.rank);
    if (st == DDP_OK)
      st = opts.self_test ? ddp_smoke_run(&opts, &dist, be) : ddp_train(&opts, &dist, be);
    /* a clean end, or an ending every rank agreed on: stop the ring before MPI ends */
    if (st == DDP_OK || agreed_exit(st)) ddp_heartbeat_stop(hb);
  }
  ddp_startup_watchdog_stop(); /* a start-up that failed before the heartbeat */
  ddp_backend_destroy(be);
  if (agreed_exit(st)) { /* every rank ends the same way: no abort needed */
    ddp_dist_finalize(&dist);
    return agreed_exit(st);
  }
  if (st != DDP_OK) {
    DDP_LOG_ERROR("rank %d on %s stops: %s", dist.rank, dist.host, ddp_status_string(st));
    ddp_dist_abort(&dist, EXIT_RUNTIME);
  }
  ddp_dist_finalize(&dist);
  return 0;
}
