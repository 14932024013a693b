/* The driver's copies whose device addresses sit inside a structure (CUDA_MEMCPY2D, CUDA_MEMCPY3D,
 * CUDA_MEMCPY3D_PEER): under CUDAW_VMEM=translate a copy of the structure goes to the real driver
 * with its device addresses translated (a static runtime's cudaMemcpy2D/3D arrive here). Under
 * remap the structure passes untouched. Listed in gen/api.d/driver.conf. */
#include "shim_driver.h"

/* Device (or unified) addresses of a copy structure, translated in place. */
#define TRANSLATE_SIDES(copy)                                                              \
  do {                                                                                     \
    if ((copy).srcMemoryType == CU_MEMORYTYPE_DEVICE ||                                    \
        (copy).srcMemoryType == CU_MEMORYTYPE_UNIFIED)                                     \
      (copy).srcDevice = shim_translate_address((copy).srcDevice);                         \
    if ((copy).dstMemoryType == CU_MEMORYTYPE_DEVICE ||                                    \
        (copy).dstMemoryType == CU_MEMORYTYPE_UNIFIED)                                     \
      (copy).dstDevice = shim_translate_address((copy).dstDevice);                         \
  } while (0)

/* One wrapper: name, its structure type, and the extra parameters after the structure. */
#define COPY_WRAPPER(name, type, params, args)                                             \
  SHIM_EXPORT CUresult name(const type *pCopy EXPAND params)                               \
  {                                                                                        \
    shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_##name);                           \
    if (!real) return shim_drv_missing_counted(SHIM_DRV_##name);                           \
    CUresult result;                                                                       \
    if (pCopy && shim_translate_end) {                                                     \
      type copy = *pCopy;                                                                  \
      TRANSLATE_SIDES(copy);                                                               \
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
