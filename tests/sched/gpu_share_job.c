/* Description: a job for the GPU-share test on the emulated device: launches a kernel of fixed
 * cost (its host implementation sleeps MICROSECONDS) in a loop for SECONDS, and prints one line
 * per 100 ms window, "window <CLOCK_MONOTONIC seconds at its end> <launches>", then
 * "total <launches> <seconds> <launches per second>".
 *   usage: sched_gpu_share_job SECONDS MICROSECONDS
 * Exit 0, or 1 when a launch or the registration failed. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cudaw_emu.h"
#include "test.h"

/* nvcc's registration ABI (crt/host_runtime.h), exported by cudaw as by the real runtime. */
extern void **__cudaRegisterFatBinary(void *fatbin_wrapper);
extern void __cudaRegisterFatBinaryEnd(void **handle);
extern void __cudaRegisterFunction(void **handle, const char *host_fun, char *device_fun,
                                   const char *device_name, int thread_limit, uint3 *tid,
                                   uint3 *bid, dim3 *block_dim, dim3 *grid_dim, int *warp_size);

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The kernel's work: it occupies its "device" for the microseconds it is given. */
static void spin_kernel(const struct cudaw_emu_launch *launch, void **args)
{
  (void)launch;
  long us = CUDAW_EMU_ARG(args, 0, long);
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static void spin_stub(void) {}

static void register_kernel(void)
{
  const char *path = getenv("CUDAW_REAL_CUDART");
  CHECK(path && *path, "CUDAW_REAL_CUDART must name the emulated runtime");
  void *emu = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!emu) emu = dlopen(path, RTLD_NOW);
  CHECK(emu, "cannot load %s", path);
  int (*register_impl)(const char *, cudaw_emu_kernel_fn) =
      (int (*)(const char *, cudaw_emu_kernel_fn))dlsym(emu, "cudaw_emu_register_kernel");
  CHECK(register_impl && register_impl("_Z4spinl", spin_kernel) == 0);
  static struct { int magic, version; const void *data, *filename; } wrapper = {0x466243B1, 1, 0, 0};
  void **handle = __cudaRegisterFatBinary(&wrapper);
  __cudaRegisterFunction(handle, (const char *)spin_stub, (char *)"_Z4spinl", "_Z4spinl", -1, 0,
                         0, 0, 0, 0);
  __cudaRegisterFatBinaryEnd(handle);
}

int main(int argc, char **argv)
{
  CHECK(argc == 3, "usage: %s SECONDS MICROSECONDS", argv[0]);
  double seconds = strtod(argv[1], NULL);
  long us = strtol(argv[2], NULL, 0);
  register_kernel();
  void *scratch;
  CHECK(cudaMalloc(&scratch, 1 << 20) == cudaSuccess); /* a context, as a real job has */
  void *args[] = {&us};
  double start = now(), window_end = start + 0.1, t = start;
  long launches = 0, in_window = 0;
  while ((t = now()) < start + seconds) {
    cudaError_t e = cudaLaunchKernel((const void *)spin_stub, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, 0);
    CHECK(e == cudaSuccess, "launch %ld: %s", launches, cudaGetErrorName(e));
    launches++;
    in_window++;
    if ((t = now()) >= window_end) {
      printf("window %.6f %ld\n", t, in_window);
      fflush(stdout);
      in_window = 0;
      window_end += 0.1;
      while (window_end <= t) window_end += 0.1;
    }
  }
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(cudaFree(scratch) == cudaSuccess);
  double elapsed = now() - start;
  printf("total %ld %.3f %.1f\n", launches, elapsed, launches / elapsed);
  return 0;
}
