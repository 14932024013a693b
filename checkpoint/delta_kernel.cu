// The device side of delta_hash.h: one block per piece, each thread adds the terms of a strided
// share of the piece's words, the block sums them up and thread 0 writes the piece's checksum.
// Built into a fatbinary (delta_kernel_image.h, by the regenerate_delta_kernel target) and
// loaded by cudaw through the driver API, so it needs nothing from the program. The table and the
// sums are in page-locked host memory, read and written by the device directly.
#include <stdint.h>

#include "delta_hash.h"

#define THREADS 256

extern "C" __global__ void __launch_bounds__(THREADS)
cudaw_delta_hash(const ckpt_delta_piece *table, unsigned long long count, unsigned long long *sums)
{
  __shared__ uint64_t partial[THREADS];
  for (unsigned long long p = blockIdx.x; p < count; p += gridDim.x) {
    ckpt_delta_piece item = table[p];
    const uint64_t *words = (const uint64_t *)item.address;
    uint64_t full = item.bytes / 8, sum = 0;
    for (uint64_t i = threadIdx.x; i < full; i += THREADS)
      sum += ckpt_delta_word(words[i], i);
    if (threadIdx.x == 0 && item.bytes % 8) {
      const unsigned char *tail = (const unsigned char *)item.address + full * 8;
      uint64_t w = 0;
      for (uint64_t b = 0; b < item.bytes % 8; b++) w |= (uint64_t)tail[b] << (8 * b);
      sum += ckpt_delta_word(w, full);
    }
    partial[threadIdx.x] = sum;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0) sums[p] = partial[0] + item.bytes;
    __syncthreads();
  }
}
