// Description: the simplest program: cudaMalloc, copies, a <<<>>> kernel with pointer arguments.
#include "corpus.h"
__global__ void add(const float *a, const float *b, float *c, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
int main()
{
  const int n = 1 << 20;
  float *h = (float *)malloc(3 * n * sizeof(float)), *a, *b, *c;
  for (int i = 0; i < n; i++) h[i] = i * 0.25f, h[n + i] = 1.0f - i;
  CK(cudaMalloc(&a, n * sizeof(float)));
  CK(cudaMalloc(&b, n * sizeof(float)));
  CK(cudaMalloc(&c, n * sizeof(float)));
  CK(cudaMemcpy(a, h, n * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b, h + n, n * sizeof(float), cudaMemcpyHostToDevice));
  add<<<(n + 255) / 256, 256>>>(a, b, c, n);
  corpus_sync();
  CK(cudaMemcpy(h + 2 * n, c, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++)
    if (h[2 * n + i] != h[i] + h[n + i]) WRONG("c[%d] = %g", i, h[2 * n + i]);
  return corpus_pass("vector_add");
}
