/* A check of large buffers for the jobs of the sharing tests, which read back every byte of their
 * device memory each round. */
#ifndef CUDAW_TEST_BYTES_H
#define CUDAW_TEST_BYTES_H

#include <stddef.h>

/* The index of the first of bytes[0..count) that is not `want`, or count when all are.
 * Not instrumented in a sanitizer build: a shadow check per byte made the sharing jobs' rounds
 * (72 MiB read back) several times slower than in the plain build, whose speed the sharing tests'
 * round counts are set for, and made the sanitizer suite run minutes longer. The jobs fill the
 * range with a cudaMemcpy just before, and its interceptor checks the whole range. */
__attribute__((no_sanitize("address", "undefined"), noinline)) static size_t
test_first_byte_not(const unsigned char *bytes, size_t count, unsigned char want)
{
  size_t k = 0;
  while (k < count && bytes[k] == want) k++;
  return k;
}

#endif
