// A cuBLAS program to pause and resume under cudaw: a loop of SGEMMs, C <- A*B/n + C/2 then
// swap(B, C), so every iteration depends on the previous one. Deterministic: pedantic math (no
// TF32, no reduced precision) and one stream, so the checksum is the same for every run with the
// same arguments on the same GPU, paused or not. Built with the shared runtime.
//
// usage: gemm_loop [n=4096] [iterations=2000] [report every=100]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_runtime.h>

static void check(cudaError_t e, const char *what)
{
  if (e != cudaSuccess) {
    fprintf(stderr, "gemm_loop: %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
  }
}

static void check_blas(cublasStatus_t s, const char *what)
{
  if (s != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "gemm_loop: %s: cuBLAS status %d\n", what, (int)s);
    exit(1);
  }
}

int main(int argc, char **argv)
{
  int n = argc > 1 ? atoi(argv[1]) : 4096;
  long iterations = argc > 2 ? atol(argv[2]) : 2000;
  long every = argc > 3 ? atol(argv[3]) : 100;
  if (n < 1 || iterations < 0 || every <= 0) {
    fprintf(stderr, "usage: gemm_loop [n] [iterations] [report every]\n");
    return 2;
  }
  size_t count = (size_t)n * n, bytes = count * sizeof(float);
  float *host = (float *)malloc(bytes);
  float *a, *b, *c;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  check(cudaMalloc(&c, bytes), "cudaMalloc");
  uint32_t seed = 2024;
  float *init[3] = {a, b, c};
  for (int m = 0; m < 3; m++) {
    for (size_t i = 0; i < count; i++) {
      seed = seed * 1664525u + 1013904223u;
      host[i] = (float)(seed >> 8) / (float)(1 << 24) - 0.5f;
    }
    check(cudaMemcpy(init[m], host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  cublasHandle_t handle;
  check_blas(cublasCreate(&handle), "cublasCreate");
  check_blas(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  printf("gemm_loop: n=%d iterations=%ld allocated %zu bytes\n", n, iterations, 3 * bytes);
  fflush(stdout);
  const float alpha = 1.0f / (float)n, beta = 0.5f;
  for (long it = 1; it <= iterations; it++) {
    check_blas(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, n, b, n, &beta,
                           c, n), "cublasSgemm");
    float *t = b;
    b = c;
    c = t;
    if (it % every == 0 || it == iterations) {
      float probe;
      check(cudaMemcpy(&probe, b + count / 3, sizeof probe, cudaMemcpyDeviceToHost), "probe");
      printf("gemm_loop: iteration %ld/%ld probe %.6e\n", it, iterations, probe);
      fflush(stdout);
    }
  }
  check(cudaDeviceSynchronize(), "cublasSgemm");
  check(cudaMemcpy(host, b, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  uint64_t h = 1469598103934665603ull;
  const unsigned char *p = (const unsigned char *)host;
  for (size_t i = 0; i < bytes; i++) h = (h ^ p[i]) * 1099511628211ull;
  printf("gemm_loop: done n=%d iterations=%ld checksum=%016llx\n", n, iterations,
         (unsigned long long)h);
  cublasDestroy(handle);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  free(host);
  return 0;
}
