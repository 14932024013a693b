/* The driver's memory-pool calls that read or change what cudaw's pools hold (glue/mem_pool.c),
 * and its synchronisations, at which a pool over its release threshold gives memory back: the
 * driver-API twins of runtime/mem_pool.c. Listed in gen/api.d/driver.conf. */
#include "shim_driver.h"

#include "shim_vmem.h"

#define ENTER(name)                                                 \
  shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_##name);      \
  if (!real) return shim_drv_missing_counted(SHIM_DRV_##name)
#define REAL(name) ((__typeof__(&name))real)

SHIM_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                           void *value)
{
  ENTER(cuMemPoolGetAttribute);
  CUresult result = REAL(cuMemPoolGetAttribute)(pool, attr, value);
  if (result == CUDA_SUCCESS && value) {
    struct shim_pool_figures books;
    shim_pool_figures(pool, &books);
    cuuint64_t *figure = value;
    switch (attr) {
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *figure += books.reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *figure += books.reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *figure += books.used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *figure += books.used_high; break;
    default: break;
    }
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                           void *value)
{
  ENTER(cuMemPoolSetAttribute);
  CUresult result = REAL(cuMemPoolSetAttribute)(pool, attr, value);
  if (result == CUDA_SUCCESS && value) {
    switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      shim_pool_set(pool, SHIM_POOL_THRESHOLD, *(cuuint64_t *)value);
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      shim_pool_set(pool, SHIM_POOL_RESET_RESERVED_HIGH, 0);
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: shim_pool_set(pool, SHIM_POOL_RESET_USED_HIGH, 0); break;
    default: break;
    }
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
  ENTER(cuMemPoolTrimTo);
  CUresult result = REAL(cuMemPoolTrimTo)(pool, minBytesToKeep);
  if (result == CUDA_SUCCESS) shim_pool_trim(pool, minBytesToKeep);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
  ENTER(cuMemPoolDestroy);
  CUresult result = REAL(cuMemPoolDestroy)(pool);
  if (result == CUDA_SUCCESS) shim_pool_destroyed(pool);
  shim_gate_leave();
  return result;
}

/* ---- synchronisations ---- */

static void synchronized(void)
{
  CUdevice device;
  if (shim_pool_holds_memory() && SHIM_DRV_REAL(cuCtxGetDevice)(&device) == CUDA_SUCCESS)
    shim_pool_synchronized((int)device);
}

#define SYNC(name, params, args)                                                               \
  SHIM_EXPORT CUresult name params                                                             \
  {                                                                                            \
    shim_real_fn real = shim_drv_enter_blocking(SHIM_DRV_##name);                              \
    if (!real) return shim_drv_missing_blocking(SHIM_DRV_##name);                              \
    CUresult result = REAL(name) args;                                                         \
    if (result == CUDA_SUCCESS) synchronized();                                                \
    shim_gate_leave_blocking();                                                                \
    return result;                                                                             \
  }

SYNC(cuCtxSynchronize, (void), ())
SYNC(cuStreamSynchronize, (CUstream hStream), (hStream))
SYNC(cuStreamSynchronize_ptsz, (CUstream hStream), (hStream))
SYNC(cuEventSynchronize, (CUevent hEvent), (hEvent))
