/* CPU suite for the model's token staging (src/model/gpt_input.c): the
 * double-buffered device slots the micro-batch tokens are copied into on a
 * copy stream. The CPU backend runs every copy at once, so these tests pin
 * down the bookkeeping every backend shares: which slot a put lands in, that
 * the tokens arrive intact in it, that a host buffer reused right after
 * wait_copied (as the loader reuses its slot) never changes staged tokens of
 * the current put, that bad sizes are rejected with a message, and that
 * init/destroy leave no backend allocation behind. The GPU side (overlap with
 * a busy compute stream, pinned memory) is tests/check_gpu_upload.c. */
#include <config.h>

#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_util.h"
#include "ddptrain/data.h"
#include "model/gpt_input.h"
#include "model/slot_stager.h"

static ddp_backend_t *be;

static void setup(void) {
  be = ddp_test_cpu_backend();
}

static void teardown(void) {
  ddp_backend_destroy(be);
  be = NULL;
  ddp_test_free_tracked();
}

/* Token t of micro-step p: distinct per step, so a stale slot shows. */
static int32_t token_of(int p, int64_t t, int target) {
  return (int32_t)((p * 7919 + t * 31 + (target ? 1 : 0)) % 50257) - (target && t % 5 == 0);
}

static void fill_step(int32_t *in, int32_t *tg, int p, int64_t n) {
  for (int64_t t = 0; t < n; ++t) {
    in[t] = token_of(p, t, 0);
    tg[t] = token_of(p, t, 1);
  }
}

START_TEST(test_stager_slots_alternate_and_hold_their_tokens) {
  enum { CAP = 64 };
  ddp_token_stager_t s;
  ck_assert_int_eq(ddp_token_stager_init(&s, be, CAP), DDP_OK);
  int32_t *in = ddp_test_track(malloc(CAP * sizeof *in));
  int32_t *tg = ddp_test_track(malloc(CAP * sizeof *tg));
  int32_t *dev_in[3], *dev_tg[3];
  for (int p = 0; p < 3; ++p) {
    const int64_t n = CAP - p; /* partial fills too */
    fill_step(in, tg, p, n);
    ck_assert_int_eq(ddp_token_stager_put(&s, in, tg, n, &dev_in[p], &dev_tg[p]), DDP_OK);
    ck_assert_int_eq(ddp_token_stager_wait_copied(&s), DDP_OK);
    /* the CPU backend's device memory is host memory: read it directly */
    for (int64_t t = 0; t < n; ++t) {
      expect_eq(dev_in[p][t], token_of(p, t, 0));
      expect_eq(dev_tg[p][t], token_of(p, t, 1));
    }
    ck_assert_int_eq(ddp_token_stager_release(&s), DDP_OK);
  }
  /* slot 0, slot 1, slot 0 again: two micro-steps in flight at most */
  ck_assert_ptr_ne(dev_in[0], dev_in[1]);
  ck_assert_ptr_ne(dev_tg[0], dev_tg[1]);
  ck_assert_ptr_eq(dev_in[0], dev_in[2]);
  ck_assert_ptr_eq(dev_tg[0], dev_tg[2]);
  /* slot 1 still holds micro-step 1 after micro-step 2 went to slot 0 */
  for (int64_t t = 0; t < CAP - 1; ++t) expect_eq(dev_in[1][t], token_of(1, t, 0));
  ddp_token_stager_destroy(&s);
}
END_TEST

START_TEST(test_stager_many_micro_steps_with_reused_host_buffer) {
  enum { CAP = 1000, STEPS = 500 };
  ddp_token_stager_t s;
  ck_assert_int_eq(ddp_token_stager_init(&s, be, CAP), DDP_OK);
  const uint64_t allocs0 = be->alloc_calls;
  /* one host buffer, overwritten with the next step's tokens as soon as
   * wait_copied returns, as the loader refills a released slot */
  int32_t *in = ddp_test_track(malloc(CAP * sizeof *in));
  int32_t *tg = ddp_test_track(malloc(CAP * sizeof *tg));
  int32_t *prev_in = NULL;
  int64_t prev_n = 0;
  for (int p = 0; p < STEPS; ++p) {
    const int64_t n = 1 + (p * 37) % CAP;
    fill_step(in, tg, p, n);
    int32_t *d_in = NULL, *d_tg = NULL;
    ck_assert_int_eq(ddp_token_stager_put(&s, in, tg, n, &d_in, &d_tg), DDP_OK);
    ck_assert_int_eq(ddp_token_stager_wait_copied(&s), DDP_OK);
    memset(in, 0xab, CAP * sizeof *in);
    memset(tg, 0xab, CAP * sizeof *tg);
    for (int64_t t = 0; t < n; ++t) {
      expect_eq(d_in[t], token_of(p, t, 0));
      expect_eq(d_tg[t], token_of(p, t, 1));
    }
    /* the previous step's slot is untouched by this put */
    if (prev_in) {
      expect(prev_in != d_in);
      for (int64_t t = 0; t < prev_n; ++t) expect_eq(prev_in[t], token_of(p - 1, t, 0));
    }
    ck_assert_int_eq(ddp_token_stager_release(&s), DDP_OK);
    prev_in = d_in;
    prev_n = n;
  }
  /* staging allocates nothing per micro-step */
  ck_assert_uint_eq(be->alloc_calls, allocs0);
  ddp_token_stager_destroy(&s);
}
END_TEST

START_TEST(test_stager_inputs_only) {
  ddp_token_stager_t s;
  ck_assert_int_eq(ddp_token_stager_init(&s, be, 8), DDP_OK);
  const int32_t in[5] = {4, 3, 2, 1, 0};
  int32_t *d_in = NULL, *d_tg = (int32_t *)1;
  ck_assert_int_eq(ddp_token_stager_put(&s, in, NULL, 5, &d_in, &d_tg), DDP_OK);
  ck_assert_ptr_null(d_tg);
  ck_assert_int_eq(ddp_token_stager_wait_copied(&s), DDP_OK);
  ck_assert_mem_eq(d_in, in, sizeof in);
  ck_assert_int_eq(ddp_token_stager_release(&s), DDP_OK);
  ddp_token_stager_destroy(&s);
}
END_TEST

START_TEST(test_stager_rejects_bad_sizes_and_keeps_its_slot) {
  ddp_token_stager_t s;
  ck_assert_int_eq(ddp_token_stager_init(&s, be, 16), DDP_OK);
  int32_t in[17] = {0}, tg[17] = {0};
  int32_t *d_in = NULL, *d_tg = NULL, *first = NULL;
  ck_assert_int_eq(ddp_token_stager_put(&s, in, tg, 16, &first, &d_tg), DDP_OK);
  ck_assert_int_eq(ddp_token_stager_release(&s), DDP_OK);
  const int64_t bad[] = {0, -1, 17};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    ddp_test_log_start();
    ck_assert_int_eq(ddp_token_stager_put(&s, in, tg, bad[i], &d_in, &d_tg), DDP_ERR_INVALID_ARG);
    char *log = ddp_test_log_stop();
    ddp_assert_contains(log, "capacity 16");
    free(log);
  }
  /* a rejected put took no slot: the next good one goes to slot 1 */
  ck_assert_int_eq(ddp_token_stager_put(&s, in, tg, 1, &d_in, &d_tg), DDP_OK);
  ck_assert_ptr_ne(d_in, first);
  ddp_token_stager_destroy(&s);
}
END_TEST

/* The stager under the token one (model/slot_stager.h), as the ResNet uses
 * it: arrays of other sizes and types, an array left out of a put, and a
 * refused size that names the caller's batch and takes no slot. */
START_TEST(test_slot_stager_arrays_and_refusals) {
  ddp_slot_stager_t st;
  const size_t caps[2] = {6 * sizeof(float), 2 * sizeof(int32_t)};
  ck_assert_int_eq(ddp_slot_stager_init(&st, be, 2, caps), DDP_OK);
  const float px[6] = {1, 2, 3, 4, 5, 6};
  const int32_t lab[2] = {7, 8};
  const void *src[2] = {px, lab};
  size_t bytes[2] = {sizeof px, sizeof lab};
  void *dev[2] = {NULL, NULL};
  ck_assert_int_eq(ddp_slot_stager_put(&st, "the batch", src, bytes, dev), DDP_OK);
  ck_assert_int_eq(st.slot, 0);
  ck_assert_mem_eq(dev[0], px, sizeof px);
  ck_assert_mem_eq(dev[1], lab, sizeof lab);
  ck_assert_int_eq(ddp_slot_stager_release(&st), DDP_OK);
  ck_assert_int_eq(ddp_slot_stager_wait_copied(&st), DDP_OK);
  /* too many pixels: refused with both sizes, no slot taken */
  bytes[0] = 7 * sizeof(float);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_slot_stager_put(&st, "the batch", src, bytes, dev), DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "the batch: 28 bytes for a slot of 24");
  free(log);
  ck_assert_int_eq(st.slot, 0);
  /* the labels left out: slot 1, its pixels copied, its labels untouched */
  bytes[0] = sizeof px;
  src[1] = NULL;
  ck_assert_int_eq(ddp_slot_stager_put(&st, "the batch", src, bytes, dev), DDP_OK);
  ck_assert_int_eq(st.slot, 1);
  ck_assert_mem_eq(dev[0], px, sizeof px);
  ck_assert_ptr_eq(dev[1], st.dev[1][1]);
  ddp_slot_stager_destroy(&st);
  /* an array count the stager does not hold */
  ddp_test_log_start();
  ck_assert_int_eq(ddp_slot_stager_init(&st, be, DDP_SLOT_STAGER_ARRAYS + 1, caps),
                   DDP_ERR_INVALID_ARG);
  log = ddp_test_log_stop();
  ddp_assert_contains(log, "slot stager: 5 arrays (1 .. 4)");
  free(log);
  ddp_slot_stager_destroy(&st); /* harmless after a failed init */
}
END_TEST

START_TEST(test_stager_row_lengths_follow_their_slot) {
  enum { CAP = 32 };
  ddp_token_stager_t s;
  ck_assert_int_eq(ddp_token_stager_init(&s, be, CAP), DDP_OK);
  int32_t in[CAP], tg[CAP], lens[4];
  int32_t *d_in, *d_tg, *d_lens[2];
  for (int p = 0; p < 2; ++p) {
    fill_step(in, tg, p, CAP);
    if (p == 0) {
      for (int r = 0; r < 4; ++r) lens[r] = 8 - r;
      ck_assert_int_eq(
          ddp_token_stager_put_rows(&s, in, tg, CAP, lens, 4, &d_in, &d_tg, &d_lens[p]), DDP_OK);
    } else { /* filled in place in the pinned array: no copy */
      int32_t *h = ddp_token_stager_lens_host(&s);
      for (int r = 0; r < 4; ++r) h[r] = 100 + r;
      ck_assert_int_eq(ddp_token_stager_put_rows(&s, in, tg, CAP, h, 4, &d_in, &d_tg, &d_lens[p]),
                       DDP_OK);
    }
    ck_assert_int_eq(ddp_token_stager_wait_copied(&s), DDP_OK);
    ck_assert_int_eq(ddp_token_stager_release(&s), DDP_OK);
  }
  ck_assert_ptr_ne(d_lens[0], d_lens[1]);
  for (int r = 0; r < 4; ++r) {
    expect_eq(d_lens[0][r], 8 - r); /* slot 0 kept its lengths */
    expect_eq(d_lens[1][r], 100 + r);
  }
  /* no lengths: NULL; more rows than tokens: refused */
  ck_assert_int_eq(ddp_token_stager_put_rows(&s, in, tg, 4, NULL, 0, &d_in, &d_tg, &d_lens[0]),
                   DDP_OK);
  ck_assert_ptr_null(d_lens[0]);
  ddp_test_log_start();
  ck_assert_int_eq(ddp_token_stager_put_rows(&s, in, tg, 4, lens, 5, &d_in, &d_tg, &d_lens[0]),
                   DDP_ERR_INVALID_ARG);
  char *log = ddp_test_log_stop();
  ddp_assert_contains(log, "5 row lengths for 4 tokens");
  free(log);
  ddp_token_stager_destroy(&s);
}
END_TEST

START_TEST(test_stager_and_host_batch_free_everything) {
  const uint64_t a0 = be->alloc_calls, f0 = be->free_calls;
  ddp_token_stager_t s;
  ck_assert_int_eq(ddp_token_stager_init(&s, be, 256), DDP_OK);
  ck_assert_uint_gt(be->alloc_calls, a0);
  ddp_token_stager_destroy(&s);
  ck_assert_uint_eq(be->alloc_calls - a0, be->free_calls - f0);
  ck_assert_uint_eq(be->bytes_in_use, 0);
  /* destroying twice (as an error path may) is harmless */
  ddp_token_stager_destroy(&s);
  /* the loader's batch slots from the backend's host allocator */
  ddp_batch_t b;
  ck_assert_int_eq(ddp_batch_init_host(&b, be, 256, 4), DDP_OK);
  ck_assert_ptr_nonnull(b.inputs);
  ck_assert_ptr_nonnull(b.targets);
  for (int t = 0; t < 256; ++t) b.inputs[t] = b.targets[t] = t; /* writable */
  ddp_batch_destroy(&b);
}
END_TEST

/* ---- ordering: a CPU backend that keeps score of streams and events ----
 * The CPU backend runs everything at once, so a missing wait would go
 * unnoticed by the tests above. This wrapper hands out distinct stream and
 * event handles and records, with CUDA's semantics, which record of each
 * event every stream has waited for; the copy wrapper then checks that each
 * copy into a device slot runs on a copy stream (not the compute stream)
 * that has waited for the *latest* "compute is done with this slot" record,
 * and the test checks after each put that the compute stream waits for the
 * copies, and that the only host wait is wait_copied on the copy's event. */
enum { REC_MAX = 16 };
static const ddp_backend_ops_t *rec_base;
static ddp_backend_ops_t rec_ops;
static char rec_stream_tok[REC_MAX], rec_event_tok[REC_MAX];
static int rec_n_streams, rec_n_events;
static int64_t rec_clock;
static int64_t rec_ev_at[REC_MAX];               /* op index of the event's last record, 0 = none */
static int rec_ev_stream[REC_MAX];               /* stream of that record (0 = compute) */
static int64_t rec_waited[REC_MAX + 1][REC_MAX]; /* [stream][event]: record waited for */
static int64_t rec_last_copy[2];                 /* op index of the last copy into slot k */
static int rec_copy_violations, rec_compute_copies, rec_stream_syncs, rec_event_syncs;
static int rec_last_synced = -1;
static const ddp_slot_stager_t *rec_stager;

static int rec_si(ddp_stream_t s) {
  return s ? (int)((char *)s - rec_stream_tok) + 1 : 0;
}
static int rec_ei(ddp_event_t e) {
  return (int)((char *)e - rec_event_tok);
}

static ddp_status_t rec_stream_create(ddp_backend_t *b, ddp_stream_t *s) {
  (void)b;
  ck_assert_int_lt(rec_n_streams, REC_MAX);
  *s = (ddp_stream_t)(void *)&rec_stream_tok[rec_n_streams++];
  return DDP_OK;
}
static ddp_status_t rec_event_create(ddp_backend_t *b, ddp_event_t *e) {
  (void)b;
  ck_assert_int_lt(rec_n_events, REC_MAX);
  *e = (ddp_event_t)(void *)&rec_event_tok[rec_n_events++];
  return DDP_OK;
}
static void rec_stream_destroy(ddp_backend_t *b, ddp_stream_t s) {
  (void)b, (void)s;
}
static void rec_event_destroy(ddp_backend_t *b, ddp_event_t e) {
  (void)b, (void)e;
}
static ddp_status_t rec_event_record(ddp_backend_t *b, ddp_event_t e, ddp_stream_t s) {
  (void)b;
  rec_ev_at[rec_ei(e)] = ++rec_clock;
  rec_ev_stream[rec_ei(e)] = rec_si(s);
  return DDP_OK;
}
static ddp_status_t rec_stream_wait_event(ddp_backend_t *b, ddp_stream_t s, ddp_event_t e) {
  (void)b;
  rec_waited[rec_si(s)][rec_ei(e)] = rec_ev_at[rec_ei(e)]; /* the record current now */
  return DDP_OK;
}
static ddp_status_t rec_event_synchronize(ddp_backend_t *b, ddp_event_t e) {
  rec_event_syncs++;
  rec_last_synced = rec_ei(e);
  return rec_base->event_synchronize(b, e);
}
static ddp_status_t rec_synchronize(ddp_backend_t *b, ddp_stream_t s) {
  rec_stream_syncs++;
  return rec_base->synchronize(b, s);
}
static ddp_status_t rec_copy(ddp_backend_t *b, void *dst, const void *src, size_t bytes,
                             ddp_copy_kind_t kind, ddp_stream_t s) {
  ++rec_clock;
  const int si = rec_si(s);
  for (int k = 0; rec_stager && k < 2; ++k) {
    if (dst != rec_stager->dev[k][0] && dst != rec_stager->dev[k][1]) continue;
    rec_last_copy[k] = rec_clock;
    if (si == 0) rec_compute_copies++;
    const int freed = rec_ei(rec_stager->freed[k]);
    if (kind != DDP_COPY_KIND_HOST_TO_DEVICE || rec_waited[si][freed] != rec_ev_at[freed] ||
        rec_ev_stream[freed] != 0)
      rec_copy_violations++;
  }
  return rec_base->copy(b, dst, src, bytes, kind, s);
}

static void rec_install(void) {
  rec_base = be->ops;
  rec_ops = *be->ops;
  rec_ops.stream_create = rec_stream_create;
  rec_ops.stream_destroy = rec_stream_destroy;
  rec_ops.event_create = rec_event_create;
  rec_ops.event_destroy = rec_event_destroy;
  rec_ops.event_record = rec_event_record;
  rec_ops.stream_wait_event = rec_stream_wait_event;
  rec_ops.event_synchronize = rec_event_synchronize;
  rec_ops.synchronize = rec_synchronize;
  rec_ops.copy = rec_copy;
  be->ops = &rec_ops;
}

START_TEST(test_stager_orders_copies_by_events_without_host_waits) {
  enum { CAP = 32, STEPS = 41 };
  rec_install();
  ddp_token_stager_t s;
  ck_assert_int_eq(ddp_token_stager_init(&s, be, CAP), DDP_OK);
  rec_stager = &s.st;
  ck_assert_ptr_nonnull(s.st.copy); /* a stream of its own, not the compute stream */
  int32_t in[CAP], tg[CAP];
  for (int p = 0; p < STEPS; ++p) {
    fill_step(in, tg, p, CAP);
    int32_t *d_in = NULL, *d_tg = NULL;
    const int syncs0 = rec_event_syncs;
    ck_assert_int_eq(ddp_token_stager_put(&s, in, tg, CAP, &d_in, &d_tg), DDP_OK);
    const int k = (void *)d_in == s.st.dev[0][0] ? 0 : 1;
    expect_eq(k, p % 2);
    expect((void *)d_tg == s.st.dev[k][1]);
    /* put itself never blocks the host */
    expect_eq(rec_event_syncs, syncs0);
    /* the copy's event is recorded on the copy stream after both copies,
     * and the compute stream waits for exactly that record */
    const int ready = rec_ei(s.st.ready[k]);
    expect_eq(rec_ev_stream[ready], rec_si(s.st.copy));
    expect(rec_ev_at[ready] > rec_last_copy[k]);
    expect_eq(rec_waited[0][ready], rec_ev_at[ready]);
    /* the model's forward/backward would read slot k here, on the compute
     * stream; then the stager is told, and the host waits for the copy only */
    ck_assert_int_eq(ddp_token_stager_release(&s), DDP_OK);
    ck_assert_int_eq(ddp_token_stager_wait_copied(&s), DDP_OK);
    expect_eq(rec_event_syncs, syncs0 + 1);
    expect_eq(rec_last_synced, ready);
    for (int64_t t = 0; t < CAP; ++t) expect_eq(d_in[t], token_of(p, t, 0));
  }
  ck_assert_int_eq(rec_copy_violations, 0);
  ck_assert_int_eq(rec_compute_copies, 0);
  ck_assert_int_eq(rec_stream_syncs, 0); /* never a whole-stream wait */
  rec_stager = NULL;
  ddp_token_stager_destroy(&s);
  be->ops = rec_base;
}
END_TEST

static Suite *stager_suite(void) {
  Suite *s = suite_create("token_stager");
  TCase *tc = tcase_create("cpu");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_stager_slots_alternate_and_hold_their_tokens);
  tcase_add_test(tc, test_stager_many_micro_steps_with_reused_host_buffer);
  tcase_add_test(tc, test_stager_inputs_only);
  tcase_add_test(tc, test_stager_rejects_bad_sizes_and_keeps_its_slot);
  tcase_add_test(tc, test_stager_row_lengths_follow_their_slot);
  tcase_add_test(tc, test_slot_stager_arrays_and_refusals);
  tcase_add_test(tc, test_stager_and_host_batch_free_everything);
  tcase_add_test(tc, test_stager_orders_copies_by_events_without_host_waits);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return ddp_test_run_suite(stager_suite());
}
