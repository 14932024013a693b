/* Shared by the GPU test programs: skip without a GPU, fail loudly on any CUDA error, and a
 * checksum of result bytes that runs with and without cudaw must agree on. */
#ifndef CUDAW_GPU_COMMON_H
#define CUDAW_GPU_COMMON_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess) {                                                                \
      fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,                    \
              cudaGetErrorString(e_));                                                      \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

static inline void require_gpu(void)
{
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    printf("skipped: no GPU (%s)\n", e == cudaSuccess ? "no device" : cudaGetErrorName(e));
    exit(77);
  }
}

/* A driver function as PyTorch and NCCL get one (under cudaw: its driver layer's wrapper), at
 * the given API version; exits 1 when the driver has none. */
static inline void *driver_entry(const char *name, int version)
{
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !fn) {
    fprintf(stderr, "FAIL: the driver has no %s\n", name);
    exit(1);
  }
  return fn;
}

/* FNV-1a over bytes: results must be bit-identical, so any hash of the bytes will do. */
static inline uint64_t checksum(const void *data, size_t n)
{
  const unsigned char *p = (const unsigned char *)data;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

#endif
