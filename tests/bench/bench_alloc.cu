// Benchmark: allocation costs under cudaw's virtual memory. Per pair cudaMalloc+cudaFree at
// several sizes, cudaMallocAsync+cudaFreeAsync, a 4-byte host-to-device cudaMemcpy (latency of a
// checked, translated copy), and the device memory 10,000 small allocations (64 B..64 KiB) really
// take, measured with the DRIVER's cuMemGetInfo (cudaw virtualises cudaMemGetInfo). Prints
// `metric <name> <value> <unit>` lines (lower is better) for compare_runs; run it once per policy:
//   compare_runs 7 build/lib --env CUDAW_VMEM=remap -- build/tests/bench/bench_alloc
#include <algorithm>
#include <chrono>
#include <vector>

#include "gpu_common.h"
#include "per_call.h"

typedef int (*mem_get_info_fn)(size_t *free_bytes, size_t *total_bytes);


static size_t driver_used(mem_get_info_fn info)
{
  size_t free_bytes = 0, total = 0;
  CUDA_CHECK(cudaDeviceSynchronize());
  if (info(&free_bytes, &total) != 0) {
    fprintf(stderr, "FAIL: cuMemGetInfo\n");
    exit(1);
  }
  return total - free_bytes;
}

int main()
{
  require_gpu();
  CUDA_CHECK(cudaFree(0)); // context

  struct { const char *name; size_t size; int calls; } sizes[] = {
      {"alloc_free_256B", 256, 2000},      {"alloc_free_64KiB", 64 << 10, 2000},
      {"alloc_free_2MiB", 2 << 20, 500},   {"alloc_free_64MiB", 64 << 20, 100}};
  for (auto &s : sizes) {
    void *p;
    double ns = per_call_ns(9, s.calls, [&](int n) {
      for (int i = 0; i < n; i++) {
        CUDA_CHECK(cudaMalloc(&p, s.size));
        CUDA_CHECK(cudaFree(p));
      }
    });
    printf("metric %s %.1f ns\n", s.name, ns);
  }

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  double async_ns = per_call_ns(9, 5000, [&](int n) {
    void *p;
    for (int i = 0; i < n; i++) {
      CUDA_CHECK(cudaMallocAsync(&p, 4096, stream));
      CUDA_CHECK(cudaFreeAsync(p, stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
  });
  printf("metric mallocasync_freeasync_4KiB %.1f ns\n", async_ns);

  void *dev;
  int *pinned;
  CUDA_CHECK(cudaMalloc(&dev, 4));
  CUDA_CHECK(cudaMallocHost(&pinned, 4));
  *pinned = 7;
  double copy_ns = per_call_ns(21, 2000, [&](int n) {
    for (int i = 0; i < n; i++) CUDA_CHECK(cudaMemcpy(dev, pinned, 4, cudaMemcpyHostToDevice));
  });
  printf("metric memcpy_h2d_4B_pinned %.1f ns\n", copy_ns);
  int pageable = 3;
  copy_ns = per_call_ns(21, 2000, [&](int n) {
    for (int i = 0; i < n; i++) CUDA_CHECK(cudaMemcpy(dev, &pageable, 4, cudaMemcpyHostToDevice));
  });
  printf("metric memcpy_h2d_4B_pageable %.1f ns\n", copy_ns);

  // Device memory overhead of many small allocations, as the driver sees it.
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult status;
  CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuMemGetInfo", &fn, 13000, cudaEnableDefault, &status));
  if (!fn || status != cudaDriverEntryPointSuccess) {
    fprintf(stderr, "FAIL: no cuMemGetInfo from the driver\n");
    return 1;
  }
  mem_get_info_fn info = (mem_get_info_fn)fn;
  const int count = 10000;
  std::vector<void *> small(count);
  unsigned seed = 12345;
  size_t requested = 0;
  size_t before = driver_used(info);
  for (int i = 0; i < count; i++) {
    seed = seed * 1103515245u + 12345u;
    size_t size = (size_t)64 << ((seed >> 16) % 11); // 64 B .. 64 KiB, powers of two
    size += (seed >> 8) % size / 2;                  // and in between
    requested += size;
    CUDA_CHECK(cudaMalloc(&small[i], size));
  }
  size_t used = driver_used(info) - before;
  printf("metric small_alloc_device_bytes %zu bytes\n", used);
  printf("metric small_alloc_overhead_ratio %.3f x\n", (double)used / (double)requested);
  printf("# 10000 small allocations: %zu bytes requested, %zu bytes of device memory\n",
         requested, used);
  for (void *p : small) CUDA_CHECK(cudaFree(p));
  CUDA_CHECK(cudaFree(dev));
  CUDA_CHECK(cudaFreeHost(pinned));
  CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
