// Description: an nvcc-built program (-cudart shared, CUDA 13 <<<>>> launch path:
// __cudaPushCallConfiguration, __cudaGetKernel, __cudaLaunchKernel) runs under cudaw on the
// emulated device, with its kernel run by the host implementation below; results are checked
// and the runtime calls are shown to go through cudaw's library (argv[1]).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cudaw_emu.h"
#include "test.h"

__global__ void saxpy(float a, const float *x, float *y, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

CUDAW_EMU_KERNEL(_Z5saxpyfPKfPfi)
{
  float a = CUDAW_EMU_ARG(args, 0, float);
  const float *x = CUDAW_EMU_ARG(args, 1, const float *);
  float *y = CUDAW_EMU_ARG(args, 2, float *);
  int n = CUDAW_EMU_ARG(args, 3, int);
  CUDAW_EMU_FOR_EACH_THREAD(launch, b, t)
  {
    int i = (int)(b.x * launch->block.x + t.x);
    if (i < n) y[i] = a * x[i] + y[i];
  }
}

int main(int argc, char **argv)
{
  CHECK(argc == 2);
  Dl_info info;
  char a[PATH_MAX], b[PATH_MAX];
  CHECK(dladdr((void *)&cudaMemcpy, &info) && realpath(info.dli_fname, a) &&
        realpath(argv[1], b) && strcmp(a, b) == 0, "runtime is %s, not cudaw", info.dli_fname);
  const int n = 5000;
  float *x = (float *)malloc(n * sizeof(float)), *y = (float *)malloc(n * sizeof(float));
  for (int i = 0; i < n; i++) x[i] = (float)i, y[i] = 1.0f;
  float *dx, *dy;
  CHECK(cudaMalloc(&dx, n * sizeof(float)) == cudaSuccess);
  CHECK(cudaMalloc(&dy, n * sizeof(float)) == cudaSuccess);
  CHECK(cudaMemcpy(dx, x, n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(dy, y, n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  saxpy<<<(n + 127) / 128, 128>>>(2.0f, dx, dy, n);
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  CHECK(cudaMemcpy(y, dy, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int i = 0; i < n; i++) CHECK(y[i] == 2.0f * (float)i + 1.0f, "y[%d] = %g", i, y[i]);
  cudaFree(dx);
  cudaFree(dy);
  printf("nvcc program under cudaw on the emulated device: ok\n");
  return 0;
}
