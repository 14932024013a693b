// Description: several streams with pinned async copies, events ordering work across streams,
// a host callback and event timing; prints a checksum of the results and checks them.
#include "gpu_common.h"

__global__ void scale_add(float *x, int n, float s, float t)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * s + t;
}

static void CUDART_CB on_done(void *arg) { ++*(int *)arg; }

int main()
{
  require_gpu();
  const int streams = 4, n = 1 << 20;
  size_t bytes = n * sizeof(float);
  cudaStream_t s[streams];
  cudaEvent_t done[streams], t0, t1;
  float *host, *dev[streams];
  int callbacks = 0;
  CUDA_CHECK(cudaMallocHost(&host, bytes * streams));
  for (int i = 0; i < n * streams; i++) host[i] = (float)(i % 1000);
  CUDA_CHECK(cudaEventCreate(&t0));
  CUDA_CHECK(cudaEventCreate(&t1));
  CUDA_CHECK(cudaEventRecord(t0, 0));
  for (int k = 0; k < streams; k++) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&s[k], cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
    CUDA_CHECK(cudaMalloc(&dev[k], bytes));
    CUDA_CHECK(cudaMemcpyAsync(dev[k], host + (size_t)k * n, bytes, cudaMemcpyHostToDevice, s[k]));
    scale_add<<<(n + 255) / 256, 256, 0, s[k]>>>(dev[k], n, 2.0f, (float)k);
    CUDA_CHECK(cudaEventRecord(done[k], s[k]));
  }
  // Stream k also adds 1 after stream (k+1)%streams finished its first kernel.
  for (int k = 0; k < streams; k++) {
    CUDA_CHECK(cudaStreamWaitEvent(s[k], done[(k + 1) % streams], 0));
    scale_add<<<(n + 255) / 256, 256, 0, s[k]>>>(dev[k], n, 1.0f, 1.0f);
    CUDA_CHECK(cudaMemcpyAsync(host + (size_t)k * n, dev[k], bytes, cudaMemcpyDeviceToHost, s[k]));
    CUDA_CHECK(cudaLaunchHostFunc(s[k], on_done, &callbacks));
  }
  for (int k = 0; k < streams; k++) CUDA_CHECK(cudaStreamSynchronize(s[k]));
  CUDA_CHECK(cudaEventRecord(t1, 0));
  CUDA_CHECK(cudaEventSynchronize(t1));
  float ms = -1;
  CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
  if (callbacks != streams || !(ms >= 0)) {
    fprintf(stderr, "FAIL: callbacks=%d elapsed=%g ms\n", callbacks, ms);
    return 1;
  }
  for (int k = 0; k < streams; k++)
    for (int i = 0; i < n; i++) {
      float want = (float)((k * n + i) % 1000) * 2.0f + (float)k + 1.0f;
      if (host[(size_t)k * n + i] != want) {
        fprintf(stderr, "FAIL: stream %d element %d = %g, expected %g\n", k, i,
                host[(size_t)k * n + i], want);
        return 1;
      }
    }
  printf("streams_events checksum=%016llx\n",
         (unsigned long long)checksum(host, bytes * streams));
  for (int k = 0; k < streams; k++) {
    CUDA_CHECK(cudaFree(dev[k]));
    CUDA_CHECK(cudaStreamDestroy(s[k]));
    CUDA_CHECK(cudaEventDestroy(done[k]));
  }
  CUDA_CHECK(cudaFreeHost(host));
  return 0;
}
