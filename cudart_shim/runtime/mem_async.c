/* The runtime's stream-ordered allocation calls: cudaMallocAsync, cudaMallocFromPoolAsync,
 * cudaFreeAsync and their _ptsz variants, over the shared body in glue/mem_async.c. The pools
 * themselves are the real runtime's; their blocks come from cudaw's books over vmem
 * (glue/mem_pool.c), whose figures runtime/mem_pool.c answers. Listed in gen/api.d/vmem.conf. */
#include "shim_generated.h"
#include "shim_vmem.h"

/* Not declared in C mode without CUDA_API_PER_THREAD_DEFAULT_STREAM. */
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                         cudaStream_t stream);

/* ---- the real runtime's calls, shaped alike ---- */

static cudaError_t real_malloc_async(void **ptr, size_t size, void *pool, cudaStream_t stream)
{
  (void)pool;
  return SHIM_REAL(cudaMallocAsync)(ptr, size, stream);
}

static cudaError_t real_malloc_async_ptsz(void **ptr, size_t size, void *pool, cudaStream_t stream)
{
  (void)pool;
  return SHIM_REAL(cudaMallocAsync_ptsz)(ptr, size, stream);
}

static cudaError_t real_malloc_pool(void **ptr, size_t size, void *pool, cudaStream_t stream)
{
  return SHIM_REAL(cudaMallocFromPoolAsync)(ptr, size, (cudaMemPool_t)pool, stream);
}

static cudaError_t real_malloc_pool_ptsz(void **ptr, size_t size, void *pool, cudaStream_t stream)
{
  return SHIM_REAL(cudaMallocFromPoolAsync_ptsz)(ptr, size, (cudaMemPool_t)pool, stream);
}

static cudaError_t real_free_async(void *ptr, cudaStream_t stream)
{
  return SHIM_REAL(cudaFreeAsync)(ptr, stream);
}

static cudaError_t real_free_async_ptsz(void *ptr, cudaStream_t stream)
{
  return SHIM_REAL(cudaFreeAsync_ptsz)(ptr, stream);
}

/* In a _ptsz call, stream 0 is the calling thread's default stream. */
static cudaStream_t per_thread(cudaStream_t stream)
{
  return stream ? stream : cudaStreamPerThread;
}

/* ---- exported ---- */

#define ENTER(name)                                                                            \
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_##name);                                         \
  if (!real) return shim_missing(SHIM_FN_##name)

SHIM_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
  ENTER(cudaMallocAsync);
  cudaError_t result =
      shim_vmem_malloc_async(devPtr, size, hStream, real_malloc_async, NULL);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
  ENTER(cudaMallocAsync_ptsz);
  cudaError_t result = shim_vmem_malloc_async(devPtr, size, per_thread(hStream),
                                              real_malloc_async_ptsz, NULL);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                                cudaStream_t stream)
{
  ENTER(cudaMallocFromPoolAsync);
  cudaError_t result =
      memPool ? shim_vmem_malloc_async(ptr, size, stream, real_malloc_pool, memPool)
              : shim_set_last_error(cudaErrorInvalidValue);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size,
                                                     cudaMemPool_t memPool, cudaStream_t stream)
{
  ENTER(cudaMallocFromPoolAsync_ptsz);
  cudaError_t result = memPool ? shim_vmem_malloc_async(ptr, size, per_thread(stream),
                                                        real_malloc_pool_ptsz, memPool)
                               : shim_set_last_error(cudaErrorInvalidValue);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
  ENTER(cudaFreeAsync);
  cudaError_t result =
      shim_vmem_free_async(devPtr, hStream, __builtin_return_address(0), real_free_async);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
  ENTER(cudaFreeAsync_ptsz);
  cudaError_t result = shim_vmem_free_async(devPtr, per_thread(hStream),
                                            __builtin_return_address(0), real_free_async_ptsz);
  shim_gate_leave();
  return result;
}
