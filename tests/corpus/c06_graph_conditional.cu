// Description: a conditional (while) graph node whose body kernel adds to a cudaMalloc'd vector
// and decides on the device whether to loop again (cudaGraphSetConditional), ten times.
#include "corpus.h"
__global__ void body(cudaGraphConditionalHandle handle, int *v, int *rounds, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] += i;
  __syncthreads();
  if (i == 0) {
    int r = ++*rounds;
    cudaGraphSetConditional(handle, r < 10 ? 1 : 0);
  }
}
int main()
{
  const int n = 256;
  int *v, *rounds, h[n];
  CK(cudaMalloc(&v, n * sizeof(int)));
  CK(cudaMalloc(&rounds, sizeof(int)));
  CK(cudaMemset(v, 0, n * sizeof(int)));
  CK(cudaMemset(rounds, 0, sizeof(int)));
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle handle;
  CK(cudaGraphConditionalHandleCreate(&handle, g, 1, cudaGraphCondAssignDefault));
  cudaGraphNodeParams cp = {};
  cp.type = cudaGraphNodeTypeConditional;
  cp.conditional.handle = handle;
  cp.conditional.type = cudaGraphCondTypeWhile;
  cp.conditional.size = 1;
  cudaGraphNode_t cond, kern;
  CK(cudaGraphAddNode(&cond, g, nullptr, nullptr, 0, &cp));
  cudaGraph_t bodyg = cp.conditional.phGraph_out[0];
  int count = n;
  void *args[] = {&handle, &v, &rounds, &count};
  cudaKernelNodeParams kp = {};
  kp.func = (void *)body;
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(n);
  kp.kernelParams = args;
  CK(cudaGraphAddKernelNode(&kern, bodyg, nullptr, 0, &kp));
  cudaGraphExec_t x;
  CK(cudaGraphInstantiate(&x, g, 0));
  CK(cudaGraphLaunch(x, 0));
  corpus_sync();
  int r;
  CK(cudaMemcpy(&r, rounds, sizeof r, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h, v, sizeof h, cudaMemcpyDeviceToHost));
  if (r != 10) WRONG("%d rounds", r);
  for (int i = 0; i < n; i++)
    if (h[i] != 10 * i) WRONG("v[%d] = %d", i, h[i]);
  return corpus_pass("graph_conditional");
}
