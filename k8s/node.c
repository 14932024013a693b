/* The node's GPUs and their memory: from the real driver (libcuda.so.1, which is never cudaw:
 * cudaw ships no libcuda), or, where none loads, from the runtime CUDAW_REAL_CUDART names (the
 * emulated device the tests use). Only counts and sizes are asked; nothing is allocated. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdi.h"

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_count_fn)(int *);
typedef int (*cu_get_fn)(int *, int);
typedef int (*cu_total_fn)(size_t *, int);
typedef int (*rt_count_fn)(int *);
typedef int (*rt_set_fn)(int);
typedef int (*rt_info_fn)(size_t *, size_t *);

static int from_driver(struct k8s_node *node)
{
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return -ENOENT;
  cu_init_fn init = (cu_init_fn)dlsym(h, "cuInit");
  cu_count_fn count = (cu_count_fn)dlsym(h, "cuDeviceGetCount");
  cu_get_fn get = (cu_get_fn)dlsym(h, "cuDeviceGet");
  cu_total_fn total = (cu_total_fn)dlsym(h, "cuDeviceTotalMem_v2");
  int n = 0, rc = -ENODEV;
  if (init && count && get && total && init(0) == 0 && count(&n) == 0 && n > 0) {
    node->gpus = n > K8S_MAX_GPUS ? K8S_MAX_GPUS : n;
    rc = 0;
    for (int i = 0; i < node->gpus && !rc; i++) {
      int device;
      size_t bytes = 0;
      if (get(&device, i) != 0 || total(&bytes, device) != 0) rc = -EIO;
      node->memory[i] = bytes;
      node->healthy[i] = true;
    }
    snprintf(node->source, sizeof node->source, "driver");
  }
  dlclose(h);
  return rc;
}

static int from_runtime(struct k8s_node *node, const char *path)
{
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -ENOENT;
  rt_count_fn count = (rt_count_fn)dlsym(h, "cudaGetDeviceCount");
  rt_set_fn set = (rt_set_fn)dlsym(h, "cudaSetDevice");
  rt_info_fn info = (rt_info_fn)dlsym(h, "cudaMemGetInfo");
  int n = 0, rc = -ENODEV;
  if (count && set && info && count(&n) == 0 && n > 0) {
    node->gpus = n > K8S_MAX_GPUS ? K8S_MAX_GPUS : n;
    rc = 0;
    for (int i = 0; i < node->gpus && !rc; i++) {
      size_t free_bytes, total_bytes = 0;
      if (set(i) != 0 || info(&free_bytes, &total_bytes) != 0) rc = -EIO;
      node->memory[i] = total_bytes;
      node->healthy[i] = true;
    }
    snprintf(node->source, sizeof node->source, "runtime %.50s", path);
  }
  /* not closed: a runtime may keep threads of its own */
  return rc;
}

int k8s_node_probe(struct k8s_node *node, char *err, size_t err_len)
{
  memset(node, 0, sizeof *node);
  const char *runtime = getenv("CUDAW_REAL_CUDART");
  /* A runtime named on purpose (the emulated device) wins over a driver that may be present. */
  if (runtime && runtime[0] == '/' && from_runtime(node, runtime) == 0) return 0;
  memset(node, 0, sizeof *node);
  if (from_driver(node) == 0) return 0;
  memset(node, 0, sizeof *node);
  snprintf(err, err_len, "no GPU found (the driver libcuda.so.1 does not load or has no device%s%s); "
           "describe the node with --gpus N --memory SIZE",
           runtime && *runtime ? "; nor has CUDAW_REAL_CUDART " : "", runtime && *runtime ? runtime : "");
  return -ENODEV;
}
