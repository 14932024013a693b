// Build: -lcurand
// Description: cuRAND's host API: a Philox generator with a fixed seed fills cudaMalloc'd
// memory; the mean of 1M uniforms is 0.5 and a second generator with the same seed agrees.
#include <curand.h>
#include "corpus.h"
int main()
{
  const int n = 1 << 20;
  float *d1, *d2, *h1 = (float *)malloc(n * 4), *h2 = (float *)malloc(n * 4);
  CK(cudaMalloc(&d1, n * 4));
  CK(cudaMalloc(&d2, n * 4));
  CK(cudaMemset(d1, 0xff, n * 4));
  curandGenerator_t g1, g2;
  CKL(curandCreateGenerator(&g1, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CKL(curandCreateGenerator(&g2, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CKL(curandSetPseudoRandomGeneratorSeed(g1, 1234));
  CKL(curandSetPseudoRandomGeneratorSeed(g2, 1234));
  CKL(curandGenerateUniform(g1, d1, n));
  CKL(curandGenerateUniform(g2, d2, n));
  corpus_sync();
  CK(cudaMemcpy(h1, d1, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(h2, d2, n * 4, cudaMemcpyDeviceToHost));
  double sum = 0;
  for (int i = 0; i < n; i++) {
    if (!(h1[i] > 0 && h1[i] <= 1)) WRONG("u[%d] = %g", i, h1[i]);
    if (h1[i] != h2[i]) WRONG("generators disagree at %d", i);
    sum += h1[i];
  }
  if (fabs(sum / n - 0.5) > 0.01) WRONG("mean %g", sum / n);
  return corpus_pass("curand");
}
