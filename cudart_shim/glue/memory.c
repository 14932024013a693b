/* The allocation bodies that the runtime's and the driver's allocation calls share: frees that
 * wait like cudaFree, cudaMemGetInfo under vmem, pitched allocations at the real runtime's pitch,
 * and the tracking of memory the real library allocated (managed, page-locked host). */
#include <errno.h>
#include <stdint.h>

#include "shim_generated.h"
#include "shim_vmem.h"
#include "vmem.h"

#define PITCH_ALIGNMENT_MIN 512u
#define MAX_DEVICES 64

cudaError_t shim_vmem_free_synced(void *vptr, const void *where)
{
  /* cudaFree waits for the device before the memory can be reused; so do we, since a freed
   * slot of a shared slab is handed out again at once. Blocks freed on streams are then done. */
  SHIM_REAL(cudaDeviceSynchronize)();
  shim_vmem_reap_frees(1);
  if (shim_pool_owns(vptr)) {
    /* Stream-ordered memory freed by cudaFree: its block goes back to its pool. */
    uint64_t size;
    void *pool;
    if (shim_pool_free_begin(vptr, &size, &pool) != 0) return cudaErrorInvalidValue;
    shim_pool_free_done(vptr);
    return cudaSuccess;
  }
  return shim_error_from_errno(vmem_free(vptr, where));
}

void shim_mem_forget_freed(void *ptr)
{
  struct shim_mem_record record;
  if (shim_mem_untrack(SHIM_MEM_MANAGED, ptr, &record) == 0) {
    if (record.charged) vmem_quota_uncharge(record.device, record.charged);
  } else {
    shim_mem_untrack(SHIM_MEM_PASSTHROUGH, ptr, NULL);
  }
}

cudaError_t shim_vmem_mem_info(size_t *free_bytes, size_t *total_bytes)
{
  int device;
  cudaError_t result = shim_current_device(&device);
  if (result != cudaSuccess) return result;
  shim_vmem_reap_frees(0);
  uint64_t f = 0, t = 0;
  result = shim_error_from_errno(vmem_mem_info(device, &f, &t));
  if (result == cudaSuccess) {
    *free_bytes = (size_t)f;
    *total_bytes = (size_t)t;
  }
  return result;
}

/* The pitch the real runtime picks for a row of width bytes: rounded up to the device's texture
 * pitch alignment, at least 512 bytes (what cudaMallocPitch returns on every current GPU). */
static cudaError_t pitch_for(size_t width, size_t *pitch)
{
  static _Atomic unsigned alignment[MAX_DEVICES];
  int device;
  cudaError_t result = shim_current_device(&device);
  if (result != cudaSuccess) return result;
  unsigned align = device >= 0 && device < MAX_DEVICES ? atomic_load(&alignment[device]) : 0;
  if (align == 0) {
    int value = 0;
    if (SHIM_REAL(cudaDeviceGetAttribute)(&value, cudaDevAttrTexturePitchAlignment, device) !=
        cudaSuccess) {
      SHIM_REAL(cudaGetLastError)(); /* our probe's failure is not the program's error */
      value = 0;
    }
    align = PITCH_ALIGNMENT_MIN;
    while (align < (unsigned)value) align <<= 1;
    if (device >= 0 && device < MAX_DEVICES) atomic_store(&alignment[device], align);
  }
  if (width > SIZE_MAX - align) return cudaErrorMemoryAllocation;
  *pitch = (width + align - 1) & ~(size_t)(align - 1);
  return cudaSuccess;
}

cudaError_t shim_vmem_alloc_pitched(void **ptr, size_t *pitch, size_t width, size_t rows)
{
  size_t p;
  cudaError_t result = pitch_for(width, &p);
  if (result != cudaSuccess) return result;
  if (rows && p > SIZE_MAX / rows) return cudaErrorMemoryAllocation;
  result = shim_vmem_alloc(ptr, (uint64_t)p * rows);
  if (result == cudaSuccess) *pitch = p;
  return result;
}

/* Track what the real runtime allocated; on failure give it back and fail like a full device.
 * charged: bytes already counted against the quota for it (kept in the record). */
cudaError_t shim_mem_track_charged(cudaError_t result, enum shim_mem_kind kind, void *handle,
                                   size_t size, unsigned flags, cudaError_t (*undo)(void *),
                                   uint64_t charged)
{
  if (result != cudaSuccess || !handle) return result;
  struct shim_mem_record record = {.kind = kind, .handle = handle, .size = size, .flags = flags,
                                   .charged = charged};
  if (shim_current_device(&record.device) != cudaSuccess) record.device = 0;
  if (shim_mem_track(&record) == 0) return cudaSuccess;
  undo(handle);
  return shim_set_last_error(cudaErrorMemoryAllocation);
}

cudaError_t shim_mem_track_managed(void *ptr, size_t size, unsigned flags, uint64_t charged,
                                   cudaError_t (*undo)(void *))
{
  return shim_mem_track_charged(cudaSuccess, SHIM_MEM_MANAGED, ptr, size, flags, undo,
                                charged);
}
