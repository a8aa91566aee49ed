/* The CUDA backend's GEMM (ddp_gemm_t, include/ddptrain/backend.h) on
 * cuBLASLt.
 *
 * Layout: cuBLAS is column-major and our descriptors are row-major; a
 * row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T, so
 * the operands are swapped rather than transposed in memory (Lt's "A" is
 * our B, its "B" our A). Precision: fp32 accumulation always; bf16/fp16
 * operands run on tensor cores; fp32 operands use TF32 tensor cores when
 * the backend was created with allow_tf32 (the CLI's --tf32, on by
 * default), else exact fp32.
 *
 * No set-up in the step loop: the matmul descriptor, the three layouts and
 * the algorithm the heuristic chose are kept per distinct GEMM (shape,
 * pitches, strides, batch, types, transposes, TF32, and the operands'
 * address alignment, which the chosen algorithm may rely on) in a fixed
 * table. A model
 * issues a few dozen distinct GEMMs, so after the first step every call is
 * a lookup and one cublasLtMatmul. Past the table's capacity descriptors are
 * made and destroyed per call (correct, slower; logged once).
 *
 * Epilogues (ddp_cuda_gemm_epilogue: bias, GELU with its saved input, the
 * GELU gradient with the bias gradient) fuse the linear layers' element-wise
 * work into the GEMM's store. They are plans like any other, keyed also by
 * the epilogue, the aux pitch and the alignment of the bias, aux and bias
 * gradient pointers (which the heuristic reads from the descriptor, as it
 * reads the operands' addresses); the pointers themselves are set on the
 * cached descriptor per call. Where Lt has no algorithm for an epilogue the
 * plan says so for good, and the caller composes the unfused ops instead:
 * a GEMM never switches between the fused and the unfused path, so its
 * results stay reproducible.
 *
 * Determinism: the algorithm of a GEMM is chosen once and reused, and the
 * heuristic may pick split-K only with a separate reduction pass in the
 * workspace (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE / OUTPUT_TYPE), whose
 * order is fixed; the in-place scheme, which combines partial tiles in the
 * output through counters, is excluded. With one stream per handle (the
 * GEMMs of ddptrain all run on the compute stream) cuBLAS then repeats its
 * results bit for bit on the same GPU and library version. */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ddptrain/log.h"
#include "backend/cuda/cuda_gemm.h"
#include "backend/cuda/cuda_impl.h"
#include "core/foreign_check.h"

#define GEMM_CACHE_SLOTS 128
#define LT_WORKSPACE_BYTES ((size_t)32 << 20)

typedef struct gemm_key {
  int64_t m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch;
  int64_t aux_ld; /* epilogues with an aux matrix; else 0 */
  int32_t trans_a, trans_b, ab_dtype, c_dtype, tf32;
  int32_t align_a, align_b, align_c;          /* bytes, powers of two up to 256 */
  int32_t epilogue;                           /* ddp_cuda_epilogue_t; NONE for plain GEMMs */
  int32_t align_bias, align_aux, align_bgrad; /* as align_a; 0 where unused */
} gemm_key_t;

typedef struct gemm_plan {
  gemm_key_t key;
  int used;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc; /* Lt's A (our B), B (our A), C */
  cublasLtMatmulAlgo_t algo;
  int have_algo;
  uint64_t last_use; /* the table's clock at the last call: evicts the stalest */
} gemm_plan_t;

struct ddp_cuda_gemm {
  cublasLtHandle_t lt;
  void *workspace;
  gemm_plan_t slots[GEMM_CACHE_SLOTS];
  uint64_t misses;
  uint64_t clock; /* one tick per keyed GEMM */
  uint64_t epi_fused, epi_declined;
  int warned_full;
};

static cudaDataType_t cuda_type(ddp_dtype_t t) {
  return t == DDP_DTYPE_BF16 ? CUDA_R_16BF : t == DDP_DTYPE_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* The alignment Lt may assume for one operand: the largest power of two,
 * up to 256, dividing its address and (batched) its byte stride, so every
 * matrix of the batch has it. The heuristic assumes 256 bytes unless told
 * less, and an algorithm chosen for one call is reused for later calls of
 * the same shape whose pointers may be offset (the attention slabs, views
 * into packed activations), so the alignment is part of the plan's key. */
static int32_t align_of(const void *p, int64_t stride_elems, int64_t batch, size_t esz) {
  uint64_t bits = (uint64_t)(uintptr_t)p | 256u;
  if (batch > 1) bits |= (uint64_t)stride_elems * esz;
  return (int32_t)(bits & (~bits + 1)); /* lowest set bit */
}

static gemm_key_t key_of(const ddp_gemm_t *g, int tf32) {
  gemm_key_t k;
  memset(&k, 0, sizeof k); /* padding too: keys are compared with memcmp */
  k.m = g->m, k.n = g->n, k.k = g->k, k.lda = g->lda, k.ldb = g->ldb, k.ldc = g->ldc;
  k.batch = g->batch;
  /* strides only matter for batches */
  k.stride_a = g->batch > 1 ? g->stride_a : 0;
  k.stride_b = g->batch > 1 ? g->stride_b : 0;
  k.stride_c = g->batch > 1 ? g->stride_c : 0;
  k.trans_a = g->trans_a, k.trans_b = g->trans_b;
  k.ab_dtype = g->ab_dtype, k.c_dtype = g->c_dtype;
  k.tf32 = tf32 && g->ab_dtype == DDP_DTYPE_F32;
  const size_t ab = ddp_dtype_size(g->ab_dtype), c = ddp_dtype_size(g->c_dtype);
  k.align_a = align_of(g->a, g->stride_a, g->batch, ab);
  k.align_b = align_of(g->b, g->stride_b, g->batch, ab);
  k.align_c = align_of(g->c, g->stride_c, g->batch, c);
  return k;
}

static int epi_has_bias(int32_t e) {
  return e == DDP_CUDA_EPILOGUE_BIAS || e == DDP_CUDA_EPILOGUE_GELU_BIAS ||
         e == DDP_CUDA_EPILOGUE_GELU_AUX_BIAS;
}

static int epi_has_aux(int32_t e) {
  return e == DDP_CUDA_EPILOGUE_GELU_AUX_BIAS || e == DDP_CUDA_EPILOGUE_DGELU_BGRAD;
}

static const char *epi_name(int32_t e) {
  static const char *const names[] = {"none", "bias", "gelu_bias", "gelu_aux_bias", "dgelu_bgrad"};
  return e >= 0 && e <= DDP_CUDA_EPILOGUE_DGELU_BGRAD ? names[e] : "?";
}

static gemm_key_t epi_key_of(const ddp_gemm_t *g, int tf32, const ddp_cuda_epilogue_args_t *e) {
  gemm_key_t k = key_of(g, tf32);
  k.epilogue = (int32_t)e->kind;
  const size_t c = ddp_dtype_size(g->c_dtype);
  if (epi_has_bias(k.epilogue)) k.align_bias = align_of(e->bias, 0, 1, c);
  if (epi_has_aux(k.epilogue)) {
    k.aux_ld = e->aux_ld;
    k.align_aux = align_of(e->aux, 0, 1, c);
  }
  if (k.epilogue == DDP_CUDA_EPILOGUE_DGELU_BGRAD)
    k.align_bgrad = align_of(e->bgrad, 0, 1, sizeof(float));
  return k;
}

/* The epilogue's pointers on a descriptor: at plan time (the heuristic
 * reads their alignment) and before every call (this call's buffers). */
static cublasStatus_t epi_set_pointers(cublasLtMatmulDesc_t d, int32_t kind,
                                       const ddp_cuda_epilogue_args_t *e) {
  cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
  if (epi_has_bias(kind)) {
    const void *b = e->bias;
    cs = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b);
  } else if (kind == DDP_CUDA_EPILOGUE_DGELU_BGRAD) {
    void *b = e->bgrad;
    cs = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b);
  }
  if (cs == CUBLAS_STATUS_SUCCESS && epi_has_aux(kind)) {
    void *a = e->aux;
    cs = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &a, sizeof a);
  }
  return cs;
}

/* The epilogue attributes of a plan. The bias and aux types are left at
 * their default, C's type (the model's bias and pre-activation are dt
 * buffers); the bias gradient is asked for in fp32, the parameter
 * gradients' type under any dt, which for a 16-bit C is not the default:
 * an Lt that cannot do that declines, and the caller composes. */
static cublasStatus_t epi_setup(cublasLtMatmulDesc_t d, const gemm_key_t *k,
                                const ddp_cuda_epilogue_args_t *e) {
  static const cublasLtEpilogue_t lt[] = {
      CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_BIAS,
      CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU_BGRAD};
  const uint32_t epi = (uint32_t)lt[k->epilogue];
  cublasStatus_t cs =
      cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (cs == CUBLAS_STATUS_SUCCESS) cs = epi_set_pointers(d, k->epilogue, e);
  if (cs == CUBLAS_STATUS_SUCCESS && k->epilogue == DDP_CUDA_EPILOGUE_DGELU_BGRAD) {
    const int32_t t = CUDA_R_32F;
    cs = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t);
  }
  if (cs == CUBLAS_STATUS_SUCCESS && epi_has_aux(k->epilogue)) {
    const int64_t ld = k->aux_ld;
    cs = cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld);
  }
  return cs;
}

static void plan_release(gemm_plan_t *p) {
  if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
  if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
  if (p->la) cublasLtMatrixLayoutDestroy(p->la);
  if (p->desc) cublasLtMatmulDescDestroy(p->desc);
  memset(p, 0, sizeof *p);
}

static ddp_status_t make_layout(cublasLtMatrixLayout_t *out, cudaDataType_t t, int64_t rows,
                                int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  DDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(out, t, (uint64_t)rows, (uint64_t)cols, ld));
  if (batch > 1) {
    const int32_t b = (int32_t)batch;
    DDP_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
    DDP_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        *out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return DDP_OK;
}

/* Descriptors and the algorithm for one GEMM (e: its epilogue, NULL for a
 * plain GEMM). */
static ddp_status_t plan_build(struct ddp_cuda_gemm *G, gemm_plan_t *p, const gemm_key_t *k,
                               const ddp_cuda_epilogue_args_t *e) {
  memset(p, 0, sizeof *p);
  p->key = *k;
  const cublasComputeType_t compute = k->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  ddp_status_t st = DDP_OK;
  DDP_CUBLAS_CHECK_GOTO(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F), st, fail);
  /* Lt op(A) = our op(B), Lt op(B) = our op(A) */
  const cublasOperation_t ta = k->trans_b == DDP_TRANSPOSE_YES ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = k->trans_a == DDP_TRANSPOSE_YES ? CUBLAS_OP_T : CUBLAS_OP_N;
  DDP_CUBLAS_CHECK_GOTO(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), st,
      fail);
  DDP_CUBLAS_CHECK_GOTO(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), st,
      fail);
  const cudaDataType_t tab = cuda_type((ddp_dtype_t)k->ab_dtype);
  const cudaDataType_t tc = cuda_type((ddp_dtype_t)k->c_dtype);
  /* column-major shapes as stored: Lt A is n x k (or k x n when
   * transposed), Lt B is k x m (or m x k), C is n x m */
  DDP_CHECK_GOTO(make_layout(&p->la, tab, ta == CUBLAS_OP_N ? k->n : k->k,
                             ta == CUBLAS_OP_N ? k->k : k->n, k->ldb, k->batch, k->stride_b),
                 st, fail);
  DDP_CHECK_GOTO(make_layout(&p->lb, tab, tb == CUBLAS_OP_N ? k->k : k->m,
                             tb == CUBLAS_OP_N ? k->m : k->k, k->lda, k->batch, k->stride_a),
                 st, fail);
  DDP_CHECK_GOTO(make_layout(&p->lc, tc, k->n, k->m, k->ldc, k->batch, k->stride_c), st, fail);
  if (k->epilogue != DDP_CUDA_EPILOGUE_NONE) {
    /* an attribute this Lt does not know: no algorithm, so declined */
    const cublasStatus_t es = epi_setup(p->desc, k, e);
    if (es != CUBLAS_STATUS_SUCCESS) {
      DDP_LOG_DEBUG("cuBLASLt epilogue %s: attribute refused (%s)", epi_name(k->epilogue),
                    cublasGetStatusString(es));
      p->used = 1;
      return DDP_OK;
    }
  }
  cublasLtMatmulPreference_t pref = NULL;
  DDP_CUBLAS_CHECK_GOTO(cublasLtMatmulPreferenceCreate(&pref), st, fail);
  const size_t ws = LT_WORKSPACE_BYTES;
  const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
                           CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE; /* and NONE (0) */
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  cublasStatus_t cs = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  if (cs == CUBLAS_STATUS_SUCCESS)
    cs = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                              &schemes, sizeof schemes);
  /* Lt's A is our B and its B our A; C and D are the same buffer */
  const uint32_t align[4] = {(uint32_t)k->align_b, (uint32_t)k->align_a, (uint32_t)k->align_c,
                             (uint32_t)k->align_c};
  const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4 && cs == CUBLAS_STATUS_SUCCESS; ++i)
    cs = cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i], sizeof align[i]);
  if (cs == CUBLAS_STATUS_SUCCESS)
    cs = cublasLtMatmulAlgoGetHeuristic(G->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &res,
                                        &found);
  cublasLtMatmulPreferenceDestroy(pref);
  /* no algorithm (an unusual pitch or alignment): the caller falls back to
   * cublasGemmStridedBatchedEx, which handles any valid descriptor (or,
   * with an epilogue, composes the unfused ops) */
  if (cs == CUBLAS_STATUS_SUCCESS && found > 0 && res.state == CUBLAS_STATUS_SUCCESS) {
    p->algo = res.algo;
    p->have_algo = 1;
  }
  p->used = 1;
  return DDP_OK;
fail:
  plan_release(p);
  return st;
}

ddp_status_t ddp_cuda_gemm_init(ddp_backend_t *be) {
  ddp_cuda_state_t *st = ddp_cuda_state(be);
  struct ddp_cuda_gemm *G = calloc(1, sizeof *G);
  if (!G) DDP_FAIL(DDP_ERR_OOM, "cuda gemm: out of host memory");
  ddp_status_t rc = DDP_OK;
  DDP_CUBLAS_CHECK_GOTO(cublasLtCreate(&G->lt), rc, fail);
  DDP_CHECK_GOTO(ddp_backend_alloc(be, LT_WORKSPACE_BYTES, &G->workspace), rc, fail_lt);
  st->gemm = G;
  return DDP_OK;
fail_lt:
  cublasLtDestroy(G->lt);
fail:
  free(G);
  return rc;
}

void ddp_cuda_gemm_shutdown(ddp_backend_t *be) {
  ddp_cuda_state_t *st = ddp_cuda_state(be);
  struct ddp_cuda_gemm *G = st ? st->gemm : NULL;
  if (!G) return;
  for (int i = 0; i < GEMM_CACHE_SLOTS; ++i)
    if (G->slots[i].used) plan_release(&G->slots[i]);
  ddp_backend_free(be, G->workspace);
  cublasLtDestroy(G->lt);
  free(G);
  st->gemm = NULL;
}

uint64_t ddp_cuda_gemm_cache_misses(ddp_backend_t *be) {
  return ddp_cuda_state(be)->gemm ? ddp_cuda_state(be)->gemm->misses : 0;
}

/* k == 0: C = beta * C, and A, B may be NULL (the contract allows it).
 * beta == 0 writes zeros (all-zero bits are +0 in every float type) without
 * reading C, so NaN in C cannot survive. */
static ddp_status_t gemm_k_zero(ddp_backend_t *be, const ddp_gemm_t *g, cudaStream_t s) {
  if (g->beta == 1.0f) return DDP_OK;
  const size_t esz = ddp_dtype_size(g->c_dtype);
  ddp_cuda_state_t *st = ddp_cuda_state(be);
  for (int64_t i = 0; i < g->batch; ++i) {
    char *c = (char *)g->c + (size_t)(i * g->stride_c) * esz;
    if (g->beta == 0.0f) {
      DDP_CUDA_CHECK(
          cudaMemset2DAsync(c, (size_t)g->ldc * esz, 0, (size_t)g->n * esz, (size_t)g->m, s));
      continue;
    }
    DDP_CUBLAS_CHECK(cublasSetStream(st->blas, s));
    const cudaDataType_t t = cuda_type(g->c_dtype);
    for (int64_t r = 0; r < g->m; ++r)
      DDP_CUBLAS_CHECK(cublasScalEx(st->blas, (int)g->n, &g->beta, CUDA_R_32F,
                                    c + (size_t)(r * g->ldc) * esz, t, 1, CUDA_R_32F));
  }
  return DDP_OK;
}

/* The classic cuBLAS call, for GEMMs Lt has no algorithm for. */
static ddp_status_t gemm_fallback(ddp_backend_t *be, const ddp_gemm_t *g, int tf32,
                                  cudaStream_t s) {
  ddp_cuda_state_t *st = ddp_cuda_state(be);
  DDP_CUBLAS_CHECK(cublasSetStream(st->blas, s));
  const cublasOperation_t opb = g->trans_b == DDP_TRANSPOSE_YES ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opa = g->trans_a == DDP_TRANSPOSE_YES ? CUBLAS_OP_T : CUBLAS_OP_N;
  DDP_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      st->blas, opb, opa, (int)g->n, (int)g->m, (int)g->k, &g->alpha, g->b, cuda_type(g->ab_dtype),
      (int)g->ldb, g->stride_b, g->a, cuda_type(g->ab_dtype), (int)g->lda, g->stride_a, &g->beta,
      g->c, cuda_type(g->c_dtype), (int)g->ldc, g->stride_c, (int)g->batch,
      tf32 && g->ab_dtype == DDP_DTYPE_F32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
  return DDP_OK;
}

/* The plan of key k, or NULL with *slot set to where a new plan goes: the
 * first free slot, else the least recently used one (the caller releases
 * it). */
static gemm_plan_t *lookup(struct ddp_cuda_gemm *G, const gemm_key_t *k, int *slot) {
  int free_slot = -1, stalest = 0;
  for (int i = 0; i < GEMM_CACHE_SLOTS; ++i) {
    if (!G->slots[i].used) {
      if (free_slot < 0) free_slot = i;
      continue;
    }
    if (memcmp(&G->slots[i].key, k, sizeof *k) == 0) return &G->slots[i];
    if (G->slots[i].last_use < G->slots[stalest].last_use || !G->slots[stalest].used) stalest = i;
  }
  *slot = free_slot >= 0 ? free_slot : stalest;
  return NULL;
}

/* One cublasLtMatmul with a plan's algorithm, or the classic call when the
 * plan has none. Lt may still turn a heuristic's algorithm down at run time
 * (NOT_SUPPORTED: nothing was computed), e.g. for a layout feature the
 * heuristic did not weigh; the plan then keeps the classic call for good, so
 * a given GEMM always takes one path and its results stay reproducible. */
static ddp_status_t run_plan(ddp_backend_t *be, struct ddp_cuda_gemm *G, gemm_plan_t *p,
                             const ddp_gemm_t *g, cudaStream_t s) {
  if (p->have_algo) {
    const cublasStatus_t cs =
        cublasLtMatmul(G->lt, p->desc, &g->alpha, g->b, p->la, g->a, p->lb, &g->beta, g->c, p->lc,
                       g->c, p->lc, &p->algo, G->workspace, LT_WORKSPACE_BYTES, s);
    if (cs != CUBLAS_STATUS_NOT_SUPPORTED) {
      DDP_CUBLAS_CHECK(cs);
      return DDP_OK;
    }
    DDP_LOG_DEBUG("cuda:%d: cuBLASLt declined a %lldx%lldx%lld GEMM (batch %lld); using cuBLAS",
                  be->device, (long long)g->m, (long long)g->n, (long long)g->k,
                  (long long)g->batch);
    p->have_algo = 0;
  }
  return gemm_fallback(be, g, p->key.tf32, s);
}

/* An epilogue plan's cublasLtMatmul with this call's epilogue pointers.
 * *fused = 0 when the plan has no algorithm, or when Lt turns the
 * heuristic's choice down at run time (NOT_SUPPORTED, or INVALID_VALUE for
 * an epilogue type combination it does not take; either way nothing was
 * launched): the plan then stays unfused for good. */
static ddp_status_t run_epi_plan(ddp_backend_t *be, struct ddp_cuda_gemm *G, gemm_plan_t *p,
                                 const ddp_gemm_t *g, const ddp_cuda_epilogue_args_t *e,
                                 cudaStream_t s, int *fused) {
  *fused = 0;
  if (p->have_algo) {
    cublasStatus_t cs = epi_set_pointers(p->desc, p->key.epilogue, e);
    if (cs == CUBLAS_STATUS_SUCCESS)
      cs = cublasLtMatmul(G->lt, p->desc, &g->alpha, g->b, p->la, g->a, p->lb, &g->beta, g->c,
                          p->lc, g->c, p->lc, &p->algo, G->workspace, LT_WORKSPACE_BYTES, s);
    if (cs == CUBLAS_STATUS_SUCCESS) {
      G->epi_fused++;
      *fused = 1;
      return DDP_OK;
    }
    if (cs != CUBLAS_STATUS_NOT_SUPPORTED && cs != CUBLAS_STATUS_INVALID_VALUE)
      DDP_CUBLAS_CHECK(cs);
    DDP_LOG_WARN(
        "cuda:%d: cuBLASLt turned down epilogue %s on a %lldx%lldx%lld %s GEMM (%s); "
        "using the unfused ops for it",
        be->device, epi_name(p->key.epilogue), (long long)g->m, (long long)g->n, (long long)g->k,
        ddp_dtype_name(g->ab_dtype), cublasGetStatusString(cs));
    p->have_algo = 0;
  }
  G->epi_declined++;
  return DDP_OK;
}

/* The plan of `key` (built on a miss) run as a plain GEMM (e NULL) or with
 * its epilogue. A full table evicts its least recently used plan: a run with
 * many shapes (variable-length buckets) keeps its hot ones cached instead of
 * setting up every call past the 128th shape. Releasing descriptors whose
 * GEMM may still be queued is allowed: cublasLtMatmul does not keep them. */
static ddp_status_t gemm_keyed(ddp_backend_t *be, const gemm_key_t *key, const ddp_gemm_t *g,
                               const ddp_cuda_epilogue_args_t *e, cudaStream_t s, int *fused) {
  struct ddp_cuda_gemm *G = ddp_cuda_state(be)->gemm;
  int slot;
  gemm_plan_t *p = lookup(G, key, &slot);
  if (!p) {
    G->misses++;
    p = &G->slots[slot];
    if (p->used) {
      if (!G->warned_full) {
        DDP_LOG_WARN(
            "cuda:%d: more than %d distinct GEMM shapes; the least recently used "
            "plans are rebuilt when needed again",
            be->device, GEMM_CACHE_SLOTS);
        G->warned_full = 1;
      }
      plan_release(p);
    }
    DDP_CHECK(plan_build(G, p, key, e));
  }
  p->last_use = ++G->clock;
  return e ? run_epi_plan(be, G, p, g, e, s, fused) : run_plan(be, G, p, g, s);
}

ddp_status_t ddp_cuda_gemm(ddp_backend_t *be, const ddp_gemm_t *g, ddp_stream_t stream) {
  DDP_CHECK(ddp_gemm_validate(g));
  if (g->m == 0 || g->n == 0) return DDP_OK;
  const cudaStream_t s = ddp_cuda_stream(be, stream);
  if (g->k == 0) return gemm_k_zero(be, g, s);
  const gemm_key_t key = key_of(g, ddp_cuda_state(be)->allow_tf32);
  return gemm_keyed(be, &key, g, NULL, s, NULL);
}

static ddp_status_t epi_validate(const ddp_gemm_t *g, const ddp_cuda_epilogue_args_t *e) {
  if (!e || e->kind <= DDP_CUDA_EPILOGUE_NONE || e->kind > DDP_CUDA_EPILOGUE_DGELU_BGRAD)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gemm epilogue: no epilogue, or unknown kind %d",
             e ? (int)e->kind : -1);
  const char *what = epi_name(e->kind);
  if (epi_has_bias(e->kind) && !e->bias)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gemm epilogue %s: NULL bias", what);
  if (epi_has_aux(e->kind) && (!e->aux || e->aux_ld < g->n))
    DDP_FAIL(DDP_ERR_INVALID_ARG,
             "gemm epilogue %s: aux %p with row pitch %lld for %lld columns (pitch must be >= "
             "columns)",
             what, e->aux, (long long)e->aux_ld, (long long)g->n);
  if (e->kind == DDP_CUDA_EPILOGUE_DGELU_BGRAD && !e->bgrad)
    DDP_FAIL(DDP_ERR_INVALID_ARG, "gemm epilogue %s: NULL bias gradient", what);
  return DDP_OK;
}

/* The layouts the fused path serves (the linear layers'); anything else is
 * declined before Lt is asked. Lt wants the aux pitch in multiples of 8
 * elements (cublasLt.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD). */
static int epi_layout_ok(const ddp_gemm_t *g, const ddp_cuda_epilogue_args_t *e) {
  return g->batch == 1 && g->alpha == 1.0f && g->beta == 0.0f && g->m > 0 && g->n > 0 && g->k > 0 &&
         g->ab_dtype == g->c_dtype && (!epi_has_aux(e->kind) || e->aux_ld % 8 == 0);
}

ddp_status_t ddp_cuda_gemm_epilogue(ddp_backend_t *be, const ddp_gemm_t *g,
                                    const ddp_cuda_epilogue_args_t *e, ddp_stream_t stream,
                                    int *fused) {
  if (!fused) DDP_FAIL(DDP_ERR_INVALID_ARG, "gemm epilogue: NULL result flag");
  *fused = 0;
  DDP_CHECK(ddp_gemm_validate(g));
  DDP_CHECK(epi_validate(g, e));
  ddp_cuda_state_t *st = ddp_cuda_state(be);
  if (!epi_layout_ok(g, e)) {
    st->gemm->epi_declined++;
    return DDP_OK;
  }
  const gemm_key_t key = epi_key_of(g, st->allow_tf32, e);
  return gemm_keyed(be, &key, g, e, ddp_cuda_stream(be, stream), fused);
}

void ddp_cuda_gemm_epilogue_counts(ddp_backend_t *be, uint64_t *fused, uint64_t *declined) {
  const struct ddp_cuda_gemm *G = ddp_cuda_state(be)->gemm;
  if (fused) *fused = G ? G->epi_fused : 0;
  if (declined) *declined = G ? G->epi_declined : 0;
}
