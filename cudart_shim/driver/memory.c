/* Driver allocations through vmem: cuMemAlloc & co. from a static runtime (cudaMalloc inside
 * CuPy, cuBLAS, nvcc's default programs), JAX or the driver API get virtual device memory like the
 * runtime's cudaMalloc, so that a checkpoint saves and releases it. vmem's memory lives in each
 * device's primary context (where every runtime, static or shared, works); an allocation made
 * while another context is current stays real and is not checkpointed. Listed in
 * gen/api.d/driver.conf. */
#include "shim_driver.h"

#include <cuda_runtime_api.h>

#include "shim_vmem.h"
#include "vmem.h"

static CUresult from_runtime(cudaError_t error)
{
  switch (error) {
  case cudaSuccess: return CUDA_SUCCESS;
  case cudaErrorMemoryAllocation: return CUDA_ERROR_OUT_OF_MEMORY;
  case cudaErrorInvalidValue: return CUDA_ERROR_INVALID_VALUE;
  case cudaErrorNotSupported: return CUDA_ERROR_NOT_SUPPORTED;
  case cudaErrorNotPermitted: return CUDA_ERROR_NOT_PERMITTED;
  case cudaErrorNoDevice: return CUDA_ERROR_NO_DEVICE;
  case cudaErrorInvalidResourceHandle: return CUDA_ERROR_INVALID_HANDLE;
  case cudaErrorStreamCaptureUnsupported: return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  case cudaErrorInitializationError: return CUDA_ERROR_NOT_INITIALIZED;
  default: return CUDA_ERROR_UNKNOWN;
  }
}

static cudaError_t to_runtime(CUresult error)
{
  switch (error) {
  case CUDA_SUCCESS: return cudaSuccess;
  case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
  case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
  case CUDA_ERROR_NOT_SUPPORTED: return cudaErrorNotSupported;
  case CUDA_ERROR_INVALID_HANDLE: return cudaErrorInvalidResourceHandle;
  default: return cudaErrorUnknown;
  }
}

/* The last context seen by this thread and whether it is its device's primary context: most
 * programs never switch, so one cuCtxGetCurrent answers. */
static SHIM_TLS CUcontext cached_context;
static SHIM_TLS int cached_device, cached_primary;

/* 1 (and *device) when the current context is its device's primary one and vmem runs: the
 * allocation goes to vmem. 0: pass it to the real driver. */
static int use_vmem(int *device)
{
  CUcontext current = NULL;
  if (SHIM_DRV_REAL(cuCtxGetCurrent)(&current) != CUDA_SUCCESS || !current) return 0;
  if (current != cached_context) {
    CUdevice dev;
    unsigned flags;
    int active = 0;
    CUcontext primary = NULL;
    int is_primary = 0;
    /* Only an active primary context can be current; retaining an inactive one would create it. */
    if (SHIM_DRV_REAL(cuCtxGetDevice)(&dev) == CUDA_SUCCESS &&
        SHIM_DRV_REAL(cuDevicePrimaryCtxGetState)(dev, &flags, &active) == CUDA_SUCCESS && active &&
        SHIM_DRV_REAL(cuDevicePrimaryCtxRetain)(&primary, dev) == CUDA_SUCCESS) {
      SHIM_DRV_REAL(cuDevicePrimaryCtxRelease_v2)(dev);
      is_primary = primary == current;
    } else {
      return 0;
    }
    cached_context = current;
    cached_device = (int)dev;
    cached_primary = is_primary;
  }
  if (!cached_primary || shim_vmem_start() != 0) return 0;
  *device = cached_device;
  return 1;
}

/* Device memory left real (another context is current, or vmem does not run): a checkpoint
 * cannot release it; status counts it. */
static void track_passthrough(CUdeviceptr address, size_t size)
{
  struct shim_mem_record record = {.kind = SHIM_MEM_PASSTHROUGH,
                                   .handle = (void *)(uintptr_t)address, .size = size,
                                   .device = cached_device};
  shim_mem_track(&record);
}

#define ENTER(name)                                                 \
  shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_##name);      \
  if (!real) return shim_drv_missing_counted(SHIM_DRV_##name)
#define REAL(name) ((__typeof__(&name))real)

SHIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
  ENTER(cuMemAlloc_v2);
  int device;
  CUresult result;
  if (!dptr || bytesize == 0) {
    result = CUDA_ERROR_INVALID_VALUE; /* the driver refuses a zero size, unlike cudaMalloc */
  } else if (use_vmem(&device)) {
    void *ptr = NULL;
    result = from_runtime(shim_vmem_alloc_on(device, &ptr, bytesize));
    if (result == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)ptr;
  } else {
    result = REAL(cuMemAlloc_v2)(dptr, bytesize);
    if (result == CUDA_SUCCESS) track_passthrough(*dptr, bytesize);
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                        size_t Height, unsigned int ElementSizeBytes)
{
  ENTER(cuMemAllocPitch_v2);
  int device;
  CUresult result;
  if (!dptr || !pPitch || !WidthInBytes || !Height ||
      (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)) {
    result = CUDA_ERROR_INVALID_VALUE;
  } else if (use_vmem(&device)) {
    void *ptr = NULL;
    result = from_runtime(shim_vmem_alloc_pitched(&ptr, pPitch, WidthInBytes, Height));
    if (result == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)ptr;
  } else {
    result = REAL(cuMemAllocPitch_v2)(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (result == CUDA_SUCCESS) track_passthrough(*dptr, *pPitch * Height);
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
  ENTER(cuMemFree_v2);
  void *ptr = (void *)(uintptr_t)dptr;
  CUresult result;
  if (ptr && vmem_owns(ptr)) {
    result = from_runtime(shim_vmem_free_synced(ptr, __builtin_return_address(0)));
  } else {
    result = REAL(cuMemFree_v2)(dptr);
    if (result == CUDA_SUCCESS && ptr) shim_mem_forget_freed(ptr);
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
  ENTER(cuMemGetInfo_v2);
  int device;
  CUresult result;
  if (free && total && use_vmem(&device))
    result = from_runtime(shim_vmem_mem_info(free, total));
  else
    result = REAL(cuMemGetInfo_v2)(free, total);
  shim_gate_leave();
  return result;
}

/* vmem packs small allocations into shared chunks, and pools' blocks into segments: the driver
 * would answer with the chunk or the segment. */
SHIM_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
  ENTER(cuMemGetAddressRange_v2);
  CUresult result;
  struct vmem_info info;
  uintptr_t block_base;
  uint64_t block_size;
  if (vmem_owns((const void *)(uintptr_t)dptr) &&
      shim_pool_owns((const void *)(uintptr_t)dptr)) {
    /* A pool's block, not the segment it lies in. */
    result = shim_pool_block_range((const void *)(uintptr_t)dptr, &block_base, &block_size) == 0
                 ? CUDA_SUCCESS
                 : CUDA_ERROR_NOT_FOUND;
    if (result == CUDA_SUCCESS && pbase) *pbase = (CUdeviceptr)block_base;
    if (result == CUDA_SUCCESS && psize) *psize = (size_t)block_size;
  } else if (vmem_owns((const void *)(uintptr_t)dptr)) {
    if (vmem_lookup((const void *)(uintptr_t)dptr, &info) != 0) {
      result = CUDA_ERROR_NOT_FOUND;
    } else {
      if (pbase) *pbase = (CUdeviceptr)(uintptr_t)info.base;
      if (psize) *psize = (size_t)info.size;
      result = CUDA_SUCCESS;
    }
  } else {
    result = REAL(cuMemGetAddressRange_v2)(pbase, psize, dptr);
  }
  shim_gate_leave();
  return result;
}

/* cudaIpcGetMemHandle's driver twin, which the static runtime calls: the same refusal. */
SHIM_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
  ENTER(cuIpcGetMemHandle);
  CUresult result;
  if (vmem_owns((const void *)(uintptr_t)dptr)) {
    shim_warn("cuIpcGetMemHandle(%#llx): cudaw virtual memory cannot be shared through CUDA IPC; "
              "run with CUDAW_VMEM=off to share device memory between processes",
              (unsigned long long)dptr);
    result = CUDA_ERROR_NOT_SUPPORTED;
  } else {
    result = REAL(cuIpcGetMemHandle)(pHandle, dptr);
  }
  shim_gate_leave();
  return result;
}

/* Managed memory stays real (its address is valid on the host); tracked for the checkpoint,
 * which moves it to host memory, and counted against CUDAW_MEM_LIMIT like cudaMallocManaged. */
static cudaError_t free_managed(void *ptr)
{
  return to_runtime(SHIM_DRV_REAL(cuMemFree_v2)((CUdeviceptr)(uintptr_t)ptr));
}

SHIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
  ENTER(cuMemAllocManaged);
  int device = 0;
  uint64_t charged = 0;
  CUresult result = CUDA_SUCCESS;
  if (bytesize && use_vmem(&device)) {
    if (shim_vmem_charge(device, bytesize) != 0)
      result = CUDA_ERROR_OUT_OF_MEMORY;
    else
      charged = bytesize;
  }
  if (result == CUDA_SUCCESS) result = REAL(cuMemAllocManaged)(dptr, bytesize, flags);
  if (result == CUDA_SUCCESS && dptr)
    result = from_runtime(shim_mem_track_managed((void *)(uintptr_t)*dptr, bytesize, flags,
                                                 charged, free_managed));
  if (result != CUDA_SUCCESS && charged) vmem_quota_uncharge(device, charged);
  shim_gate_leave();
  return result;
}

/* ---- stream-ordered allocation: the runtime's logic (runtime/mem_async.c), driver calls for the
 * streams under capture and for memory outside vmem ---- */

static cudaError_t real_alloc_async(void **ptr, size_t size, void *pool, cudaStream_t stream)
{
  CUdeviceptr address = 0;
  CUresult result = pool ? SHIM_DRV_REAL(cuMemAllocFromPoolAsync)(&address, size,
                                                                  (CUmemoryPool)pool,
                                                                  (CUstream)stream)
                         : SHIM_DRV_REAL(cuMemAllocAsync)(&address, size, (CUstream)stream);
  *ptr = (void *)(uintptr_t)address;
  return to_runtime(result);
}

static cudaError_t real_free_async(void *ptr, cudaStream_t stream)
{
  return to_runtime(SHIM_DRV_REAL(cuMemFreeAsync)((CUdeviceptr)(uintptr_t)ptr, (CUstream)stream));
}

/* In a _ptsz call, stream 0 is the calling thread's default stream. */
static CUstream per_thread(CUstream stream)
{
  return stream ? stream : CU_STREAM_PER_THREAD;
}

static CUresult alloc_async(shim_real_fn real, enum shim_drv_id id, CUdeviceptr *dptr,
                            size_t bytesize, CUmemoryPool pool, CUstream stream)
{
  int device;
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  if (!use_vmem(&device)) {
    if (id == SHIM_DRV_cuMemAllocAsync || id == SHIM_DRV_cuMemAllocAsync_ptsz)
      return ((__typeof__(&cuMemAllocAsync))real)(dptr, bytesize, stream);
    return ((__typeof__(&cuMemAllocFromPoolAsync))real)(dptr, bytesize, pool, stream);
  }
  void *ptr = NULL;
  CUresult result = from_runtime(
      shim_vmem_malloc_async(&ptr, bytesize, (cudaStream_t)stream, real_alloc_async, pool));
  if (result == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)ptr;
  return result;
}

SHIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
  ENTER(cuMemAllocAsync);
  CUresult result = alloc_async(real, SHIM_DRV_cuMemAllocAsync, dptr, bytesize, NULL, hStream);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
  ENTER(cuMemAllocAsync_ptsz);
  CUresult result = alloc_async(real, SHIM_DRV_cuMemAllocAsync_ptsz, dptr, bytesize, NULL,
                                per_thread(hStream));
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize,
                                             CUmemoryPool pool, CUstream hStream)
{
  ENTER(cuMemAllocFromPoolAsync);
  CUresult result = pool ? alloc_async(real, SHIM_DRV_cuMemAllocFromPoolAsync, dptr, bytesize,
                                       pool, hStream)
                         : CUDA_ERROR_INVALID_VALUE;
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                  CUmemoryPool pool, CUstream hStream)
{
  ENTER(cuMemAllocFromPoolAsync_ptsz);
  CUresult result = pool ? alloc_async(real, SHIM_DRV_cuMemAllocFromPoolAsync_ptsz, dptr,
                                       bytesize, pool, per_thread(hStream))
                         : CUDA_ERROR_INVALID_VALUE;
  shim_gate_leave();
  return result;
}

static CUresult free_async(shim_real_fn real, CUdeviceptr dptr, CUstream stream, const void *where)
{
  void *ptr = (void *)(uintptr_t)dptr;
  if (!ptr || !vmem_owns(ptr)) {
    CUresult result = ((__typeof__(&cuMemFreeAsync))real)(dptr, stream);
    if (result == CUDA_SUCCESS && ptr) shim_mem_forget_freed(ptr);
    return result;
  }
  return from_runtime(shim_vmem_free_async(ptr, (cudaStream_t)stream, where, real_free_async));
}

SHIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
  ENTER(cuMemFreeAsync);
  CUresult result = free_async(real, dptr, hStream, __builtin_return_address(0));
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
  ENTER(cuMemFreeAsync_ptsz);
  CUresult result = free_async(real, dptr, per_thread(hStream), __builtin_return_address(0));
  shim_gate_leave();
  return result;
}
