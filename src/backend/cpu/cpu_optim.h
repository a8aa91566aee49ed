/* The CPU backend's optimizer (internal): its ops table, for cpu_backend.c,
 * and what its two files share: cpu_optim.c (the fused step, the gradient
 * norm, the plan and the table) and cpu_grad_epilogue.c (the half
 * all-reduce's epilogue and the in-order sum of its partials).
 *
 * Above all they share the layout of a sum of squares: blocks of
 * DDP_CPU_OPTIM_BLOCK elements, each squared into DDP_CPU_OPTIM_LANES
 * double partial sums that are added in one fixed tree at the end. One
 * bucket's epilogue and ddp_optim_grad_sumsq_cpu both go through the
 * helpers below, which is what makes the bucket's partial equal that
 * function's sum bit for bit (as optim/optim.h promises). */
#ifndef DDPTRAIN_CPU_OPTIM_H
#define DDPTRAIN_CPU_OPTIM_H

#include <stddef.h>

#include "ddptrain/backend.h"
#include "optim/optim_ops.h"

extern const ddp_optim_ops_t ddp_optim_cpu_ops;

enum {
  DDP_CPU_OPTIM_BLOCK = 64, /* elements per inner loop: a multiple of every vector width */
  DDP_CPU_OPTIM_LANES = 8   /* partial sums of a double-precision sum of squares */
};

/* Sum of squares over len elements into the lane sums; element k of a
 * block always lands in lane k % DDP_CPU_OPTIM_LANES (blocks start at
 * multiples of DDP_CPU_OPTIM_BLOCK), so the order of additions is fixed for
 * a given layout. */
static inline void ddp_cpu_optim_sumsq_lanes(double acc[DDP_CPU_OPTIM_LANES],
                                             const float *restrict x, size_t len) {
  enum { L = DDP_CPU_OPTIM_LANES };
  size_t k = 0;
  for (; k + L <= len; k += L)
    for (size_t j = 0; j < L; ++j) acc[j] += (double)x[k + j] * (double)x[k + j];
  for (size_t j = 0; k + j < len; ++j) acc[j] += (double)x[k + j] * (double)x[k + j];
}

static inline double ddp_cpu_optim_lanes_total(const double acc[DDP_CPU_OPTIM_LANES]) {
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* out = scale * g, one fp32 multiply per element (the gradient as the step
 * sees it). */
static inline void ddp_cpu_optim_scale_block(float *restrict out, const float *restrict g,
                                             float scale, size_t len) {
  for (size_t i = 0; i < len; ++i) out[i] = scale * g[i];
}

/* The public CPU twins dereference their buffers, so they refuse a NULL
 * backend (DDP_ERR_INVALID_ARG) and one whose memory is not host memory
 * (DDP_ERR_UNSUPPORTED, naming it); `what` prefixes the message. */
ddp_status_t ddp_cpu_optim_require_host(const ddp_backend_t *be, const char *what);

/* The table's epilogue entries (cpu_grad_epilogue.c): the twins' work with
 * the arguments already checked. */
ddp_status_t ddp_cpu_optim_grad_epilogue(ddp_backend_t *be, float *dst, const void *src,
                                         ddp_dtype_t src_dtype, size_t n, float scale,
                                         double *partial, ddp_stream_t s);
ddp_status_t ddp_cpu_optim_sum_partials(ddp_backend_t *be, float *sumsq, const double *partials,
                                        int n, ddp_stream_t s);

#endif
