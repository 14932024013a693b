// Build: -lcublas
// Description: batched cuBLAS: cublasSgemmBatched over 32 small matrices whose pointers are kept
// in arrays in device memory (what batched GEMM reads; translating launch arguments cannot reach
// them), against a host reference; run twice, the second time after the pause point.
#include <cublas_v2.h>
#include "corpus.h"
int main()
{
  const int n = 24, batch = 32, elems = n * n;
  float *h_a = (float *)malloc(sizeof(float) * elems * batch), *h_b = (float *)malloc(sizeof(float) * elems * batch);
  float *h_c = (float *)malloc(sizeof(float) * elems * batch);
  for (int i = 0; i < elems * batch; i++) h_a[i] = (float)((i * 7) % 13) / 13.0f, h_b[i] = (float)((i * 5) % 11) / 11.0f;
  float *d_a, *d_b, *d_c;
  CK(cudaMalloc(&d_a, sizeof(float) * elems * batch));
  CK(cudaMalloc(&d_b, sizeof(float) * elems * batch));
  CK(cudaMalloc(&d_c, sizeof(float) * elems * batch));
  CK(cudaMemcpy(d_a, h_a, sizeof(float) * elems * batch, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_b, h_b, sizeof(float) * elems * batch, cudaMemcpyHostToDevice));
  const float *p_a[batch], *p_b[batch];
  float *p_c[batch];
  for (int i = 0; i < batch; i++) p_a[i] = d_a + i * elems, p_b[i] = d_b + i * elems, p_c[i] = d_c + i * elems;
  const float **d_pa, **d_pb;
  float **d_pc;
  CK(cudaMalloc(&d_pa, sizeof p_a));
  CK(cudaMalloc(&d_pb, sizeof p_b));
  CK(cudaMalloc(&d_pc, sizeof p_c));
  CK(cudaMemcpy(d_pa, p_a, sizeof p_a, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_pb, p_b, sizeof p_b, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_pc, p_c, sizeof p_c, cudaMemcpyHostToDevice));
  cublasHandle_t handle;
  CKL(cublasCreate(&handle));
  const float alpha = 1.0f, beta = 0.0f;
  for (int round = 0; round < 2; round++) {
    CK(cudaMemset(d_c, 0, sizeof(float) * elems * batch));
    CKL(cublasSgemmBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, d_pa, n, d_pb, n, &beta,
                           d_pc, n, batch));
    corpus_sync();
    CK(cudaMemcpy(h_c, d_c, sizeof(float) * elems * batch, cudaMemcpyDeviceToHost));
    for (int b = 0; b < batch; b++)
      for (int col = 0; col < n; col++)
        for (int row = 0; row < n; row++) {
          double want = 0;
          for (int k = 0; k < n; k++) want += (double)h_a[b * elems + k * n + row] * h_b[b * elems + col * n + k];
          if (!corpus_close(h_c[b * elems + col * n + row], want, 1e-4))
            WRONG("round %d matrix %d (%d, %d) = %g, want %g", round, b, row, col, h_c[b * elems + col * n + row], want);
        }
  }
  CKL(cublasDestroy(handle));
  return corpus_pass("cublas_batched");
}
