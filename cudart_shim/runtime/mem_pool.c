/* The runtime's memory-pool calls that read or change what cudaw's pools hold (glue/mem_pool.c),
 * and the synchronisations at which a pool gives memory back. The real pool is passed the call
 * first (it checks the handle and the attribute, and holds what stream captures allocated);
 * its figures are then added to the books of what cudaw allocated for it. Listed in
 * gen/api.d/vmem.conf. */
#include "shim_generated.h"
#include "shim_vmem.h"

cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);

#define ENTER(name)                                                                            \
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_##name);                                         \
  if (!real) return shim_missing(SHIM_FN_##name)
#define REAL(name) ((__typeof__(&name))real)

SHIM_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                                void *value)
{
  ENTER(cudaMemPoolGetAttribute);
  cudaError_t result = REAL(cudaMemPoolGetAttribute)(memPool, attr, value);
  if (result == cudaSuccess && value) {
    struct shim_pool_figures books;
    shim_pool_figures(memPool, &books);
    unsigned long long *figure = value;
    switch (attr) {
    case cudaMemPoolAttrReservedMemCurrent: *figure += books.reserved; break;
    case cudaMemPoolAttrReservedMemHigh: *figure += books.reserved_high; break;
    case cudaMemPoolAttrUsedMemCurrent: *figure += books.used; break;
    case cudaMemPoolAttrUsedMemHigh: *figure += books.used_high; break;
    default: break;
    }
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr,
                                                void *value)
{
  ENTER(cudaMemPoolSetAttribute);
  cudaError_t result = REAL(cudaMemPoolSetAttribute)(memPool, attr, value);
  if (result == cudaSuccess && value) {
    /* Only the 64-bit attributes are read as such: the reuse flags are ints. */
    switch (attr) {
    case cudaMemPoolAttrReleaseThreshold:
      shim_pool_set(memPool, SHIM_POOL_THRESHOLD, *(unsigned long long *)value);
      break;
    case cudaMemPoolAttrReservedMemHigh:
      shim_pool_set(memPool, SHIM_POOL_RESET_RESERVED_HIGH, 0);
      break;
    case cudaMemPoolAttrUsedMemHigh: shim_pool_set(memPool, SHIM_POOL_RESET_USED_HIGH, 0); break;
    default: break;
    }
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
  ENTER(cudaMemPoolTrimTo);
  cudaError_t result = REAL(cudaMemPoolTrimTo)(memPool, minBytesToKeep);
  if (result == cudaSuccess) shim_pool_trim(memPool, minBytesToKeep);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
  ENTER(cudaMemPoolDestroy);
  cudaError_t result = REAL(cudaMemPoolDestroy)(memPool);
  if (result == cudaSuccess) shim_pool_destroyed(memPool);
  shim_gate_leave();
  return result;
}

/* ---- synchronisations: pools over their release threshold give memory back ---- */

static void synchronized(void)
{
  int device;
  if (shim_pool_holds_memory() && shim_current_device(&device) == cudaSuccess)
    shim_pool_synchronized(device);
}

#define SYNC(name, params, args)                                                               \
  SHIM_EXPORT cudaError_t name params                                                          \
  {                                                                                            \
    shim_real_fn real = SHIM_GATE_ENTER_BLOCKING(SHIM_FN_##name);                              \
    if (!real) return shim_missing_blocking(SHIM_FN_##name);                                   \
    cudaError_t result = REAL(name) args;                                                      \
    if (result == cudaSuccess) synchronized();                                                 \
    shim_gate_leave_blocking();                                                                \
    return result;                                                                             \
  }

SYNC(cudaDeviceSynchronize, (void), ())
SYNC(cudaStreamSynchronize, (cudaStream_t stream), (stream))
SYNC(cudaStreamSynchronize_ptsz, (cudaStream_t stream), (stream))
SYNC(cudaEventSynchronize, (cudaEvent_t event), (event))
