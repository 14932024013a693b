/* Description: one process on two GPUs, natively and under cudaw (both vmem policies): memory on
 * each device, a copy of device 0's memory while device 1 is current (no peer access), peer
 * copies (cudaMemcpyPeer, cudaMemcpyPeerAsync), and with peer access enabled a kernel on device 1
 * reading device 0's memory, also memory allocated after the enable (under remap cudaw must grant
 * device 1 access to device 0's VMM mappings itself). With CUDAW_CTL set (under cudaw) the program
 * is checkpointed and resumed by cudaw-ctl from a child process, and afterwards every byte is
 * checked on its own device and the peer kernel runs again. Exits 77 ("skipped: fewer than 2
 * GPUs") where fewer than two GPUs are present. Not yet run on a 2-GPU machine. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_common.h"

#define MIB ((size_t)1 << 20)
#define BYTES (64 * MIB)

__global__ void fill(unsigned char *p, size_t n, unsigned seed)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = (unsigned char)(i * 131 + seed * 7 + (i >> 12));
}

/* out = sum of p[i] * (i % 7 + 1), read wherever p lives (a peer's memory included). */
__global__ void weighted_sum(const unsigned char *p, size_t n, unsigned long long *out)
{
  unsigned long long sum = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    sum += (unsigned long long)p[i] * (i % 7 + 1);
  atomicAdd(out, sum);
}

static unsigned long long host_sum(unsigned seed, size_t n)
{
  unsigned long long sum = 0;
  for (size_t i = 0; i < n; i++) sum += (unsigned long long)(unsigned char)(i * 131 + seed * 7 + (i >> 12)) * (i % 7 + 1);
  return sum;
}

static int failures;

static void expect(bool ok, const char *what)
{
  printf("%s: %s\n", what, ok ? "ok" : "FAILED");
  if (!ok) failures++;
}

/* The kernel on `device` over n bytes at p; its sum, or ~0 when the launch or kernel failed. */
static unsigned long long sum_on(int device, const unsigned char *p, size_t n)
{
  CUDA_CHECK(cudaSetDevice(device));
  unsigned long long *out, result = ~0ull;
  CUDA_CHECK(cudaMalloc(&out, sizeof *out));
  CUDA_CHECK(cudaMemset(out, 0, sizeof *out));
  weighted_sum<<<256, 256>>>(p, n, out);
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) CUDA_CHECK(cudaMemcpy(&result, out, sizeof result, cudaMemcpyDeviceToHost));
  else fprintf(stderr, "kernel on device %d over %p: %s\n", device, (const void *)p, cudaGetErrorName(e));
  cudaFree(out);
  return result;
}

static bool bytes_ok(int device, const unsigned char *p, size_t n, unsigned seed)
{
  CUDA_CHECK(cudaSetDevice(device));
  unsigned char *host = (unsigned char *)malloc(n);
  CUDA_CHECK(cudaMemcpy(host, p, n, cudaMemcpyDeviceToHost));
  bool ok = true;
  for (size_t i = 0; i < n && ok; i++) ok = host[i] == (unsigned char)(i * 131 + seed * 7 + (i >> 12));
  free(host);
  return ok;
}

static int run_ctl(const char *ctl, const char *command)
{
  char pid[32];
  snprintf(pid, sizeof pid, "%ld", (long)getpid());
  pid_t child = fork();
  if (child == 0) {
    unsetenv("LD_PRELOAD"); /* cudaw-ctl needs no CUDA */
    execl(ctl, ctl, command, pid, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(void)
{
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
    printf("skipped: fewer than 2 GPUs (%d)\n", count);
    return 77;
  }
  int peer = 0;
  CUDA_CHECK(cudaDeviceCanAccessPeer(&peer, 1, 0));
  unsigned char *a0, *b1, *scratch1, *scratch0;
  CUDA_CHECK(cudaSetDevice(0));
  CUDA_CHECK(cudaMalloc(&a0, BYTES));
  CUDA_CHECK(cudaMalloc(&scratch0, BYTES));
  fill<<<256, 256>>>(a0, BYTES, 1);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaSetDevice(1));
  CUDA_CHECK(cudaMalloc(&b1, BYTES));
  CUDA_CHECK(cudaMalloc(&scratch1, BYTES));
  fill<<<256, 256>>>(b1, BYTES, 2);
  CUDA_CHECK(cudaDeviceSynchronize());
  cudaPointerAttributes attributes;
  CUDA_CHECK(cudaPointerGetAttributes(&attributes, a0));
  expect(attributes.device == 0, "device 0's allocation is on device 0");
  CUDA_CHECK(cudaPointerGetAttributes(&attributes, b1));
  expect(attributes.device == 1, "device 1's allocation is on device 1");

  /* Device 1 current, no peer access: a copy of device 0's memory to the host. With cudaMalloc
   * memory the driver manages; whether it does with cudaw's VMM memory is what this checks. */
  {
    CUDA_CHECK(cudaSetDevice(1));
    unsigned char *host = (unsigned char *)malloc(MIB);
    cudaError_t e = cudaMemcpy(host, a0, MIB, cudaMemcpyDeviceToHost);
    bool ok = e == cudaSuccess;
    for (size_t i = 0; ok && i < MIB; i++) ok = host[i] == (unsigned char)(i * 131 + 7 + (i >> 12));
    if (e != cudaSuccess) fprintf(stderr, "copy: %s\n", cudaGetErrorName(e));
    cudaGetLastError();
    free(host);
    expect(ok, "copy of device 0's memory with device 1 current, no peer access");
  }
  CUDA_CHECK(cudaMemcpyPeer(scratch1, 1, a0, 0, BYTES));
  expect(sum_on(1, scratch1, BYTES) == host_sum(1, BYTES), "cudaMemcpyPeer 0 -> 1 without peer access");

  if (!peer) {
    printf("devices 0 and 1 cannot access each other: peer access not tested\n");
  } else {
    CUDA_CHECK(cudaSetDevice(1));
    CUDA_CHECK(cudaDeviceEnablePeerAccess(0, 0));
    expect(cudaDeviceEnablePeerAccess(0, 0) == cudaErrorPeerAccessAlreadyEnabled,
           "enabling twice: cudaErrorPeerAccessAlreadyEnabled");
    cudaGetLastError();
    expect(sum_on(1, a0, BYTES) == host_sum(1, BYTES), "kernel on device 1 reads device 0's memory");
    unsigned char *later;
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaMalloc(&later, 8 * MIB));
    fill<<<256, 256>>>(later, 8 * MIB, 3);
    CUDA_CHECK(cudaDeviceSynchronize());
    expect(sum_on(1, later, 8 * MIB) == host_sum(3, 8 * MIB),
           "kernel on device 1 reads device 0's memory allocated after the enable");
    CUDA_CHECK(cudaFree(later));
    cudaStream_t stream;
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaStreamCreate(&stream));
    CUDA_CHECK(cudaMemcpyPeerAsync(scratch0, 0, b1, 1, BYTES, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaStreamDestroy(stream));
    expect(sum_on(0, scratch0, BYTES) == host_sum(2, BYTES), "cudaMemcpyPeerAsync 1 -> 0 with peer access");
  }

  const char *ctl = getenv("CUDAW_CTL");
  if (ctl && *ctl) {
    expect(run_ctl(ctl, "checkpoint") == 0, "cudaw-ctl checkpoint");
    run_ctl(ctl, "status"); /* prints the per-device image bytes */
    expect(run_ctl(ctl, "resume") == 0, "cudaw-ctl resume");
    expect(bytes_ok(0, a0, BYTES, 1), "device 0's bytes after the resume");
    expect(bytes_ok(1, b1, BYTES, 2), "device 1's bytes after the resume");
    CUDA_CHECK(cudaPointerGetAttributes(&attributes, a0));
    expect(attributes.device == 0, "device 0's allocation is on device 0 after the resume");
    CUDA_CHECK(cudaPointerGetAttributes(&attributes, b1));
    expect(attributes.device == 1, "device 1's allocation is on device 1 after the resume");
    if (peer)
      expect(sum_on(1, a0, BYTES) == host_sum(1, BYTES),
             "kernel on device 1 reads device 0's memory after the resume");
  }
  printf("%s\n", failures ? "FAILED" : "passed");
  return failures ? 1 : 0;
}
