/* The library's use of vmem: lazy start, argument checks, stream-ordered frees, the registry of
 * memory that is not vmem's (managed, pinned host, arrays) and the error conversion at the API
 * edge. Implemented in glue/: vmem.c, memory.c, mem_async.c, capture.c and mem_registry.c. */
#ifndef CUDAW_SHIM_VMEM_H
#define CUDAW_SHIM_VMEM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "shim.h"

/* Start vmem once (options, primitives over the real runtime, reservation). 0 when allocations
 * are virtualised; -errno when they are not (CUDAW_VMEM=off, no device, ...): callers then pass
 * allocations to the real runtime unchanged. Creates the CUDA context. Call inside the gate. */
int shim_vmem_start(void);

/* cudaDeviceReset of `device` destroys every allocation on it: give vmem's memory back first
 * (unmap while the context lives), forget its state and let the next allocation start vmem
 * again. -EXDEV (nothing done) when other devices hold vmem memory too. Call inside the gate. */
int shim_vmem_device_reset(int device);

/* The program enabled (or disabled) `device`'s access to `peer`'s memory: record it and, under
 * remap, open (or close) vmem's memory of peer to device now and at every later start of vmem
 * (vmem_peer_access). 0, or -errno when vmem could not change the access (the record stands).
 * Call inside the gate. */
int shim_vmem_peer_access(int device, int peer, int enable);

/* Forget the blocks and events of pending stream-ordered frees (their context is going away). */
void shim_vmem_forget_frees(void);

/* Forget the tracked allocations of `device` (destroyed by a reset), uncharging nothing. */
void shim_mem_forget_device(int device);

/* vmem_quota_charge (CUDAW_MEM_LIMIT), with the limit's one warning when it refuses. */
int shim_vmem_charge(int device, uint64_t bytes);

/* Nonzero once vmem runs (cheap; never starts it). */
int shim_vmem_running(void);

/* 1 when the program allocated but vmem does not run (off, or it could not start), with why in
 * `why` ("vmem off (CUDAW_VMEM=off)"); 0 when vmem runs or nothing was allocated yet. */
int shim_vmem_not_running(char *why, size_t len);

/* 0 / -errno from vmem or the shim -> the cudaError_t the real runtime would return. */
cudaError_t shim_error_from_errno(int rc);


/* ---- argument checks (vmem.c) ------------------------------------------------------------- */

/* Nonzero with CUDAW_CHECK=1: every virtual pointer argument is validated. */
extern int shim_vmem_check_all;

/* Check a virtual pointer argument of API function id (p is inside the virtual range). ranged:
 * bytes is how far the call reaches from p (0: nothing is touched, the call is not checked
 * unless CUDAW_CHECK is on); unranged: p alone must be inside a live allocation. Returns 0 when
 * the call may proceed, -EFAULT (after a log line naming the call, the allocation, and for a use
 * after free where it was freed) when it must fail with cudaErrorInvalidValue. */
int shim_vmem_check_arg(enum shim_fn_id id, const void *p, uint64_t bytes, int ranged);

/* A 2D extent: the bytes a width x height copy with this pitch spans from its start. */
static inline uint64_t shim_extent_2d(size_t pitch, size_t width, size_t height)
{
  return width == 0 || height == 0 ? 0 : (uint64_t)(height - 1) * pitch + width;
}

/* The current device, through the real runtime. */
cudaError_t shim_current_device(int *device);

/* Allocate through vmem on the current device, honouring the quota; on -ENOMEM frees still
 * waiting on their stream are waited for and the allocation retried once. */
cudaError_t shim_vmem_alloc(void **ptr, uint64_t size);
/* The same on a given device (the driver layer: the current context's device). */
cudaError_t shim_vmem_alloc_on(int device, void **ptr, uint64_t size);

/* ---- copies that name another device's memory (vmem.c) ------------------------------------ */

/* The devices vmem has allocated on, a bit each (device 31 and above share the last bit). */
extern atomic_uint shim_vmem_devices_used;
void shim_vmem_note_device(int device);

/* Whether vmem holds memory of more than one device, so that a copy may name another device's
 * memory than the current one's. One load; single-device programs stop here. */
static inline int shim_vmem_multi_device(void)
{
  unsigned used = atomic_load_explicit(&shim_vmem_devices_used, memory_order_relaxed);
  return (used & (used - 1)) != 0;
}

/* Under remap, memory is mapped only for the devices that may reach it, and the driver answers a
 * plain copy of another device's memory (no peer access) with cudaErrorInvalidValue, where it
 * stages cudaMalloc memory through the host. When dst or src (virtual pointers, checked) is such
 * memory, run the copy where it can run and return 1 with its result: between two devices'
 * memory as a peer copy, else with the owner current (an asynchronous copy waits for its stream
 * first, keeping its order). 0: nothing done, the caller makes the call itself. */
int shim_vmem_copy_across(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                          cudaStream_t stream, int async, cudaError_t *result);

/* ---- what the runtime's and the driver's allocation calls share (memory.c) ---------------- */

/* Free a vmem allocation as cudaFree does: wait for the device, reap stream frees, free. */
cudaError_t shim_vmem_free_synced(void *vptr, const void *where);
/* Forget a real pointer freed by the real runtime or driver (managed or passed-through memory),
 * uncharging its quota. */
void shim_mem_forget_freed(void *ptr);
/* width x rows through vmem at the pitch the real runtime would pick; *pitch set on success. */
cudaError_t shim_vmem_alloc_pitched(void **ptr, size_t *pitch, size_t width, size_t rows);
/* cudaMemGetInfo under vmem, for the current device. */
cudaError_t shim_vmem_mem_info(size_t *free_bytes, size_t *total_bytes);
/* Managed memory the real runtime or driver allocated: track it for checkpoint. charged: bytes
 * already counted against the quota. On failure undo(ptr) is called and MemoryAllocation
 * returned. */
cudaError_t shim_mem_track_managed(void *ptr, size_t size, unsigned flags, uint64_t charged,
                                   cudaError_t (*undo)(void *));

/* ---- stream-ordered allocation (mem_async.c), shared by both API layers -------------------- */

/* The real call to use for streams under capture and when vmem does not run. */
typedef cudaError_t (*shim_real_alloc_async_fn)(void **ptr, size_t size, void *pool,
                                                cudaStream_t stream);
typedef cudaError_t (*shim_real_free_async_fn)(void *ptr, cudaStream_t stream);
cudaError_t shim_vmem_malloc_async(void **ptr, size_t size, cudaStream_t stream,
                                   shim_real_alloc_async_fn real_alloc, void *pool);
cudaError_t shim_vmem_free_async(void *ptr, cudaStream_t stream, const void *where,
                                 shim_real_free_async_fn real_free);

/* ---- what the stream-ordered allocator knows about streams (capture.c) --------------------- */

/* Stream captures begun through either layer and not known to have ended, plus one for good once
 * a capture could have begun unseen (the program got a driver function cudaw does not wrap).
 * Counted before the real begin call, so a thread that allocates on the stream afterwards sees
 * it; a failed begin is taken back; an end counts only when the stream was capturing before the
 * call, is not after it and the call ended the capture. Over-counting only costs checks. */
extern atomic_uint shim_captures_open;

/* Whether a stream may be under capture now, so that its capture status must be asked: a capture
 * is counted open, or the libraries' driver calls do not pass cudaw (not routed), so a capture
 * could have begun where cudaw cannot see it. */
static inline int shim_capture_possible(void)
{
  return atomic_load_explicit(&shim_captures_open, memory_order_acquire) != 0 ||
         !shim_drv_routing();
}

void shim_capture_begin(void);            /* before a real begin-capture call */
void shim_capture_begin_failed(void);     /* it failed: nothing began */
/* After a real end-capture call: was_capturing / capturing, the stream's state before and after
 * (capturing or invalidated); ended, whether the call's result says the capture ended (success or
 * "invalidated"). */
void shim_capture_end(int was_capturing, int capturing, int ended);
/* A capture may have begun without passing cudaw: keep asking from now on. */
void shim_capture_unseen(void);

/* Streams destroyed so far through either layer, counted before the real call: a stream handle
 * saved under one count names the same stream while the count has not moved (a destroyed
 * stream's handle may be given to a new stream). */
extern atomic_uint shim_streams_destroyed;

/* ---- stream-ordered frees (mem_async.c) ---------------------------------------------------- */

/* Give back to vmem every block freed on a stream whose stream has passed the free (polled, no
 * waiting). wait: wait for all of them first (cudaFree, out of memory, before a checkpoint). */
void shim_vmem_reap_frees(int wait);

/* 1 when vptr was freed with cudaFreeAsync and that free has not completed yet. */
int shim_vmem_free_pending(const void *vptr);

/* ---- stream-ordered memory pools over vmem (mem_pool.c) ------------------------------------ */

/* As the H100's driver (580) does: a pool reserves 32 MiB at a time (a larger block gets a segment
 * of its size in 2 MiB steps), places blocks at 512-byte multiples, and counts a block's used
 * bytes and address range as the size the program asked for. */
#define SHIM_POOL_SEGMENT ((uint64_t)32 << 20) /* a pool reserves memory in these steps */
#define SHIM_POOL_LARGE_STEP ((uint64_t)2 << 20) /* a block above a segment: its size in these */
#define SHIM_POOL_BLOCK_ALIGN ((uint64_t)512)  /* a block's place is rounded up to this */

/* Allocate size bytes for the program from the pool whose real handle is `handle` (its books
 * are made on first use): first fit in its segments, else a new vmem segment. */
cudaError_t shim_pool_alloc(void *handle, uint64_t size, void **ptr);
/* Whether ptr lies in a pool's segment (cheap while no pool holds memory). */
int shim_pool_owns(const void *ptr);
/* A free of the block starting at ptr begins: the pool's used figure drops by its *size; the
 * block stays taken until shim_pool_free_done. -EINVAL when no live block starts at ptr. */
int shim_pool_free_begin(const void *ptr, uint64_t *size, void **handle);
/* The free's stream passed it: the block's room is the pool's again. */
void shim_pool_free_done(const void *ptr);
/* The live block containing ptr (what the driver's address range query answers): 0, or
 * -ENOENT when ptr is in no live block. */
int shim_pool_block_range(const void *ptr, uintptr_t *base, uint64_t *size);
/* A block whose free began is the program's again (same stream, same rounded size), now for
 * `asked` bytes: 0 or -EINVAL. */
int shim_pool_reuse(const void *ptr, uint64_t asked);
/* Whether any pool holds vmem memory (one load): synchronisations have nothing to do if not. */
int shim_pool_holds_memory(void);
/* A synchronisation on device returned: pools over their release threshold give empty segments
 * back to vmem. */
void shim_pool_synchronized(int device);
/* cudaMemPoolTrimTo: empty segments back until at most keep bytes are reserved. */
void shim_pool_trim(void *handle, uint64_t keep);
/* The real pool was destroyed: its memory goes once its blocks are freed. */
void shim_pool_destroyed(void *handle);
struct shim_pool_figures {
  uint64_t reserved, reserved_high, used, used_high;
};
/* What the books say of the pool (zeros for a pool that never held vmem memory). */
void shim_pool_figures(void *handle, struct shim_pool_figures *out);
enum shim_pool_setting {
  SHIM_POOL_THRESHOLD,
  SHIM_POOL_RESET_RESERVED_HIGH,
  SHIM_POOL_RESET_USED_HIGH,
};
void shim_pool_set(void *handle, enum shim_pool_setting setting, uint64_t value);
/* vmem is starting over (device reset): forget every pool's books (the memory is gone). */
void shim_pool_forget(void);

/* ---- memory that is not vmem's (mem_registry.c) -------------------------------------------- */

enum shim_mem_kind {
  SHIM_MEM_MANAGED,     /* cudaMallocManaged */
  SHIM_MEM_HOST,        /* cudaMallocHost / cudaHostAlloc */
  SHIM_MEM_REGISTERED,  /* cudaHostRegister */
  SHIM_MEM_ARRAY,       /* cudaMallocArray / cudaMalloc3DArray */
  SHIM_MEM_MIPMAPPED,   /* cudaMallocMipmappedArray */
  SHIM_MEM_PASSTHROUGH, /* device memory left real: stream capture, CUDAW_VMEM=off */
};

/* One tracked allocation. Arrays: handle is the cudaArray_t / cudaMipmappedArray_t. */
struct shim_mem_record {
  enum shim_mem_kind kind;
  void *handle;                   /* pointer or array handle */
  uint64_t size;                  /* bytes (arrays: the device bytes they take, runtime/array.c) */
  unsigned flags;                 /* the allocation's flags */
  int device;
  struct cudaChannelFormatDesc format; /* arrays only */
  struct cudaExtent extent;            /* arrays only */
  unsigned levels;                     /* mipmapped arrays only */
  uint64_t charged;               /* bytes counted against CUDAW_MEM_LIMIT (vmem_quota_charge) */
};

/* Track / forget an allocation. Add returns 0 or -ENOMEM; remove returns 0 or -ENOENT when
 * handle is not tracked with that kind. */
int shim_mem_track(const struct shim_mem_record *record);
int shim_mem_untrack(enum shim_mem_kind kind, const void *handle, struct shim_mem_record *out);

/* Track what the real runtime allocated (memory.c). result: its call's result (nothing is done
 * unless it is cudaSuccess and handle is set). On failure give it back with undo and fail like a
 * full device. charged: bytes already counted against the quota for it (kept in the record). */
cudaError_t shim_mem_track_charged(cudaError_t result, enum shim_mem_kind kind, void *handle,
                                   size_t size, unsigned flags, cudaError_t (*undo)(void *),
                                   uint64_t charged);

/* The tracked record whose pointer range contains p (not arrays). 0 or -ENOENT. */
int shim_mem_find(const void *p, struct shim_mem_record *out);

/* Call cb for every tracked allocation (the registry's lock held: cb must not call back into
 * the registry). A non-zero return from cb stops the walk and is returned. For the checkpoint
 * glue: managed memory and arrays hold device contents that vmem does not see. */
int shim_mem_for_each(int (*cb)(const struct shim_mem_record *record, void *ctx), void *ctx);

/* Graph node parameters of any kind: memcpy and memset nodes are range-checked and translated
 * into *copy and *use points at it; other kinds leave *use = in. 0, or -EFAULT for a bad range. */
int shim_vmem_node_params_in(enum shim_fn_id id, struct cudaGraphNodeParams *in,
                             struct cudaGraphNodeParams *copy, struct cudaGraphNodeParams **use);

#endif
