/* NVML through dlopen: the plugin must load on nodes without a driver (and without NVML's
 * development files at build time), so the four calls it needs are declared here. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>

#include "node_gpus.h"

struct nvml_memory { /* nvmlMemory_t */
  unsigned long long total, free, used;
};

int node_gpus_largest_memory(uint64_t *bytes, char *why, size_t why_len) {
  void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!nvml) {
    snprintf(why, why_len, "no NVML (libnvidia-ml.so.1: no NVIDIA driver on this node)");
    return -ENOENT;
  }
  int (*init)(void) = (int (*)(void))dlsym(nvml, "nvmlInit_v2");
  int (*shutdown)(void) = (int (*)(void))dlsym(nvml, "nvmlShutdown");
  int (*count_devices)(unsigned *) = (int (*)(unsigned *))dlsym(nvml, "nvmlDeviceGetCount_v2");
  int (*device)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(
      nvml, "nvmlDeviceGetHandleByIndex_v2");
  int (*memory)(void *, struct nvml_memory *) = (int (*)(void *, struct nvml_memory *))dlsym(
      nvml, "nvmlDeviceGetMemoryInfo");
  int rc = -EIO;
  unsigned count = 0;
  if (!init || !shutdown || !count_devices || !device || !memory) {
    snprintf(why, why_len, "NVML lacks nvmlInit_v2 or the device calls");
  } else if (init() != 0) {
    snprintf(why, why_len, "nvmlInit failed");
  } else {
    *bytes = 0;
    if (count_devices(&count) != 0) count = 0;
    for (unsigned i = 0; i < count; i++) {
      void *handle;
      struct nvml_memory info;
      if (device(i, &handle) == 0 && memory(handle, &info) == 0 && info.total > *bytes)
        *bytes = info.total;
    }
    rc = *bytes ? 0 : -ENODEV;
    if (rc) snprintf(why, why_len, "NVML sees no GPU on this node");
    shutdown();
  }
  dlclose(nvml);
  return rc;
}
