/* The CUDA backend's optimizer table (internal; cuda_backend.c points the
 * backend's ops at it). Its entries are called by the backend-neutral entry
 * points in src/optim/optim.c, which validate the arguments first. */
#ifndef DDPTRAIN_CUDA_OPTIM_H
#define DDPTRAIN_CUDA_OPTIM_H

#include "optim/optim_ops.h"

extern const ddp_optim_ops_t ddp_optim_cuda_ops;

#endif
