/* emu_limit.c: the context limits a program or cudaw may set. The stack size is the one that
 * costs device memory: like a real context, the emulated one reserves the stack limit for every
 * thread it can hold resident (EMU_RESIDENT_THREADS), charged against the device's memory, so a
 * test can see that memory go and come back. The others are stored and read back. */
#include <pthread.h>

#include "emu_internal.h"

#define EMU_RESIDENT_THREADS 2048u
#define EMU_DEFAULT_STACK 1024u

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static size_t limits[cudaLimitPersistingL2CacheSize + 1] = {
    [cudaLimitStackSize] = EMU_DEFAULT_STACK,
    [cudaLimitPrintfFifoSize] = 1u << 20,
    [cudaLimitMallocHeapSize] = 8u << 20,
    [cudaLimitDevRuntimeSyncDepth] = 2,
    [cudaLimitDevRuntimePendingLaunchCount] = 2048,
    [cudaLimitMaxL2FetchGranularity] = 64,
};

int emu_limit_init(void) {
  return emu_memory_charge((long long)EMU_DEFAULT_STACK * EMU_RESIDENT_THREADS);
}

static bool known(enum cudaLimit limit) {
  return (unsigned)limit < sizeof limits / sizeof limits[0];
}

EMU_EXPORT cudaError_t cudaDeviceGetLimit(size_t *value, enum cudaLimit limit) {
  emu_init();
  if (!value || !known(limit)) return emu_result(cudaErrorUnsupportedLimit);
  pthread_mutex_lock(&lock);
  *value = limits[limit];
  pthread_mutex_unlock(&lock);
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value) {
  emu_init();
  if (!known(limit)) return emu_result(cudaErrorUnsupportedLimit);
  pthread_mutex_lock(&lock);
  int err = 0;
  if (limit == cudaLimitStackSize) {
    long long delta = ((long long)value - (long long)limits[limit]) * EMU_RESIDENT_THREADS;
    err = emu_memory_charge(delta);
  }
  if (err == 0) limits[limit] = value;
  pthread_mutex_unlock(&lock);
  return err ? emu_result(cudaErrorMemoryAllocation) : cudaSuccess;
}
