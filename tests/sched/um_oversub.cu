// Description: what the nvshare approach to oversubscription costs: a kernel that passes over
// managed memory larger than the device (cudaMallocManaged, pages migrated on fault, evicting
// others) against the same kernel over device memory. Not a test: a figure for the sharing
// benchmark (tests/sched/gpu_share.sh), to put beside cudawd's swap rate.
//   usage: sched_um_oversub [FACTOR of the device memory, default 1.1] [PASSES, default 2]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

__global__ void touch(unsigned *data, size_t n, unsigned add)
{
  size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    data[i] += add;
}

static double seconds_of(unsigned *data, size_t n, unsigned add)
{
  auto t0 = std::chrono::steady_clock::now();
  touch<<<264 * 8, 512>>>(data, n, add);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "kernel: %s\n", cudaGetErrorString(e));
    std::exit(1);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char **argv)
{
  double factor = argc > 1 ? std::atof(argv[1]) : 1.1;
  int passes = argc > 2 ? std::atoi(argv[2]) : 2;
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    std::printf("skipped: no GPU\n");
    return 77;
  }
  // Device memory first: the same kernel over half the device.
  size_t resident_bytes = total / 2 / 4096 * 4096;
  unsigned *resident = nullptr;
  if (cudaMalloc(&resident, resident_bytes) != cudaSuccess) return 1;
  cudaMemset(resident, 0, resident_bytes);
  seconds_of(resident, resident_bytes / 4, 1);
  double t = seconds_of(resident, resident_bytes / 4, 1);
  std::printf("device memory: %.1f GiB in %.3f s: %.1f GB/s (read+write)\n",
              resident_bytes / 1073741824.0, t, 2 * resident_bytes / t / 1e9);
  cudaFree(resident);

  size_t bytes = (size_t)(total * factor) / 4096 * 4096;
  unsigned *managed = nullptr;
  if (cudaMallocManaged(&managed, bytes) != cudaSuccess) {
    std::printf("cudaMallocManaged of %.1f GiB failed\n", bytes / 1073741824.0);
    return 1;
  }
  std::printf("managed memory: %.1f GiB = %.2f x the device's %.1f GiB\n", bytes / 1073741824.0,
              factor, total / 1073741824.0);
  for (int pass = 0; pass < passes; pass++) {
    t = seconds_of(managed, bytes / 4, 1);
    std::printf("  pass %d over managed memory: %.2f s: %.2f GB/s of data touched%s\n", pass, t,
                bytes / t / 1e9, pass == 0 ? " (first touch: pages created on the device, evicted)"
                                           : " (faults and migration both ways)");
  }
  cudaFree(managed);
  return 0;
}
