/* Description: stream-ordered frees: a block freed with cudaFreeAsync on a stream that has not
 * reached the free yet (a held stream of the emulated device) is not handed out again, and comes
 * back once the stream passes the free; freeing it again meanwhile is a double free. */
#include "vmemshim.h"

typedef int (*hold_fn)(cudaStream_t, int);

static size_t free_bytes(void)
{
  size_t f, t;
  CUDA_OK(cudaMemGetInfo(&f, &t));
  return f;
}

int main(void)
{
  if (!vmem_expected()) test_skip("CUDAW_VMEM=off: the real runtime orders frees itself");
  hold_fn hold = (hold_fn)emu_symbol("cudaw_emu_hold_stream");
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  /* Small blocks: vmem hands a freed slot out again at once, unless the free is still pending. */
  enum { N = 64 };
  void *blocks[N];
  for (int i = 0; i < N; i++) CUDA_OK(cudaMallocAsync(&blocks[i], 512, s));
  CHECK_EQ(hold(s, 1), 0);
  for (int i = 0; i < N; i++) CUDA_OK(cudaFreeAsync(blocks[i], s));
  /* Double free while pending; interior pointer. */
  CUDA_FAILS(cudaFreeAsync(blocks[0], s), cudaErrorInvalidValue);
  void *c;
  CUDA_OK(cudaMalloc(&c, 1024));
  CUDA_FAILS(cudaFreeAsync((char *)c + 256, s), cudaErrorInvalidValue);

  void *again[N];
  for (int i = 0; i < N; i++) {
    CUDA_OK(cudaMallocAsync(&again[i], 512, 0));
    for (int j = 0; j < N; j++)
      CHECK(again[i] != blocks[j], "block %p reused before its stream reached the free", blocks[j]);
  }
  for (int i = 0; i < N; i++) CUDA_OK(cudaFree(again[i])); /* cudaFree syncs: releases s */

  /* After the stream passed the free: the blocks are back (free memory recovers). */
  for (int i = 0; i < N; i++) CUDA_OK(cudaMallocAsync(&blocks[i], 512, s));
  size_t before = free_bytes();
  CHECK_EQ(hold(s, 1), 0);
  for (int i = 0; i < N; i++) CUDA_OK(cudaFreeAsync(blocks[i], s));
  CHECK_EQ(free_bytes(), before); /* not given back while the stream is held */
  CHECK_EQ(hold(s, 0), 0);
  CHECK(free_bytes() >= before, "memory not given back after the stream passed the free");
  int reused = 0;
  for (int i = 0; i < N; i++) {
    CUDA_OK(cudaMallocAsync(&again[i], 512, s));
    for (int j = 0; j < N; j++) reused |= again[i] == blocks[j];
  }
  CHECK(reused, "freed blocks never came back to vmem");
  for (int i = 0; i < N; i++) CUDA_OK(cudaFreeAsync(again[i], s));
  CUDA_OK(cudaStreamSynchronize(s));

  /* A large block freed on a held stream: an allocation that needs its memory waits for the
   * stream (like the runtime's pool) instead of failing. */
  size_t total, avail;
  CUDA_OK(cudaMemGetInfo(&avail, &total));
  size_t big = (avail / 2 + (2 << 20)) & ~(size_t)((2 << 20) - 1);
  void *x;
  CUDA_OK(cudaMallocAsync(&x, big, s));
  CHECK_EQ(hold(s, 1), 0);
  CUDA_OK(cudaFreeAsync(x, s));
  void *y;
  CUDA_OK(cudaMallocAsync(&y, big, 0));
  CUDA_OK(cudaFree(y));

  CUDA_OK(cudaFree(c));
  CUDA_OK(cudaStreamDestroy(s));
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  printf("ok\n");
  return 0;
}
