// Description: managed memory (cudaMallocManaged) written on the host, updated by a kernel,
// prefetched, read back on the host; mixed with a cudaMalloc'd buffer in the same kernel.
#include "corpus.h"
__global__ void update(double *m, const double *d, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) m[i] = m[i] * 2.0 + d[i];
}
int main()
{
  const int n = 1 << 20;
  double *m, *d, *h = (double *)malloc(n * sizeof(double));
  CK(cudaMallocManaged(&m, n * sizeof(double)));
  CK(cudaMalloc(&d, n * sizeof(double)));
  for (int i = 0; i < n; i++) m[i] = i, h[i] = 0.5 * i;
  CK(cudaMemcpy(d, h, n * sizeof(double), cudaMemcpyHostToDevice));
  cudaMemLocation dev = {cudaMemLocationTypeDevice, 0};
  CK(cudaMemPrefetchAsync(m, n * sizeof(double), dev, 0, 0));
  update<<<(n + 255) / 256, 256>>>(m, d, n);
  corpus_sync();
  for (int i = 0; i < n; i++)
    if (m[i] != 2.5 * i) WRONG("m[%d] = %g", i, m[i]);
  CK(cudaFree(m));
  return corpus_pass("managed");
}
