/* The CPU backend's convolutional-network op table (ddptrain/conv.h,
 * be->ops->conv): convolution, library batch norm and max pooling through
 * oneDNN (cpu_conv.c, cpu_conv_bn.c, cpu_conv_pool.c), the rest on kernels
 * of ours (cpu_conv_ops.c). Without oneDNN in the build the table still
 * exists: its oneDNN slots refuse with DDP_ERR_UNSUPPORTED naming what is
 * missing, and the kernels of ours work regardless, so a model can tell an
 * absent op from an absent table. */
#include <config.h>

#include "backend/cpu/cpu_conv.h"
#include "backend/cpu/cpu_dnnl.h"

/* The primitives are cached process-wide (cpu_dnnl.h); a backend's shutdown
 * frees them. Another CPU backend of the same process that still runs only
 * rebuilds what it needs on its next call. */
static void cpu_conv_release(ddp_backend_t *be) {
  (void)be;
  ddp_cpu_dnnl_cache_clear();
}

const ddp_conv_ops_t ddp_conv_cpu_ops = {
    .conv_fwd = ddp_cpu_conv_fwd,
    .conv_bwd_data = ddp_cpu_conv_bwd_data,
    .conv_bwd_weights = ddp_cpu_conv_bwd_weights,
    .conv_prepare = ddp_cpu_conv_prepare,
    .bn_fwd = ddp_cpu_bn_fwd,
    .bn_bwd = ddp_cpu_bn_bwd,
    .bn_prepare = ddp_cpu_bn_prepare,
    .maxpool_workspace_bytes = ddp_cpu_maxpool_workspace_bytes,
    .maxpool_fwd = ddp_cpu_maxpool_fwd,
    .maxpool_bwd = ddp_cpu_maxpool_bwd,
    .bn_reduce_fwd = ddp_cpu_bn_reduce_fwd,
    .bn_apply_fwd = ddp_cpu_bn_apply_fwd,
    .bn_reduce_bwd = ddp_cpu_bn_reduce_bwd,
    .bn_apply_bwd = ddp_cpu_bn_apply_bwd,
    .avgpool_fwd = ddp_cpu_avgpool_fwd,
    .avgpool_bwd = ddp_cpu_avgpool_bwd,
    .relu_fwd = ddp_cpu_relu_fwd,
    .add_relu_fwd = ddp_cpu_add_relu_fwd,
    .relu_bwd = ddp_cpu_relu_bwd,
    .release = cpu_conv_release,
};
