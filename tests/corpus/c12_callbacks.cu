// Description: host callbacks in stream order: cudaLaunchHostFunc and cudaStreamAddCallback see
// the results of the kernels and copies queued before them.
#include <atomic>
#include "corpus.h"
__global__ void set(int *p, int v) { p[threadIdx.x] = v + threadIdx.x; }
static int *pinned;
static std::atomic<int> seen{0};
static void CUDART_CB host_fn(void *arg)
{
  int want = *(int *)arg;
  if (pinned[5] == want + 5) seen++;
}
static void CUDART_CB callback(cudaStream_t, cudaError_t status, void *arg)
{
  int want = *(int *)arg;
  if (status == cudaSuccess && pinned[7] == want + 7) seen++;
}
int main()
{
  int *d;
  CK(cudaMalloc(&d, 32 * sizeof(int)));
  CK(cudaMallocHost(&pinned, 32 * sizeof(int)));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  static int values[2] = {100, 200};
  set<<<1, 32, 0, s>>>(d, values[0]);
  CK(cudaMemcpyAsync(pinned, d, 32 * sizeof(int), cudaMemcpyDeviceToHost, s));
  CK(cudaLaunchHostFunc(s, host_fn, &values[0]));
  set<<<1, 32, 0, s>>>(d, values[1]);
  CK(cudaMemcpyAsync(pinned, d, 32 * sizeof(int), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamAddCallback(s, callback, &values[1], 0));
  CK(cudaStreamSynchronize(s));
  corpus_sync();
  if (seen != 2) WRONG("%d of 2 callbacks saw the data", seen.load());
  return corpus_pass("callbacks");
}
