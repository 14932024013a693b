/* Description: a job for the sharing tests: allocates BYTES of device memory in four pieces,
 * then for ITERATIONS rounds reads every piece back, checks that each byte holds what the last
 * round wrote (so memory lost or mixed up by a swap fails it), and writes the next value.
 * With "too-large" it expects its allocation to fail with cudaErrorMemoryAllocation; with
 * "idle-first" it sleeps 12 s (no CPU, no GPU) between allocating and the rounds; with "stuck"
 * a second thread stays 8 s inside a counted API call (a host function, which the emulated
 * device runs inside the call), so that the job cannot reach a pause meanwhile.
 *   usage: sched_share_job BYTES ITERATIONS [too-large|idle-first|stuck]
 * Exit 0: data verified (or the expected error); 1: a check failed. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"

#define PIECES 4

static unsigned char value(int piece, long round)
{
  return (unsigned char)(getpid() * 7 + piece * 31 + round);
}

static void CUDART_CB stay(void *seconds)
{
  sleep(*(unsigned *)seconds);
}

static void *stuck_thread(void *unused)
{
  (void)unused;
  static unsigned seconds = 8;
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream) == cudaSuccess);
  CHECK(cudaLaunchHostFunc(stream, stay, &seconds) == cudaSuccess);
  return NULL;
}

int main(int argc, char **argv)
{
  CHECK(argc >= 3, "usage: %s BYTES ITERATIONS [too-large|idle-first|stuck]", argv[0]);
  size_t bytes = strtoull(argv[1], NULL, 0), piece_bytes = bytes / PIECES;
  long rounds = strtol(argv[2], NULL, 0);
  int too_large = argc > 3 && strcmp(argv[3], "too-large") == 0;
  void *piece[PIECES];
  for (int i = 0; i < PIECES; i++) {
    cudaError_t e = cudaMalloc(&piece[i], piece_bytes);
    if (too_large && e == cudaErrorMemoryAllocation) {
      printf("pid %d: cudaMalloc of piece %d: cudaErrorMemoryAllocation, as expected\n",
             (int)getpid(), i);
      return 0;
    }
    CHECK(e == cudaSuccess, "cudaMalloc piece %d: %s", i, cudaGetErrorName(e));
    CHECK(cudaMemset(piece[i], value(i, 0), piece_bytes) == cudaSuccess);
  }
  CHECK(!too_large, "pid %d: the whole %zu bytes were allocated; expected "
        "cudaErrorMemoryAllocation", (int)getpid(), bytes);
  if (argc > 3 && strcmp(argv[3], "idle-first") == 0) sleep(12);
  pthread_t stuck;
  bool stuck_started = argc > 3 && strcmp(argv[3], "stuck") == 0 &&
                       pthread_create(&stuck, NULL, stuck_thread, NULL) == 0;
  unsigned char *host = malloc(piece_bytes);
  CHECK(host != NULL);
  for (long round = 0; round < rounds; round++) {
    for (int i = 0; i < PIECES; i++) {
      CHECK(cudaMemcpy(host, piece[i], piece_bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
      unsigned char want = value(i, round);
      for (size_t k = 0; k < piece_bytes; k++)
        CHECK(host[k] == want, "pid %d round %ld piece %d byte %zu: %u, expected %u",
              (int)getpid(), round, i, k, host[k], want);
      CHECK(cudaMemset(piece[i], value(i, round + 1), piece_bytes) == cudaSuccess);
    }
  }
  if (stuck_started) pthread_join(stuck, NULL);
  for (int i = 0; i < PIECES; i++) CHECK(cudaFree(piece[i]) == cudaSuccess);
  free(host);
  printf("pid %d: %ld rounds over %zu bytes verified\n", (int)getpid(), rounds, bytes);
  return 0;
}
