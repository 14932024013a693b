// Description: events: timing (cudaEventElapsedTime), cross-stream ordering with
// cudaStreamWaitEvent, cudaEventQuery/Synchronize.
#include "corpus.h"
__global__ void produce(int *p, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    int v = i;
    for (int k = 0; k < 200; k++) v = (v * 1103515245 + 12345) & 0x7fffffff;
    p[i] = v;
  }
}
__global__ void consume(const int *p, int *q, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) q[i] = p[i] & 0xff;
}
int main()
{
  const int n = 1 << 20;
  int *p, *q, *h = (int *)malloc(n * sizeof(int));
  CK(cudaMalloc(&p, n * sizeof(int)));
  CK(cudaMalloc(&q, n * sizeof(int)));
  cudaStream_t a, b;
  CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaEvent_t start, done;
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&done));
  CK(cudaEventRecord(start, a));
  produce<<<n / 256, 256, 0, a>>>(p, n);
  CK(cudaEventRecord(done, a));
  CK(cudaStreamWaitEvent(b, done, 0));
  consume<<<n / 256, 256, 0, b>>>(p, q, n);
  CK(cudaEventSynchronize(done));
  if (cudaEventQuery(done) != cudaSuccess) WRONG("event not complete after synchronize");
  float ms;
  CK(cudaEventElapsedTime(&ms, start, done));
  if (!(ms > 0 && ms < 10000)) WRONG("elapsed %g ms", ms);
  CK(cudaStreamSynchronize(b));
  corpus_sync();
  CK(cudaMemcpy(h, q, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) {
    int v = i;
    for (int k = 0; k < 200; k++) v = (v * 1103515245 + 12345) & 0x7fffffff;
    if (h[i] != (v & 0xff)) WRONG("q[%d] = %d", i, h[i]);
  }
  return corpus_pass("events");
}
