// The device side of delta_hash.h: one block per piece, each thread adds the terms of a strided
// share of the piece's words, the block sums them up and thread 0 writes the piece's checksum.
// Built into a fatbinary (delta_kernel_image.h, by the regenerate_delta_kernel target), loaded by cudaw
// through the driver API, so it needs nothing from the program. The table and the sums are in
// page-locked host memory, read and written by the device directly.
#include <stdint.h>

#define CKPT_DELTA_KEY 0x9E3779B97F4A7C15ull
#define THREADS 256

struct piece {
  uint64_t address, bytes;
};

__device__ __forceinline__ uint64_t mix(uint64_t x)
{
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

extern "C" __global__ void __launch_bounds__(THREADS)
cudaw_delta_hash(const piece *table, unsigned long long count, unsigned long long *sums)
{
  __shared__ uint64_t partial[THREADS];
  for (unsigned long long p = blockIdx.x; p < count; p += gridDim.x) {
    piece item = table[p];
    const uint64_t *words = (const uint64_t *)item.address;
    uint64_t full = item.bytes / 8, sum = 0;
    for (uint64_t i = threadIdx.x; i < full; i += THREADS)
      sum += mix(words[i] ^ ((i + 1) * CKPT_DELTA_KEY));
    if (threadIdx.x == 0 && item.bytes % 8) {
      const unsigned char *tail = (const unsigned char *)item.address + full * 8;
      uint64_t w = 0;
      for (uint64_t b = 0; b < item.bytes % 8; b++) w |= (uint64_t)tail[b] << (8 * b);
      sum += mix(w ^ ((full + 1) * CKPT_DELTA_KEY));
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
