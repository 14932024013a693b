// Description: streams created with the lowest and highest priority, each running its own
// kernels and async copies on its own buffers.
#include "corpus.h"
__global__ void scale(float *p, float s, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] *= s;
}
int main()
{
  int lo, hi;
  CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  cudaStream_t s[2];
  CK(cudaStreamCreateWithPriority(&s[0], cudaStreamNonBlocking, lo));
  CK(cudaStreamCreateWithPriority(&s[1], cudaStreamNonBlocking, hi));
  int got;
  CK(cudaStreamGetPriority(s[1], &got));
  if (got != hi) WRONG("priority %d, want %d", got, hi);
  const int n = 1 << 20;
  float *d[2], *h;
  CK(cudaMallocHost(&h, 2 * n * sizeof(float)));
  for (int i = 0; i < 2 * n; i++) h[i] = 1.0f + (i % 100);
  for (int k = 0; k < 2; k++) {
    CK(cudaMalloc(&d[k], n * sizeof(float)));
    CK(cudaMemcpyAsync(d[k], h + k * n, n * sizeof(float), cudaMemcpyHostToDevice, s[k]));
    for (int r = 0; r < 4; r++) scale<<<n / 256, 256, 0, s[k]>>>(d[k], k + 2.0f, n);
    CK(cudaMemcpyAsync(h + k * n, d[k], n * sizeof(float), cudaMemcpyDeviceToHost, s[k]));
  }
  corpus_sync();
  for (int k = 0; k < 2; k++) {
    float f = (k + 2.0f) * (k + 2.0f) * (k + 2.0f) * (k + 2.0f);
    for (int i = 0; i < n; i++)
      if (h[k * n + i] != (1.0f + ((k * n + i) % 100)) * f) WRONG("stream %d [%d] = %g", k, i, h[k * n + i]);
  }
  return corpus_pass("stream_priorities");
}
