// A plain CUDA program, nothing cudaw-specific: vector addition, checked on the host. Built with
// the shared runtime (nvcc -cudart shared) so that cudaw can stand in for libcudart.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void vector_add(const float *a, const float *b, float *c, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

static void check(cudaError_t e, const char *what)
{
  if (e != cudaSuccess) {
    fprintf(stderr, "vector_add: %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
  }
}

int main()
{
  const int n = 1 << 20;
  size_t bytes = n * sizeof(float);
  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  printf("vector_add: device 0 is %s\n", prop.name);
  float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
  for (int i = 0; i < n; i++) a[i] = (float)i, b[i] = 2.0f * (float)i;
  float *da, *db, *dc;
  check(cudaMalloc(&da, bytes), "cudaMalloc");
  check(cudaMalloc(&db, bytes), "cudaMalloc");
  check(cudaMalloc(&dc, bytes), "cudaMalloc");
  check(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  check(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  vector_add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  check(cudaGetLastError(), "launch");
  check(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (int i = 0; i < n; i++)
    if (c[i] != 3.0f * (float)i) {
      fprintf(stderr, "vector_add: wrong result at %d: %g\n", i, c[i]);
      return 1;
    }
  printf("vector_add: %d elements added correctly\n", n);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  return 0;
}
