/* Description: the program bad_options.sh runs under cudaw (emulated device) with one option
 * set to a bad value: it allocates, copies and frees device memory and says whether that worked.
 * Exit 0 when it did, 1 when a call failed (allowed where the option refuses, e.g. a real
 * runtime that cannot be loaded); a crash is what the campaign looks for. */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

int main(void)
{
  char in[4096], out[4096];
  for (size_t i = 0; i < sizeof in; i++) in[i] = (char)(i * 7);
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, sizeof in);
  if (e == cudaSuccess) e = cudaMemcpy(p, in, sizeof in, cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaMemcpy(out, p, sizeof out, cudaMemcpyDeviceToHost);
  if (p) cudaFree(p);
  if (e != cudaSuccess) {
    printf("probe: %s\n", cudaGetErrorName(e));
    return 1;
  }
  if (memcmp(in, out, sizeof in) != 0) {
    printf("probe: data differs\n");
    return 1;
  }
  printf("probe: ok\n");
  return 0;
}
