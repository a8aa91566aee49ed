/* The ddptrain program: parses the command line, starts the ranks, creates
 * the backend and trains (or, with --self-test, checks the node). Library code returns statuses;
 * this is the one place that turns a failure into an exit code, and with several ranks it aborts
 * the whole job (MPI_Abort) so no rank is left waiting for another. Exit codes: 0 success, 1
 * runtime failure, 2 bad command line, 75 preempted (a stop signal; the checkpoint is written),
 * 130 a second SIGINT (src/train/preempt.c). */
#include <stdio.h>
#include <stdlib.h>

#include "ddptrain/backend.h"
#include "ddptrain/comm.h"
#include "ddptrain/dist.h"
#include "ddptrain/env.h"
#include "ddptrain/log.h"
#include "ddptrain/options.h"
#include "ddptrain/trainer.h"
#include "ddptrain/version.h"
#include "ascii.h"
#include "binding.h"
#include "comm/heartbeat.h"
#include "tools/smoke.h"

/* EXIT_PREEMPTED is EX_TEMPFAIL (sysexits.h): try again later, i.e. requeue
 * and resume from the checkpoint just written. */
enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_PREEMPTED = 75 };

int main(int argc, char **argv) {
  ddp_options_t opts;
  if (ddp_options_defaults(&opts) != DDP_OK) return EXIT_RUNTIME;
  /* Logging settings first, so even option errors respect them. */
  if (ddp_env_apply_logging() != DDP_OK) return EXIT_USAGE;
  /* The command line is checked before MPI starts: --help and bad flags
   * need no launcher, and every rank rejects a bad flag identically. */
  if (ddp_options_parse(&opts, argc, argv) != DDP_OK) return EXIT_USAGE;
  if (opts.help) {
    ddp_options_print_help(stdout);
    return 0;
  }
  if (opts.version) {
    printf("ddptrain %s (backends: %s)\n", ddp_version(), ddp_build_backends());
    return 0;
  }
  if (opts.build_info) {
    ddp_build_info_print(stdout);
    return 0;
  }

  ddp_dist_t dist;
  if (ddp_dist_init(&argc, &argv, &dist) != DDP_OK) return EXIT_RUNTIME;
  ddp_env_log_overrides();
  if (opts.plan_only) { /* no backend, no model: the sampler alone */
    if (ddp_plan_report(&opts, &dist, stdout) != DDP_OK) {
      DDP_LOG_ERROR("rank %d on %s stops: cannot build the plan", dist.rank, dist.host);
      ddp_dist_abort(&dist, EXIT_RUNTIME);
    }
    ddp_dist_finalize(&dist);
    return 0;
  }
  /* "auto" means a GPU where training on it works: several ranks share
   * GPU gradients only through a communicator that reads GPU memory (NCCL,
   * not built yet, or a CUDA-aware MPI); without one they train on the CPU
   * and say why. Naming cuda explicitly still tries, and the trainer stops
   * with the reason. */
  const char *device = opts.device;
  if (ddp_ascii_ieq(device, "auto") && dist.world > 1 && !ddp_comm_mpi_cuda_aware() &&
      !opts.self_test) {
    device = "cpu";
    DDP_LOG_INFO("device auto: %d ranks would need NCCL or a CUDA-aware MPI to reduce GPU "
                 "gradients; this build has neither, so the ranks train on the CPU",
                 dist.world);
  }
  ddp_backend_config_t cfg = {.device = device,
                              .local_rank = dist.local_rank,
                              .threads = (int)opts.threads,
                              .local_size = dist.local_size,
                              .need_model_ops = !opts.self_test,
                              .allow_tf32 = ddp_ascii_ieq(opts.tf32, "on")};
  ddp_backend_t *be = NULL;
  ddp_status_t st = ddp_backend_create(&cfg, &be);
  if (st == DDP_OK) {
    DDP_LOG_INFO("ddptrain %s: %d rank%s, rank 0 on %s: %s", ddp_version(), dist.world,
                 dist.world == 1 ? "" : "s", dist.host, be->description);
    st = ddp_binding_setup(&dist, be); /* binds GPU ranks near their GPU; logs the map */
  }
  if (st == DDP_OK) {
    ddp_heartbeat_t *hb = NULL; /* ends the job if a rank stops (see comm/heartbeat.h) */
    st = ddp_heartbeat_start(&dist, opts.heartbeat_timeout, &hb);
    if (st == DDP_OK)
      st = opts.self_test ? ddp_smoke_run(&opts, &dist, be) : ddp_train(&opts, &dist, be);
    /* a clean end, or a preemption every rank agreed on: stop the ring before MPI ends */
    if (st == DDP_OK || st == DDP_ERR_INTERRUPTED) ddp_heartbeat_stop(hb);
  }
  ddp_backend_destroy(be);
  if (st == DDP_ERR_INTERRUPTED) { /* every rank voted to stop at the same step */
    ddp_dist_finalize(&dist);
    return EXIT_PREEMPTED;
  }
  if (st != DDP_OK) {
    DDP_LOG_ERROR("rank %d on %s stops: %s", dist.rank, dist.host, ddp_status_string(st));
    ddp_dist_abort(&dist, EXIT_RUNTIME);
  }
  ddp_dist_finalize(&dist);
  return 0;
}
