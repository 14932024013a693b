/* Description: the job the Slurm tests run with srun: an ordinary program linked against the
 * CUDA runtime by name (no cudaw), which cudaw reaches only through the SPANK plugin. It prints
 * what cudaMemGetInfo says, fills MiB of device memory with a pattern, touches DIR/ready and
 * keeps calling the runtime until DIR/go appears (so that it can be suspended meanwhile), then
 * reads everything back and verifies it.
 *   usage: slurm_job MiB DIR        exit 0 verified, 1 failed */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int fail(const char *what, cudaError_t error) {
  printf("slurm_job: %s: %s\n", what, cudaGetErrorName(error));
  return 1;
}

static uint32_t pattern(size_t i) { return (uint32_t)(i * 2654435761u) ^ 0x5eed1234u; }

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: slurm_job MiB DIR\n");
    return 2;
  }
  size_t bytes = (size_t)strtoul(argv[1], NULL, 10) << 20, words = bytes / 4;
  size_t free_bytes = 0, total_bytes = 0;
  cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (e != cudaSuccess) return fail("cudaMemGetInfo", e);
  printf("slurm_job: cudaMemGetInfo total=%zu free=%zu\n", total_bytes, free_bytes);
  if (!bytes) return 0;
  uint32_t *host = malloc(bytes), *device = NULL;
  if (!host) return 1;
  for (size_t i = 0; i < words; i++) host[i] = pattern(i);
  if ((e = cudaMalloc((void **)&device, bytes)) != cudaSuccess) return fail("cudaMalloc", e);
  if ((e = cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice)) != cudaSuccess)
    return fail("cudaMemcpy to the device", e);
  char ready[4096], go[4096];
  snprintf(ready, sizeof ready, "%s/ready", argv[2]);
  snprintf(go, sizeof go, "%s/go", argv[2]);
  printf("slurm_job: pid %ld holds %zu MiB\n", (long)getpid(), bytes >> 20);
  fflush(stdout);
  close(open(ready, O_WRONLY | O_CREAT, 0644));
  uint32_t probe[1024];
  for (int i = 0; access(go, F_OK) != 0; i++) {
    if (i > 2400) return fail("no DIR/go within 120 s", cudaSuccess);
    /* While the job is suspended this call waits at cudaw's gate until the restore. */
    if ((e = cudaMemcpy(probe, device, sizeof probe, cudaMemcpyDeviceToHost)) != cudaSuccess)
      return fail("cudaMemcpy probe", e);
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  memset(host, 0, bytes);
  if ((e = cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost)) != cudaSuccess)
    return fail("cudaMemcpy back", e);
  for (size_t i = 0; i < words; i++)
    if (host[i] != pattern(i)) {
      printf("slurm_job: word %zu is %08x, expected %08x\n", i, host[i], pattern(i));
      return 1;
    }
  printf("slurm_job: verified %zu MiB\n", bytes >> 20);
  cudaFree(device);
  free(host);
  return 0;
}
