/* ddptrain: the whole public API in one include. What is installed is what a
 * program needs to define a model and run the trainer on it (see
 * docs/design.md §3, "Models"): the model interface and its parameter table,
 * the batch kinds, the backend and its kernels, flags, status and logging.
 * The trainer's own machinery (sampler, reducer, communicators, optimizer,
 * checkpoints) is internal and may change between versions. */
#ifndef DDPTRAIN_DDPTRAIN_H
#define DDPTRAIN_DDPTRAIN_H
#include "ddptrain/backend.h"
#include "ddptrain/check.h"
#include "ddptrain/data.h"
#include "ddptrain/dtype.h"
#include "ddptrain/log.h"
#include "ddptrain/main.h"
#include "ddptrain/model.h"
#include "ddptrain/nn.h"
#include "ddptrain/options.h"
#include "ddptrain/param.h"
#include "ddptrain/rng.h"
#include "ddptrain/safetensors.h"
#include "ddptrain/status.h"
#include "ddptrain/version.h"
#endif
