/* emu_device.c: one-time initialisation, the CUDAW_EMU_* options, the emulated devices (how many,
 * which one is current for each thread, peer access between them) and their version and attribute
 * queries. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
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
    {"CUDAW_EMU_MEM", "4G", "memory of each emulated device in bytes, optional K/M/G suffix"},
    {"CUDAW_EMU_DEVICES", "1", "number of emulated devices (1-8)"},
    {"CUDAW_EMU_USED_FILE", "", "file that shows another process the bytes in use on each device "
                                "(one line, rewritten at every change), as nvidia-smi does"},
    {"CUDAW_EMU_ALLOC", "next", "where cudaMalloc places memory: next (after the last "
                                "allocation, a freed address comes back only after a wrap) or "
                                "lowest (the lowest gap: freed addresses come back at once)"},
    {"CUDAW_EMU_SHARED", "0", "1: every process of the user shares each device's memory; "
                              "all: every process of every user"},
    {"CUDAW_EMU_SHARED_KEY", "default", "which shared devices (separates concurrent tests)"},
    {"CUDAW_EMU_CONTEXT_MEM", "0", "device memory each process's context costs, K/M/G suffix"},
};

static size_t memory_bytes = DEFAULT_MEMORY_BYTES;
static int devices = 1;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static _Thread_local int current_device;
/* peer_access[d] bit p: device d enabled access to p's memory. Read without the lock. */
static _Atomic unsigned peer_access[EMU_MAX_DEVICES];

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

static void ignoring(const struct option *option, const char *text) {
  fprintf(stderr, "cudaw-emu: ignoring %s=%s (%s; default %s)\n", option->name, text,
          option->meaning, option->default_value);
}

static void init_device(void) {
  const char *text = getenv(options[0].name);
  if (text && *text) {
    size_t parsed = parse_size(text);
    if (parsed) memory_bytes = parsed;
    else ignoring(&options[0], text);
  }
  text = getenv(options[1].name);
  if (text && *text) {
    char *end;
    long count = strtol(text, &end, 10);
    if (*end == '\0' && count >= 1 && count <= EMU_MAX_DEVICES) devices = (int)count;
    else ignoring(&options[1], text);
  }
  size_t context_bytes = 0;
  text = getenv(options[6].name);
  if (text && *text && !(context_bytes = parse_size(text)) && strcmp(text, "0") != 0)
    ignoring(&options[6], text);
  bool lowest = false;
  text = getenv(options[3].name);
  if (text && *text) {
    if (strcmp(text, "lowest") == 0) lowest = true;
    else if (strcmp(text, "next") != 0) ignoring(&options[3], text);
  }
  int err = emu_memory_init(memory_bytes, devices, lowest);
  text = getenv(options[2].name);
  if (err == 0 && text && *text) {
    int fd = open(text, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) emu_memory_publish_to(fd);
    else fprintf(stderr, "cudaw-emu: %s=%s: %s\n", options[2].name, text, strerror(errno));
  }
  if (err)
    fprintf(stderr, "cudaw-emu: cannot reserve the device address space: %s\n", strerror(-err));
  if (err == 0 && emu_shared_init(devices) != 0)
    fprintf(stderr, "cudaw-emu: CUDAW_EMU_SHARED=1 but no shared ledger: each process has its "
                    "own memory\n");
  for (int device = 0; device < devices && err == 0 && context_bytes; device++)
    if (emu_memory_charge(device, (long long)context_bytes) != 0)
      fprintf(stderr, "cudaw-emu: no device memory left for the context of device %d\n", device);
  if (err == 0 && emu_limit_init(devices) != 0)
    fprintf(stderr, "cudaw-emu: no device memory left for the context's stack\n");
  if (devices == 1)
    fprintf(stderr, "cudaw-emu: emulated CUDA device (host memory, %zu MiB), not a GPU\n",
            memory_bytes >> 20);
  else
    fprintf(stderr, "cudaw-emu: %d emulated CUDA devices (host memory, %zu MiB each), not GPUs\n",
            devices, memory_bytes >> 20);
}

void emu_init(void) { pthread_once(&init_once, init_device); }

__attribute__((constructor)) static void emu_constructor(void) { emu_init(); }

size_t emu_option_memory_bytes(void) {
  emu_init();
  return memory_bytes;
}

EMU_EXPORT int cudaw_emu_is_emulated(void) { return 1; }

int emu_device_count(void) {
  emu_init();
  return devices;
}

int emu_current_device(void) { return current_device; }

int emu_set_current_device(int device) {
  emu_init();
  if (device < 0 || device >= devices) return -EINVAL;
  current_device = device;
  return 0;
}

bool emu_peer_enabled(int device, int peer) {
  return device >= 0 && device < EMU_MAX_DEVICES && peer >= 0 && peer < EMU_MAX_DEVICES &&
         (atomic_load(&peer_access[device]) >> peer & 1u);
}

static cudaError_t check_device(int device) {
  emu_init();
  return device >= 0 && device < devices ? cudaSuccess : cudaErrorInvalidDevice;
}

EMU_EXPORT cudaError_t cudaGetDeviceCount(int *count) {
  emu_init();
  if (!count) return emu_result(cudaErrorInvalidValue);
  *count = devices;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaGetDevice(int *device) {
  emu_init();
  if (!device) return emu_result(cudaErrorInvalidValue);
  *device = current_device;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaSetDevice(int device) {
  emu_init();
  return emu_result(emu_set_current_device(device) ? cudaErrorInvalidDevice : cudaSuccess);
}

EMU_EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  emu_init();
  (void)flags;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaDeviceSynchronize(void) {
  emu_init();
  emu_work_wait(current_device);
  emu_pool_synchronized(current_device);
  return emu_memory_reads_done(NULL, true, UINT64_MAX) ? emu_result(cudaErrorIllegalAddress)
                                                 : cudaSuccess;
}

/* The current device's memory goes, and with its context the peer access it enabled. */
EMU_EXPORT cudaError_t cudaDeviceReset(void) {
  emu_init();
  emu_memory_reset(current_device);
  emu_pool_reset(current_device);
  atomic_store(&peer_access[current_device], 0u);
  cudaGetLastError();
  return cudaSuccess;
}

/* Every pair of distinct emulated devices can reach each other (as over NVLink). */
EMU_EXPORT cudaError_t cudaDeviceCanAccessPeer(int *can_access, int device, int peer_device) {
  emu_init();
  if (!can_access) return emu_result(cudaErrorInvalidValue);
  if (check_device(device) || check_device(peer_device)) return emu_result(cudaErrorInvalidDevice);
  *can_access = device != peer_device;
  return cudaSuccess;
}

/* The runtime's errors: an invalid or the current device is cudaErrorInvalidDevice, flags other
 * than 0 cudaErrorInvalidValue, enabling twice cudaErrorPeerAccessAlreadyEnabled, disabling what
 * is not enabled cudaErrorPeerAccessNotEnabled. */
EMU_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned int flags) {
  emu_init();
  if (check_device(peer_device) || peer_device == current_device)
    return emu_result(cudaErrorInvalidDevice);
  if (flags) return emu_result(cudaErrorInvalidValue);
  unsigned bit = 1u << peer_device;
  if (atomic_fetch_or(&peer_access[current_device], bit) & bit)
    return emu_result(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaDeviceDisablePeerAccess(int peer_device) {
  emu_init();
  if (check_device(peer_device) || peer_device == current_device)
    return emu_result(cudaErrorInvalidDevice);
  unsigned bit = 1u << peer_device;
  if (!(atomic_fetch_and(&peer_access[current_device], ~bit) & bit))
    return emu_result(cudaErrorPeerAccessNotEnabled);
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
  prop->uuid.bytes[15] = (char)(prop->uuid.bytes[15] + device); /* device 0 keeps the old one */
  prop->pciBusID = device;
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
