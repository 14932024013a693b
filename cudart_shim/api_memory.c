/* Hand-written allocation overrides: device memory comes from vmem, so that it has a virtual
 * address that survives a checkpoint. When vmem does not run (CUDAW_VMEM=off, no device) the
 * calls go to the real runtime unchanged. Listed in gen/api.d/vmem.conf. */
#include <errno.h>

#include "shim_generated.h"
#include "shim_vmem.h"
#include "vmem.h"

static cudaError_t current_device(int *device)
{
  return SHIM_REAL(cudaGetDevice)(device);
}

SHIM_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaMalloc);
  if (!real) return shim_missing(SHIM_FN_cudaMalloc);
  cudaError_t result;
  int device;
  if (!devPtr) {
    result = shim_set_last_error(cudaErrorInvalidValue);
  } else if (shim_vmem_start() != 0) {
    result = ((__typeof__(&cudaMalloc))real)(devPtr, size);
  } else if ((result = current_device(&device)) == cudaSuccess) {
    result = shim_set_last_error(shim_error_from_errno(vmem_alloc(device, size, 0, devPtr)));
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaFree(void *devPtr)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaFree);
  if (!real) return shim_missing(SHIM_FN_cudaFree);
  cudaError_t result;
  if (devPtr && vmem_in_range(devPtr)) {
    /* cudaFree waits for the device before the memory can be reused; so do we, since a freed
     * slot of a shared slab is handed out again at once. */
    SHIM_REAL(cudaDeviceSynchronize)();
    result = shim_set_last_error(
        shim_error_from_errno(vmem_free(devPtr, __builtin_return_address(0))));
  } else {
    result = ((__typeof__(&cudaFree))real)(devPtr);
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaMemGetInfo);
  if (!real) return shim_missing(SHIM_FN_cudaMemGetInfo);
  cudaError_t result;
  int device;
  if (!free || !total) {
    result = shim_set_last_error(cudaErrorInvalidValue);
  } else if (shim_vmem_start() != 0) {
    result = ((__typeof__(&cudaMemGetInfo))real)(free, total);
  } else if ((result = current_device(&device)) == cudaSuccess) {
    uint64_t f = 0, t = 0;
    result = shim_error_from_errno(vmem_mem_info(device, &f, &t));
    if (result == cudaSuccess) {
      *free = (size_t)f;
      *total = (size_t)t;
    }
  }
  shim_gate_leave();
  return result;
}
