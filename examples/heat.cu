// A long-running iterative GPU program to pause and resume under cudaw: 2D heat diffusion (Jacobi
// steps of a 5-point stencil) on an n x n grid, plus an optional block of "ballast" device memory
// holding a known pattern, so that a checkpoint has gigabytes to move. Deterministic: the final
// checksum is the same for every run with the same arguments on the same GPU, paused or not.
// Nothing cudaw-specific; built with the shared runtime (nvcc -cudart shared). Every launch is
// checked: a kernel that did not run must fail the program, not print a plausible checksum.
//
// usage: heat [n=4096] [steps=200000] [ballast MiB=0] [report every=10000 steps]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static void check(cudaError_t e, const char *what)
{
  if (e != cudaSuccess) {
    fprintf(stderr, "heat: %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
  }
}

__global__ void step(const float *in, float *out, int n)
{
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= n || y >= n) return;
  size_t i = (size_t)y * n + x;
  if (x == 0 || y == 0 || x == n - 1 || y == n - 1) {
    out[i] = in[i]; // fixed boundary
    return;
  }
  float lap = in[i - 1] + in[i + 1] + in[i - n] + in[i + n] - 4.0f * in[i];
  out[i] = __fadd_rn(in[i], __fmul_rn(0.2f, lap)); // no contraction: bit-reproducible
}

__global__ void fill_ballast(uint64_t *p, size_t words)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = i * 0x9E3779B97F4A7C15ull;
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
  const unsigned char *p = (const unsigned char *)data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

int main(int argc, char **argv)
{
  int n = argc > 1 ? atoi(argv[1]) : 4096;
  long steps = argc > 2 ? atol(argv[2]) : 200000;
  size_t ballast_mib = argc > 3 ? strtoull(argv[3], NULL, 10) : 0;
  long every = argc > 4 ? atol(argv[4]) : 10000;
  if (n < 3 || steps < 0 || every <= 0) {
    fprintf(stderr, "usage: heat [n>=3] [steps] [ballast MiB] [report every]\n");
    return 2;
  }
  size_t cells = (size_t)n * n, bytes = cells * sizeof(float);
  size_t ballast_bytes = ballast_mib << 20;

  float *grid = (float *)malloc(bytes);
  for (int y = 0; y < n; y++) // a hot square in a cold plate, warm left edge
    for (int x = 0; x < n; x++)
      grid[(size_t)y * n + x] = x == 0 ? 50.0f
                                : (x > n / 4 && x < n / 2 && y > n / 3 && y < n / 2) ? 100.0f
                                                                                     : 0.0f;
  float *a, *b;
  uint64_t *ballast = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc grid");
  check(cudaMalloc(&b, bytes), "cudaMalloc grid");
  check(cudaMemcpy(a, grid, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  check(cudaMemcpy(b, grid, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  if (ballast_bytes) {
    check(cudaMalloc(&ballast, ballast_bytes), "cudaMalloc ballast");
    fill_ballast<<<1024, 256>>>(ballast, ballast_bytes / 8);
    check(cudaGetLastError(), "fill_ballast launch");
    check(cudaDeviceSynchronize(), "fill_ballast");
  }
  printf("heat: n=%d steps=%ld allocated %zu bytes\n", n, steps, 2 * bytes + ballast_bytes);
  fflush(stdout);

  dim3 block(32, 8), blocks((n + 31) / 32, (n + 7) / 8);
  for (long s = 1; s <= steps; s++) {
    step<<<blocks, block>>>(a, b, n);
    check(cudaGetLastError(), "step launch");
    float *t = a;
    a = b;
    b = t;
    if (s % every == 0 || s == steps) {
      float probe;
      check(cudaMemcpy(&probe, a + (size_t)(n / 2) * n + n / 3, sizeof probe,
                       cudaMemcpyDeviceToHost), "cudaMemcpy probe");
      printf("heat: step %ld/%ld probe %.6f\n", s, steps, probe);
      fflush(stdout);
    }
  }
  check(cudaDeviceSynchronize(), "step");
  check(cudaMemcpy(grid, a, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  uint64_t sum = fnv1a(1469598103934665603ull, grid, bytes);
  if (ballast_bytes) { // the ballast must still hold its pattern
    size_t chunk = (size_t)64 << 20;
    uint64_t *host = (uint64_t *)malloc(chunk);
    for (size_t off = 0; off < ballast_bytes; off += chunk) {
      size_t len = ballast_bytes - off < chunk ? ballast_bytes - off : chunk;
      check(cudaMemcpy(host, (char *)ballast + off, len, cudaMemcpyDeviceToHost), "ballast");
      for (size_t w = 0; w < len / 8; w++)
        if (host[w] != (off / 8 + w) * 0x9E3779B97F4A7C15ull) {
          fprintf(stderr, "heat: ballast word %zu is wrong\n", off / 8 + w);
          return 1;
        }
    }
    free(host);
    sum = fnv1a(sum, &ballast_bytes, sizeof ballast_bytes);
  }
  printf("heat: done n=%d steps=%ld checksum=%016llx\n", n, steps, (unsigned long long)sum);
  cudaFree(a);
  cudaFree(b);
  cudaFree(ballast);
  free(grid);
  return 0;
}
