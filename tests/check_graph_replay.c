/* Recorded passes replayed as graphs (model/graph_replay.h), against a
 * fake backend whose "stream" is a log: work enqueued outside a recording
 * runs (is logged) at once, work enqueued while recording goes into the
 * graph, and launching a graph logs its work. The gradient hooks log
 * themselves too, so every check compares what ran, in what order, with
 * the eager pass: the first pass of a key runs eagerly, the second is
 * recorded and replayed (one copy of the work, the hooks between the same
 * kernels), later ones replay without calling the body, and every failure
 * of a recording leaves exactly one eager copy of the pass and no graph. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "model/graph_replay.h"

#define MAX_LOG 4096
#define HOOK 1000 /* a hook call logs HOOK + the tensor's offset */

typedef struct fake_graph {
  int ops[64];
  int n;
} fake_graph_t;

static int run_log[MAX_LOG], n_run;
static int cap_ops[64], n_cap, capturing;
static int ends, fail_end_at, fail_begin, graphs_alive;
static int body_calls, body_fails_recorded, body_fails_always, body_allocates;
static ddp_backend_ops_t fake_ops;

static void emit(int op) {
  if (capturing) {
    ck_assert_int_lt(n_cap, 64);
    cap_ops[n_cap++] = op;
  } else {
    ck_assert_int_lt(n_run, MAX_LOG);
    run_log[n_run++] = op;
  }
}

static ddp_status_t fake_begin(ddp_backend_t *be) {
  (void)be;
  ck_assert_int_eq(capturing, 0); /* never nested */
  if (fail_begin) return DDP_ERR_CUDA;
  capturing = 1, n_cap = 0;
  return DDP_OK;
}

static ddp_status_t fake_end(ddp_backend_t *be, ddp_graph_t *out) {
  (void)be;
  ck_assert_int_eq(capturing, 1);
  capturing = 0;
  *out = NULL;
  if (++ends == fail_end_at) return DDP_ERR_UNSUPPORTED;
  fake_graph_t *g = calloc(1, sizeof *g);
  ck_assert_ptr_nonnull(g);
  memcpy(g->ops, cap_ops, (size_t)n_cap * sizeof(int));
  g->n = n_cap;
  graphs_alive++;
  *out = (ddp_graph_t)(void *)g;
  return DDP_OK;
}

static ddp_status_t fake_launch(ddp_backend_t *be, ddp_graph_t graph) {
  (void)be;
  ck_assert_int_eq(capturing, 0);
  const fake_graph_t *g = (const fake_graph_t *)(void *)graph;
  for (int i = 0; i < g->n; ++i) emit(g->ops[i]);
  return DDP_OK;
}

static void fake_destroy(ddp_backend_t *be, ddp_graph_t graph) {
  (void)be;
  if (!graph) return;
  free(graph);
  graphs_alive--;
}

static ddp_backend_t *fake_backend(void) {
  ddp_backend_t *be = ddp_test_cpu_backend();
  fake_ops = *be->ops;
  fake_ops.graph_begin = fake_begin;
  fake_ops.graph_end = fake_end;
  fake_ops.graph_launch = fake_launch;
  fake_ops.graph_destroy = fake_destroy;
  be->ops = &fake_ops;
  n_run = n_cap = capturing = ends = fail_end_at = fail_begin = graphs_alive = 0;
  body_calls = body_fails_recorded = body_fails_always = body_allocates = 0;
  return be;
}

/* A model of two tensors at offsets 0 and 10, whose hook logs itself. */
static ddp_param_t tensors[2];
static void logging_hook(void *ctx, size_t offset, size_t count) {
  (void)ctx, (void)count;
  ck_assert_int_eq(capturing, 0); /* the real hook never runs inside a recording */
  emit(HOOK + (int)offset);
}

static ddp_model_t make_model(ddp_backend_t *be) {
  tensors[0] = (ddp_param_t){.offset = 0, .count = 10};
  tensors[1] = (ddp_param_t){.offset = 10, .count = 5};
  return (ddp_model_t){.be = be, .tensors = tensors, .n_tensors = 2,
                       .grad_ready_fn = logging_hook};
}

static ddp_graph_replay_t *new_replay(ddp_backend_t *be) {
  ddp_graph_replay_t *rp = NULL;
  ck_assert_int_eq(ddp_graph_replay_create(be, &rp), DDP_OK);
  return rp;
}

/* The pass: three kernels, a gradient, two kernels, a gradient, one
 * kernel; the key's first byte shifts the kernels so keys differ in work. */
static ddp_status_t body(ddp_model_t *m, void *ctx) {
  const int base = 10 * *(const unsigned char *)ctx;
  body_calls++;
  if (body_fails_always || (body_fails_recorded && capturing)) return DDP_ERR_CUDA;
  if (body_allocates && capturing) m->be->alloc_calls++;
  emit(base + 1), emit(base + 2), emit(base + 3);
  ddp_model_grad_ready(m, 0);
  emit(base + 4), emit(base + 5);
  ddp_model_grad_ready(m, 1);
  emit(base + 6);
  return DDP_OK;
}

/* The log of `passes` eager passes of key k starting at log position at. */
static void expect_passes(int at, int passes, unsigned char k) {
  const int base = 10 * k;
  const int one[8] = {base + 1, base + 2, base + 3, HOOK + 0, base + 4, base + 5, HOOK + 10,
                      base + 6};
  ck_assert_int_eq(n_run - at, 8 * passes);
  for (int p = 0; p < passes; ++p)
    for (int i = 0; i < 8; ++i) expect_eq(run_log[at + 8 * p + i], one[i]);
}

START_TEST(test_eager_then_recorded_then_replayed) {
  ddp_backend_t *be = fake_backend();
  ddp_model_t m = make_model(be);
  ddp_graph_replay_t *rp = new_replay(be);
  unsigned char key[16] = {1};
  for (int pass = 0; pass < 5; ++pass) {
    ck_assert_int_eq(ddp_graph_replay_run(rp, &m, key, sizeof key, body, key), DDP_OK);
    expect_passes(0, pass + 1, 1);
  }
  /* the first pass ran the body, the second recorded it; none since */
  ck_assert_int_eq(body_calls, 2);
  ck_assert_int_eq(m.grad_ready_fn == logging_hook, 1); /* the hook is given back */
  ddp_graph_replay_stats_t s;
  ddp_graph_replay_get_stats(rp, &s);
  ck_assert_int_eq(s.eager, 1);
  ck_assert_int_eq(s.recordings, 1);
  ck_assert_int_eq(s.segments, 3); /* cut at both hooks */
  ck_assert_int_eq(s.replays, 4);
  ck_assert_int_eq(s.off, 0);
  ck_assert_int_eq(graphs_alive, 3);
  ddp_graph_replay_destroy(rp);
  ck_assert_int_eq(graphs_alive, 0);
  ddp_backend_destroy(be);
}
END_TEST

static int cut_calls;
static int cut_at_10(void *ctx, size_t offset, size_t count) {
  (void)count;
  ck_assert_ptr_eq(ctx, &cut_calls);
  cut_calls++;
  return offset == 10;
}

START_TEST(test_a_cut_filter_merges_segments) {
  ddp_backend_t *be = fake_backend();
  ddp_model_t m = make_model(be);
  ddp_graph_replay_t *rp = new_replay(be);
  cut_calls = 0;
  ddp_graph_replay_set_cuts(rp, cut_at_10, &cut_calls);
  unsigned char key[4] = {1};
  ck_assert_int_eq(ddp_graph_replay_run(rp, &m, key, sizeof key, body, key), DDP_OK);
  expect_passes(0, 1, 1); /* the eager pass calls each hook where the body does */
  for (int pass = 1; pass < 3; ++pass)
    ck_assert_int_eq(ddp_graph_replay_run(rp, &m, key, sizeof key, body, key), DDP_OK);
  /* replayed: the first hook waits for the cut at the second; both come
   * after all the work before that cut, in their order */
  const int replayed[8] = {11, 12, 13, 14, 15, HOOK + 0, HOOK + 10, 16};
  ck_assert_int_eq(n_run, 24);
  for (int p = 1; p < 3; ++p)
    for (int i = 0; i < 8; ++i) expect_eq(run_log[8 * p + i], replayed[i]);
  ddp_graph_replay_stats_t s;
  ddp_graph_replay_get_stats(rp, &s);
  ck_assert_int_eq(s.segments, 2);
  ck_assert_int_eq(cut_calls, 2); /* asked once per hook of the recording */
  ddp_graph_replay_destroy(rp);
  ddp_backend_destroy(be);
}
END_TEST

START_TEST(test_keys_are_kept_apart_and_the_cache_is_bounded) {
  ddp_backend_t *be = fake_backend();
  ddp_model_t m = make_model(be);
  ddp_graph_replay_t *rp = new_replay(be);
  unsigned char a[4] = {1}, b[4] = {2};
  for (int i = 0; i < 3; ++i) {
    int at = n_run;
    ck_assert_int_eq(ddp_graph_replay_run(rp, &m, a, sizeof a, body, a), DDP_OK);
    expect_passes(at, 1, 1);
    at = n_run;
    ck_assert_int_eq(ddp_graph_replay_run(rp, &m, b, sizeof b, body, b), DDP_OK);
    expect_passes(at, 1, 2);
  }
  ck_assert_int_eq(body_calls, 4);
  /* a key of another length is another key */
  int at = n_run;
  ck_assert_int_eq(ddp_graph_replay_run(rp, &m, a, 3, body, a), DDP_OK);
  expect_passes(at, 1, 1);
  ck_assert_int_eq(body_calls, 5);
  /* fill the cache: keys 3.. take the free entries; one more key than
   * the cache holds always runs eagerly, and is never recorded */
  for (int k = 3; k < DDP_GRAPH_REPLAY_KEYS; ++k) {
    unsigned char c[4] = {(unsigned char)k};
    ck_assert_int_eq(ddp_graph_replay_run(rp, &m, c, sizeof c, body, c), DDP_OK);
  }
  unsigned char extra[4] = {20};
  const int calls = body_calls;
  for (int i = 0; i < 3; ++i) {
    at = n_run;
    ck_assert_int_eq(ddp_graph_replay_run(rp, &m, extra, sizeof extra, body, extra), DDP_OK);
    expect_passes(at, 1, 20);
  }
  ck_assert_int_eq(body_calls, calls + 3);
  ddp_graph_replay_destroy(rp);
  ck_assert_int_eq(graphs_alive, 0);
  ddp_backend_destroy(be);
}
END_TEST

/* The first, eager, pass of key 1; the next one meets the fault set up
 * then, and check_off expects one eager copy of each pass, no graph left,
 * and replay off with why. */
static ddp_graph_replay_t *after_first_pass(ddp_backend_t *be, ddp_model_t *m,
                                            unsigned char *key) {
  ddp_graph_replay_t *rp = new_replay(be);
  ck_assert_int_eq(ddp_graph_replay_run(rp, m, key, 4, body, key), DDP_OK);
  expect_passes(0, 1, 1);
  return rp;
}

static void check_off(ddp_graph_replay_t *rp, ddp_model_t *m, unsigned char *key,
                      const char *why_part) {
  ck_assert_int_eq(ddp_graph_replay_run(rp, m, key, 4, body, key), DDP_OK);
  expect_passes(0, 2, 1); /* the failed recording ran nothing */
  ck_assert_int_eq(capturing, 0);
  ck_assert_int_eq(graphs_alive, 0);
  ck_assert_int_eq(m->grad_ready_fn == logging_hook, 1);
  ddp_graph_replay_stats_t s;
  ddp_graph_replay_get_stats(rp, &s);
  ck_assert_int_eq(s.off, 1);
  ck_assert_int_eq(s.recordings, 0);
  ck_assert_ptr_nonnull(strstr(s.why, why_part));
  /* off for good: the body runs every time */
  const int calls = body_calls;
  ck_assert_int_eq(ddp_graph_replay_run(rp, m, key, 4, body, key), DDP_OK);
  expect_passes(0, 3, 1);
  ck_assert_int_eq(body_calls, calls + 1);
  ddp_graph_replay_destroy(rp);
}

START_TEST(test_a_failed_recording_runs_the_pass_once_eagerly) {
  /* each place a recording can fail: its first, a middle and its last
   * segment's end, its start, the body under recording, an allocation */
  for (int c = 0; c < 6; ++c) {
    ddp_backend_t *be = fake_backend();
    ddp_model_t m = make_model(be);
    unsigned char key[4] = {1};
    ddp_graph_replay_t *rp = after_first_pass(be, &m, key);
    const char *why = "recording failed";
    if (c < 3) {
      fail_end_at = ends + 1 + c;
    } else if (c == 3) {
      fail_begin = 1;
      why = "could not start";
    } else if (c == 4) {
      body_fails_recorded = 1;
      why = "pass failed";
    } else {
      body_allocates = 1;
      why = "allocated";
    }
    check_off(rp, &m, key, why);
    ddp_backend_destroy(be);
  }
}
END_TEST

START_TEST(test_errors_are_returned) {
  ddp_backend_t *be = fake_backend();
  ddp_model_t m = make_model(be);
  ddp_graph_replay_t *rp = new_replay(be);
  unsigned char key[80] = {1};
  /* a key longer than the cache keeps */
  ck_assert_int_eq(ddp_graph_replay_run(rp, &m, key, DDP_GRAPH_REPLAY_KEY_BYTES + 1, body, key),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(body_calls, 0);
  /* a body that fails eagerly fails the pass, and again when recorded
   * then rerun eagerly: its own error each time */
  body_fails_always = 1;
  ck_assert_int_eq(ddp_graph_replay_run(rp, &m, key, 4, body, key), DDP_ERR_CUDA);
  ck_assert_int_eq(ddp_graph_replay_run(rp, &m, key, 4, body, key), DDP_ERR_CUDA);
  ck_assert_int_eq(capturing, 0);
  ck_assert_int_eq(graphs_alive, 0);
  ddp_graph_replay_destroy(rp);
  /* no replay cache: the body runs as it is */
  body_fails_always = 0;
  n_run = 0;
  ck_assert_int_eq(ddp_graph_replay_run(NULL, &m, key, 4, body, key), DDP_OK);
  expect_passes(0, 1, 1);
  ddp_backend_destroy(be);
  /* a backend without graphs cannot make one */
  ddp_backend_t *cpu = ddp_test_cpu_backend();
  ck_assert_ptr_null(cpu->ops->graph_begin);
  rp = (ddp_graph_replay_t *)(void *)1;
  ck_assert_int_eq(ddp_graph_replay_create(cpu, &rp), DDP_ERR_UNSUPPORTED);
  ck_assert_ptr_null(rp);
  ddp_backend_destroy(cpu);
}
END_TEST

static Suite *graph_replay_suite(void) {
  Suite *s = suite_create("graph_replay");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_eager_then_recorded_then_replayed);
  tcase_add_test(tc, test_a_cut_filter_merges_segments);
  tcase_add_test(tc, test_keys_are_kept_apart_and_the_cache_is_bounded);
  tcase_add_test(tc, test_a_failed_recording_runs_the_pass_once_eagerly);
  tcase_add_test(tc, test_errors_are_returned);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(graph_replay_suite());
}
