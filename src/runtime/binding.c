/* Rank placement and the binding map (see binding.h). */
#include <config.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/log.h"
#include "core/env.h"
#include "runtime/binding.h"

#define MAP_LINE 256  /* one rank's line in the gathered map */
#define KEY_WIDTH 128 /* "host pci" */

void ddp_binding_format(const ddp_binding_t *b, char *out, size_t len) {
  char dev[64];
  if (b->gpu >= 0)
    snprintf(dev, sizeof dev, "gpu %d (pci %s)", b->gpu, b->pci[0] ? b->pci : "?");
  else
    snprintf(dev, sizeof dev, "cpu");
  snprintf(out, len, "rank %d host %s %s numa %s cpus %s (%d core%s, %s)", b->rank, b->host, dev,
           b->numa[0] ? b->numa : "?", b->cpus[0] ? b->cpus : "?", b->cores,
           b->cores == 1 ? "" : "s", b->bound ? "bound" : "as launched");
}

ddp_status_t ddp_bind_mode_parse(const char *text, ddp_bind_mode_t *mode) {
  if (!text) return DDP_ERR_INVALID_ARG;
  if (strcmp(text, "auto") == 0)
    *mode = DDP_BIND_MODE_AUTO;
  else if (strcmp(text, "1") == 0)
    *mode = DDP_BIND_MODE_ALL;
  else if (strcmp(text, "0") == 0)
    *mode = DDP_BIND_MODE_NONE;
  else
    return DDP_ERR_INVALID_ARG;
  return DDP_OK;
}

#if DDP_HAVE_HWLOC
/* The cpuset a rank's cores come from: its GPU's nearest non-I/O ancestor,
 * or the whole machine for a CPU rank. Returns NULL for an unknown bus id. */
static hwloc_const_bitmap_t locality(hwloc_topology_t topo, const char *pci) {
  if (!pci || !pci[0]) return hwloc_topology_get_topology_cpuset(topo);
  hwloc_obj_t dev = hwloc_get_pcidev_by_busidstring(topo, pci);
  if (!dev) return NULL;
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, dev);
  return anc && anc->cpuset ? anc->cpuset : hwloc_topology_get_topology_cpuset(topo);
}

ddp_status_t ddp_binding_plan(hwloc_topology_t topo, const char *const *pci, int local_size,
                              int local_rank, hwloc_bitmap_t cpuset) {
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "binding: local rank %d of %d", local_rank, local_size);
  hwloc_const_bitmap_t mine = locality(topo, pci ? pci[local_rank] : NULL);
  if (!mine)
    DDP_FAIL(DDP_ERR_NO_DEVICE, "binding: no PCI device %s in the hwloc topology", pci[local_rank]);
  /* Ranks sharing this locality, and this rank's place among them. */
  int sharing = 0, index = 0;
  for (int r = 0; r < local_size; ++r) {
    hwloc_const_bitmap_t other = locality(topo, pci ? pci[r] : NULL);
    if (other && hwloc_bitmap_isequal(other, mine)) {
      if (r < local_rank) index++;
      sharing++;
    }
  }
  const int cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, mine, HWLOC_OBJ_CORE);
  hwloc_bitmap_zero(cpuset);
  if (cores <= 0) { /* no core objects: use the whole locality */
    hwloc_bitmap_copy(cpuset, mine);
    return DDP_OK;
  }
  int first, last; /* cores [first, last) of the locality, in logical order */
  if (sharing <= cores) {
    first = (int)((long)index * cores / sharing);
    last = (int)((long)(index + 1) * cores / sharing);
  } else {
    first = index % cores;
    last = first + 1;
  }
  for (int c = first; c < last; ++c) {
    hwloc_obj_t core = hwloc_get_obj_inside_cpuset_by_type(topo, mine, HWLOC_OBJ_CORE, (unsigned)c);
    if (core) hwloc_bitmap_or(cpuset, cpuset, core->cpuset);
  }
  return DDP_OK;
}

void ddp_binding_describe(hwloc_topology_t topo, hwloc_const_bitmap_t cpuset, ddp_binding_t *b) {
  hwloc_bitmap_list_snprintf(b->cpus, sizeof b->cpus, cpuset);
  b->cores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, cpuset, HWLOC_OBJ_CORE);
  if (b->cores < 0) b->cores = 0;
  hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
  snprintf(b->numa, sizeof b->numa, "?");
  if (nodes) {
    hwloc_cpuset_to_nodeset(topo, cpuset, nodes);
    if (!hwloc_bitmap_iszero(nodes)) hwloc_bitmap_list_snprintf(b->numa, sizeof b->numa, nodes);
    hwloc_bitmap_free(nodes);
  }
}

/* Plans, binds (when the mode says so) and describes this rank; pci lists
 * the node's ranks' GPUs (NULL: none known, bind nothing). A binding that
 * fails is a warning, not an error: the run is correct, only slower. */
static ddp_status_t place(const ddp_dist_t *dist, ddp_bind_mode_t mode, const char *const *pci,
                          ddp_binding_t *b) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return DDP_OK;
  ddp_status_t st = DDP_OK;
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (!set) goto destroy_topology;
  const int gpu_rank = b->gpu >= 0;
  /* PCI objects only where a GPU must be found: reading them costs time. */
  if (gpu_rank) hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) goto free_set;
  if (!pci || mode == DDP_BIND_MODE_NONE || (mode == DDP_BIND_MODE_AUTO && !gpu_rank)) {
    if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) != 0)
      hwloc_bitmap_copy(set, hwloc_topology_get_topology_cpuset(topo));
    ddp_binding_describe(topo, set, b);
    goto free_set;
  }
  DDP_CHECK_GOTO(ddp_binding_plan(topo, pci, dist->local_size, dist->local_rank, set), st,
                 free_set);
  if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0)
    b->bound = 1;
  else
    DDP_LOG_WARN("rank %d: could not bind to cpus %s; running as launched", dist->rank, b->cpus);
  ddp_binding_describe(topo, set, b);
free_set:
  hwloc_bitmap_free(set);
destroy_topology:
  hwloc_topology_destroy(topo);
  return st;
}
#endif

int ddp_binding_node_pci(char *keys, size_t width, int world, const char *host, const char **pci,
                         int max) {
  int n = 0;
  for (int r = 0; r < world; ++r) {
    char *key = keys + (size_t)r * width;
    char *sep = strrchr(key, ' ');
    if (!sep) continue;
    *sep = '\0';
    if (strcmp(key, host) == 0) {
      if (n < max) pci[n] = strcmp(sep + 1, "-") == 0 ? NULL : sep + 1;
      n++;
    }
    *sep = ' ';
  }
  return n;
}

ddp_status_t ddp_binding_setup(const ddp_dist_t *dist, ddp_backend_t *be) {
  ddp_bind_mode_t mode;
  if (ddp_bind_mode_parse(ddp_env_get(DDP_ENV_BIND), &mode) != DDP_OK)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s='%s' is not one of auto, 1, 0", ddp_env_name(DDP_ENV_BIND),
             ddp_env_get(DDP_ENV_BIND));
  ddp_binding_t b = {.rank = dist->rank, .gpu = be->device, .cores = 0};
  snprintf(b.host, sizeof b.host, "%s", dist->host);
  if (b.gpu >= 0 && be->ops->pci_bus_id) DDP_CHECK(be->ops->pci_bus_id(be, b.pci, sizeof b.pci));
  /* Every rank's host and GPU: a rank's share of its node's cores depends on
   * the GPUs of the other ranks there. Gathered rather than derived from the
   * device rule, since a launcher may give each rank its own
   * CUDA_VISIBLE_DEVICES (every rank then sees its GPU as device 0). */
  char key[KEY_WIDTH];
  snprintf(key, sizeof key, "%s %s", dist->host, b.pci[0] ? b.pci : "-");
  char *keys = NULL;
  DDP_CHECK(ddp_dist_allgather_lines(dist, key, KEY_WIDTH, &keys));
  const char **pci = calloc((size_t)dist->local_size, sizeof *pci);
  ddp_status_t st = DDP_OK;
  if (!pci) DDP_FAIL_GOTO(st, DDP_ERR_OOM, free_keys, "binding: out of host memory");
  const int on_node =
      ddp_binding_node_pci(keys, KEY_WIDTH, dist->world, dist->host, pci, dist->local_size);
  if (on_node != dist->local_size && mode != DDP_BIND_MODE_NONE)
    DDP_LOG_WARN("rank %d: %d ranks report host %s but MPI counts %d on this node; not binding",
                 dist->rank, on_node, dist->host, dist->local_size);
#if DDP_HAVE_HWLOC
  DDP_CHECK_GOTO(place(dist, mode, on_node == dist->local_size ? pci : NULL, &b), st, free_pci);
#endif
  char line[MAP_LINE];
  ddp_binding_format(&b, line, sizeof line);
  char *all = NULL;
  DDP_CHECK_GOTO(ddp_dist_allgather_lines(dist, line, MAP_LINE, &all), st, free_pci);
  for (int r = 0; r < dist->world; ++r) DDP_LOG_INFO("binding: %s", all + (size_t)r * MAP_LINE);
  free(all);
free_pci:
  free(pci);
free_keys:
  free(keys);
  return st;
}
