// Benchmark: cost of a forwarded runtime call (cudaGetDevice) and of an empty kernel launch with
// four pointer arguments, and with one 64-byte struct holding pointers and scalars (an aggregate:
// under CUDAW_VMEM=translate every aligned word is scanned), per call, median of several batches;
// the same launches through the driver's cuLaunchKernel (obtained from cudaGetDriverEntryPoint,
// as PyTorch and NCCL get driver functions: under cudaw, its driver layer's wrapper). Driven by
// compare_runs, which runs it natively and under cudaw and prints the ratios.
#include <algorithm>
#include <chrono>
#include <vector>

#include <cuda.h>

#include "gpu_common.h"
#include "per_call.h"

__global__ void empty4(float *a, float *b, float *c, float *d) {}

struct Args64 { float *a, *b, *c, *d; int n, m; long long k; double x, y; }; // 64 bytes
static_assert(sizeof(Args64) == 64, "64-byte struct");
__global__ void empty_struct64(Args64 s) {}


int main()
{
  require_gpu();
  float *p[4];
  for (auto &x : p) CUDA_CHECK(cudaMalloc(&x, 256));
  int dev = -1;
  double get_device = per_call_ns(21, 200000, [&](int n) {
    for (int i = 0; i < n; i++) cudaGetDevice(&dev);
  });
  empty4<<<1, 32>>>(p[0], p[1], p[2], p[3]);
  CUDA_CHECK(cudaDeviceSynchronize());
  // Throughput: launches queued back to back, synchronised at the end of each batch.
  double launch = per_call_ns(21, 20000, [&](int n) {
    for (int i = 0; i < n; i++) empty4<<<1, 32>>>(p[0], p[1], p[2], p[3]);
    cudaDeviceSynchronize();
  });
  // Latency: launch and wait, one at a time.
  double launch_sync = per_call_ns(21, 2000, [&](int n) {
    for (int i = 0; i < n; i++) {
      empty4<<<1, 32>>>(p[0], p[1], p[2], p[3]);
      cudaDeviceSynchronize();
    }
  });
  Args64 s = {p[0], p[1], p[2], p[3], 1, 2, 3, 4.0, 5.0};
  empty_struct64<<<1, 32>>>(s);
  CUDA_CHECK(cudaDeviceSynchronize());
  double launch_struct = per_call_ns(21, 20000, [&](int n) {
    for (int i = 0; i < n; i++) empty_struct64<<<1, 32>>>(s);
    cudaDeviceSynchronize();
  });
  CUDA_CHECK(cudaGetLastError());

  // The driver's cuLaunchKernel on the same kernels.
  void *fn = driver_entry("cuLaunchKernel", 12000);
  auto launch_kernel = reinterpret_cast<CUresult (*)(CUfunction, unsigned, unsigned, unsigned,
                                                     unsigned, unsigned, unsigned, unsigned,
                                                     CUstream, void **, void **)>(fn);
  cudaFunction_t f4, f64;
  CUDA_CHECK(cudaGetFuncBySymbol(&f4, (const void *)empty4));
  CUDA_CHECK(cudaGetFuncBySymbol(&f64, (const void *)empty_struct64));
  void *args4[] = {&p[0], &p[1], &p[2], &p[3]};
  void *args64[] = {&s};
  auto driver_launches = [&](cudaFunction_t f, void **args) {
    return per_call_ns(21, 20000, [&](int n) {
      for (int i = 0; i < n; i++)
        if (launch_kernel((CUfunction)f, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr))
          abort();
      cudaDeviceSynchronize();
    });
  };
  driver_launches(f4, args4); // warm-up
  double driver4 = driver_launches(f4, args4);
  double driver64 = driver_launches(f64, args64);
  CUDA_CHECK(cudaGetLastError());
  printf("metric cudaGetDevice %.2f ns\n", get_device);
  printf("metric launch_empty_4ptr %.2f ns\n", launch);
  printf("metric launch_sync_empty_4ptr %.2f ns\n", launch_sync);
  printf("metric launch_empty_struct64 %.2f ns\n", launch_struct);
  printf("metric cuLaunchKernel_empty_4ptr %.2f ns\n", driver4);
  printf("metric cuLaunchKernel_empty_struct64 %.2f ns\n", driver64);
  return 0;
}
