/* vmem primitives over the real CUDA runtime. Runtime functions come from the shim's resolve
 * callback (dlsym on the real libcudart); the driver's VMM functions come from the runtime's
 * cudaGetDriverEntryPointByVersion, so cudaw never links libcuda. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "prims.h"

#define ENTRY_POINT_VERSION 12000 /* the VMM calls' signatures as of CUDA 12, unchanged in 13 */

typedef cudaError_t (*cudaMalloc_fn)(void **, size_t);
typedef cudaError_t (*cudaFree_fn)(void *);
typedef cudaError_t (*cudaMemGetInfo_fn)(size_t *, size_t *);
typedef cudaError_t (*cudaGetDeviceCount_fn)(int *);
typedef cudaError_t (*cudaDeviceGetAttribute_fn)(int *, enum cudaDeviceAttr, int);
typedef cudaError_t (*cudaGetDevice_fn)(int *);
typedef cudaError_t (*cudaSetDevice_fn)(int);
typedef cudaError_t (*cudaGetDriverEntryPointByVersion_fn)(const char *, void **, unsigned int,
                                                           unsigned long long,
                                                           enum cudaDriverEntryPointQueryResult *);
typedef CUresult (*cuMemAddressReserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                                           unsigned long long);
typedef CUresult (*cuMemAddressFree_fn)(CUdeviceptr, size_t);
typedef CUresult (*cuMemCreate_fn)(CUmemGenericAllocationHandle *, size_t,
                                   const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*cuMemRelease_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*cuMemMap_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                                unsigned long long);
typedef CUresult (*cuMemUnmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*cuMemSetAccess_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*cuMemGetAllocationGranularity_fn)(size_t *, const CUmemAllocationProp *,
                                                     CUmemAllocationGranularity_flags);

static struct {
  cudaMalloc_fn malloc_;
  cudaFree_fn free_;
  cudaMemGetInfo_fn mem_get_info;
  cudaGetDeviceCount_fn get_device_count;
  cudaDeviceGetAttribute_fn device_get_attribute;
  cudaGetDevice_fn get_device;
  cudaSetDevice_fn set_device;
  cuMemAddressReserve_fn address_reserve;
  cuMemAddressFree_fn address_free;
  cuMemCreate_fn create;
  cuMemRelease_fn release;
  cuMemMap_fn map;
  cuMemUnmap_fn unmap;
  cuMemSetAccess_fn set_access;
  cuMemGetAllocationGranularity_fn granularity;
  pthread_once_t context_once;
} rt = {.context_once = PTHREAD_ONCE_INIT};

static int from_runtime(cudaError_t e) {
  if (e == cudaSuccess) return 0;
  if (e == cudaErrorMemoryAllocation) return -ENOMEM;
  if (e == cudaErrorInvalidValue || e == cudaErrorInvalidDevice) return -EINVAL;
  return -EIO;
}

static int from_driver(CUresult e) {
  if (e == CUDA_SUCCESS) return 0;
  if (e == CUDA_ERROR_OUT_OF_MEMORY) return -ENOMEM;
  if (e == CUDA_ERROR_INVALID_VALUE || e == CUDA_ERROR_INVALID_DEVICE) return -EINVAL;
  if (e == CUDA_ERROR_NOT_SUPPORTED) return -ENOSYS;
  return -EIO;
}

/* The VMM calls need the primary context; cudaFree(NULL) is the runtime's way to create it. */
static void make_context(void) { rt.free_(NULL); }

/* Make device current for a runtime call that acts on the current device; *previous receives
 * what to restore (-1: nothing). Without cudaGetDevice/cudaSetDevice only device 0 works. */
static int enter_device(int device, int *previous) {
  *previous = -1;
  if (!rt.get_device || !rt.set_device) return device == 0 ? 0 : -EINVAL;
  int current;
  int rc = from_runtime(rt.get_device(&current));
  if (rc || current == device) return rc;
  rc = from_runtime(rt.set_device(device));
  if (rc == 0) *previous = current;
  return rc;
}

static void leave_device(int previous) {
  if (previous >= 0) rt.set_device(previous);
}

static int device_count(void *ctx, int *count) {
  (void)ctx;
  return from_runtime(rt.get_device_count(count));
}

static int mem_info(void *ctx, int device, uint64_t *free_bytes, uint64_t *total_bytes) {
  (void)ctx;
  int previous;
  int rc = enter_device(device, &previous);
  if (rc) return rc;
  size_t f = 0, t = 0;
  rc = from_runtime(rt.mem_get_info(&f, &t));
  leave_device(previous);
  *free_bytes = f;
  *total_bytes = t;
  return rc;
}

static bool have_vmm(void) {
  return rt.address_reserve && rt.address_free && rt.create && rt.release && rt.map &&
         rt.unmap && rt.set_access && rt.granularity;
}

static int vmm_supported(void *ctx, int device) {
  (void)ctx;
  int value = 0;
  if (!have_vmm()) return 0;
  enum cudaDeviceAttr attribute =
      (enum cudaDeviceAttr)CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
  if (rt.device_get_attribute(&value, attribute, device) != cudaSuccess) return 0;
  return value ? 1 : 0;
}

static CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

static int granularity(void *ctx, int device, uint64_t *bytes) {
  (void)ctx;
  if (!have_vmm()) return -ENOSYS;
  pthread_once(&rt.context_once, make_context);
  CUmemAllocationProp prop = device_prop(device);
  size_t g = 0;
  int rc = from_driver(rt.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  *bytes = g;
  return rc;
}

static int va_reserve(void *ctx, uint64_t size, uint64_t align, uint64_t hint, uint64_t *addr) {
  (void)ctx;
  if (!have_vmm()) return -ENOSYS;
  pthread_once(&rt.context_once, make_context);
  CUdeviceptr p = 0;
  int rc = from_driver(rt.address_reserve(&p, size, align, hint, 0));
  *addr = p;
  return rc;
}

static int va_free(void *ctx, uint64_t addr, uint64_t size) {
  (void)ctx;
  return from_driver(rt.address_free(addr, size));
}

static int phys_create(void *ctx, int device, uint64_t size, uint64_t *handle) {
  (void)ctx;
  CUmemAllocationProp prop = device_prop(device);
  CUmemGenericAllocationHandle h = 0;
  int rc = from_driver(rt.create(&h, size, &prop, 0));
  *handle = h;
  return rc;
}

static int phys_release(void *ctx, uint64_t handle) {
  (void)ctx;
  return from_driver(rt.release(handle));
}

static int map(void *ctx, uint64_t addr, uint64_t size, uint64_t handle) {
  (void)ctx;
  return from_driver(rt.map(addr, size, 0, handle, 0));
}

static int unmap(void *ctx, uint64_t addr, uint64_t size) {
  (void)ctx;
  return from_driver(rt.unmap(addr, size));
}

static int access_for(uint64_t addr, uint64_t size, int device, CUmemAccess_flags flags) {
  CUmemAccessDesc desc;
  memset(&desc, 0, sizeof(desc));
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device;
  desc.flags = flags;
  return from_driver(rt.set_access(addr, size, &desc, 1));
}

static int set_access(void *ctx, uint64_t addr, uint64_t size, int device) {
  (void)ctx;
  return access_for(addr, size, device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
}

static int revoke_access(void *ctx, uint64_t addr, uint64_t size, int device) {
  (void)ctx;
  return access_for(addr, size, device, CU_MEM_ACCESS_FLAGS_PROT_NONE);
}

static int dev_malloc(void *ctx, int device, uint64_t size, uint64_t *real) {
  (void)ctx;
  int previous;
  int rc = enter_device(device, &previous);
  if (rc) return rc;
  void *p = NULL;
  rc = from_runtime(rt.malloc_(&p, size));
  leave_device(previous);
  *real = (uint64_t)(uintptr_t)p;
  return rc;
}

static int dev_free(void *ctx, int device, uint64_t real) {
  (void)ctx;
  (void)device; /* cudaFree finds the device from the pointer */
  return from_runtime(rt.free_((void *)(uintptr_t)real));
}

static const struct vmem_prims cuda_prims = {
    .device_count = device_count,
    .mem_info = mem_info,
    .vmm_supported = vmm_supported,
    .granularity = granularity,
    .va_reserve = va_reserve,
    .va_free = va_free,
    .phys_create = phys_create,
    .phys_release = phys_release,
    .map = map,
    .unmap = unmap,
    .set_access = set_access,
    .revoke_access = revoke_access,
    .dev_malloc = dev_malloc,
    .dev_free = dev_free,
};

static void *driver_entry(cudaGetDriverEntryPointByVersion_fn get, const char *name) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  if (get(name, &fn, ENTRY_POINT_VERSION, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess)
    return NULL;
  return fn;
}

/* Function pointers and data pointers have the same size on every platform CUDA supports. */
#define RESOLVE(field, type, name) memcpy(&(field), &(void *){resolve(name)}, sizeof(type))
#define DRIVER(field, type, name) memcpy(&(field), &(void *){driver_entry(get, name)}, sizeof(type))

int vmem_prims_cuda(void *(*resolve)(const char *symbol), const struct vmem_prims **prims,
                    void **ctx) {
  if (!resolve || !prims || !ctx) return -EINVAL;
  RESOLVE(rt.malloc_, cudaMalloc_fn, "cudaMalloc");
  RESOLVE(rt.free_, cudaFree_fn, "cudaFree");
  RESOLVE(rt.mem_get_info, cudaMemGetInfo_fn, "cudaMemGetInfo");
  RESOLVE(rt.get_device_count, cudaGetDeviceCount_fn, "cudaGetDeviceCount");
  RESOLVE(rt.device_get_attribute, cudaDeviceGetAttribute_fn, "cudaDeviceGetAttribute");
  RESOLVE(rt.get_device, cudaGetDevice_fn, "cudaGetDevice");
  RESOLVE(rt.set_device, cudaSetDevice_fn, "cudaSetDevice");
  if (!rt.malloc_ || !rt.free_ || !rt.mem_get_info || !rt.get_device_count ||
      !rt.device_get_attribute)
    return -ENOSYS;
  cudaGetDriverEntryPointByVersion_fn get;
  RESOLVE(get, cudaGetDriverEntryPointByVersion_fn, "cudaGetDriverEntryPointByVersion");
  if (get) {
    DRIVER(rt.address_reserve, cuMemAddressReserve_fn, "cuMemAddressReserve");
    DRIVER(rt.address_free, cuMemAddressFree_fn, "cuMemAddressFree");
    DRIVER(rt.create, cuMemCreate_fn, "cuMemCreate");
    DRIVER(rt.release, cuMemRelease_fn, "cuMemRelease");
    DRIVER(rt.map, cuMemMap_fn, "cuMemMap");
    DRIVER(rt.unmap, cuMemUnmap_fn, "cuMemUnmap");
    DRIVER(rt.set_access, cuMemSetAccess_fn, "cuMemSetAccess");
    DRIVER(rt.granularity, cuMemGetAllocationGranularity_fn, "cuMemGetAllocationGranularity");
  }
  *prims = &cuda_prims;
  *ctx = NULL;
  return 0;
}
