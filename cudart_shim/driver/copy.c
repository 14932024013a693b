/* The driver's copies whose device addresses sit inside a structure (CUDA_MEMCPY2D, CUDA_MEMCPY3D,
 * CUDA_MEMCPY3D_PEER) or an array (the batched copies): under CUDAW_VMEM=translate a copy of the
 * structure or array goes to the real driver with its device addresses translated (a static
 * runtime's cudaMemcpy2D/3D and cudaMemcpyBatchAsync arrive here). Under remap they pass
 * untouched. Listed in gen/api.d/driver.conf. */
#include "shim_driver.h"

#include <stdlib.h>
#include <string.h>

/* One wrapper: name, its structure type, and the extra parameters after the structure. */
#define COPY_WRAPPER(name, type, params, args)                                             \
  SHIM_EXPORT CUresult name(const type *pCopy EXPAND params)                               \
  {                                                                                        \
    shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_##name);                           \
    if (!real) return shim_drv_missing_counted(SHIM_DRV_##name);                           \
    CUresult result;                                                                       \
    if (pCopy && shim_translate_end) {                                                     \
      type copy = *pCopy;                                                                  \
      SHIM_DRV_TRANSLATE_SIDES(copy);                                                               \
      result = ((__typeof__(&name))real)(&copy EXPAND args);                               \
    } else {                                                                               \
      result = ((__typeof__(&name))real)(pCopy EXPAND args);                               \
    }                                                                                      \
    shim_gate_leave();                                                                     \
    return result;                                                                         \
  }
#define EXPAND(...) __VA_ARGS__
#define SYNC ()
#define SYNC_ARGS ()
#define ASYNC (, CUstream hStream)
#define ASYNC_ARGS (, hStream)

COPY_WRAPPER(cuMemcpy2D_v2, CUDA_MEMCPY2D, SYNC, SYNC_ARGS)
COPY_WRAPPER(cuMemcpy2D_v2_ptds, CUDA_MEMCPY2D, SYNC, SYNC_ARGS)
COPY_WRAPPER(cuMemcpy2DUnaligned_v2, CUDA_MEMCPY2D, SYNC, SYNC_ARGS)
COPY_WRAPPER(cuMemcpy2DUnaligned_v2_ptds, CUDA_MEMCPY2D, SYNC, SYNC_ARGS)
COPY_WRAPPER(cuMemcpy2DAsync_v2, CUDA_MEMCPY2D, ASYNC, ASYNC_ARGS)
COPY_WRAPPER(cuMemcpy2DAsync_v2_ptsz, CUDA_MEMCPY2D, ASYNC, ASYNC_ARGS)
COPY_WRAPPER(cuMemcpy3D_v2, CUDA_MEMCPY3D, SYNC, SYNC_ARGS)
COPY_WRAPPER(cuMemcpy3D_v2_ptds, CUDA_MEMCPY3D, SYNC, SYNC_ARGS)
COPY_WRAPPER(cuMemcpy3DAsync_v2, CUDA_MEMCPY3D, ASYNC, ASYNC_ARGS)
COPY_WRAPPER(cuMemcpy3DAsync_v2_ptsz, CUDA_MEMCPY3D, ASYNC, ASYNC_ARGS)
COPY_WRAPPER(cuMemcpy3DPeer, CUDA_MEMCPY3D_PEER, SYNC, SYNC_ARGS)
COPY_WRAPPER(cuMemcpy3DPeer_ptds, CUDA_MEMCPY3D_PEER, SYNC, SYNC_ARGS)
COPY_WRAPPER(cuMemcpy3DPeerAsync, CUDA_MEMCPY3D_PEER, ASYNC, ASYNC_ARGS)
COPY_WRAPPER(cuMemcpy3DPeerAsync_ptsz, CUDA_MEMCPY3D_PEER, ASYNC, ASYNC_ARGS)

/* ---- batched copies: arrays of device addresses, or operands inside structures ---- */

/* dsts and srcs translated into copies (freed by the caller); CUDA_ERROR_OUT_OF_MEMORY. */
static CUresult translate_batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t count,
                                CUdeviceptr **dst_copy, CUdeviceptr **src_copy)
{
  *dst_copy = *src_copy = NULL;
  if (!dsts || !srcs || count == 0 || count > SIZE_MAX / 2 / sizeof(CUdeviceptr))
    return CUDA_SUCCESS; /* the driver answers for what is malformed */
  CUdeviceptr *both = malloc(2 * count * sizeof *both);
  if (!both) return CUDA_ERROR_OUT_OF_MEMORY;
  for (size_t i = 0; i < count; i++) {
    both[i] = shim_translate_address(dsts[i]);
    both[count + i] = shim_translate_address(srcs[i]);
  }
  *dst_copy = both;
  *src_copy = both + count;
  return CUDA_SUCCESS;
}

/* opList's pointer operands translated into a copy (freed by the caller). */
static CUresult translate_batch_3d(CUDA_MEMCPY3D_BATCH_OP *ops, size_t count,
                                   CUDA_MEMCPY3D_BATCH_OP **out)
{
  *out = NULL;
  if (!ops || count == 0 || count > SIZE_MAX / sizeof *ops) return CUDA_SUCCESS;
  CUDA_MEMCPY3D_BATCH_OP *copy = malloc(count * sizeof *copy);
  if (!copy) return CUDA_ERROR_OUT_OF_MEMORY;
  memcpy(copy, ops, count * sizeof *copy);
  for (size_t i = 0; i < count; i++) {
    CUmemcpy3DOperand *side[2] = {&copy[i].src, &copy[i].dst};
    for (int k = 0; k < 2; k++)
      if (side[k]->type == CU_MEMCPY_OPERAND_TYPE_POINTER)
        side[k]->op.ptr.ptr = shim_translate_address(side[k]->op.ptr.ptr);
  }
  *out = copy;
  return CUDA_SUCCESS;
}

#define BATCH_WRAPPER(name, params, args)                                                   \
  SHIM_EXPORT CUresult name params                                                          \
  {                                                                                         \
    shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_##name);                            \
    if (!real) return shim_drv_missing_counted(SHIM_DRV_##name);                            \
    CUdeviceptr *program_dsts = dsts, *program_srcs = srcs, *dst_copy = NULL, *src_copy = NULL; \
    CUresult result = shim_translate_end                                                    \
                          ? translate_batch(dsts, srcs, count, &dst_copy, &src_copy)        \
                          : CUDA_SUCCESS;                                                   \
    if (dst_copy) dsts = dst_copy, srcs = src_copy;                                         \
    if (result == CUDA_SUCCESS) result = ((__typeof__(&name))real) args;                    \
    dsts = program_dsts, srcs = program_srcs;                                               \
    free(dst_copy);                                                                         \
    shim_gate_leave();                                                                      \
    return result;                                                                          \
  }

BATCH_WRAPPER(cuMemcpyBatchAsync_v2,
              (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
               CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream),
              (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream))
BATCH_WRAPPER(cuMemcpyBatchAsync_v2_ptsz,
              (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
               CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream),
              (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream))
BATCH_WRAPPER(cuMemcpyBatchAsync,
              (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
               CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx,
               CUstream hStream),
              (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream))
BATCH_WRAPPER(cuMemcpyBatchAsync_ptsz,
              (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
               CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx,
               CUstream hStream),
              (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream))

#define BATCH_3D_WRAPPER(name, params, args)                                                \
  SHIM_EXPORT CUresult name params                                                          \
  {                                                                                         \
    shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_##name);                            \
    if (!real) return shim_drv_missing_counted(SHIM_DRV_##name);                            \
    CUDA_MEMCPY3D_BATCH_OP *program = opList, *copy = NULL;                                 \
    CUresult result =                                                                       \
        shim_translate_end ? translate_batch_3d(opList, numOps, &copy) : CUDA_SUCCESS;      \
    if (copy) opList = copy;                                                                \
    if (result == CUDA_SUCCESS) result = ((__typeof__(&name))real) args;                    \
    opList = program;                                                                       \
    free(copy);                                                                             \
    shim_gate_leave();                                                                      \
    return result;                                                                          \
  }

BATCH_3D_WRAPPER(cuMemcpy3DBatchAsync_v2,
                 (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags,
                  CUstream hStream),
                 (numOps, opList, flags, hStream))
BATCH_3D_WRAPPER(cuMemcpy3DBatchAsync_v2_ptsz,
                 (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags,
                  CUstream hStream),
                 (numOps, opList, flags, hStream))
BATCH_3D_WRAPPER(cuMemcpy3DBatchAsync,
                 (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
                  unsigned long long flags, CUstream hStream),
                 (numOps, opList, failIdx, flags, hStream))
BATCH_3D_WRAPPER(cuMemcpy3DBatchAsync_ptsz,
                 (size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
                  unsigned long long flags, CUstream hStream),
                 (numOps, opList, failIdx, flags, hStream))
