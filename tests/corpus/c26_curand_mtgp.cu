// Build: -lcurand
// Description: cuRAND's device API with MTGP32 generators: their states live in device memory and
// point at parameter tables in device memory (a structure of device pointers, as in a
// Mersenne-Twister sample). Two batches from one state, the second after the pause point, must
// equal the same two batches from a fresh state of the same seed, and their mean is about 0.5.
#include <curand_kernel.h>
#include <curand_mtgp32_host.h>
#include <curand_mtgp32dc_p_11213.h>
#include "corpus.h"

const int blocks = 64, threads = 256, per_thread = 16;

__global__ void draw(curandStateMtgp32 *states, float *out)
{
  for (int i = 0; i < per_thread; i++)
    out[(blockIdx.x * per_thread + i) * threads + threadIdx.x] = curand_uniform(&states[blockIdx.x]);
}

static void batches(curandStateMtgp32 *states, mtgp32_kernel_params *params, float *d_out, float *h1,
                    float *h2, bool pause, size_t count)
{
  CKL(curandMakeMTGP32Constants(mtgp32dc_params_fast_11213, params));
  CKL(curandMakeMTGP32KernelState(states, mtgp32dc_params_fast_11213, params, blocks, 1234));
  draw<<<blocks, threads>>>(states, d_out);
  if (pause) corpus_sync();
  CK(cudaMemcpy(h1, d_out, count * sizeof(float), cudaMemcpyDeviceToHost));
  draw<<<blocks, threads>>>(states, d_out);
  CK(cudaMemcpy(h2, d_out, count * sizeof(float), cudaMemcpyDeviceToHost));
}

int main()
{
  const size_t count = (size_t)blocks * threads * per_thread;
  curandStateMtgp32 *states;
  mtgp32_kernel_params *params;
  float *d_out;
  CK(cudaMalloc(&states, blocks * sizeof(curandStateMtgp32)));
  CK(cudaMalloc(&params, sizeof(mtgp32_kernel_params)));
  CK(cudaMalloc(&d_out, count * sizeof(float)));
  float *a1 = (float *)malloc(count * sizeof(float)), *a2 = (float *)malloc(count * sizeof(float));
  float *b1 = (float *)malloc(count * sizeof(float)), *b2 = (float *)malloc(count * sizeof(float));
  batches(states, params, d_out, a1, a2, true, count);
  batches(states, params, d_out, b1, b2, false, count);
  corpus_sync();
  double sum = 0;
  for (size_t i = 0; i < count; i++) {
    if (a1[i] != b1[i] || a2[i] != b2[i]) WRONG("draw %zu differs from a fresh state of the same seed", i);
    sum += a1[i] + a2[i];
  }
  double mean = sum / (2.0 * count);
  if (mean < 0.49 || mean > 0.51) WRONG("mean %g", mean);
  char detail[64];
  std::snprintf(detail, sizeof detail, "mean %.4f", mean);
  return corpus_pass("curand_mtgp", detail);
}
