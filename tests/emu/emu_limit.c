/* emu_limit.c: the context limits a program or cudaw may set, per device. The stack size is the
 * one that costs device memory: like a real context, the emulated one reserves the stack limit
 * for every thread it can hold resident (EMU_RESIDENT_THREADS), charged against its device's
 * memory, so a test can see that memory go and come back. The others are stored and read back. */
#include <pthread.h>
#include <string.h>

#include "emu_internal.h"

#define EMU_RESIDENT_THREADS 2048u
#define EMU_DEFAULT_STACK 1024u
#define LIMIT_COUNT (cudaLimitPersistingL2CacheSize + 1)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static size_t limits[EMU_MAX_DEVICES][LIMIT_COUNT];

int emu_limit_init(int devices) {
  static const size_t defaults[LIMIT_COUNT] = {
      [cudaLimitStackSize] = EMU_DEFAULT_STACK,
      [cudaLimitPrintfFifoSize] = 1u << 20,
      [cudaLimitMallocHeapSize] = 8u << 20,
      [cudaLimitDevRuntimeSyncDepth] = 2,
      [cudaLimitDevRuntimePendingLaunchCount] = 2048,
      [cudaLimitMaxL2FetchGranularity] = 64,
  };
  int err = 0;
  for (int device = 0; device < devices && err == 0; device++) {
    memcpy(limits[device], defaults, sizeof defaults);
    err = emu_memory_charge(device, (long long)EMU_DEFAULT_STACK * EMU_RESIDENT_THREADS);
  }
  return err;
}

static bool known(enum cudaLimit limit) { return (unsigned)limit < LIMIT_COUNT; }

EMU_EXPORT cudaError_t cudaDeviceGetLimit(size_t *value, enum cudaLimit limit) {
  emu_init();
  if (!value || !known(limit)) return emu_result(cudaErrorUnsupportedLimit);
  pthread_mutex_lock(&lock);
  *value = limits[emu_current_device()][limit];
  pthread_mutex_unlock(&lock);
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value) {
  emu_init();
  if (!known(limit)) return emu_result(cudaErrorUnsupportedLimit);
  int device = emu_current_device(), err = 0;
  pthread_mutex_lock(&lock);
  if (limit == cudaLimitStackSize) {
    long long delta = ((long long)value - (long long)limits[device][limit]) * EMU_RESIDENT_THREADS;
    err = emu_memory_charge(device, delta);
  }
  if (err == 0) limits[device][limit] = value;
  pthread_mutex_unlock(&lock);
  return err ? emu_result(cudaErrorMemoryAllocation) : cudaSuccess;
}
