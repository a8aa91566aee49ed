/* --model resnet: a ResNet (basic or bottleneck blocks) on images, written
 * against the backend's conv table (ddptrain/conv.h) and nn table
 * (ddptrain/nn.h). Private to the model's files:
 *   resnet_layout.c   flags -> architecture, the parameter and buffer
 *                     tables, activation sizes, the FLOP count;
 *   resnet_init.c     torchvision's initialisation;
 *   resnet_forward.c  training and inference forward, the loss;
 *   resnet_backward.c the backward, announcing gradients in table order;
 *   resnet_export.c   PyTorch state_dict export;
 *   resnet_model.c    the ops table: flags, create/destroy, the steps.
 *
 * Every convolution is followed by a BatchNorm, so a "unit" below is that
 * pair; it owns three consecutive entries of the parameter table (BN
 * weight, BN bias, conv weight: the order backward finishes them) and two
 * of the buffer table (running mean and variance), plus one batch counter
 * in the block of counters at the buffer table's end. */
#ifndef DDPTRAIN_MODEL_RESNET_H
#define DDPTRAIN_MODEL_RESNET_H

#include <stdint.h>

#include "ddptrain/conv.h"
#include "ddptrain/model.h"
#include "model/slot_stager.h"

#define RESNET_STAGES 4

/* What the flags and the data describe. */
typedef struct resnet_config {
  int depth;      /* --depth */
  int width;      /* --width: channels of the stem and the first stage */
  int bottleneck; /* bottleneck blocks (expansion 4) instead of basic ones */
  int blocks[RESNET_STAGES];
  int imagenet_stem; /* 7x7 stride-2 conv + 3x3 stride-2 max-pool; else a 3x3 conv */
  int zero_init_residual;
  int sync_bn;
  float bn_momentum, bn_eps;
  float label_smoothing;
  int H, W, C; /* one record: an (H,W,C) image */
  int classes;
} resnet_config_t;

/* A convolution and the BatchNorm after it. */
typedef struct resnet_unit {
  char conv_name[40], bn_name[40]; /* "layer1.0.conv2", "layer1.0.bn2" */
  ddp_conv_shape_t conv;           /* N is set per call */
  int OH, OW, K;                   /* the output (N,OH,OW,K) */
  int t;                           /* table index of the BN weight; bias t+1, conv weight t+2 */
  int b;                           /* buffer index of running_mean; running_var b+1 */
  int relu;                        /* a ReLU follows the BN inside the block or stem */
  int64_t out_elems;               /* OH*OW*K: per image */
  /* activation memory (set by create) */
  void *c;      /* the conv output (BN input), kept for the backward */
  void *a;      /* the BN(+ReLU) output when the unit keeps one, else NULL */
  float *stats; /* 6K fp32: [0,K) save_a or mean, [K,2K) save_b or variance,
                   [2K,4K) this rank's backward sums, [4K,6K) the sums of all ranks */
} resnet_unit_t;

typedef struct resnet_block {
  int first_unit, n_main; /* main path: units first_unit .. first_unit+n_main-1 */
  int downsample;         /* unit first_unit+n_main is the 1x1 projection, or -1 */
  char name[24];          /* "layer2.0" */
  int64_t out_elems;      /* per image */
  int OH, OW, K;
  void *out; /* the block's output (after add and ReLU), kept */
} resnet_block_t;

typedef struct resnet {
  resnet_config_t cfg;
  int n_units, n_blocks;
  resnet_unit_t *units;   /* forward order: stem, then each block's main units, projection */
  resnet_block_t *blocks; /* forward order */
  int pool_OH, pool_OW;   /* after the stem's max-pool (imagenet stem) */
  int64_t pool_elems;     /* per image; 0 without a max-pool */
  int features;           /* channels into the classifier */
  int fc_t;               /* table index of fc.weight (0); fc.bias is fc_t+1 */
  int64_t max_act_elems;  /* the largest activation, per image */

  /* tables */
  ddp_param_t *table;
  int n_tensors;
  size_t n_params;
  ddp_buffer_t *buffers;
  int n_buffers;
  size_t n_buffer_floats;
  size_t counters_offset; /* first num_batches_tracked in the buffer floats */

  /* memory (set by create) */
  ddp_backend_t *be;
  ddp_dtype_t dt;
  int64_t max_batch;
  void *arena; /* every activation, one allocation: made by the first forward */
  /* the batch's pixels (N,H,W,C, fp32 as the loader gives them) and
   * labels, in one of two device slots filled on a copy stream */
  ddp_slot_stager_t in;
  void *x_in;  /* what the stem reads: the pixels' slot in fp32, its dt copy otherwise */
  void *pool;  /* the stem's max-pool output */
  void *pool_ws;
  void *grad[4];   /* activation-gradient scratch, max_act_elems per image each */
  void *pooled;    /* (N, features) */
  void *logits;    /* (N, classes), fp32: the loss reads fp32 */
  void *logits_dt; /* the classifier's output and dlogits in dt: logits itself in fp32 */
  int nn_reserved; /* holds on the nn table's workspace (create, set_precision) */
  float *stats_mem;
  float *losses, *loss_sum, *ones; /* ones: n_units floats (counters, scaling) */
  int32_t *labels;      /* the labels' slot of the last upload */
  int world;            /* ranks of the job (setup->world), for --sync-bn's positions */
  int last_n;           /* rows of the last forward's logits */
} resnet_t;

/* ---- resnet_layout.c ---- */
/* Reads the model's flags (without the data). */
ddp_status_t resnet_config_from_options(const ddp_options_t *o, resnet_config_t *c);
/* Adds the data's image shape and classes; refuses records that are not
 * (H,W,C) images. */
ddp_status_t resnet_config_set_data(resnet_config_t *c, const ddp_data_shape_t *d);
/* Builds units, blocks and both tables from a complete configuration
 * (memory pointers stay NULL). */
ddp_status_t resnet_layout(resnet_t *r, const resnet_config_t *c);
void resnet_layout_free(resnet_t *r);
/* Multiply-adds of one image's forward: every convolution and the classifier. */
double resnet_forward_macs(const resnet_t *r);

/* ---- resnet_init.c ---- */
ddp_status_t resnet_init_weights(ddp_model_t *m, uint64_t seed);

/* ---- resnet_model.c ---- */
/* Allocates the activations and prepares the kernels for every shape, once
 * (the first forward calls it). */
ddp_status_t resnet_materialise(resnet_t *r);

/* ---- resnet_forward.c ---- */
/* The forward of N images (batch on the host); training keeps what the
 * backward needs and moves the running statistics; with labels, adds the
 * loss sum and (training) leaves dlogits = dloss * d(loss)/d(logits) in
 * r->logits. */
ddp_status_t resnet_forward(ddp_model_t *m, const ddp_record_batch_t *batch, int training,
                            float dloss);
/* Its two halves: the batch to the device (into the stager's next slot on
 * its copy stream: r->labels, and r->x_in, the stem's input), and
 * the forward of those N images, which reads nothing on the host and so
 * can be recorded as a graph (model/graph_replay.h). After a pass the
 * model releases the slot and waits for the copies (resnet_model.c). */
ddp_status_t resnet_upload(ddp_model_t *m, const ddp_record_batch_t *batch);
ddp_status_t resnet_forward_device(ddp_model_t *m, int N, int training, float dloss);

/* ---- resnet_backward.c ---- */
ddp_status_t resnet_backward(ddp_model_t *m, int N, int accumulate, int notify);

/* ---- resnet_export.c ---- */
ddp_status_t resnet_export(ddp_model_t *m, const char *path);

/* Shared helpers (resnet_forward.c). */
const void *resnet_weight(const ddp_model_t *m, int t); /* compute copy or master */
ddp_bn_shape_t resnet_bn_shape(const resnet_t *r, const resnet_unit_t *u, int N);
int64_t resnet_bn_positions(const resnet_t *r, const resnet_unit_t *u, int N); /* all ranks */

#endif
