/* GPU suite for kernels/convert.cu: ddp_cuda_convert and ddp_cuda_fill against their CPU
 * twins in src/core/dtype.c, bit for bit.
 *
 * Widening runs on all 65,536 patterns of each 16-bit format; narrowing on
 * every rounding tie of both formats and its fp32 neighbours, a strided sweep
 * of all 2^32 fp32 patterns, and the special values. Outputs are poisoned
 * twice with different bytes before each run (an element the kernel never
 * writes cannot match both times), guard bytes around every output catch
 * stray writes, and lengths are odd so the vector path always has a tail.
 *
 * Exit status: 77 (Automake SKIP) without a usable CUDA device, 0 when every
 * test passes, 1 otherwise. Tests run in-process (CK_NOFORK): a CUDA context
 * does not survive fork. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/dtype.h"
#include "ddptrain/log.h"
#include "kernels.h"

#define SWEEP_STRIDE 4099u /* prime: every low-bit residue is visited */
#define GUARD 64           /* poisoned bytes checked after each output */

#define CUDA_OK(expr)                                                  \
  do {                                                                 \
    cudaError_t cuda_ok_err_ = (expr);                                 \
    ck_assert_msg(cuda_ok_err_ == cudaSuccess, "%s failed: %s", #expr, \
                  cudaGetErrorString(cuda_ok_err_));                   \
  } while (0)

static const ddp_dtype_t k_float_types[] = {DDP_DTYPE_F32, DDP_DTYPE_BF16, DDP_DTYPE_F16};

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

static uint64_t rng_state = 0x243F6A8885A308D3ull;

static uint32_t rng_u32(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* ---- input sets -------------------------------------------------------- */

/* Element storage as uint32_t whatever the type, for easy indexing. */
typedef struct values {
  uint32_t *v;
  size_t n, cap;
} values_t;

static void values_push(values_t *s, uint32_t x) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 4096;
    s->v = realloc(s->v, s->cap * sizeof *s->v);
    ck_assert_ptr_nonnull(s->v);
  }
  s->v[s->n++] = x;
}

/* All 65,536 patterns plus one more, so n is odd. */
static values_t half_patterns(void) {
  values_t s = {0};
  for (uint32_t h = 0; h <= 0xFFFF; ++h) values_push(&s, h);
  values_push(&s, 0x3C00);
  return s;
}

/* Every tie between adjacent values of one half format (max finite to inf
 * included) and its fp32 neighbours, both signs. */
static void push_midpoints(values_t *s, float (*widen)(uint16_t), uint16_t max_finite, double top) {
  for (uint32_t h = 0; h <= max_finite; ++h) {
    double a = (double)widen((uint16_t)h);
    double b = h < max_finite ? (double)widen((uint16_t)(h + 1)) : top;
    float mid = (float)((a + b) / 2); /* exact */
    const float xs[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
    for (int k = 0; k < 3; ++k) {
      values_push(s, bits_of(xs[k]));
      values_push(s, bits_of(xs[k]) | 0x80000000u);
    }
  }
}

static values_t f32_inputs(void) {
  values_t s = {0};
  push_midpoints(&s, ddp_bf16_to_f32, 0x7F7F, 0x1p128);
  push_midpoints(&s, ddp_f16_to_f32, 0x7BFF, 0x1p16);
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += SWEEP_STRIDE) values_push(&s, (uint32_t)u);
  static const uint32_t specials[] = {
      0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, /* zeros, infs */
      0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, /* quiet, signalling NaNs */
      0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FA00000u, 0x7F80C000u, /* NaN payloads */
      0x00000001u, 0x80000001u, 0x00008000u, 0x00008001u, /* fp32 subnormals */
      0x00018000u, 0x007FFFFFu, 0x807FFFFFu, 0x00800000u, /* ... and FLT_MIN */
      0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F7F7FFFu, 0x7F7F8000u, /* FLT_MAX, bf16 edge */
      0x477FF000u, 0x477FEFFFu, 0xC77FF000u, 0x477FE000u, /* 65520, 65504 */
      0x33000000u, 0x33000001u, 0x387FF000u, 0x38800000u, /* fp16 subnormal edges */
  };
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i) values_push(&s, specials[i]);
  if (s.n % 2 == 0) values_push(&s, 0x3F800000u);
  return s;
}

/* Packs n elements of type t (from uint32_t storage) into a byte buffer. */
static unsigned char *pack(const uint32_t *v, size_t n, ddp_dtype_t t) {
  size_t sz = ddp_dtype_size(t);
  unsigned char *p = malloc(n * sz + 1);
  ck_assert_ptr_nonnull(p);
  for (size_t i = 0; i < n; ++i) {
    if (sz == 4) {
      memcpy(p + 4 * i, &v[i], 4);
    } else {
      uint16_t h = (uint16_t)v[i];
      memcpy(p + 2 * i, &h, 2);
    }
  }
  return p;
}

static uint32_t elem_at(const unsigned char *p, ddp_dtype_t t, size_t i) {
  if (ddp_dtype_size(t) == 4) {
    uint32_t v;
    memcpy(&v, p + 4 * i, 4);
    return v;
  }
  uint16_t h;
  memcpy(&h, p + 2 * i, 2);
  return h;
}

/* The CPU twin, element by element through the scalar conversions. */
static uint32_t convert_scalar(uint32_t v, ddp_dtype_t dst, ddp_dtype_t src) {
  if (dst == src) return v;
  float x = src == DDP_DTYPE_F32    ? float_of(v)
            : src == DDP_DTYPE_BF16 ? ddp_bf16_to_f32((uint16_t)v)
                                    : ddp_f16_to_f32((uint16_t)v);
  return dst == DDP_DTYPE_F32    ? bits_of(x)
         : dst == DDP_DTYPE_BF16 ? ddp_f32_to_bf16(x)
                                 : ddp_f32_to_f16(x);
}

/* ---- device scratch and the checking harness --------------------------- */

typedef struct gpu_ctx {
  unsigned char *d_src, *d_dst; /* device */
  unsigned char *h_out;         /* host, cap bytes */
  size_t cap;
  cudaStream_t stream;
} gpu_ctx_t;

/* settle(): the stream under test is created non-blocking, so it does not
 * wait for the legacy default stream that cudaMemset and a pageable
 * cudaMemcpy use; both return before the device has finished them. Without
 * a device synchronisation in between, the poisoning memset ran after the
 * kernel on an H200 and the output read back as poison. */
static void ctx_init(gpu_ctx_t *c, size_t cap, int use_stream) {
  memset(c, 0, sizeof *c);
  c->cap = cap;
  CUDA_OK(cudaMalloc((void **)&c->d_src, cap));
  CUDA_OK(cudaMalloc((void **)&c->d_dst, cap));
  c->h_out = malloc(cap);
  ck_assert_ptr_nonnull(c->h_out);
  if (use_stream) CUDA_OK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
}

static void ctx_free(gpu_ctx_t *c) {
  if (c->stream) CUDA_OK(cudaStreamDestroy(c->stream));
  CUDA_OK(cudaFree(c->d_src));
  CUDA_OK(cudaFree(c->d_dst));
  free(c->h_out);
  memset(c, 0, sizeof *c);
}

/* Checks that out[0, len) is all `poison`; returns the first offender or len. */
static size_t first_not(const unsigned char *out, size_t len, unsigned char poison) {
  for (size_t i = 0; i < len; ++i)
    if (out[i] != poison) return i;
  return len;
}

/* Converts src_v (n elements, uint32_t storage) from st to dt on the device,
 * `off` elements into the buffers, and compares with the CPU twin. */
static void check_convert(gpu_ctx_t *c, ddp_dtype_t dt, ddp_dtype_t st, const uint32_t *src_v,
                          size_t n, size_t off) {
  const size_t ssz = ddp_dtype_size(st), dsz = ddp_dtype_size(dt);
  const size_t out_bytes = (off + n) * dsz + GUARD;
  ck_assert_msg((off + n) * ssz <= c->cap && out_bytes <= c->cap, "scratch too small");

  unsigned char *src = pack(src_v, n, st);
  uint32_t *want_v = malloc((n + 1) * sizeof *want_v);
  ck_assert_ptr_nonnull(want_v);
  for (size_t i = 0; i < n; ++i) want_v[i] = convert_scalar(src_v[i], dt, st);
  unsigned char *want = pack(want_v, n, dt);
  CUDA_OK(cudaMemcpy(c->d_src + off * ssz, src, n * ssz, cudaMemcpyHostToDevice));
  CUDA_OK(cudaDeviceSynchronize()); /* see settle() */

  static const unsigned char poisons[2] = {0xA5, 0x5A};
  for (int p = 0; p < 2; ++p) {
    CUDA_OK(cudaMemset(c->d_dst, poisons[p], out_bytes));
    CUDA_OK(cudaDeviceSynchronize()); /* see settle() */
    ddp_status_t st_ =
        ddp_cuda_convert(c->d_dst + off * dsz, dt, c->d_src + off * ssz, st, n, c->stream);
    ck_assert_msg(st_ == DDP_OK, "ddp_cuda_convert(%s -> %s, n %zu, off %zu) = %s",
                  ddp_dtype_name(st), ddp_dtype_name(dt), n, off, ddp_status_name(st_));
    CUDA_OK(cudaStreamSynchronize(c->stream));
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(c->h_out, c->d_dst, out_bytes, cudaMemcpyDeviceToHost));

    size_t bad = first_not(c->h_out, off * dsz, poisons[p]);
    ck_assert_msg(bad == off * dsz, "%s -> %s, n %zu, off %zu: wrote byte %zu before dst",
                  ddp_dtype_name(st), ddp_dtype_name(dt), n, off, bad);
    const unsigned char *tail = c->h_out + (off + n) * dsz;
    bad = first_not(tail, GUARD, poisons[p]);
    ck_assert_msg(bad == GUARD, "%s -> %s, n %zu, off %zu: wrote byte %zu past the end",
                  ddp_dtype_name(st), ddp_dtype_name(dt), n, off, bad);

    const unsigned char *got = c->h_out + off * dsz;
    if (memcmp(got, want, n * dsz) != 0) {
      size_t i = 0;
      while (i < n && elem_at(got, dt, i) == elem_at(want, dt, i)) ++i;
      ck_abort_msg(
          "%s -> %s, n %zu, off %zu, poison 0x%02X: first mismatch at [%zu]: "
          "in 0x%08X, gpu 0x%08X, cpu 0x%08X",
          ddp_dtype_name(st), ddp_dtype_name(dt), n, off, poisons[p], i, src_v[i],
          elem_at(got, dt, i), elem_at(want, dt, i));
    }
  }
  free(src);
  free(want);
  free(want_v);
}

/* ---- conversion tests -------------------------------------------------- */

START_TEST(test_gpu_convert_widen_bf16_exhaustive) {
  values_t h = half_patterns();
  gpu_ctx_t c;
  ctx_init(&c, 4 * h.n + 4096, 1);
  check_convert(&c, DDP_DTYPE_F32, DDP_DTYPE_BF16, h.v, h.n, 0);
  ctx_free(&c);
  free(h.v);
}
END_TEST

START_TEST(test_gpu_convert_widen_f16_exhaustive) {
  values_t h = half_patterns();
  gpu_ctx_t c;
  ctx_init(&c, 4 * h.n + 4096, 1);
  check_convert(&c, DDP_DTYPE_F32, DDP_DTYPE_F16, h.v, h.n, 0);
  ctx_free(&c);
  free(h.v);
}
END_TEST

START_TEST(test_gpu_convert_narrow_bf16) {
  values_t f = f32_inputs();
  gpu_ctx_t c;
  ctx_init(&c, 4 * f.n + 4096, 1);
  check_convert(&c, DDP_DTYPE_BF16, DDP_DTYPE_F32, f.v, f.n, 0);
  ctx_free(&c);
  free(f.v);
}
END_TEST

START_TEST(test_gpu_convert_narrow_f16) {
  values_t f = f32_inputs();
  gpu_ctx_t c;
  ctx_init(&c, 4 * f.n + 4096, 1);
  check_convert(&c, DDP_DTYPE_F16, DDP_DTYPE_F32, f.v, f.n, 0);
  ctx_free(&c);
  free(f.v);
}
END_TEST

/* All nine pairs, each at element offsets 0..3: offset 0 takes the
 * four-wide path, the others the scalar one. */
START_TEST(test_gpu_convert_all_pairs_and_offsets) {
  values_t h = half_patterns(), f = f32_inputs();
  gpu_ctx_t c;
  ctx_init(&c, 4 * (f.n > h.n ? f.n : h.n) + 4096, 1);
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) {
      ddp_dtype_t dt = k_float_types[a], st = k_float_types[b];
      const values_t *in = st == DDP_DTYPE_F32 ? &f : &h;
      for (size_t off = 0; off < 4; ++off) check_convert(&c, dt, st, in->v, in->n, off);
    }
  }
  ctx_free(&c);
  free(h.v);
  free(f.v);
}
END_TEST

/* Short lengths: tails of every size, grids of one block. */
START_TEST(test_gpu_convert_short_lengths) {
  values_t h = half_patterns(), f = f32_inputs();
  gpu_ctx_t c;
  ctx_init(&c, 1 << 16, 1);
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) {
      ddp_dtype_t dt = k_float_types[a], st = k_float_types[b];
      /* A window where the inputs are interesting: NaNs, ties. */
      const uint32_t *in = st == DDP_DTYPE_F32 ? f.v + f.n - 80 : h.v + 0x7BF0;
      for (size_t n = 1; n <= 70; ++n)
        for (size_t off = 0; off < 4; ++off) check_convert(&c, dt, st, in, n, off);
    }
  }
  ctx_free(&c);
  free(h.v);
  free(f.v);
}
END_TEST

/* More elements than one pass of the capped grid covers, on both paths and
 * on the default stream. */
START_TEST(test_gpu_convert_grid_stride_large_n) {
  const size_t n = ((size_t)1 << 25) + 7;
  uint32_t *v = malloc(n * sizeof *v);
  ck_assert_ptr_nonnull(v);
  for (size_t i = 0; i < n; ++i) v[i] = rng_u32();
  gpu_ctx_t c;
  ctx_init(&c, 4 * (n + 4) + 4096, 0);
  check_convert(&c, DDP_DTYPE_BF16, DDP_DTYPE_F32, v, n, 0);
  check_convert(&c, DDP_DTYPE_F16, DDP_DTYPE_F32, v, n, 1);
  check_convert(&c, DDP_DTYPE_F32, DDP_DTYPE_F16, v, n, 0);
  check_convert(&c, DDP_DTYPE_BF16, DDP_DTYPE_F16, v, n, 3);
  ctx_free(&c);
  free(v);
}
END_TEST

/* Captures log output so tests can count the lines an error produced. */
static FILE *log_capture;

static void log_capture_begin(void) {
  log_capture = tmpfile();
  ck_assert_ptr_nonnull(log_capture);
  ddp_log_set_stream(log_capture);
}

static int log_capture_end(void) {
  ddp_log_set_stream(NULL);
  int lines = 0, ch;
  rewind(log_capture);
  while ((ch = fgetc(log_capture)) != EOF) lines += ch == '\n';
  fclose(log_capture);
  log_capture = NULL;
  return lines;
}

START_TEST(test_gpu_convert_invalid_args) {
  gpu_ctx_t c;
  ctx_init(&c, 4096, 1);
  CUDA_OK(cudaMemset(c.d_dst, 0xA5, c.cap));
  CUDA_OK(cudaDeviceSynchronize()); /* see settle() */
  unsigned char *d = c.d_dst, *s = c.d_src;
  log_capture_begin();
  ck_assert_int_eq(ddp_cuda_convert(d, DDP_DTYPE_I32, s, DDP_DTYPE_F32, 8, c.stream),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_convert(d, DDP_DTYPE_F32, s, DDP_DTYPE_I32, 8, c.stream),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_convert(d, (ddp_dtype_t)9, s, DDP_DTYPE_F32, 8, c.stream),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_convert(NULL, DDP_DTYPE_F16, s, DDP_DTYPE_F32, 8, c.stream),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_convert(d, DDP_DTYPE_F16, NULL, DDP_DTYPE_F32, 8, c.stream),
                   DDP_ERR_INVALID_ARG);
  /* Misaligned for the element type. */
  ck_assert_int_eq(ddp_cuda_convert(d, DDP_DTYPE_F16, s + 2, DDP_DTYPE_F32, 8, c.stream),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_convert(d + 1, DDP_DTYPE_F16, s, DDP_DTYPE_F32, 8, c.stream),
                   DDP_ERR_INVALID_ARG);
  /* Overlap, in place included. */
  ck_assert_int_eq(ddp_cuda_convert(s, DDP_DTYPE_BF16, s, DDP_DTYPE_F32, 8, c.stream),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_convert(s + 16, DDP_DTYPE_F32, s, DDP_DTYPE_F32, 8, c.stream),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(log_capture_end(), 9); /* each error logged once */

  /* n == 0: nothing to do, no buffers needed, types still checked. */
  ck_assert_int_eq(ddp_cuda_convert(NULL, DDP_DTYPE_F16, NULL, DDP_DTYPE_F32, 0, c.stream), DDP_OK);
  log_capture_begin();
  ck_assert_int_eq(ddp_cuda_convert(NULL, DDP_DTYPE_I32, NULL, DDP_DTYPE_F32, 0, c.stream),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(log_capture_end(), 1);

  /* Nothing was launched or written, and no CUDA error is pending. */
  CUDA_OK(cudaStreamSynchronize(c.stream));
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaMemcpy(c.h_out, c.d_dst, c.cap, cudaMemcpyDeviceToHost));
  ck_assert_uint_eq(first_not(c.h_out, c.cap, 0xA5), c.cap);
  ctx_free(&c);
}
END_TEST

/* ---- fill -------------------------------------------------------------- */

static uint32_t fill_expected(ddp_dtype_t t, float value) {
  switch (t) {
    case DDP_DTYPE_F32:
      return bits_of(value);
    case DDP_DTYPE_BF16:
      return ddp_f32_to_bf16(value);
    case DDP_DTYPE_F16:
      return ddp_f32_to_f16(value);
    default:
      return (uint32_t)(int32_t)value;
  }
}

static void check_fill(gpu_ctx_t *c, ddp_dtype_t t, float value, size_t n, size_t off) {
  const size_t sz = ddp_dtype_size(t);
  const size_t out_bytes = (off + n) * sz + GUARD;
  ck_assert_msg(out_bytes <= c->cap, "scratch too small");
  const uint32_t want = fill_expected(t, value);
  static const unsigned char poisons[2] = {0xA5, 0x5A};
  for (int p = 0; p < 2; ++p) {
    CUDA_OK(cudaMemset(c->d_dst, poisons[p], out_bytes));
    CUDA_OK(cudaDeviceSynchronize()); /* see settle() */
    ddp_status_t st = ddp_cuda_fill(c->d_dst + off * sz, t, value, n, c->stream);
    ck_assert_msg(st == DDP_OK, "ddp_cuda_fill(%s, %g, n %zu, off %zu) = %s", ddp_dtype_name(t),
                  (double)value, n, off, ddp_status_name(st));
    CUDA_OK(cudaStreamSynchronize(c->stream));
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(c->h_out, c->d_dst, out_bytes, cudaMemcpyDeviceToHost));
    size_t bad = first_not(c->h_out, off * sz, poisons[p]);
    ck_assert_msg(bad == off * sz, "fill %s n %zu off %zu: wrote before dst", ddp_dtype_name(t), n,
                  off);
    bad = first_not(c->h_out + (off + n) * sz, GUARD, poisons[p]);
    ck_assert_msg(bad == GUARD, "fill %s n %zu off %zu: wrote past the end", ddp_dtype_name(t), n,
                  off);
    for (size_t i = 0; i < n; ++i) {
      uint32_t got = elem_at(c->h_out + off * sz, t, i);
      if (got != want)
        ck_abort_msg("fill %s with %g (0x%08X), n %zu, off %zu: [%zu] = 0x%X, want 0x%X",
                     ddp_dtype_name(t), (double)value, bits_of(value), n, off, i, got, want);
    }
  }
}

START_TEST(test_gpu_convert_fill_values) {
  static const float floats[] = {0.0f,  -0.0f,   1.5f,    -3.75f,   65504.0f, 65520.0f,
                                 1e-8f, -1e-40f, 3.3e38f, 0x1p-24f, 0.1f};
  static const float ints[] = {0.0f, -0.0f, 1.5f, -3.75f, 2147483520.0f, -2147483648.0f, 0.999f};
  gpu_ctx_t c;
  ctx_init(&c, 4 * 100003 + 4096, 1);
  for (int a = 0; a < 3; ++a) {
    for (size_t k = 0; k < sizeof floats / sizeof floats[0]; ++k) {
      check_fill(&c, k_float_types[a], floats[k], 100003, 0);
      check_fill(&c, k_float_types[a], floats[k], 100003, 1);
    }
    check_fill(&c, k_float_types[a], INFINITY, 1001, 0);
    check_fill(&c, k_float_types[a], -INFINITY, 1001, 0);
    check_fill(&c, k_float_types[a], NAN, 1001, 0);
    check_fill(&c, k_float_types[a], -NAN, 1001, 3);
  }
  for (size_t k = 0; k < sizeof ints / sizeof ints[0]; ++k) {
    check_fill(&c, DDP_DTYPE_I32, ints[k], 100003, 0);
    check_fill(&c, DDP_DTYPE_I32, ints[k], 100003, 1);
  }
  ctx_free(&c);
}
END_TEST

START_TEST(test_gpu_convert_fill_short_lengths) {
  static const ddp_dtype_t types[] = {DDP_DTYPE_F32, DDP_DTYPE_BF16, DDP_DTYPE_F16, DDP_DTYPE_I32};
  gpu_ctx_t c;
  ctx_init(&c, 1 << 16, 0);
  for (int a = 0; a < 4; ++a)
    for (size_t n = 1; n <= 40; ++n)
      for (size_t off = 0; off < 8; ++off) check_fill(&c, types[a], -7.0f, n, off);
  ctx_free(&c);
}
END_TEST

START_TEST(test_gpu_convert_fill_invalid_args) {
  gpu_ctx_t c;
  ctx_init(&c, 4096, 1);
  unsigned char *d = c.d_dst;
  log_capture_begin();
  ck_assert_int_eq(ddp_cuda_fill(d, (ddp_dtype_t)4, 1.0f, 8, c.stream), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_fill(d, DDP_DTYPE_I32, NAN, 8, c.stream), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_fill(d, DDP_DTYPE_I32, INFINITY, 8, c.stream), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_fill(d, DDP_DTYPE_I32, 2147483648.0f, 8, c.stream),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_fill(d, DDP_DTYPE_I32, -2147483904.0f, 8, c.stream),
                   DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_fill(NULL, DDP_DTYPE_F32, 1.0f, 8, c.stream), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_fill(d + 2, DDP_DTYPE_F32, 1.0f, 8, c.stream), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(ddp_cuda_fill(d + 1, DDP_DTYPE_BF16, 1.0f, 8, c.stream), DDP_ERR_INVALID_ARG);
  ck_assert_int_eq(log_capture_end(), 8);
  ck_assert_int_eq(ddp_cuda_fill(NULL, DDP_DTYPE_F16, 1.0f, 0, c.stream), DDP_OK);
  CUDA_OK(cudaStreamSynchronize(c.stream));
  CUDA_OK(cudaGetLastError());
  ctx_free(&c);
}
END_TEST

/* ---- runner ------------------------------------------------------------ */

static Suite *gpu_convert_suite(void) {
  Suite *s = suite_create("gpu_convert");
  TCase *tc = tcase_create("convert");
  tcase_add_test(tc, test_gpu_convert_widen_bf16_exhaustive);
  tcase_add_test(tc, test_gpu_convert_widen_f16_exhaustive);
  tcase_add_test(tc, test_gpu_convert_narrow_bf16);
  tcase_add_test(tc, test_gpu_convert_narrow_f16);
  tcase_add_test(tc, test_gpu_convert_all_pairs_and_offsets);
  tcase_add_test(tc, test_gpu_convert_short_lengths);
  tcase_add_test(tc, test_gpu_convert_grid_stride_large_n);
  tcase_add_test(tc, test_gpu_convert_invalid_args);
  suite_add_tcase(s, tc);

  tc = tcase_create("fill");
  tcase_add_test(tc, test_gpu_convert_fill_values);
  tcase_add_test(tc, test_gpu_convert_fill_short_lengths);
  tcase_add_test(tc, test_gpu_convert_fill_invalid_args);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    printf("SKIP: check_gpu_convert needs a CUDA device (%s)\n",
           err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount reports 0 devices");
    return 77;
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    printf("check_gpu_convert: device 0 is %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);

  SRunner *sr = srunner_create(gpu_convert_suite());
  srunner_set_fork_status(sr, CK_NOFORK); /* a CUDA context does not survive fork */
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
