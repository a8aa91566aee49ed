/* The ResNet's architecture from its flags and the data: the units
 * (convolution + BatchNorm) and blocks in forward order, the parameter
 * table in the order backward finishes the gradients (fc first, then the
 * last block back to the first, the stem last), the buffer table, and the
 * multiply-adds of a forward. Nothing here touches backend memory, so
 * --plan-only's cost and the tests use it without a model instance. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/check.h"
#include "ddptrain/log.h"
#include "core/ascii.h"
#include "model/resnet.h"

ddp_status_t resnet_config_from_options(const ddp_options_t *o, resnet_config_t *c) {
  const char *depth, *stem;
  int64_t width, zero, sync;
  double momentum, eps, smoothing;
  DDP_CHECK(ddp_options_get_string(o, "depth", &depth));
  DDP_CHECK(ddp_options_get_int(o, "width", &width));
  DDP_CHECK(ddp_options_get_string(o, "stem", &stem));
  DDP_CHECK(ddp_options_get_int(o, "zero-init-residual", &zero));
  DDP_CHECK(ddp_options_get_int(o, "sync-bn", &sync));
  DDP_CHECK(ddp_options_get_float(o, "bn-momentum", &momentum));
  DDP_CHECK(ddp_options_get_float(o, "bn-eps", &eps));
  DDP_CHECK(ddp_options_get_float(o, "label-smoothing", &smoothing));
  /* torchvision's depths, and two one-block-per-stage nets for tests */
  static const struct {
    int depth, bottleneck, blocks[RESNET_STAGES];
  } k_depths[] = {{10, 0, {1, 1, 1, 1}},  {14, 1, {1, 1, 1, 1}}, {18, 0, {2, 2, 2, 2}},
                  {34, 0, {3, 4, 6, 3}},  {50, 1, {3, 4, 6, 3}}, {101, 1, {3, 4, 23, 3}},
                  {152, 1, {3, 8, 36, 3}}};
  const int d = atoi(depth);
  int found = -1;
  for (size_t i = 0; i < sizeof k_depths / sizeof k_depths[0]; ++i)
    if (k_depths[i].depth == d) found = (int)i;
  if (found < 0) DDP_FAIL(DDP_ERR_INVALID_ARG, "resnet: --depth %s is not a known depth", depth);
  *c = (resnet_config_t){.depth = d,
                         .width = (int)width,
                         .bottleneck = k_depths[found].bottleneck,
                         .imagenet_stem = ddp_ascii_ieq(stem, "imagenet") ? 1
                                          : ddp_ascii_ieq(stem, "cifar")  ? 0
                                                                          : -1, /* auto */
                         .zero_init_residual = (int)zero,
                         .sync_bn = (int)sync,
                         .bn_momentum = (float)momentum,
                         .bn_eps = (float)eps,
                         .label_smoothing = (float)smoothing};
  memcpy(c->blocks, k_depths[found].blocks, sizeof c->blocks);
  return DDP_OK;
}

ddp_status_t resnet_config_set_data(resnet_config_t *c, const ddp_data_shape_t *d) {
  if (d->kind != DDP_BATCH_RECORDS || d->record_ndim != 3)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "resnet: records must be (H,W,C) images; the data's records have %d dimension%s",
             d->record_ndim, d->record_ndim == 1 ? "" : "s");
  if (d->n_classes < 2)
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "resnet: the data have %d class(es); a classifier needs 2 or more", d->n_classes);
  c->H = (int)d->record_shape[0], c->W = (int)d->record_shape[1], c->C = (int)d->record_shape[2];
  c->classes = d->n_classes;
  /* CIFAR-sized images lose too much to a stride-4 stem */
  if (c->imagenet_stem < 0) c->imagenet_stem = c->H >= 64 && c->W >= 64;
  return DDP_OK;
}

/* Appends a unit for a conv of K filters R x R over (H,W,C). */
static resnet_unit_t *add_unit(resnet_t *r, const char *conv, const char *bn, int H, int W, int C,
                               int K, int R, int stride, int pad, int relu) {
  resnet_unit_t *u = &r->units[r->n_units++];
  memset(u, 0, sizeof *u);
  snprintf(u->conv_name, sizeof u->conv_name, "%s", conv);
  snprintf(u->bn_name, sizeof u->bn_name, "%s", bn);
  u->conv = (ddp_conv_shape_t){
      .N = 1, .H = H, .W = W, .C = C, .K = K, .R = R, .S = R, .stride = stride, .pad = pad};
  u->OH = ddp_conv_out_h(&u->conv), u->OW = ddp_conv_out_w(&u->conv), u->K = K;
  u->out_elems = (int64_t)u->OH * u->OW * K;
  u->relu = relu;
  return u;
}

/* The units of forward order, with their shapes. Every window is padded
 * so that any image of 1 pixel or more keeps at least one position through
 * the stem and the stages (a 1x1 image ends 1x1), so no size is refused
 * here; batch norm's need for 2 positions is checked per batch. */
static ddp_status_t build_units(resnet_t *r, const resnet_config_t *c) {
  int n_blocks = 0;
  for (int s = 0; s < RESNET_STAGES; ++s) n_blocks += c->blocks[s];
  const int per_block = c->bottleneck ? 4 : 3; /* main units + a possible projection */
  r->units = calloc((size_t)(1 + n_blocks * per_block), sizeof *r->units);
  r->blocks = calloc((size_t)n_blocks, sizeof *r->blocks);
  if (!r->units || !r->blocks) DDP_FAIL(DDP_ERR_OOM, "resnet: out of host memory");
  int H = c->H, W = c->W;
  const resnet_unit_t *stem = c->imagenet_stem
                                  ? add_unit(r, "conv1", "bn1", H, W, c->C, c->width, 7, 2, 3, 1)
                                  : add_unit(r, "conv1", "bn1", H, W, c->C, c->width, 3, 1, 1, 1);
  H = stem->OH, W = stem->OW;
  r->max_act_elems = stem->out_elems;
  if (c->imagenet_stem) {
    const ddp_pool_shape_t p = {
        .N = 1, .H = H, .W = W, .C = c->width, .kernel = 3, .stride = 2, .pad = 1};
    r->pool_OH = ddp_pool_out_h(&p), r->pool_OW = ddp_pool_out_w(&p);
    H = r->pool_OH, W = r->pool_OW;
    r->pool_elems = (int64_t)H * W * c->width;
  }
  const int expansion = c->bottleneck ? 4 : 1;
  int in = c->width;
  for (int s = 0; s < RESNET_STAGES; ++s) {
    const int planes = c->width << s, out = planes * expansion;
    for (int i = 0; i < c->blocks[s]; ++i) {
      const int stride = (s > 0 && i == 0) ? 2 : 1;
      resnet_block_t *b = &r->blocks[r->n_blocks++];
      snprintf(b->name, sizeof b->name, "layer%d.%d", s + 1, i);
      b->first_unit = r->n_units;
      char cn[40], bn[40];
      const resnet_unit_t *last;
      if (c->bottleneck) { /* 1x1 reduce, 3x3 carrying the stride (torchvision's v1.5), 1x1 expand
                            */
        snprintf(cn, sizeof cn, "%s.conv1", b->name), snprintf(bn, sizeof bn, "%s.bn1", b->name);
        add_unit(r, cn, bn, H, W, in, planes, 1, 1, 0, 1);
        snprintf(cn, sizeof cn, "%s.conv2", b->name), snprintf(bn, sizeof bn, "%s.bn2", b->name);
        const resnet_unit_t *u2 = add_unit(r, cn, bn, H, W, planes, planes, 3, stride, 1, 1);
        snprintf(cn, sizeof cn, "%s.conv3", b->name), snprintf(bn, sizeof bn, "%s.bn3", b->name);
        last = add_unit(r, cn, bn, u2->OH, u2->OW, planes, out, 1, 1, 0, 0);
        b->n_main = 3;
      } else {
        snprintf(cn, sizeof cn, "%s.conv1", b->name), snprintf(bn, sizeof bn, "%s.bn1", b->name);
        const resnet_unit_t *u1 = add_unit(r, cn, bn, H, W, in, planes, 3, stride, 1, 1);
        snprintf(cn, sizeof cn, "%s.conv2", b->name), snprintf(bn, sizeof bn, "%s.bn2", b->name);
        last = add_unit(r, cn, bn, u1->OH, u1->OW, planes, out, 3, 1, 1, 0);
        b->n_main = 2;
      }
      b->downsample = -1;
      if (stride != 1 || in != out) {
        snprintf(cn, sizeof cn, "%s.downsample.0", b->name);
        snprintf(bn, sizeof bn, "%s.downsample.1", b->name);
        b->downsample = r->n_units;
        add_unit(r, cn, bn, H, W, in, out, 1, stride, 0, 0);
      }
      for (int k = b->first_unit; k < r->n_units; ++k)
        if (r->units[k].out_elems > r->max_act_elems) r->max_act_elems = r->units[k].out_elems;
      b->OH = last->OH, b->OW = last->OW, b->K = out, b->out_elems = last->out_elems;
      H = b->OH, W = b->OW, in = out;
    }
  }
  if (r->pool_elems > r->max_act_elems) r->max_act_elems = r->pool_elems;
  r->features = in;
  return DDP_OK;
}

/* Gives unit u its three table entries and two buffers. */
static ddp_status_t table_unit(resnet_t *r, resnet_unit_t *u, size_t *off, size_t *boff) {
  char name[DDP_PARAM_NAME_MAX];
  const int64_t k[1] = {u->K};
  const int64_t w[4] = {u->K, u->conv.R, u->conv.S, u->conv.C}; /* (K,R,S,C): channels last */
  u->t = r->n_tensors;
  snprintf(name, sizeof name, "%s.weight", u->bn_name);
  DDP_CHECK(ddp_param_set(&r->table[r->n_tensors++], name, 1, k, *off, 0));
  *off += (size_t)u->K;
  snprintf(name, sizeof name, "%s.bias", u->bn_name);
  DDP_CHECK(ddp_param_set(&r->table[r->n_tensors++], name, 1, k, *off, 0));
  *off += (size_t)u->K;
  snprintf(name, sizeof name, "%s.weight", u->conv_name);
  DDP_CHECK(ddp_param_set(&r->table[r->n_tensors++], name, 4, w, *off, 1));
  *off += r->table[r->n_tensors - 1].count;
  u->b = r->n_buffers;
  const char *stat[2] = {"running_mean", "running_var"};
  for (int i = 0; i < 2; ++i) {
    snprintf(name, sizeof name, "%s.%s", u->bn_name, stat[i]);
    ddp_buffer_t *b = &r->buffers[r->n_buffers++];
    b->kind = DDP_BUFFER_MEAN;
    DDP_CHECK(ddp_param_set(&b->t, name, 1, k, *boff, 0));
    *boff += (size_t)u->K;
  }
  return DDP_OK;
}

ddp_status_t resnet_layout(resnet_t *r, const resnet_config_t *c) {
  memset(r, 0, sizeof *r);
  r->cfg = *c;
  DDP_CHECK(build_units(r, c));
  r->table = calloc((size_t)(2 + 3 * r->n_units), sizeof *r->table);
  r->buffers = calloc((size_t)(3 * r->n_units), sizeof *r->buffers);
  if (!r->table || !r->buffers) DDP_FAIL(DDP_ERR_OOM, "resnet: out of host memory");
  size_t off = 0, boff = 0;
  /* the classifier's gradient is final first */
  const int64_t fw[2] = {c->classes, r->features}, fb[1] = {c->classes};
  r->fc_t = 0;
  DDP_CHECK(ddp_param_set(&r->table[r->n_tensors++], "fc.weight", 2, fw, off, 1));
  off += r->table[0].count;
  DDP_CHECK(ddp_param_set(&r->table[r->n_tensors++], "fc.bias", 1, fb, off, 0));
  off += r->table[1].count;
  /* then each block from the last, its main path from the last unit, then its projection */
  for (int bi = r->n_blocks - 1; bi >= 0; --bi) {
    const resnet_block_t *b = &r->blocks[bi];
    for (int k = b->n_main - 1; k >= 0; --k)
      DDP_CHECK(table_unit(r, &r->units[b->first_unit + k], &off, &boff));
    if (b->downsample >= 0) DDP_CHECK(table_unit(r, &r->units[b->downsample], &off, &boff));
  }
  DDP_CHECK(table_unit(r, &r->units[0], &off, &boff)); /* the stem, finished last */
  r->n_params = off;
  /* the counters together at the end, in the same unit order: one add moves them all */
  r->counters_offset = boff;
  const int first_counter = r->n_buffers;
  for (int i = 0; i < first_counter; i += 2) {
    const ddp_buffer_t *mean = &r->buffers[i];
    char name[DDP_PARAM_NAME_MAX];
    const size_t dot = strlen(mean->t.name) - strlen(".running_mean");
    snprintf(name, sizeof name, "%.*s.num_batches_tracked", (int)dot, mean->t.name);
    ddp_buffer_t *b = &r->buffers[r->n_buffers++];
    b->kind = DDP_BUFFER_COUNT;
    const int64_t one[1] = {1};
    DDP_CHECK(ddp_param_set(&b->t, name, 1, one, boff++, 0));
  }
  r->n_buffer_floats = boff;
  return DDP_OK;
}

void resnet_layout_free(resnet_t *r) {
  free(r->units);
  free(r->blocks);
  free(r->table);
  free(r->buffers);
  r->units = NULL, r->blocks = NULL, r->table = NULL, r->buffers = NULL;
}

double resnet_forward_macs(const resnet_t *r) {
  double macs = (double)r->features * r->cfg.classes;
  for (int i = 0; i < r->n_units; ++i) {
    const resnet_unit_t *u = &r->units[i];
    macs += (double)u->OH * u->OW * u->K * u->conv.R * u->conv.S * u->conv.C;
  }
  return macs;
}
