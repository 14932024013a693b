// Description: zero-copy: mapped pinned host memory (cudaHostAlloc Mapped), its device pointer
// from cudaHostGetDevicePointer, written by a kernel and read on the host without a copy.
#include "corpus.h"
__global__ void fill(int *p, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = i ^ 0x5a5a;
}
int main()
{
  const int n = 1 << 16;
  int *host, *dev;
  CK(cudaHostAlloc(&host, n * sizeof(int), cudaHostAllocMapped));
  CK(cudaHostGetDevicePointer(&dev, host, 0));
  fill<<<n / 256, 256>>>(dev, n);
  corpus_sync();
  for (int i = 0; i < n; i++)
    if (host[i] != (i ^ 0x5a5a)) WRONG("host[%d] = %d", i, host[i]);
  CK(cudaFreeHost(host));
  return corpus_pass("zero_copy");
}
