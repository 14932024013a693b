/* The runtime's doors to the driver: cudaGetDriverEntryPoint(ByVersion) hand out driver entry
 * points (PyTorch's expandable segments, NCCL and others call cuMemCreate & co. through them).
 * The real runtime answers with the real driver's functions; cudaw hands back its own wrappers so
 * that those calls pass the gate too (proc_address.c). Listed in gen/api.d/driver.conf. */
#include "shim_driver.h"

#include "shim_generated.h"
#include "shim_profile.h"

static cudaError_t wrap_result(cudaError_t result, const char *symbol, void **funcPtr)
{
  if (result == cudaSuccess && funcPtr && *funcPtr) *funcPtr = shim_drv_wrap(*funcPtr, symbol);
  return result;
}

#define ENTRY_POINT(name, params, args)                                                   \
  SHIM_EXPORT cudaError_t name params                                                     \
  {                                                                                       \
    shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_##name);                                  \
    if (!real) return shim_missing(SHIM_FN_##name);                                       \
    struct shim_span span;                                                                \
    shim_span_begin(&span);                                                               \
    shim_span_real_begin(&span);                                                          \
    cudaError_t result = ((__typeof__(&name))real) args;                                  \
    shim_span_real_end(&span);                                                            \
    result = wrap_result(result, symbol, funcPtr);                                        \
    shim_span_end(&span, SHIM_PROFILE_ENTRY_POINT, 1);                                    \
    shim_gate_leave();                                                                    \
    return result;                                                                        \
  }

#undef cudaGetDriverEntryPoint
#undef cudaGetDriverEntryPointByVersion
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *, void **, unsigned long long,
                                         enum cudaDriverEntryPointQueryResult *);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *, void **, unsigned int,
                                                  unsigned long long,
                                                  enum cudaDriverEntryPointQueryResult *);

ENTRY_POINT(cudaGetDriverEntryPoint,
            (const char *symbol, void **funcPtr, unsigned long long flags,
             enum cudaDriverEntryPointQueryResult *driverStatus),
            (symbol, funcPtr, flags, driverStatus))
ENTRY_POINT(cudaGetDriverEntryPoint_ptsz,
            (const char *symbol, void **funcPtr, unsigned long long flags,
             enum cudaDriverEntryPointQueryResult *driverStatus),
            (symbol, funcPtr, flags, driverStatus))
ENTRY_POINT(cudaGetDriverEntryPointByVersion,
            (const char *symbol, void **funcPtr, unsigned int cudaVersion,
             unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus),
            (symbol, funcPtr, cudaVersion, flags, driverStatus))
ENTRY_POINT(cudaGetDriverEntryPointByVersion_ptsz,
            (const char *symbol, void **funcPtr, unsigned int cudaVersion,
             unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus),
            (symbol, funcPtr, cudaVersion, flags, driverStatus))
