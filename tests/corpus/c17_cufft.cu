// Build: -lcufft
// Description: cuFFT: a forward then inverse 1D complex FFT of 4096 points on cudaMalloc'd
// memory returns the input times n; a forward FFT of a pure tone peaks at its bin.
#include <cufft.h>
#include "corpus.h"
int main()
{
  const int n = 4096;
  cufftComplex *h = (cufftComplex *)malloc(n * sizeof(cufftComplex)), *d;
  for (int i = 0; i < n; i++) h[i].x = cosf(2 * 3.14159265f * 5 * i / n), h[i].y = 0;
  CK(cudaMalloc(&d, n * sizeof(cufftComplex)));
  CK(cudaMemcpy(d, h, n * sizeof(cufftComplex), cudaMemcpyHostToDevice));
  cufftHandle plan;
  CKL(cufftPlan1d(&plan, n, CUFFT_C2C, 1));
  CKL(cufftExecC2C(plan, d, d, CUFFT_FORWARD));
  corpus_sync();
  cufftComplex *f = (cufftComplex *)malloc(n * sizeof(cufftComplex));
  CK(cudaMemcpy(f, d, n * sizeof(cufftComplex), cudaMemcpyDeviceToHost));
  if (!corpus_close(f[5].x, n / 2.0, 1e-3)) WRONG("bin 5 = %g, want %g", f[5].x, n / 2.0);
  CKL(cufftExecC2C(plan, d, d, CUFFT_INVERSE));
  corpus_sync();
  CK(cudaMemcpy(f, d, n * sizeof(cufftComplex), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; i++)
    if (fabsf(f[i].x / n - h[i].x) > 1e-4f || fabsf(f[i].y / n) > 1e-4f) WRONG("x[%d] = %g", i, f[i].x / n);
  CKL(cufftDestroy(plan));
  return corpus_pass("cufft");
}
