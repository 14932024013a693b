/* Description: a compute-bound GPU job for the GPU-share benchmark (gpu_share_bench.sh): launches
 * a kernel of ITERS dependent FMAs per thread over the whole GPU in a loop for SECONDS, one
 * stream, synchronising every 16 launches (as a training step would), and prints
 * "RATE <kernels per second>" over the loop after its first 0.5 s. With --calibrate MS it prints
 * "ITERS <n>": the iterations that make one kernel take about MS milliseconds alone.
 *   usage: sched_gpu_share_loop SECONDS ITERS | --calibrate MS
 * Exit 0, 1 on a CUDA error, 77 without a GPU. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK_CUDA(call)                                                            \
  do {                                                                              \
    cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) {                                                        \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

__global__ void burn(float *out, int iters)
{
  float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 0.9999f;
  for (int i = 0; i < iters; i++) {
    a = fmaf(a, b, c);
    b = fmaf(b, c, a * 1e-7f);
    c = fmaf(c, a, -b * 1e-7f);
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = a + b + c;
}

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("skipped: no GPU\n");
    return 77;
  }
  if (argc != 3) {
    fprintf(stderr, "usage: %s SECONDS ITERS | --calibrate MS\n", argv[0]);
    return 2;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int blocks = prop.multiProcessorCount * 8, threads = 256;
  float *out;
  CHECK_CUDA(cudaMalloc(&out, sizeof(float) * blocks * threads));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (strcmp(argv[1], "--calibrate") == 0) {
    double want_ms = atof(argv[2]);
    int iters = 1024;
    cudaEvent_t start, end;
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&end));
    for (int round = 0; round < 6; round++) {
      burn<<<blocks, threads, 0, stream>>>(out, iters); /* warm */
      CHECK_CUDA(cudaEventRecord(start, stream));
      for (int k = 0; k < 10; k++) burn<<<blocks, threads, 0, stream>>>(out, iters);
      CHECK_CUDA(cudaEventRecord(end, stream));
      CHECK_CUDA(cudaEventSynchronize(end));
      float ms;
      CHECK_CUDA(cudaEventElapsedTime(&ms, start, end));
      ms /= 10;
      double scaled = iters * want_ms / (ms > 1e-3 ? ms : 1e-3);
      iters = scaled > 1 << 28 ? 1 << 28 : (int)scaled;
      if (iters < 1) iters = 1;
    }
    printf("ITERS %d\n", iters);
    return 0;
  }
  double seconds = atof(argv[1]);
  int iters = atoi(argv[2]);
  double start = now(), counted_from = 0;
  long launches = 0, counted = 0;
  while (now() - start < seconds) {
    for (int k = 0; k < 16; k++) burn<<<blocks, threads, 0, stream>>>(out, iters);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaStreamSynchronize(stream));
    launches += 16;
    double t = now();
    if (!counted_from && t - start >= 0.5) counted_from = t, counted = launches;
  }
  double end = now();
  printf("RATE %.3f\n", counted_from ? (launches - counted) / (end - counted_from) : 0.0);
  printf("launches %ld in %.3f s\n", launches, end - start);
  CHECK_CUDA(cudaFree(out));
  return 0;
}
