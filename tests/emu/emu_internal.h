/* emu_internal.h: the contract between the emulated device's files. Inside, functions return 0
 * or -errno; only the exported CUDA entry points (emu_runtime.c and friends) turn that into
 * cudaError_t / CUresult. */
#ifndef CUDAW_EMU_INTERNAL_H
#define CUDAW_EMU_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cudaw_emu.h"

#define EMU_EXPORT __attribute__((visibility("default")))

#define EMU_VMM_GRANULARITY ((size_t)2 << 20)

/* ---- emu_init.c: options, one-time init, per-thread last error ---- */

/* Initialises the devices once (thread-safe, idempotent); announces the emu on stderr. */
void emu_init(void);
/* The memory size of each emulated device (CUDAW_EMU_MEM). */
size_t emu_option_memory_bytes(void);

#define EMU_MAX_DEVICES 8
/* The number of emulated devices (CUDAW_EMU_DEVICES), each with its own memory and context. */
int emu_device_count(void);
/* The calling thread's current device (cudaSetDevice, cuCtxSetCurrent); 0 until it sets one. */
int emu_current_device(void);
/* 0, or -EINVAL for a device that does not exist. */
int emu_set_current_device(int device);
/* Whether `device` enabled peer access to `peer`'s memory (cudaDeviceEnablePeerAccess while
 * `device` was current): its kernels may then touch cudaMalloc memory of `peer`, and copies
 * between the two run device to device. */
bool emu_peer_enabled(int device, int peer);
/* Records err as the calling thread's last error unless it is cudaSuccess; returns err. */
cudaError_t emu_result(cudaError_t err);
/* The value of a device attribute (runtime and driver numbering agree); -EINVAL if unknown. */
int emu_device_attribute(int attribute, int *value);
/* Maps an internal -errno to the runtime's error. */
cudaError_t emu_error_from_errno(int negative_errno);

/* ---- emu_memory.c: the emulated device address space (one big PROT_NONE host region) ---- */

enum emu_space_kind {
  EMU_SPACE_DEVICE,   /* cudaMalloc and friends */
  EMU_SPACE_MANAGED,  /* cudaMallocManaged, managed variables */
  EMU_SPACE_SYMBOL,   /* storage of a registered __device__ variable; not freeable */
  EMU_SPACE_RESERVED, /* a VMM reservation; valid only where mapped */
};

/* One run of valid device memory around an address. */
struct emu_range {
  uintptr_t base;
  size_t size;
  enum emu_space_kind kind;
  bool mapped;     /* inside a VMM reservation */
  int device;      /* the device whose memory it is */
  unsigned access; /* mapped: the devices cuMemSetAccess made it accessible to (bit per device) */
};

/* Which memory a copy's side must be: cudaMemcpyKind split into its two halves. */
enum emu_side { EMU_SIDE_ANY, EMU_SIDE_HOST, EMU_SIDE_DEVICE };

/* quota: bytes per device. */
/* lowest: place allocations in the lowest gap (a freed address comes back at once) instead of
 * after the last one. */
int emu_memory_init(size_t quota, int devices, bool lowest);
/* Allocates size bytes (0 < size) of zeroed memory of the current device at a never-before-used
 * address (until the region wraps). -ENOMEM when over its quota or out of address space. */
int emu_memory_alloc(size_t size, enum emu_space_kind kind, void **out);
/* Frees an allocation of one of the kinds in kind_mask (bit per emu_space_kind) given its start.
 * -EINVAL for NULL-free callers must handle, an unknown or interior pointer, another kind. */
int emu_memory_free(void *ptr, unsigned kind_mask);
/* The valid device memory containing ptr: -ENOENT when ptr is no device memory. */
int emu_memory_lookup(const void *ptr, struct emu_range *out);
/* Bytes of device's memory in use and its quota. */
void emu_memory_info(int device, size_t *used, size_t *quota);
/* Write the bytes in use per device to fd now and at every change (CUDAW_EMU_USED_FILE). */
void emu_memory_publish_to(int fd);
/* Charges delta bytes of device's memory that no allocation stands for (a context's stack
 * reservation); a negative delta gives them back. -ENOMEM when over the quota (nothing charged). */
int emu_memory_charge(int device, long long delta);
/* Frees every allocation of device (cudaDeviceReset); symbols and VMM objects stay. */
void emu_memory_reset(int device);

/* Copies a width x height rectangle between pitched buffers, after checking that each side is the
 * memory its enum emu_side says and that device-side spans lie inside valid device memory, which
 * the device running the copy (the current one) can reach. cudaMalloc memory of another device is
 * staged through the host, as the runtime does between devices without peer access; VMM memory
 * must be accessible (cuMemSetAccess) to the running device: the real driver answers a plain copy
 * of another device's VMM memory with cudaErrorInvalidValue (seen on two H200s), so -EINVAL then.
 * -EINVAL on any violation, -EFAULT for memory the device cannot reach (nothing copied). */
int emu_memory_copy2d(void *dst, size_t dpitch, enum emu_side dst_side, const void *src,
                      size_t spitch, enum emu_side src_side, size_t width, size_t height);
/* cudaMemcpyPeer: count bytes of device memory, run by `device` (the destination). It names both
 * devices, so VMM memory of the other one is staged through its owner where `device` has no
 * access (the real driver does so without peer access). */
int emu_memory_copy_peer(int device, void *dst, const void *src, size_t count);
/* Sets a width x height rectangle of device memory to value; -EINVAL unless valid device memory,
 * -EFAULT when the current device cannot reach it. */
int emu_memory_set2d(void *dst, size_t pitch, int value, size_t width, size_t height);
/* 0 when a kernel running on `device` may touch [ptr, ptr+size): VMM memory accessible to device,
 * cudaMalloc memory of device or of a peer it enabled access to, managed memory and variables;
 * -EFAULT otherwise (what the real device reports as an illegal address). */
int emu_memory_kernel_access(int device, const void *ptr, size_t size);
/* 0 when [ptr, ptr+size) is valid device memory of the given kinds (mask), else -EINVAL. */
int emu_memory_check(const void *ptr, size_t size, unsigned kind_mask);

#define EMU_KIND_BIT(kind) (1u << (kind))
#define EMU_KINDS_ALL 0xffu

/* Page-locked host memory (cudaMallocHost) and registered host ranges (cudaHostRegister). */
int emu_host_alloc(size_t size, unsigned flags, void **out);
int emu_host_free(void *ptr);                       /* -EINVAL unless from emu_host_alloc */
int emu_host_register(void *ptr, size_t size, unsigned flags); /* -EEXIST when overlapping */
int emu_host_unregister(void *ptr);                 /* -ENOENT when not registered */
/* The pinned or registered host range containing ptr: 0, or -ENOENT. */
int emu_host_lookup(const void *ptr, uintptr_t *base, size_t *size);

/* ---- VMM (emu_memory.c): reservations, memfd-backed physical handles, mappings ---- */
int emu_vmm_reserve(size_t size, size_t alignment, uintptr_t hint, uintptr_t *out);
int emu_vmm_free(uintptr_t addr, size_t size);
int emu_vmm_create(int device, size_t size, uint64_t *handle);
int emu_vmm_release(uint64_t handle);
int emu_vmm_map(uintptr_t addr, size_t size, size_t offset, uint64_t handle);
/* The devices in `changed` (bit per device) get access if they are in `readable`, lose it if not;
 * others keep theirs. */
int emu_vmm_set_access(uintptr_t addr, size_t size, unsigned changed, unsigned readable);
int emu_vmm_unmap(uintptr_t addr, size_t size);
/* Reads in flight (see emu_memory.c): note an asynchronous copy's read of src on a created
 * stream; the mark an event recorded now carries; retire the reads of stream (or of every
 * stream) up to a mark (UINT64_MAX: all). reads_done returns -EFAULT once the device faulted. */
void emu_memory_note_read(const void *stream, const void *src, size_t size);
uint64_t emu_memory_read_mark(void);
int emu_memory_reads_done(const void *stream, bool every_stream, uint64_t upto);

/* ---- emu_shared.c: CUDAW_EMU_SHARED=1, one device memory for every process of the user ---- */
/* Opens the shared ledgers when CUDAW_EMU_SHARED=1 (nothing otherwise); -errno on failure. */
int emu_shared_init(int devices);
bool emu_shared_active(void);
/* Charges delta bytes (negative: gives back) of device's memory to this process; -ENOMEM when all
 * processes together would hold more than capacity (nothing charged). */
int emu_shared_charge(int device, long long delta, size_t capacity);
/* What every live process holds on device (dead processes' shares reclaimed). */
size_t emu_shared_used(int device);

/* ---- emu_limit.c: context limits; the stack's reservation is charged at init ---- */
int emu_limit_init(int devices);

/* ---- emu_vmem_api.c: held streams (cudaw_emu_hold_stream) ---- */
/* Whether work on stream is held back: events recorded there do not complete until released. */
bool emu_stream_held(cudaStream_t stream);
void emu_stream_release(cudaStream_t stream);
/* Stream capture (the driver's calls share it): kernels launched on a capturing stream become
 * nodes of the capture's graph, other work runs at once. */
cudaError_t emu_capture_launch(cudaStream_t stream, const void *func, dim3 grid, dim3 block,
                               void **args, size_t shared_mem);
/* emu_graph.c: a kernel node appended to graph (its arguments copied by their declared sizes). */
cudaError_t emu_graph_add_kernel(cudaGraphNode_t *node, cudaGraph_t graph, const void *func,
                                 dim3 grid, dim3 block, size_t shared_mem, void **args);
bool emu_stream_capturing(cudaStream_t stream);
cudaError_t emu_begin_capture(cudaStream_t stream);
cudaError_t emu_end_capture(cudaStream_t stream, cudaGraph_t *graph);
cudaError_t emu_is_capturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status);

/* ---- emu_pool.c: stream-ordered memory pools ---- */
/* As the H100's driver: 32 MiB segments (a larger block: its size in 2 MiB steps), blocks placed at
 * 512-byte multiples, used bytes and address ranges as asked. */
#define EMU_POOL_SEGMENT ((size_t)32 << 20) /* a pool reserves device memory in these steps */
#define EMU_POOL_LARGE_STEP ((size_t)2 << 20) /* a block above a segment: its size in these */
#define EMU_POOL_BLOCK_ALIGN ((size_t)512)  /* a block's place is rounded up to this */
/* Allocates from pool (NULL: the current device's current pool) on stream. */
cudaError_t emu_pool_alloc(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream);
/* Gives a pool block back to its pool: 0, -ENOENT when ptr is no pool's memory, -EINVAL when it
 * is inside a pool segment but no live block starts there. */
int emu_pool_free(void *ptr);
/* The pool block containing ptr: 0, or -ENOENT. */
int emu_pool_block_range(const void *ptr, uintptr_t *base, size_t *size);
/* A synchronisation on device: pools over their release threshold give empty segments back. */
void emu_pool_synchronized(int device);
/* cudaDeviceReset of device (its memory is already gone): pools start empty again. */
void emu_pool_reset(int device);

/* ---- emu_stream.c ---- */
/* 0 when stream is a default stream or a live created one, else -EBADF. */
int emu_stream_check(cudaStream_t stream);

/* ---- emu_copy.c: the runtime's copy/memset semantics, shared by the _ptds variants ---- */
cudaError_t emu_memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t height, enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t emu_memset2d(void *dst, size_t pitch, int value, size_t width, size_t height,
                         cudaStream_t stream);
cudaError_t emu_memcpy_symbol(const void *symbol, void *buffer, size_t count, size_t offset,
                              enum cudaMemcpyKind kind, bool to_symbol, cudaStream_t stream);

/* ---- emu_graph.c: a kernel's declared parameters (cudaw_emu_set_kernel_param_sizes), packed
 * at their natural alignment: 0, or -ENOENT past the last or for an undeclared kernel ---- */
int emu_kernel_param_info(const void *func, size_t index, size_t *offset, size_t *size);

/* ---- emu_launch.c ---- */
/* Launches a kernel given a host stub address or a kernel/function handle. */
cudaError_t emu_launch(const void *func, dim3 grid, dim3 block, void **args, size_t shared_mem,
                       cudaStream_t stream);
/* The device storage of a registered variable; -ENOENT when symbol is not one. */
int emu_symbol_lookup(const void *symbol, void **device, size_t *size);

/* Launches every node of an instantiated graph, in order (emu_graph.c). */
cudaError_t emu_graph_launch(cudaGraphExec_t exec, cudaStream_t stream);

/* The mangled name of the kernel whose handle or host stub is func; -ENOENT when none. */
int emu_kernel_name(const void *func, const char **name);

/* ---- emu_stream.c / emu_launch.c entry points reused by the _ptsz variants ---- */
cudaError_t emu_event_record(cudaEvent_t event, cudaStream_t stream);
cudaError_t emu_stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t emu_launch_host_func(cudaStream_t stream, cudaHostFn_t fn, void *user_data);
cudaError_t emu_stream_add_callback(cudaStream_t stream, cudaStreamCallback_t callback,
                                    void *user_data, unsigned flags);
cudaError_t emu_stream_query(cudaStream_t stream);
cudaError_t emu_stream_get_flags(cudaStream_t stream, unsigned *flags);
cudaError_t emu_stream_get_priority(cudaStream_t stream, int *priority);
cudaError_t emu_malloc_async(void **ptr, size_t size, cudaStream_t stream);
cudaError_t emu_free_async(void *ptr, cudaStream_t stream);
cudaError_t emu_prefetch(const void *ptr, size_t count, struct cudaMemLocation location,
                         unsigned flags, cudaStream_t stream);
cudaError_t emu_launch_ex(const cudaLaunchConfig_t *config, const void *func, void **args);
cudaError_t emu_get_driver_entry_point(const char *symbol, void **func,
                                       enum cudaDriverEntryPointQueryResult *status);

/* emu_work.c: work a kernel left behind (cudaw_emu_defer). pending polls it once; wait polls
 * until every piece on the device is done. */
bool emu_work_pending(int device);
void emu_work_wait(int device);
/* emu_stream.c: cudaStreamSynchronize (waits for deferred work on the current device). */
cudaError_t emu_stream_sync(cudaStream_t stream);

#endif
