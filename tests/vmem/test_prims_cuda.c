/* Description: prims_cuda.c against a stub runtime handed in through the resolve callback: required
 * functions missing gives -ENOSYS; the driver's VMM calls are fetched through
 * cudaGetDriverEntryPointByVersion (version 12000) and nothing else; without them VMM is reported
 * unsupported; device-switching, error mapping, the cudaFree(NULL) context kick, and the VMM call
 * arguments (hint, granularity query, access descriptor) are as the contract says. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <string.h>

#include "harness.h"

static int current_device, set_device_calls, free_null_calls, entry_calls, entry_version_bad;
static cudaError_t next_malloc_error;
static CUdeviceptr last_hint;
static CUmemAccessDesc last_access;
static int attribute_asked;
static int offer_entry_point = 1;
static int missing_malloc;

static cudaError_t stub_malloc(void **p, size_t size) {
  if (next_malloc_error) {
    cudaError_t e = next_malloc_error;
    next_malloc_error = cudaSuccess;
    return e;
  }
  *p = (void *)(uintptr_t)(0x100000000ull * (current_device + 1) + size);
  return cudaSuccess;
}
static cudaError_t stub_free(void *p) {
  if (!p) free_null_calls++;
  return cudaSuccess;
}
static cudaError_t stub_mem_get_info(size_t *f, size_t *t) {
  *f = (size_t)(current_device + 1) * 1000;
  *t = (size_t)(current_device + 1) * 4000;
  return cudaSuccess;
}
static cudaError_t stub_count(int *n) {
  *n = 2;
  return cudaSuccess;
}
static cudaError_t stub_attribute(int *v, enum cudaDeviceAttr a, int device) {
  (void)device;
  attribute_asked = (int)a;
  *v = a == (enum cudaDeviceAttr)CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED;
  return cudaSuccess;
}
static cudaError_t stub_get_device(int *d) {
  *d = current_device;
  return cudaSuccess;
}
static cudaError_t stub_set_device(int d) {
  set_device_calls++;
  current_device = d;
  return cudaSuccess;
}
static CUresult stub_reserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr hint,
                             unsigned long long flags) {
  (void)size, (void)align, (void)flags;
  last_hint = hint;
  *p = hint;
  return CUDA_SUCCESS;
}
static CUresult stub_address_free(CUdeviceptr p, size_t s) { (void)p, (void)s; return CUDA_SUCCESS; }
static CUresult stub_create(CUmemGenericAllocationHandle *h, size_t s, const CUmemAllocationProp *p,
                            unsigned long long f) {
  (void)f;
  if (p->type != CU_MEM_ALLOCATION_TYPE_PINNED || p->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return CUDA_ERROR_INVALID_VALUE;
  *h = 1000 + (CUmemGenericAllocationHandle)p->location.id;
  return s > GiB ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}
static CUresult stub_release(CUmemGenericAllocationHandle h) { (void)h; return CUDA_SUCCESS; }
static CUresult stub_map(CUdeviceptr p, size_t s, size_t o, CUmemGenericAllocationHandle h,
                         unsigned long long f) {
  (void)p, (void)s, (void)h, (void)f;
  return o ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
static CUresult stub_unmap(CUdeviceptr p, size_t s) { (void)p, (void)s; return CUDA_ERROR_UNKNOWN; }
static CUresult stub_set_access(CUdeviceptr p, size_t s, const CUmemAccessDesc *d, size_t n) {
  (void)p, (void)s;
  if (n != 1) return CUDA_ERROR_INVALID_VALUE;
  last_access = *d;
  return CUDA_SUCCESS;
}
static CUresult stub_granularity(size_t *g, const CUmemAllocationProp *p,
                                 CUmemAllocationGranularity_flags o) {
  (void)p;
  *g = o == CU_MEM_ALLOC_GRANULARITY_MINIMUM ? 2 * MiB : 0;
  return CUDA_SUCCESS;
}

#define STUB(name, fn)                                                                      \
  if (strcmp(symbol, name) == 0) return (void *)(fn)

static cudaError_t stub_entry(const char *symbol, void **fn, unsigned int version,
                              unsigned long long flags,
                              enum cudaDriverEntryPointQueryResult *status) {
  entry_calls++;
  if (version != 12000 || flags != 0) entry_version_bad++;
  *fn = NULL;
  *status = cudaDriverEntryPointSymbolNotFound;
  void *found = NULL;
  if (strcmp(symbol, "cuMemAddressReserve") == 0) found = (void *)stub_reserve;
  if (strcmp(symbol, "cuMemAddressFree") == 0) found = (void *)stub_address_free;
  if (strcmp(symbol, "cuMemCreate") == 0) found = (void *)stub_create;
  if (strcmp(symbol, "cuMemRelease") == 0) found = (void *)stub_release;
  if (strcmp(symbol, "cuMemMap") == 0) found = (void *)stub_map;
  if (strcmp(symbol, "cuMemUnmap") == 0) found = (void *)stub_unmap;
  if (strcmp(symbol, "cuMemSetAccess") == 0) found = (void *)stub_set_access;
  if (strcmp(symbol, "cuMemGetAllocationGranularity") == 0) found = (void *)stub_granularity;
  if (!found) return cudaErrorSymbolNotFound;
  *fn = found;
  *status = cudaDriverEntryPointSuccess;
  return cudaSuccess;
}

static void *resolve(const char *symbol) {
  if (!missing_malloc) STUB("cudaMalloc", stub_malloc);
  STUB("cudaFree", stub_free);
  STUB("cudaMemGetInfo", stub_mem_get_info);
  STUB("cudaGetDeviceCount", stub_count);
  STUB("cudaDeviceGetAttribute", stub_attribute);
  STUB("cudaGetDevice", stub_get_device);
  STUB("cudaSetDevice", stub_set_device);
  if (offer_entry_point) STUB("cudaGetDriverEntryPointByVersion", stub_entry);
  return NULL;
}

int main(void) {
  const struct vmem_prims *p;
  void *ctx;
  missing_malloc = 1;
  CHECK_EQ(vmem_prims_cuda(resolve, &p, &ctx), -ENOSYS);
  missing_malloc = 0;

  offer_entry_point = 0;
  CHECK_EQ(vmem_prims_cuda(resolve, &p, &ctx), 0);
  CHECK_EQ(p->vmm_supported(ctx, 0), 0);
  uint64_t g;
  CHECK_EQ(p->granularity(ctx, 0, &g), -ENOSYS);

  offer_entry_point = 1;
  CHECK_EQ(vmem_prims_cuda(resolve, &p, &ctx), 0);
  CHECK_EQ(entry_calls, 8);
  CHECK_EQ(entry_version_bad, 0);
  int n;
  CHECK_EQ(p->device_count(ctx, &n), 0);
  CHECK_EQ(n, 2);
  CHECK_EQ(p->vmm_supported(ctx, 1), 1);
  CHECK_EQ(attribute_asked, 102);

  uint64_t free_bytes, total, real;
  CHECK_EQ(p->mem_info(ctx, 1, &free_bytes, &total), 0);
  CHECK(free_bytes == 2000 && total == 8000 && current_device == 0, "mem_info on device 1");
  CHECK_EQ(p->dev_malloc(ctx, 1, 512, &real), 0);
  CHECK_EQ(real, 0x200000000ull + 512);
  CHECK_EQ(current_device, 0); /* restored */
  set_device_calls = 0;
  CHECK_EQ(p->dev_malloc(ctx, 0, 512, &real), 0);
  CHECK_EQ(set_device_calls, 0); /* already current: no switch */
  next_malloc_error = cudaErrorMemoryAllocation;
  CHECK_EQ(p->dev_malloc(ctx, 0, 512, &real), -ENOMEM);

  CHECK_EQ(free_null_calls, 0);
  CHECK_EQ(p->granularity(ctx, 0, &g), 0);
  CHECK_EQ(g, 2 * MiB);
  CHECK_EQ(free_null_calls, 1); /* the primary context, made once */
  uint64_t addr;
  CHECK_EQ(p->va_reserve(ctx, 4 * GiB, 2 * MiB, 0x7f0000000000ull, &addr), 0);
  CHECK_EQ(last_hint, 0x7f0000000000ull);
  CHECK_EQ(free_null_calls, 1);
  uint64_t h;
  CHECK_EQ(p->phys_create(ctx, 1, 2 * MiB, &h), 0);
  CHECK_EQ(h, 1001);
  CHECK_EQ(p->phys_create(ctx, 1, 2 * GiB, &h), -ENOMEM);
  CHECK_EQ(p->map(ctx, addr, 2 * MiB, 1001), 0);
  CHECK_EQ(p->set_access(ctx, addr, 2 * MiB, 1), 0);
  CHECK(last_access.location.type == CU_MEM_LOCATION_TYPE_DEVICE && last_access.location.id == 1 &&
            last_access.flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        "access descriptor");
  CHECK_EQ(p->unmap(ctx, addr, 2 * MiB), -EIO);
  CHECK_EQ(p->phys_release(ctx, 1001), 0);
  CHECK_EQ(p->va_free(ctx, addr, 4 * GiB), 0);
  printf("ok\n");
  return 0;
}
