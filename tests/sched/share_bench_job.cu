/* Description: a job for the sharing benchmark (share_bench.sh): holds GIB of device memory in
 * one allocation and does a fixed amount of GPU work in PHASES phases, each followed by a host
 * phase of HOST_MS (CPU-bound, no CUDA call: data loading). A GPU phase is KERNELS launches of a
 * compute kernel (ITERS iterations per thread, calibrated to ~2 ms alone), synchronised every 16,
 * then one pass that adds 1 to a word in every 4 KiB of the memory: work, not wall time, so a
 * job that waits for its turn does the same work as one alone. At the end every word is checked
 * on the device (sampled words hold pattern + PHASES, the others their pattern).
 *   usage: sched_share_bench_job GIB PHASES KERNELS HOST_MS ITERS
 *          sched_share_bench_job --calibrate MS      prints "ITERS <n>"
 *          sched_share_bench_job --ceiling GIB       prints pinned "D2H <GB/s>", "H2D <GB/s>" and
 *                                                    "BOTH <GB/s>" (each way, both at once)
 *          sched_share_bench_job --touch GIB         writes GIB of host memory once (no GPU)
 * Prints "TIME <seconds> verified". Exit 0; 1 on a CUDA error or a wrong word; 77 without a GPU. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK_CUDA(call)                                                                     \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

#define STRIDE_WORDS 1024 /* one sampled word in every 4 KiB */

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "AT <wall clock> <what>": when each phase began and ended, to lay beside cudawd's log. */
static void mark(const char *what, long phase)
{
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  printf("AT %ld.%06ld %s %ld\n", (long)ts.tv_sec, ts.tv_nsec / 1000, what, phase);
  fflush(stdout);
}

__device__ static uint32_t pattern(uint64_t i) { return (uint32_t)(i * 2654435761u) ^ 0x5a5a1234u; }

__global__ void fill(uint32_t *m, uint64_t words)
{
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words;
       i += (uint64_t)gridDim.x * blockDim.x)
    m[i] = pattern(i);
}

__global__ void bump(uint32_t *m, uint64_t words)
{
  for (uint64_t i = (blockIdx.x * (uint64_t)blockDim.x + threadIdx.x) * STRIDE_WORDS; i < words;
       i += (uint64_t)gridDim.x * blockDim.x * STRIDE_WORDS)
    m[i] += 1;
}

__global__ void verify(const uint32_t *m, uint64_t words, uint32_t rounds,
                       unsigned long long *bad)
{
  unsigned long long mine = 0;
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words;
       i += (uint64_t)gridDim.x * blockDim.x)
    mine += m[i] != pattern(i) + (i % STRIDE_WORDS == 0 ? rounds : 0);
  if (mine) atomicAdd(bad, mine);
}

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

static int calibrate(double want_ms, float *out, int blocks, int threads)
{
  int iters = 1024;
  cudaEvent_t start, end;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&end));
  for (int round = 0; round < 6; round++) {
    burn<<<blocks, threads>>>(out, iters);
    CHECK_CUDA(cudaEventRecord(start));
    for (int k = 0; k < 10; k++) burn<<<blocks, threads>>>(out, iters);
    CHECK_CUDA(cudaEventRecord(end));
    CHECK_CUDA(cudaEventSynchronize(end));
    float ms;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, end));
    double scaled = iters * want_ms / (ms / 10 > 1e-3 ? ms / 10 : 1e-3);
    iters = scaled > 1 << 28 ? 1 << 28 : scaled < 1 ? 1 : (int)scaled;
  }
  return iters;
}

/* Pinned copy rates of GIB (4 copies each way, the best). */
static void ceiling(double gib)
{
  size_t bytes = (size_t)(gib * (1 << 30));
  void *dev, *host;
  CHECK_CUDA(cudaMalloc(&dev, bytes));
  CHECK_CUDA(cudaMallocHost(&host, bytes));
  memset(host, 1, bytes);
  double best[2] = {0, 0};
  for (int k = 0; k < 8; k++) {
    int d2h = k % 2 == 0;
    double t = now();
    CHECK_CUDA(cudaMemcpy(d2h ? host : dev, d2h ? dev : host, bytes,
                          d2h ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice));
    double rate = bytes / (now() - t) / 1e9;
    if (rate > best[!d2h]) best[!d2h] = rate;
  }
  printf("D2H %.2f\nH2D %.2f\n", best[0], best[1]);
  /* Both ways at once (an exchange: one program's memory out while another's comes in), each
   * way its own buffers and stream: the link is full duplex, the host's memory and the copy
   * engines are shared. */
  void *dev2, *host2;
  CHECK_CUDA(cudaMalloc(&dev2, bytes));
  CHECK_CUDA(cudaMallocHost(&host2, bytes));
  memset(host2, 2, bytes);
  cudaStream_t out, in;
  CHECK_CUDA(cudaStreamCreateWithFlags(&out, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&in, cudaStreamNonBlocking));
  double both = 0;
  for (int k = 0; k < 4; k++) {
    double t = now();
    CHECK_CUDA(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, out));
    CHECK_CUDA(cudaMemcpyAsync(dev2, host2, bytes, cudaMemcpyHostToDevice, in));
    CHECK_CUDA(cudaStreamSynchronize(out));
    CHECK_CUDA(cudaStreamSynchronize(in));
    double rate = bytes / (now() - t) / 1e9;
    if (rate > both) both = rate;
  }
  printf("BOTH %.2f\n", both);
  CHECK_CUDA(cudaStreamDestroy(out));
  CHECK_CUDA(cudaStreamDestroy(in));
  CHECK_CUDA(cudaFreeHost(host2));
  CHECK_CUDA(cudaFree(dev2));
  CHECK_CUDA(cudaFreeHost(host));
  CHECK_CUDA(cudaFree(dev));
}

/* Write GIB of host memory once, in 8 processes, and give it back: on a VM whose memory was never
 * touched, the hypervisor backs each page on its first touch, which slowed cudawd's pool and the
 * first swap-outs 10x (share_bench on the H200, session 24); a machine in use has paid that. */
static int touch(double gib)
{
  enum { PROCS = 8 };
  size_t share = (size_t)(gib * (1 << 30) / PROCS);
  double t = now();
  for (int i = 0; i < PROCS; i++) {
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      void *p = mmap(NULL, share, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) _exit(1);
      madvise(p, share, MADV_HUGEPAGE);
      memset(p, 1, share);
      _exit(0);
    }
  }
  int failed = 0, status;
  for (int i = 0; i < PROCS; i++)
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  printf("TOUCHED %.1f GiB in %.2f s%s\n", gib, now() - t, failed ? " (a process failed)" : "");
  return failed;
}

int main(int argc, char **argv)
{
  if (argc == 3 && strcmp(argv[1], "--touch") == 0) return touch(atof(argv[2]));
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("skipped: no GPU\n");
    return 77;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int blocks = prop.multiProcessorCount * 8, threads = 256;
  if (argc == 3 && strcmp(argv[1], "--ceiling") == 0) {
    ceiling(atof(argv[2]));
    return 0;
  }
  float *out;
  CHECK_CUDA(cudaMalloc(&out, sizeof(float) * blocks * threads));
  if (argc == 3 && strcmp(argv[1], "--calibrate") == 0) {
    printf("ITERS %d\n", calibrate(atof(argv[2]), out, blocks, threads));
    return 0;
  }
  if (argc != 6) {
    fprintf(stderr, "usage: %s GIB PHASES KERNELS HOST_MS ITERS | --calibrate MS | --ceiling GIB | "
            "--touch GIB\n",
            argv[0]);
    return 2;
  }
  double start = now();
  uint64_t words = (uint64_t)(atof(argv[1]) * (1 << 30)) / 4;
  long phases = atol(argv[2]), kernels = atol(argv[3]);
  double host_s = atof(argv[4]) * 1e-3;
  int iters = atoi(argv[5]);
  uint32_t *m;
  unsigned long long *bad;
  CHECK_CUDA(cudaMalloc(&m, words * 4));
  CHECK_CUDA(cudaMalloc(&bad, sizeof *bad));
  fill<<<blocks, threads>>>(m, words);
  CHECK_CUDA(cudaDeviceSynchronize());
  for (long phase = 0; phase < phases; phase++) {
    mark("gpu", phase);
    for (long k = 0; k < kernels; k++) {
      burn<<<blocks, threads>>>(out, iters);
      if (k % 16 == 15) CHECK_CUDA(cudaDeviceSynchronize());
    }
    bump<<<blocks, threads>>>(m, words);
    CHECK_CUDA(cudaDeviceSynchronize());
    mark("host", phase);
    double until = now() + host_s;
    volatile unsigned long spin = 0;
    while (now() < until) spin++;
  }
  mark("end", phases);
  CHECK_CUDA(cudaMemset(bad, 0, sizeof *bad));
  verify<<<blocks, threads>>>(m, words, (uint32_t)phases, bad);
  unsigned long long wrong = 0;
  CHECK_CUDA(cudaMemcpy(&wrong, bad, sizeof wrong, cudaMemcpyDeviceToHost));
  if (wrong) {
    fprintf(stderr, "%llu of %llu words wrong\n", wrong, (unsigned long long)words);
    return 1;
  }
  CHECK_CUDA(cudaFree(m));
  mark("verified", phases); /* what follows is the process's exit */
  printf("TIME %.3f verified\n", now() - start);
  return 0;
}
