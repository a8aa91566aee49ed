/* Rank placement (src/runtime/binding.c) on a topology loaded from XML: two packages,
 * each with one NUMA node of 8 single-PU cores and two PCI GPUs behind a host
 * bridge (0000:07:00.0 and 0000:0a:00.0 on node 0, 0000:85:00.0 and
 * 0000:8a:00.0 on node 1). Checks the cores chosen for GPU ranks (one per
 * GPU, several sharing a node, more ranks than cores), for CPU ranks, the
 * unknown-bus-id error, the map line, DDPTRAIN_BIND parsing, the node's GPUs
 * from gathered keys, and the start-up path on the CPU backend. */
#include <config.h>

#include <stdarg.h>
#include <stdlib.h>

#include "check_util.h"
#include "runtime/binding.h"
#include "runtime/dist.h"

#if DDP_HAVE_HWLOC
static hwloc_topology_t g_topo;

/* hwloc 2.x XML: every object carries its cpuset and nodeset; I/O objects
 * (bridges, PCI devices) have none and sit under their package. */
static void append(char **xml, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char **xml, size_t *len, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  ck_assert(n > 0 && (size_t)n < sizeof line);
  *xml = realloc(*xml, *len + (size_t)n + 1);
  ck_assert_ptr_nonnull(*xml);
  memcpy(*xml + *len, line, (size_t)n + 1);
  *len += (size_t)n;
}

#define SETS \
  "cpuset=\"0x%08x\" complete_cpuset=\"0x%08x\" nodeset=\"0x%08x\" complete_nodeset=\"0x%08x\""

static void setup(void) {
  static const unsigned bus[2][2] = {{0x07, 0x0a}, {0x85, 0x8a}};
  char *xml = NULL;
  size_t len = 0;
  int gp = 1;
  append(&xml, &len,
         "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n<topology version=\"2.0\">\n");
  append(&xml, &len, "<object type=\"Machine\" os_index=\"0\" " SETS " gp_index=\"%d\">\n", 0xffffu,
         0xffffu, 3u, 3u, gp++);
  for (unsigned p = 0; p < 2; ++p) {
    const unsigned cs = 0xffu << (8 * p), ns = 1u << p;
    append(&xml, &len, "<object type=\"Package\" os_index=\"%u\" " SETS " gp_index=\"%d\">\n", p,
           cs, cs, ns, ns, gp++);
    append(&xml, &len,
           "<object type=\"NUMANode\" os_index=\"%u\" " SETS
           " gp_index=\"%d\" local_memory=\"1073741824\"/>\n",
           p, cs, cs, ns, ns, gp++);
    for (unsigned c = 0; c < 8; ++c) {
      const unsigned i = 8 * p + c, m = 1u << i;
      append(&xml, &len, "<object type=\"Core\" os_index=\"%u\" " SETS " gp_index=\"%d\">\n", i, m,
             m, ns, ns, gp++);
      append(&xml, &len,
             "<object type=\"PU\" os_index=\"%u\" " SETS " gp_index=\"%d\"/>\n</object>\n", i, m, m,
             ns, ns, gp++);
    }
    append(&xml, &len,
           "<object type=\"Bridge\" gp_index=\"%d\" bridge_type=\"0-1\" depth=\"0\" "
           "bridge_pci=\"0000:[%02x-%02x]\">\n",
           gp++, p ? 0x80u : 0x00u, p ? 0x8fu : 0x0fu);
    for (int g = 0; g < 2; ++g)
      append(&xml, &len,
             "<object type=\"PCIDev\" gp_index=\"%d\" pci_busid=\"0000:%02x:00.0\" "
             "pci_type=\"0302 [10de:2330] [10de:16c1] a1\"/>\n",
             gp++, bus[p][g]);
    append(&xml, &len, "</object>\n</object>\n");
  }
  append(&xml, &len, "</object>\n</topology>\n");
  ck_assert_int_eq(hwloc_topology_init(&g_topo), 0);
  ck_assert_int_eq(hwloc_topology_set_io_types_filter(g_topo, HWLOC_TYPE_FILTER_KEEP_ALL), 0);
  ck_assert_int_eq(hwloc_topology_set_xmlbuffer(g_topo, xml, (int)len + 1), 0);
  ck_assert_int_eq(hwloc_topology_load(g_topo), 0);
  free(xml);
  ck_assert_int_eq(hwloc_get_nbobjs_by_type(g_topo, HWLOC_OBJ_NUMANODE), 2);
  ck_assert_int_eq(hwloc_get_nbobjs_by_type(g_topo, HWLOC_OBJ_PCI_DEVICE), 4);
}

static void teardown(void) {
  hwloc_topology_destroy(g_topo);
}

/* Plans local rank r of n and checks its cpus and NUMA nodes. */
static void expect_plan(const char *const *pci, int n, int r, const char *cpus, const char *numa,
                        int cores) {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  ck_assert_int_eq(ddp_binding_plan(g_topo, pci, n, r, set), DDP_OK);
  ddp_binding_t b = {0};
  ddp_binding_describe(g_topo, set, &b);
  hwloc_bitmap_free(set);
  ck_assert_msg(strcmp(b.cpus, cpus) == 0 && strcmp(b.numa, numa) == 0 && b.cores == cores,
                "local rank %d of %d: cpus %s numa %s cores %d; want %s, %s, %d", r, n, b.cpus,
                b.numa, b.cores, cpus, numa, cores);
}

START_TEST(test_binding_one_rank_per_gpu_gets_its_numa_node) {
  const char *pci[] = {"0000:07:00.0", "0000:85:00.0"};
  expect_plan(pci, 2, 0, "0-7", "0", 8);
  expect_plan(pci, 2, 1, "8-15", "1", 8);
}
END_TEST

START_TEST(test_binding_two_gpus_per_node_split_its_cores) {
  const char *pci[] = {"0000:07:00.0", "0000:0a:00.0", "0000:85:00.0", "0000:8a:00.0"};
  expect_plan(pci, 4, 0, "0-3", "0", 4);
  expect_plan(pci, 4, 1, "4-7", "0", 4);
  expect_plan(pci, 4, 2, "8-11", "1", 4);
  expect_plan(pci, 4, 3, "12-15", "1", 4);
}
END_TEST

/* Three ranks on node 0's GPUs (two on one GPU) and one on node 1: node 0's
 * 8 cores go 2/3/3 in local-rank order, whatever the GPU order. */
START_TEST(test_binding_uneven_sharing_is_contiguous_in_rank_order) {
  const char *pci[] = {"0000:0a:00.0", "0000:85:00.0", "0000:07:00.0", "0000:07:00.0"};
  expect_plan(pci, 4, 0, "0-1", "0", 2);
  expect_plan(pci, 4, 1, "8-15", "1", 8);
  expect_plan(pci, 4, 2, "2-4", "0", 3);
  expect_plan(pci, 4, 3, "5-7", "0", 3);
}
END_TEST

/* More ranks than cores on one node: rank k takes core k mod 8. */
START_TEST(test_binding_more_ranks_than_cores_wrap) {
  const char *pci[10];
  for (int i = 0; i < 10; ++i) pci[i] = "0000:85:00.0";
  expect_plan(pci, 10, 0, "8", "1", 1);
  expect_plan(pci, 10, 7, "15", "1", 1);
  expect_plan(pci, 10, 9, "9", "1", 1);
}
END_TEST

/* CPU ranks (no GPU) share the whole machine. */
START_TEST(test_binding_cpu_ranks_split_the_machine) {
  const char *none[] = {NULL, "", NULL};
  expect_plan(none, 3, 0, "0-4", "0", 5);
  expect_plan(none, 3, 1, "5-9", "0-1", 5);
  expect_plan(none, 3, 2, "10-15", "1", 6);
  expect_plan(NULL, 1, 0, "0-15", "0-1", 16);
}
END_TEST

START_TEST(test_binding_unknown_bus_id_and_bad_rank_are_errors) {
  const char *pci[] = {"0000:07:00.0", "0000:42:00.0"};
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  ddp_test_log_start();
  ck_assert_int_eq(ddp_binding_plan(g_topo, pci, 2, 1, set), DDP_ERR_NO_DEVICE);
  ck_assert_int_eq(ddp_binding_plan(g_topo, pci, 2, 2, set), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "no PCI device 0000:42:00.0 in the hwloc topology");
  ddp_assert_contains(log, "local rank 2 of 2");
  free(log);
  /* a peer's unknown GPU does not stop this rank's plan */
  ck_assert_int_eq(ddp_binding_plan(g_topo, pci, 2, 0, set), DDP_OK);
  hwloc_bitmap_free(set);
}
END_TEST
#endif

START_TEST(test_binding_map_line) {
  ddp_binding_t g = {.rank = 3,
                     .host = "node7",
                     .gpu = 1,
                     .pci = "0000:85:00.0",
                     .numa = "1",
                     .cpus = "8-15",
                     .cores = 8,
                     .bound = 1};
  char line[256];
  ddp_binding_format(&g, line, sizeof line);
  ck_assert_str_eq(line,
                   "rank 3 host node7 gpu 1 (pci 0000:85:00.0) numa 1 cpus 8-15 (8 cores, bound)");
  ddp_binding_t c = {.rank = 0, .host = "vm", .gpu = -1, .numa = "0", .cpus = "0", .cores = 1};
  ddp_binding_format(&c, line, sizeof line);
  ck_assert_str_eq(line, "rank 0 host vm cpu numa 0 cpus 0 (1 core, as launched)");
  ddp_binding_t unknown = {.rank = 2, .host = "h", .gpu = 0};
  ddp_binding_format(&unknown, line, sizeof line);
  ck_assert_str_eq(line, "rank 2 host h gpu 0 (pci ?) numa ? cpus ? (0 cores, as launched)");
}
END_TEST

START_TEST(test_binding_mode_parse) {
  ddp_bind_mode_t m = DDP_BIND_MODE_NONE;
  ck_assert_int_eq(ddp_bind_mode_parse("auto", &m), DDP_OK);
  ck_assert_int_eq(m, DDP_BIND_MODE_AUTO);
  ck_assert_int_eq(ddp_bind_mode_parse("1", &m), DDP_OK);
  ck_assert_int_eq(m, DDP_BIND_MODE_ALL);
  ck_assert_int_eq(ddp_bind_mode_parse("0", &m), DDP_OK);
  ck_assert_int_eq(m, DDP_BIND_MODE_NONE);
  ck_assert_int_eq(ddp_bind_mode_parse("yes", &m), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_bind_mode_parse(NULL, &m), DDP_ERR_INVALID_ARG);
}
END_TEST

/* A single process receives its own line, truncated to the width. */
START_TEST(test_binding_allgather_lines_single_rank) {
  const ddp_dist_t dist = {.rank = 0, .world = 1, .local_size = 1};
  char *all = NULL;
  ck_assert_int_eq(ddp_dist_allgather_lines(&dist, "rank 0 host h cpu", 8, &all), DDP_OK);
  ck_assert_ptr_nonnull(all);
  ck_assert_str_eq(all, "rank 0 ");
  free(all);
}
END_TEST

/* The node's GPUs from every rank's "host pci" key: only this host's ranks,
 * in rank order, CPU ranks as NULL; the keys are left intact. */
START_TEST(test_binding_node_pci_from_gathered_keys) {
  enum { W = 40, WORLD = 5 };
  static const char *const k[WORLD] = {"a 0000:07:00.0", "b 0000:07:00.0", "a 0000:85:00.0", "a -",
                                       "bad-entry"};
  char keys[WORLD * W] = {0};
  for (int r = 0; r < WORLD; ++r) snprintf(keys + r * W, W, "%s", k[r]);
  const char *pci[4] = {NULL};
  ck_assert_int_eq(ddp_binding_node_pci(keys, W, WORLD, "a", pci, 4), 3);
  ck_assert_str_eq(pci[0], "0000:07:00.0");
  ck_assert_str_eq(pci[1], "0000:85:00.0");
  ck_assert_ptr_null(pci[2]);
  for (int r = 0; r < WORLD; ++r) ck_assert_str_eq(keys + r * W, k[r]);
  /* more ranks name the host than fit: counted, not written past max */
  const char *one[1] = {NULL};
  ck_assert_int_eq(ddp_binding_node_pci(keys, W, WORLD, "a", one, 1), 3);
  ck_assert_str_eq(one[0], "0000:07:00.0");
  ck_assert_int_eq(ddp_binding_node_pci(keys, W, WORLD, "c", one, 1), 0);
}
END_TEST

/* Start-up on the CPU backend: the map is logged; a bad DDPTRAIN_BIND is a
 * clear error. */
START_TEST(test_binding_setup_logs_the_map_and_rejects_bad_mode) {
  ddp_backend_t *be = ddp_test_cpu_backend();
  const ddp_dist_t dist = {.rank = 0, .world = 1, .local_size = 1, .host = "testhost"};
  setenv("DDPTRAIN_BIND", "0", 1);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_binding_setup(&dist, be), DDP_OK);
  setenv("DDPTRAIN_BIND", "sometimes", 1);
  ck_assert_int_eq(ddp_binding_setup(&dist, be), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  unsetenv("DDPTRAIN_BIND");
  ddp_assert_contains(log, "binding: rank 0 host testhost cpu numa ");
  ddp_assert_contains(log, "as launched)");
#if DDP_HAVE_HWLOC
  ck_assert_ptr_null(strstr(log, "cpus ?"));
#endif
  ddp_assert_contains(log, "DDPTRAIN_BIND='sometimes' is not one of auto, 1, 0");
  free(log);
  ddp_backend_destroy(be);
}
END_TEST

static Suite *binding_suite(void) {
  Suite *s = suite_create("binding");
  TCase *tc;
#if DDP_HAVE_HWLOC
  tc = tcase_create("topology");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_binding_one_rank_per_gpu_gets_its_numa_node);
  tcase_add_test(tc, test_binding_two_gpus_per_node_split_its_cores);
  tcase_add_test(tc, test_binding_uneven_sharing_is_contiguous_in_rank_order);
  tcase_add_test(tc, test_binding_more_ranks_than_cores_wrap);
  tcase_add_test(tc, test_binding_cpu_ranks_split_the_machine);
  tcase_add_test(tc, test_binding_unknown_bus_id_and_bad_rank_are_errors);
  suite_add_tcase(s, tc);
#endif
  tc = tcase_create("map");
  tcase_add_test(tc, test_binding_map_line);
  tcase_add_test(tc, test_binding_mode_parse);
  tcase_add_test(tc, test_binding_allgather_lines_single_rank);
  tcase_add_test(tc, test_binding_node_pci_from_gathered_keys);
  tcase_add_test(tc, test_binding_setup_logs_the_map_and_rejects_bad_mode);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(binding_suite());
}
