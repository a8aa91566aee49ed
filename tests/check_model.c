/* The model interface (ddptrain/model.h) and what it stands on:
 *   - the parameter table (ddptrain/param.h): ddp_param_set, the layout
 *     check with each of its messages (a 5000-tensor table exercises the
 *     sorted duplicate search), name lookup and the offset binary search;
 *   - the registry: the built-in gpt, every rejection of ddp_model_register
 *     with its message, a rejected model leaving the registry and the option
 *     table as they were, a valid user model joining both;
 *   - the flags such a model declares, once registered: defaults, parsing,
 *     the "belongs to --model" rule, choices, ranges, reading by name,
 *     which rows apply to a run, format/hash round trips and --help;
 *   - model instances built from small CPU models defined here: creation
 *     with the contract checked (a table with a gap, no buffers, a backend
 *     or a data kind the model does not take), nothing left allocated when
 *     creation fails, host copies of the weights, and the generic export
 *     read back from its safetensors file;
 *   - resuming from a checkpoint: a changed flag that shapes the model is an
 *     error naming it (the runtime's own flags, and the ones a model lists
 *     in ckpt_keys; the latter and --model are a known bug, see the suite). */
#include <stdarg.h>
#include <stdint.h>
#include <strings.h>
#include <unistd.h>

#include "ddptrain/check.h"
#include "ddptrain/model.h"
#include "ddptrain/options.h"
#include "ddptrain/param.h"
#include "ddptrain/safetensors.h"
#include "ddptrain/version.h"
#include "check_util.h"
#include "runtime/dist.h"
#include "train/ckpt.h"
#include "train/resume.h"

/* ---- helpers ------------------------------------------------------------------ */

/* Runs `call` with the log captured into `log` (caller frees). */
#define CAPTURE(log, call)       \
  do {                           \
    ddp_test_log_start();        \
    (call);                      \
    (log) = ddp_test_log_stop(); \
  } while (0)

#define parse ddp_test_parse

/* The row index of flag `name`, asserting it exists. */
static int row_of(const char *name) {
  for (int i = 0; i < ddp_options_count(); ++i)
    if (strcmp(ddp_options_name(i), name) == 0) return i;
  ck_abort_msg("no option row named --%s", name);
  return -1;
}

/* ---- the test models ---------------------------------------------------------- */

/* One linear layer over a record's features: fc.weight (W, D), fc.bias (W),
 * W from --tm-width. g_defect makes create break one rule of the contract;
 * g_live counts the backend blocks the models hold, so a test sees whether
 * a failed creation left any behind. */
typedef enum defect {
  DEFECT_NONE,
  DEFECT_GAP,          /* the bias starts one element after the weight ends */
  DEFECT_NO_PARAMS,    /* gradients allocated, parameters not */
  DEFECT_CREATE_FAILS, /* allocates, then returns an error */
} defect_t;

static defect_t g_defect;
static int g_live, g_created, g_destroyed;

typedef struct tmodel {
  ddp_param_t table[2];
} tmodel_t;

static ddp_status_t tm_alloc(ddp_model_t *m, size_t n, float **out) {
  DDP_CHECK(ddp_backend_alloc(m->be, n * sizeof(float), (void **)out));
  ++g_live;
  return DDP_OK;
}

static void tm_free(ddp_model_t *m, float *p) {
  if (!p) return;
  ddp_backend_free(m->be, p);
  --g_live;
}

static ddp_status_t tm_create(ddp_model_t *m, const ddp_model_setup_t *s) {
  ++g_created;
  tmodel_t *p = calloc(1, sizeof *p);
  if (!p) return DDP_ERR_OOM;
  m->impl = p;
  int64_t W = 3; /* models without the flag (tmodel2, tcuda) keep 3 */
  if (m->ops->n_options > 0) DDP_CHECK(ddp_options_get_int(s->opts, "tm-width", &W));
  const int64_t D = s->data.record_floats;
  const int64_t wshape[2] = {W, D}, bshape[1] = {W};
  const size_t gap = g_defect == DEFECT_GAP ? 1 : 0;
  DDP_CHECK(ddp_param_set(&p->table[0], "fc.weight", 2, wshape, 0, 1));
  DDP_CHECK(ddp_param_set(&p->table[1], "fc.bias", 1, bshape, (size_t)(W * D) + gap, 0));
  const size_t n = (size_t)(W * D + W) + gap;
  if (g_defect != DEFECT_NO_PARAMS) DDP_CHECK(tm_alloc(m, n, &m->params));
  DDP_CHECK(tm_alloc(m, n, &m->grads));
  if (g_defect == DEFECT_CREATE_FAILS) return DDP_ERR_OOM;
  m->tensors = p->table;
  m->n_tensors = 2;
  m->n_params = n;
  m->n_outputs = W;
  return DDP_OK;
}

static void tm_destroy(ddp_model_t *m) {
  ++g_destroyed;
  tm_free(m, m->params);
  tm_free(m, m->grads);
  free(m->impl);
}

static ddp_status_t tm_init_weights(ddp_model_t *m, uint64_t seed) {
  for (size_t i = 0; i < m->n_params; ++i) m->params[i] = (float)seed + 0.25f * (float)i;
  return DDP_OK;
}

static ddp_status_t tm_forward_backward(ddp_model_t *m, const void *batch, float dloss, int acc,
                                        int notify) {
  return DDP_OK;
}

static ddp_status_t tm_take_loss(ddp_model_t *m, double *loss_sum) {
  *loss_sum = 0.0;
  return DDP_OK;
}

static const char *const k_tm_modes[] = {"fast", "exact", NULL};
static const ddp_option_def_t k_tm_flags[] = {
    {"tm-width", DDP_OPTION_INT, "3", 1, 64, "W", "test model: outputs per record", NULL, 0},
    {"tm-scale", DDP_OPTION_FLOAT, "0.5", 0, 10, "X", "test model: weight scale", NULL, 0},
    {"tm-mode", DDP_OPTION_STRING, "fast", 0, 0, "MODE", "test model: how it computes", k_tm_modes,
     0},
    {"tm-note", DDP_OPTION_STRING, "none", 0, 0, "TEXT", "test model: a per-rank note", NULL, 1},
};
enum { TM_FLAGS = (int)(sizeof k_tm_flags / sizeof k_tm_flags[0]) };
static const char *const k_tm_ckpt_keys[] = {"tm-width", "seed", NULL};

#define TM_SLOTS                                                               \
  .create = tm_create, .destroy = tm_destroy, .init_weights = tm_init_weights, \
  .forward_backward = tm_forward_backward, .take_loss = tm_take_loss

static const ddp_model_ops_t k_tmodel = {.name = "tmodel",
                                         .summary = "a linear layer over records (tests)",
                                         .batch_kind = DDP_BATCH_RECORDS,
                                         .devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU),
                                         .options = k_tm_flags,
                                         .n_options = TM_FLAGS,
                                         .ckpt_keys = k_tm_ckpt_keys,
                                         TM_SLOTS};

/* The same tensors under another name and without flags. */
static const ddp_model_ops_t k_tmodel2 = {.name = "tmodel2",
                                          .summary = "tmodel's tensors, no flags (tests)",
                                          .batch_kind = DDP_BATCH_RECORDS,
                                          .devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU),
                                          TM_SLOTS};

/* Runs only where CUDA is: never created on the CPU backend. */
static const ddp_model_ops_t k_tcuda = {.name = "tcuda",
                                        .summary = "GPU only (tests)",
                                        .batch_kind = DDP_BATCH_RECORDS,
                                        .devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CUDA),
                                        TM_SLOTS};

/* Registers ops once per process (Check forks each test, and a run with
 * CK_FORK=no keeps the registry between tests). */
static void use_model(const ddp_model_ops_t *ops) {
  if (ddp_model_find(ops->name) == ops) return;
  ck_assert_int_eq(ddp_model_register(ops), DDP_OK);
}

static void use_tmodel(void) {
  use_model(&k_tmodel);
}

static ddp_backend_t *g_be;
static char g_dir[64];

static void instance_setup(void) {
  g_defect = DEFECT_NONE;
  g_live = g_created = g_destroyed = 0;
  g_be = ddp_test_cpu_backend();
  snprintf(g_dir, sizeof g_dir, "/tmp/ddp_model_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void instance_teardown(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  ck_assert_int_eq(system(cmd), 0);
  ddp_backend_destroy(g_be);
  g_be = NULL;
}

/* Records of 4 features in 3 classes, micro-batches of up to 8. */
static ddp_model_setup_t record_setup(const ddp_options_t *o) {
  return (ddp_model_setup_t){.be = g_be,
                             .opts = o,
                             .data = {.kind = DDP_BATCH_RECORDS,
                                      .record_ndim = 1,
                                      .record_shape = {4, 1, 1, 1},
                                      .record_floats = 4,
                                      .n_classes = 3},
                             .max_batch = 8};
}

/* ---- param: ddp_param_set ------------------------------------------------------ */

START_TEST(test_param_set_fills_count_unused_dims_and_decay) {
  ddp_param_t p;
  memset(&p, 0x5a, sizeof p);
  const int64_t shape[3] = {2, 3, 4};
  ck_assert_int_eq(ddp_param_set(&p, "blk.0.conv.weight", 3, shape, 17, 7), DDP_OK);
  ck_assert_str_eq(p.name, "blk.0.conv.weight");
  ck_assert_int_eq(p.ndim, 3);
  ck_assert_int_eq(p.shape[0], 2);
  ck_assert_int_eq(p.shape[1], 3);
  ck_assert_int_eq(p.shape[2], 4);
  ck_assert_int_eq(p.shape[3], 1); /* unused dimensions are 1, not what was there */
  ck_assert_uint_eq(p.count, 24);
  ck_assert_uint_eq(p.offset, 17);
  ck_assert_int_eq(p.decay, 1); /* any nonzero decay is normalised to 1 */

  ck_assert_int_eq(ddp_param_set(&p, "b", 1, shape, 0, 0), DDP_OK);
  ck_assert_int_eq(p.decay, 0);
  ck_assert_uint_eq(p.count, 2);
  ck_assert_int_eq(p.shape[1], 1);
  ck_assert_int_eq(p.shape[2], 1);

  const int64_t four[4] = {2, 1, 3, 5};
  ck_assert_int_eq(ddp_param_set(&p, "conv", 4, four, 0, -1), DDP_OK);
  ck_assert_uint_eq(p.count, 30);
  ck_assert_int_eq(p.decay, 1);

  /* the longest name that fits: 63 bytes and the NUL */
  char name[DDP_PARAM_NAME_MAX];
  memset(name, 'n', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  ck_assert_int_eq(ddp_param_set(&p, name, 1, shape, 0, 0), DDP_OK);
  ck_assert_str_eq(p.name, name);
}
END_TEST

START_TEST(test_param_set_rejects_bad_dimensions_names_and_sizes) {
  ddp_param_t p;
  const int64_t shape[5] = {2, 3, 4, 5, 6};
  char *log;
  ddp_status_t st;

  CAPTURE(log, st = ddp_param_set(&p, "w", 0, shape, 0, 0));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "param 'w': 0 dimensions (1 to 4 allowed)");
  free(log);
  CAPTURE(log, st = ddp_param_set(&p, "w", 5, shape, 0, 0));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "param 'w': 5 dimensions (1 to 4 allowed)");
  free(log);

  CAPTURE(log, st = ddp_param_set(&p, "", 1, shape, 0, 0));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "param '': the name is empty or longer than 63 bytes");
  free(log);
  char name[DDP_PARAM_NAME_MAX + 1];
  memset(name, 'n', sizeof name - 1);
  name[sizeof name - 1] = '\0'; /* 64 bytes: one too many */
  CAPTURE(log, st = ddp_param_set(&p, name, 1, shape, 0, 0));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "the name is empty or longer than 63 bytes");
  free(log);

  const int64_t zero[2] = {2, 0}, negative[1] = {-3};
  CAPTURE(log, st = ddp_param_set(&p, "w", 2, zero, 0, 0));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "param 'w': dimension 1 is 0");
  free(log);
  CAPTURE(log, st = ddp_param_set(&p, "w", 1, negative, 0, 0));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "param 'w': dimension 0 is -3");
  free(log);

  CAPTURE(log, st = ddp_param_set(&p, NULL, 1, shape, 0, 0));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "param: NULL argument");
  free(log);
  CAPTURE(log, st = ddp_param_set(&p, "w", 1, NULL, 0, 0));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  free(log);
}
END_TEST

/* ---- param: ddp_param_table_check ---------------------------------------------- */

/* wte (4, 3) at 0, ln.weight (3) at 12, ln.bias (3) at 15: 18 elements. */
static void small_table(ddp_param_t t[3]) {
  const int64_t w[2] = {4, 3}, v[1] = {3};
  ck_assert_int_eq(ddp_param_set(&t[0], "wte", 2, w, 0, 1), DDP_OK);
  ck_assert_int_eq(ddp_param_set(&t[1], "ln.weight", 1, v, 12, 0), DDP_OK);
  ck_assert_int_eq(ddp_param_set(&t[2], "ln.bias", 1, v, 15, 0), DDP_OK);
}

/* Checks t and returns the log; asserts the status. */
static char *check_table(const ddp_param_t *t, int n, size_t total, ddp_status_t want) {
  char *log;
  ddp_status_t st;
  CAPTURE(log, st = ddp_param_table_check(t, n, total, "tnet"));
  ck_assert_msg(st == want, "table check: status %d, expected %d; log: %s", st, want, log);
  return log;
}

START_TEST(test_param_table_check_accepts_a_tiling_table) {
  ddp_param_t t[3];
  small_table(t);
  char *log = check_table(t, 3, 18, DDP_OK);
  ck_assert_str_eq(log, ""); /* nothing logged for a good table */
  free(log);
}
END_TEST

START_TEST(test_param_table_check_names_each_layout_error) {
  ddp_param_t t[3];
  char *log;

  small_table(t);
  t[2].offset = 16; /* a gap of one element */
  log = check_table(t, 3, 19, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "tnet: tensor ln.bias starts at element 16, expected 15");
  free(log);

  small_table(t);
  t[1].offset = 11; /* overlaps wte's last element */
  log = check_table(t, 3, 18, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "tnet: tensor ln.weight starts at element 11, expected 12");
  free(log);

  small_table(t);
  t[0].offset = 1; /* the first tensor must start at 0 */
  log = check_table(t, 3, 18, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "tensor wte starts at element 1, expected 0");
  free(log);

  small_table(t);
  t[1].count = 4; /* the shape says 3 */
  log = check_table(t, 3, 19, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log,
                      "tnet: tensor ln.weight: 1 dimensions, count 4 does not match its shape");
  free(log);

  small_table(t);
  t[0].ndim = 0;
  log = check_table(t, 3, 18, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "tensor wte: 0 dimensions");
  free(log);

  small_table(t);
  t[1].name[0] = '\0';
  log = check_table(t, 3, 18, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "tnet: tensor 1 has no name");
  free(log);

  small_table(t);
  memcpy(t[2].name, "wte", 4); /* same name as tensor 0 */
  log = check_table(t, 3, 18, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "tnet: two tensors are named wte");
  free(log);

  small_table(t);
  log = check_table(t, 3, 20, DDP_ERR_INVALID_ARG); /* the buffer is longer */
  ddp_assert_contains(log, "tnet: the tensors cover 18 elements, the buffer has 20");
  free(log);
  log = check_table(t, 3, 17, DDP_ERR_INVALID_ARG); /* or shorter */
  ddp_assert_contains(log, "the tensors cover 18 elements, the buffer has 17");
  free(log);

  log = check_table(t, 0, 0, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "tnet: the parameter table is empty");
  free(log);
  log = check_table(NULL, 3, 18, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "tnet: the parameter table is empty");
  free(log);
}
END_TEST

/* 5000 tensors of 1..7 elements: big enough that the duplicate search has to
 * be the sorted one (a quadratic scan would still pass, but only this size
 * puts the two equal names far apart in both orders). */
enum { BIG = 5000 };

static ddp_param_t *big_table(size_t *total) {
  ddp_param_t *t = ddp_test_track(calloc(BIG, sizeof *t));
  size_t off = 0;
  for (int i = 0; i < BIG; ++i) {
    char name[32];
    /* names out of offset order, so the sort really reorders */
    snprintf(name, sizeof name, "h.%d.w", (i * 7919) % BIG);
    const int64_t shape[1] = {1 + i % 7};
    ck_assert_int_eq(ddp_param_set(&t[i], name, 1, shape, off, i % 2), DDP_OK);
    off += t[i].count;
  }
  *total = off;
  return t;
}

START_TEST(test_param_table_check_finds_a_duplicate_in_a_large_table) {
  size_t total;
  ddp_param_t *t = big_table(&total);
  char *log = check_table(t, BIG, total, DDP_OK);
  free(log);

  /* the first and the last tensor get the same name */
  memcpy(t[BIG - 1].name, t[0].name, sizeof t[0].name);
  log = check_table(t, BIG, total, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "tnet: two tensors are named h.0.w");
  free(log);
  ddp_test_free_tracked();

  /* two in the middle, not adjacent in either order */
  t = big_table(&total);
  memcpy(t[1234].name, t[3777].name, sizeof t[0].name);
  char want[128];
  snprintf(want, sizeof want, "two tensors are named %s", t[3777].name);
  log = check_table(t, BIG, total, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, want);
  free(log);
  ddp_test_free_tracked();
}
END_TEST

/* ---- param: lookups ------------------------------------------------------------ */

START_TEST(test_param_find_by_name) {
  ddp_param_t t[3];
  small_table(t);
  ck_assert_int_eq(ddp_param_find(t, 3, "wte"), 0);
  ck_assert_int_eq(ddp_param_find(t, 3, "ln.weight"), 1);
  ck_assert_int_eq(ddp_param_find(t, 3, "ln.bias"), 2);
  ck_assert_int_eq(ddp_param_find(t, 3, "ln"), -1); /* a prefix is not a name */
  ck_assert_int_eq(ddp_param_find(t, 3, "LN.BIAS"), -1);
  ck_assert_int_eq(ddp_param_find(t, 2, "ln.bias"), -1); /* only the first n are searched */
  ck_assert_int_eq(ddp_param_find(t, 3, NULL), -1);
  ck_assert_int_eq(ddp_param_find(NULL, 3, "wte"), -1);
}
END_TEST

START_TEST(test_param_at_finds_every_element_and_nothing_outside) {
  ddp_param_t t[3];
  small_table(t);
  /* boundaries: first and last element of each tensor */
  ck_assert_int_eq(ddp_param_at(t, 3, 0), 0);
  ck_assert_int_eq(ddp_param_at(t, 3, 11), 0);
  ck_assert_int_eq(ddp_param_at(t, 3, 12), 1);
  ck_assert_int_eq(ddp_param_at(t, 3, 14), 1);
  ck_assert_int_eq(ddp_param_at(t, 3, 15), 2);
  ck_assert_int_eq(ddp_param_at(t, 3, 17), 2);
  ck_assert_int_eq(ddp_param_at(t, 3, 18), -1); /* one past the end */
  ck_assert_int_eq(ddp_param_at(t, 3, SIZE_MAX), -1);
  ck_assert_int_eq(ddp_param_at(t, 0, 0), -1);
  ck_assert_int_eq(ddp_param_at(NULL, 3, 0), -1);
  ck_assert_int_eq(ddp_param_at(t, 1, 12), -1); /* beyond the n searched */

  /* every element of the large table against a linear scan */
  size_t total;
  const ddp_param_t *big = big_table(&total);
  int want = 0;
  for (size_t e = 0; e < total; ++e) {
    if (e >= big[want].offset + big[want].count) ++want;
    expect_eq(ddp_param_at(big, BIG, e), want);
  }
  ck_assert_int_eq(want, BIG - 1);
  ck_assert_int_eq(ddp_param_at(big, BIG, total), -1);
  ddp_test_free_tracked();
}
END_TEST

/* ---- registry ------------------------------------------------------------------- */

START_TEST(test_model_registry_has_gpt_first) {
  ck_assert_int_ge(ddp_model_count(), 1);
  const ddp_model_ops_t *gpt = ddp_model_at(0);
  ck_assert_ptr_nonnull(gpt);
  ck_assert_str_eq(gpt->name, "gpt");
  ck_assert_int_eq(gpt->batch_kind, DDP_BATCH_TOKENS);
  ck_assert(gpt->devices & DDP_MODEL_ON(DDP_DEVICE_KIND_CPU));
  ck_assert_ptr_eq(ddp_model_find("gpt"), gpt);
  ck_assert_ptr_eq(ddp_model_find("GPT"), gpt); /* names compare ASCII case-insensitively */
  ck_assert_ptr_eq(ddp_model_find("Gpt"), gpt);
  ck_assert_ptr_null(ddp_model_find("gpt2"));
  ck_assert_ptr_null(ddp_model_find(""));
  ck_assert_ptr_null(ddp_model_find(NULL));
  ck_assert_ptr_null(ddp_model_at(-1));
  ck_assert_ptr_null(ddp_model_at(ddp_model_count()));
  /* gpt's flags are rows of the option table */
  const char *gpt_flags[] = {"n-layer", "n-head", "n-embd", "attention", "recompute"};
  for (int i = 0; i < 5; ++i) ck_assert_int_ge(row_of(gpt_flags[i]), 0);
}
END_TEST

/* A model that passes every check but the one a test breaks. */
static ddp_model_ops_t bad_base(void) {
  return (ddp_model_ops_t){.name = "tbad",
                           .summary = "a model that must not register",
                           .batch_kind = DDP_BATCH_RECORDS,
                           .devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU),
                           TM_SLOTS};
}

/* Registers ops, which must be refused with `needle` in the log, and checks
 * that neither the registry nor the option table changed. */
static void expect_rejected(const ddp_model_ops_t *ops, const char *needle) {
  const int models = ddp_model_count(), rows = ddp_options_count();
  const ddp_model_ops_t *before = ops && ops->name ? ddp_model_find(ops->name) : NULL;
  char *log;
  ddp_status_t st;
  CAPTURE(log, st = ddp_model_register(ops));
  ck_assert_msg(st == DDP_ERR_INVALID_ARG, "expected a refusal with '%s', got status %d; log: %s",
                needle, st, log);
  ddp_assert_contains(log, needle);
  free(log);
  ck_assert_int_eq(ddp_model_count(), models);
  ck_assert_int_eq(ddp_options_count(), rows);
  if (ops && ops->name) ck_assert_ptr_eq(ddp_model_find(ops->name), before);
}

START_TEST(test_model_register_rejects_bad_identity) {
  ddp_model_ops_t m;
  expect_rejected(NULL, "model_register: NULL model");

  m = bad_base();
  m.name = NULL;
  expect_rejected(&m, "model '(unnamed)': a model name is 1 to 31 characters of a-z, 0-9");
  m.name = "";
  expect_rejected(&m, "a model name is 1 to 31 characters");
  m.name = "Tbad"; /* upper case */
  expect_rejected(&m, "model 'Tbad': a model name is 1 to 31 characters");
  m.name = "t bad";
  expect_rejected(&m, "model 't bad': a model name is");
  m.name = "tbad-0123456789-0123456789-01234"; /* 32 characters */
  expect_rejected(&m, "a model name is 1 to 31 characters");
  m.name = "tbad-0123456789-0123456789-0123"; /* 31 characters: the name is fine */
  m.summary = NULL;
  expect_rejected(&m, "no summary for --help");

  m = bad_base();
  m.summary = NULL;
  expect_rejected(&m, "model tbad: no summary for --help");
  m = bad_base();
  m.batch_kind = (ddp_batch_kind_t)7;
  expect_rejected(&m, "model tbad: unknown batch kind 7");
  m = bad_base();
  m.devices = 0;
  expect_rejected(&m, "model tbad: devices 0x0 name no known backend");
  m.devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU) | (1u << 5);
  expect_rejected(&m, "model tbad: devices 0x21 name no known backend");
}
END_TEST

START_TEST(test_model_register_rejects_each_missing_required_operation) {
  const char *slots[] = {"create", "destroy", "init_weights", "forward_backward", "take_loss"};
  for (int i = 0; i < 5; ++i) {
    ddp_model_ops_t m = bad_base();
    switch (i) {
      case 0:
        m.create = NULL;
        break;
      case 1:
        m.destroy = NULL;
        break;
      case 2:
        m.init_weights = NULL;
        break;
      case 3:
        m.forward_backward = NULL;
        break;
      default:
        m.take_loss = NULL;
        break;
    }
    char want[128];
    snprintf(want, sizeof want, "model tbad: the required operation %s is missing", slots[i]);
    expect_rejected(&m, want);
  }
}
END_TEST

static ddp_status_t no_records(const ddp_options_t *o, int split, ddp_records_t *out, int *have) {
  *have = 0;
  return DDP_OK;
}

START_TEST(test_model_register_rejects_load_records_on_a_token_model) {
  ddp_model_ops_t m = bad_base();
  m.batch_kind = DDP_BATCH_TOKENS;
  m.load_records = no_records;
  expect_rejected(&m, "model tbad: load_records is for record models only");
}
END_TEST

START_TEST(test_model_register_rejects_bad_flag_tables) {
  ddp_model_ops_t m = bad_base();
  m.n_options = 2; /* and no table */
  expect_rejected(&m, "model tbad: 2 flags but no table");
  m.n_options = -1;
  expect_rejected(&m, "model tbad: -1 flags but no table");

  const ddp_option_def_t core_name[] = {
      {"lr", DDP_OPTION_FLOAT, "0.1", 0, 1, "X", "clashes with the core --lr", NULL, 0}};
  m = bad_base();
  m.options = core_name, m.n_options = 1;
  expect_rejected(&m, "model tbad: flag --lr exists already");

  const ddp_option_def_t gpt_name[] = {
      {"tb-ok", DDP_OPTION_INT, "1", 0, 9, "N", "fine", NULL, 0},
      {"n-layer", DDP_OPTION_INT, "2", 1, 9, "L", "clashes with gpt's --n-layer", NULL, 0}};
  m.options = gpt_name, m.n_options = 2;
  expect_rejected(&m, "model tbad: flag --n-layer exists already");

  const ddp_option_def_t twice[] = {{"tb-n", DDP_OPTION_INT, "1", 0, 9, "N", "first", NULL, 0},
                                    {"tb-n", DDP_OPTION_INT, "1", 0, 9, "N", "second", NULL, 0}};
  m.options = twice, m.n_options = 2;
  expect_rejected(&m, "model tbad: flag --tb-n is declared twice");

  const ddp_option_def_t unnamed[] = {{"Tb-N", DDP_OPTION_INT, "1", 0, 9, "N", "upper", NULL, 0}};
  m.options = unnamed, m.n_options = 1;
  expect_rejected(&m, "model tbad: flag 0 needs a name (a-z, 0-9, '-'), help and a default");
  const ddp_option_def_t no_help[] = {{"tb-n", DDP_OPTION_INT, "1", 0, 9, "N", NULL, NULL, 0}};
  m.options = no_help;
  expect_rejected(&m, "model tbad: flag 0 needs a name");
  const ddp_option_def_t no_default[] = {{"tb-n", DDP_OPTION_INT, NULL, 0, 9, "N", "h", NULL, 0}};
  m.options = no_default;
  expect_rejected(&m, "model tbad: flag 0 needs a name");
  const ddp_option_def_t bad_type[] = {
      {"tb-n", (ddp_option_type_t)9, "1", 0, 9, "N", "h", NULL, 0}};
  m.options = bad_type;
  expect_rejected(&m, "model tbad: flag --tb-n has an unknown type");
}
END_TEST

START_TEST(test_model_register_rejects_a_default_its_own_row_rejects) {
  ddp_model_ops_t m = bad_base();
  const ddp_option_def_t out_of_range[] = {
      {"tb-n", DDP_OPTION_INT, "99", 0, 10, "N", "a count", NULL, 0}};
  m.options = out_of_range, m.n_options = 1;
  expect_rejected(&m, "option --tb-n: 99 is out of range [0, 10]");
  expect_rejected(&m, "model tbad: not registered (a flag's default or checkpoint key is invalid");

  const ddp_option_def_t float_range[] = {
      {"tb-x", DDP_OPTION_FLOAT, "-0.5", 0, 1, "X", "a fraction", NULL, 0}};
  m.options = float_range;
  expect_rejected(&m, "option --tb-x: -0.5 is out of range [0, 1]");

  static const char *const choices[] = {"red", "green", NULL};
  const ddp_option_def_t not_a_choice[] = {
      {"tb-colour", DDP_OPTION_STRING, "blue", 0, 0, "C", "a colour", choices, 0}};
  m.options = not_a_choice;
  expect_rejected(&m, "option --tb-colour: 'blue' is not valid (a colour)");

  /* the refused model's flags are not on the command line afterwards */
  ddp_options_t o;
  char *log;
  ck_assert_int_eq(parse(&o, &log, "--tb-colour", "red", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "unknown option '--tb-colour'");
  free(log);
}
END_TEST

START_TEST(test_model_register_rejects_an_unknown_checkpoint_key) {
  ddp_model_ops_t m = bad_base();
  const ddp_option_def_t flags[] = {{"tb-n", DDP_OPTION_INT, "1", 0, 9, "N", "n", NULL, 0}};
  static const char *const keys[] = {"tb-n", "seq-len", "tb-missing", NULL};
  m.options = flags, m.n_options = 1, m.ckpt_keys = keys;
  expect_rejected(
      &m, "model tbad: checkpoint key --tb-missing is neither its own flag nor a ddptrain flag");
  /* another model's flag is not this model's key either */
  static const char *const others[] = {"tb-n", "n-layer", NULL};
  m.ckpt_keys = others;
  expect_rejected(
      &m, "model tbad: checkpoint key --n-layer is neither its own flag nor a ddptrain flag");
}
END_TEST

START_TEST(test_model_register_rejects_more_flags_than_the_slots_hold) {
  /* gpt holds some of the DDP_MODEL_OPTION_SLOTS; a model asking for all of
   * them does not fit */
  static ddp_option_def_t many[DDP_MODEL_OPTION_SLOTS];
  static char names[DDP_MODEL_OPTION_SLOTS][16];
  for (int i = 0; i < DDP_MODEL_OPTION_SLOTS; ++i) {
    snprintf(names[i], sizeof names[i], "tb-f%d", i);
    many[i] = (ddp_option_def_t){names[i], DDP_OPTION_INT, "0", 0, 1, "N", "one of many", NULL, 0};
  }
  ddp_model_ops_t m = bad_base();
  m.options = many, m.n_options = DDP_MODEL_OPTION_SLOTS;
  char want[128];
  snprintf(want, sizeof want, "model tbad: %d flags do not fit (the models' flags share %d slots",
           DDP_MODEL_OPTION_SLOTS, DDP_MODEL_OPTION_SLOTS);
  expect_rejected(&m, want);
}
END_TEST

START_TEST(test_model_register_rejects_a_name_already_registered) {
  ddp_model_ops_t m = bad_base();
  m.name = "gpt";
  expect_rejected(&m, "model gpt is registered already");
  use_tmodel();
  m.name = "tmodel"; /* no flags of its own, so only the name clashes */
  expect_rejected(&m, "model tmodel is registered already");
  ck_assert_ptr_eq(ddp_model_find("tmodel"), &k_tmodel);
}
END_TEST

/* Registered models are borrowed for the life of the process: static. */
static const ddp_option_def_t k_tadd_flags[] = {
    {"ta-n", DDP_OPTION_INT, "1", 0, 9, "N", "a count", NULL, 0},
    {"ta-s", DDP_OPTION_STRING, "x", 0, 0, "S", "a text", NULL, 0}};
static const ddp_model_ops_t k_tadd = {.name = "tadd",
                                       .summary = "two flags (tests)",
                                       .batch_kind = DDP_BATCH_RECORDS,
                                       .devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU),
                                       .options = k_tadd_flags,
                                       .n_options = 2,
                                       TM_SLOTS};
static const ddp_model_ops_t k_tadd_bare = {
    .name = "tadd-bare",
    .summary = "no flags (tests)",
    .batch_kind = DDP_BATCH_TOKENS,
    .devices = DDP_MODEL_ON(DDP_DEVICE_KIND_CPU) | DDP_MODEL_ON(DDP_DEVICE_KIND_CUDA),
    TM_SLOTS};

START_TEST(test_model_register_adds_a_model_and_its_flags) {
  const int models = ddp_model_count(), rows = ddp_options_count();
  ck_assert_ptr_null(ddp_model_find("tadd"));
  char *log;
  ddp_status_t st;
  CAPTURE(log, st = ddp_model_register(&k_tadd));
  ck_assert_msg(st == DDP_OK, "register: %d; log: %s", st, log);
  ck_assert_str_eq(log, "");
  free(log);
  ck_assert_int_eq(ddp_model_count(), models + 1);
  ck_assert_ptr_eq(ddp_model_at(models), &k_tadd);
  ck_assert_ptr_eq(ddp_model_find("tadd"), &k_tadd);
  ck_assert_ptr_eq(ddp_model_find("TADD"), &k_tadd);
  /* the option table grew by its flags, the last rows, in its order */
  ck_assert_int_eq(ddp_options_count(), rows + 2);
  ck_assert_str_eq(ddp_options_name(rows), "ta-n");
  ck_assert_str_eq(ddp_options_name(rows + 1), "ta-s");
  ck_assert_ptr_null(ddp_options_name(rows + 2));
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, "--model", "tadd", "--ta-n", "7", NULL), DDP_OK);
  int64_t n;
  ck_assert_int_eq(ddp_options_get_int(&o, "ta-n", &n), DDP_OK);
  ck_assert_int_eq(n, 7);

  /* a model without flags adds a model and no rows */
  ck_assert_int_eq(ddp_model_register(&k_tadd_bare), DDP_OK);
  ck_assert_int_eq(ddp_model_count(), models + 2);
  ck_assert_ptr_eq(ddp_model_at(models + 1), &k_tadd_bare);
  ck_assert_int_eq(ddp_options_count(), rows + 2);
}
END_TEST

/* ---- the flags of a registered model -------------------------------------------- */

START_TEST(test_model_options_defaults_include_the_models_flags) {
  use_tmodel();
  ddp_options_t o;
  ck_assert_int_eq(ddp_options_defaults(&o), DDP_OK);
  ck_assert_str_eq(o.model, "gpt");
  int64_t w = 0;
  double x = 0;
  const char *s = NULL;
  ck_assert_int_eq(ddp_options_get_int(&o, "tm-width", &w), DDP_OK);
  ck_assert_int_eq(w, 3);
  ck_assert_int_eq(ddp_options_get_float(&o, "tm-scale", &x), DDP_OK);
  ck_assert_double_eq(x, 0.5);
  ck_assert_int_eq(ddp_options_get_string(&o, "tm-mode", &s), DDP_OK);
  ck_assert_str_eq(s, "fast");
  ck_assert_int_eq(ddp_options_get_string(&o, "tm-note", &s), DDP_OK);
  ck_assert_str_eq(s, "none");
  /* gpt's defaults are still there */
  ck_assert_int_eq(ddp_options_get_int(&o, "n-layer", &w), DDP_OK);
  ck_assert_int_eq(w, 2);
}
END_TEST

START_TEST(test_model_options_parse_the_models_flags_under_its_name) {
  use_tmodel();
  ddp_options_t o;
  char *log;
  ck_assert_int_eq(parse(&o, &log, "--model", "tmodel", "--tm-width", "9", "--tm-scale=2.5",
                         "--tm-mode", "exact", "--tm-note", "rank note", NULL),
                   DDP_OK);
  ck_assert_str_eq(log, "");
  free(log);
  int64_t w;
  double x;
  const char *s;
  ck_assert_int_eq(ddp_options_get_int(&o, "tm-width", &w), DDP_OK);
  ck_assert_int_eq(w, 9);
  ck_assert_int_eq(ddp_options_get_float(&o, "tm-scale", &x), DDP_OK);
  ck_assert_double_eq(x, 2.5);
  ck_assert_int_eq(ddp_options_get_string(&o, "tm-mode", &s), DDP_OK);
  ck_assert_str_eq(s, "exact");
  ck_assert_int_eq(ddp_options_get_string(&o, "tm-note", &s), DDP_OK);
  ck_assert_str_eq(s, "rank note");

  /* the flag may come before --model, and the model's name in any case */
  ck_assert_int_eq(parse(&o, NULL, "--tm-width", "4", "--model", "TModel", NULL), DDP_OK);
  ck_assert_int_eq(ddp_options_get_int(&o, "tm-width", &w), DDP_OK);
  ck_assert_int_eq(w, 4);

  /* choices are ASCII case-insensitive */
  ck_assert_int_eq(parse(&o, NULL, "--model", "tmodel", "--tm-mode", "EXACT", NULL), DDP_OK);
  ck_assert_int_eq(ddp_options_get_string(&o, "tm-mode", &s), DDP_OK);
  ck_assert(strcasecmp(s, "exact") == 0);
}
END_TEST

START_TEST(test_model_options_reject_a_flag_of_another_model) {
  use_tmodel();
  ddp_options_t o;
  char *log;
  /* --model is gpt by default */
  ck_assert_int_eq(parse(&o, &log, "--tm-width", "9", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log,
                      "option --tm-width belongs to --model tmodel; this run trains --model gpt");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "--model", "gpt", "--tm-mode", "exact", NULL),
                   DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --tm-mode belongs to --model tmodel");
  free(log);
  /* and the other way round */
  ck_assert_int_eq(parse(&o, &log, "--model", "tmodel", "--n-layer", "3", NULL),
                   DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log,
                      "option --n-layer belongs to --model gpt; this run trains --model tmodel");
  free(log);
  /* an unknown model */
  ck_assert_int_eq(parse(&o, &log, "--model", "nosuch", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --model: 'nosuch' is not valid");
  free(log);
}
END_TEST

START_TEST(test_model_options_reject_bad_values_naming_the_flag) {
  use_tmodel();
  ddp_options_t o;
  char *log;
  ck_assert_int_eq(parse(&o, &log, "--model", "tmodel", "--tm-mode", "slow", NULL),
                   DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --tm-mode: 'slow' is not valid (test model: how it computes)");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "--model", "tmodel", "--tm-width", "65", NULL),
                   DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --tm-width: 65 is out of range [1, 64]");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "--model", "tmodel", "--tm-width", "0", NULL),
                   DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --tm-width: 0 is out of range [1, 64]");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "--model", "tmodel", "--tm-width", "2.5", NULL),
                   DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --tm-width: '2.5' is not an integer");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "--model", "tmodel", "--tm-scale", "11", NULL),
                   DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --tm-scale: 11 is out of range [0, 10]");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "--model", "tmodel", "--tm-scale", "nan", NULL),
                   DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --tm-scale: 'nan' is not a finite number");
  free(log);
  ck_assert_int_eq(parse(&o, &log, "--model", "tmodel", "--tm-width", NULL), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "option --tm-width needs a value (W)");
  free(log);
  /* a near miss gets a suggestion among the model's flags too */
  ck_assert_int_eq(parse(&o, &log, "--model", "tmodel", "--tm-widht", "3", NULL),
                   DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "did you mean '--tm-width'?");
  free(log);
}
END_TEST

START_TEST(test_model_options_read_by_name) {
  use_tmodel();
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, "--model", "tmodel", "--tm-width", "12", "--seed", "5", NULL),
                   DDP_OK);
  int64_t i;
  double x;
  const char *s;
  /* core flags */
  ck_assert_int_eq(ddp_options_get_int(&o, "seed", &i), DDP_OK);
  ck_assert_int_eq(i, 5);
  ck_assert_int_eq(ddp_options_get_float(&o, "lr", &x), DDP_OK);
  ck_assert_double_eq(x, 3e-3);
  ck_assert_int_eq(ddp_options_get_string(&o, "model", &s), DDP_OK);
  ck_assert_str_eq(s, "tmodel");
  /* an integer flag also reads as a number, core or model */
  ck_assert_int_eq(ddp_options_get_float(&o, "seed", &x), DDP_OK);
  ck_assert_double_eq(x, 5.0);
  ck_assert_int_eq(ddp_options_get_float(&o, "tm-width", &x), DDP_OK);
  ck_assert_double_eq(x, 12.0);

  char *log;
  ddp_status_t st;
  CAPTURE(log, st = ddp_options_get_int(&o, "tm-nosuch", &i));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "options: no flag --tm-nosuch");
  free(log);
  CAPTURE(log, st = ddp_options_get_int(&o, "tm-scale", &i));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "options: --tm-scale is not an integer flag");
  free(log);
  CAPTURE(log, st = ddp_options_get_float(&o, "tm-mode", &x));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "options: --tm-mode is not a number flag");
  free(log);
  CAPTURE(log, st = ddp_options_get_string(&o, "tm-width", &s));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "options: --tm-width is not a text flag");
  free(log);
  CAPTURE(log, st = ddp_options_get_int(&o, "lr", &i));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "options: --lr is not an integer flag");
  free(log);
  CAPTURE(log, st = ddp_options_get_int(&o, NULL, &i));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "options: no flag --(null)");
  free(log);
}
END_TEST

START_TEST(test_model_options_apply_only_to_their_model) {
  use_tmodel();
  ddp_options_t gpt, tm, upper;
  ck_assert_int_eq(parse(&gpt, NULL, NULL), DDP_OK);
  ck_assert_int_eq(parse(&tm, NULL, "--model", "tmodel", NULL), DDP_OK);
  ck_assert_int_eq(parse(&upper, NULL, "--model", "TMODEL", NULL), DDP_OK);
  const int lr = row_of("lr"), seq = row_of("seq-len"), width = row_of("tm-width"),
            note = row_of("tm-note"), layers = row_of("n-layer");
  ck_assert_int_eq(ddp_options_applies(&gpt, lr), 1);
  ck_assert_int_eq(ddp_options_applies(&tm, lr), 1);
  ck_assert_int_eq(ddp_options_applies(&tm, seq), 1); /* every core flag applies */
  ck_assert_int_eq(ddp_options_applies(&gpt, width), 0);
  ck_assert_int_eq(ddp_options_applies(&tm, width), 1);
  ck_assert_int_eq(ddp_options_applies(&upper, width), 1);
  ck_assert_int_eq(ddp_options_applies(&gpt, layers), 1);
  ck_assert_int_eq(ddp_options_applies(&tm, layers), 0);
  ck_assert_int_eq(ddp_options_applies(&tm, ddp_options_count()), 0);
  ck_assert_int_eq(ddp_options_applies(&tm, -1), 0);
  /* per_rank decides must_agree for a model's rows as for the core's */
  ck_assert_int_eq(ddp_options_must_agree(width), 1);
  ck_assert_int_eq(ddp_options_must_agree(note), 0);
  ck_assert_int_eq(ddp_options_must_agree(ddp_options_count()), 0);
}
END_TEST

START_TEST(test_model_options_format_and_hash_round_trip) {
  use_tmodel();
  ddp_options_t o, dflt;
  ck_assert_int_eq(parse(&o, NULL, "--model", "tmodel", "--tm-width", "17", "--tm-scale", "0.1",
                         "--tm-mode", "exact", "--tm-note", "x y", NULL),
                   DDP_OK);
  ck_assert_int_eq(parse(&dflt, NULL, "--model", "tmodel", NULL), DDP_OK);
  const char *want[TM_FLAGS] = {"17", "0.10000000000000001", "exact", "x y"};
  for (int f = 0; f < TM_FLAGS; ++f) {
    const int i = row_of(k_tm_flags[f].name);
    char text[DDP_OPTION_TEXT_MAX + 32], arg[DDP_OPTION_TEXT_MAX + 64];
    ck_assert_int_eq(ddp_options_format(&o, i, text, sizeof text), 0);
    ck_assert_str_eq(text, want[f]);
    /* what format writes parses back to the same value */
    snprintf(arg, sizeof arg, "--%s=%s", k_tm_flags[f].name, text);
    ddp_options_t back;
    ck_assert_int_eq(parse(&back, NULL, "--model", "tmodel", arg, NULL), DDP_OK);
    ck_assert_uint_eq(ddp_options_value_hash(&back, i), ddp_options_value_hash(&o, i));
    char again[sizeof text];
    ck_assert_int_eq(ddp_options_format(&back, i, again, sizeof again), 0);
    ck_assert_str_eq(again, text);
    /* and the hash tells it from the default */
    ck_assert_uint_ne(ddp_options_value_hash(&dflt, i), ddp_options_value_hash(&o, i));
  }
  char small[3];
  ck_assert_int_eq(ddp_options_format(&o, row_of("tm-scale"), small, sizeof small), -1);
  ck_assert_int_eq(ddp_options_format(&o, ddp_options_count(), small, sizeof small), -1);
}
END_TEST

START_TEST(test_model_options_help_lists_each_model_and_its_flags) {
  use_tmodel();
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(f);
  ddp_options_print_help(f);
  ck_assert_int_eq(fclose(f), 0);
  const char *gpt = strstr(text, "\nModel gpt (--model gpt): ");
  const char *tm =
      strstr(text, "\nModel tmodel (--model tmodel): a linear layer over records (tests)\n");
  ck_assert_msg(gpt && tm, "model sections missing in:\n%s", text);
  ck_assert_msg(gpt < tm, "tmodel's section comes before gpt's (registry order)");
  /* every flag of tmodel in its section, with metavar, help, choices, default */
  ddp_assert_contains(tm, "--tm-width W");
  ddp_assert_contains(tm, "test model: outputs per record [3]");
  ddp_assert_contains(tm, "--tm-scale X");
  ddp_assert_contains(tm, "test model: weight scale [0.5]");
  ddp_assert_contains(tm, "--tm-mode MODE");
  ddp_assert_contains(tm, "test model: how it computes (fast, exact) [fast]");
  ddp_assert_contains(tm, "--tm-note TEXT");
  /* gpt's flags are in gpt's section, before tmodel's */
  const char *layers = strstr(gpt, "--n-layer L");
  ck_assert_msg(layers && layers < tm, "--n-layer is not in gpt's section");
  /* tmodel2 has no flags, and says so */
  use_model(&k_tmodel2);
  free(text);
  text = NULL;
  f = open_memstream(&text, &len);
  ddp_options_print_help(f);
  fclose(f);
  ddp_assert_contains(text,
                      "Model tmodel2 (--model tmodel2): tmodel's tensors, no flags (tests)\n"
                      "  (no flags of its own)\n");
  free(text);
}
END_TEST

/* ---- model instances ------------------------------------------------------------ */

/* Creates ops with o; returns the status and the log (caller frees). */
static ddp_status_t create(const ddp_model_ops_t *ops, const ddp_model_setup_t *s, ddp_model_t **m,
                           char **log) {
  ddp_status_t st;
  *m = (ddp_model_t *)(uintptr_t)1; /* create must set it even on failure */
  CAPTURE(*log, st = ddp_model_create(ops, s, m));
  return st;
}

START_TEST(test_model_create_and_export_a_record_model) {
  use_tmodel();
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, "--model", "tmodel", "--tm-width", "5", "--tm-scale", "0.25",
                         "--tm-mode", "exact", NULL),
                   DDP_OK);
  const ddp_model_setup_t s = record_setup(&o);
  ddp_model_t *m;
  char *log;
  ck_assert_int_eq(create(&k_tmodel, &s, &m, &log), DDP_OK);
  free(log);
  ck_assert_ptr_nonnull(m);
  ck_assert_ptr_eq(m->ops, &k_tmodel);
  ck_assert_ptr_eq(m->be, g_be);
  ck_assert_ptr_eq(m->opts, &o);
  ck_assert_int_eq(m->n_tensors, 2);
  ck_assert_uint_eq(m->n_params, 5 * 4 + 5);
  ck_assert_int_eq(m->precision, DDP_DTYPE_F32);
  ck_assert_ptr_null(m->compute_params);
  ck_assert_int_eq(g_live, 2);

  char line[128];
  ddp_model_describe(m, line, sizeof line);
  ck_assert_str_eq(line, "tmodel, 0.000M parameters in 2 tensors");

  float host[25], back[25];
  for (int i = 0; i < 25; ++i) host[i] = 0.5f * (float)i - 3.0f;
  ck_assert_int_eq(ddp_model_params_from_host(m, host), DDP_OK);

  char path[128];
  snprintf(path, sizeof path, "%s/weights.safetensors", g_dir);
  ck_assert_int_eq(ddp_model_export(m, path), DDP_OK);
  ddp_safetensors_t *st = NULL;
  ck_assert_int_eq(ddp_safetensors_open(path, &st), DDP_OK);
  ck_assert_int_eq(ddp_safetensors_count(st), 2);
  ddp_st_tensor_t w, b;
  ck_assert_int_eq(ddp_safetensors_find(st, "fc.weight", &w), DDP_OK);
  ck_assert_int_eq(ddp_safetensors_find(st, "fc.bias", &b), DDP_OK);
  ck_assert_int_eq(w.dtype, DDP_DTYPE_F32);
  ck_assert_int_eq(w.ndim, 2);
  ck_assert_int_eq(w.shape[0], 5);
  ck_assert_int_eq(w.shape[1], 4);
  ck_assert_int_eq(b.dtype, DDP_DTYPE_F32);
  ck_assert_int_eq(b.ndim, 1);
  ck_assert_int_eq(b.shape[0], 5);
  ck_assert_mem_eq(w.data, host, 20 * sizeof(float));
  ck_assert_mem_eq(b.data, host + 20, 5 * sizeof(float));
  ck_assert_str_eq(ddp_safetensors_meta(st, "format"), "pt");
  ck_assert_str_eq(ddp_safetensors_meta(st, "producer"), "ddptrain");
  ck_assert_str_eq(ddp_safetensors_meta(st, "ddptrain_version"), ddp_version());
  ck_assert_str_eq(ddp_safetensors_meta(st, "ddptrain_model"), "tmodel");
  ck_assert_str_eq(ddp_safetensors_meta(st, "tm-width"), "5");
  ck_assert_str_eq(ddp_safetensors_meta(st, "tm-scale"), "0.25");
  ck_assert_str_eq(ddp_safetensors_meta(st, "tm-mode"), "exact");
  ck_assert_str_eq(ddp_safetensors_meta(st, "tm-note"), "none");
  /* only the model's own flags: not the core's, not another model's */
  ck_assert_ptr_null(ddp_safetensors_meta(st, "lr"));
  ck_assert_ptr_null(ddp_safetensors_meta(st, "n-layer"));
  ddp_safetensors_close(st);

  /* the weights are untouched by the export */
  ck_assert_int_eq(ddp_model_params_to_host(m, back), DDP_OK);
  ck_assert_mem_eq(back, host, sizeof host);
  ddp_model_destroy(m);
  ck_assert_int_eq(g_live, 0);
  ck_assert_int_eq(g_destroyed, 1);
}
END_TEST

START_TEST(test_model_params_host_round_trip_and_fp32_refresh) {
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, NULL), DDP_OK);
  const ddp_model_setup_t s = record_setup(&o);
  ddp_model_t *m;
  char *log;
  /* tmodel2 needs no registration and no flags: create takes the ops table */
  ck_assert_int_eq(create(&k_tmodel2, &s, &m, &log), DDP_OK);
  free(log);
  ck_assert_uint_eq(m->n_params, 15);
  ck_assert_int_eq(m->ops->init_weights(m, 2), DDP_OK);
  float host[15];
  ck_assert_int_eq(ddp_model_params_to_host(m, host), DDP_OK);
  for (int i = 0; i < 15; ++i) ck_assert_float_eq(host[i], 2.0f + 0.25f * (float)i);
  for (int i = 0; i < 15; ++i) host[i] = -(float)i;
  ck_assert_int_eq(ddp_model_params_from_host(m, host), DDP_OK);
  float back[15];
  ck_assert_int_eq(ddp_model_params_to_host(m, back), DDP_OK);
  ck_assert_mem_eq(back, host, sizeof host);
  /* fp32: no compute copy, and a refresh leaves the weights as they are */
  ck_assert_ptr_null(m->compute_params);
  ck_assert_int_eq(ddp_model_refresh_compute(m), DDP_OK);
  ck_assert_int_eq(ddp_model_params_to_host(m, back), DDP_OK);
  ck_assert_mem_eq(back, host, sizeof host);
  ck_assert_ptr_null(m->compute_params);
  ddp_model_destroy(m);
  ddp_model_destroy(NULL); /* a no-op */
  ck_assert_int_eq(g_live, 0);
}
END_TEST

/* The model's own export wins over the generic one. */
static int g_exported;
static ddp_status_t tm_export(ddp_model_t *m, const char *path) {
  ++g_exported;
  return DDP_ERR_IO;
}

START_TEST(test_model_export_prefers_the_models_own) {
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, NULL), DDP_OK);
  ddp_model_ops_t ops = k_tmodel2;
  ops.export_weights = tm_export;
  const ddp_model_setup_t s = record_setup(&o);
  ddp_model_t *m;
  char *log;
  ck_assert_int_eq(create(&ops, &s, &m, &log), DDP_OK);
  free(log);
  char path[128];
  snprintf(path, sizeof path, "%s/own.safetensors", g_dir);
  ck_assert_int_eq(ddp_model_export(m, path), DDP_ERR_IO);
  ck_assert_int_eq(g_exported, 1);
  ck_assert_int_eq(access(path, F_OK), -1); /* the generic export did not run */
  ddp_status_t st;
  CAPTURE(log, st = ddp_model_export(m, NULL));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "model_export: NULL argument");
  free(log);
  ck_assert_int_eq(g_exported, 1);
  ddp_model_destroy(m);
}
END_TEST

/* After a failed create: NULL out, create's allocations freed by destroy. */
static void expect_clean_failure(ddp_model_t *m) {
  ck_assert_ptr_null(m);
  ck_assert_int_eq(g_live, 0);
  ck_assert_int_eq(g_destroyed, g_created);
}

START_TEST(test_model_create_rejects_a_table_with_a_gap) {
  use_tmodel();
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, "--model", "tmodel", NULL), DDP_OK);
  const ddp_model_setup_t s = record_setup(&o);
  g_defect = DEFECT_GAP;
  ddp_model_t *m;
  char *log;
  ck_assert_int_eq(create(&k_tmodel, &s, &m, &log), DDP_ERR_INVALID_ARG);
  /* the table check names the model */
  ddp_assert_contains(log, "tmodel: tensor fc.bias starts at element 13, expected 12");
  free(log);
  ck_assert_int_eq(g_created, 1);
  expect_clean_failure(m);
}
END_TEST

START_TEST(test_model_create_rejects_a_model_without_buffers) {
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, NULL), DDP_OK);
  const ddp_model_setup_t s = record_setup(&o);
  g_defect = DEFECT_NO_PARAMS; /* the gradients are allocated: destroy must free them */
  ddp_model_t *m;
  char *log;
  ck_assert_int_eq(create(&k_tmodel2, &s, &m, &log), DDP_ERR_INTERNAL);
  ddp_assert_contains(log, "model tmodel2: create left no parameter buffers");
  free(log);
  ck_assert_int_eq(g_created, 1);
  expect_clean_failure(m);
}
END_TEST

START_TEST(test_model_create_cleans_up_after_the_models_own_failure) {
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, NULL), DDP_OK);
  const ddp_model_setup_t s = record_setup(&o);
  g_defect = DEFECT_CREATE_FAILS;
  ddp_model_t *m;
  char *log;
  ck_assert_int_eq(create(&k_tmodel2, &s, &m, &log), DDP_ERR_OOM);
  free(log);
  ck_assert_int_eq(g_created, 1);
  expect_clean_failure(m);
}
END_TEST

START_TEST(test_model_create_rejects_a_backend_the_model_does_not_run_on) {
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, NULL), DDP_OK);
  const ddp_model_setup_t s = record_setup(&o);
  ddp_model_t *m;
  char *log;
  ck_assert_int_eq(create(&k_tcuda, &s, &m, &log), DDP_ERR_UNSUPPORTED);
  ddp_assert_contains(log, "model tcuda does not run on the cpu backend");
  free(log);
  ck_assert_int_eq(g_created, 0); /* refused before the model was asked */
  expect_clean_failure(m);
}
END_TEST

START_TEST(test_model_create_rejects_data_of_another_kind) {
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, NULL), DDP_OK);
  ddp_model_setup_t s = record_setup(&o);
  s.data.kind = DDP_BATCH_TOKENS;
  s.data.vocab = 50, s.data.seq_len = 8;
  ddp_model_t *m;
  char *log;
  ck_assert_int_eq(create(&k_tmodel2, &s, &m, &log), DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "model tmodel2 trains on records, the data are tokens");
  free(log);
  ck_assert_int_eq(g_created, 0);
  expect_clean_failure(m);

  ddp_status_t st;
  CAPTURE(log, st = ddp_model_create(&k_tmodel2, NULL, &m));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "model_create: NULL argument");
  free(log);
  s = record_setup(NULL); /* no options */
  CAPTURE(log, st = ddp_model_create(&k_tmodel2, &s, &m));
  ck_assert_int_eq(st, DDP_ERR_INVALID_ARG);
  ddp_assert_contains(log, "model_create: NULL argument");
  free(log);
}
END_TEST

/* ---- resume: flags that shape the model --------------------------------------- */

/* Writes a checkpoint of tmodel's layout at step 5 in g_dir, recording
 * `written`'s flags, then resumes it under `now`. Returns the status of the
 * resume and its log (caller frees). */
static ddp_status_t resume_under(const ddp_options_t *written, const ddp_options_t *now,
                                 char **log) {
  const ddp_model_setup_t s = record_setup(written);
  ddp_model_t *m;
  char *create_log;
  ck_assert_int_eq(create(&k_tmodel2, &s, &m, &create_log), DDP_OK);
  free(create_log);
  const size_t n = m->n_params;
  const char *const *slots;
  const int n_slots = ddp_ckpt_slot_names("adamw", &slots);
  float *params = ddp_test_track(calloc(n, sizeof(float)));
  float *state = ddp_test_track(calloc(n * (size_t)n_slots, sizeof(float)));
  for (size_t i = 0; i < n; ++i) params[i] = 1.0f + (float)i;
  char *config = ddp_test_track(ddp_ckpt_config_json(written));
  ddp_ckpt_image_t img = {.tensors = m->tensors,
                          .n_tensors = m->n_tensors,
                          .n_params = n,
                          .params = params,
                          .state = state,
                          .n_slots = n_slots,
                          .slot_names = slots,
                          .config = config};
  img.meta = (ddp_ckpt_meta_t){.step = 5, .world = 1, .accum = 1, .seed = 1337};
  snprintf(img.meta.optimizer, sizeof img.meta.optimizer, "adamw");
  snprintf(img.meta.sampler, sizeof img.meta.sampler, "bucket");
  char path[256];
  ck_assert_int_eq(ddp_ckpt_path(path, sizeof path, g_dir, 5), DDP_OK);
  ck_assert_int_eq(ddp_ckpt_write(path, NULL, &img, 0), DDP_OK);

  const ddp_dist_t dist = {.rank = 0, .world = 1, .local_size = 1};
  float *dev_params = NULL, *dev_state = NULL;
  ck_assert_int_eq(ddp_backend_alloc(g_be, n * sizeof(float), (void **)&dev_params), DDP_OK);
  ck_assert_int_eq(
      ddp_backend_alloc(g_be, n * (size_t)n_slots * sizeof(float), (void **)&dev_state), DDP_OK);
  ddp_ckpt_meta_t meta;
  int found = 0;
  ddp_status_t st;
  CAPTURE(*log, st = ddp_train_resume(now, &dist, NULL, g_be, g_dir, 0, &img, dev_params, dev_state,
                                      NULL, &meta, &found));
  if (st == DDP_OK) {
    ck_assert_int_eq(found, 1);
    ck_assert_int_eq(meta.step, 5);
    float *back = ddp_test_track(calloc(n, sizeof(float)));
    ck_assert_int_eq(ddp_backend_copy(g_be, back, dev_params, n * sizeof(float),
                                      DDP_COPY_KIND_DEVICE_TO_HOST, NULL),
                     DDP_OK);
    ck_assert_int_eq(ddp_backend_sync(g_be, NULL), DDP_OK);
    ck_assert_mem_eq(back, params, n * sizeof(float));
  }
  ddp_backend_free(g_be, dev_params);
  ddp_backend_free(g_be, dev_state);
  ddp_model_destroy(m);
  ddp_test_free_tracked();
  return st;
}

START_TEST(test_model_resume_loads_a_checkpoint_of_the_same_configuration) {
  use_tmodel();
  ddp_options_t o;
  ck_assert_int_eq(parse(&o, NULL, "--model", "tmodel", "--tm-width", "3", NULL), DDP_OK);
  char *log;
  ck_assert_int_eq(resume_under(&o, &o, &log), DDP_OK);
  ddp_assert_contains(log, "resume: loaded");
  free(log);
}
END_TEST

START_TEST(test_model_resume_rejects_a_changed_structural_core_flag) {
  use_tmodel();
  ddp_options_t then, now;
  ck_assert_int_eq(parse(&then, NULL, "--model", "tmodel", "--optimizer", "adamw", NULL), DDP_OK);
  ck_assert_int_eq(parse(&now, NULL, "--model", "tmodel", "--optimizer", "lamb", NULL), DDP_OK);
  char *log;
  ck_assert_int_eq(resume_under(&then, &now, &log), DDP_ERR_MISMATCH);
  ddp_assert_contains(log, "--optimizer is 'adamw' there and 'lamb' now");
  free(log);
  /* --seq-len shapes token windows only: a record model resumes with a
   * warning */
  ck_assert_int_eq(parse(&then, NULL, "--model", "tmodel", "--seq-len", "64", NULL), DDP_OK);
  ck_assert_int_eq(parse(&now, NULL, "--model", "tmodel", "--seq-len", "32", NULL), DDP_OK);
  ck_assert_int_eq(resume_under(&then, &now, &log), DDP_OK);
  ddp_assert_contains(log, "resume: --seq-len is '32' now, '64' in the run that wrote");
  free(log);
}
END_TEST

/* model.h: ckpt_keys are "flags that fix the model's tensors: resuming with
 * another value is an error naming the flag". tmodel lists --tm-width. */
START_TEST(test_model_resume_rejects_a_changed_ckpt_key) {
  use_tmodel();
  ddp_options_t then, now;
  ck_assert_int_eq(parse(&then, NULL, "--model", "tmodel", "--tm-width", "3", NULL), DDP_OK);
  ck_assert_int_eq(parse(&now, NULL, "--model", "tmodel", "--tm-width", "4", NULL), DDP_OK);
  char *log;
  const ddp_status_t st = resume_under(&then, &now, &log);
  ck_assert_msg(st == DDP_ERR_MISMATCH,
                "resuming a --tm-width 3 checkpoint with --tm-width 4 (a ckpt_key of tmodel) "
                "returned %d, expected DDP_ERR_MISMATCH; log: %s",
                st, log);
  ddp_assert_contains(log, "--tm-width is '3' there and '4' now");
  free(log);
}
END_TEST

/* model.h: with or without ckpt_keys, --model itself is one of the runtime's
 * structural flags: a checkpoint of one model does not resume another, even
 * one with the same tensor names and shapes. */
START_TEST(test_model_resume_rejects_another_model) {
  use_tmodel();
  use_model(&k_tmodel2);
  ddp_options_t then, now;
  ck_assert_int_eq(parse(&then, NULL, "--model", "tmodel", NULL), DDP_OK);
  ck_assert_int_eq(parse(&now, NULL, "--model", "tmodel2", NULL), DDP_OK);
  char *log;
  const ddp_status_t st = resume_under(&then, &now, &log);
  ck_assert_msg(st == DDP_ERR_MISMATCH,
                "resuming a --model tmodel checkpoint as --model tmodel2 returned %d, expected "
                "DDP_ERR_MISMATCH; log: %s",
                st, log);
  ddp_assert_contains(log, "--model is 'tmodel' there and 'tmodel2' now");
  free(log);
}
END_TEST

static Suite *model_suite(void) {
  Suite *s = suite_create("model");
  TCase *tc = tcase_create("param");
  tcase_add_test(tc, test_param_set_fills_count_unused_dims_and_decay);
  tcase_add_test(tc, test_param_set_rejects_bad_dimensions_names_and_sizes);
  tcase_add_test(tc, test_param_table_check_accepts_a_tiling_table);
  tcase_add_test(tc, test_param_table_check_names_each_layout_error);
  tcase_add_test(tc, test_param_table_check_finds_a_duplicate_in_a_large_table);
  tcase_add_test(tc, test_param_find_by_name);
  tcase_add_test(tc, test_param_at_finds_every_element_and_nothing_outside);
  tcase_set_timeout(tc, 30);
  suite_add_tcase(s, tc);

  tc = tcase_create("registry");
  tcase_add_test(tc, test_model_registry_has_gpt_first);
  tcase_add_test(tc, test_model_register_rejects_bad_identity);
  tcase_add_test(tc, test_model_register_rejects_each_missing_required_operation);
  tcase_add_test(tc, test_model_register_rejects_load_records_on_a_token_model);
  tcase_add_test(tc, test_model_register_rejects_bad_flag_tables);
  tcase_add_test(tc, test_model_register_rejects_a_default_its_own_row_rejects);
  tcase_add_test(tc, test_model_register_rejects_an_unknown_checkpoint_key);
  tcase_add_test(tc, test_model_register_rejects_more_flags_than_the_slots_hold);
  tcase_add_test(tc, test_model_register_rejects_a_name_already_registered);
  tcase_add_test(tc, test_model_register_adds_a_model_and_its_flags);
  suite_add_tcase(s, tc);

  tc = tcase_create("options");
  tcase_add_test(tc, test_model_options_defaults_include_the_models_flags);
  tcase_add_test(tc, test_model_options_parse_the_models_flags_under_its_name);
  tcase_add_test(tc, test_model_options_reject_a_flag_of_another_model);
  tcase_add_test(tc, test_model_options_reject_bad_values_naming_the_flag);
  tcase_add_test(tc, test_model_options_read_by_name);
  tcase_add_test(tc, test_model_options_apply_only_to_their_model);
  tcase_add_test(tc, test_model_options_format_and_hash_round_trip);
  tcase_add_test(tc, test_model_options_help_lists_each_model_and_its_flags);
  suite_add_tcase(s, tc);

  tc = tcase_create("instance");
  tcase_add_checked_fixture(tc, instance_setup, instance_teardown);
  tcase_add_test(tc, test_model_create_and_export_a_record_model);
  tcase_add_test(tc, test_model_params_host_round_trip_and_fp32_refresh);
  tcase_add_test(tc, test_model_export_prefers_the_models_own);
  tcase_add_test(tc, test_model_create_rejects_a_table_with_a_gap);
  tcase_add_test(tc, test_model_create_rejects_a_model_without_buffers);
  tcase_add_test(tc, test_model_create_cleans_up_after_the_models_own_failure);
  tcase_add_test(tc, test_model_create_rejects_a_backend_the_model_does_not_run_on);
  tcase_add_test(tc, test_model_create_rejects_data_of_another_kind);
  suite_add_tcase(s, tc);

  tc = tcase_create("resume");
  tcase_add_checked_fixture(tc, instance_setup, instance_teardown);
  tcase_add_test(tc, test_model_resume_loads_a_checkpoint_of_the_same_configuration);
  tcase_add_test(tc, test_model_resume_rejects_a_changed_structural_core_flag);
  tcase_add_test(tc, test_model_resume_rejects_a_changed_ckpt_key);
  tcase_add_test(tc, test_model_resume_rejects_another_model);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(model_suite());
}
