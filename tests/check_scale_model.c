/* The scaling model (train/scale_model.h) on hand-computed cases: the
 * alpha-beta formulas, ring against tree, the overlap of a three-bucket
 * plan with backward, whole predictions for --zero 0 and 1, the limits
 * (one GPU: no communication; a fast network: nothing exposed; a slow one:
 * everything but backward exposed), efficiency rising with bandwidth, the
 * recommendation, and the cluster presets and file reader. */
#include <config.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_util.h"
#include "train/scale_cluster.h"
#include "train/scale_model.h"

#define NEAR(a, b) ck_assert_double_eq_tol((a), (b), 1e-9 * (1.0 + fabs((double)(b))))

/* 8 Gbit/s is 1e6 bytes per ms: times below are bytes / 1e6. */
static ddp_scale_cluster_t cluster(int g, double intra_gbps, double inter_gbps, double a_in,
                                   double a_out) {
  return (ddp_scale_cluster_t){.name = "test",
                               .gpus_per_node = g,
                               .intra_gbps = intra_gbps,
                               .inter_gbps = inter_gbps,
                               .intra_latency_us = a_in,
                               .inter_latency_us = a_out,
                               .gemm_tflops = 1,
                               .memory_gbytes_s = 1000,
                               .gpu_memory_gib = 80};
}

START_TEST(test_ring_formulas) {
  /* 2 (n-1)/n S/B + 2 (n-1) alpha = 1.5 ms + 6 x 10 us */
  NEAR(ddp_scale_ring_allreduce_ms(4, 1e6, 8, 10), 1.56);
  /* (n-1)/n S/B + (n-1) alpha = 0.75 ms + 3 x 10 us */
  NEAR(ddp_scale_ring_gather_ms(4, 1e6, 8, 10), 0.78);
  NEAR(ddp_scale_ring_allreduce_ms(1, 1e6, 8, 10), 0.0);
  NEAR(ddp_scale_ring_gather_ms(1, 1e6, 8, 10), 0.0);
  /* inside one node the cluster's collective is the ring on NVLink */
  const ddp_scale_cluster_t c = cluster(8, 8, 1, 10, 1000);
  const char *algo = NULL;
  NEAR(ddp_scale_collective_ms(&c, DDP_SCALE_ALL_REDUCE, 4, 1e6, &algo), 1.56);
  ck_assert_str_eq(algo, "ring");
  NEAR(ddp_scale_collective_ms(&c, DDP_SCALE_REDUCE_SCATTER, 4, 1e6, NULL), 0.78);
  NEAR(ddp_scale_collective_ms(&c, DDP_SCALE_ALL_GATHER, 1, 1e6, NULL), 0.0);
}
END_TEST

START_TEST(test_ring_or_tree_across_nodes) {
  /* 2 nodes of 2, NVLink 2e6 B/ms, network 1e6 B/ms per node, no latency:
   * ring 2 x 3/4 x 1 ms = 1.5 at the slower bandwidth; tree 2 x 0.25 (in
   * the node) + 2 x 1 ms between nodes = 2.5: the ring wins. */
  ddp_scale_cluster_t c = cluster(2, 16, 8, 0, 0);
  const char *algo = NULL;
  NEAR(ddp_scale_collective_ms(&c, DDP_SCALE_ALL_REDUCE, 4, 1e6, &algo), 1.5);
  ck_assert_str_eq(algo, "ring");
  /* reduce-scatter: ring 3/4 ms; hierarchical 0.25 + 1/2 x 1 ms: equal */
  NEAR(ddp_scale_collective_ms(&c, DDP_SCALE_REDUCE_SCATTER, 4, 1e6, NULL), 0.75);
  /* 32 nodes, a small message, 10 us per network step, 1 us inside:
   * ring 2 x 63/64 x 0.001 + 126 x 0.01 = 1.26196875 ms;
   * tree 2 x (0.00025 + 0.001) + 2 x 0.001 + 2 x 5 x 0.01 = 0.1045 ms. */
  c = cluster(2, 16, 8, 1, 10);
  NEAR(ddp_scale_collective_ms(&c, DDP_SCALE_ALL_REDUCE, 64, 1000, &algo), 0.1045);
  ck_assert_str_eq(algo, "tree");
  /* the ring's figure, for the record that tree was the cheaper */
  NEAR(ddp_scale_ring_allreduce_ms(64, 1000, 8, 10), 1.26196875);
}
END_TEST

START_TEST(test_three_bucket_overlap) {
  /* buckets ready at 1, 2, 4 ms of a 4 ms backward, taking 2, 0.5, 1 ms:
   * 1 -> 3; waits for the stream 3 -> 3.5; ready at 4 -> 5: 1 ms exposed */
  const double ready[3] = {1, 2, 4}, comm[3] = {2, 0.5, 1};
  double end[3];
  NEAR(ddp_scale_overlap(ready, comm, 3, 4, end), 1.0);
  NEAR(end[0], 3.0);
  NEAR(end[1], 3.5);
  NEAR(end[2], 5.0);
  /* everything done before backward ends: nothing exposed */
  const double early[3] = {0.5, 1, 1.5}, small[3] = {0.1, 0.1, 0.1};
  NEAR(ddp_scale_overlap(early, small, 3, 4, NULL), 0.0);
  NEAR(ddp_scale_overlap(ready, comm, 0, 4, NULL), 0.0);
}
END_TEST

/* Three tensors of 1, 1 and 2 MiB of fp32 gradients (1 Mi elements). */
static ddp_param_t g_table[3];

static ddp_scale_workload_t workload(void) {
  const int64_t counts[3] = {262144, 262144, 524288};
  size_t off = 0;
  for (int i = 0; i < 3; ++i) {
    char name[16];
    snprintf(name, sizeof name, "t%d", i);
    ck_assert_int_eq(ddp_param_set(&g_table[i], name, 1, &counts[i], off, 0), DDP_OK);
    off += (size_t)counts[i];
  }
  /* 3e9 FLOPs at 1 TFLOP/s: 3 ms, 1 forward and 2 backward */
  return (ddp_scale_workload_t){.tensors = g_table,
                                .n_tensors = 3,
                                .n_params = off,
                                .flops_per_step = 3e9,
                                .accum = 1,
                                .grad_bytes = 4,
                                .weight_bytes = 4,
                                .optim_bytes = 28,
                                .state_bytes = 16,
                                .optim_state_bytes = 8};
}

START_TEST(test_predict_by_hand) {
  const ddp_scale_cluster_t c = cluster(8, 8, 8, 0, 0);
  const ddp_scale_workload_t w = workload();
  ddp_scale_point_t p;
  /* first bucket 1 MiB, then 2 MiB caps: [t0] [t1] [t2], ready at 0.5, 1
   * and 2 ms of backward; all-reduce on 2 GPUs costs S / 1e6 ms:
   * 0.5 -> 1.548576 -> 2.597152, then 2.597152 -> 4.694304 */
  ck_assert_int_eq(ddp_scale_predict(&c, &w, 2, 0, 2, 1, &p), DDP_OK);
  ck_assert_int_eq(p.n_buckets, 3);
  NEAR(p.compute_ms, 3.0);
  NEAR(p.forward_ms, 1.0);
  NEAR(p.comm_ms, 4.194304);
  NEAR(p.exposed_ms, 2.694304);
  const double optim = 1048576.0 * 28 / 1e9; /* bytes / (1000 GB/s), in ms */
  NEAR(p.optimizer_ms, optim);
  NEAR(p.gather_ms, 0.0);
  NEAR(p.step_ms, 3.0 + 2.694304 + optim);
  NEAR(p.efficiency, (3.0 + optim) / p.step_ms);
  NEAR(p.memory_gib, 16.0 / 1024);
  /* --zero 1: reduce-scatters of half the time, 0.5 -> 1.024288, then
   * 1.024288 -> 1.548576, 2 -> 3.048576; the optimizer on half; the
   * all-gather of 4 MiB of weights: 2.097152 ms */
  ck_assert_int_eq(ddp_scale_predict(&c, &w, 2, 1, 2, 1, &p), DDP_OK);
  NEAR(p.exposed_ms, 1.048576);
  NEAR(p.optimizer_ms, optim / 2);
  NEAR(p.gather_ms, 2.097152);
  NEAR(p.step_ms, 3.0 + 1.048576 + optim / 2 + 2.097152);
  NEAR(p.memory_gib, 14.0 / 1024); /* 16 - 8 / 2 of state + 4 / 2 of reduced gradients */
  /* one 3 MiB cap after the first bucket: [t0] [t1 t2] */
  ck_assert_int_eq(ddp_scale_predict(&c, &w, 2, 0, 3, 1, &p), DDP_OK);
  ck_assert_int_eq(p.n_buckets, 2);
  /* accumulation: only the last micro-step's backward (2/4 ms) overlaps */
  ddp_scale_workload_t w4 = w;
  w4.accum = 4;
  ck_assert_int_eq(ddp_scale_predict(&c, &w4, 2, 0, 2, 1, &p), DDP_OK);
  /* ready at 0.125, 0.25, 0.5: 0.125 -> 1.173576 -> 2.222152 -> 4.319304 */
  NEAR(p.exposed_ms, 4.319304 - 0.5);
}
END_TEST

START_TEST(test_one_gpu_has_no_communication) {
  const ddp_scale_cluster_t c = cluster(8, 8, 8, 5, 5);
  const ddp_scale_workload_t w = workload();
  for (int z = 0; z < 2; ++z) {
    ddp_scale_point_t p;
    ck_assert_int_eq(ddp_scale_predict(&c, &w, 1, z, 25, 1, &p), DDP_OK);
    NEAR(p.comm_ms, 0.0);
    NEAR(p.exposed_ms, 0.0);
    NEAR(p.gather_ms, 0.0);
    NEAR(p.efficiency, 1.0);
  }
}
END_TEST

START_TEST(test_exposed_limits) {
  const ddp_scale_workload_t w = workload();
  ddp_scale_point_t p;
  /* a network a million times faster than the step needs: nothing shows */
  ddp_scale_cluster_t c = cluster(8, 8e6, 8e6, 0, 0);
  ck_assert_int_eq(ddp_scale_predict(&c, &w, 64, 0, 2, 1, &p), DDP_OK);
  ck_assert(p.exposed_ms < 1e-3 * p.compute_ms);
  ck_assert(p.efficiency > 0.999);
  /* a slow one: the collectives run back to back from the first bucket's
   * ready time, so exposed = first ready + all communication - backward */
  c = cluster(8, 0.08, 0.08, 0, 0);
  ck_assert_int_eq(ddp_scale_predict(&c, &w, 64, 0, 2, 1, &p), DDP_OK);
  ck_assert(p.comm_ms > 100 * p.backward_ms);
  NEAR(p.exposed_ms, 0.5 + p.comm_ms - p.backward_ms);
}
END_TEST

START_TEST(test_efficiency_rises_with_bandwidth) {
  const ddp_scale_workload_t w = workload();
  double last = 0.0;
  for (double gbps = 0.1; gbps <= 1e5; gbps *= 3) {
    const ddp_scale_cluster_t c = cluster(8, 8 * gbps, gbps, 2, 5);
    for (int z = 0; z < 2; ++z) {
      ddp_scale_point_t p;
      ck_assert_int_eq(ddp_scale_predict(&c, &w, 256, z, 2, 1, &p), DDP_OK);
      /* --zero 1 may pass 1: it divides the optimizer's work by N */
      if (z == 0) {
        ck_assert(p.efficiency >= last && p.efficiency <= 1.0 + 1e-12);
        last = p.efficiency;
      }
      ck_assert(p.efficiency > 0);
    }
  }
  ck_assert(last > 0.9);
}
END_TEST

START_TEST(test_bad_arguments_fail) {
  const ddp_scale_cluster_t c = cluster(8, 8, 8, 0, 0);
  ddp_scale_cluster_t bad = c;
  bad.inter_gbps = 0;
  const ddp_scale_workload_t w = workload();
  ddp_scale_workload_t none = w;
  none.n_tensors = 0;
  ddp_scale_point_t p;
  ck_assert_int_eq(ddp_scale_predict(&c, &w, 0, 0, 2, 1, &p), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_scale_predict(&c, &w, 2, 0, 0, 1, &p), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_scale_predict(&bad, &w, 2, 0, 2, 1, &p), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_scale_predict(&c, &none, 2, 0, 2, 1, &p), DDP_ERR_INVALID_ARG);
}
END_TEST

START_TEST(test_recommendation) {
  const ddp_scale_workload_t w = workload();
  const double sizes[3] = {1, 2, 3};
  ddp_scale_point_t best;
  char why[512];
  /* the all-gather of the weights costs more than half the optimizer
   * saves: --zero 0, with the fastest bucket size */
  ddp_scale_cluster_t c = cluster(8, 8, 8, 0, 0);
  ck_assert_int_eq(ddp_scale_recommend(&c, &w, 2, sizes, 3, 1, &best, why, sizeof why), DDP_OK);
  ck_assert_int_eq(best.zero, 0);
  for (int i = 0; i < 3; ++i) {
    ddp_scale_point_t p;
    ck_assert_int_eq(ddp_scale_predict(&c, &w, 2, 0, sizes[i], 1, &p), DDP_OK);
    ck_assert(best.step_ms <= p.step_ms);
  }
  ck_assert_ptr_nonnull(strstr(why, "--zero 0 is"));
  /* states that do not fit a GPU: --zero 1, whatever it costs */
  c.gpu_memory_gib = 0.014; /* 0.0156 GiB with --zero 0, 0.0117 with 1 */
  ck_assert_int_eq(ddp_scale_recommend(&c, &w, 2, sizes, 3, 1, &best, why, sizeof why), DDP_OK);
  ck_assert_int_eq(best.zero, 1);
  ck_assert_ptr_nonnull(strstr(why, "more than the"));
  /* an optimizer pass that dominates (slow memory): --zero 1 is faster */
  c = cluster(8, 8000, 8000, 0, 0);
  c.memory_gbytes_s = 1;
  ck_assert_int_eq(ddp_scale_recommend(&c, &w, 8, sizes, 3, 1, &best, why, sizeof why), DDP_OK);
  ck_assert_int_eq(best.zero, 1);
  ck_assert_ptr_nonnull(strstr(why, "not slower"));
}
END_TEST

/* ---- the cluster description ------------------------------------------ */

static char g_path[64];

static const char *write_file(const char *text) {
  snprintf(g_path, sizeof g_path, "/tmp/ddp_cluster_XXXXXX");
  const int fd = mkstemp(g_path);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  return g_path;
}

/* Loads `text` as a file: DDP_OK, or the status with why naming `want`. */
static ddp_status_t load_text(const char *text, const char *want, ddp_scale_cluster_t *c) {
  char why[512] = "";
  const ddp_status_t st = ddp_scale_cluster_load(write_file(text), c, why, sizeof why);
  unlink(g_path);
  if (want) ck_assert_msg(strstr(why, want) != NULL, "'%s' not in '%s'", want, why);
  return st;
}

START_TEST(test_cluster_presets_and_files) {
  ddp_scale_cluster_t c;
  char why[512];
  ck_assert_int_eq(ddp_scale_cluster_load("dgx-a100", &c, why, sizeof why), DDP_OK);
  ck_assert_int_eq(c.gpus_per_node, 8);
  ck_assert_int_eq(ddp_scale_cluster_load("horovod-p100", &c, why, sizeof why), DDP_OK);
  ck_assert_int_eq(c.gpus_per_node, 4);
  NEAR(c.inter_gbps, 25);
  ck_assert_int_eq(ddp_scale_cluster_load("/nonexistent/c.json", &c, why, sizeof why), DDP_ERR_IO);
  ck_assert_ptr_nonnull(strstr(why, "not a preset"));
  /* a full file, and a preset with one value changed */
  ck_assert_int_eq(
      load_text("{\"name\": \"two hosts\", \"gpus_per_node\": 1, \"intra_gbps\": 100, "
                "\"inter_gbps\": 1, \"intra_latency_us\": 5, \"inter_latency_us\": 50, "
                "\"gemm_tflops\": 0.1, \"memory_gbytes_s\": 10, "
                "\"gpu_memory_gib\": 8}",
                NULL, &c),
      DDP_OK);
  ck_assert_str_eq(c.name, "two hosts");
  NEAR(c.inter_latency_us, 50);
  ck_assert_int_eq(load_text("{\"preset\": \"dgx-a100\", \"inter_gbps\": 100}", NULL, &c), DDP_OK);
  NEAR(c.inter_gbps, 100);
  NEAR(c.intra_gbps, 1920);
  /* every error names the field */
  ck_assert_int_eq(load_text("{\"preset\": \"dgx-a100\", \"inter_gbps\": 0}", "\"inter_gbps\"", &c),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(
      load_text("{\"preset\": \"dgx-a100\", \"intra_latency_us\": -1}", "\"intra_latency_us\"", &c),
      DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(
      load_text("{\"preset\": \"dgx-a100\", \"gpus_per_node\": 2.5}", "\"gpus_per_node\"", &c),
      DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(load_text("{\"preset\": \"dgx-a100\", \"gemm_tflop\": 5}", "unknown field", &c),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(load_text("{\"preset\": \"dgx-z\"}", "\"preset\"", &c), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(load_text("{\"gpus_per_node\": 8}", "\"intra_gbps\" is missing", &c),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(load_text("{\"inter_gbps\": \"fast\"}", "\"inter_gbps\"", &c),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(load_text("[8]", "JSON object", &c), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(load_text("{\"gpus_per_node\": ", "line 1", &c), DDP_ERR_IO);
}
END_TEST

static Suite *scale_suite(void) {
  Suite *s = suite_create("scale_model");
  TCase *tc = tcase_create("collectives");
  tcase_add_test(tc, test_ring_formulas);
  tcase_add_test(tc, test_ring_or_tree_across_nodes);
  tcase_add_test(tc, test_three_bucket_overlap);
  suite_add_tcase(s, tc);
  tc = tcase_create("predict");
  tcase_add_test(tc, test_predict_by_hand);
  tcase_add_test(tc, test_one_gpu_has_no_communication);
  tcase_add_test(tc, test_exposed_limits);
  tcase_add_test(tc, test_efficiency_rises_with_bandwidth);
  tcase_add_test(tc, test_bad_arguments_fail);
  tcase_add_test(tc, test_recommendation);
  suite_add_tcase(s, tc);
  tc = tcase_create("cluster");
  tcase_add_test(tc, test_cluster_presets_and_files);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(scale_suite());
}
