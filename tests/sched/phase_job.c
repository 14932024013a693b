/* Description: a job with idle phases for the sharing tests: allocates BYTES of device memory in
 * four pieces, then PHASES times runs a GPU phase (for GPU_MS: read every piece back, check that
 * each byte holds what the last round wrote, write the next value) and a host phase of HOST_MS
 * without any CUDA call, spent spinning on the CPU ("spin": data loading) or asleep ("sleep").
 * With "sync" the GPU phase is one piece of device work of GPU_MS (the emulated device's deferred
 * work, as a long kernel) waited for in cudaDeviceSynchronize, after one round. With "work" after
 * them, a GPU phase lasts GPU_MS of the job's own CPU time, not of the clock: a fixed amount of
 * work however long the job waits for its turn (the fairness test).
 *   usage: sched_phase_job BYTES PHASES GPU_MS HOST_MS spin|sleep|sync [work]
 * Prints "phases <n> rounds <r> verified in <seconds> s". Exit 0: data verified; 1: a check
 * failed. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bytes.h"
#include "test.h"

#define PIECES 4

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The process's CPU time: while it waits for its turn (swapped out) it does not move. */
static double cpu_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double work_until;

static int work_done(void *unused)
{
  (void)unused;
  return now() >= work_until;
}

/* A long kernel: device work that ends after `seconds`, waited for in a synchronisation. */
static void long_kernel(double seconds)
{
  const char *path = getenv("CUDAW_REAL_CUDART");
  void *emu = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  int (*defer)(int (*)(void *), void *) =
      emu ? (int (*)(int (*)(void *), void *))dlsym(emu, "cudaw_emu_defer") : NULL;
  CHECK(defer, "sync needs the emulated device (CUDAW_REAL_CUDART)");
  work_until = now() + seconds;
  CHECK(defer(work_done, NULL) == 0);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

static unsigned char value(int piece, long round)
{
  return (unsigned char)(getpid() * 7 + piece * 31 + round);
}

int main(int argc, char **argv)
{
  CHECK(argc == 6 || (argc == 7 && !strcmp(argv[6], "work")),
        "usage: %s BYTES PHASES GPU_MS HOST_MS spin|sleep|sync [work]", argv[0]);
  double (*gpu_clock)(void) = argc == 7 ? cpu_now : now;
  size_t piece_bytes = strtoull(argv[1], NULL, 0) / PIECES;
  long phases = strtol(argv[2], NULL, 0);
  double gpu_seconds = strtod(argv[3], NULL) * 1e-3, host_seconds = strtod(argv[4], NULL) * 1e-3;
  int spin = strcmp(argv[5], "spin") == 0, sync = strcmp(argv[5], "sync") == 0;
  double start = now();
  void *piece[PIECES];
  for (int i = 0; i < PIECES; i++) {
    cudaError_t e = cudaMalloc(&piece[i], piece_bytes);
    CHECK(e == cudaSuccess, "cudaMalloc piece %d: %s", i, cudaGetErrorName(e));
    CHECK(cudaMemset(piece[i], value(i, 0), piece_bytes) == cudaSuccess);
  }
  unsigned char *host = malloc(piece_bytes);
  CHECK(host != NULL);
  long round = 0;
  for (long phase = 0; phase < phases; phase++) {
    double until = gpu_clock() + gpu_seconds;
    do {
      for (int i = 0; i < PIECES; i++) {
        CHECK(cudaMemcpy(host, piece[i], piece_bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
        unsigned char want = value(i, round);
        size_t k = test_first_byte_not(host, piece_bytes, want);
        CHECK(k == piece_bytes, "pid %d round %ld piece %d byte %zu: %u, expected %u",
              (int)getpid(), round, i, k, host[k], want);
        CHECK(cudaMemset(piece[i], value(i, round + 1), piece_bytes) == cudaSuccess);
      }
      round++;
      if (sync) long_kernel(gpu_seconds);
    } while (gpu_clock() < until);
    until = now() + host_seconds;
    if (spin) {
      volatile unsigned long work = 0;
      while (now() < until) work++;
    } else {
      struct timespec ts = {(time_t)host_seconds, (long)((host_seconds - (time_t)host_seconds) * 1e9)};
      nanosleep(&ts, NULL);
    }
  }
  for (int i = 0; i < PIECES; i++) CHECK(cudaFree(piece[i]) == cudaSuccess);
  free(host);
  printf("pid %d: phases %ld rounds %ld verified in %.3f s\n", (int)getpid(), phases, round,
         now() - start);
  return 0;
}
