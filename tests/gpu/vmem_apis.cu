// Description: every allocation API and 2D/3D copy on the GPU, natively and under cudaw (both
// policies, CUDAW_VMEM set by ctest for both runs): pitched, 3D, async, pool and managed memory
// keep their data through copies, memsets and (except under translate, until kernel-argument
// translation lands) kernels; pointer attributes answer as the runtime does. Prints checksums
// that must match between the runs (compare.sh).
#include <string.h>

#include "gpu_common.h"

__global__ void scale(float *p, size_t n, float k)
{
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * k + 1.0f;
}

static bool kernels_on_virtual_memory()
{
  const char *policy = getenv("CUDAW_VMEM");
  return !policy || strcmp(policy, "translate") != 0;
}

int main()
{
  require_gpu();
  const size_t W = 1000, H = 37, D = 5;
  unsigned char *host = (unsigned char *)malloc(W * H * D), *back = (unsigned char *)malloc(W * H * D);
  for (size_t i = 0; i < W * H * D; i++) host[i] = (unsigned char)(i * 7 + (i >> 10));

  // Pitched 2D: pitch as the runtime chooses it.
  void *p2;
  size_t pitch;
  CUDA_CHECK(cudaMallocPitch(&p2, &pitch, W, H));
  printf("pitch %zu\n", pitch);
  CUDA_CHECK(cudaMemcpy2D(p2, pitch, host, W, W, H, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset2D((char *)p2 + 3 * pitch + 10, pitch, 0x42, 100, 4));
  CUDA_CHECK(cudaMemcpy2D(back, W, p2, pitch, W, H, cudaMemcpyDeviceToHost));
  printf("2d %016llx\n", (unsigned long long)checksum(back, W * H));

  // 3D
  cudaPitchedPtr vol;
  CUDA_CHECK(cudaMalloc3D(&vol, make_cudaExtent(W, H, D)));
  printf("3d pitch %zu\n", vol.pitch);
  CUDA_CHECK(cudaMemset3D(vol, 0, make_cudaExtent(W, H, D)));
  cudaMemcpy3DParms up = {};
  up.srcPtr = make_cudaPitchedPtr(host, W, W, H);
  up.dstPtr = vol;
  up.dstPos = make_cudaPos(3, 1, 1);
  up.extent = make_cudaExtent(W - 3, H - 1, D - 1);
  up.kind = cudaMemcpyHostToDevice;
  CUDA_CHECK(cudaMemcpy3D(&up));
  cudaMemcpy3DParms down = {};
  down.srcPtr = vol;
  down.dstPtr = make_cudaPitchedPtr(back, W, W, H);
  down.extent = make_cudaExtent(W, H, D);
  down.kind = cudaMemcpyDeviceToHost;
  CUDA_CHECK(cudaMemcpy3DAsync(&down, 0));
  CUDA_CHECK(cudaDeviceSynchronize());
  printf("3d %016llx\n", (unsigned long long)checksum(back, W * H * D));

  // Pointer attributes of a device allocation, interior pointer included.
  cudaPointerAttributes a;
  CUDA_CHECK(cudaPointerGetAttributes(&a, (char *)vol.ptr + 100));
  printf("attributes type %d device %d self %d\n", (int)a.type, a.device,
         a.devicePointer == (char *)vol.ptr + 100);

  // Stream-ordered and pool allocations, with a kernel where the policy allows.
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  const size_t n = 1 << 20;
  float *f, *g;
  cudaMemPool_t pool;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  CUDA_CHECK(cudaMallocAsync((void **)&f, n * sizeof(float), s));
  CUDA_CHECK(cudaMallocFromPoolAsync((void **)&g, n * sizeof(float), pool, s));
  float *hf = (float *)malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) hf[i] = (float)(i % 1000) * 0.5f;
  CUDA_CHECK(cudaMemcpyAsync(f, hf, n * sizeof(float), cudaMemcpyHostToDevice, s));
  if (kernels_on_virtual_memory()) scale<<<(n + 255) / 256, 256, 0, s>>>(f, n, 2.0f);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemcpyAsync(g, f, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
  CUDA_CHECK(cudaMemcpyAsync(hf, g, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaFreeAsync(f, s));
  CUDA_CHECK(cudaFreeAsync(g, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  printf("async %016llx\n", (unsigned long long)checksum(hf, n * sizeof(float)));

  // Managed memory (passed through by cudaw): a kernel and the host both touch it.
  float *m;
  CUDA_CHECK(cudaMallocManaged(&m, n * sizeof(float)));
  for (size_t i = 0; i < n; i++) m[i] = (float)(i % 333);
  scale<<<(n + 255) / 256, 256>>>(m, n, 3.0f);
  CUDA_CHECK(cudaDeviceSynchronize());
  printf("managed %016llx\n", (unsigned long long)checksum(m, n * sizeof(float)));
  CUDA_CHECK(cudaPointerGetAttributes(&a, m));
  printf("managed type %d\n", (int)a.type);
  CUDA_CHECK(cudaFree(m));

  // Pinned host memory as a copy source.
  void *pinned;
  CUDA_CHECK(cudaMallocHost(&pinned, W));
  memcpy(pinned, host, W);
  CUDA_CHECK(cudaMemcpy(p2, pinned, W, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(back, p2, W, cudaMemcpyDeviceToHost));
  printf("pinned %016llx\n", (unsigned long long)checksum(back, W));
  CUDA_CHECK(cudaFreeHost(pinned));

  // Bad input is refused like the runtime refuses it.
  printf("interior free %s\n", cudaGetErrorName(cudaFree((char *)vol.ptr + 256)));
  cudaGetLastError();

  CUDA_CHECK(cudaFree(p2));
  CUDA_CHECK(cudaFree(vol.ptr));
  CUDA_CHECK(cudaStreamDestroy(s));
  printf("ok\n");
  return 0;
}
