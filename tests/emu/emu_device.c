/* emu_device.c: one-time initialisation, the CUDAW_EMU_* options and the device, version and
 * attribute queries of the one emulated device. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

#define DEFAULT_MEMORY_BYTES ((size_t)4 << 30)
#define DEVICE_NAME "cudaw emulated device"
#define MULTIPROCESSORS 132

/* Every CUDAW_EMU_* variable, its default and meaning. */
static const struct option {
  const char *name, *default_value, *meaning;
} options[] = {
    {"CUDAW_EMU_MEM", "4G", "emulated device memory in bytes, optional K/M/G suffix"},
};

static size_t memory_bytes = DEFAULT_MEMORY_BYTES;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* Parses "123", "64K", "512M", "4G"; 0 on error. */
static size_t parse_size(const char *text) {
  char *end;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno || end == text) return 0;
  unsigned shift = 0;
  switch (*end) {
  case 'k': case 'K': shift = 10; end++; break;
  case 'm': case 'M': shift = 20; end++; break;
  case 'g': case 'G': shift = 30; end++; break;
  default: break;
  }
  if (*end == 'i' || *end == 'B') end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
  if (*end || value > (~0ULL >> shift)) return 0;
  return (size_t)(value << shift);
}

static void init_device(void) {
  const char *text = getenv(options[0].name);
  if (text && *text) {
    size_t parsed = parse_size(text);
    if (parsed) memory_bytes = parsed;
    else
      fprintf(stderr, "cudaw-emu: ignoring %s=%s (%s; default %s)\n", options[0].name, text,
              options[0].meaning, options[0].default_value);
  }
  int err = emu_memory_init(memory_bytes);
  if (err == 0) err = emu_limit_init();
  if (err)
    fprintf(stderr, "cudaw-emu: cannot reserve the device address space: %s\n", strerror(-err));
  fprintf(stderr, "cudaw-emu: emulated CUDA device (host memory, %zu MiB), not a GPU\n",
          memory_bytes >> 20);
}

void emu_init(void) { pthread_once(&init_once, init_device); }

__attribute__((constructor)) static void emu_constructor(void) { emu_init(); }

size_t emu_option_memory_bytes(void) {
  emu_init();
  return memory_bytes;
}

EMU_EXPORT int cudaw_emu_is_emulated(void) { return 1; }

static cudaError_t check_device(int device) {
  return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

EMU_EXPORT cudaError_t cudaGetDeviceCount(int *count) {
  emu_init();
  if (!count) return emu_result(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaGetDevice(int *device) {
  emu_init();
  if (!device) return emu_result(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaSetDevice(int device) {
  emu_init();
  return emu_result(check_device(device));
}

EMU_EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  emu_init();
  (void)flags;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaDeviceSynchronize(void) {
  emu_init();
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaDeviceReset(void) {
  emu_init();
  emu_memory_reset();
  cudaGetLastError();
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaDeviceCanAccessPeer(int *can_access, int device, int peer_device) {
  emu_init();
  if (!can_access) return emu_result(cudaErrorInvalidValue);
  if (check_device(device) || check_device(peer_device)) return emu_result(cudaErrorInvalidDevice);
  *can_access = 0; /* a single device has no peers */
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaRuntimeGetVersion(int *version) {
  if (!version) return emu_result(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaDriverGetVersion(int *version) {
  if (!version) return emu_result(cudaErrorInvalidValue);
  *version = CUDA_VERSION;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  emu_init();
  if (!prop) return emu_result(cudaErrorInvalidValue);
  if (check_device(device)) return emu_result(cudaErrorInvalidDevice);
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "%s", DEVICE_NAME);
  memcpy(prop->uuid.bytes, "cudaw-emu-device", sizeof prop->uuid.bytes);
  prop->totalGlobalMem = memory_bytes;
  prop->sharedMemPerBlock = 48 << 10;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->memPitch = (size_t)1 << 31;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 64 << 10;
  prop->major = 9;
  prop->minor = 0;
  prop->textureAlignment = 512;
  prop->texturePitchAlignment = 32;
  prop->multiProcessorCount = MULTIPROCESSORS;
  prop->canMapHostMemory = 1;
  prop->surfaceAlignment = 512;
  prop->concurrentKernels = 1;
  prop->asyncEngineCount = 2;
  prop->unifiedAddressing = 1;
  prop->memoryBusWidth = 5120;
  prop->l2CacheSize = 50 << 20;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->streamPrioritiesSupported = 1;
  prop->globalL1CacheSupported = 1;
  prop->localL1CacheSupported = 1;
  prop->sharedMemPerMultiprocessor = 228 << 10;
  prop->regsPerMultiprocessor = 65536;
  prop->managedMemory = 1;
  prop->concurrentManagedAccess = 1;
  prop->pageableMemoryAccess = 0;
  prop->computePreemptionSupported = 1;
  prop->cooperativeLaunch = 1;
  prop->sharedMemPerBlockOptin = 227 << 10;
  prop->directManagedMemAccessFromHost = 1;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->hostRegisterSupported = 1;
  prop->memoryPoolsSupported = 1;
  prop->clusterLaunch = 1;
  prop->deviceNumaId = -1;
  prop->hostNumaId = -1;
  return cudaSuccess;
}

/* The driver's attribute numbers match the runtime's; 102 (VMM supported) exists only in cuda.h. */
static int attribute_value(int attribute, int *value) {
  switch (attribute) {
  case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return 0;
  case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: *value = 1024; return 0;
  case cudaDevAttrMaxBlockDimZ: *value = 64; return 0;
  case cudaDevAttrMaxGridDimX: *value = 0x7fffffff; return 0;
  case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: *value = 65535; return 0;
  case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 << 10; return 0;
  case cudaDevAttrTotalConstantMemory: *value = 64 << 10; return 0;
  case cudaDevAttrWarpSize: *value = 32; return 0;
  case cudaDevAttrMaxRegistersPerBlock: case cudaDevAttrMaxRegistersPerMultiprocessor:
    *value = 65536; return 0;
  case cudaDevAttrClockRate: *value = 1980000; return 0;
  case cudaDevAttrMemoryClockRate: *value = 2619000; return 0;
  case cudaDevAttrMultiProcessorCount: *value = MULTIPROCESSORS; return 0;
  case cudaDevAttrComputeCapabilityMajor: *value = 9; return 0;
  case cudaDevAttrComputeCapabilityMinor: *value = 0; return 0;
  case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; return 0;
  case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = 228 << 10; return 0;
  case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 227 << 10; return 0;
  case cudaDevAttrL2CacheSize: *value = 50 << 20; return 0;
  case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; return 0;
  case cudaDevAttrAsyncEngineCount: *value = 2; return 0;
  case cudaDevAttrMaxBlocksPerMultiprocessor: *value = 32; return 0;
  case cudaDevAttrPciBusId: case cudaDevAttrPciDeviceId: case cudaDevAttrPciDomainId:
  case cudaDevAttrIntegrated: case cudaDevAttrKernelExecTimeout: case cudaDevAttrEccEnabled:
  case cudaDevAttrTccDriver: case cudaDevAttrPageableMemoryAccess: case cudaDevAttrComputeMode:
  case cudaDevAttrIsMultiGpuBoard:
    *value = 0; return 0;
  case cudaDevAttrNumaId: case cudaDevAttrHostNumaId: *value = -1; return 0;
  case cudaDevAttrGpuOverlap: case cudaDevAttrCanMapHostMemory: case cudaDevAttrConcurrentKernels:
  case cudaDevAttrUnifiedAddressing: case cudaDevAttrStreamPrioritiesSupported:
  case cudaDevAttrGlobalL1CacheSupported: case cudaDevAttrLocalL1CacheSupported:
  case cudaDevAttrManagedMemory: case cudaDevAttrConcurrentManagedAccess:
  case cudaDevAttrComputePreemptionSupported: case cudaDevAttrCooperativeLaunch:
  case cudaDevAttrHostRegisterSupported: case cudaDevAttrDirectManagedMemAccessFromHost:
  case cudaDevAttrMemoryPoolsSupported: case cudaDevAttrClusterLaunch:
  case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    *value = 1; return 0;
  default: return -EINVAL;
  }
}

EMU_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  emu_init();
  if (!value) return emu_result(cudaErrorInvalidValue);
  if (check_device(device)) return emu_result(cudaErrorInvalidDevice);
  return emu_result(attribute_value((int)attr, value) ? cudaErrorInvalidValue : cudaSuccess);
}

/* For the emulated driver's cuDeviceGetAttribute. */
int emu_device_attribute(int attribute, int *value) { return attribute_value(attribute, value); }
