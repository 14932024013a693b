/* Hand-written registration overrides: nvcc's hidden registration ABI (__cudaRegisterFatBinary,
 * __cudaRegisterFunction, __cudaUnregisterFatBinary, __cudaGetKernel), cudaGetKernel and the
 * cudaLibrary* kernel APIs forward to the real runtime and record what they saw in kparam's
 * registry: pointers only, so that a program registering hundreds of MB of fatbins does not start
 * slower; a kernel's layout is parsed at its first launch that needs it. Listed in
 * gen/api.d/kparam.conf. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kparam.h"
#include "shim_generated.h"
#include "shim_kparam.h"
#include "shim_profile.h"

/* Declared only in nvcc's generated host code (crt/host_runtime.h). */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                            dim3 *bDim, dim3 *gDim, int *wSize);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);

/* ---- runtime module handle -> kparam module ---- */

struct module_link {
  void **handle;
  kparam_module_key key;
};

static pthread_mutex_t modules_lock = PTHREAD_MUTEX_INITIALIZER;
static struct module_link *links;
static size_t link_count, link_capacity;
static _Thread_local struct module_link last; /* functions follow their fatbin */

static void link_add(void **handle, kparam_module_key key)
{
  pthread_mutex_lock(&modules_lock);
  if (link_count == link_capacity) {
    size_t capacity = link_capacity ? 2 * link_capacity : 64;
    struct module_link *grown = realloc(links, capacity * sizeof *grown);
    if (grown) links = grown, link_capacity = capacity;
  }
  if (link_count < link_capacity) links[link_count++] = (struct module_link){handle, key};
  pthread_mutex_unlock(&modules_lock);
  last = (struct module_link){handle, key};
}

/* The key of handle; with remove, forget it. NULL if unknown. */
static kparam_module_key link_find(void **handle, bool remove)
{
  if (!remove && last.handle == handle) return last.key;
  kparam_module_key key = NULL;
  pthread_mutex_lock(&modules_lock);
  for (size_t i = link_count; i-- > 0;) {
    if (links[i].handle != handle) continue;
    key = links[i].key;
    if (remove) links[i] = links[--link_count];
    break;
  }
  pthread_mutex_unlock(&modules_lock);
  if (remove && last.handle == handle) last = (struct module_link){NULL, NULL};
  else if (key) last = (struct module_link){handle, key};
  return key;
}

SHIM_EXPORT void **__cudaRegisterFatBinary(void *fatCubin)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN___cudaRegisterFatBinary);
  if (!real) return (shim_missing(SHIM_FN___cudaRegisterFatBinary), (void **)0);
  struct shim_span span;
  shim_span_begin(&span);
  shim_kparam_init();
  shim_span_real_begin(&span);
  void **handle = ((__typeof__(&__cudaRegisterFatBinary))real)(fatCubin);
  shim_span_real_end(&span);
  if (handle && fatCubin) {
    kparam_module_key key = kparam_register_fatbin(fatCubin);
    if (key) link_add(handle, key);
    else shim_warn("kparam: out of memory recording fatbin %p: its kernels stay opaque", fatCubin);
  }
  shim_span_end(&span, SHIM_PROFILE_FATBIN, 1);
  shim_gate_leave();
  return handle;
}

SHIM_EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun,
                                        char *deviceFun, const char *deviceName, int thread_limit,
                                        uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN___cudaRegisterFunction);
  if (!real) {
    shim_missing(SHIM_FN___cudaRegisterFunction);
    return;
  }
  struct shim_span span;
  shim_span_begin(&span);
  shim_span_real_begin(&span);
  ((__typeof__(&__cudaRegisterFunction))real)(fatCubinHandle, hostFun, deviceFun, deviceName,
                                              thread_limit, tid, bid, bDim, gDim, wSize);
  shim_span_real_end(&span);
  kparam_module_key key = link_find(fatCubinHandle, false);
  const char *name = deviceName ? deviceName : deviceFun;
  if (key && hostFun && name) {
    int rc = kparam_register_function(key, hostFun, name);
    if (rc) shim_warn("kparam: kernel %s not recorded (%s): it stays opaque", name, strerror(-rc));
  }
  shim_span_end(&span, SHIM_PROFILE_FUNCTION, 1);
  shim_gate_leave();
}

SHIM_EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN___cudaUnregisterFatBinary);
  if (!real) {
    shim_missing(SHIM_FN___cudaUnregisterFatBinary);
    return;
  }
  struct shim_span span;
  shim_span_begin(&span);
  kparam_module_key key = link_find(fatCubinHandle, true);
  shim_span_real_begin(&span);
  ((__typeof__(&__cudaUnregisterFatBinary))real)(fatCubinHandle);
  shim_span_real_end(&span);
  kparam_unregister_fatbin(key);
  shim_span_end(&span, SHIM_PROFILE_UNREGISTER, 1);
  shim_gate_leave();
}

static void record_kernel(cudaError_t result, cudaKernel_t *kernel, const void *host_fun)
{
  if (result != cudaSuccess || !kernel || !*kernel || !host_fun) return;
  int rc = kparam_register_kernel_handle(*kernel, host_fun);
  if (rc) shim_warn("kparam: kernel handle %p not recorded (%s)", (void *)*kernel, strerror(-rc));
}

SHIM_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN___cudaGetKernel);
  if (!real) return shim_missing(SHIM_FN___cudaGetKernel);
  cudaError_t result = ((__typeof__(&__cudaGetKernel))real)(kernel, hostFun);
  record_kernel(result, kernel, hostFun);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGetKernel);
  if (!real) return shim_missing(SHIM_FN_cudaGetKernel);
  cudaError_t result = ((__typeof__(&cudaGetKernel))real)(kernelPtr, entryFuncAddr);
  record_kernel(result, kernelPtr, entryFuncAddr);
  shim_gate_leave();
  return result;
}

/* The CUfunction behind a kernel: launched through the driver's cuLaunchKernel (driver/launch.c),
 * it needs the layout of the kernel it stands for. */
SHIM_EXPORT cudaError_t cudaGetFuncBySymbol(cudaFunction_t *functionPtr, const void *symbolPtr)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGetFuncBySymbol);
  if (!real) return shim_missing(SHIM_FN_cudaGetFuncBySymbol);
  cudaError_t result = ((__typeof__(&cudaGetFuncBySymbol))real)(functionPtr, symbolPtr);
  record_kernel(result, (cudaKernel_t *)functionPtr, symbolPtr);
  shim_gate_leave();
  return result;
}

/* ---- cudaLibrary* ---- */

SHIM_EXPORT cudaError_t cudaLibraryLoadData(cudaLibrary_t *library, const void *code,
                                            enum cudaJitOption *jitOptions, void **jitOptionsValues,
                                            unsigned int numJitOptions,
                                            enum cudaLibraryOption *libraryOptions,
                                            void **libraryOptionValues,
                                            unsigned int numLibraryOptions)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaLibraryLoadData);
  if (!real) return shim_missing(SHIM_FN_cudaLibraryLoadData);
  shim_kparam_init();
  struct shim_span span; /* the real load; the image recorded below counts the call */
  shim_span_begin(&span);
  shim_span_real_begin(&span);
  cudaError_t result = ((__typeof__(&cudaLibraryLoadData))real)(
      library, code, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
      libraryOptionValues, numLibraryOptions);
  shim_span_real_end(&span);
  shim_span_end(&span, SHIM_PROFILE_MODULE, 0);
  if (result == cudaSuccess && library && code) shim_kparam_library_copy(*library, code);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t *library, const char *fileName,
                                                enum cudaJitOption *jitOptions,
                                                void **jitOptionsValues, unsigned int numJitOptions,
                                                enum cudaLibraryOption *libraryOptions,
                                                void **libraryOptionValues,
                                                unsigned int numLibraryOptions)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaLibraryLoadFromFile);
  if (!real) return shim_missing(SHIM_FN_cudaLibraryLoadFromFile);
  shim_kparam_init();
  struct shim_span span; /* the real load; the image recorded below counts the call */
  shim_span_begin(&span);
  shim_span_real_begin(&span);
  cudaError_t result = ((__typeof__(&cudaLibraryLoadFromFile))real)(
      library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
      libraryOptionValues, numLibraryOptions);
  shim_span_real_end(&span);
  shim_span_end(&span, SHIM_PROFILE_MODULE, 0);
  if (result == cudaSuccess && library && fileName) shim_kparam_library_file(*library, fileName);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaLibraryGetKernel(cudaKernel_t *pKernel, cudaLibrary_t library,
                                             const char *name)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaLibraryGetKernel);
  if (!real) return shim_missing(SHIM_FN_cudaLibraryGetKernel);
  cudaError_t result = ((__typeof__(&cudaLibraryGetKernel))real)(pKernel, library, name);
  if (result == cudaSuccess && pKernel && *pKernel && name) {
    int rc = kparam_register_library_kernel(*pKernel, library, name);
    if (rc) shim_warn("kparam: kernel %s of library %p not recorded (%s): it stays opaque", name,
                      (void *)library, strerror(-rc));
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaLibraryUnload(cudaLibrary_t library)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaLibraryUnload);
  if (!real) return shim_missing(SHIM_FN_cudaLibraryUnload);
  cudaError_t result = ((__typeof__(&cudaLibraryUnload))real)(library);
  if (result == cudaSuccess) shim_kparam_library_remove(library);
  shim_gate_leave();
  return result;
}
