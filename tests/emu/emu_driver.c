/* emu_driver.c: the emulated driver API, reachable through cudaGetDriverEntryPoint(ByVersion) and,
 * like libcuda.so.1, as exported symbols under cuda.h's versioned names (cuMemAlloc_v2) with
 * cuGetProcAddress(_v2), so that cudaw's driver layer can forward to it (CUDAW_REAL_CUDA). Each
 * function has exactly its cuda.h signature, which the table below checks at compile time. VMM
 * maps onto emu_memory.c's memfd-backed mappings. */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <string.h>

#include "delta_hash.h"
#include "emu_internal.h"

/* One primary context per device; making one current makes its device the thread's current one,
 * as the runtime's cudaSetDevice does (the runtime and the driver share it, as in CUDA). */
static char primary_context_storage[EMU_MAX_DEVICES];
#define PRIMARY_CONTEXT_OF(device) ((CUcontext)(void *)&primary_context_storage[(device)])
#define PRIMARY_CONTEXT PRIMARY_CONTEXT_OF(emu_current_device())

static bool valid_device(CUdevice device) { return device >= 0 && device < emu_device_count(); }

static CUresult result_from_errno(int negative_errno) {
  switch (negative_errno) {
  case 0: return CUDA_SUCCESS;
  case -ENOMEM: return CUDA_ERROR_OUT_OF_MEMORY;
  case -EFAULT: return CUDA_ERROR_ILLEGAL_ADDRESS;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
}

static CUresult check_stream(CUstream stream) {
  return emu_stream_check((cudaStream_t)stream) ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

static CUresult emu_cuInit(unsigned int flags) {
  emu_init();
  return flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult emu_cuDriverGetVersion(int *version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

static CUresult emu_cuDeviceGetCount(int *count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = emu_device_count();
  return CUDA_SUCCESS;
}

static CUresult emu_cuDeviceGet(CUdevice *device, int ordinal) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

static CUresult emu_cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice device) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  return emu_device_attribute((int)attribute, value) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static CUresult emu_cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device) {
  if (!context) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  *context = PRIMARY_CONTEXT_OF(device);
  return CUDA_SUCCESS;
}

static CUresult emu_cuDevicePrimaryCtxRelease(CUdevice device) {
  return valid_device(device) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static CUresult emu_cuDevicePrimaryCtxGetState(CUdevice device, unsigned int *flags, int *active) {
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  *flags = 0;
  *active = 1; /* the emu's one context exists from the start */
  return CUDA_SUCCESS;
}

static CUresult emu_cuCtxGetCurrent(CUcontext *context) {
  if (!context) return CUDA_ERROR_INVALID_VALUE;
  *context = PRIMARY_CONTEXT; /* the runtime made the primary context current at init */
  return CUDA_SUCCESS;
}

static CUresult emu_cuCtxSetCurrent(CUcontext context) {
  if (!context) return CUDA_SUCCESS;
  for (int device = 0; device < emu_device_count(); device++)
    if (context == PRIMARY_CONTEXT_OF(device)) {
      emu_set_current_device(device);
      return CUDA_SUCCESS;
    }
  return CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult emu_cuCtxGetDevice(CUdevice *device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  *device = emu_current_device();
  return CUDA_SUCCESS;
}

/* Peer access between primary contexts: the runtime's, for the current device. */
static CUresult peer_result(cudaError_t error) {
  switch (error) {
  case cudaSuccess: return CUDA_SUCCESS;
  case cudaErrorPeerAccessAlreadyEnabled: return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  case cudaErrorPeerAccessNotEnabled: return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  case cudaErrorInvalidDevice: return CUDA_ERROR_INVALID_DEVICE;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
}

static int context_device(CUcontext context) {
  for (int device = 0; device < emu_device_count(); device++)
    if (context == PRIMARY_CONTEXT_OF(device)) return device;
  return -1;
}

static CUresult emu_cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  int device = context_device(peer);
  if (device < 0) return CUDA_ERROR_INVALID_CONTEXT;
  return peer_result(cudaDeviceEnablePeerAccess(device, flags));
}

static CUresult emu_cuCtxDisablePeerAccess(CUcontext peer) {
  int device = context_device(peer);
  if (device < 0) return CUDA_ERROR_INVALID_CONTEXT;
  return peer_result(cudaDeviceDisablePeerAccess(device));
}

static CUresult emu_cuCtxSynchronize(void) {
  emu_pool_synchronized(emu_current_device());
  return CUDA_SUCCESS;
}

static CUresult emu_cuStreamSynchronize(CUstream stream) {
  CUresult result = check_stream(stream);
  if (result == CUDA_SUCCESS) emu_pool_synchronized(emu_current_device());
  return result;
}

/* ---- stream-ordered allocation and pools: the runtime's (emu_pool.c) under driver names ---- */

static CUresult from_runtime(cudaError_t error) {
  switch (error) {
  case cudaSuccess: return CUDA_SUCCESS;
  case cudaErrorInvalidValue: return CUDA_ERROR_INVALID_VALUE;
  case cudaErrorMemoryAllocation: return CUDA_ERROR_OUT_OF_MEMORY;
  case cudaErrorInvalidResourceHandle: return CUDA_ERROR_INVALID_HANDLE;
  case cudaErrorInvalidDevice: return CUDA_ERROR_INVALID_DEVICE;
  case cudaErrorInvalidConfiguration: return CUDA_ERROR_INVALID_VALUE;
  case cudaErrorIllegalAddress: return CUDA_ERROR_ILLEGAL_ADDRESS;
  default: return CUDA_ERROR_NOT_FOUND;
  }
}

static CUresult emu_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  void *ptr = NULL;
  CUresult result = from_runtime(emu_pool_alloc(&ptr, size, NULL, (cudaStream_t)stream));
  if (result == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)ptr;
  return result;
}

static CUresult emu_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
                                            CUstream stream) {
  if (!dptr || !pool) return CUDA_ERROR_INVALID_VALUE;
  void *ptr = NULL;
  CUresult result =
      from_runtime(emu_pool_alloc(&ptr, size, (cudaMemPool_t)pool, (cudaStream_t)stream));
  if (result == CUDA_SUCCESS) *dptr = (CUdeviceptr)(uintptr_t)ptr;
  return result;
}

static CUresult emu_cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return from_runtime(emu_free_async((void *)(uintptr_t)dptr, (cudaStream_t)stream));
}

static CUresult emu_cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice device) {
  return from_runtime(cudaDeviceGetDefaultMemPool((cudaMemPool_t *)pool, (int)device));
}

static CUresult emu_cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice device) {
  return from_runtime(cudaDeviceGetMemPool((cudaMemPool_t *)pool, (int)device));
}

/* The driver's attribute numbers are the runtime's. */
static CUresult emu_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                          void *value) {
  return from_runtime(
      cudaMemPoolGetAttribute((cudaMemPool_t)pool, (enum cudaMemPoolAttr)attr, value));
}

static CUresult emu_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                          void *value) {
  return from_runtime(
      cudaMemPoolSetAttribute((cudaMemPool_t)pool, (enum cudaMemPoolAttr)attr, value));
}

static CUresult emu_cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  return from_runtime(cudaMemPoolTrimTo((cudaMemPool_t)pool, keep));
}

static CUresult emu_cuMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  size_t used, quota;
  emu_memory_info(emu_current_device(), &used, &quota);
  *free_bytes = quota - used;
  *total_bytes = quota;
  return CUDA_SUCCESS;
}

static CUresult emu_cuMemAlloc(CUdeviceptr *ptr, size_t size) {
  if (!ptr || !size) return CUDA_ERROR_INVALID_VALUE;
  void *p;
  int err = emu_memory_alloc(size, EMU_SPACE_DEVICE, &p);
  if (!err) *ptr = (CUdeviceptr)(uintptr_t)p;
  return result_from_errno(err);
}

static CUresult emu_cuMemFree(CUdeviceptr ptr) {
  if (!ptr) return CUDA_SUCCESS;
  return result_from_errno(emu_memory_free((void *)(uintptr_t)ptr,
                                           EMU_KIND_BIT(EMU_SPACE_DEVICE) |
                                               EMU_KIND_BIT(EMU_SPACE_MANAGED)));
}

/* ---- virtual memory management ---- */

static CUresult emu_cuMemGetAllocationGranularity(size_t *granularity,
                                                  const CUmemAllocationProp *prop,
                                                  CUmemAllocationGranularity_flags option) {
  (void)option;
  if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
  *granularity = EMU_VMM_GRANULARITY;
  return CUDA_SUCCESS;
}

static CUresult emu_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                        CUdeviceptr address, unsigned long long flags) {
  (void)flags;
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  uintptr_t at;
  int err = emu_vmm_reserve(size, alignment, (uintptr_t)address, &at);
  if (!err) *ptr = (CUdeviceptr)at;
  return result_from_errno(err);
}

static CUresult emu_cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return result_from_errno(emu_vmm_free((uintptr_t)ptr, size));
}

static CUresult emu_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                const CUmemAllocationProp *prop, unsigned long long flags) {
  if (!handle || !prop || flags) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  int device = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : 0;
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  uint64_t created;
  int err = emu_vmm_create(device, size, &created);
  if (!err) *handle = created;
  return result_from_errno(err);
}

static CUresult emu_cuMemRelease(CUmemGenericAllocationHandle handle) {
  return result_from_errno(emu_vmm_release(handle));
}

static CUresult emu_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                             CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (flags) return CUDA_ERROR_INVALID_VALUE;
  return result_from_errno(emu_vmm_map((uintptr_t)ptr, size, offset, handle));
}

static CUresult emu_cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return result_from_errno(emu_vmm_unmap((uintptr_t)ptr, size));
}

static CUresult emu_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                   size_t count) {
  if (!desc || !count) return CUDA_ERROR_INVALID_VALUE;
  unsigned changed = 0, readable = 0;
  for (size_t i = 0; i < count; i++) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) continue; /* no host access */
    if (!valid_device(desc[i].location.id)) return CUDA_ERROR_INVALID_DEVICE;
    unsigned bit = 1u << desc[i].location.id;
    changed |= bit;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ||
        desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ)
      readable |= bit; /* read-only is emulated as read-write */
    else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE)
      return CUDA_ERROR_INVALID_VALUE;
  }
  return result_from_errno(emu_vmm_set_access((uintptr_t)ptr, size, changed, readable));
}

/* ---- pointers, copies, memsets ---- */

static CUresult emu_cuPointerGetAttribute(void *data, CUpointer_attribute attribute,
                                          CUdeviceptr ptr) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  const void *address = (const void *)(uintptr_t)ptr;
  struct emu_range range;
  uintptr_t host_base;
  size_t host_size;
  bool device = emu_memory_lookup(address, &range) == 0;
  if (!device && emu_host_lookup(address, &host_base, &host_size)) return CUDA_ERROR_INVALID_VALUE;
  if (!device) range = (struct emu_range){host_base, host_size, EMU_SPACE_DEVICE, false, 0, 0};
  bool managed = device && range.kind == EMU_SPACE_MANAGED;
  switch (attribute) {
  case CU_POINTER_ATTRIBUTE_CONTEXT:
    *(CUcontext *)data = PRIMARY_CONTEXT_OF(device ? range.device : emu_current_device());
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    *(unsigned *)data = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: *(CUdeviceptr *)data = ptr; return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_HOST_POINTER:
    if (device && !managed) return CUDA_ERROR_INVALID_VALUE;
    *(void **)data = (void *)address;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned *)data = managed; return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    *(int *)data = device ? range.device : emu_current_device();
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_BUFFER_ID: *(unsigned long long *)data = range.base; return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = range.base; return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = range.size; return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MAPPED: *(unsigned *)data = 1; return CUDA_SUCCESS;
  default: return CUDA_ERROR_INVALID_VALUE;
  }
}

static CUresult emu_cuMemGetAddressRange(CUdeviceptr *base, size_t *size, CUdeviceptr ptr) {
  uintptr_t block;
  size_t bytes;
  if (emu_pool_block_range((const void *)(uintptr_t)ptr, &block, &bytes) == 0) {
    if (base) *base = block; /* a pool's block, not its segment */
    if (size) *size = bytes;
    return CUDA_SUCCESS;
  }
  struct emu_range range;
  if (emu_memory_lookup((const void *)(uintptr_t)ptr, &range)) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = range.base;
  if (size) *size = range.size;
  return CUDA_SUCCESS;
}

static CUresult copy(void *dst, enum emu_side dst_side, const void *src, enum emu_side src_side,
                     size_t count, CUstream stream) {
  if (check_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  return result_from_errno(emu_memory_copy2d(dst, count, dst_side, src, count, src_side, count, 1));
}

#define DEVICE_ADDRESS(p) ((void *)(uintptr_t)(p))

static CUresult emu_cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t count) {
  return copy(DEVICE_ADDRESS(dst), EMU_SIDE_DEVICE, src, EMU_SIDE_HOST, count, NULL);
}
static CUresult emu_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t count) {
  return copy(dst, EMU_SIDE_HOST, DEVICE_ADDRESS(src), EMU_SIDE_DEVICE, count, NULL);
}
static CUresult emu_cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t count) {
  return copy(DEVICE_ADDRESS(dst), EMU_SIDE_DEVICE, DEVICE_ADDRESS(src), EMU_SIDE_DEVICE, count, NULL);
}
static CUresult emu_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t count, CUstream s) {
  return copy(DEVICE_ADDRESS(dst), EMU_SIDE_DEVICE, src, EMU_SIDE_HOST, count, s);
}
static CUresult emu_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t count, CUstream s) {
  return copy(dst, EMU_SIDE_HOST, DEVICE_ADDRESS(src), EMU_SIDE_DEVICE, count, s);
}
static CUresult emu_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t count, CUstream s) {
  return copy(DEVICE_ADDRESS(dst), EMU_SIDE_DEVICE, DEVICE_ADDRESS(src), EMU_SIDE_DEVICE, count, s);
}

/* Batched device-to-device copies (the attributes are hints the emu does not need). */
static CUresult emu_cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
                                       size_t count, CUmemcpyAttributes *attrs, size_t *attrsIdxs,
                                       size_t numAttrs, CUstream s) {
  (void)attrs, (void)attrsIdxs, (void)numAttrs;
  if (!dsts || !srcs || !sizes || !count) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; i++) {
    CUresult rc = emu_cuMemcpyDtoDAsync(dsts[i], srcs[i], sizes[i], s);
    if (rc) return rc;
  }
  return CUDA_SUCCESS;
}

/* Batched 3D copies: device pointer operands, one row each. */
static CUresult emu_cuMemcpy3DBatchAsync(size_t count, CUDA_MEMCPY3D_BATCH_OP *ops,
                                         unsigned long long flags, CUstream s) {
  if (!ops || !count || flags) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; i++) {
    const CUDA_MEMCPY3D_BATCH_OP *op = &ops[i];
    if (op->src.type != CU_MEMCPY_OPERAND_TYPE_POINTER ||
        op->dst.type != CU_MEMCPY_OPERAND_TYPE_POINTER || op->extent.height > 1 ||
        op->extent.depth > 1)
      return CUDA_ERROR_NOT_SUPPORTED;
    CUresult rc = emu_cuMemcpyDtoDAsync(op->dst.op.ptr.ptr, op->src.op.ptr.ptr, op->extent.width, s);
    if (rc) return rc;
  }
  return CUDA_SUCCESS;
}

/* Texture objects over linear and pitched memory: the emu's runtime objects (emu_texture.c). */
static CUresult runtime_resource(const CUDA_RESOURCE_DESC *r, struct cudaResourceDesc *out) {
  memset(out, 0, sizeof *out);
  if (r->resType == CU_RESOURCE_TYPE_LINEAR) {
    out->resType = cudaResourceTypeLinear;
    out->res.linear.devPtr = (void *)(uintptr_t)r->res.linear.devPtr;
    out->res.linear.sizeInBytes = r->res.linear.sizeInBytes;
    out->res.linear.desc.x = 32;
  } else if (r->resType == CU_RESOURCE_TYPE_PITCH2D) {
    out->resType = cudaResourceTypePitch2D;
    out->res.pitch2D.devPtr = (void *)(uintptr_t)r->res.pitch2D.devPtr;
    out->res.pitch2D.width = r->res.pitch2D.width;
    out->res.pitch2D.height = r->res.pitch2D.height;
    out->res.pitch2D.pitchInBytes = r->res.pitch2D.pitchInBytes;
    out->res.pitch2D.desc.x = 32; /* the emu reads no texels: the span is what it checks */
  } else {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

static CUresult emu_cuTexObjectCreate(CUtexObject *handle, const CUDA_RESOURCE_DESC *r,
                                      const CUDA_TEXTURE_DESC *t, const CUDA_RESOURCE_VIEW_DESC *v) {
  (void)v;
  if (!handle || !r || !t) return CUDA_ERROR_INVALID_VALUE;
  struct cudaResourceDesc resource;
  CUresult rc = runtime_resource(r, &resource);
  struct cudaTextureDesc texture = {.readMode = cudaReadModeElementType};
  return rc ? rc : from_runtime(cudaCreateTextureObject((cudaTextureObject_t *)handle, &resource,
                                                        &texture, NULL));
}

static CUresult emu_cuTexObjectDestroy(CUtexObject handle) {
  return from_runtime(cudaDestroyTextureObject((cudaTextureObject_t)handle));
}

static CUresult emu_cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *out, CUtexObject handle) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  struct cudaResourceDesc r;
  CUresult rc = from_runtime(cudaGetTextureObjectResourceDesc(&r, (cudaTextureObject_t)handle));
  if (rc) return rc;
  memset(out, 0, sizeof *out);
  if (r.resType == cudaResourceTypeLinear) {
    out->resType = CU_RESOURCE_TYPE_LINEAR;
    out->res.linear.devPtr = (CUdeviceptr)(uintptr_t)r.res.linear.devPtr;
    out->res.linear.sizeInBytes = r.res.linear.sizeInBytes;
  } else if (r.resType == cudaResourceTypePitch2D) {
    out->resType = CU_RESOURCE_TYPE_PITCH2D;
    out->res.pitch2D.devPtr = (CUdeviceptr)(uintptr_t)r.res.pitch2D.devPtr;
    out->res.pitch2D.width = r.res.pitch2D.width;
    out->res.pitch2D.height = r.res.pitch2D.height;
    out->res.pitch2D.pitchInBytes = r.res.pitch2D.pitchInBytes;
    out->res.pitch2D.format = CU_AD_FORMAT_FLOAT;
    out->res.pitch2D.numChannels = 1;
  } else {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

/* Host <-> device rectangles (no arrays). */
static CUresult emu_cuMemcpy2D(const CUDA_MEMCPY2D *c) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  bool src_device = c->srcMemoryType == CU_MEMORYTYPE_DEVICE;
  bool dst_device = c->dstMemoryType == CU_MEMORYTYPE_DEVICE;
  if ((!src_device && c->srcMemoryType != CU_MEMORYTYPE_HOST) ||
      (!dst_device && c->dstMemoryType != CU_MEMORYTYPE_HOST))
    return CUDA_ERROR_NOT_SUPPORTED;
  const unsigned char *src = src_device ? (const unsigned char *)DEVICE_ADDRESS(c->srcDevice)
                                        : (const unsigned char *)c->srcHost;
  unsigned char *dst = dst_device ? (unsigned char *)DEVICE_ADDRESS(c->dstDevice)
                                  : (unsigned char *)c->dstHost;
  src += c->srcY * c->srcPitch + c->srcXInBytes;
  dst += c->dstY * c->dstPitch + c->dstXInBytes;
  return result_from_errno(emu_memory_copy2d(dst, c->dstPitch, dst_device ? EMU_SIDE_DEVICE
                                                                           : EMU_SIDE_HOST,
                                             src, c->srcPitch, src_device ? EMU_SIDE_DEVICE
                                                                          : EMU_SIDE_HOST,
                                             c->WidthInBytes, c->Height));
}

static CUresult emu_cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count,
                                    CUstream stream) {
  if (check_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
  return result_from_errno(emu_memory_set2d(DEVICE_ADDRESS(dst), count, value, count, 1));
}

static CUresult emu_cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t count) {
  return emu_cuMemsetD8Async(dst, value, count, NULL);
}

/* ---- modules: cudaw's own delta kernel, computed on the host ---- */

/* cudaw's delta checksum kernel (checkpoint/delta_kernel.cu), recognised by its name in the
 * module's image (a fatbinary, or PTX text) and computed with the host reference (delta_hash.h);
 * other modules are the emu's libraries (below). Arguments as the kernel's: the
 * piece table, the number of pieces and where the sums go (all host-addressable here). */
static char delta_module_storage, delta_function_storage;
#define DELTA_MODULE ((CUmodule)(void *)&delta_module_storage)
#define DELTA_FUNCTION ((CUfunction)(void *)&delta_function_storage)

static bool is_delta_image(const void *image) {
  uint32_t magic;
  memcpy(&magic, image, sizeof magic);
  size_t size = strlen((const char *)image); /* PTX text */
  if (magic == 0xBA55ED50u) { /* fatbinary: 16-byte header, then fat_size bytes */
    uint64_t fat_size;
    memcpy(&fat_size, (const char *)image + 8, sizeof fat_size);
    size = 16 + (size_t)fat_size;
  }
  return memmem(image, size, "cudaw_delta_hash", strlen("cudaw_delta_hash")) != NULL;
}

static CUresult delta_get_function(CUfunction *function, const char *name) {
  if (strcmp(name, "cudaw_delta_hash")) return CUDA_ERROR_NOT_FOUND;
  *function = DELTA_FUNCTION;
  return CUDA_SUCCESS;
}

static CUresult delta_launch(CUfunction function, unsigned grid_x, unsigned grid_y,
                                   unsigned grid_z, unsigned block_x, unsigned block_y,
                                   unsigned block_z, unsigned shared_bytes, CUstream stream,
                                   void **params, void **extra) {
  (void)shared_bytes;
  if (function != DELTA_FUNCTION || !params || extra) return CUDA_ERROR_INVALID_VALUE;
  if (!grid_x || !grid_y || !grid_z || !block_x || !block_y || !block_z)
    return CUDA_ERROR_INVALID_VALUE;
  CUresult rc = check_stream(stream);
  if (rc != CUDA_SUCCESS) return rc;
  const struct ckpt_delta_piece *table = *(const struct ckpt_delta_piece **)params[0];
  unsigned long long count = *(const unsigned long long *)params[1];
  uint64_t *sums = *(uint64_t **)params[2];
  /* The kernel runs on the current device, which must reach every piece (as on a GPU). */
  for (unsigned long long i = 0; i < count; i++)
    if (emu_memory_kernel_access(emu_current_device(), (const void *)(uintptr_t)table[i].address,
                                 table[i].bytes))
      return CUDA_ERROR_ILLEGAL_ADDRESS;
  for (unsigned long long i = 0; i < count; i++)
    sums[i] = ckpt_delta_hash((const void *)(uintptr_t)table[i].address, table[i].bytes);
  return CUDA_SUCCESS;
}

/* ---- modules and launches: the emu's libraries (emu_launch.c) under the driver's names ---- */

static CUresult emu_cuModuleLoadData(CUmodule *module, const void *image) {
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  if (is_delta_image(image)) {
    *module = DELTA_MODULE;
    return CUDA_SUCCESS;
  }
  return from_runtime(cudaLibraryLoadData((cudaLibrary_t *)module, image, NULL, NULL, 0, NULL,
                                          NULL, 0));
}

static CUresult emu_cuModuleGetFunction(CUfunction *function, CUmodule module, const char *name) {
  if (!function || !name) return CUDA_ERROR_INVALID_VALUE;
  if (module == DELTA_MODULE) return delta_get_function(function, name);
  return from_runtime(cudaLibraryGetKernel((cudaKernel_t *)function, (cudaLibrary_t)module, name));
}

static CUresult emu_cuModuleUnload(CUmodule module) {
  if (module == DELTA_MODULE) return CUDA_SUCCESS;
  return from_runtime(cudaLibraryUnload((cudaLibrary_t)module));
}

/* The packed `extra` form is not emulated. */
static CUresult emu_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                   unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                   CUstream stream, void **params, void **extra) {
  if (f == DELTA_FUNCTION) return delta_launch(f, gx, gy, gz, bx, by, bz, shared, stream, params,
                                              extra);
  if (extra) return CUDA_ERROR_NOT_SUPPORTED;
  return from_runtime(emu_launch(f, (dim3){gx, gy, gz}, (dim3){bx, by, bz}, params, shared,
                                 (cudaStream_t)stream));
}

/* ---- graphs: the emu's runtime graphs (emu_graph.c) under the driver's names ---- */

static CUresult emu_cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) {
  (void)mode;
  return from_runtime(emu_begin_capture((cudaStream_t)stream));
}

static CUresult emu_cuStreamEndCapture(CUstream stream, CUgraph *graph) {
  return from_runtime(emu_end_capture((cudaStream_t)stream, (cudaGraph_t *)graph));
}

static CUresult emu_cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus *status) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  enum cudaStreamCaptureStatus runtime_status = cudaStreamCaptureStatusNone;
  CUresult rc = from_runtime(emu_is_capturing((cudaStream_t)stream, &runtime_status));
  if (rc == CUDA_SUCCESS) *status = (CUstreamCaptureStatus)runtime_status;
  return rc;
}

static CUresult emu_cuGraphCreate(CUgraph *graph, unsigned int flags) {
  return from_runtime(cudaGraphCreate((cudaGraph_t *)graph, flags));
}

static CUresult emu_cuGraphAddKernelNode(CUgraphNode *node, CUgraph graph,
                                         const CUgraphNode *dependencies, size_t count,
                                         const CUDA_KERNEL_NODE_PARAMS *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  struct cudaKernelNodeParams params = {
      .func = p->func ? (void *)p->func : (void *)p->kern,
      .gridDim = {p->gridDimX, p->gridDimY, p->gridDimZ},
      .blockDim = {p->blockDimX, p->blockDimY, p->blockDimZ},
      .sharedMemBytes = p->sharedMemBytes, .kernelParams = p->kernelParams, .extra = p->extra};
  return from_runtime(cudaGraphAddKernelNode((cudaGraphNode_t *)node, (cudaGraph_t)graph,
                                             (const cudaGraphNode_t *)dependencies, count,
                                             &params));
}

static CUresult emu_cuGraphAddMemcpyNode(CUgraphNode *node, CUgraph graph,
                                         const CUgraphNode *dependencies, size_t count,
                                         const CUDA_MEMCPY3D *p, CUcontext ctx);
static CUresult emu_cuGraphAddMemsetNode(CUgraphNode *node, CUgraph graph,
                                         const CUgraphNode *dependencies, size_t count,
                                         const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx);

/* Kernel, memcpy and memset nodes. */
static CUresult emu_cuGraphAddNode(CUgraphNode *node, CUgraph graph,
                                   const CUgraphNode *dependencies, const CUgraphEdgeData *edges,
                                   size_t count, CUgraphNodeParams *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (p->type == CU_GRAPH_NODE_TYPE_MEMCPY)
    return emu_cuGraphAddMemcpyNode(node, graph, dependencies, count, &p->memcpy.copyParams,
                                    p->memcpy.copyCtx);
  if (p->type == CU_GRAPH_NODE_TYPE_MEMSET) {
    const CUDA_MEMSET_NODE_PARAMS_v2 *m = &p->memset;
    CUDA_MEMSET_NODE_PARAMS set = {.dst = m->dst, .pitch = m->pitch, .value = m->value,
                                   .elementSize = m->elementSize, .width = m->width,
                                   .height = m->height};
    return emu_cuGraphAddMemsetNode(node, graph, dependencies, count, &set, m->ctx);
  }
  if (p->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_NOT_SUPPORTED;
  const CUDA_KERNEL_NODE_PARAMS_v3 *k = &p->kernel;
  struct cudaGraphNodeParams params = {.type = cudaGraphNodeTypeKernel};
  params.kernel = (struct cudaKernelNodeParamsV2){
      .func = k->func ? (void *)k->func : (void *)k->kern,
      .gridDim = {k->gridDimX, k->gridDimY, k->gridDimZ},
      .blockDim = {k->blockDimX, k->blockDimY, k->blockDimZ},
      .sharedMemBytes = k->sharedMemBytes, .kernelParams = k->kernelParams, .extra = k->extra};
  return from_runtime(cudaGraphAddNode((cudaGraphNode_t *)node, (cudaGraph_t)graph,
                                       (const cudaGraphNode_t *)dependencies,
                                       (const cudaGraphEdgeData *)edges, count, &params));
}

static struct cudaKernelNodeParams runtime_kernel_params(const CUDA_KERNEL_NODE_PARAMS *p) {
  return (struct cudaKernelNodeParams){
      .func = p->func ? (void *)p->func : (void *)p->kern,
      .gridDim = {p->gridDimX, p->gridDimY, p->gridDimZ},
      .blockDim = {p->blockDimX, p->blockDimY, p->blockDimZ},
      .sharedMemBytes = p->sharedMemBytes, .kernelParams = p->kernelParams, .extra = p->extra};
}

static CUresult emu_cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  struct cudaKernelNodeParams params = runtime_kernel_params(p);
  return from_runtime(cudaGraphKernelNodeSetParams((cudaGraphNode_t)node, &params));
}

static CUresult emu_cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                   const CUDA_KERNEL_NODE_PARAMS *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  struct cudaKernelNodeParams params = runtime_kernel_params(p);
  return from_runtime(cudaGraphExecKernelNodeSetParams((cudaGraphExec_t)exec,
                                                       (cudaGraphNode_t)node, &params));
}

/* Memcpy and memset nodes: the emu's runtime nodes (linear memory, one row; byte values). */
static CUresult runtime_copy(const CUDA_MEMCPY3D *p, struct cudaMemcpy3DParms *out) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (p->srcMemoryType == CU_MEMORYTYPE_ARRAY || p->dstMemoryType == CU_MEMORYTYPE_ARRAY)
    return CUDA_ERROR_NOT_SUPPORTED;
  memset(out, 0, sizeof *out);
  out->srcPtr.ptr = p->srcMemoryType == CU_MEMORYTYPE_HOST ? (void *)p->srcHost
                                                           : (void *)(uintptr_t)p->srcDevice;
  out->dstPtr.ptr = p->dstMemoryType == CU_MEMORYTYPE_HOST ? p->dstHost
                                                           : (void *)(uintptr_t)p->dstDevice;
  out->srcPtr.pitch = p->srcPitch, out->dstPtr.pitch = p->dstPitch;
  out->extent.width = p->WidthInBytes;
  out->extent.height = p->Height ? p->Height : 1;
  out->extent.depth = p->Depth ? p->Depth : 1;
  out->kind = cudaMemcpyDefault;
  return CUDA_SUCCESS;
}

static struct cudaMemsetParams runtime_set(const CUDA_MEMSET_NODE_PARAMS *p) {
  return (struct cudaMemsetParams){.dst = (void *)(uintptr_t)p->dst, .pitch = p->pitch,
                                   .value = p->value, .elementSize = p->elementSize,
                                   .width = p->width, .height = p->height};
}

static CUresult emu_cuGraphAddMemcpyNode(CUgraphNode *node, CUgraph graph,
                                         const CUgraphNode *dependencies, size_t count,
                                         const CUDA_MEMCPY3D *p, CUcontext ctx) {
  (void)ctx;
  struct cudaMemcpy3DParms copy;
  CUresult rc = runtime_copy(p, &copy);
  return rc ? rc : from_runtime(cudaGraphAddMemcpyNode((cudaGraphNode_t *)node, (cudaGraph_t)graph,
                                                       (const cudaGraphNode_t *)dependencies,
                                                       count, &copy));
}

static CUresult emu_cuGraphAddMemsetNode(CUgraphNode *node, CUgraph graph,
                                         const CUgraphNode *dependencies, size_t count,
                                         const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx) {
  (void)ctx;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  struct cudaMemsetParams set = runtime_set(p);
  return from_runtime(cudaGraphAddMemsetNode((cudaGraphNode_t *)node, (cudaGraph_t)graph,
                                             (const cudaGraphNode_t *)dependencies, count, &set));
}

static CUresult emu_cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D *p) {
  struct cudaMemcpy3DParms copy;
  CUresult rc = runtime_copy(p, &copy);
  return rc ? rc : from_runtime(cudaGraphMemcpyNodeSetParams((cudaGraphNode_t)node, &copy));
}

static CUresult emu_cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS *p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  struct cudaMemsetParams set = runtime_set(p);
  return from_runtime(cudaGraphMemsetNodeSetParams((cudaGraphNode_t)node, &set));
}

static CUresult emu_cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                   const CUDA_MEMCPY3D *p, CUcontext ctx) {
  (void)ctx;
  struct cudaMemcpy3DParms copy;
  CUresult rc = runtime_copy(p, &copy);
  return rc ? rc
            : from_runtime(cudaGraphExecMemcpyNodeSetParams((cudaGraphExec_t)exec,
                                                            (cudaGraphNode_t)node, &copy));
}

static CUresult emu_cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                   const CUDA_MEMSET_NODE_PARAMS *p,
                                                   CUcontext ctx) {
  (void)ctx;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  struct cudaMemsetParams set = runtime_set(p);
  return from_runtime(
      cudaGraphExecMemsetNodeSetParams((cudaGraphExec_t)exec, (cudaGraphNode_t)node, &set));
}

static CUresult emu_cuStreamCreate(CUstream *stream, unsigned int flags) {
  return from_runtime(cudaStreamCreateWithFlags((cudaStream_t *)stream, flags));
}

static CUresult emu_cuStreamDestroy(CUstream stream) {
  return from_runtime(cudaStreamDestroy((cudaStream_t)stream));
}

static CUresult emu_cuStreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus *status,
                                           cuuint64_t *id, CUgraph *graph,
                                           const CUgraphNode **dependencies,
                                           const CUgraphEdgeData **edges, size_t *count) {
  enum cudaStreamCaptureStatus runtime_status = cudaStreamCaptureStatusNone;
  unsigned long long runtime_id = 0;
  CUresult rc = from_runtime(cudaStreamGetCaptureInfo(
      (cudaStream_t)stream, status ? &runtime_status : NULL, id ? &runtime_id : NULL,
      (cudaGraph_t *)graph, (const cudaGraphNode_t **)dependencies,
      (const cudaGraphEdgeData **)edges, count));
  if (rc == CUDA_SUCCESS && status) *status = (CUstreamCaptureStatus)runtime_status;
  if (rc == CUDA_SUCCESS && id) *id = runtime_id;
  return rc;
}

static CUresult emu_cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *count) {
  return from_runtime(cudaGraphGetNodes((cudaGraph_t)graph, (cudaGraphNode_t *)nodes, count));
}

static CUresult emu_cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type) {
  enum cudaGraphNodeType runtime_type;
  CUresult rc = from_runtime(cudaGraphNodeGetType((cudaGraphNode_t)node, &runtime_type));
  if (rc == CUDA_SUCCESS && type) *type = (CUgraphNodeType)runtime_type; /* same values */
  return rc;
}

static CUresult emu_cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph,
                                                unsigned long long flags) {
  return from_runtime(cudaGraphInstantiateWithFlags((cudaGraphExec_t *)exec, (cudaGraph_t)graph,
                                                    flags));
}

static CUresult emu_cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  return from_runtime(cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)stream));
}

static CUresult emu_cuGraphDestroy(CUgraph graph) {
  return from_runtime(cudaGraphDestroy((cudaGraph_t)graph));
}

static CUresult emu_cuGraphExecDestroy(CUgraphExec exec) {
  return from_runtime(cudaGraphExecDestroy((cudaGraphExec_t)exec));
}

/* The emu has no device image: it describes the parameters a test declared
 * (cudaw_emu_set_kernel_param_sizes), and no others. */
static CUresult emu_cuFuncGetParamInfo(CUfunction func, size_t index, size_t *offset,
                                       size_t *size) {
  if (!offset || !size) return CUDA_ERROR_INVALID_VALUE;
  return emu_kernel_param_info(func, index, offset, size) ? CUDA_ERROR_INVALID_VALUE
                                                           : CUDA_SUCCESS;
}

static CUresult emu_cuFuncGetName(const char **name, CUfunction func) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  return emu_kernel_name(func, name) ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

static CUresult emu_cuGetErrorName(CUresult error, const char **text) {
  if (!text) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
  case CUDA_SUCCESS: *text = "CUDA_SUCCESS"; return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_VALUE: *text = "CUDA_ERROR_INVALID_VALUE"; return CUDA_SUCCESS;
  case CUDA_ERROR_OUT_OF_MEMORY: *text = "CUDA_ERROR_OUT_OF_MEMORY"; return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_DEVICE: *text = "CUDA_ERROR_INVALID_DEVICE"; return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_CONTEXT: *text = "CUDA_ERROR_INVALID_CONTEXT"; return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_HANDLE: *text = "CUDA_ERROR_INVALID_HANDLE"; return CUDA_SUCCESS;
  case CUDA_ERROR_NOT_SUPPORTED: *text = "CUDA_ERROR_NOT_SUPPORTED"; return CUDA_SUCCESS;
  case CUDA_ERROR_ILLEGAL_ADDRESS: *text = "CUDA_ERROR_ILLEGAL_ADDRESS"; return CUDA_SUCCESS;
  default: *text = NULL; return CUDA_ERROR_INVALID_VALUE;
  }
}

static CUresult emu_cuGetErrorString(CUresult error, const char **text) {
  CUresult result = emu_cuGetErrorName(error, text);
  if (result == CUDA_SUCCESS && error == CUDA_SUCCESS) *text = "no error";
  return result;
}

/* ---- the entry-point table ---- */

struct entry {
  const char *name;
  void (*function)(void);
};

/* E(name) fails to compile unless emu_<name> has exactly cuda.h's signature for name (which
 * cuda.h may #define to a versioned name such as cuMemGetInfo_v2). One macro level only, so that
 * #name stays the unversioned name the entry-point query uses. */
#define E(name)                                                                                    \
  static const struct entry entry_##name = {#name, (void (*)(void))emu_##name};                    \
  _Static_assert(__builtin_types_compatible_p(__typeof__(&emu_##name), __typeof__(&name)),          \
                 #name " signature differs from cuda.h");                                         \
  EMU_EXPORT __typeof__(name) name __attribute__((alias("emu_" #name)))
E(cuInit); E(cuDriverGetVersion); E(cuDeviceGetCount); E(cuDeviceGet); E(cuDeviceGetAttribute);
E(cuDevicePrimaryCtxRetain); E(cuDevicePrimaryCtxRelease); E(cuDevicePrimaryCtxGetState);
E(cuCtxGetCurrent);
E(cuCtxSetCurrent); E(cuCtxGetDevice); E(cuCtxSynchronize); E(cuStreamSynchronize);
E(cuCtxEnablePeerAccess); E(cuCtxDisablePeerAccess);
E(cuMemGetInfo); E(cuMemAlloc); E(cuMemFree); E(cuMemGetAllocationGranularity);
E(cuMemAddressReserve); E(cuMemAddressFree); E(cuMemCreate); E(cuMemRelease); E(cuMemMap);
E(cuMemUnmap); E(cuMemSetAccess); E(cuPointerGetAttribute); E(cuMemGetAddressRange); E(cuMemcpyHtoD); E(cuMemcpyDtoH);
E(cuMemcpyDtoD); E(cuMemcpyHtoDAsync); E(cuMemcpyDtoHAsync); E(cuMemcpyDtoDAsync);
E(cuMemsetD8); E(cuMemsetD8Async); E(cuFuncGetParamInfo); E(cuGetErrorName);
E(cuModuleLoadData); E(cuModuleGetFunction); E(cuModuleUnload); E(cuLaunchKernel);
E(cuFuncGetName); E(cuMemcpy2D); E(cuGraphCreate); E(cuGraphAddKernelNode);
E(cuGraphInstantiateWithFlags); E(cuGraphLaunch); E(cuGraphAddNode); E(cuGraphDestroy); E(cuGraphExecDestroy);
E(cuGetErrorString); E(cuStreamBeginCapture); E(cuStreamEndCapture); E(cuStreamIsCapturing);
E(cuMemAllocAsync); E(cuMemAllocFromPoolAsync); E(cuMemFreeAsync); E(cuDeviceGetDefaultMemPool);
E(cuDeviceGetMemPool); E(cuMemPoolGetAttribute); E(cuMemPoolSetAttribute); E(cuMemPoolTrimTo);
E(cuGraphKernelNodeSetParams); E(cuGraphExecKernelNodeSetParams); E(cuStreamCreate);
E(cuStreamDestroy); E(cuStreamGetCaptureInfo); E(cuGraphGetNodes); E(cuGraphNodeGetType);
E(cuGraphAddMemcpyNode); E(cuGraphAddMemsetNode); E(cuGraphMemcpyNodeSetParams);
E(cuGraphMemsetNodeSetParams); E(cuGraphExecMemcpyNodeSetParams);
E(cuGraphExecMemsetNodeSetParams); E(cuMemcpyBatchAsync); E(cuMemcpy3DBatchAsync);
E(cuTexObjectCreate); E(cuTexObjectDestroy); E(cuTexObjectGetResourceDesc);

/* A function of a driver newer than cudaw's toolkit: not in cuda.h, so cudaw has no wrapper for
 * it and must say so (status: ungated_functions). Returns 42. */
static CUresult emu_cuEmuNewerFunction(int *value) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  *value = 42;
  return CUDA_SUCCESS;
}
static const struct entry entry_cuEmuNewerFunction = {"cuEmuNewerFunction",
                                                      (void (*)(void))emu_cuEmuNewerFunction};

static const struct entry *const entries[] = {
    &entry_cuEmuNewerFunction,
    &entry_cuInit, &entry_cuDriverGetVersion, &entry_cuDeviceGetCount, &entry_cuDeviceGet,
    &entry_cuDeviceGetAttribute, &entry_cuDevicePrimaryCtxRetain, &entry_cuDevicePrimaryCtxRelease,
    &entry_cuDevicePrimaryCtxGetState,
    &entry_cuCtxGetCurrent, &entry_cuCtxSetCurrent, &entry_cuCtxGetDevice,
    &entry_cuCtxEnablePeerAccess, &entry_cuCtxDisablePeerAccess,
    &entry_cuCtxSynchronize, &entry_cuStreamSynchronize, &entry_cuMemGetInfo, &entry_cuMemAlloc,
    &entry_cuMemFree, &entry_cuMemGetAllocationGranularity, &entry_cuMemAddressReserve,
    &entry_cuMemAddressFree, &entry_cuMemCreate, &entry_cuMemRelease, &entry_cuMemMap,
    &entry_cuMemUnmap, &entry_cuMemSetAccess, &entry_cuPointerGetAttribute,
    &entry_cuMemGetAddressRange, &entry_cuMemcpyHtoD,
    &entry_cuMemcpyDtoH, &entry_cuMemcpyDtoD, &entry_cuMemcpyHtoDAsync, &entry_cuMemcpyDtoHAsync,
    &entry_cuMemcpyDtoDAsync, &entry_cuMemsetD8, &entry_cuMemsetD8Async,
    &entry_cuFuncGetParamInfo, &entry_cuGetErrorName, &entry_cuGetErrorString,
    &entry_cuModuleLoadData, &entry_cuModuleGetFunction, &entry_cuModuleUnload,
    &entry_cuLaunchKernel, &entry_cuFuncGetName, &entry_cuMemcpy2D, &entry_cuGraphCreate,
    &entry_cuGraphAddKernelNode, &entry_cuGraphInstantiateWithFlags, &entry_cuGraphLaunch,
    &entry_cuGraphDestroy, &entry_cuGraphExecDestroy, &entry_cuGraphAddNode,
    &entry_cuStreamBeginCapture, &entry_cuStreamEndCapture, &entry_cuStreamIsCapturing,
    &entry_cuMemAllocAsync, &entry_cuMemAllocFromPoolAsync, &entry_cuMemFreeAsync,
    &entry_cuDeviceGetDefaultMemPool, &entry_cuDeviceGetMemPool, &entry_cuMemPoolGetAttribute,
    &entry_cuMemPoolSetAttribute, &entry_cuMemPoolTrimTo,
    &entry_cuGraphKernelNodeSetParams, &entry_cuGraphExecKernelNodeSetParams,
    &entry_cuStreamCreate, &entry_cuStreamDestroy, &entry_cuStreamGetCaptureInfo,
    &entry_cuGraphGetNodes, &entry_cuGraphNodeGetType, &entry_cuGraphAddMemcpyNode,
    &entry_cuGraphAddMemsetNode, &entry_cuGraphMemcpyNodeSetParams,
    &entry_cuGraphMemsetNodeSetParams, &entry_cuGraphExecMemcpyNodeSetParams,
    &entry_cuGraphExecMemsetNodeSetParams, &entry_cuMemcpyBatchAsync, &entry_cuMemcpy3DBatchAsync,
    &entry_cuTexObjectCreate, &entry_cuTexObjectDestroy, &entry_cuTexObjectGetResourceDesc,
};

cudaError_t emu_get_driver_entry_point(const char *symbol, void **func,
                                       enum cudaDriverEntryPointQueryResult *status) {
  emu_init();
  if (!symbol || !func) return emu_result(cudaErrorInvalidValue);
  *func = NULL;
  if (status) *status = cudaDriverEntryPointSymbolNotFound;
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    if (strcmp(entries[i]->name, symbol)) continue;
    void (*function)(void) = entries[i]->function;
    memcpy(func, &function, sizeof function);
    if (status) *status = cudaDriverEntryPointSuccess;
    break;
  }
  return cudaSuccess;
}

static CUresult proc_address(const char *symbol, void **pfn,
                             CUdriverProcAddressQueryResult *status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  enum cudaDriverEntryPointQueryResult found;
  emu_get_driver_entry_point(symbol, pfn, &found);
  if (status)
    *status = found == cudaDriverEntryPointSuccess ? CU_GET_PROC_ADDRESS_SUCCESS
                                                   : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return found == cudaDriverEntryPointSuccess ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* The emu has one version of each function: cudaVersion and the stream flags do not matter. */
EMU_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult *status) {
  (void)cudaVersion, (void)flags;
  return proc_address(symbol, pfn, status);
}

#undef cuGetProcAddress
EMU_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags);
EMU_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                     cuuint64_t flags) {
  (void)cudaVersion, (void)flags;
  return proc_address(symbol, pfn, NULL);
}

EMU_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **func,
                                               unsigned long long flags,
                                               enum cudaDriverEntryPointQueryResult *status) {
  (void)flags;
  return emu_get_driver_entry_point(symbol, func, status);
}

EMU_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **func,
                                                        unsigned int version,
                                                        unsigned long long flags,
                                                        enum cudaDriverEntryPointQueryResult *status) {
  (void)version, (void)flags;
  return emu_get_driver_entry_point(symbol, func, status);
}
