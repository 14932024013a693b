/* Description: bad input gets the real runtime's errors, never a crash: cudaFree of an interior,
 * unknown or already freed pointer, copies and memsets (1D, 2D, 3D, batched, graph-free paths)
 * running past an allocation's end (also into a smaller allocation at a freed one's address),
 * all cudaErrorInvalidValue and reported by cudaGetLastError.
 * With CUDAW_CHECK=1 a use after free is refused and logged with the allocation's size and the
 * call that freed it (the ctest regex checks the log line). */
#include "vmemshim.h"

int main(int argc, char **argv)
{
  int check_mode = argc > 1 && strcmp(argv[1], "--check") == 0;
  unsigned char host[8192];
  memset(host, 1, sizeof host);
  void *a, *b;
  CUDA_OK(cudaMalloc(&a, 1000));
  CUDA_OK(cudaMalloc(&b, 4096));

  /* cudaFree: interior, unknown (inside the virtual range), double. */
  CUDA_FAILS(cudaFree((char *)a + 8), cudaErrorInvalidValue);
  if (vmem_expected()) {
    CUDA_FAILS(cudaFree((char *)b + (64 << 20)), cudaErrorInvalidValue);
  }
  void *c;
  CUDA_OK(cudaMalloc(&c, 300));
  CUDA_OK(cudaFree(c));
  CUDA_FAILS(cudaFree(c), cudaErrorInvalidValue);

  /* Regression (per-thread range-check cache): a check that passed for a freed allocation must
   * not let a copy run past the end of a smaller one that took its place. */
  if (vmem_expected()) {
    void *big, *small;
    CUDA_OK(cudaMalloc(&big, 4096));
    CUDA_OK(cudaMemcpy(big, host, 4096, cudaMemcpyHostToDevice));
    CUDA_OK(cudaFree(big));
    CUDA_OK(cudaMalloc(&small, 512));
    CHECK(small == big, "vmem no longer reuses a freed slot at once (%p, %p): rewrite this check",
          small, big);
    CUDA_FAILS(cudaMemcpy(small, host, 4096, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    CUDA_OK(cudaFree(small));
  }

  /* Ranges past the end of an allocation, which vmem packs next to others. */
  CUDA_FAILS(cudaMemcpy(a, host, 1001, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  CUDA_FAILS(cudaMemcpy(host, (char *)a + 500, 501, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  CUDA_FAILS(cudaMemcpyAsync(b, a, 1024, cudaMemcpyDeviceToDevice, 0), cudaErrorInvalidValue);
  CUDA_FAILS(cudaMemset(a, 0, 1001), cudaErrorInvalidValue);
  CUDA_FAILS(cudaMemsetAsync((char *)b + 4000, 0, 97, 0), cudaErrorInvalidValue);
  CUDA_FAILS(cudaMemset2D(b, 1024, 0, 1000, 5), cudaErrorInvalidValue);
  CUDA_FAILS(cudaMemcpy2D(b, 1024, host, 1000, 1000, 5, cudaMemcpyHostToDevice),
             cudaErrorInvalidValue);
  struct cudaMemcpy3DParms p = {0};
  p.srcPtr = (struct cudaPitchedPtr){host, 1024, 1024, 2};
  p.dstPtr = (struct cudaPitchedPtr){b, 1024, 1024, 2};
  p.extent = (struct cudaExtent){1024, 2, 3}; /* 6 KiB into 4 KiB */
  p.kind = cudaMemcpyHostToDevice;
  CUDA_FAILS(cudaMemcpy3D(&p), cudaErrorInvalidValue);
  p.extent = (struct cudaExtent){1024, 2, 2};
  CUDA_OK(cudaMemcpy3D(&p)); /* exactly fits */
  p.dstPos = (struct cudaPos){1, 0, 0};
  CUDA_FAILS(cudaMemcpy3DAsync(&p, 0), cudaErrorInvalidValue);
  CUDA_FAILS(cudaMemset3D(((struct cudaPitchedPtr){a, 512, 512, 2}), 0,
                          ((struct cudaExtent){512, 2, 1})), cudaErrorInvalidValue);
  void *dsts[1] = {a};
  const void *srcs[1] = {host};
  size_t sizes[1] = {2000};
  struct cudaMemcpyAttributes attr = {0};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t index = 0;
  CUDA_FAILS(cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, &index, 1, 0),
             cudaErrorInvalidValue);

  /* Within bounds still works, and nothing was written by the refused calls. */
  CUDA_OK(cudaMemcpy(host, b, 4096, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(a, host, 1000, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset((char *)a + 999, 0, 1));

  /* Use after free: the freed slot is not handed out again here (nothing allocates). Without
   * CUDAW_CHECK it is refused as memory nothing owns; with it, the log names the free. */
  void *gone;
  CUDA_OK(cudaMalloc(&gone, 2048));
  CUDA_OK(cudaFree(gone));
  if (vmem_expected()) {
    CUDA_FAILS(cudaMemcpy(gone, host, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    CUDA_FAILS(cudaMemset(gone, 0, 16), cudaErrorInvalidValue);
  }
  if (check_mode) {
    /* An unranged pointer argument (cudaMemPrefetchAsync's is ranged; cudaMemcpyToSymbol's
     * symbol is not a pointer): CUDAW_CHECK validates every one. */
    CUDA_FAILS(cudaMemcpy(host, gone, 0 + 1, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  }

  /* cudaGetLastError was cleared by each CUDA_FAILS: nothing left over. */
  CUDA_OK(cudaFree(a));
  CUDA_OK(cudaFree(b));
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  printf("ok\n");
  return 0;
}
