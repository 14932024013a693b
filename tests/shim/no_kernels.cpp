// Description: regression for the false "linked statically" warning (issue 10). A program with no
// kernels of its own, compiled and linked by nvcc with `-cudart shared`: nvcc's link step still
// leaves a small kernel-less .nv_fatbin and the program imports no __cudaRegisterFatBinary, yet
// it NEEDs libcudart.so and cudaw sees every call. cudaw must not claim the runtime is static.
// Built twice: shared (no warning, checked by the test's FAIL_REGULAR_EXPRESSION) and with the
// static runtime (the warning must come, though there are no kernels).
#include <cstdio>

#include <cuda_runtime.h>

int main()
{
  void *p = nullptr;
  cudaError_t e = cudaMalloc(&p, 4096);
  if (e != cudaSuccess) {
    std::printf("no_kernels: cudaMalloc failed: %s\n", cudaGetErrorName(e));
    return 1;
  }
  cudaFree(p);
  std::printf("no_kernels: ok\n");
  return 0;
}
