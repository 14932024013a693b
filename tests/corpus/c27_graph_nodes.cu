// Description: an explicit graph of a memset node, a kernel node and a memcpy node over
// cudaMalloc'd memory (what graph samples build by hand), instantiated once and launched five
// times, the pause point between the launches; each launch's output is checked.
#include "corpus.h"

__global__ void fill(int *data, int add, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += i * 3 + add;
}

int main()
{
  const int n = 1 << 16;
  int *d_work, *d_out, *h = (int *)malloc(n * sizeof(int));
  CK(cudaMalloc(&d_work, n * sizeof(int)));
  CK(cudaMalloc(&d_out, n * sizeof(int)));
  cudaGraph_t graph;
  CK(cudaGraphCreate(&graph, 0));
  cudaMemsetParams memset_params = {};
  memset_params.dst = d_work;
  memset_params.value = 0;
  memset_params.elementSize = 4;
  memset_params.width = n;
  memset_params.height = 1;
  cudaGraphNode_t memset_node, kernel_node, copy_node;
  CK(cudaGraphAddMemsetNode(&memset_node, graph, nullptr, 0, &memset_params));
  int add = 7, count = n;
  void *args[] = {&d_work, &add, &count};
  cudaKernelNodeParams kernel_params = {};
  kernel_params.func = (void *)fill;
  kernel_params.gridDim = dim3((n + 255) / 256);
  kernel_params.blockDim = dim3(256);
  kernel_params.kernelParams = args;
  CK(cudaGraphAddKernelNode(&kernel_node, graph, &memset_node, 1, &kernel_params));
  CK(cudaGraphAddMemcpyNode1D(&copy_node, graph, &kernel_node, 1, d_out, d_work, n * sizeof(int),
                              cudaMemcpyDeviceToDevice));
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, graph, 0));
  for (int launch = 0; launch < 5; launch++) {
    CK(cudaMemset(d_out, 0xff, n * sizeof(int)));
    CK(cudaGraphLaunch(exec, 0));
    corpus_sync();
    CK(cudaMemcpy(h, d_out, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
      if (h[i] != i * 3 + 7) WRONG("launch %d: out[%d] = %d, want %d", launch, i, h[i], i * 3 + 7);
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  return corpus_pass("graph_nodes");
}
