/* Hand-written allocation overrides: device memory comes from vmem, so that it has a virtual
 * address that survives a checkpoint; managed and page-locked host memory go to the real runtime
 * and are tracked (glue/mem_registry.c). When vmem does not run (CUDAW_VMEM=off, no device) device
 * allocations go to the real runtime unchanged. Listed in gen/api.d/vmem.conf. */
#include <errno.h>
#include <stdint.h>

#include "shim_generated.h"
#include "shim_vmem.h"
#include "vmem.h"

SHIM_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaMalloc);
  if (!real) return shim_missing(SHIM_FN_cudaMalloc);
  cudaError_t result;
  if (!devPtr) {
    result = shim_set_last_error(cudaErrorInvalidValue);
  } else if (shim_vmem_start() != 0) {
    result = ((__typeof__(&cudaMalloc))real)(devPtr, size);
  } else {
    result = shim_set_last_error(shim_vmem_alloc(devPtr, size));
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaFree(void *devPtr)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaFree);
  if (!real) return shim_missing(SHIM_FN_cudaFree);
  cudaError_t result;
  if (devPtr && vmem_owns(devPtr)) {
    result = shim_set_last_error(shim_vmem_free_synced(devPtr, __builtin_return_address(0)));
  } else {
    result = ((__typeof__(&cudaFree))real)(devPtr);
    if (result == cudaSuccess && devPtr) shim_mem_forget_freed(devPtr);
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaMemGetInfo);
  if (!real) return shim_missing(SHIM_FN_cudaMemGetInfo);
  cudaError_t result;
  if (!free || !total) {
    result = shim_set_last_error(cudaErrorInvalidValue);
  } else if (shim_vmem_start() != 0) {
    result = ((__typeof__(&cudaMemGetInfo))real)(free, total);
  } else {
    result = shim_set_last_error(shim_vmem_mem_info(free, total));
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaMallocPitch);
  if (!real) return shim_missing(SHIM_FN_cudaMallocPitch);
  cudaError_t result;
  if (!devPtr || !pitch) {
    result = shim_set_last_error(cudaErrorInvalidValue);
  } else if (shim_vmem_start() != 0) {
    result = ((__typeof__(&cudaMallocPitch))real)(devPtr, pitch, width, height);
  } else {
    result = shim_set_last_error(shim_vmem_alloc_pitched(devPtr, pitch, width, height));
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaMalloc3D);
  if (!real) return shim_missing(SHIM_FN_cudaMalloc3D);
  cudaError_t result;
  if (!pitchedDevPtr) {
    result = shim_set_last_error(cudaErrorInvalidValue);
  } else if (shim_vmem_start() != 0) {
    result = ((__typeof__(&cudaMalloc3D))real)(pitchedDevPtr, extent);
  } else if (extent.depth && extent.height > SIZE_MAX / extent.depth) {
    result = shim_set_last_error(cudaErrorMemoryAllocation);
  } else {
    void *ptr = NULL;
    size_t pitch = 0;
    result = shim_vmem_alloc_pitched(&ptr, &pitch, extent.width, extent.height * extent.depth);
    if (result == cudaSuccess)
      *pitchedDevPtr = (struct cudaPitchedPtr){ptr, pitch, extent.width, extent.height};
    shim_set_last_error(result);
  }
  shim_gate_leave();
  return result;
}

static cudaError_t track(cudaError_t result, enum shim_mem_kind kind, void *handle, size_t size,
                         unsigned flags, cudaError_t (*undo)(void *))
{
  return shim_mem_track_charged(result, kind, handle, size, flags, undo, 0);
}

/* Managed memory is not virtualised: the driver migrates it between host and device by itself,
 * and its address is valid on the host, so it must stay real. Tracked for checkpoint. */
SHIM_EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaMallocManaged);
  if (!real) return shim_missing(SHIM_FN_cudaMallocManaged);
  /* Managed memory counts against CUDAW_MEM_LIMIT at its full size: it may all migrate to the
   * device. */
  int device = 0;
  uint64_t charged = 0;
  if (size && shim_vmem_start() == 0 && shim_current_device(&device) == cudaSuccess) {
    if (shim_vmem_charge(device, size) != 0) {
      shim_gate_leave();
      return shim_set_last_error(cudaErrorMemoryAllocation);
    }
    charged = size;
  }
  cudaError_t result = ((__typeof__(&cudaMallocManaged))real)(devPtr, size, flags);
  if (result == cudaSuccess && devPtr)
    result = shim_mem_track_managed(*devPtr, size, flags, charged, SHIM_REAL(cudaFree));
  if (result != cudaSuccess && charged) vmem_quota_uncharge(device, charged);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaMallocHost);
  if (!real) return shim_missing(SHIM_FN_cudaMallocHost);
  cudaError_t result = ((__typeof__(&cudaMallocHost))real)(ptr, size);
  result = track(result, SHIM_MEM_HOST, ptr ? *ptr : NULL, size, cudaHostAllocDefault,
                 SHIM_REAL(cudaFreeHost));
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaHostAlloc);
  if (!real) return shim_missing(SHIM_FN_cudaHostAlloc);
  cudaError_t result = ((__typeof__(&cudaHostAlloc))real)(pHost, size, flags);
  result = track(result, SHIM_MEM_HOST, pHost ? *pHost : NULL, size, flags,
                 SHIM_REAL(cudaFreeHost));
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaFreeHost(void *ptr)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaFreeHost);
  if (!real) return shim_missing(SHIM_FN_cudaFreeHost);
  cudaError_t result = ((__typeof__(&cudaFreeHost))real)(ptr);
  if (result == cudaSuccess && ptr) shim_mem_untrack(SHIM_MEM_HOST, ptr, NULL);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaHostRegister);
  if (!real) return shim_missing(SHIM_FN_cudaHostRegister);
  cudaError_t result = ((__typeof__(&cudaHostRegister))real)(ptr, size, flags);
  result = track(result, SHIM_MEM_REGISTERED, ptr, size, flags, SHIM_REAL(cudaHostUnregister));
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaHostUnregister(void *ptr)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaHostUnregister);
  if (!real) return shim_missing(SHIM_FN_cudaHostUnregister);
  cudaError_t result = ((__typeof__(&cudaHostUnregister))real)(ptr);
  if (result == cudaSuccess) shim_mem_untrack(SHIM_MEM_REGISTERED, ptr, NULL);
  shim_gate_leave();
  return result;
}
