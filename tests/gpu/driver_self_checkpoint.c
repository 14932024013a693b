/* Description: can a process run the driver's process checkpoint (cuCheckpointProcessLock/
 * Checkpoint/Restore/Unlock) on itself? cudaw starts a helper process (cudaw-ckpt-driver) for
 * release-all because these calls take a pid; this pins down why. With a context and 64 MiB
 * allocated, one thread of this process calls them on getpid() while the main thread waits
 * outside CUDA (as the program's threads wait at cudaw's gate). It prints what each call
 * returned, or that it hung (an alarm ends the wait), and checks that the memory survived when
 * all calls succeeded. Exit 0 with the answer printed, 1 on a wrong result, 77 without a GPU. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOAD(name) CUresult (*name)() = (CUresult(*)())dlsym(lib, #name)

static CUresult (*lock_fn)(int, CUcheckpointLockArgs *);
static CUresult (*checkpoint_fn)(int, CUcheckpointCheckpointArgs *);
static CUresult (*restore_fn)(int, CUcheckpointRestoreArgs *);
static CUresult (*unlock_fn)(int, CUcheckpointUnlockArgs *);
static CUresult (*error_name_fn)(CUresult, const char **);
static volatile const char *step = "none";

#define NOT_CALLED ((CUresult)-1)

static const char *name_of(CUresult rc) {
  const char *name = "?";
  if (rc == NOT_CALLED) return "not called";
  error_name_fn(rc, &name);
  return name;
}

static void on_alarm(int sig) {
  (void)sig;
  char line[160];
  int n = snprintf(line, sizeof line, "answer: no: %s on its own pid did not return in 20 s\n",
                   (const char *)step);
  if (write(1, line, (size_t)n) < 0) _exit(1);
  _exit(0);
}

static void *self_checkpoint(void *arg) {
  CUresult *results = arg;
  int pid = getpid();
  CUcheckpointLockArgs lock_args = {.timeoutMs = 5000};
  CUcheckpointCheckpointArgs checkpoint_args = {0};
  CUcheckpointRestoreArgs restore_args = {0};
  CUcheckpointUnlockArgs unlock_args = {0};
  step = "cuCheckpointProcessLock";
  if ((results[0] = lock_fn(pid, &lock_args)) != CUDA_SUCCESS) return NULL;
  step = "cuCheckpointProcessCheckpoint";
  results[1] = checkpoint_fn(pid, &checkpoint_args);
  if (results[1] == CUDA_SUCCESS) {
    step = "cuCheckpointProcessRestore";
    results[2] = restore_fn(pid, &restore_args);
  }
  step = "cuCheckpointProcessUnlock";
  results[3] = unlock_fn(pid, &unlock_args);
  return NULL;
}

int main(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    printf("skipped: no GPU (no libcuda.so.1)\n");
    return 77;
  }
  LOAD(cuInit);
  LOAD(cuDevicePrimaryCtxRetain);
  LOAD(cuCtxSetCurrent);
  LOAD(cuMemAlloc_v2);
  LOAD(cuMemsetD8_v2);
  LOAD(cuMemcpyDtoH_v2);
  LOAD(cuCtxSynchronize);
  lock_fn = dlsym(lib, "cuCheckpointProcessLock");
  checkpoint_fn = dlsym(lib, "cuCheckpointProcessCheckpoint");
  restore_fn = dlsym(lib, "cuCheckpointProcessRestore");
  unlock_fn = dlsym(lib, "cuCheckpointProcessUnlock");
  error_name_fn = dlsym(lib, "cuGetErrorName");
  if (!lock_fn || !checkpoint_fn || !restore_fn || !unlock_fn) {
    printf("skipped: this driver has no cuCheckpointProcess*\n");
    return 77;
  }
  CUcontext ctx;
  CUdeviceptr memory;
  if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS) {
    printf("skipped: no GPU\n");
    return 77;
  }
  const size_t size = 64u << 20;
  if (cuCtxSetCurrent(ctx) || cuMemAlloc_v2(&memory, size) || cuMemsetD8_v2(memory, 0xa5, size) ||
      cuCtxSynchronize()) {
    printf("FAIL: setting up a context with 64 MiB\n");
    return 1;
  }
  signal(SIGALRM, on_alarm);
  alarm(20);
  CUresult results[4] = {NOT_CALLED, NOT_CALLED, NOT_CALLED, NOT_CALLED};
  pthread_t thread;
  pthread_create(&thread, NULL, self_checkpoint, results);
  pthread_join(thread, NULL);
  alarm(0);
  printf("on its own pid: lock %s, checkpoint %s, restore %s, unlock %s\n", name_of(results[0]),
         name_of(results[1]), name_of(results[2]), name_of(results[3]));
  if (results[1] == CUDA_SUCCESS && results[2] == CUDA_SUCCESS && results[3] == CUDA_SUCCESS) {
    unsigned char *host = malloc(size);
    if (!host || cuMemcpyDtoH_v2(host, memory, size) != CUDA_SUCCESS) {
      printf("FAIL: reading the memory back after the self-checkpoint\n");
      return 1;
    }
    for (size_t i = 0; i < size; i++)
      if (host[i] != 0xa5) {
        printf("FAIL: byte %zu is %#x after the self-checkpoint\n", i, host[i]);
        return 1;
      }
    printf("answer: yes: a process can checkpoint and restore itself (64 MiB intact)\n");
  } else {
    printf("answer: no: the driver refuses the process's own pid\n");
  }
  return 0;
}
