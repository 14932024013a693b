/* Description: the job of the host-memory pool benchmark (pool_bench.sh). With --ceiling GIB it
 * measures, natively, the pinned copy ceilings over a device buffer of GIB (1 GiB pinned buffer,
 * best of two passes) and prints "CEILING <D2H GB/s> <H2D GB/s>". Otherwise it allocates GIB of
 * device memory in one block, fills it with a pattern, prints READY, keeps calling the GPU (a
 * tiny kernel every 50 ms, so that cudawd sees it active) until the file STOP exists, then checks
 * every word on the device and prints VERIFIED (exit 0) or MISMATCH <count> (exit 1).
 *   usage: sched_pool_bench_job --ceiling GIB | GIB STOP
 * Exit 0, 1 on a CUDA error or a mismatch, 77 without a GPU. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

__device__ uint64_t pattern(size_t i) { return (uint64_t)i * 0x9E3779B97F4A7C15ull ^ 0x5bd1e995ull; }

__global__ void fill(uint64_t *p, size_t n)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = pattern(i);
}

__global__ void check(const uint64_t *p, size_t n, unsigned long long *bad)
{
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    mine += p[i] != pattern(i);
  if (mine) atomicAdd(bad, mine);
}

__global__ void tick(int *x) { atomicAdd(x, 1); }

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* GB/s of one pass over the device buffer through the pinned one, best of two. */
static double pass(bool d2h, char *device, size_t total, void *pinned, size_t chunk, cudaStream_t s)
{
  double best = 0;
  for (int round = 0; round < 2; round++) {
    double t0 = now();
    for (size_t at = 0; at < total; at += chunk) {
      size_t n = total - at < chunk ? total - at : chunk;
      CHECK_CUDA(d2h ? cudaMemcpyAsync(pinned, device + at, n, cudaMemcpyDeviceToHost, s)
                     : cudaMemcpyAsync(device + at, pinned, n, cudaMemcpyHostToDevice, s));
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    double gbps = (double)total / (now() - t0) / 1e9;
    if (gbps > best) best = gbps;
  }
  return best;
}

int main(int argc, char **argv)
{
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("skipped: no GPU\n");
    return 77;
  }
  bool ceiling = argc == 3 && !strcmp(argv[1], "--ceiling");
  if (argc != 3) {
    fprintf(stderr, "usage: %s --ceiling GIB | GIB STOP\n", argv[0]);
    return 1;
  }
  size_t bytes = strtoull(ceiling ? argv[2] : argv[1], NULL, 10) << 30;
  char *device;
  CHECK_CUDA(cudaMalloc(&device, bytes));
  size_t words = bytes / sizeof(uint64_t);
  if (ceiling) {
    size_t chunk = (size_t)1 << 30;
    void *pinned;
    CHECK_CUDA(cudaHostAlloc(&pinned, chunk, cudaHostAllocDefault));
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    double d2h = pass(true, device, bytes, pinned, chunk, s);
    double h2d = pass(false, device, bytes, pinned, chunk, s);
    printf("CEILING %.2f %.2f\n", d2h, h2d);
    return 0;
  }
  fill<<<1024, 256>>>((uint64_t *)device, words);
  CHECK_CUDA(cudaDeviceSynchronize());
  int *counter;
  unsigned long long *bad;
  CHECK_CUDA(cudaMalloc(&counter, sizeof *counter));
  CHECK_CUDA(cudaMalloc(&bad, sizeof *bad));
  CHECK_CUDA(cudaMemset(bad, 0, sizeof *bad));
  printf("READY\n");
  fflush(stdout);
  while (access(argv[2], F_OK) != 0) {
    tick<<<1, 1>>>(counter);
    CHECK_CUDA(cudaDeviceSynchronize());
    usleep(50000);
  }
  check<<<1024, 256>>>((const uint64_t *)device, words, bad);
  unsigned long long mismatches = 0;
  CHECK_CUDA(cudaMemcpy(&mismatches, bad, sizeof mismatches, cudaMemcpyDeviceToHost));
  if (mismatches) {
    printf("MISMATCH %llu\n", mismatches);
    return 1;
  }
  printf("VERIFIED\n");
  return 0;
}
