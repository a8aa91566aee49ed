/* Batch normalization in parts on the CPU (ddptrain/conv.h's bn_reduce_fwd,
 * bn_apply_fwd, bn_reduce_bwd, bn_apply_bwd), fp32 NHWC.
 *
 * Synchronised batch norm (--sync-bn) needs each rank's per-channel sums
 * between the passes, so the ranks can add them up and normalise by the
 * statistics of the whole global batch; oneDNN's primitive computes and
 * uses its statistics in one call and cannot be split there, so these are
 * kernels of ours (on the GPU too). With one rank, or with the ranks' sums
 * added, they compute what the library's bn_fwd / bn_bwd compute over the
 * whole batch.
 *
 * Every sum runs over the positions in order, per channel, in double, so a
 * rank's partial sums are bit-reproducible and the variance's second pass
 * loses nothing to cancellation. Channels go in blocks whose accumulators
 * and coefficients live on the stack: nothing allocates, and every op
 * validates all its arguments before writing anything. */
#include <config.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/conv_check.h"
#include "backend/cpu/cpu_conv.h"
#include "ddptrain/check.h"

/* Channels per block, and the chunks of 8 with restrict pointers in which
 * the per-position loops run so that -O2 vectorises them (see
 * cpu_conv_ops.c). */
#define CHANNEL_BLOCK 256
#define CHUNK 8

/* acc[j] += (row[j] - mu[j])^2, j < n, in double. */
static void add_sq_dev(double *restrict acc, const float *restrict row, const double *restrict mu,
                       size_t n) {
  size_t j = 0;
  for (; j + CHUNK <= n; j += CHUNK)
    for (size_t k = 0; k < CHUNK; ++k) {
      const double d = row[j + k] - mu[j + k];
      acc[j + k] += d * d;
    }
  for (; j < n; ++j) {
    const double d = row[j] - mu[j];
    acc[j] += d * d;
  }
}

/* sdy[j] += dy[j], sdyx[j] += dy[j] (x[j] - mu[j]), j < n, in double. */
static void add_dy_dev(double *restrict sdy, double *restrict sdyx, const float *restrict dy,
                       const float *restrict x, const double *restrict mu, size_t n) {
  size_t j = 0;
  for (; j + CHUNK <= n; j += CHUNK)
    for (size_t k = 0; k < CHUNK; ++k) {
      sdy[j + k] += dy[j + k];
      sdyx[j + k] += (double)dy[j + k] * (x[j + k] - mu[j + k]);
    }
  for (; j < n; ++j) {
    sdy[j] += dy[j];
    sdyx[j] += (double)dy[j] * (x[j] - mu[j]);
  }
}

/* y[j] = x[j] scale[j] + shift[j], j < n. */
static void scale_shift(float *restrict y, const float *restrict x, const float *restrict scale,
                        const float *restrict shift, size_t n) {
  size_t j = 0;
  for (; j + CHUNK <= n; j += CHUNK)
    for (size_t k = 0; k < CHUNK; ++k) y[j + k] = x[j + k] * scale[j + k] + shift[j + k];
  for (; j < n; ++j) y[j] = x[j] * scale[j] + shift[j];
}

/* dx[j] = a[j] (dy[j] - k1[j] - (x[j] - mu[j]) k2[j]), j < n. */
static void bwd_row(float *restrict dx, const float *restrict dy, const float *restrict x,
                    const float *restrict a, const float *restrict k1, const float *restrict k2,
                    const float *restrict mu, size_t n) {
  size_t j = 0;
  for (; j + CHUNK <= n; j += CHUNK)
    for (size_t k = 0; k < CHUNK; ++k)
      dx[j + k] = a[j + k] * (dy[j + k] - k1[j + k] - (x[j + k] - mu[j + k]) * k2[j + k]);
  for (; j < n; ++j) dx[j] = a[j] * (dy[j] - k1[j] - (x[j] - mu[j]) * k2[j]);
}

static ddp_status_t check_shape(const ddp_bn_shape_t *sh, const char *op) {
  if (!sh) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: no shape given", op);
  if (sh->N < 1 || sh->H < 1 || sh->W < 1 || sh->C < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: every size must be positive (N=%d H=%d W=%d C=%d)", op,
             sh->N, sh->H, sh->W, sh->C);
  return DDP_OK;
}

static ddp_status_t check_eps(const ddp_bn_shape_t *sh, const char *op) {
  if (!(sh->eps > 0 && isfinite(sh->eps)))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: eps %g must be positive and finite", op, (double)sh->eps);
  return DDP_OK;
}

/* M_total counts every rank's positions, this rank's among them; training
 * statistics need two of them (the unbiased variance divides by M_total -
 * 1, and one value has no variance to normalise by). */
static ddp_status_t check_m_total(const ddp_bn_shape_t *sh, int64_t M_total, int training,
                                  const char *op) {
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  if (M_total < M)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "%s: M_total %lld is fewer than this rank's own N*H*W = %lld positions", op,
             (long long)M_total, (long long)M);
  if (training && M_total < 2)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "%s: training needs at least 2 values per channel over all ranks (M_total = %lld)", op,
             (long long)M_total);
  return DDP_OK;
}

static inline size_t positions(const ddp_bn_shape_t *sh) {
  return (size_t)sh->N * (size_t)sh->H * (size_t)sh->W;
}

static inline size_t block_len(size_t c0, size_t c) {
  return c - c0 < CHANNEL_BLOCK ? c - c0 : CHANNEL_BLOCK;
}

ddp_status_t ddp_cpu_bn_reduce_fwd(ddp_backend_t *be, ddp_dtype_t dt, float *sums, const void *inp,
                                   const float *mean, const ddp_bn_shape_t *sh, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_conv_ops_admit(be, dt, "bn_reduce_fwd"));
  DDP_CHECK(check_shape(sh, "bn_reduce_fwd"));
  if (!sums || !inp) DDP_FAIL(DDP_ERR_INVALID_ARG, "bn_reduce_fwd: sums and inp are required");
  const float *x = inp;
  const size_t M = positions(sh), c = (size_t)sh->C;
  double acc[CHANNEL_BLOCK], mu[CHANNEL_BLOCK];
  for (size_t c0 = 0; c0 < c; c0 += CHANNEL_BLOCK) {
    const size_t nc = block_len(c0, c);
    for (size_t j = 0; j < nc; ++j) {
      acc[j] = 0.0;
      mu[j] = mean ? mean[c0 + j] : 0.0;
    }
    if (mean)
      for (size_t m = 0; m < M; ++m) add_sq_dev(acc, x + m * c + c0, mu, nc);
    else
      for (size_t m = 0; m < M; ++m) ddp_cpu_add_row_f64(acc, x + m * c + c0, nc);
    for (size_t j = 0; j < nc; ++j) sums[c0 + j] = (float)acc[j];
  }
  return DDP_OK;
}

ddp_status_t ddp_cpu_bn_apply_fwd(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *running_mean,
                                  float *running_var, const void *inp, const float *mean,
                                  const float *var, const float *gamma, const float *beta,
                                  int64_t M_total, const ddp_bn_shape_t *sh, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_conv_ops_admit(be, dt, "bn_apply_fwd"));
  DDP_CHECK(check_shape(sh, "bn_apply_fwd"));
  DDP_CHECK(check_eps(sh, "bn_apply_fwd"));
  if (!out || !inp || !mean || !var || !gamma || !beta)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "bn_apply_fwd: out, inp, mean, var, gamma and beta are required");
  if (!running_mean != !running_var)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "bn_apply_fwd: running_mean and running_var go together (one is NULL)");
  const int training = running_mean != NULL;
  if (training && !(sh->momentum >= 0 && sh->momentum <= 1))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "bn_apply_fwd: momentum %g must be in [0, 1]",
             (double)sh->momentum);
  DDP_CHECK(check_m_total(sh, M_total, training, "bn_apply_fwd"));
  float *y = out;
  const float *x = inp;
  const size_t M = positions(sh), c = (size_t)sh->C;
  /* y = x scale + shift with scale = gamma istd, shift = beta - mean scale:
   * one multiply-add per element. */
  float scale[CHANNEL_BLOCK], shift[CHANNEL_BLOCK];
  for (size_t c0 = 0; c0 < c; c0 += CHANNEL_BLOCK) {
    const size_t nc = block_len(c0, c);
    for (size_t j = 0; j < nc; ++j) {
      const double istd = 1.0 / sqrt((double)var[c0 + j] + (double)sh->eps);
      scale[j] = (float)(gamma[c0 + j] * istd);
      shift[j] = (float)(beta[c0 + j] - mean[c0 + j] * (gamma[c0 + j] * istd));
    }
    for (size_t m = 0; m < M; ++m) scale_shift(y + m * c + c0, x + m * c + c0, scale, shift, nc);
  }
  if (training) {
    const double mom = sh->momentum, unbias = (double)M_total / (double)(M_total - 1);
    for (size_t j = 0; j < c; ++j) {
      running_mean[j] = (float)((1 - mom) * running_mean[j] + mom * mean[j]);
      running_var[j] = (float)((1 - mom) * running_var[j] + mom * var[j] * unbias);
    }
  }
  return DDP_OK;
}

ddp_status_t ddp_cpu_bn_reduce_bwd(ddp_backend_t *be, ddp_dtype_t dt, float *sums, const void *dout,
                                   const void *inp, const float *mean, const ddp_bn_shape_t *sh,
                                   ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_conv_ops_admit(be, dt, "bn_reduce_bwd"));
  DDP_CHECK(check_shape(sh, "bn_reduce_bwd"));
  if (!sums || !dout || !inp || !mean)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "bn_reduce_bwd: sums, dout, inp and mean are required");
  const float *dy = dout, *x = inp;
  const size_t M = positions(sh), c = (size_t)sh->C;
  double sum_dy[CHANNEL_BLOCK], sum_dyx[CHANNEL_BLOCK], mu[CHANNEL_BLOCK];
  for (size_t c0 = 0; c0 < c; c0 += CHANNEL_BLOCK) {
    const size_t nc = block_len(c0, c);
    for (size_t j = 0; j < nc; ++j) {
      sum_dy[j] = sum_dyx[j] = 0.0;
      mu[j] = mean[c0 + j];
    }
    for (size_t m = 0; m < M; ++m)
      add_dy_dev(sum_dy, sum_dyx, dy + m * c + c0, x + m * c + c0, mu, nc);
    for (size_t j = 0; j < nc; ++j) {
      sums[c0 + j] = (float)sum_dy[j];
      sums[c + c0 + j] = (float)sum_dyx[j];
    }
  }
  return DDP_OK;
}

ddp_status_t ddp_cpu_bn_apply_bwd(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                                  float *dbeta, const void *dout, const void *inp,
                                  const float *mean, const float *var, const float *gamma,
                                  const float *g, const float *l, int64_t M_total,
                                  const ddp_bn_shape_t *sh, int accumulate, ddp_stream_t s) {
  DDP_CHECK(ddp_cpu_conv_ops_admit(be, dt, "bn_apply_bwd"));
  DDP_CHECK(check_shape(sh, "bn_apply_bwd"));
  DDP_CHECK(check_eps(sh, "bn_apply_bwd"));
  if (!dinp || !dgamma || !dbeta || !dout || !inp || !mean || !var || !gamma || !g || !l)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "bn_apply_bwd: dinp, dgamma, dbeta, dout, inp, mean, var, gamma, g and l are "
             "required");
  DDP_CHECK(check_m_total(sh, M_total, 1, "bn_apply_bwd"));
  float *dx = dinp;
  const float *dy = dout, *x = inp;
  const size_t M = positions(sh), c = (size_t)sh->C;
  /* dinp = a (dy - k1 - (x - mean) k2), with a = gamma istd, k1 = g[c] /
   * M_total, k2 = istd^2 g[C+c] / M_total, per channel in double first. */
  float a[CHANNEL_BLOCK], k1[CHANNEL_BLOCK], k2[CHANNEL_BLOCK], mu[CHANNEL_BLOCK];
  const double Mt = (double)M_total;
  for (size_t c0 = 0; c0 < c; c0 += CHANNEL_BLOCK) {
    const size_t nc = block_len(c0, c);
    for (size_t j = 0; j < nc; ++j) {
      const size_t ch = c0 + j;
      const double istd = 1.0 / sqrt((double)var[ch] + (double)sh->eps);
      a[j] = (float)(gamma[ch] * istd);
      k1[j] = (float)(g[ch] / Mt);
      k2[j] = (float)(istd * istd * g[c + ch] / Mt);
      mu[j] = mean[ch];
    }
    for (size_t m = 0; m < M; ++m)
      bwd_row(dx + m * c + c0, dy + m * c + c0, x + m * c + c0, a, k1, k2, mu, nc);
  }
  /* The parameter gradients from this rank's own sums: the reducer adds
   * the ranks' gradients as for any parameter. */
  for (size_t ch = 0; ch < c; ++ch) {
    const double istd = 1.0 / sqrt((double)var[ch] + (double)sh->eps);
    const float dgam = (float)(l[c + ch] * istd), dbet = l[ch];
    dgamma[ch] = accumulate ? dgamma[ch] + dgam : dgam;
    dbeta[ch] = accumulate ? dbeta[ch] + dbet : dbet;
  }
  return DDP_OK;
}

/* ---- the table's bn_fwd / bn_bwd, composed from the parts ------------------ */

/* oneDNN 2.6's batch norm accumulates its statistics and its backward sums in
 * fp32. At a ResNet's sizes that costs accuracy the parts (double sums) keep:
 * against a double reference, N 128 x 32 x 32 (M = 131072 per channel) of
 * inputs around 3.5, the library's dgamma is off by 4e-4 relative and its
 * dinp by 1e-5 rms, the parts' by 2e-6 and 4e-8; the gap grows with M, and
 * over a few training steps it became 5% of an update. The parts are also
 * no slower here. So the CPU table computes batch norm with them: one
 * rank's statistics are the parts with M_total = this rank's M, and the
 * saves are the mean and the biased variance, as the library's were. */
enum { BN_EXACT_MAX_C = 4096 }; /* the backward's sums live on the stack */

ddp_status_t ddp_cpu_bn_fwd_exact(ddp_backend_t *be, ddp_dtype_t dt, void *out, float *save_a,
                                  float *save_b, float *running_mean, float *running_var,
                                  const void *inp, const float *gamma, const float *beta,
                                  const ddp_bn_shape_t *sh, int training, ddp_stream_t s) {
  DDP_CHECK(ddp_bn_check_shape("batch_norm_fwd", sh, training));
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  if (!training)
    return ddp_cpu_bn_apply_fwd(be, dt, out, NULL, NULL, inp, running_mean, running_var, gamma,
                                beta, M, sh, s);
  if (!save_a || !save_b)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "batch_norm_fwd: training needs save_a and save_b");
  DDP_CHECK(ddp_cpu_bn_reduce_fwd(be, dt, save_a, inp, NULL, sh, s));
  for (int c = 0; c < sh->C; ++c) save_a[c] = (float)((double)save_a[c] / (double)M);
  DDP_CHECK(ddp_cpu_bn_reduce_fwd(be, dt, save_b, inp, save_a, sh, s));
  for (int c = 0; c < sh->C; ++c) save_b[c] = (float)((double)save_b[c] / (double)M);
  return ddp_cpu_bn_apply_fwd(be, dt, out, running_mean, running_var, inp, save_a, save_b, gamma,
                              beta, M, sh, s);
}

ddp_status_t ddp_cpu_bn_bwd_exact(ddp_backend_t *be, ddp_dtype_t dt, void *dinp, float *dgamma,
                                  float *dbeta, const void *dout, const void *inp,
                                  const float *gamma, const float *save_a, const float *save_b,
                                  const ddp_bn_shape_t *sh, int accumulate, ddp_stream_t s) {
  DDP_CHECK(ddp_bn_check_shape("batch_norm_bwd", sh, 1));
  if (sh->C > BN_EXACT_MAX_C) /* wider than any ResNet: the library's backward */
    return ddp_cpu_bn_bwd(be, dt, dinp, dgamma, dbeta, dout, inp, gamma, save_a, save_b, sh,
                          accumulate, s);
  float sums[2 * BN_EXACT_MAX_C];
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  DDP_CHECK(ddp_cpu_bn_reduce_bwd(be, dt, sums, dout, inp, save_a, sh, s));
  return ddp_cpu_bn_apply_bwd(be, dt, dinp, dgamma, dbeta, dout, inp, save_a, save_b, gamma, sums,
                              sums, M, sh, accumulate, s);
}
