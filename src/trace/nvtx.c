/* NVTX ranges behind --nvtx: see trace/nvtx.h. */
#include <config.h>

#include "trace/nvtx.h"

#include <stdarg.h>
#include <stdio.h>

#include "ddptrain/check.h"

#if DDP_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

int ddp_nvtx_on = 0;

ddp_status_t ddp_nvtx_enable(int on) {
#if DDP_HAVE_CUDA
  ddp_nvtx_on = on != 0;
  return DDP_OK;
#else
  if (on)
    DDP_FAIL(DDP_ERR_UNSUPPORTED,
             "--nvtx on: this build has no CUDA, and NVTX ranges come with the CUDA toolkit "
             "(reconfigure with --with-cuda)");
  ddp_nvtx_on = 0;
  return DDP_OK;
#endif
}

int ddp_nvtx_enabled(void) {
  return ddp_nvtx_on;
}

void ddp_nvtx_push_impl(const char *fmt, ...) {
  char name[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
#if DDP_HAVE_CUDA
  nvtxRangePushA(name);
#endif
}

void ddp_nvtx_pop_impl(void) {
#if DDP_HAVE_CUDA
  nvtxRangePop();
#endif
}
