// Build: -lcublas -lcusparse
// Description: conjugate gradient on managed memory with cuBLAS and cuSPARSE (the shape of
// NVIDIA's conjugateGradientUM sample; issue 10's "silent wrong result"): every vector is
// cudaMallocManaged, the SpMV buffer comes from cudaMalloc. Checks |b - A x| on the host and
// prints RESULT with the bits of x's checksum, so the runner can compare it with native.
// Options: --buffer=managed (the SpMV buffer from cudaMallocManaged), --alg=default|csr1|csr2,
// --lax (check no library status and no synchronize, as the sample does).
#include <cstdint>
#include <cstring>
#include <cublas_v2.h>
#include <cusparse.h>
#include "corpus.h"
static void tridiag(int *I, int *J, float *val, int N, int nz)
{
  srand(1);
  I[0] = 0, J[0] = 0, J[1] = 1;
  val[0] = (float)rand() / RAND_MAX + 10.0f;
  val[1] = (float)rand() / RAND_MAX;
  int start;
  for (int i = 1; i < N; i++) {
    if (i > 1) I[i] = I[i - 1] + 3;
    else I[1] = 2;
    start = (i - 1) * 3 + 2;
    J[start] = i - 1;
    J[start + 1] = i;
    if (i < N - 1) J[start + 2] = i + 1;
    val[start] = val[start - 1];
    val[start + 1] = (float)rand() / RAND_MAX + 10.0f;
    if (i < N - 1) val[start + 2] = (float)rand() / RAND_MAX;
  }
  I[N] = nz;
}
int main(int argc, char **argv)
{
  bool managed_buffer = false;
  cusparseSpMVAlg_t alg = CUSPARSE_SPMV_ALG_DEFAULT;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--buffer=managed")) managed_buffer = true;
    if (!strcmp(argv[i], "--alg=csr1")) alg = CUSPARSE_SPMV_CSR_ALG1;
    if (!strcmp(argv[i], "--alg=csr2")) alg = CUSPARSE_SPMV_CSR_ALG2;
    if (!strcmp(argv[i], "--lax")) corpus_lax = true;
  }
  const int N = 1048576, nz = (N - 2) * 3 + 4;
  int *I, *J;
  float *val, *x, *rhs, *r, *p, *Ax;
  CK(cudaMallocManaged(&I, sizeof(int) * (N + 1)));
  CK(cudaMallocManaged(&J, sizeof(int) * nz));
  CK(cudaMallocManaged(&val, sizeof(float) * nz));
  tridiag(I, J, val, N, nz);
  CK(cudaMallocManaged(&x, sizeof(float) * N));
  CK(cudaMallocManaged(&rhs, sizeof(float) * N));
  CK(cudaMallocManaged(&r, sizeof(float) * N));
  CK(cudaMallocManaged(&p, sizeof(float) * N));
  CK(cudaMallocManaged(&Ax, sizeof(float) * N));
  for (int i = 0; i < N; i++) rhs[i] = 1.0f, x[i] = 0.0f, r[i] = rhs[i];
  CK(cudaDeviceSynchronize());
  cublasHandle_t cublas;
  cusparseHandle_t cusparse;
  CKL(cublasCreate(&cublas));
  CKL(cusparseCreate(&cusparse));
  cusparseSpMatDescr_t A;
  cusparseDnVecDescr_t vp, vAx, vx;
  CKL(cusparseCreateCsr(&A, N, N, nz, I, J, val, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                        CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  CKL(cusparseCreateDnVec(&vx, N, x, CUDA_R_32F));
  CKL(cusparseCreateDnVec(&vp, N, p, CUDA_R_32F));
  CKL(cusparseCreateDnVec(&vAx, N, Ax, CUDA_R_32F));
  float one = 1, zero = 0, minus = -1, a, b, na, r0 = 0, r1, dot;
  size_t bytes = 0;
  CKL(cusparseSpMV_bufferSize(cusparse, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, vx, &zero, vAx,
                              CUDA_R_32F, alg, &bytes));
  void *buffer;
  if (managed_buffer) CK(cudaMallocManaged(&buffer, bytes ? bytes : 1));
  else CK(cudaMalloc(&buffer, bytes ? bytes : 1));
  std::printf("spmv buffer: %zu bytes at %p (%s)\n", bytes, buffer, managed_buffer ? "managed" : "cudaMalloc");
  CKL(cusparseSpMV(cusparse, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, vx, &zero, vAx, CUDA_R_32F,
                   alg, buffer));
  CKL(cublasSaxpy(cublas, N, &minus, Ax, 1, r, 1));
  CKL(cublasSdot(cublas, N, r, 1, r, 1, &r1));
  int k = 1;
  const float tol = 1e-5f;
  while (r1 > tol * tol && k <= 10000) {
    if (k > 1) {
      b = r1 / r0;
      CKL(cublasSscal(cublas, N, &b, p, 1));
      CKL(cublasSaxpy(cublas, N, &one, r, 1, p, 1));
    } else {
      CKL(cublasScopy(cublas, N, r, 1, p, 1));
    }
    CKL(cusparseSpMV(cusparse, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, vp, &zero, vAx, CUDA_R_32F,
                     alg, buffer));
    CKL(cublasSdot(cublas, N, p, 1, Ax, 1, &dot));
    a = r1 / dot;
    CKL(cublasSaxpy(cublas, N, &a, p, 1, x, 1));
    na = -a;
    CKL(cublasSaxpy(cublas, N, &na, Ax, 1, r, 1));
    r0 = r1;
    CKL(cublasSdot(cublas, N, r, 1, r, 1, &r1));
    if (corpus_lax) (void)cudaDeviceSynchronize();
    else CK(cudaDeviceSynchronize());
    k++;
  }
  if (!corpus_lax) corpus_sync();
  float err = 0;
  double sum = 0;
  for (int i = 0; i < N; i++) {
    float rsum = 0;
    for (int j = I[i]; j < I[i + 1]; j++) rsum += val[j] * x[J[j]];
    if (fabsf(rhs[i] - rsum) > err) err = fabsf(rhs[i] - rsum);
    sum += x[i];
  }
  uint64_t bits;
  std::memcpy(&bits, &sum, sizeof bits);
  if (corpus_ignored) std::printf("ignored %d failed library calls\n", corpus_ignored);
  std::printf("RESULT iterations=%d residual=%e err=%e checksum=%016llx\n", k, std::sqrt(r1), err,
              (unsigned long long)bits);
  if (!(err < 1e-4f) || k > 10000) WRONG("error %e after %d iterations", err, k);
  return corpus_pass("managed_cg");
}
