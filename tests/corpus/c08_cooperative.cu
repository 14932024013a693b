// Description: a cooperative launch (cudaLaunchCooperativeKernel) with a grid-wide barrier:
// phase 1 writes, grid.sync(), phase 2 reads what other blocks wrote.
#include <cooperative_groups.h>
#include "corpus.h"
namespace cg = cooperative_groups;
__global__ void twophase(int *a, int *b, int n)
{
  cg::grid_group grid = cg::this_grid();
  for (int i = grid.thread_rank(); i < n; i += grid.size()) a[i] = i * 2;
  grid.sync();
  for (int i = grid.thread_rank(); i < n; i += grid.size()) b[i] = a[n - 1 - i] + 1;
}
int main()
{
  const int n = 1 << 18;
  int *a, *b, *h = (int *)malloc(n * sizeof(int));
  CK(cudaMalloc(&a, n * sizeof(int)));
  CK(cudaMalloc(&b, n * sizeof(int)));
  int sms, per_sm;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, twophase, 256, 0));
  int count = n;
  void *args[] = {&a, &b, &count};
  CK(cudaLaunchCooperativeKernel((void *)twophase, dim3(sms * per_sm), dim3(256), args, 0, 0));
  corpus_sync();
  CK(cudaMemcpy(h, b, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++)
    if (h[i] != (n - 1 - i) * 2 + 1) WRONG("b[%d] = %d", i, h[i]);
  return corpus_pass("cooperative");
}
