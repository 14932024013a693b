/* Description: an unmodified nvcc program (shared runtime, <<<...>>> launch, a __device__
 * variable) run with LD_PRELOAD=libcudaw-emu.so: its runtime calls must reach the emu (proved by
 * cudaw_emu_is_emulated) and the vector add, executed by the host implementation below, must
 * produce the right sums. */
#include <dlfcn.h>

#include <cuda_runtime.h>

#include "cudaw_emu.h"
#include "test.h"

__device__ int offsets[4];

__global__ void vadd(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

/* What vadd does, for the emulated device. */
CUDAW_EMU_KERNEL(_Z4vaddPKfS0_Pfi) {
  const float *a = CUDAW_EMU_ARG(args, 0, const float *);
  const float *b = CUDAW_EMU_ARG(args, 1, const float *);
  float *c = CUDAW_EMU_ARG(args, 2, float *);
  int n = CUDAW_EMU_ARG(args, 3, int);
  CUDAW_EMU_FOR_EACH_THREAD(launch, block, thread) {
    int i = (int)(block.x * launch->block.x + thread.x);
    if (i < n) c[i] = a[i] + b[i];
  }
}

int main() {
  void *is_emulated = dlsym(RTLD_DEFAULT, "cudaw_emu_is_emulated");
  if (!is_emulated) test_fail("the runtime is not libcudaw-emu.so (run with LD_PRELOAD)");
  CHECK_EQ(((int (*)(void))is_emulated)(), 1);

  const int n = 10000;
  static float a[n], b[n], c[n];
  for (int i = 0; i < n; i++) {
    a[i] = (float)i;
    b[i] = (float)(2 * i + 1);
  }
  float *da, *db, *dc;
  CHECK_EQ(cudaMalloc(&da, sizeof a), cudaSuccess);
  CHECK_EQ(cudaMalloc(&db, sizeof b), cudaSuccess);
  CHECK_EQ(cudaMalloc(&dc, sizeof c), cudaSuccess);
  CHECK_EQ(cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice), cudaSuccess);
  CHECK_EQ(cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice), cudaSuccess);
  CHECK_EQ(cudaMemset(dc, 0, sizeof c), cudaSuccess);
  vadd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  CHECK_EQ(cudaDeviceSynchronize(), cudaSuccess);
  CHECK_EQ(cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < n; i++)
    if (c[i] != (float)(3 * i + 1)) test_fail("c[%d] = %g, expected %d", i, (double)c[i], 3 * i + 1);

  /* The initial value lives only in the device image, which the emu does not read; round-trip. */
  int values[4] = {10, 20, 30, 40}, back[4] = {0};
  CHECK_EQ(cudaMemcpyToSymbol(offsets, values, sizeof values), cudaSuccess);
  CHECK_EQ(cudaMemcpyFromSymbol(back, offsets, sizeof back), cudaSuccess);
  CHECK_EQ(back[0], 10);
  CHECK_EQ(back[3], 40);
  void *address;
  CHECK_EQ(cudaGetSymbolAddress(&address, offsets), cudaSuccess);
  CHECK_EQ(cudaMemcpy(back, (int *)address + 1, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  CHECK_EQ(back[0], 20);

  cudaDeviceProp prop;
  CHECK_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  printf("emu_nvcc: vector add of %d floats on \"%s\" passed\n", n, prop.name);
  CHECK_EQ(cudaFree(da), cudaSuccess);
  CHECK_EQ(cudaFree(db), cudaSuccess);
  CHECK_EQ(cudaFree(dc), cudaSuccess);
  return 0;
}
