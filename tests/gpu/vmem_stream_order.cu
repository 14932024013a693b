// Description: stream-ordered allocation on the GPU: a block freed with cudaFreeAsync behind a
// long-running kernel is not handed out to another stream before that kernel finishes, and comes
// back afterwards; natively and under cudaw (both policies). The spin kernel takes no pointer, so
// it runs under translate too.
#include "gpu_common.h"

__global__ void spin(long long cycles)
{
  long long start = clock64();
  while (clock64() - start < cycles) {}
}

int main()
{
  require_gpu();
  cudaStream_t s1, s2;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  // Natively the pool may otherwise hand the blocks to s2 by making s2 wait for s1.
  cudaMemPool_t pool;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  int no = 0;
  CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no));
  const int N = 32;
  void *blocks[N], *again[N];
  for (int i = 0; i < N; i++) CUDA_CHECK(cudaMallocAsync(&blocks[i], 4096, s1));
  CUDA_CHECK(cudaMemsetAsync(blocks[0], 1, 4096, s1));
  spin<<<1, 1, 0, s1>>>(2000000000ll); // about a second
  for (int i = 0; i < N; i++) CUDA_CHECK(cudaFreeAsync(blocks[i], s1));
  int reused = 0;
  for (int i = 0; i < N; i++) {
    CUDA_CHECK(cudaMallocAsync(&again[i], 4096, s2));
    for (int j = 0; j < N; j++) reused += again[i] == blocks[j];
  }
  cudaError_t busy = cudaStreamQuery(s1);
  printf("reused while the stream runs: %d (stream busy: %s)\n", reused,
         busy == cudaErrorNotReady ? "yes" : "no");
  CUDA_CHECK(cudaStreamSynchronize(s1));
  for (int i = 0; i < N; i++) CUDA_CHECK(cudaFreeAsync(again[i], s2));
  CUDA_CHECK(cudaStreamSynchronize(s2));
  size_t free_bytes, total;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  printf("ok\n");
  return reused ? 1 : 0;
}
