/* Rank placement on a node: which cores each rank runs on, and the map that
 * says so at start-up (internal).
 *
 * A GPU rank should run on the cores of the NUMA node its GPU hangs off:
 * pinned-memory copies and kernel launches then stay on the local memory
 * controller and PCIe root. hwloc finds that node from the GPU's PCI bus id
 * (the nearest non-I/O ancestor's cpuset); ranks whose GPUs share a node
 * split its cores in contiguous blocks, in local-rank order. CPU ranks have
 * no GPU and share the whole machine the same way.
 *
 * The planning and formatting are pure (a loaded topology and strings in,
 * a cpuset and strings out), so they are tested on a topology loaded from
 * XML with PCI GPUs at known bus ids; only ddp_binding_setup touches the
 * process (binding it) and MPI (gathering every rank's host and GPU, and the
 * map for rank 0 to print).
 *
 * DDPTRAIN_BIND: auto (default) binds GPU ranks and reports CPU ranks'
 * binding as the launcher left it (mpirun binds, and oversubscribed test
 * runs must not be squeezed further); 1 binds CPU ranks too; 0 binds
 * nothing and only reports. */
#ifndef DDPTRAIN_BINDING_H
#define DDPTRAIN_BINDING_H

#include <config.h>

#include <stddef.h>
#if DDP_HAVE_HWLOC
#include <hwloc.h>
#endif

#include "ddptrain/backend.h"
#include "ddptrain/status.h"
#include "runtime/dist.h"

/* One rank's place, as printed in the map. */
typedef struct ddp_binding {
  int rank;
  char host[64];
  int gpu;       /* CUDA ordinal; -1 for a CPU rank */
  char pci[32];  /* the GPU's PCI bus id, "" for a CPU rank */
  char numa[32]; /* NUMA nodes of the cpus, e.g. "1" or "0-1"; "?" unknown */
  char cpus[96]; /* PU (OS) indices, e.g. "8-15"; "?" unknown */
  int cores;     /* cores in cpus; 0 unknown */
  int bound;     /* 1 when this run bound the rank to cpus */
} ddp_binding_t;

/* "rank R host H gpu G (pci P) numa N cpus C (K cores, bound)"; a CPU rank
 * says "cpu" instead of the gpu part, and "as launched" when not bound. */
void ddp_binding_format(const ddp_binding_t *b, char *out, size_t len);

typedef enum ddp_bind_mode {
  DDP_BIND_MODE_AUTO = 0,
  DDP_BIND_MODE_ALL = 1,
  DDP_BIND_MODE_NONE = 2
} ddp_bind_mode_t;

/* Parses DDPTRAIN_BIND's value: "auto", "1" or "0". */
ddp_status_t ddp_bind_mode_parse(const char *text, ddp_bind_mode_t *mode);

#if DDP_HAVE_HWLOC
/* The cpuset of local rank `local_rank` among `local_size` ranks, where
 * pci[i] is local rank i's GPU bus id ("" or NULL: a CPU rank). Ranks with the
 * same locality (their GPUs' non-I/O ancestor, or the machine for CPU ranks)
 * split its cores in contiguous blocks in local-rank order; with more ranks
 * than cores, rank k takes core k mod cores. A bus id the topology does not
 * have is DDP_ERR_NO_DEVICE (logged). */
ddp_status_t ddp_binding_plan(hwloc_topology_t topo, const char *const *pci, int local_size,
                              int local_rank, hwloc_bitmap_t cpuset);

/* Fills numa, cpus and cores of b from a cpuset. */
void ddp_binding_describe(hwloc_topology_t topo, hwloc_const_bitmap_t cpuset, ddp_binding_t *b);
#endif

/* From every rank's "host pci" key (pci "-" for a CPU rank; world keys,
 * width bytes apart, as ddp_dist_allgather_lines gives them), the bus ids of
 * the ranks on `host`, in rank order (= local-rank order), into pci[0..max)
 * (pointers into keys; NULL for a CPU rank). Returns how many ranks name
 * `host`; keys is left as it was. */
int ddp_binding_node_pci(char *keys, size_t width, int world, const char *host, const char **pci,
                         int max);

/* Collective over all ranks: plans and (per DDPTRAIN_BIND) binds this rank,
 * then rank 0 logs the map, one line per rank. Without hwloc the map still
 * lists ranks and GPUs, with the cpus unknown. */
ddp_status_t ddp_binding_setup(const ddp_dist_t *dist, ddp_backend_t *be);

#endif
