// Build: -lcublas
// Description: cuBLAS (its own kernels, not launched through libcudart): SGEMM on cudaMalloc'd
// matrices against a host reference.
#include <cublas_v2.h>
#include "corpus.h"
int main()
{
  const int n = 256;
  float *A = (float *)malloc(n * n * 4), *B = (float *)malloc(n * n * 4), *C = (float *)malloc(n * n * 4);
  for (int i = 0; i < n * n; i++) A[i] = (float)((i * 7) % 11) - 5, B[i] = (float)((i * 3) % 7) - 3;
  float *dA, *dB, *dC;
  CK(cudaMalloc(&dA, n * n * 4));
  CK(cudaMalloc(&dB, n * n * 4));
  CK(cudaMalloc(&dC, n * n * 4));
  CK(cudaMemcpy(dA, A, n * n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dB, B, n * n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(dC, 0, n * n * 4));
  cublasHandle_t h;
  CKL(cublasCreate(&h));
  float one = 1, zero = 0;
  CKL(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, dA, n, dB, n, &zero, dC, n));
  corpus_sync();
  CK(cudaMemcpy(C, dC, n * n * 4, cudaMemcpyDeviceToHost));
  for (int j = 0; j < n; j++)
    for (int i = 0; i < n; i++) {
      double s = 0;
      for (int k = 0; k < n; k++) s += (double)A[k * n + i] * B[j * n + k];
      if (!corpus_close(C[j * n + i], s, 1e-4)) WRONG("C(%d,%d) = %g, want %g", i, j, C[j * n + i], s);
    }
  CKL(cublasDestroy(h));
  return corpus_pass("cublas");
}
