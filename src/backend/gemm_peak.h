/* The timing loop behind every start-up GEMM rate (internal): the backend's
 * (gemm_peak.c) and oneDNN's on the CPU (cpu_dnnl.c) time their products
 * the same way, so the two rates compare. */
#ifndef DDPTRAIN_BACKEND_GEMM_PEAK_H
#define DDPTRAIN_BACKEND_GEMM_PEAK_H

#include <stdint.h>

#include "ddptrain/status.h"

/* One n x n x n product (or, for `sync`, waiting until the products
 * issued so far have finished), on ctx. */
typedef ddp_status_t (*ddp_gemm_step_fn)(void *ctx);

/* One warm-up product, then products in windows of 4 for at least
 * `seconds`; *gflops is the fastest window's rate. sync (may be NULL: the
 * products finish when they return) ends each window, so an asynchronous
 * device stays busy while the host only reads the clock between windows.
 * The fastest window, not the mean: a peak is what the hardware sustains
 * when undisturbed, and on shared or virtual machines the mean mixes in
 * other tenants. */
ddp_status_t ddp_gemm_fastest_window(ddp_gemm_step_fn product, ddp_gemm_step_fn sync, void *ctx,
                                     int64_t n, double seconds, double *gflops);

#endif
