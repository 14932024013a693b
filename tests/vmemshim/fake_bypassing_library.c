/* A stand-in for cuBLAS or cuSPARSE on the emulated device: a library named like one
 * (libcusparse_emu.so) whose "kernel" reaches the device without going through libcudart, here
 * by calling the emulated runtime directly, as cuSPARSE does through its static runtime. */
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

__attribute__((visibility("default"))) int fake_library_fill(void *device, size_t bytes, int value)
{
  const char *path = getenv("CUDAW_REAL_CUDART");
  void *runtime = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  cudaError_t (*memset_fn)(void *, int, size_t) =
      runtime ? (cudaError_t(*)(void *, int, size_t))dlsym(runtime, "cudaMemset") : NULL;
  return memset_fn ? (int)memset_fn(device, value, bytes) : -1;
}
