/* Description: CUDAW_EMU_SHARED=1 makes processes share one emulated device: a second process sees
 * the first one's context and allocations in cudaMemGetInfo, an allocation past what is left fails
 * with cudaErrorMemoryAllocation, and a process killed with -9 (still a zombie, then reaped) has
 * its share given back. argv[1]: the library; argv[2] "child" in the helper process. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "test.h"

#define MIB ((size_t)1 << 20)
#define CONTEXT (4 * MIB) /* CUDAW_EMU_CONTEXT_MEM */
#define STACK (2 * MIB)   /* the emulated context's stack reservation */

static void *library;
static __typeof__(&cudaMalloc) p_malloc;
static __typeof__(&cudaFree) p_free;
static __typeof__(&cudaMemGetInfo) p_info;

static void load(const char *path) {
  library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) test_fail("dlopen %s: %s", path, dlerror());
  p_malloc = (__typeof__(p_malloc))dlsym(library, "cudaMalloc");
  p_free = (__typeof__(p_free))dlsym(library, "cudaFree");
  p_info = (__typeof__(p_info))dlsym(library, "cudaMemGetInfo");
  CHECK(p_malloc && p_free && p_info);
}

static size_t free_now(void) {
  size_t free_bytes, total;
  CHECK_EQ(p_info(&free_bytes, &total), cudaSuccess);
  CHECK_EQ(total, 64 * MIB);
  return free_bytes;
}

/* The helper: allocates 20 MiB, says so on stdout, and waits to be killed. */
static int child(void) {
  void *p;
  if (p_malloc(&p, 20 * MIB) != cudaSuccess) return 1;
  if (write(1, "k", 1) != 1) return 1;
  for (;;) pause();
}

static pid_t start_child(const char *self, const char *lib) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    execl(self, self, lib, "child", (char *)NULL);
    _exit(127);
  }
  close(fds[1]);
  char c;
  CHECK(read(fds[0], &c, 1) == 1, "the helper did not allocate");
  close(fds[0]);
  return pid;
}

/* Waits (at most 5 s) until cudaMemGetInfo says `expected` free. */
static void expect_free(size_t expected) {
  for (int i = 0; i < 500 && free_now() != expected; i++)
    nanosleep(&(struct timespec){0, 10000000}, NULL);
  CHECK_EQ(free_now(), expected);
}

int main(int argc, char **argv) {
  if (argc < 2) test_fail("usage: %s libcudaw-emu.so", argv[0]);
  char key[64];
  if (argc > 2) {
    load(argv[1]);
    return child();
  }
  snprintf(key, sizeof key, "test-%d", (int)getpid());
  setenv("CUDAW_EMU_SHARED", "1", 1);
  setenv("CUDAW_EMU_SHARED_KEY", key, 1);
  setenv("CUDAW_EMU_MEM", "64M", 1);
  setenv("CUDAW_EMU_CONTEXT_MEM", "4M", 1);
  load(argv[1]);
  size_t alone = free_now();
  CHECK_EQ(alone, 64 * MIB - CONTEXT - STACK);

  pid_t first = start_child(argv[0], argv[1]);
  size_t with_child = alone - CONTEXT - STACK - 20 * MIB;
  CHECK_EQ(free_now(), with_child);
  void *p;
  CHECK_EQ(p_malloc(&p, with_child + 4096), cudaErrorMemoryAllocation);
  CHECK_EQ(p_malloc(&p, with_child), cudaSuccess);
  CHECK_EQ(free_now(), 0);
  CHECK_EQ(p_free(p), cudaSuccess);
  CHECK_EQ(free_now(), with_child);

  /* Killed: its share comes back while it is still a zombie, and after it is reaped. */
  CHECK(kill(first, SIGKILL) == 0);
  expect_free(alone);
  int status;
  CHECK(waitpid(first, &status, 0) == first && WIFSIGNALED(status));
  expect_free(alone);

  /* A second helper, killed and reaped at once: the whole device is ours again. */
  pid_t second = start_child(argv[0], argv[1]);
  CHECK_EQ(free_now(), with_child);
  CHECK(kill(second, SIGKILL) == 0 && waitpid(second, &status, 0) == second);
  CHECK_EQ(p_malloc(&p, alone), cudaSuccess);
  CHECK_EQ(p_free(p), cudaSuccess);

  char name[128];
  snprintf(name, sizeof name, "/cudaw-emu-%u-%s-0", (unsigned)geteuid(), key);
  shm_unlink(name);
  printf("emu_shared: ok\n");
  return 0;
}
