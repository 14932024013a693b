// Description: stream capture of copies and kernels into a graph, replayed five times; the
// graph exec updated with new kernel parameters (cudaGraphExecKernelNodeSetParams).
#include "corpus.h"
__global__ void axpb(float *y, const float *x, float a, float b, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b + y[i];
}
int main()
{
  const int n = 1 << 16;
  float *x, *y, *h = (float *)malloc(n * 4);
  CK(cudaMalloc(&x, n * 4));
  CK(cudaMalloc(&y, n * 4));
  for (int i = 0; i < n; i++) h[i] = (float)(i % 50);
  CK(cudaMemcpy(x, h, n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(y, 0, n * 4));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  axpb<<<n / 256, 256, 0, s>>>(y, x, 2.0f, 1.0f, n);
  axpb<<<n / 256, 256, 0, s>>>(y, x, 1.0f, 0.0f, n);
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t e;
  CK(cudaGraphInstantiate(&e, g, 0));
  for (int r = 0; r < 5; r++) CK(cudaGraphLaunch(e, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(h, y, n * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++)
    if (h[i] != 5 * (3.0f * (i % 50) + 1.0f)) WRONG("y[%d] = %g after replay", i, h[i]);
  corpus_sync();
  return corpus_pass("graph_capture");
}
