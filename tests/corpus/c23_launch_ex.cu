// Description: cudaLaunchKernelExC with launch attributes (a thread-block cluster of 2 and
// programmatic stream serialization), on an extern "C" kernel whose parameter types cudaw
// cannot read from the name.
#include <cooperative_groups.h>
#include "corpus.h"
namespace cg = cooperative_groups;
extern "C" __global__ void __cluster_dims__(2, 1, 1) rank_in_cluster(int *out, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (int)cg::this_cluster().block_rank() * 100000 + i;
}
int main()
{
  const int n = 1024;
  int *d, h[n];
  CK(cudaMalloc(&d, sizeof h));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(n / 128);
  cfg.blockDim = dim3(128);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int count = n;
  void *args[] = {&d, &count};
  CK(cudaLaunchKernelExC(&cfg, (const void *)rank_in_cluster, args));
  corpus_sync();
  CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++)
    if (h[i] != ((i / 128) % 2) * 100000 + i) WRONG("out[%d] = %d", i, h[i]);
  return corpus_pass("launch_ex");
}
