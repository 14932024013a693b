/* Description: representative runtime calls forwarded through cudaw to the emulated device:
 * device queries, memory round trips, errors passed back unchanged (a bad free), streams and
 * events, and a function the emulated runtime lacks (cudaErrorNotSupported, not a crash). The
 * program links cudaw's libcudart; argv[1] is that library's path, to prove calls went there. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

#define CUDA_OK(call) CHECK((call) == cudaSuccess, "%s", cudaGetErrorString(cudaGetLastError()))

int main(int argc, char **argv)
{
  CHECK(argc >= 2, "usage: forward_test <cudaw libcudart path> [--init-only]");
  if (argc == 3 && strcmp(argv[2], "--init-only") == 0) {
    printf("initialised: %s\n", cudaGetErrorName(cudaSuccess));
    return 0;
  }
  Dl_info info;
  char a[PATH_MAX], b[PATH_MAX];
  CHECK(dladdr((void *)&cudaMalloc, &info) && info.dli_fname);
  CHECK(realpath(info.dli_fname, a) && realpath(argv[1], b));
  CHECK(strcmp(a, b) == 0, "cudaMalloc comes from %s, not cudaw (%s)", a, b);

  int count = 0, dev = -1;
  CUDA_OK(cudaGetDeviceCount(&count));
  CHECK_EQ(count, 1);
  CUDA_OK(cudaGetDevice(&dev));
  CHECK_EQ(dev, 0);
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  CHECK(strstr(prop.name, "emulated") != NULL, "device name %s", prop.name);

  enum { N = 1 << 16 };
  unsigned char *host = malloc(N), *back = malloc(N);
  for (int i = 0; i < N; i++) host[i] = (unsigned char)(i * 7 + 3);
  void *d = NULL;
  CUDA_OK(cudaMalloc(&d, N));
  CUDA_OK(cudaMemcpy(d, host, N, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset((char *)d + 100, 0xab, 10));
  cudaStream_t s;
  cudaEvent_t e;
  CUDA_OK(cudaStreamCreate(&s));
  CUDA_OK(cudaEventCreate(&e));
  CUDA_OK(cudaMemcpyAsync(back, d, N, cudaMemcpyDeviceToHost, s));
  CUDA_OK(cudaEventRecord(e, s));
  CUDA_OK(cudaEventSynchronize(e));
  CUDA_OK(cudaStreamSynchronize(s));
  for (int i = 0; i < N; i++) {
    unsigned char want = i >= 100 && i < 110 ? 0xab : host[i];
    CHECK(back[i] == want, "byte %d = %d, expected %d", i, back[i], want);
  }

  /* Errors come back unchanged: an interior pointer is not an allocation. */
  CHECK_EQ(cudaFree((char *)d + 8), cudaErrorInvalidValue);
  CHECK_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  CUDA_OK(cudaFree(d));
  CHECK(strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0);

  /* A function the emulated runtime lacks (it keeps only a capture status, begun and ended
   * plainly): cudaw answers cudaErrorNotSupported, once logged. */
  CHECK_EQ(cudaStreamBeginCaptureToGraph(s, NULL, NULL, NULL, 0, cudaStreamCaptureModeGlobal),
           cudaErrorNotSupported);
  CHECK_EQ(cudaStreamBeginCaptureToGraph(s, NULL, NULL, NULL, 0, cudaStreamCaptureModeGlobal),
           cudaErrorNotSupported);
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  CUDA_OK(cudaGraphDestroy(graph));

  free(host);
  free(back);
  CUDA_OK(cudaEventDestroy(e));
  CUDA_OK(cudaStreamDestroy(s));
  printf("forwarding through cudaw to the emulated device: ok\n");
  return 0;
}
