// Description: stream-ordered allocation: cudaMallocAsync / cudaFreeAsync in a loop on two
// streams and from an explicit pool (cudaMallocFromPoolAsync), with kernels between.
#include "corpus.h"
__global__ void iota(int *p, int base, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = base + i;
}
int main()
{
  cudaStream_t s[2];
  for (auto &x : s) CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  cudaMemPool_t pool;
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  CK(cudaMemPoolCreate(&pool, &props));
  const int n = 1 << 16;
  int *h;
  CK(cudaMallocHost(&h, n * sizeof(int)));
  for (int r = 0; r < 50; r++) {
    cudaStream_t st = s[r % 2];
    int *p;
    if (r % 3 == 0) CK(cudaMallocFromPoolAsync((void **)&p, n * sizeof(int), pool, st));
    else CK(cudaMallocAsync(&p, n * sizeof(int), st));
    iota<<<n / 256, 256, 0, st>>>(p, r * 1000, n);
    CK(cudaMemcpyAsync(h, p, n * sizeof(int), cudaMemcpyDeviceToHost, st));
    CK(cudaFreeAsync(p, st));
    CK(cudaStreamSynchronize(st));
    for (int i = 0; i < n; i += 97)
      if (h[i] != r * 1000 + i) WRONG("round %d: [%d] = %d", r, i, h[i]);
  }
  corpus_sync();
  CK(cudaMemPoolDestroy(pool));
  return corpus_pass("malloc_async");
}
