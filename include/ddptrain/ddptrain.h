/* ddptrain: the whole public API in one include. */
#ifndef DDPTRAIN_DDPTRAIN_H
#define DDPTRAIN_DDPTRAIN_H

#include "ddptrain/amp.h"
#include "ddptrain/arena.h"
#include "ddptrain/backend.h"
#include "ddptrain/check.h"
#include "ddptrain/ckpt.h"
#include "ddptrain/comm.h"
#include "ddptrain/dist.h"
#include "ddptrain/data.h"
#include "ddptrain/dtype.h"
#include "ddptrain/env.h"
#include "ddptrain/loader.h"
#include "ddptrain/model.h"
#include "ddptrain/nn.h"
#include "ddptrain/optim.h"
#include "ddptrain/reducer.h"
#include "ddptrain/log.h"
#include "ddptrain/options.h"
#include "ddptrain/param.h"
#include "ddptrain/rng.h"
#include "ddptrain/safetensors.h"
#include "ddptrain/sampler.h"
#include "ddptrain/status.h"
#include "ddptrain/tensor.h"
#include "ddptrain/trainer.h"
#include "ddptrain/version.h"

#endif
