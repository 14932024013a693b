// Description: CUDA IPC: export a cudaMalloc'd buffer with cudaIpcGetMemHandle, open it in a
// second process (this program run again), which writes to it. cudaw refuses the export
// (cudaErrorNotSupported, its documented behaviour): the program reports that as a refusal
// (exit 3).
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>
#include "corpus.h"
__global__ void mark(int *p) { p[threadIdx.x] = 1000 + threadIdx.x; }
static int child(const char *hex)
{
  cudaIpcMemHandle_t handle;
  for (size_t i = 0; i < sizeof handle; i++) sscanf(hex + 2 * i, "%2hhx", &handle.reserved[i]);
  void *p;
  CK(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess));
  mark<<<1, 64>>>((int *)p);
  corpus_sync();
  CK(cudaIpcCloseMemHandle(p));
  return 0;
}
int main(int argc, char **argv)
{
  if (argc == 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
  int *d;
  CK(cudaMalloc(&d, 64 * sizeof(int)));
  CK(cudaMemset(d, 0, 64 * sizeof(int)));
  cudaIpcMemHandle_t handle;
  cudaError_t e = cudaIpcGetMemHandle(&handle, d);
  if (e == cudaErrorNotSupported) {
    std::printf("REFUSED cudaIpcGetMemHandle: %s\n", cudaGetErrorName(e));
    return 3;
  }
  CK(e);
  char hex[2 * sizeof handle + 1];
  for (size_t i = 0; i < sizeof handle; i++)
    snprintf(hex + 2 * i, 3, "%02x", (unsigned char)handle.reserved[i]);
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", argv[0], "--child", hex, (char *)nullptr);
    _exit(127);
  }
  int status;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("ERROR child failed (status %#x)\n", status);
    return 2;
  }
  int h[64];
  CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 64; i++)
    if (h[i] != 1000 + i) WRONG("h[%d] = %d", i, h[i]);
  return corpus_pass("ipc");
}
