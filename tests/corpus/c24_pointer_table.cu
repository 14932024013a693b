// Description: device pointers stored in device memory (a table of row pointers built on the
// host and copied over). Natively and under remap the kernel follows them; under translate too,
// since issue 21 (identity placement: the program's pointers are the real ones until a resume
// moves memory). It must never give a wrong answer quietly.
#include "corpus.h"
__global__ void gather(float *const *rows, float *out, int w, int h)
{
  int x = threadIdx.x, y = blockIdx.x;
  if (x < w && y < h) out[y * w + x] = rows[y][x] + 1.0f;
}
int main()
{
  const int w = 128, h = 64;
  float *rows_h[h], **rows_d, *out, hb[w * h];
  for (int y = 0; y < h; y++) {
    CK(cudaMalloc(&rows_h[y], w * sizeof(float)));
    for (int x = 0; x < w; x++) hb[x] = (float)(y * w + x);
    CK(cudaMemcpy(rows_h[y], hb, w * sizeof(float), cudaMemcpyHostToDevice));
  }
  CK(cudaMalloc(&rows_d, sizeof rows_h));
  CK(cudaMemcpy(rows_d, rows_h, sizeof rows_h, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&out, sizeof hb));
  gather<<<h, w>>>(rows_d, out, w, h);
  corpus_sync();
  CK(cudaMemcpy(hb, out, sizeof hb, cudaMemcpyDeviceToHost));
  for (int i = 0; i < w * h; i++)
    if (hb[i] != (float)i + 1.0f) WRONG("out[%d] = %g", i, hb[i]);
  return corpus_pass("pointer_table");
}
