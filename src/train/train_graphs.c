/* --cuda-graphs: see train_graphs.h. */
#include <config.h>

#include "train/train_graphs.h"

#include "core/ascii.h"
#include "ddptrain/check.h"
#include "ddptrain/log.h"

ddp_status_t ddp_train_graphs_setup(const ddp_options_t *o, ddp_backend_t *be, ddp_model_t *m,
                                    int nvtx_on, ddp_graph_replay_t **out) {
  *out = NULL;
  if (ddp_ascii_ieq(o->cuda_graphs, "off")) return DDP_OK;
  const char *why = NULL;
  if (!be->ops->graph_begin)
    why = "the backend runs its work on the host";
  else if (nvtx_on)
    why = "--nvtx on marks every block's kernels as they are launched";
  else if (o->trace[0])
    why = "--trace times every block's kernels as they are launched";
  else if (m->watch_fn)
    why = "--detect-anomaly (or a fault injection) reads every activation on the host";
  if (why) {
    if (ddp_ascii_ieq(o->cuda_graphs, "on"))
      DDP_FAIL(DDP_ERR_INVALID_ARG, "--cuda-graphs on cannot be used here: %s (use auto or off)",
               why);
    return DDP_OK;
  }
  DDP_CHECK(ddp_graph_replay_create(be, out));
  m->replay = *out;
  return DDP_OK;
}

void ddp_train_graphs_report(const ddp_graph_replay_t *rp) {
  if (!rp) return;
  ddp_graph_replay_stats_t s;
  ddp_graph_replay_get_stats(rp, &s);
  if (s.off)
    DDP_LOG_INFO("summary: CUDA graphs switched off: %s; %lld passes replayed before that",
                 s.why, (long long)s.replays);
  else if (s.recordings == 0)
    DDP_LOG_INFO("summary: CUDA graphs: no pass recorded (%lld passes run kernel by kernel; "
                 "each kind of pass is recorded on its second occurrence)",
                 (long long)s.eager);
  else
    DDP_LOG_INFO("summary: CUDA graphs: %lld passes replayed from %lld recordings (%lld graphs), "
                 "%lld run kernel by kernel",
                 (long long)s.replays, (long long)s.recordings, (long long)s.segments,
                 (long long)s.eager);
}
