/* --cuda-graphs: whether the run records its training passes as CUDA graphs
 * (model/graph_replay.h), and the summary line that says what they did. */
#ifndef DDPTRAIN_TRAIN_GRAPHS_H
#define DDPTRAIN_TRAIN_GRAPHS_H

#include "ddptrain/backend.h"
#include "ddptrain/model.h"
#include "ddptrain/options.h"
#include "model/graph_replay.h"

/* Creates the replay cache and hands it to the model (m->replay), unless
 * --cuda-graphs off, or the backend has no graphs, or a flag needs the
 * kernels launched one by one (--nvtx on, --trace, a watcher such as
 * --detect-anomaly: call after those are set up). --cuda-graphs on makes
 * each of those an error naming it. *out stays NULL when not used. */
ddp_status_t ddp_train_graphs_setup(const ddp_options_t *o, ddp_backend_t *be, ddp_model_t *m,
                                    int nvtx_on, ddp_graph_replay_t **out);

/* One summary line: passes replayed, recordings, graphs, eager passes, or
 * why replay was switched off; nothing when it was not used. */
void ddp_train_graphs_report(const ddp_graph_replay_t *rp);

#endif
