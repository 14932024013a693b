// Description: helper for the checkpoint GPU tests, run natively as "another process":
//   ckpt_mem_helper info         prints "free <bytes> total <bytes>" of device 0 (cudaMemGetInfo)
//   ckpt_mem_helper hog <bytes>  allocates that much device memory, prints "holding <bytes>",
//                                and keeps it until killed
//   ckpt_mem_helper touch <GiB>  faults that much host memory in (16 threads) and gives it back:
//                                a VM's memory touched for the first time since boot costs the
//                                hypervisor several times more (~3 GB/s on the H100 machine), once
//   ckpt_mem_helper ceiling      prints "d2h <GB/s> h2d <GB/s>": pinned copies of 4 GiB in 64 MiB
//                                pieces each way, the best of 3 (the reference a pause is held to)
// Exits 77 ("skipped: no GPU") without a GPU.
#include <chrono>
#include <csignal>
#include <sys/mman.h>
#include <thread>
#include <vector>
#include <ctime>
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
  if (argc >= 3 && !strcmp(argv[1], "touch")) {
    size_t bytes = strtoull(argv[2], NULL, 10) << 30, part = bytes / 16;
    char *p = (char *)mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                           MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int t = 0; t < 16; t++)
      threads.emplace_back([=] {
        for (size_t i = 0; i < part; i += 4096) p[(size_t)t * part + i] = 1;
      });
    for (auto &t : threads) t.join();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    munmap(p, bytes);
    printf("touched %zu GiB in %.2f s (%.2f GB/s)\n", bytes >> 30, s, (double)bytes / s / 1e9);
    return 0;
  }
  if (argc >= 2 && !strcmp(argv[1], "ceiling")) {
    const size_t total = (size_t)4 << 30, piece = (size_t)64 << 20;
    char *device, *host;
    cudaStream_t stream;
    CUDA_CHECK(cudaMalloc(&device, total));
    CUDA_CHECK(cudaHostAlloc(&host, total, cudaHostAllocDefault));
    CUDA_CHECK(cudaMemset(device, 1, total));
    memset(host, 2, total);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    double best[2] = {0, 0};
    for (int round = 0; round < 3; round++)
      for (int d2h = 0; d2h < 2; d2h++) {
        timespec a, b;
        CUDA_CHECK(cudaStreamSynchronize(stream));
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (size_t at = 0; at < total; at += piece)
          CUDA_CHECK(cudaMemcpyAsync(d2h ? host + at : device + at, d2h ? device + at : host + at,
                                     piece, d2h ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                                     stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        clock_gettime(CLOCK_MONOTONIC, &b);
        double gbps = (double)total / ((double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9) / 1e9;
        if (gbps > best[d2h]) best[d2h] = gbps;
      }
    printf("d2h %.2f h2d %.2f\n", best[1], best[0]);
    return 0;
  }
  fprintf(stderr, "usage: ckpt_mem_helper info | hog <bytes> | touch <GiB> | ceiling\n");
  return 2;
}
