// Description: a kernel with a 32 KB parameter (CUDA 12.1+): a struct holding two device
// pointers among 4,000 scalars; the pointers must be usable on the device.
#include "corpus.h"
struct Big {
  float *out;
  double coeff[4000];
  const float *in;
  int n;
};
__global__ void apply(Big b)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < b.n) b.out[i] = b.in[i] * (float)b.coeff[i % 4000] + (float)b.coeff[3999];
}
int main()
{
  static Big b;
  const int n = 10000;
  float *h = (float *)malloc(n * sizeof(float));
  for (int i = 0; i < 4000; i++) b.coeff[i] = i * 0.001;
  for (int i = 0; i < n; i++) h[i] = (float)(i % 13);
  float *in, *out;
  CK(cudaMalloc(&in, n * sizeof(float)));
  CK(cudaMalloc(&out, n * sizeof(float)));
  CK(cudaMemcpy(in, h, n * sizeof(float), cudaMemcpyHostToDevice));
  b.out = out;
  b.in = in;
  b.n = n;
  static_assert(sizeof(Big) > 32000, "a 32 KB parameter");
  apply<<<(n + 255) / 256, 256>>>(b);
  corpus_sync();
  CK(cudaMemcpy(h, out, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) {
    float want = (float)(i % 13) * (float)b.coeff[i % 4000] + (float)b.coeff[3999];
    if (!corpus_close(h[i], want, 1e-5)) WRONG("out[%d] = %g, want %g", i, h[i], want);
  }
  return corpus_pass("param_32k");
}
