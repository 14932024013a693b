// Description: a graph with memory nodes: an allocation node gives scratch memory (real graph
// memory), a kernel node squares a cudaMalloc'd input into it, a memcpy node copies it to a
// cudaMalloc'd output, a free node releases it; launched three times.
#include "corpus.h"
__global__ void square(const int *in, int *scratch, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) scratch[i] = in[i] * in[i];
}
int main()
{
  const int n = 4096;
  int *h = (int *)malloc(n * sizeof(int)), *in, *out;
  for (int i = 0; i < n; i++) h[i] = i - 2000;
  CK(cudaMalloc(&in, n * sizeof(int)));
  CK(cudaMalloc(&out, n * sizeof(int)));
  CK(cudaMemcpy(in, h, n * sizeof(int), cudaMemcpyHostToDevice));
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaMemAllocNodeParams ap = {};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = n * sizeof(int);
  cudaGraphNode_t alloc, kern, copy, freen;
  CK(cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap));
  int *scratch = (int *)ap.dptr;
  int count = n;
  void *args[] = {&in, &scratch, &count};
  cudaKernelNodeParams kp = {};
  kp.func = (void *)square;
  kp.gridDim = dim3((n + 255) / 256);
  kp.blockDim = dim3(256);
  kp.kernelParams = args;
  CK(cudaGraphAddKernelNode(&kern, g, &alloc, 1, &kp));
  CK(cudaGraphAddMemcpyNode1D(&copy, g, &kern, 1, out, scratch, n * sizeof(int), cudaMemcpyDeviceToDevice));
  CK(cudaGraphAddMemFreeNode(&freen, g, &copy, 1, scratch));
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  for (int r = 0; r < 3; r++) {
    CK(cudaMemset(out, 0, n * sizeof(int)));
    CK(cudaGraphLaunch(x, 0));
    corpus_sync();
    CK(cudaMemcpy(h, out, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
      if (h[i] != (i - 2000) * (i - 2000)) WRONG("launch %d: out[%d] = %d", r, i, h[i]);
  }
  CK(cudaGraphExecDestroy(x));
  CK(cudaGraphDestroy(g));
  return corpus_pass("graph_mem_nodes");
}
