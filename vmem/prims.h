/* Device primitives: the only way vmem touches a device. One implementation drives the real runtime
 * (prims_cuda.c), another host memory for unit tests (tests/vmem/fake_prims.c); vmem cannot tell
 * them apart. Every function returns 0 or -errno (-ENOMEM: the device is out of memory, -ENOSYS:
 * not available on this device or build, -EINVAL: bad argument, -EIO: any other device error).
 * Device addresses are uint64_t, like CUdeviceptr. vmem calls these with its own mutex held, never
 * concurrently. */
#ifndef CUDAW_VMEM_PRIMS_H
#define CUDAW_VMEM_PRIMS_H

#include <stdint.h>

struct vmem_prims {
  /* Number of devices (>= 1 on success). */
  int (*device_count)(void *ctx, int *count);
  /* Free and total bytes of the device's memory, as the device reports them right now. */
  int (*mem_info)(void *ctx, int device, uint64_t *free_bytes, uint64_t *total_bytes);
  /* 1 when the device supports virtual memory management (the VMM calls below), 0 when not. */
  int (*vmm_supported)(void *ctx, int device);
  /* Mapping granularity in bytes (a power of two, typically 2 MiB). May fail without VMM. */
  int (*granularity)(void *ctx, int device, uint64_t *bytes);

  /* --- VMM (used under the remap policy only) --- */
  /* Reserve size bytes of device virtual address space aligned to align; hint is a preferred
   * address (0: none) that the device may ignore. The range is unusable until mapped. */
  int (*va_reserve)(void *ctx, uint64_t size, uint64_t align, uint64_t hint, uint64_t *addr);
  /* Free a whole reservation made by va_reserve; nothing in it may be mapped. */
  int (*va_free)(void *ctx, uint64_t addr, uint64_t size);
  /* Create size bytes (a multiple of granularity) of physical memory on device; *handle owns it. */
  int (*phys_create)(void *ctx, int device, uint64_t size, uint64_t *handle);
  /* Drop the handle's reference; the memory goes back once it is also unmapped. */
  int (*phys_release)(void *ctx, uint64_t handle);
  /* Map the whole of handle's memory at addr (granule-aligned, inside a reservation, unmapped).
   * The mapping is not accessible until set_access. */
  int (*map)(void *ctx, uint64_t addr, uint64_t size, uint64_t handle);
  /* Unmap [addr, addr+size): exactly one earlier map, or several adjacent whole ones (vmem
   * falls back to one call per map when a range of several is refused). */
  int (*unmap)(void *ctx, uint64_t addr, uint64_t size);
  /* Make the mapped range (one map or several adjacent whole ones) readable and writable from
   * device; other devices' access is unchanged. */
  int (*set_access)(void *ctx, uint64_t addr, uint64_t size, int device);
  /* Take that access away from device (other devices keep theirs). Optional: NULL where access is
   * never revoked (vmem then reports -ENOSYS for disabling peer access). */
  int (*revoke_access)(void *ctx, uint64_t addr, uint64_t size, int device);

  /* --- plain device memory (used under the translate policy) --- */
  /* Allocate size bytes on device at an address of the device's choosing (256-byte aligned at
   * least, like cudaMalloc); *real owns them until dev_free. */
  int (*dev_malloc)(void *ctx, int device, uint64_t size, uint64_t *real);
  /* Free memory returned by dev_malloc on the same device. */
  int (*dev_free)(void *ctx, int device, uint64_t real);
};

/* Primitives over the real CUDA runtime. resolve(name) returns the real runtime's function of
 * that name or NULL (the shim passes its dlsym on the real libcudart). Runtime functions used:
 * cudaMalloc, cudaFree, cudaMemGetInfo, cudaGetDeviceCount, cudaDeviceGetAttribute (required),
 * cudaGetDevice, cudaSetDevice (optional: without them only the current device is usable) and
 * cudaGetDriverEntryPointByVersion, through which the driver's cuMem* VMM functions are obtained
 * (libcuda is never linked). Without the VMM functions vmm_supported reports 0.
 * Fills *prims and *ctx (static storage, valid for the life of the process). Not thread-safe:
 * call once, before vmem_init. Returns -ENOSYS when a required runtime function is missing. */
int vmem_prims_cuda(void *(*resolve)(const char *symbol), const struct vmem_prims **prims,
                    void **ctx);

#endif
