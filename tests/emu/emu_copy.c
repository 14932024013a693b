/* emu_copy.c: the runtime's allocation, copy and memset entry points. Each checks its arguments
 * the way the real runtime does, then funnels into emu_memory.c's copy/set choke points, which
 * refuse device ranges that are not inside live device memory (untranslated pointers). */
#include <errno.h>
#include <string.h>

#include "emu_internal.h"

#define PITCH_ALIGNMENT ((size_t)512)

/* Splits a copy kind into what each side must be; false for an unknown kind. */
static bool sides_of(enum cudaMemcpyKind kind, enum emu_side *dst, enum emu_side *src) {
  switch (kind) {
  case cudaMemcpyHostToHost: *dst = EMU_SIDE_HOST; *src = EMU_SIDE_HOST; return true;
  case cudaMemcpyHostToDevice: *dst = EMU_SIDE_DEVICE; *src = EMU_SIDE_HOST; return true;
  case cudaMemcpyDeviceToHost: *dst = EMU_SIDE_HOST; *src = EMU_SIDE_DEVICE; return true;
  case cudaMemcpyDeviceToDevice: *dst = EMU_SIDE_DEVICE; *src = EMU_SIDE_DEVICE; return true;
  case cudaMemcpyDefault: *dst = EMU_SIDE_ANY; *src = EMU_SIDE_ANY; return true;
  default: return false;
  }
}

cudaError_t emu_memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {
  emu_init();
  enum emu_side dst_side, src_side;
  if (!sides_of(kind, &dst_side, &src_side)) return emu_result(cudaErrorInvalidMemcpyDirection);
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  if (height > 1 && (width > dpitch || width > spitch)) return emu_result(cudaErrorInvalidPitchValue);
  int err = emu_memory_copy2d(dst, dpitch, dst_side, src, spitch, src_side, width, height);
  /* On a stream of its own, a GPU reads the source later: in flight until synchronised. */
  if (!err && src_side != EMU_SIDE_HOST && stream && stream != cudaStreamLegacy &&
      stream != cudaStreamPerThread)
    emu_memory_note_read(stream, src, height ? (height - 1) * spitch + width : 0);
  return emu_result(emu_error_from_errno(err));
}

cudaError_t emu_memset2d(void *dst, size_t pitch, int value, size_t width, size_t height,
                         cudaStream_t stream) {
  emu_init();
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  if (height > 1 && width > pitch) return emu_result(cudaErrorInvalidPitchValue);
  return emu_result(emu_error_from_errno(emu_memory_set2d(dst, pitch, value, width, height)));
}

cudaError_t emu_memcpy_symbol(const void *symbol, void *buffer, size_t count, size_t offset,
                              enum cudaMemcpyKind kind, bool to_symbol, cudaStream_t stream) {
  emu_init();
  void *storage;
  size_t size;
  if (emu_symbol_lookup(symbol, &storage, &size)) return emu_result(cudaErrorInvalidSymbol);
  if (offset > size || count > size - offset) return emu_result(cudaErrorInvalidValue);
  bool from_device = kind == cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDefault) from_device = emu_memory_check(buffer, count, EMU_KINDS_ALL) == 0;
  else if (kind != cudaMemcpyDeviceToDevice &&
           kind != (to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost))
    return emu_result(cudaErrorInvalidMemcpyDirection);
  char *device = (char *)storage + offset;
  enum cudaMemcpyKind direction = from_device ? cudaMemcpyDeviceToDevice
                                  : to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  return to_symbol ? emu_memcpy2d(device, count, buffer, count, count, 1, direction, stream)
                   : emu_memcpy2d(buffer, count, device, count, count, 1, direction, stream);
}

/* ---- allocation ---- */

static cudaError_t allocate(void **ptr, size_t size, enum emu_space_kind kind) {
  emu_init();
  if (!ptr) return emu_result(cudaErrorInvalidValue);
  if (size == 0) {
    *ptr = NULL;
    return cudaSuccess;
  }
  return emu_result(emu_error_from_errno(emu_memory_alloc(size, kind, ptr)));
}

EMU_EXPORT cudaError_t cudaMalloc(void **ptr, size_t size) {
  return allocate(ptr, size, EMU_SPACE_DEVICE);
}

EMU_EXPORT cudaError_t cudaFree(void *ptr) {
  emu_init();
  if (!ptr) return cudaSuccess;
  int err = emu_pool_free(ptr); /* stream-ordered memory may be freed by cudaFree too */
  if (err == -ENOENT)
    err = emu_memory_free(ptr, EMU_KIND_BIT(EMU_SPACE_DEVICE) | EMU_KIND_BIT(EMU_SPACE_MANAGED));
  return emu_result(err ? cudaErrorInvalidValue : cudaSuccess);
}

EMU_EXPORT cudaError_t cudaMallocPitch(void **ptr, size_t *pitch, size_t width, size_t height) {
  if (!pitch) return emu_result(cudaErrorInvalidValue);
  size_t aligned = (width + PITCH_ALIGNMENT - 1) & ~(PITCH_ALIGNMENT - 1);
  if (height && aligned > SIZE_MAX / height) return emu_result(cudaErrorMemoryAllocation);
  cudaError_t err = allocate(ptr, aligned * height, EMU_SPACE_DEVICE);
  if (err == cudaSuccess) *pitch = aligned;
  return err;
}

EMU_EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitched, struct cudaExtent extent) {
  if (!pitched) return emu_result(cudaErrorInvalidValue);
  size_t pitch;
  size_t rows = extent.height * extent.depth;
  if (extent.depth && rows / extent.depth != extent.height) return emu_result(cudaErrorMemoryAllocation);
  void *ptr;
  cudaError_t err = cudaMallocPitch(&ptr, &pitch, extent.width, rows);
  if (err == cudaSuccess)
    *pitched = (struct cudaPitchedPtr){ptr, pitch, extent.width, extent.height};
  return err;
}

EMU_EXPORT cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned int flags) {
  if (!size || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
    return emu_result(cudaErrorInvalidValue);
  return allocate(ptr, size, EMU_SPACE_MANAGED);
}

cudaError_t emu_malloc_async(void **ptr, size_t size, cudaStream_t stream) {
  return emu_pool_alloc(ptr, size, NULL, stream);
}

cudaError_t emu_free_async(void *ptr, cudaStream_t stream) {
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  if (!ptr) return emu_result(cudaErrorInvalidValue);
  return cudaFree(ptr);
}

EMU_EXPORT cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream) {
  return emu_malloc_async(ptr, size, stream);
}

EMU_EXPORT cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream) {
  return emu_free_async(ptr, stream);
}

EMU_EXPORT cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
  emu_init();
  if (!free_bytes || !total_bytes) return emu_result(cudaErrorInvalidValue);
  size_t used, quota;
  emu_memory_info(emu_current_device(), &used, &quota);
  *free_bytes = quota - used;
  *total_bytes = quota;
  return cudaSuccess;
}

cudaError_t emu_prefetch(const void *ptr, size_t count, struct cudaMemLocation location,
                         unsigned flags, cudaStream_t stream) {
  emu_init();
  (void)flags;
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  if (location.type == cudaMemLocationTypeDevice &&
      (location.id < 0 || location.id >= emu_device_count()))
    return emu_result(cudaErrorInvalidDevice);
  if (location.type != cudaMemLocationTypeDevice && location.type != cudaMemLocationTypeHost &&
      location.type != cudaMemLocationTypeHostNuma && location.type != cudaMemLocationTypeHostNumaCurrent)
    return emu_result(cudaErrorInvalidValue);
  if (!count || emu_memory_check(ptr, count, EMU_KIND_BIT(EMU_SPACE_MANAGED)))
    return emu_result(cudaErrorInvalidValue);
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaMemPrefetchAsync(const void *ptr, size_t count,
                                            struct cudaMemLocation location, unsigned int flags,
                                            cudaStream_t stream) {
  return emu_prefetch(ptr, count, location, flags, stream);
}

/* ---- host memory ---- */

EMU_EXPORT cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags) {
  emu_init();
  if (!ptr) return emu_result(cudaErrorInvalidValue);
  return emu_result(emu_error_from_errno(emu_host_alloc(size, flags, ptr)));
}

EMU_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

EMU_EXPORT cudaError_t cudaFreeHost(void *ptr) {
  emu_init();
  if (!ptr) return cudaSuccess;
  return emu_result(emu_host_free(ptr) ? cudaErrorInvalidValue : cudaSuccess);
}

EMU_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
  emu_init();
  return emu_result(emu_error_from_errno(emu_host_register(ptr, size, flags)));
}

EMU_EXPORT cudaError_t cudaHostUnregister(void *ptr) {
  emu_init();
  return emu_result(emu_host_unregister(ptr) ? cudaErrorHostMemoryNotRegistered : cudaSuccess);
}

EMU_EXPORT cudaError_t cudaHostGetDevicePointer(void **device, void *host, unsigned int flags) {
  emu_init();
  uintptr_t base;
  size_t size;
  if (!device || flags || emu_host_lookup(host, &base, &size))
    return emu_result(cudaErrorInvalidValue);
  *device = host; /* unified addressing: the same address on both sides */
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                                const void *ptr) {
  emu_init();
  if (!attributes) return emu_result(cudaErrorInvalidValue);
  memset(attributes, 0, sizeof *attributes);
  struct emu_range range;
  uintptr_t base;
  size_t size;
  if (emu_memory_lookup(ptr, &range) == 0) {
    bool managed = range.kind == EMU_SPACE_MANAGED;
    attributes->type = managed ? cudaMemoryTypeManaged : cudaMemoryTypeDevice;
    attributes->device = range.device;
    attributes->devicePointer = (void *)ptr;
    attributes->hostPointer = managed ? (void *)ptr : NULL;
  } else if (emu_host_lookup(ptr, &base, &size) == 0) {
    attributes->type = cudaMemoryTypeHost;
    attributes->devicePointer = (void *)ptr;
    attributes->hostPointer = (void *)ptr;
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = cudaInvalidDeviceId;
  }
  return cudaSuccess;
}

/* ---- copies and memsets (the _ptds/_ptsz variants live in emu_per_thread.c) ---- */

EMU_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                                  enum cudaMemcpyKind kind) {
  return emu_memcpy2d(dst, count, src, count, count, 1, kind, NULL);
}

EMU_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                       enum cudaMemcpyKind kind, cudaStream_t stream) {
  return emu_memcpy2d(dst, count, src, count, count, 1, kind, stream);
}

EMU_EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                    size_t width, size_t height, enum cudaMemcpyKind kind) {
  return emu_memcpy2d(dst, dpitch, src, spitch, width, height, kind, NULL);
}

EMU_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                         size_t width, size_t height, enum cudaMemcpyKind kind,
                                         cudaStream_t stream) {
  return emu_memcpy2d(dst, dpitch, src, spitch, width, height, kind, stream);
}

/* Runs on the destination device: it reads the source directly where it enabled peer access to
 * the source device, else the copy is staged (each side touched by its own device). */
EMU_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_device, const void *src,
                                           int src_device, size_t count, cudaStream_t stream) {
  emu_init();
  int devices = emu_device_count();
  if (dst_device < 0 || dst_device >= devices || src_device < 0 || src_device >= devices)
    return emu_result(cudaErrorInvalidDevice);
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  int err = emu_memory_copy_peer(dst_device, dst, src, count);
  return emu_result(emu_error_from_errno(err));
}

EMU_EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dst_device, const void *src, int src_device,
                                      size_t count) {
  return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, count, NULL);
}

EMU_EXPORT cudaError_t cudaMemset(void *dst, int value, size_t count) {
  return emu_memset2d(dst, count, value, count, 1, NULL);
}

EMU_EXPORT cudaError_t cudaMemsetAsync(void *dst, int value, size_t count, cudaStream_t stream) {
  return emu_memset2d(dst, count, value, count, 1, stream);
}

EMU_EXPORT cudaError_t cudaMemset2D(void *dst, size_t pitch, int value, size_t width,
                                    size_t height) {
  return emu_memset2d(dst, pitch, value, width, height, NULL);
}

EMU_EXPORT cudaError_t cudaMemset2DAsync(void *dst, size_t pitch, int value, size_t width,
                                         size_t height, cudaStream_t stream) {
  return emu_memset2d(dst, pitch, value, width, height, stream);
}

EMU_EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count,
                                          size_t offset, enum cudaMemcpyKind kind) {
  return emu_memcpy_symbol(symbol, (void *)src, count, offset, kind, true, NULL);
}

EMU_EXPORT cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count,
                                            size_t offset, enum cudaMemcpyKind kind) {
  return emu_memcpy_symbol(symbol, dst, count, offset, kind, false, NULL);
}

EMU_EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t count,
                                               size_t offset, enum cudaMemcpyKind kind,
                                               cudaStream_t stream) {
  return emu_memcpy_symbol(symbol, (void *)src, count, offset, kind, true, stream);
}

EMU_EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count,
                                                 size_t offset, enum cudaMemcpyKind kind,
                                                 cudaStream_t stream) {
  return emu_memcpy_symbol(symbol, dst, count, offset, kind, false, stream);
}
