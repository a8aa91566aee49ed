/* The conv op table's shape checks, one copy for every backend (see
 * conv_check.h). */
#include <config.h>

#include "backend/conv_check.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>

#include "ddptrain/check.h"

ddp_status_t ddp_conv_check_shape(const char *op, const ddp_conv_shape_t *sh) {
  if (!sh) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: no shape given", op);
  if (sh->N < 1 || sh->H < 1 || sh->W < 1 || sh->C < 1 || sh->K < 1 || sh->R < 1 || sh->S < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "%s: every size must be positive (N=%d H=%d W=%d C=%d K=%d R=%d S=%d)", op, sh->N,
             sh->H, sh->W, sh->C, sh->K, sh->R, sh->S);
  if (sh->stride < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: stride %d must be at least 1", op, sh->stride);
  if (sh->pad < 0 || sh->pad >= sh->R || sh->pad >= sh->S)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: padding %d must be in [0, kernel size) for a %dx%d kernel",
             op, sh->pad, sh->R, sh->S);
  const int OH = ddp_conv_out_h(sh), OW = ddp_conv_out_w(sh);
  if (OH < 1 || OW < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: the %dx%d kernel does not fit the %dx%d input padded by %d",
             op, sh->R, sh->S, sh->H, sh->W, sh->pad);
  const int64_t in = (int64_t)sh->N * sh->H * sh->W * sh->C;
  const int64_t out = (int64_t)sh->N * OH * OW * sh->K;
  const int64_t w = (int64_t)sh->K * sh->R * sh->S * sh->C;
  if (in > INT_MAX || out > INT_MAX || w > INT_MAX)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "%s: tensors of %lld (input), %lld (output), %lld (weights) elements exceed %d", op,
             (long long)in, (long long)out, (long long)w, INT_MAX);
  return DDP_OK;
}

ddp_status_t ddp_bn_check_shape(const char *op, const ddp_bn_shape_t *sh, int training) {
  if (!sh) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: no shape given", op);
  if (sh->N < 1 || sh->H < 1 || sh->W < 1 || sh->C < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: every size must be positive (N=%d H=%d W=%d C=%d)", op,
             sh->N, sh->H, sh->W, sh->C);
  const int64_t M = (int64_t)sh->N * sh->H * sh->W;
  if (M * sh->C > INT_MAX)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: %lld elements exceed %d", op, (long long)(M * sh->C),
             INT_MAX);
  /* One value per channel has no variance to normalise by, and its running
   * variance's unbiased estimate divides by M - 1 = 0 (PyTorch refuses it
   * too). */
  if (training && M < 2)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: training needs at least 2 values per channel (N*H*W = %lld)",
             op, (long long)M);
  if (!(sh->eps > 0 && isfinite(sh->eps)))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: eps %g must be positive and finite", op, (double)sh->eps);
  if (!(sh->momentum >= 0 && sh->momentum <= 1))
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: momentum %g must be in [0, 1]", op, (double)sh->momentum);
  return DDP_OK;
}

ddp_status_t ddp_pool_check_shape(const char *op, const ddp_pool_shape_t *sh) {
  if (!sh) DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: no shape given", op);
  if (sh->N < 1 || sh->H < 1 || sh->W < 1 || sh->C < 1 || sh->kernel < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: every size must be positive (N=%d H=%d W=%d C=%d kernel=%d)",
             op, sh->N, sh->H, sh->W, sh->C, sh->kernel);
  if (sh->stride < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: stride %d must be at least 1", op, sh->stride);
  /* A window of padding alone would have no maximum. */
  if (sh->pad < 0 || sh->pad > sh->kernel / 2)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: padding %d must be in [0, kernel / 2] for kernel %d", op,
             sh->pad, sh->kernel);
  if (ddp_pool_out_h(sh) < 1 || ddp_pool_out_w(sh) < 1)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: the %dx%d window does not fit the %dx%d input padded by %d",
             op, sh->kernel, sh->kernel, sh->H, sh->W, sh->pad);
  if ((int64_t)sh->N * sh->H * sh->W * sh->C > INT_MAX)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: %lld input elements exceed %d", op,
             (long long)sh->N * sh->H * sh->W * sh->C, INT_MAX);
  return DDP_OK;
}

ddp_status_t ddp_bn_relu_bwd_check(void *dinp, const float *dgamma, const float *dbeta,
                                   const void *dout, const void *inp, const void *out,
                                   const float *gamma, const float *beta, const float *save_a,
                                   const float *save_b, const ddp_bn_shape_t *sh) {
  static const char op[] = "batch_norm_relu_bwd";
  DDP_CHECK(ddp_bn_check_shape(op, sh, 1));
  if (!dinp || !dgamma || !dbeta || !dout || !inp || !out || !gamma || !beta || !save_a || !save_b)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "%s: dinp, dgamma, dbeta, dout, inp, out, gamma, beta, save_a and save_b are required",
             op);
  if (dinp == dout || dinp == inp || dinp == out)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "%s: dinp may not alias dout, inp or out", op);
  return DDP_OK;
}
