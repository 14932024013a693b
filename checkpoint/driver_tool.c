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

/* One line naming what is wrong: exit status 2. */
static int usage_error(const char *what, const char *arg) {
  fprintf(stderr, "cudaw-ckpt-driver: %s%s%s\nusage: cudaw-ckpt-driver checkpoint|restore|state "
          "<pid> [lock timeout ms]\n", what, arg ? " " : "", arg ? arg : "");
  return 2;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    printf("cudaw-ckpt-driver %s\n", CUDAW_VERSION);
    return 0;
  }
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: cudaw-ckpt-driver checkpoint|restore|state <pid> [lock timeout ms]\n"
           "       cudaw-ckpt-driver --version\n"
           "runs the driver's process checkpoint on a pid (cudaw uses it for release all)\n");
    return 0;
  }
  if (argc < 2) return usage_error("no command given", NULL);
  if (strcmp(argv[1], "checkpoint") && strcmp(argv[1], "restore") && strcmp(argv[1], "state"))
    return usage_error("unknown command", argv[1]);
  if (argc < 3) return usage_error("no pid given", NULL);
  if (argc > 4) return usage_error("unexpected argument", argv[4]);
  char *end = NULL;
  long pid = argc >= 3 ? strtol(argv[2], &end, 10) : 0;
  if (!end || *end || pid <= 0) return usage_error("not a pid:", argv[2]);
  unsigned long timeout_ms = 10000;
  if (argc == 4) {
    timeout_ms = strtoul(argv[3], &end, 10);
    if (*end || end == argv[3] || argv[3][0] == '-' || timeout_ms > 3600000)
      return usage_error("expected a lock timeout in ms (0-3600000), not", argv[3]);
  }
  int code = load_driver();
  if (code) return code;
  if (strcmp(argv[1], "checkpoint") == 0) return checkpoint((int)pid, (unsigned)timeout_ms);
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
  return usage_error("unknown command", argv[1]); /* not reached: checked above */
}
