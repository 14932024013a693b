// Description: a texture object over linear memory (cudaMalloc, linear resource), tex1Dfetch.
#include "corpus.h"
__global__ void fetch(cudaTextureObject_t t, int *out, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<int>(t, n - 1 - i);
}
int main()
{
  const int n = 100000;
  int *h = (int *)malloc(n * sizeof(int)), *b = (int *)malloc(n * sizeof(int)), *in, *out;
  for (int i = 0; i < n; i++) h[i] = i * 3 + 1;
  CK(cudaMalloc(&in, n * sizeof(int)));
  CK(cudaMalloc(&out, n * sizeof(int)));
  CK(cudaMemcpy(in, h, n * sizeof(int), cudaMemcpyHostToDevice));
  cudaResourceDesc res = {};
  res.resType = cudaResourceTypeLinear;
  res.res.linear.devPtr = in;
  res.res.linear.desc = cudaCreateChannelDesc<int>();
  res.res.linear.sizeInBytes = n * sizeof(int);
  cudaTextureDesc td = {};
  td.readMode = cudaReadModeElementType;
  cudaTextureObject_t t;
  CK(cudaCreateTextureObject(&t, &res, &td, nullptr));
  fetch<<<(n + 255) / 256, 256>>>(t, out, n);
  corpus_sync();
  CK(cudaMemcpy(b, out, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++)
    if (b[i] != h[n - 1 - i]) WRONG("out[%d] = %d", i, b[i]);
  CK(cudaDestroyTextureObject(t));
  return corpus_pass("texture_linear");
}
