// Description: a texture object over pitched memory (cudaMallocPitch, pitch-2D resource), read
// with tex2D in a kernel; the resource descriptor read back must name the program's pointer.
// --hold: wait 3 s with the texture alive before sampling (for a checkpoint from outside).
#include <cstring>
#include <unistd.h>
#include "corpus.h"
__global__ void sample(cudaTextureObject_t t, float *out, int w, int h)
{
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f) * 2.0f;
}
int main(int argc, char **argv)
{
  const int w = 300, h = 200;
  float *host = (float *)malloc(w * h * sizeof(float)), *back = (float *)malloc(w * h * sizeof(float));
  for (int i = 0; i < w * h; i++) host[i] = (float)(i % 977);
  float *img, *out;
  size_t pitch;
  CK(cudaMallocPitch((void **)&img, &pitch, w * sizeof(float), h));
  CK(cudaMemcpy2D(img, pitch, host, w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&out, w * h * sizeof(float)));
  cudaResourceDesc res = {};
  res.resType = cudaResourceTypePitch2D;
  res.res.pitch2D.devPtr = img;
  res.res.pitch2D.desc = cudaCreateChannelDesc<float>();
  res.res.pitch2D.width = w;
  res.res.pitch2D.height = h;
  res.res.pitch2D.pitchInBytes = pitch;
  cudaTextureDesc td = {};
  td.readMode = cudaReadModeElementType;
  td.filterMode = cudaFilterModePoint;
  cudaTextureObject_t t;
  CK(cudaCreateTextureObject(&t, &res, &td, nullptr));
  cudaResourceDesc rb;
  CK(cudaGetTextureObjectResourceDesc(&rb, t));
  if (rb.res.pitch2D.devPtr != img) WRONG("resource reads back %p, not %p", rb.res.pitch2D.devPtr, (void *)img);
  if (argc > 1 && !strcmp(argv[1], "--hold")) {
    std::printf("HOLD %d\n", (int)getpid());
    std::fflush(stdout);
    sleep(3);
  }
  sample<<<dim3((w + 127) / 128, h), 128>>>(t, out, w, h);
  corpus_sync();
  CK(cudaMemcpy(back, out, w * h * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < w * h; i++)
    if (back[i] != 2.0f * host[i]) WRONG("texel %d = %g, want %g", i, back[i], 2.0f * host[i]);
  CK(cudaDestroyTextureObject(t));
  return corpus_pass("texture_pitch2d");
}
