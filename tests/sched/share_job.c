/* Description: a job for the sharing tests: holds BYTES of device memory in blocks, and for
 * ITERATIONS rounds reads every block back, checks that each byte holds what the last round
 * wrote (so memory lost or mixed up by a swap fails it), and writes the next value. How it
 * allocates (the patterns frameworks use) is the mode:
 *   pieces (default)  four blocks of BYTES/4, allocated first
 *   big               one block of BYTES
 *   small             blocks of 512 KiB (sizes up to half a granule share arenas)
 *   grow              blocks of BYTES/8 added one per round up to BYTES, then freed one per round
 *                     down to two, and so on (every step asks cudawd again)
 *   async             stream-ordered: cudaMallocAsync/cudaFreeAsync of BYTES/8 blocks on a stream,
 *                     one block freed and another allocated (a different size) every round
 *   too-large         expects its allocation to fail with cudaErrorMemoryAllocation
 *   idle-first        pieces, then sleeps 12 s (no CPU, no GPU) before the rounds
 *   phases            pieces, with an idle phase (1.2 s without a CUDA call, longer than the
 *                     idle hint's default 250 ms) after every 8th round, so that its image gets cold
 *   constant          pieces, but the first block keeps the value of round 0 (checked every round,
 *                     never written again): a delta checkpoint skips it as unchanged
 *   stuck             pieces; a second thread stays 8 s inside a counted API call (a host
 *                     function, which the emulated device runs inside the call), so that the job
 *                     cannot reach a pause meanwhile
 *   usage: sched_share_job BYTES ITERATIONS [MODE]
 * Exit 0: data verified (or the expected error); 1: a check failed. */
#define _GNU_SOURCE /* usleep */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytes.h"
#include "test.h"

#define MAX_BLOCKS 512
#define SMALL_BLOCK (512u << 10)

struct block {
  void *ptr;       /* NULL: not allocated */
  size_t bytes;
  long written;    /* the round whose value it holds */
};

static struct block blocks[MAX_BLOCKS];
static cudaStream_t stream; /* async mode */
static bool async_mode;
static bool constant_first; /* constant mode: block 0 is written once */

static unsigned char value(int block, long round)
{
  return (unsigned char)(getpid() * 7 + block * 31 + round);
}

static void CUDART_CB stay(void *seconds)
{
  sleep(*(unsigned *)seconds);
}

static void *stuck_thread(void *unused)
{
  (void)unused;
  static unsigned seconds = 8;
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s) == cudaSuccess);
  CHECK(cudaLaunchHostFunc(s, stay, &seconds) == cudaSuccess);
  return NULL;
}

/* Allocate block i of `bytes` and fill it with its value for `round`; the error if any. */
static cudaError_t allocate(int i, size_t bytes, long round)
{
  struct block *b = &blocks[i];
  cudaError_t e = async_mode ? cudaMallocAsync(&b->ptr, bytes, stream) : cudaMalloc(&b->ptr, bytes);
  if (e != cudaSuccess) {
    b->ptr = NULL;
    return e;
  }
  b->bytes = bytes;
  b->written = round;
  e = async_mode ? cudaMemsetAsync(b->ptr, value(i, round), bytes, stream)
                 : cudaMemset(b->ptr, value(i, round), bytes);
  CHECK(e == cudaSuccess, "memset block %d: %s", i, cudaGetErrorName(e));
  return cudaSuccess;
}

static void must_allocate(int i, size_t bytes, long round)
{
  cudaError_t e = allocate(i, bytes, round);
  CHECK(e == cudaSuccess, "pid %d: allocating block %d (%zu bytes) in round %ld: %s",
        (int)getpid(), i, bytes, round, cudaGetErrorName(e));
}

static void release(int i)
{
  struct block *b = &blocks[i];
  cudaError_t e = async_mode ? cudaFreeAsync(b->ptr, stream) : cudaFree(b->ptr);
  CHECK(e == cudaSuccess, "freeing block %d: %s", i, cudaGetErrorName(e));
  b->ptr = NULL;
}

/* Every live block holds its value; then each gets the value of `round`. */
static void verify_and_write(unsigned char *host, long round)
{
  for (int i = 0; i < MAX_BLOCKS; i++) {
    struct block *b = &blocks[i];
    if (!b->ptr) continue;
    if (async_mode) {
      CHECK(cudaMemcpyAsync(host, b->ptr, b->bytes, cudaMemcpyDeviceToHost, stream) ==
            cudaSuccess);
      CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
    } else {
      CHECK(cudaMemcpy(host, b->ptr, b->bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    }
    unsigned char want = value(i, b->written);
    size_t k = test_first_byte_not(host, b->bytes, want);
    CHECK(k == b->bytes, "pid %d round %ld block %d byte %zu: %u, expected %u", (int)getpid(),
          round, i, k, host[k], want);
    if (constant_first && i == 0) continue;
    b->written = round;
    cudaError_t e = async_mode ? cudaMemsetAsync(b->ptr, value(i, round), b->bytes, stream)
                               : cudaMemset(b->ptr, value(i, round), b->bytes);
    CHECK(e == cudaSuccess);
  }
}

static int live_blocks(void)
{
  int n = 0;
  for (int i = 0; i < MAX_BLOCKS; i++) n += blocks[i].ptr != NULL;
  return n;
}

int main(int argc, char **argv)
{
  CHECK(argc >= 3, "usage: %s BYTES ITERATIONS [MODE]", argv[0]);
  size_t bytes = strtoull(argv[1], NULL, 0);
  long rounds = strtol(argv[2], NULL, 0);
  const char *mode = argc > 3 && argv[3][0] ? argv[3] : "pieces";
  bool too_large = !strcmp(mode, "too-large"), grow = !strcmp(mode, "grow");
  async_mode = !strcmp(mode, "async");
  constant_first = !strcmp(mode, "constant");
  bool small = !strcmp(mode, "small");
  int count = !strcmp(mode, "big") ? 1 : small ? (int)(bytes / SMALL_BLOCK) : grow || async_mode ? 8 : 4;
  CHECK(count >= 1 && count <= MAX_BLOCKS, "%zu bytes in %s blocks: too many or none", bytes, mode);
  size_t block_bytes = small ? SMALL_BLOCK : bytes / (size_t)count;
  if (async_mode) CHECK(cudaStreamCreate(&stream) == cudaSuccess);
  int first = grow ? 1 : count; /* grow starts small */
  for (int i = 0; i < first; i++) {
    cudaError_t e = allocate(i, block_bytes, 0);
    if (too_large && e == cudaErrorMemoryAllocation) {
      printf("pid %d: cudaMalloc of piece %d: cudaErrorMemoryAllocation, as expected\n",
             (int)getpid(), i);
      return 0;
    }
    CHECK(e == cudaSuccess, "pid %d: cudaMalloc block %d: %s", (int)getpid(), i,
          cudaGetErrorName(e));
  }
  CHECK(!too_large, "pid %d: the whole %zu bytes were allocated; expected "
        "cudaErrorMemoryAllocation", (int)getpid(), bytes);
  if (!strcmp(mode, "idle-first")) sleep(12);
  pthread_t stuck;
  bool stuck_started = !strcmp(mode, "stuck") && pthread_create(&stuck, NULL, stuck_thread, NULL) == 0;
  unsigned char *host = malloc(bytes);
  CHECK(host != NULL);
  bool growing = true, phases = !strcmp(mode, "phases");
  for (long round = 1; round <= rounds; round++) {
    verify_and_write(host, round);
    if (phases && round % 8 == 0) usleep(1200 * 1000);
    if (grow) { /* one step per round: up to `count` blocks, down to two, up again */
      int live = live_blocks();
      if (growing && live == count) growing = false;
      if (!growing && live == 2) growing = true;
      if (growing) must_allocate(live, block_bytes, round);
      else release(live - 1);
    } else if (async_mode) { /* replace one block by one of another size, stream-ordered */
      int i = (int)(round % count);
      release(i);
      size_t size = block_bytes / 2 + (size_t)(round % 3) * (block_bytes / 4);
      must_allocate(i, size & ~(size_t)0xff, round);
    }
  }
  verify_and_write(host, rounds + 1);
  if (stuck_started) pthread_join(stuck, NULL);
  for (int i = 0; i < MAX_BLOCKS; i++)
    if (blocks[i].ptr) release(i);
  if (async_mode) CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  free(host);
  printf("pid %d: %ld rounds of %s over %zu bytes verified\n", (int)getpid(), rounds, mode, bytes);
  return 0;
}
