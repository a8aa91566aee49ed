/* Fuzz target: the checkpoint reader (src/train/checkpoint.c, the path
 * --resume takes: open and verify, read the metadata and configuration, load
 * the tensors into a training-state image; docs/design.md §5.5).
 *
 * A checksum stops almost every mutated file at the first gate, which would
 * leave the metadata and tensor parsing behind it unfuzzed. So when the
 * reader reports a checksum mismatch, the target writes the checksum the
 * reader computed into the file's stored one (when both are 8 characters, so
 * no offset moves) and opens it again: the mutations reach everything after
 * the CRC. The computed value is taken from the reader's own message, which
 * keeps this file free of a second copy of the CRC's definition; if that
 * message changes, the target still runs, only less deep.
 *
 * A checkpoint that opens is loaded into an image laid out like the file's
 * own model tensors (the names and shapes a model would have, with the
 * optimizer slots its metadata names), and the loaded values must be the
 * file's bytes. */
#include "fuzz_input.h"

#include <jansson.h>
#include <string.h>

#include "ddptrain/options.h"
#include "ddptrain/param.h"
#include "ddptrain/safetensors.h"
#include "train/ckpt.h"

const char fuzz_target_name[] = "checkpoint";

/* An image of at most this many parameters (the corpus's are ~3000). */
#define MAX_PARAMS (1 << 20)
#define MAX_TENSORS 256

/* Opens path with the library's messages captured in *log (malloc'ed). */
static ddp_status_t open_logged(const char *path, ddp_ckpt_t **ck, char **log) {
  size_t len = 0;
  FILE *mem = open_memstream(log, &len);
  if (!mem) abort();
  ddp_log_set_stream(mem);
  const ddp_status_t st = ddp_ckpt_open(path, ck);
  fclose(mem);
  fuzz_quiet_log();
  if (fuzz_verbose() && *log) fputs(*log, stderr);
  return st;
}

/* The input with its stored CRC replaced by the one the reader computed, as
 * a fresh buffer; NULL when the log holds no mismatch or the stored value
 * cannot be found in the header. */
static uint8_t *fix_crc(const uint8_t *data, size_t size, const char *log) {
  const char *m = strstr(log, "checksum mismatch (crc32 ");
  char stored[16], computed[16];
  if (!m ||
      sscanf(m, "checksum mismatch (crc32 %15s stored, %15s computed)", stored, computed) != 2)
    return NULL;
  if (strlen(stored) != 8 || strlen(computed) != 8 || size < 8) return NULL;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = hlen << 8 | data[i];
  if (hlen > size - 8) return NULL;
  /* the value follows the key "crc32" in the header's JSON text */
  const uint8_t *hdr = data + 8, *end = hdr + hlen;
  const uint8_t *key = memmem(hdr, hlen, "\"crc32\"", 7);
  const uint8_t *val = key ? memmem(key + 7, (size_t)(end - key - 7), stored, 8) : NULL;
  if (!val) return NULL;
  uint8_t *copy = malloc(size);
  if (!copy) return NULL;
  memcpy(copy, data, size);
  memcpy(copy + (val - data), computed, 8);
  return copy;
}

/* A parameter table from the file's "model.*" F32 tensors, as a model with
 * those tensors would have; *n_params elements in all. */
static int model_table(const char *path, ddp_param_t *table, size_t *n_params) {
  ddp_safetensors_t *st = NULL;
  int n = 0;
  *n_params = 0;
  if (ddp_safetensors_open(path, &st) != DDP_OK) return 0;
  for (int i = 0; i < ddp_safetensors_count(st) && n < MAX_TENSORS; ++i) {
    ddp_st_tensor_t t;
    if (ddp_safetensors_get(st, i, &t) != DDP_OK || strncmp(t.name, "model.", 6) != 0 ||
        t.dtype != DDP_DTYPE_F32 || t.ndim < 1 || t.ndim > DDP_PARAM_MAX_DIMS)
      continue;
    size_t count = 1;
    for (int d = 0; d < t.ndim; ++d) count *= (size_t)t.shape[d];
    if (count == 0 || count > MAX_PARAMS - *n_params) continue;
    if (ddp_param_set(&table[n], t.name + 6, t.ndim, t.shape, *n_params, 1) != DDP_OK) continue;
    *n_params += count;
    ++n;
  }
  ddp_safetensors_close(st);
  return n;
}

/* Loads the checkpoint the way --resume does and checks what it got. */
static void load(const ddp_ckpt_t *ck, const char *path) {
  const ddp_ckpt_meta_t *m = ddp_ckpt_meta(ck);
  FUZZ_ASSERT(m->step >= 0 && m->world >= 1 && m->accum >= 1);
  FUZZ_ASSERT(m->scaler.skipped_steps >= 0 && m->scaler.skipped_steps <= m->step);
  FUZZ_ASSERT(memchr(m->optimizer, '\0', sizeof m->optimizer) != NULL);
  FUZZ_ASSERT(memchr(m->sampler, '\0', sizeof m->sampler) != NULL);
  for (int i = 0; i < ddp_options_count(); ++i)
    (void)ddp_ckpt_config_value(ck, ddp_options_name(i));

  static ddp_param_t table[MAX_TENSORS];
  size_t n_params = 0;
  const int n = model_table(path, table, &n_params);
  if (n == 0) return;
  const char *const *slots = NULL;
  const int n_slots = ddp_ckpt_slot_names(m->optimizer, &slots);
  float *buf = calloc(n_params * (size_t)(1 + n_slots), sizeof(float));
  if (!buf) abort();
  ddp_ckpt_image_t img = {.tensors = table,
                          .n_tensors = n,
                          .n_params = n_params,
                          .params = buf,
                          .state = buf + n_params,
                          .n_slots = n_slots,
                          .slot_names = slots};
  if (ddp_ckpt_load(ck, &img) == DDP_OK) {
    FUZZ_ASSERT(img.meta.step == m->step);
    /* every parameter holds its tensor's bytes from the file */
    ddp_safetensors_t *st = NULL;
    FUZZ_ASSERT(ddp_safetensors_open(path, &st) == DDP_OK);
    char name[8 + DDP_PARAM_NAME_MAX];
    for (int i = 0; i < n; ++i) {
      ddp_st_tensor_t t;
      snprintf(name, sizeof name, "model.%.63s", table[i].name);
      FUZZ_ASSERT(ddp_safetensors_find(st, name, &t) == DDP_OK);
      FUZZ_ASSERT(memcmp(buf + table[i].offset, t.data, table[i].count * sizeof(float)) == 0);
    }
    ddp_safetensors_close(st);
  }
  free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[80], *log = NULL;
  fuzz_quiet_log();
  fuzz_write_input(data, size, path, sizeof path);
  ddp_ckpt_t *ck = NULL;
  ddp_status_t st = open_logged(path, &ck, &log);
  if (st != DDP_OK) {
    FUZZ_ASSERT(ck == NULL);
    uint8_t *fixed = log ? fix_crc(data, size, log) : NULL;
    if (fixed) {
      fuzz_write_input(fixed, size, path, sizeof path);
      free(log);
      log = NULL;
      st = open_logged(path, &ck, &log);
      free(fixed);
    }
  }
  free(log);
  if (st == DDP_OK) {
    FUZZ_ASSERT(ck != NULL);
    load(ck, path);
    ddp_ckpt_close(ck);
  }
  return 0;
}
