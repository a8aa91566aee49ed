/* Process bootstrap over MPI, or a singleton without it (see runtime/dist.h).
 * With the start-up watchdog, the only file outside src/comm/ that calls
 * MPI. */
#include <config.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if DDP_HAVE_MPI
#include <mpi.h>
#endif

#include "ddptrain/log.h"
#include "core/foreign_check.h"
#include "runtime/dist.h"
#include "runtime/startup_watchdog.h"

#if DDP_HAVE_MPI
ddp_status_t ddp_mpi_status_(long code, const char *expr, const char *file, int line) {
  if (code == MPI_SUCCESS) return DDP_OK;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0, inited = 0, finalized = 0;
  /* MPI_Error_string is only usable while MPI is up; a failure of
   * MPI_Init itself still deserves a message. */
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized || MPI_Error_string((int)code, msg, &len) != MPI_SUCCESS)
    snprintf(msg, sizeof msg, "MPI error class %ld", code);
  ddp_log_at(DDP_LOG_LEVEL_ERROR, file, line, "%s failed: %s (MPI error %ld)", expr, msg, code);
  return DDP_ERR_MPI;
}
#endif

ddp_status_t ddp_dist_init(int *argc, char ***argv, ddp_dist_t *dist) {
  memset(dist, 0, sizeof *dist);
  dist->world = dist->local_size = 1;
  if (gethostname(dist->host, sizeof dist->host) != 0) snprintf(dist->host, sizeof dist->host, "?");
  dist->host[sizeof dist->host - 1] = '\0';
#if DDP_HAVE_MPI
  int inited = 0;
  DDP_MPI_CHECK(MPI_Initialized(&inited));
  if (!inited) {
    DDP_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &dist->thread_level));
    dist->using_mpi = 1;
  } else {
    DDP_MPI_CHECK(MPI_Query_thread(&dist->thread_level));
  }
  /* Errors come back as codes, so they are reported with the rank and the
   * call instead of MPI's default abort with a generic message. */
  DDP_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  DDP_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &dist->rank));
  DDP_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &dist->world));
  /* From here a start-up watchdog can name the ranks it misses, the node
   * split below included. */
  ddp_startup_watchdog_mpi_up(dist->rank, dist->world, dist->thread_level, dist->host);
  MPI_Comm node;
  DDP_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, dist->rank, MPI_INFO_NULL, &node));
  DDP_MPI_CHECK(MPI_Comm_rank(node, &dist->local_rank));
  DDP_MPI_CHECK(MPI_Comm_size(node, &dist->local_size));
  DDP_MPI_CHECK(MPI_Comm_free(&node));
#else
  (void)argc;
  (void)argv;
  ddp_startup_watchdog_mpi_up(0, 1, 0, dist->host); /* a world of one, known at once */
#endif
  ddp_log_set_rank(dist->rank, dist->world);
  return DDP_OK;
}

void ddp_dist_finalize(ddp_dist_t *dist) {
#if DDP_HAVE_MPI
  if (dist->using_mpi) MPI_Finalize();
#endif
  dist->using_mpi = 0;
}

void ddp_dist_abort(const ddp_dist_t *dist, int code) {
#if DDP_HAVE_MPI
  if (dist && dist->world > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  (void)dist;
  exit(code);
}

ddp_status_t ddp_dist_agree_u64(const ddp_dist_t *dist, const char *what, uint64_t value) {
#if DDP_HAVE_MPI
  if (dist->world > 1) {
    /* (value, rank) pairs under MINLOC/MAXLOC would need a 64-bit pair type;
     * reduce min and max of the value, then the lowest rank holding each. */
    unsigned long long v = value, lo = 0, hi = 0;
    DDP_MPI_CHECK(MPI_Allreduce(&v, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD));
    DDP_MPI_CHECK(MPI_Allreduce(&v, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD));
    if (lo == hi) return DDP_OK;
    int who[2] = {v == lo ? dist->rank : dist->world, v == hi ? dist->rank : dist->world};
    int first[2];
    DDP_MPI_CHECK(MPI_Allreduce(who, first, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (dist->rank == first[0] || dist->rank == first[1] || dist->rank == 0)
      DDP_LOG_ERROR("ranks disagree on %s: rank %d has %#llx, rank %d has %#llx", what, first[0],
                    lo, first[1], hi);
    return DDP_ERR_MISMATCH;
  }
#endif
  (void)dist;
  (void)what;
  (void)value;
  return DDP_OK;
}

ddp_status_t ddp_dist_sum_double(const ddp_dist_t *dist, double *value) {
#if DDP_HAVE_MPI
  if (dist->world > 1)
    DDP_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, value, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
#endif
  (void)dist;
  (void)value;
  return DDP_OK;
}

ddp_status_t ddp_dist_allgather_lines(const ddp_dist_t *dist, const char *line, size_t width,
                                      char **all) {
  *all = NULL;
  char *mine = calloc(1, width);
  char *buf = calloc((size_t)dist->world, width);
  if (!mine || !buf) {
    free(mine);
    free(buf);
    DDP_FAIL(DDP_ERR_OOM, "allgather: out of host memory");
  }
  snprintf(mine, width, "%s", line);
#if DDP_HAVE_MPI
  if (dist->world > 1) {
    const int rc =
        MPI_Allgather(mine, (int)width, MPI_CHAR, buf, (int)width, MPI_CHAR, MPI_COMM_WORLD);
    free(mine);
    if (rc != MPI_SUCCESS) free(buf);
    DDP_MPI_CHECK(rc);
    *all = buf;
    return DDP_OK;
  }
#endif
  memcpy(buf, mine, width);
  free(mine);
  *all = buf;
  return DDP_OK;
}

int ddp_dist_launcher_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                     "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; ++i) {
    const char *v = getenv(vars[i]);
    char *end = NULL;
    if (!v || !*v) continue;
    const long r = strtol(v, &end, 10);
    if (*end == '\0' && r >= 0 && r < 1L << 30) return (int)r;
  }
  return -1;
}

const char *ddp_dist_library(void) {
#if DDP_HAVE_MPI
  static char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (!buf[0] && MPI_Get_library_version(buf, &len) == MPI_SUCCESS) {
    buf[strcspn(buf, "\n,")] = '\0'; /* first clause is the useful part */
  }
  return buf[0] ? buf : "MPI";
#else
  return "none";
#endif
}
