// Benchmark: cudaw's own cost per call, without a GPU. The calls bench_launch and bench_alloc time
// on the device (cudaGetDevice, a 4-byte pinned host-to-device cudaMemcpy, cudaMallocAsync +
// cudaFreeAsync of 4 KiB, cudaMalloc + cudaFree of 2 MiB, empty launches with four pointers and
// with a 64-byte struct through <<<...>>>, cudaLaunchKernel and the driver's cuLaunchKernel) run
// against the emulated device, whose calls are cheap, so that the difference between a run on the
// emu alone and one through cudaw + emu is what cudaw adds. Driven by compare_runs (the `bench_overhead_run` target):
//   compare_runs 9 build/lib --native-env LD_PRELOAD=<emu> --env CUDAW_REAL_CUDART=<emu>
//                --env CUDAW_REAL_CUDA=<emu> --env CUDAW_VMEM=translate -- bench_overhead
// Prints `metric <name> <ns> ns`, the median over batches; exits 77 if the emu is not loaded.
#include <string.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include <cuda.h>

#include "cudaw_emu.h"
#include "gpu_common.h"
#include "per_call.h"

__global__ void empty4(float *a, float *b, float *c, float *d) {}

struct Args64 { float *a, *b, *c, *d; int n, m; long long k; double x, y; }; // 64 bytes
static_assert(sizeof(Args64) == 64, "64-byte struct");
__global__ void empty_struct64(Args64 s) {}

// The emu runs these on the host: nothing to do, like the device kernels.
CUDAW_EMU_KERNEL(_Z6empty4PfS_S_S_) { (void)launch, (void)args; }
CUDAW_EMU_KERNEL(_Z14empty_struct646Args64) { (void)launch, (void)args; }

// BENCH_ONLY=<substring>: only the metrics whose names contain it; BENCH_BATCHES=<n> batches of
// each (31): for profiling one call.
static bool wanted(const char *name)
{
  const char *only = getenv("BENCH_ONLY");
  return !only || strstr(name, only);
}


template <class F> static void metric(const char *name, int batches, int calls, F body)
{
  if (wanted(name)) printf("metric %s %.2f ns\n", name, per_call_ns(batches, calls, body));
}

typedef CUresult (*launch_kernel_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, unsigned, CUstream, void **, void **);

int main()
{
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || !strstr(prop.name, "emulated")) {
    printf("skipped: the runtime is not the emulated device (preload libcudaw-emu.so, or run "
           "cudaw with CUDAW_REAL_CUDART pointing at it)\n");
    return 77;
  }
  const int batches = getenv("BENCH_BATCHES") ? atoi(getenv("BENCH_BATCHES")) : 31, calls = 20000;
  float *p[4];
  for (auto &x : p) CUDA_CHECK(cudaMalloc(&x, 256));
  Args64 s = {p[0], p[1], p[2], p[3], 1, 2, 3, 4.0, 5.0};
  int dev = -1;
  metric("cudaGetDevice", batches, calls, [&](int n) {
    for (int i = 0; i < n; i++) cudaGetDevice(&dev);
  });

  int *pinned;
  CUDA_CHECK(cudaMallocHost(&pinned, 4));
  *pinned = 7;
  metric("memcpy_h2d_4B_pinned", batches, calls, [&](int n) {
    for (int i = 0; i < n; i++) CUDA_CHECK(cudaMemcpy(p[0], pinned, 4, cudaMemcpyHostToDevice));
  });

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  metric("mallocasync_freeasync_4KiB", batches, calls / 4, [&](int n) {
    void *q;
    for (int i = 0; i < n; i++) {
      CUDA_CHECK(cudaMallocAsync(&q, 4096, stream));
      CUDA_CHECK(cudaFreeAsync(q, stream));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
  });

  metric("malloc_free_2MiB", batches, calls / 20, [&](int n) {
    void *q;
    for (int i = 0; i < n; i++) {
      CUDA_CHECK(cudaMalloc(&q, 2 << 20));
      CUDA_CHECK(cudaFree(q));
    }
  });

  metric("launch_empty_4ptr", batches, calls, [&](int n) {
    for (int i = 0; i < n; i++) empty4<<<1, 32>>>(p[0], p[1], p[2], p[3]);
  });
  metric("launch_empty_struct64", batches, calls, [&](int n) {
    for (int i = 0; i < n; i++) empty_struct64<<<1, 32>>>(s);
  });
  void *args4[] = {&p[0], &p[1], &p[2], &p[3]};
  void *args64[] = {&s};
  metric("cudaLaunchKernel_empty_4ptr", batches, calls, [&](int n) {
    for (int i = 0; i < n; i++)
      CUDA_CHECK(cudaLaunchKernel((const void *)empty4, dim3(1), dim3(32), args4, 0, nullptr));
  });
  metric("cudaLaunchKernel_empty_struct64", batches, calls, [&](int n) {
    for (int i = 0; i < n; i++)
      CUDA_CHECK(cudaLaunchKernel((const void *)empty_struct64, dim3(1), dim3(32), args64, 0,
                                  nullptr));
  });
  CUDA_CHECK(cudaGetLastError());

  void *fn = driver_entry("cuLaunchKernel", 12000);
  launch_kernel_fn launch_kernel = (launch_kernel_fn)fn;
  cudaFunction_t f4, f64;
  CUDA_CHECK(cudaGetFuncBySymbol(&f4, (const void *)empty4));
  CUDA_CHECK(cudaGetFuncBySymbol(&f64, (const void *)empty_struct64));
  auto driver_launches = [&](const char *name, cudaFunction_t f, void **args) {
    metric(name, batches, calls, [&](int n) {
      for (int i = 0; i < n; i++)
        if (launch_kernel((CUfunction)f, 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr)) abort();
    });
  };
  driver_launches("cuLaunchKernel_empty_4ptr", f4, args4);
  driver_launches("cuLaunchKernel_empty_struct64", f64, args64);
  CUDA_CHECK(cudaStreamDestroy(stream));
  CUDA_CHECK(cudaFreeHost(pinned));
  for (auto x : p) CUDA_CHECK(cudaFree(x));
  return 0;
}
