// Description: cuBLAS SGEMM on device memory allocated through the runtime; prints a checksum of
// C that must match a run without cudaw, and checks a sample of entries against the host.
#include <cublas_v2.h>

#include "gpu_common.h"

int main()
{
  require_gpu();
  const int n = 512;
  size_t bytes = (size_t)n * n * sizeof(float);
  float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
  uint32_t seed = 12345;
  for (int i = 0; i < n * n; i++) {
    seed = seed * 1664525u + 1013904223u;
    a[i] = (float)(seed >> 8) / (float)(1 << 24) - 0.5f;
    seed = seed * 1664525u + 1013904223u;
    b[i] = (float)(seed >> 8) / (float)(1 << 24) - 0.5f;
  }
  float *da, *db, *dc;
  CUDA_CHECK(cudaMalloc(&da, bytes));
  CUDA_CHECK(cudaMalloc(&db, bytes));
  CUDA_CHECK(cudaMalloc(&dc, bytes));
  CUDA_CHECK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "FAIL: cublasCreate\n"); return 1; }
  // Pedantic math: no TF32, so the result is deterministic and close to the host's.
  cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
  const float one = 1.0f, zero = 0.0f;
  if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n) !=
      CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "FAIL: cublasSgemm\n");
    return 1;
  }
  CUDA_CHECK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
  for (int s = 0; s < 64; s++) {
    int i = (s * 97) % n, j = (s * 31) % n;
    double want = 0;
    for (int k = 0; k < n; k++) want += (double)a[k * n + i] * b[j * n + k];
    double got = c[j * n + i];
    if (got - want > 1e-3 || want - got > 1e-3) {
      fprintf(stderr, "FAIL: C[%d,%d] = %g, expected %g\n", i, j, got, want);
      return 1;
    }
  }
  cublasDestroy(h);
  printf("cublas_sgemm n=%d checksum=%016llx\n", n, (unsigned long long)checksum(c, bytes));
  return 0;
}
