/* --init-from FILE: a run that starts from saved weights instead of random
 * ones (fine-tuning, or continuing from another job's export).
 *
 * FILE is a safetensors file holding every tensor of the model's parameter
 * table under its name. For the built-in GPT two layouts more are read:
 *   - ddptrain's own export (transformer.h.N.*, Linear weights (out, in),
 *     the configuration in the metadata);
 *   - a GPT-2 model.safetensors in the Hugging Face layout: names with or
 *     without the "transformer." prefix, the blocks' Conv1D weights stored
 *     transposed ((in, out): c_attn (C, 3C), c_proj, c_fc, mlp.c_proj),
 *     the attention mask buffers (h.N.attn.bias, h.N.attn.masked_bias)
 *     skipped, and an lm_head.weight accepted when it equals wte (tied).
 * Values may be F32, BF16 or F16; they are widened to the fp32 master
 * weights (the compute copy is refreshed from them). Every tensor of the
 * table must be in the file with its shape, and every tensor of the file
 * must be used or be one of the skipped buffers: anything else is an error
 * naming the tensor, so a wrong file never trains half-initialised.
 *
 * Only the weights come from FILE: optimizer state and the step counter
 * start fresh. With --resume auto a checkpoint in --save wins (it already
 * descends from FILE); --resume DIR together with --init-from is refused
 * by ddp_options_validate. */
#ifndef DDPTRAIN_MODEL_GPT_INIT_FROM_H
#define DDPTRAIN_MODEL_GPT_INIT_FROM_H

#include "ddptrain/model.h"
#include "ddptrain/options.h"
#include "ddptrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Before the ranks start (no data, no MPI): with --model gpt, the
 * architecture flags not given on the command line are set from the file's
 * shapes: --n-layer (the blocks h.N), --n-embd (wte's columns), --seq-len
 * (wpe's rows) and --n-head, which shapes cannot tell: from the file's
 * metadata (ddptrain exports record it), else from a config.json beside
 * the file ("n_head"), else --n-head must be given. A given flag that the
 * file contradicts is a command-line error naming the flag, the tensor and
 * both sizes (DDP_ERR_INVALID_ARG: exit status 2), as is an n_head nothing
 * tells; a file that cannot be read or holds no GPT-2 embeddings is
 * DDP_ERR_IO / DDP_ERR_FORMAT (exit status 1). Other models: the file is
 * only opened, to fail early. A no-op without --init-from. */
ddp_status_t ddp_init_from_configure(ddp_options_t *o);

/* Before the model is created for `data`: a token model built from the
 * GPT layout takes the file's vocabulary (wte's rows) when the data's fits
 * in it; a larger vocabulary of the data is an error naming wte and both
 * sizes. Reads the header only. `data` is updated to what the model must
 * be created with; other models leave it as it is. */
ddp_status_t ddp_init_from_data_shape(const char *path, const ddp_model_ops_t *ops,
                                      ddp_data_shape_t *data);
/* Reads FILE and copies its tensors into the model's master weights
 * (fp32), then refreshes its compute copy; checks names, shapes, dtypes
 * and that every value is finite, each failure naming the tensor. Nothing
 * is written to the model unless every check passes. */
ddp_status_t ddp_init_from_load(const char *path, ddp_model_t *m);

#ifdef __cplusplus
}
#endif
#endif
