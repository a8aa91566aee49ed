/* The shape checks of the conv op table (ddptrain/conv.h), shared by every
 * backend so the CPU ops and their GPU twins refuse the same shapes with the
 * same message: everything a library (oneDNN, cuDNN) would refuse with a
 * bare "invalid argument", refused here naming the op and the sizes that
 * are wrong. Tensors are limited to INT_MAX elements because the GPU kernels
 * index with int. */
#ifndef DDPTRAIN_BACKEND_CONV_CHECK_H
#define DDPTRAIN_BACKEND_CONV_CHECK_H

#include "ddptrain/conv.h"

ddp_status_t ddp_conv_check_shape(const char *op, const ddp_conv_shape_t *sh);
/* training: statistics of the batch are taken (N*H*W >= 2). */
ddp_status_t ddp_bn_check_shape(const char *op, const ddp_bn_shape_t *sh, int training);
ddp_status_t ddp_pool_check_shape(const char *op, const ddp_pool_shape_t *sh);
/* bn_relu_bwd's arguments (shape, required pointers, aliasing), checked
 * before the op touches anything: its composition masks dout in place, so
 * a refusal after that would leave dout half-written. */
ddp_status_t ddp_bn_relu_bwd_check(void *dinp, const float *dgamma, const float *dbeta,
                                   const void *dout, const void *inp, const void *out,
                                   const float *gamma, const float *beta, const float *save_a,
                                   const float *save_b, const ddp_bn_shape_t *sh);

#endif
