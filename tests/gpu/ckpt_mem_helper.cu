// Description: helper for the checkpoint GPU tests, run natively as "another process":
//   ckpt_mem_helper info         prints "free <bytes> total <bytes>" of device 0 (cudaMemGetInfo)
//   ckpt_mem_helper hog <bytes>  allocates that much device memory, prints "holding <bytes>",
//                                and keeps it until killed
// Exits 77 ("skipped: no GPU") without a GPU.
#include <csignal>
#include <cstring>
#include <unistd.h>

#include "gpu_common.h"

int main(int argc, char **argv)
{
  require_gpu();
  if (argc >= 2 && !strcmp(argv[1], "info")) {
    size_t free_bytes = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    printf("free %zu total %zu\n", free_bytes, total);
    return 0;
  }
  if (argc >= 3 && !strcmp(argv[1], "hog")) {
    size_t bytes = strtoull(argv[2], NULL, 10);
    void *p;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    printf("holding %zu\n", bytes);
    fflush(stdout);
    for (;;) pause();
  }
  fprintf(stderr, "usage: ckpt_mem_helper info | hog <bytes>\n");
  return 2;
}
