/* cudaw-ckpt-driver: drive the CUDA driver's process checkpoint of another process.
 *   cudaw-ckpt-driver checkpoint <pid> [lock timeout ms]   lock, then checkpoint (device -> host)
 *   cudaw-ckpt-driver restore <pid>                        restore (host -> device), then unlock
 *   cudaw-ckpt-driver state <pid>                          print the driver's state of <pid>
 * A paused cudaw program starts it (CUDAW_CKPT_RELEASE=all, cudaw-ctl checkpoint --release-all)
 * because these calls take a pid and wait for that process's CUDA work: they are made from
 * outside. Prints one line with the seconds each step took. Exit codes: 0 ok, 1 failed
 * (the process is left as it was), 2 usage, 3 the driver lacks these calls. */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef CUresult (*init_fn)(unsigned int);
typedef CUresult (*error_name_fn)(CUresult, const char **);
typedef CUresult (*state_fn)(int, CUprocessState *);
typedef CUresult (*lock_fn)(int, CUcheckpointLockArgs *);
typedef CUresult (*checkpoint_fn)(int, CUcheckpointCheckpointArgs *);
typedef CUresult (*restore_fn)(int, CUcheckpointRestoreArgs *);
typedef CUresult (*unlock_fn)(int, CUcheckpointUnlockArgs *);

static struct {
  error_name_fn error_name;
  state_fn get_state;
  lock_fn lock;
  checkpoint_fn checkpoint;
  restore_fn restore;
  unlock_fn unlock;
} drv;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *name_of(CUresult rc) {
  const char *name = NULL;
  if (drv.error_name && drv.error_name(rc, &name) == CUDA_SUCCESS && name) return name;
  return "unknown CUresult";
}

static const char *state_name(CUprocessState state) {
  switch (state) {
    case CU_PROCESS_STATE_RUNNING: return "running";
    case CU_PROCESS_STATE_LOCKED: return "locked";
    case CU_PROCESS_STATE_CHECKPOINTED: return "checkpointed";
    case CU_PROCESS_STATE_FAILED: return "failed";
  }
  return "unknown";
}

/* Load the driver and its checkpoint calls; 0, or the exit code to use. */
static int load_driver(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "driver checkpoint unavailable: cannot load libcuda.so.1: %s\n", dlerror());
    return 3;
  }
  init_fn init = (init_fn)dlsym(lib, "cuInit");
  drv.error_name = (error_name_fn)dlsym(lib, "cuGetErrorName");
  drv.get_state = (state_fn)dlsym(lib, "cuCheckpointProcessGetState");
  drv.lock = (lock_fn)dlsym(lib, "cuCheckpointProcessLock");
  drv.checkpoint = (checkpoint_fn)dlsym(lib, "cuCheckpointProcessCheckpoint");
  drv.restore = (restore_fn)dlsym(lib, "cuCheckpointProcessRestore");
  drv.unlock = (unlock_fn)dlsym(lib, "cuCheckpointProcessUnlock");
  if (!init || !drv.get_state || !drv.lock || !drv.checkpoint || !drv.restore || !drv.unlock) {
    fprintf(stderr, "driver checkpoint unavailable: this driver lacks cuCheckpointProcess* "
                    "(needs driver 570 or newer)\n");
    return 3;
  }
  CUresult rc = init(0);
  if (rc != CUDA_SUCCESS) {
    fprintf(stderr, "driver checkpoint unavailable: cuInit: %s\n", name_of(rc));
    return 3;
  }
  return 0;
}

static int checkpoint(int pid, unsigned timeout_ms) {
  CUprocessState state;
  CUresult rc = drv.get_state(pid, &state);
  if (rc != CUDA_SUCCESS) {
    fprintf(stderr, "driver checkpoint of pid %d: cuCheckpointProcessGetState: %s\n", pid, name_of(rc));
    return 1;
  }
  if (state != CU_PROCESS_STATE_RUNNING) {
    fprintf(stderr, "driver checkpoint of pid %d: the driver says it is %s, not running\n", pid,
            state_name(state));
    return 1;
  }
  double t0 = now();
  CUcheckpointLockArgs lock_args = {.timeoutMs = timeout_ms};
  if ((rc = drv.lock(pid, &lock_args)) != CUDA_SUCCESS) {
    fprintf(stderr, "driver checkpoint of pid %d: cuCheckpointProcessLock: %s\n", pid, name_of(rc));
    return 1;
  }
  double t1 = now();
  CUcheckpointCheckpointArgs args = {0};
  if ((rc = drv.checkpoint(pid, &args)) != CUDA_SUCCESS) {
    CUcheckpointUnlockArgs unlock_args = {0};
    CUresult unlocked = drv.unlock(pid, &unlock_args);
    fprintf(stderr, "driver checkpoint of pid %d: cuCheckpointProcessCheckpoint: %s (unlock: %s)\n",
            pid, name_of(rc), name_of(unlocked));
    return 1;
  }
  printf("pid %d checkpointed by the driver: lock %.3f s, checkpoint %.3f s\n", pid, t1 - t0,
         now() - t1);
  return 0;
}

static int restore(int pid) {
  CUprocessState state;
  CUresult rc = drv.get_state(pid, &state);
  if (rc == CUDA_SUCCESS && state != CU_PROCESS_STATE_CHECKPOINTED) {
    fprintf(stderr, "driver restore of pid %d: the driver says it is %s, not checkpointed\n", pid,
            state_name(state));
    return 1;
  }
  double t0 = now();
  CUcheckpointRestoreArgs args = {0};
  if ((rc = drv.restore(pid, &args)) != CUDA_SUCCESS) {
    fprintf(stderr, "driver restore of pid %d: cuCheckpointProcessRestore: %s\n", pid, name_of(rc));
    return 1;
  }
  double t1 = now();
  CUcheckpointUnlockArgs unlock_args = {0};
  if ((rc = drv.unlock(pid, &unlock_args)) != CUDA_SUCCESS) {
    fprintf(stderr, "driver restore of pid %d: cuCheckpointProcessUnlock: %s\n", pid, name_of(rc));
    return 1;
  }
  printf("pid %d restored by the driver: restore %.3f s, unlock %.3f s\n", pid, t1 - t0, now() - t1);
  return 0;
}

int main(int argc, char **argv) {
  char *end = NULL;
  long pid = argc >= 3 ? strtol(argv[2], &end, 10) : 0;
  if (argc < 3 || argc > 4 || !end || *end || pid <= 0) {
    fprintf(stderr, "usage: cudaw-ckpt-driver checkpoint|restore|state <pid> [lock timeout ms]\n");
    return 2;
  }
  unsigned timeout_ms = argc == 4 ? (unsigned)strtoul(argv[3], NULL, 10) : 10000;
  int code = load_driver();
  if (code) return code;
  if (strcmp(argv[1], "checkpoint") == 0) return checkpoint((int)pid, timeout_ms);
  if (strcmp(argv[1], "restore") == 0) return restore((int)pid);
  if (strcmp(argv[1], "state") == 0) {
    CUprocessState state;
    CUresult rc = drv.get_state((int)pid, &state);
    if (rc != CUDA_SUCCESS) {
      fprintf(stderr, "pid %ld: cuCheckpointProcessGetState: %s\n", pid, name_of(rc));
      return 1;
    }
    printf("pid %ld: %s\n", pid, state_name(state));
    return 0;
  }
  fprintf(stderr, "usage: cudaw-ckpt-driver checkpoint|restore|state <pid> [lock timeout ms]\n");
  return 2;
}
