/* Description: CUDAW_MEM_LIMIT=64M (set by ctest) holds for every allocation API: cudaMemGetInfo
 * reports total = min(device, limit) and free = total - held; an allocation past the limit fails
 * with cudaErrorMemoryAllocation and leaves nothing behind. Managed memory and CUDA arrays, which
 * cudaw passes to the real runtime, count against the limit too. */
#include "vmemshim.h"

#define MiB ((size_t)1 << 20)

static void info(size_t *f, size_t *t)
{
  CUDA_OK(cudaMemGetInfo(f, t));
  CHECK(*f <= *t);
}

int main(void)
{
  if (!vmem_expected()) test_skip("CUDAW_VMEM=off: no quota");
  size_t f0, t0, f, t;
  info(&f0, &t0);
  CHECK_EQ(t0, 64 * MiB);
  CHECK(f0 <= 64 * MiB && f0 > 60 * MiB, "free %zu", f0);

  void *a;
  CUDA_OK(cudaMalloc(&a, 32 * MiB));
  info(&f, &t);
  CHECK_EQ(t, 64 * MiB);
  CHECK_EQ(f, f0 - 32 * MiB);

  /* Each API past the limit: the right error, nothing held afterwards. */
  void *p = (void *)1;
  size_t pitch;
  struct cudaPitchedPtr pp;
  cudaMemPool_t pool;
  CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
  CUDA_FAILS(cudaMalloc(&p, 40 * MiB), cudaErrorMemoryAllocation);
  CUDA_FAILS(cudaMallocPitch(&p, &pitch, 4096, 10240), cudaErrorMemoryAllocation);
  CUDA_FAILS(cudaMalloc3D(&pp, ((struct cudaExtent){4096, 1024, 10})), cudaErrorMemoryAllocation);
  CUDA_FAILS(cudaMallocAsync(&p, 40 * MiB, 0), cudaErrorMemoryAllocation);
  CUDA_FAILS(cudaMallocFromPoolAsync(&p, 40 * MiB, pool, 0), cudaErrorMemoryAllocation);
  info(&f, &t);
  CHECK_EQ(f, f0 - 32 * MiB);

  /* Passed-through memory: managed memory at its size, arrays at their texels' size. */
  void *m = (void *)1;
  CUDA_FAILS(cudaMallocManaged(&m, 40 * MiB, cudaMemAttachGlobal), cudaErrorMemoryAllocation);
  CUDA_OK(cudaMallocManaged(&m, 16 * MiB, cudaMemAttachGlobal));
  info(&f, &t);
  CHECK_EQ(f, f0 - 48 * MiB);
  struct cudaChannelFormatDesc desc = {32, 0, 0, 0, cudaChannelFormatKindFloat};
  cudaArray_t big = NULL, small_array = NULL;
  CUDA_FAILS(cudaMalloc3DArray(&big, &desc, ((struct cudaExtent){2048, 2048, 2}), 0),
             cudaErrorMemoryAllocation); /* 32 MiB: over what is left */
  CUDA_OK(cudaMallocArray(&small_array, &desc, 1024, 1024, 0)); /* 4 MiB */
  info(&f, &t);
  CHECK(f <= f0 - 52 * MiB, "an array of 4 MiB: free %zu", f);
  CUDA_OK(cudaFreeArray(small_array));
  CUDA_OK(cudaFree(m));
  info(&f, &t);
  CHECK_EQ(f, f0 - 32 * MiB);

  /* Many small allocations stop at the limit too, and all come back. */
  enum { MAX = 4096 };
  static void *small[MAX];
  int n = 0;
  cudaError_t e;
  while (n < MAX && (e = cudaMalloc(&small[n], 64 * 1024)) == cudaSuccess) n++;
  CHECK(n < MAX, "no limit on small allocations");
  CHECK_EQ(e, cudaErrorMemoryAllocation);
  CHECK_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  CHECK((size_t)n * 65536 <= 32 * MiB && (size_t)n * 65536 > 28 * MiB, "%d x 64 KiB fit", n);
  for (int i = 0; i < n; i++) CUDA_OK(cudaFree(small[i]));
  CUDA_OK(cudaFree(a));
  info(&f, &t);
  CHECK_EQ(f, f0);

  /* The quota is the limit, not the device: exactly up to it works. */
  CUDA_OK(cudaMalloc(&a, 62 * MiB));
  CUDA_OK(cudaFree(a));
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  printf("ok\n");
  return 0;
}
