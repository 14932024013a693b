// Description: a surface object over a CUDA array: a kernel writes with surf2Dwrite, another
// reads through a texture object over the same array.
#include "corpus.h"
__global__ void write(cudaSurfaceObject_t s, int w, int h)
{
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w) surf2Dwrite((float)(x * 7 + y), s, x * (int)sizeof(float), y);
}
__global__ void read(cudaTextureObject_t t, float *out, int w, int h)
{
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
}
int main()
{
  const int w = 256, h = 64;
  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  cudaArray_t arr;
  CK(cudaMallocArray(&arr, &f, w, h, cudaArraySurfaceLoadStore));
  cudaResourceDesc res = {};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = arr;
  cudaSurfaceObject_t s;
  CK(cudaCreateSurfaceObject(&s, &res));
  cudaTextureDesc td = {};
  td.readMode = cudaReadModeElementType;
  cudaTextureObject_t t;
  CK(cudaCreateTextureObject(&t, &res, &td, nullptr));
  float *out, *b = (float *)malloc(w * h * sizeof(float));
  CK(cudaMalloc(&out, w * h * sizeof(float)));
  write<<<dim3(w / 64, h), 64>>>(s, w, h);
  read<<<dim3(w / 64, h), 64>>>(t, out, w, h);
  corpus_sync();
  CK(cudaMemcpy(b, out, w * h * sizeof(float), cudaMemcpyDeviceToHost));
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      if (b[y * w + x] != (float)(x * 7 + y)) WRONG("(%d,%d) = %g", x, y, b[y * w + x]);
  CK(cudaDestroySurfaceObject(s));
  CK(cudaDestroyTextureObject(t));
  CK(cudaFreeArray(arr));
  return corpus_pass("surface");
}
