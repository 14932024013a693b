// Build: -rdc=true -lcudadevrt
// Description: dynamic parallelism (-rdc=true, cudadevrt): a parent kernel launches a child
// grid per row with pointers it computed on the device.
#include "corpus.h"
__global__ void child(float *row, int w, float scale)
{
  int x = threadIdx.x;
  if (x < w) row[x] *= scale;
}
__global__ void parent(float *m, int w, int h)
{
  int y = threadIdx.x;
  if (y < h) child<<<1, w>>>(m + y * w, w, (float)(y + 1));
}
int main()
{
  const int w = 64, h = 32;
  float hm[w * h], *m;
  for (int i = 0; i < w * h; i++) hm[i] = (float)(i % w);
  CK(cudaMalloc(&m, sizeof hm));
  CK(cudaMemcpy(m, hm, sizeof hm, cudaMemcpyHostToDevice));
  parent<<<1, h>>>(m, w, h);
  corpus_sync();
  CK(cudaMemcpy(hm, m, sizeof hm, cudaMemcpyDeviceToHost));
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      if (hm[y * w + x] != (float)x * (y + 1)) WRONG("(%d,%d) = %g", x, y, hm[y * w + x]);
  return corpus_pass("dynamic_parallelism");
}
