// Build: -lcusparse
// Description: cuSPARSE's generic API: y = A x for a tridiagonal CSR matrix on cudaMalloc'd
// memory, with the external buffer from cudaMalloc, against a host reference.
#include <cusparse.h>
#include "corpus.h"
int main()
{
  const int n = 10000, nnz = 3 * n - 2;
  int *rows = (int *)malloc((n + 1) * 4), *cols = (int *)malloc(nnz * 4);
  float *vals = (float *)malloc(nnz * 4), *x = (float *)malloc(n * 4), *y = (float *)malloc(n * 4);
  int k = 0;
  for (int i = 0; i < n; i++) {
    rows[i] = k;
    for (int j = i - 1; j <= i + 1; j++)
      if (j >= 0 && j < n) cols[k] = j, vals[k++] = (j == i) ? 4.0f : -1.0f;
    x[i] = (float)(i % 17);
  }
  rows[n] = k;
  int *dr, *dc;
  float *dv, *dx, *dy;
  CK(cudaMalloc(&dr, (n + 1) * 4));
  CK(cudaMalloc(&dc, nnz * 4));
  CK(cudaMalloc(&dv, nnz * 4));
  CK(cudaMalloc(&dx, n * 4));
  CK(cudaMalloc(&dy, n * 4));
  CK(cudaMemcpy(dr, rows, (n + 1) * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dc, cols, nnz * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv, vals, nnz * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dx, x, n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(dy, 0, n * 4));
  cusparseHandle_t h;
  CKL(cusparseCreate(&h));
  cusparseSpMatDescr_t A;
  cusparseDnVecDescr_t vx, vy;
  CKL(cusparseCreateCsr(&A, n, n, nnz, dr, dc, dv, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                        CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  CKL(cusparseCreateDnVec(&vx, n, dx, CUDA_R_32F));
  CKL(cusparseCreateDnVec(&vy, n, dy, CUDA_R_32F));
  float one = 1, zero = 0;
  size_t bytes;
  CKL(cusparseSpMV_bufferSize(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, vx, &zero, vy,
                              CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT, &bytes));
  void *buffer;
  CK(cudaMalloc(&buffer, bytes ? bytes : 1));
  CKL(cusparseSpMV(h, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, vx, &zero, vy, CUDA_R_32F,
                   CUSPARSE_SPMV_ALG_DEFAULT, buffer));
  corpus_sync();
  CK(cudaMemcpy(y, dy, n * 4, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) {
    float want = 4 * x[i] - (i > 0 ? x[i - 1] : 0) - (i + 1 < n ? x[i + 1] : 0);
    if (y[i] != want) WRONG("y[%d] = %g, want %g", i, y[i], want);
  }
  CKL(cusparseDestroy(h));
  return corpus_pass("cusparse");
}
