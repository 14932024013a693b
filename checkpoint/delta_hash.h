/* The chunk checksum of delta checkpoints, computed on the device by delta_kernel.cu (shipped as
 * a fatbinary in delta_kernel_image.h) and by this reference on the host and the emulated device. The sum,
 * mod 2^64, over a piece's 8-byte little-endian words w_i (a short last word padded with zero
 * bytes) of mix(w_i ^ (i + 1) * KEY), plus the piece's length. mix is a bijection, so two pieces
 * that differ in one word always differ in checksum: a changed byte is never missed; changes in
 * several words cancel out with a chance of about 2^-64. A sum does not depend on the order of
 * its terms, so the device adds them up in any order and still agrees with the host. */
#ifndef CUDAW_CKPT_DELTA_HASH_H
#define CUDAW_CKPT_DELTA_HASH_H

#include <stdint.h>
#include <string.h>

#define CKPT_DELTA_KEY 0x9E3779B97F4A7C15ull

/* The kernel includes this header too: one definition on both sides. */
#ifdef __CUDACC__
#define CKPT_DELTA_FUNCTION __host__ __device__ __forceinline__ static
#else
#define CKPT_DELTA_FUNCTION static inline
#endif

/* MurmurHash3's 64-bit finalizer: xor-shifts and odd multiplications, each invertible. */
CKPT_DELTA_FUNCTION uint64_t ckpt_delta_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

CKPT_DELTA_FUNCTION uint64_t ckpt_delta_word(uint64_t word, uint64_t index) {
  return ckpt_delta_mix(word ^ ((index + 1) * CKPT_DELTA_KEY));
}

/* The checksum of n bytes at data (any alignment; little-endian host). */
CKPT_DELTA_FUNCTION uint64_t ckpt_delta_hash(const void *data, uint64_t n) {
  const uint8_t *bytes = (const uint8_t *)data;
  uint64_t sum = n, words = n / 8, i;
  for (i = 0; i < words; i++) {
    uint64_t w;
    memcpy(&w, bytes + i * 8, 8);
    sum += ckpt_delta_word(w, i);
  }
  if (n % 8) {
    uint64_t w = 0;
    memcpy(&w, bytes + words * 8, (size_t)(n % 8));
    sum += ckpt_delta_word(w, words);
  }
  return sum;
}

/* One piece for the device pass: its (real) device address and length; the table the kernel
 * reads is an array of these. */
struct ckpt_delta_piece {
  uint64_t address;
  uint64_t bytes;
};

#endif
