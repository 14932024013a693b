/* emu_launch.c: nvcc's hidden registration ABI (__cudaRegister*), the call-configuration stack,
 * kernel handles and launches. A launch runs the test-supplied host implementation of the kernel
 * (found by mangled name) synchronously on the calling thread. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

/* Not in any C header: nvcc declares these in its generated host code (crt/host_runtime.h). */
EMU_EXPORT void **__cudaRegisterFatBinary(void *fatbin_wrapper);
EMU_EXPORT void __cudaRegisterFatBinaryEnd(void **handle);
EMU_EXPORT void __cudaUnregisterFatBinary(void **handle);
EMU_EXPORT char __cudaInitModule(void **handle);
EMU_EXPORT void __cudaRegisterFunction(void **handle, const char *host_fun, char *device_fun,
                                       const char *device_name, int thread_limit, uint3 *tid,
                                       uint3 *bid, dim3 *block_dim, dim3 *grid_dim, int *warp_size);
EMU_EXPORT void __cudaRegisterVar(void **handle, char *host_var, char *device_address,
                                  const char *device_name, int ext, size_t size, int constant,
                                  int global);
EMU_EXPORT void __cudaRegisterManagedVar(void **handle, void **host_var_pointer_address,
                                         char *device_address, const char *device_name, int ext,
                                         size_t size, int constant, int global);
EMU_EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared_mem,
                                                struct CUstream_st *stream);
EMU_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared_mem,
                                                  void *stream);
EMU_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *host_fun);
EMU_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                                          size_t shared_mem, cudaStream_t stream);
EMU_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block,
                                               void **args, size_t shared_mem, cudaStream_t stream);

struct module {
  void *fatbin_wrapper; /* first: the handle nvcc keeps is &module->fatbin_wrapper */
};

struct kernel {
  const void *host_fun;
  char *name;
  struct module *module;
  const void *library; /* cudaLibraryGetKernel: the library it came from */
  cudaw_emu_kernel_fn found; /* from dlsym, cached */
  bool looked_up, missing_reported;
};

struct variable {
  const void *host_var; /* the host shadow; for managed variables the storage itself */
  void *storage;
  size_t size;
  struct module *module;
};

struct implementation {
  char *name;
  cudaw_emu_kernel_fn fn;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct kernel **kernels;
static size_t kernel_count, kernel_capacity;
static struct variable *variables;
static size_t variable_count, variable_capacity;
static struct implementation *implementations;
static size_t implementation_count, implementation_capacity;

/* Grows *array (of element_size) to hold one more; false when out of memory. */
static bool reserve_one(void **array, size_t *capacity, size_t count, size_t element_size) {
  if (count < *capacity) return true;
  size_t grown_capacity = *capacity ? *capacity * 2 : 32;
  void *grown = realloc(*array, grown_capacity * element_size);
  if (!grown) return false;
  *array = grown;
  *capacity = grown_capacity;
  return true;
}

#define RESERVE_ONE(array, capacity, count)                                                        \
  reserve_one((void **)&(array), &(capacity), (count), sizeof *(array))

EMU_EXPORT int cudaw_emu_register_kernel(const char *mangled, cudaw_emu_kernel_fn fn) {
  if (!mangled || !fn) return -EINVAL;
  int err = 0;
  pthread_mutex_lock(&lock);
  size_t i = 0;
  while (i < implementation_count && strcmp(implementations[i].name, mangled)) i++;
  if (i < implementation_count) {
    implementations[i].fn = fn;
  } else if (!RESERVE_ONE(implementations, implementation_capacity, implementation_count) ||
             !(implementations[i].name = strdup(mangled))) {
    err = -ENOMEM;
  } else {
    implementations[implementation_count++].fn = fn;
  }
  pthread_mutex_unlock(&lock);
  return err;
}

/* ---- registration ---- */

EMU_EXPORT void **__cudaRegisterFatBinary(void *fatbin_wrapper) {
  emu_init();
  struct module *m = calloc(1, sizeof *m);
  if (!m) {
    fprintf(stderr, "cudaw-emu: out of memory registering a fatbinary\n");
    abort();
  }
  m->fatbin_wrapper = fatbin_wrapper;
  return &m->fatbin_wrapper;
}

EMU_EXPORT void __cudaRegisterFatBinaryEnd(void **handle) { (void)handle; }

EMU_EXPORT char __cudaInitModule(void **handle) {
  (void)handle;
  return 1;
}

EMU_EXPORT void __cudaUnregisterFatBinary(void **handle) {
  struct module *m = (struct module *)handle;
  pthread_mutex_lock(&lock);
  for (size_t i = kernel_count; i-- > 0;) {
    if (kernels[i]->module != m) continue;
    free(kernels[i]->name);
    free(kernels[i]);
    kernels[i] = kernels[--kernel_count];
  }
  for (size_t i = variable_count; i-- > 0;) {
    if (variables[i].module != m) continue;
    emu_memory_free(variables[i].storage, EMU_KIND_BIT(EMU_SPACE_SYMBOL) |
                                              EMU_KIND_BIT(EMU_SPACE_MANAGED));
    variables[i] = variables[--variable_count];
  }
  pthread_mutex_unlock(&lock);
  free(m);
}

EMU_EXPORT void __cudaRegisterFunction(void **handle, const char *host_fun, char *device_fun,
                                       const char *device_name, int thread_limit, uint3 *tid,
                                       uint3 *bid, dim3 *block_dim, dim3 *grid_dim,
                                       int *warp_size) {
  (void)device_fun, (void)thread_limit, (void)tid, (void)bid, (void)block_dim, (void)grid_dim;
  (void)warp_size;
  struct kernel *k = calloc(1, sizeof *k);
  if (!k || !(k->name = strdup(device_name))) {
    fprintf(stderr, "cudaw-emu: out of memory registering kernel %s\n", device_name);
    abort();
  }
  k->host_fun = host_fun;
  k->module = (struct module *)handle;
  pthread_mutex_lock(&lock);
  if (!RESERVE_ONE(kernels, kernel_capacity, kernel_count)) abort();
  kernels[kernel_count++] = k;
  pthread_mutex_unlock(&lock);
}

static void add_variable(void **handle, const void *host_var, const char *name, size_t size,
                         enum emu_space_kind kind, void **storage) {
  if (emu_memory_alloc(size ? size : 1, kind, storage)) {
    fprintf(stderr, "cudaw-emu: no device memory for variable %s (%zu bytes)\n", name, size);
    *storage = NULL;
    return;
  }
  pthread_mutex_lock(&lock);
  if (!RESERVE_ONE(variables, variable_capacity, variable_count)) abort();
  variables[variable_count++] =
      (struct variable){host_var ? host_var : *storage, *storage, size, (struct module *)handle};
  pthread_mutex_unlock(&lock);
}

EMU_EXPORT void __cudaRegisterVar(void **handle, char *host_var, char *device_address,
                                  const char *device_name, int ext, size_t size, int constant,
                                  int global) {
  (void)device_address, (void)ext, (void)constant, (void)global;
  void *storage;
  add_variable(handle, host_var, device_name, size, EMU_SPACE_SYMBOL, &storage);
  if (storage) memcpy(storage, host_var, size); /* the host shadow holds the initial value */
}

/* The host variable is a pointer nvcc redirects every access through; its initial value lives
 * only in the device image, so emulated managed variables start zeroed. */
EMU_EXPORT void __cudaRegisterManagedVar(void **handle, void **host_var_pointer_address,
                                         char *device_address, const char *device_name, int ext,
                                         size_t size, int constant, int global) {
  (void)device_address, (void)ext, (void)constant, (void)global;
  void *storage;
  add_variable(handle, NULL, device_name, size, EMU_SPACE_MANAGED, &storage);
  *host_var_pointer_address = storage;
}

int emu_symbol_lookup(const void *symbol, void **storage, size_t *size) {
  int err = -ENOENT;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < variable_count; i++) {
    if (variables[i].host_var != symbol) continue;
    *storage = variables[i].storage;
    *size = variables[i].size;
    err = 0;
    break;
  }
  pthread_mutex_unlock(&lock);
  return err;
}

EMU_EXPORT cudaError_t cudaGetSymbolAddress(void **device, const void *symbol) {
  emu_init();
  size_t size;
  if (!device) return emu_result(cudaErrorInvalidValue);
  return emu_result(emu_symbol_lookup(symbol, device, &size) ? cudaErrorInvalidSymbol : cudaSuccess);
}

EMU_EXPORT cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol) {
  emu_init();
  void *storage;
  if (!size) return emu_result(cudaErrorInvalidValue);
  return emu_result(emu_symbol_lookup(symbol, &storage, size) ? cudaErrorInvalidSymbol : cudaSuccess);
}

/* ---- call configuration (<<<...>>> pushes, the host stub pops) ---- */

#define CONFIGURATION_DEPTH 16

static _Thread_local struct configuration {
  dim3 grid, block;
  size_t shared_mem;
  cudaStream_t stream;
} configurations[CONFIGURATION_DEPTH];
static _Thread_local unsigned configuration_depth;

EMU_EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared_mem,
                                                struct CUstream_st *stream) {
  emu_init();
  if (configuration_depth == CONFIGURATION_DEPTH) return 1;
  configurations[configuration_depth++] = (struct configuration){grid, block, shared_mem, stream};
  return 0;
}

EMU_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared_mem,
                                                  void *stream) {
  if (configuration_depth == 0) return emu_result(cudaErrorMissingConfiguration);
  struct configuration *c = &configurations[--configuration_depth];
  *grid = c->grid;
  *block = c->block;
  *shared_mem = c->shared_mem;
  *(cudaStream_t *)stream = c->stream;
  return cudaSuccess;
}

/* ---- kernel handles and launches ---- */

/* The kernel whose handle or host stub is func; NULL when none. Caller holds lock. */
static struct kernel *find_kernel(const void *func) {
  for (size_t i = 0; i < kernel_count; i++)
    if ((const void *)kernels[i] == func) return kernels[i];
  for (size_t i = 0; i < kernel_count; i++)
    if (kernels[i]->host_fun == func) return kernels[i];
  return NULL;
}

static cudaError_t kernel_handle(const void *func, void **handle) {
  emu_init();
  if (!handle || !func) return emu_result(cudaErrorInvalidValue);
  pthread_mutex_lock(&lock);
  struct kernel *k = find_kernel(func);
  pthread_mutex_unlock(&lock);
  if (!k) return emu_result(cudaErrorInvalidDeviceFunction);
  *handle = k;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *host_fun) {
  return kernel_handle(host_fun, (void **)kernel);
}

EMU_EXPORT cudaError_t cudaGetKernel(cudaKernel_t *kernel, const void *entry) {
  return kernel_handle(entry, (void **)kernel);
}

EMU_EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t *function, const void *symbol) {
  return kernel_handle(symbol, (void **)function);
}

EMU_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attributes,
                                             const void *func) {
  void *handle;
  if (!attributes) return emu_result(cudaErrorInvalidValue);
  cudaError_t err = kernel_handle(func, &handle);
  if (err) return err;
  memset(attributes, 0, sizeof *attributes);
  attributes->maxThreadsPerBlock = 1024;
  attributes->numRegs = 32;
  attributes->ptxVersion = 90;
  attributes->binaryVersion = 90;
  attributes->maxDynamicSharedSizeBytes = 48 << 10;
  attributes->preferredShmemCarveout = -1;
  return cudaSuccess;
}

/* The host implementation for a kernel name: registered first, then exported by the program. */
static cudaw_emu_kernel_fn implementation_of(struct kernel *k) {
  for (size_t i = 0; i < implementation_count; i++)
    if (!strcmp(implementations[i].name, k->name)) return implementations[i].fn;
  if (!k->looked_up) {
    char symbol[1024];
    snprintf(symbol, sizeof symbol, "%s%s", CUDAW_EMU_KERNEL_PREFIX, k->name);
    void *found = dlsym(RTLD_DEFAULT, symbol);
    memcpy(&k->found, &found, sizeof found); /* object to function pointer, as dlsym intends */
    k->looked_up = true;
  }
  return k->found;
}

static bool valid_dimensions(dim3 grid, dim3 block) {
  unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
  return grid.x && grid.y && grid.z && grid.y <= 65535 && grid.z <= 65535 && threads &&
         threads <= 1024 && block.x <= 1024 && block.y <= 1024 && block.z <= 64;
}

/* Set by cudaw_emu_access while the calling thread's kernel runs: it touched unreachable memory. */
static _Thread_local bool launch_faulted;

EMU_EXPORT int cudaw_emu_access(const struct cudaw_emu_launch *launch, const void *ptr,
                                size_t size) {
  if (!launch) return -EINVAL;
  int err = emu_memory_kernel_access(launch->device, ptr, size);
  if (err) launch_faulted = true;
  return err;
}

cudaError_t emu_launch(const void *func, dim3 grid, dim3 block, void **args, size_t shared_mem,
                       cudaStream_t stream) {
  emu_init();
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  if (!valid_dimensions(grid, block)) return emu_result(cudaErrorInvalidConfiguration);
  if (emu_stream_capturing(stream))
    return emu_capture_launch(stream, func, grid, block, args, shared_mem);
  pthread_mutex_lock(&lock);
  struct kernel *k = find_kernel(func);
  cudaw_emu_kernel_fn fn = k ? implementation_of(k) : NULL;
  bool report = k && !fn && !k->missing_reported;
  if (report) k->missing_reported = true;
  struct cudaw_emu_launch launch = {grid, block, shared_mem, stream, k ? k->name : NULL,
                                    emu_current_device()};
  pthread_mutex_unlock(&lock);
  if (report)
    fprintf(stderr, "cudaw-emu: no host implementation for kernel %s (export %s%s or call "
            "cudaw_emu_register_kernel)\n", launch.name, CUDAW_EMU_KERNEL_PREFIX, launch.name);
  if (!fn) return emu_result(cudaErrorInvalidDeviceFunction);
  launch_faulted = false;
  fn(&launch, args);
  return launch_faulted ? emu_result(cudaErrorIllegalAddress) : cudaSuccess;
}

EMU_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                                          size_t shared_mem, cudaStream_t stream) {
  return emu_launch(kernel, grid, block, args, shared_mem, stream);
}

EMU_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block,
                                               void **args, size_t shared_mem, cudaStream_t stream) {
  return emu_launch(kernel, grid, block, args, shared_mem, stream);
}

EMU_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                                        size_t shared_mem, cudaStream_t stream) {
  return emu_launch(func, grid, block, args, shared_mem, stream);
}

cudaError_t emu_launch_ex(const cudaLaunchConfig_t *config, const void *func, void **args) {
  if (!config) return emu_result(cudaErrorInvalidValue);
  return emu_launch(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                    config->stream);
}

EMU_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                           void **args) {
  return emu_launch_ex(config, func, args);
}

EMU_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block,
                                                   void **args, size_t shared_mem,
                                                   cudaStream_t stream) {
  return emu_launch(func, grid, block, args, shared_mem, stream);
}

int emu_kernel_name(const void *func, const char **name) {
  pthread_mutex_lock(&lock);
  struct kernel *k = find_kernel(func);
  *name = k ? k->name : NULL;
  pthread_mutex_unlock(&lock);
  return k ? 0 : -ENOENT;
}

/* ---- cudaLibrary*: the image is not looked at; kernels are found by name like registered ones */

struct library {
  int unused;
};

EMU_EXPORT cudaError_t cudaLibraryLoadData(cudaLibrary_t *library, const void *code,
                                           enum cudaJitOption *jit_options, void **jit_values,
                                           unsigned jit_count, enum cudaLibraryOption *options,
                                           void **option_values, unsigned option_count) {
  (void)jit_options, (void)jit_values, (void)jit_count, (void)options, (void)option_values;
  (void)option_count;
  emu_init();
  if (!library || !code) return emu_result(cudaErrorInvalidValue);
  struct library *l = calloc(1, sizeof *l);
  if (!l) return emu_result(cudaErrorMemoryAllocation);
  *library = (cudaLibrary_t)l;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t *library, const char *file,
                                               enum cudaJitOption *jit_options, void **jit_values,
                                               unsigned jit_count, enum cudaLibraryOption *options,
                                               void **option_values, unsigned option_count) {
  emu_init();
  if (!file) return emu_result(cudaErrorInvalidValue);
  FILE *f = fopen(file, "rb");
  if (!f) return emu_result(cudaErrorFileNotFound);
  fclose(f);
  return cudaLibraryLoadData(library, file, jit_options, jit_values, jit_count, options,
                             option_values, option_count);
}

EMU_EXPORT cudaError_t cudaLibraryGetKernel(cudaKernel_t *kernel, cudaLibrary_t library,
                                            const char *name) {
  emu_init();
  if (!kernel || !library || !name) return emu_result(cudaErrorInvalidValue);
  pthread_mutex_lock(&lock);
  struct kernel *k = NULL;
  for (size_t i = 0; i < kernel_count && !k; i++)
    if (kernels[i]->library == library && !strcmp(kernels[i]->name, name)) k = kernels[i];
  if (!k) {
    k = calloc(1, sizeof *k);
    if (k && (!(k->name = strdup(name)) || !RESERVE_ONE(kernels, kernel_capacity, kernel_count))) {
      free(k->name);
      free(k);
      k = NULL;
    }
    if (k) {
      k->library = library;
      kernels[kernel_count++] = k;
    }
  }
  pthread_mutex_unlock(&lock);
  if (!k) return emu_result(cudaErrorMemoryAllocation);
  *kernel = (cudaKernel_t)k;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaLibraryUnload(cudaLibrary_t library) {
  emu_init();
  if (!library) return emu_result(cudaErrorInvalidValue);
  pthread_mutex_lock(&lock);
  for (size_t i = kernel_count; i-- > 0;) {
    if (kernels[i]->library != library) continue;
    free(kernels[i]->name);
    free(kernels[i]);
    kernels[i] = kernels[--kernel_count];
  }
  pthread_mutex_unlock(&lock);
  free(library);
  return cudaSuccess;
}
