/* Description: 1D, 2D, 3D and batched copies and memsets on virtual device memory keep every
 * byte: pitched sub-rectangles and sub-boxes land where the runtime would put them. */
#include "vmemshim.h"

int main(void)
{
  enum { W = 300, H = 9, D = 4 };
  unsigned char *host = malloc(W * H * D), *back = malloc(W * H * D), *expect = malloc(W * H * D);
  fill(host, W * H * D, 11);

  /* 2D: host -> pitched device -> pitched device -> host. */
  void *a, *b;
  size_t pa, pb;
  CUDA_OK(cudaMallocPitch(&a, &pa, W, H));
  CUDA_OK(cudaMallocPitch(&b, &pb, W + 600, H));
  CHECK(pb != pa);
  CUDA_OK(cudaMemcpy2D(a, pa, host, W, W, H, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy2DAsync(b, pb, a, pa, W, H, cudaMemcpyDeviceToDevice, 0));
  memset(back, 0, W * H);
  CUDA_OK(cudaMemcpy2D(back, W, b, pb, W, H, cudaMemcpyDeviceToHost));
  CHECK(memcmp(back, host, W * H) == 0, "2D copy lost data");

  /* 2D memset of an inner rectangle. */
  CUDA_OK(cudaMemset2D((char *)b + pb + 10, pb, 0xab, 20, 3));
  CUDA_OK(cudaMemcpy2D(back, W, b, pb, W, H, cudaMemcpyDeviceToHost));
  memcpy(expect, host, W * H);
  for (int y = 1; y < 4; y++) memset(expect + y * W + 10, 0xab, 20);
  CHECK(memcmp(back, expect, W * H) == 0, "2D memset wrong");

  /* 3D: a box of the host volume into a cudaMalloc3D volume at an offset, and back out. */
  struct cudaPitchedPtr vol;
  CUDA_OK(cudaMalloc3D(&vol, (struct cudaExtent){W, H, D}));
  CUDA_OK(cudaMemset3D(vol, 0, (struct cudaExtent){W, H, D}));
  struct cudaMemcpy3DParms up = {0};
  up.srcPtr = (struct cudaPitchedPtr){host, W, W, H};
  up.dstPtr = vol;
  up.dstPos = (struct cudaPos){5, 2, 1};
  up.extent = (struct cudaExtent){W - 5, H - 2, D - 1};
  up.kind = cudaMemcpyHostToDevice;
  CUDA_OK(cudaMemcpy3D(&up));
  struct cudaMemcpy3DParms down = {0};
  down.srcPtr = vol;
  down.dstPtr = (struct cudaPitchedPtr){back, W, W, H};
  down.extent = (struct cudaExtent){W, H, D};
  down.kind = cudaMemcpyDeviceToHost;
  memset(back, 0x11, W * H * D);
  CUDA_OK(cudaMemcpy3DAsync(&down, 0));
  CUDA_OK(cudaDeviceSynchronize());
  memset(expect, 0, W * H * D);
  for (int z = 0; z < D - 1; z++)
    for (int y = 0; y < H - 2; y++)
      memcpy(expect + ((z + 1) * H + y + 2) * W + 5, host + (z * H + y) * W, W - 5);
  CHECK(memcmp(back, expect, W * H * D) == 0, "3D copy wrong");
  /* The caller's parameters are not modified by the translation. */
  CHECK(up.dstPtr.ptr == vol.ptr && down.srcPtr.ptr == vol.ptr);

  /* 3D memset of the last layer. */
  struct cudaPitchedPtr last = vol;
  last.ptr = (char *)vol.ptr + (size_t)(D - 1) * H * vol.pitch;
  CUDA_OK(cudaMemset3DAsync(last, 0x5c, (struct cudaExtent){W, H, 1}, 0));
  CUDA_OK(cudaMemcpy3D(&down));
  memset(expect + (D - 1) * H * W, 0x5c, W * H);
  CHECK(memcmp(back, expect, W * H * D) == 0, "3D memset wrong");

  /* 1D: plain, async, device to device, memset. */
  void *c, *d;
  CUDA_OK(cudaMalloc(&c, 1000));
  CUDA_OK(cudaMalloc(&d, 1000));
  CUDA_OK(cudaMemcpyAsync(c, host, 1000, cudaMemcpyHostToDevice, 0));
  CUDA_OK(cudaMemcpy(d, c, 1000, cudaMemcpyDefault));
  CUDA_OK(cudaMemsetAsync((char *)d + 500, 0, 500, 0));
  CUDA_OK(cudaMemcpy(back, d, 1000, cudaMemcpyDeviceToHost));
  memcpy(expect, host, 500);
  memset(expect + 500, 0, 500);
  CHECK(memcmp(back, expect, 1000) == 0, "1D copy/memset wrong");

  /* Batched copies: an array of virtual pointers. */
  void *dsts[2] = {c, back};
  const void *srcs[2] = {host + 1000, d};
  size_t sizes[2] = {1000, 1000};
  struct cudaMemcpyAttributes attr = {0};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t attr_index = 0;
  CUDA_OK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &attr_index, 1, 0));
  CHECK(memcmp(back, expect, 1000) == 0, "batched D2H wrong");
  CUDA_OK(cudaMemcpy(back, c, 1000, cudaMemcpyDeviceToHost));
  CHECK(memcmp(back, host + 1000, 1000) == 0, "batched H2D wrong");
  CHECK(dsts[0] == c && srcs[1] == d, "caller's pointer arrays modified");

  CUDA_OK(cudaFree(a));
  CUDA_OK(cudaFree(b));
  CUDA_OK(cudaFree(c));
  CUDA_OK(cudaFree(d));
  CUDA_OK(cudaFree(vol.ptr));
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  free(host);
  free(back);
  free(expect);
  printf("ok\n");
  return 0;
}
