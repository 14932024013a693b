// Description: vector addition on the GPU; prints a checksum of the result that must be the same
// with and without cudaw (tests/gpu/compare.sh), and checks every element against the host.
#include "gpu_common.h"

__global__ void vector_add(const float *a, const float *b, float *c, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] * 1.5f + b[i];
}

int main()
{
  require_gpu();
  const int n = 1 << 22;
  size_t bytes = n * sizeof(float);
  float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
  for (int i = 0; i < n; i++) a[i] = (float)(i % 977) * 0.25f, b[i] = (float)(i % 131) - 7.0f;
  float *da, *db, *dc;
  CUDA_CHECK(cudaMalloc(&da, bytes));
  CUDA_CHECK(cudaMalloc(&db, bytes));
  CUDA_CHECK(cudaMalloc(&dc, bytes));
  CUDA_CHECK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(dc, 0xff, bytes));
  vector_add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) {
    if (c[i] != a[i] * 1.5f + b[i]) {
      fprintf(stderr, "FAIL: c[%d] = %g, expected %g\n", i, c[i], a[i] * 1.5f + b[i]);
      return 1;
    }
  }
  CUDA_CHECK(cudaFree(da));
  CUDA_CHECK(cudaFree(db));
  CUDA_CHECK(cudaFree(dc));
  printf("vector_add n=%d checksum=%016llx\n", n, (unsigned long long)checksum(c, bytes));
  return 0;
}
