/* Stream-ordered allocation through vmem, shared by the runtime's (runtime/mem_async.c) and the
 * driver's (driver/memory.c) calls. A block freed on a stream must not be handed out again before
 * the stream reaches the free, so the free records an event there and the block goes back to vmem
 * once that event has completed: polled on later allocation calls and cudaMemGetInfo, waited for
 * by cudaFree and when an allocation runs out of memory. No CUDA call is made from a callback.
 * A stream being captured into a graph gets real memory from the real runtime (a graph's
 * allocation nodes cannot be virtualised). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim_generated.h"
#include "shim_vmem.h"
#include "vmem.h"

struct pending_free {
  void *ptr;
  uint64_t size;               /* the allocation's requested size */
  cudaEvent_t event;
  cudaStream_t stream;
  unsigned streams_destroyed;  /* shim_streams_destroyed when freed: stream still names it */
  const void *where;
  void *pool;                  /* the pool's handle (the block goes back to it), or NULL */
};

/* A created stream's handle names one stream; the default-stream handles name one per device
 * or thread, so nothing is concluded from them. */
static int names_one_stream(cudaStream_t stream)
{
  return stream != 0 && stream != cudaStreamLegacy && stream != cudaStreamPerThread;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pending_free *pending;
static size_t pending_count, pending_capacity;
static _Atomic size_t pending_published; /* pending_count, readable without the lock */
static cudaEvent_t *spare_events;          /* completed events, reused */
static size_t spare_count, spare_capacity;

static void keep_spare(cudaEvent_t event)
{
  if (spare_count == spare_capacity) {
    size_t grown = spare_capacity ? spare_capacity * 2 : 16;
    cudaEvent_t *bigger = realloc(spare_events, grown * sizeof *bigger);
    if (!bigger) {
      SHIM_REAL(cudaEventDestroy)(event);
      return;
    }
    spare_events = bigger;
    spare_capacity = grown;
  }
  spare_events[spare_count++] = event;
}

void shim_vmem_forget_frees(void)
{
  pthread_mutex_lock(&lock);
  pending_count = 0;
  spare_count = 0;
  atomic_store_explicit(&pending_published, 0, memory_order_release);
  pthread_mutex_unlock(&lock);
  shim_pool_forget();
}

void shim_vmem_reap_frees(int wait)
{
  if (atomic_load_explicit(&pending_published, memory_order_acquire) == 0) return;
  pthread_mutex_lock(&lock);
  /* Events on one stream complete in the order they were recorded: once one is found not ready,
   * the later ones on its stream are kept without asking the driver (with many frees pending
   * behind a long kernel, every allocation asked about each of them). */
  enum { BUSY_STREAMS = 8 };
  cudaStream_t busy[BUSY_STREAMS];
  unsigned busy_count = 0;
  size_t kept = 0;
  for (size_t i = 0; i < pending_count; i++) {
    struct pending_free *f = &pending[i];
    int known_busy = 0;
    for (unsigned b = 0; b < busy_count && !known_busy; b++) known_busy = busy[b] == f->stream;
    cudaError_t state = known_busy ? cudaErrorNotReady
                        : wait     ? SHIM_REAL(cudaEventSynchronize)(f->event)
                                   : SHIM_REAL(cudaEventQuery)(f->event);
    if (state == cudaErrorNotReady) {
      if (!known_busy && busy_count < BUSY_STREAMS && names_one_stream(f->stream))
        busy[busy_count++] = f->stream;
      pending[kept++] = *f;
      continue;
    }
    /* Completed, or the context is broken (sticky error): either way nothing runs any more. */
    if (f->pool) {
      shim_pool_free_done(f->ptr);
    } else {
      int rc = vmem_free(f->ptr, f->where);
      if (rc != 0) shim_warn("cudaFreeAsync(%p): deferred free failed (%d)", f->ptr, rc);
    }
    keep_spare(f->event);
  }
  pending_count = kept;
  atomic_store_explicit(&pending_published, kept, memory_order_release);
  pthread_mutex_unlock(&lock);
}

int shim_vmem_free_pending(const void *vptr)
{
  if (atomic_load_explicit(&pending_published, memory_order_acquire) == 0) return 0;
  pthread_mutex_lock(&lock);
  int found = 0;
  for (size_t i = 0; i < pending_count && !found; i++) found = pending[i].ptr == vptr;
  pthread_mutex_unlock(&lock);
  return found;
}

/* An allocation of size on stream may take a block freed on the same stream and not yet given
 * back: whatever the program enqueues on the stream after this allocation runs after the free,
 * as with the runtime's own pools, so no event need be asked. Only for created streams (the
 * default-stream handles name one stream per thread or device) that were not destroyed since
 * (their handle may name a new stream), and only for the same size (the block is the program's
 * again, as it was). The newest such block is taken. */
static int reuse_freed(cudaStream_t stream, uint64_t size, uint64_t asked, void *pool, void **ptr)
{
  if (!names_one_stream(stream) ||
      atomic_load_explicit(&pending_published, memory_order_acquire) == 0)
    return 0;
  unsigned destroyed = atomic_load_explicit(&shim_streams_destroyed, memory_order_seq_cst);
  pthread_mutex_lock(&lock);
  size_t i = pending_count;
  while (i > 0 && !(pending[i - 1].stream == stream && pending[i - 1].size == size &&
                    pending[i - 1].pool == pool && pending[i - 1].streams_destroyed == destroyed &&
                    (!pool || shim_pool_reuse(pending[i - 1].ptr, asked) == 0)))
    i--;
  int found = i > 0;
  if (found) {
    struct pending_free taken = pending[--i];
    /* Keep the order of the rest: events on one stream complete in order (reap). */
    memmove(&pending[i], &pending[i + 1], (pending_count - i - 1) * sizeof *pending);
    pending_count--;
    atomic_store_explicit(&pending_published, pending_count, memory_order_release);
    keep_spare(taken.event); /* may still be pending: recording it again is allowed */
    *ptr = taken.ptr;
  }
  pthread_mutex_unlock(&lock);
  return found;
}

/* Record the free of vptr (size bytes) on stream; vmem gets the block back once the stream
 * passed here. */
static cudaError_t defer_free(void *vptr, uint64_t size, cudaStream_t stream, const void *where,
                              void *pool)
{
  /* Read before the event is recorded, so that a destroy of stream racing with this free makes
   * the block's stream unknown, never the reverse. */
  unsigned destroyed = atomic_load_explicit(&shim_streams_destroyed, memory_order_seq_cst);
  pthread_mutex_lock(&lock);
  cudaError_t result = cudaSuccess;
  cudaEvent_t event = NULL;
  if (spare_count) {
    event = spare_events[--spare_count];
  } else if ((result = SHIM_REAL(cudaEventCreateWithFlags)(&event, cudaEventDisableTiming)) !=
             cudaSuccess) {
    goto out;
  }
  if (pending_count == pending_capacity) {
    size_t grown = pending_capacity ? pending_capacity * 2 : 64;
    struct pending_free *bigger = realloc(pending, grown * sizeof *bigger);
    if (!bigger) {
      keep_spare(event);
      result = cudaErrorMemoryAllocation;
      goto out;
    }
    pending = bigger;
    pending_capacity = grown;
  }
  if ((result = SHIM_REAL(cudaEventRecord)(event, stream)) != cudaSuccess) {
    keep_spare(event);
    goto out;
  }
  pending[pending_count++] =
      (struct pending_free){vptr, size, event, stream, destroyed, where, pool};
  atomic_store_explicit(&pending_published, pending_count, memory_order_release);
out:
  pthread_mutex_unlock(&lock);
  return result;
}

/* Whether stream is being captured (then its allocations must stay real), or the error the
 * runtime gives for the stream (an invalid handle). */
static cudaError_t capturing(cudaStream_t stream, int *active)
{
  enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  *active = 0;
  /* No capture open: nothing to ask the driver (an invalid stream handle is then found by the
   * free's event record, not here). */
  if (!shim_capture_possible() || !SHIM_REAL(cudaStreamIsCapturing)) return cudaSuccess;
  cudaError_t result = SHIM_REAL(cudaStreamIsCapturing)(stream, &status);
  *active = result == cudaSuccess && status != cudaStreamCaptureStatusNone;
  return result;
}

/* The common body of the allocating calls. real_alloc is the real runtime's call for streams
 * under capture and when vmem does not run. */
cudaError_t shim_vmem_malloc_async(void **ptr, size_t size, cudaStream_t stream,
                                   shim_real_alloc_async_fn real_alloc, void *pool)
{
  if (!ptr) return shim_set_last_error(cudaErrorInvalidValue);
  if (shim_vmem_start() != 0) return real_alloc(ptr, size, pool, stream);
  int active;
  cudaError_t result = capturing(stream, &active);
  if (result != cudaSuccess) return result;
  if (active) {
    result = real_alloc(ptr, size, pool, stream);
    if (result == cudaSuccess && *ptr) {
      struct shim_mem_record record = {.kind = SHIM_MEM_PASSTHROUGH, .handle = *ptr, .size = size};
      shim_current_device(&record.device);
      shim_mem_track(&record);
    }
    return result;
  }
  if (!pool) {
    /* The device's current pool, which the program's pool calls name. */
    int device;
    if (shim_current_device(&device) != cudaSuccess ||
        SHIM_REAL(cudaDeviceGetMemPool)((cudaMemPool_t *)&pool, device) != cudaSuccess) {
      SHIM_REAL(cudaGetLastError)();
      pool = NULL;
    }
  }
  if (size == 0 && pool) {
    *ptr = NULL; /* as the driver's pools answer */
    return cudaSuccess;
  }
  /* Frees their streams have passed give their room back first, as in the driver's pools. */
  shim_vmem_reap_frees(0);
  /* Under translate without the driver layer, a late library may have stopped allocations
   * (glue/vmem.c): only vmem decides then. */
  uint64_t want = pool ? (size + SHIM_POOL_BLOCK_ALIGN - 1) & ~(SHIM_POOL_BLOCK_ALIGN - 1) : size;
  if ((!shim_translate_end || shim_drv_routing()) && reuse_freed(stream, want, size, pool, ptr))
    return cudaSuccess;
  if (!pool) return shim_set_last_error(shim_vmem_alloc(ptr, size));
  return shim_set_last_error(shim_pool_alloc(pool, size, ptr));
}

cudaError_t shim_vmem_free_async(void *ptr, cudaStream_t stream, const void *where,
                                 shim_real_free_async_fn real_free)
{
  if (!ptr || !vmem_owns(ptr)) {
    cudaError_t result = real_free(ptr, stream);
    if (result == cudaSuccess && ptr) shim_mem_untrack(SHIM_MEM_PASSTHROUGH, ptr, NULL);
    return result;
  }
  uint64_t size = 0;
  void *pool = NULL;
  int active;
  cudaError_t result = capturing(stream, &active);
  if (result != cudaSuccess) return result;
  if (active) {
    shim_warn("cudaFreeAsync(%p): freeing cudaw virtual memory inside a stream capture is not "
              "supported (allocate it inside the capture, or free it outside)", ptr);
    return shim_set_last_error(cudaErrorStreamCaptureUnsupported);
  }
  bool pooled = shim_pool_owns(ptr);
  struct vmem_info info;
  if (pooled ? shim_pool_free_begin(ptr, &size, &pool) != 0
             : vmem_lookup(ptr, &info) != 0 || info.offset != 0 || shim_vmem_free_pending(ptr)) {
    shim_warn("cudaFreeAsync(%p): not the start of a live allocation (interior pointer, unknown "
              "pointer or double free)", ptr);
    return shim_set_last_error(cudaErrorInvalidValue);
  }
  result = defer_free(ptr, pooled ? size : info.size, stream, where, pool);
  if (pooled && result != cudaSuccess) shim_pool_free_done(ptr); /* no event: free now */
  return shim_set_last_error(result);
}

