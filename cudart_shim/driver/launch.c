/* kparam at the driver level: modules and libraries loaded through the driver (a static runtime's
 * fatbins, CuPy's RawKernels, Triton's cubins) are recorded with their images, their functions
 * and kernels by name, and cuLaunchKernel(Ex) and cooperative launches hand their arguments to
 * the same preparation as the runtime's launches: under CUDAW_VMEM=translate the virtual device
 * pointers in them become real ones. With a GPU share, launches are metered (shim_gpu_share.h). Listed in gen/api.d/driver.conf. */
#define _GNU_SOURCE
#include "shim_driver.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kparam.h"
#include "shim_gpu_share.h"
#include "shim_kparam.h"
#include "shim_vmem.h"

#define ENTER(name)                                            \
  shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_##name); \
  if (!real) return shim_drv_missing_counted(SHIM_DRV_##name)
#define REAL(name) ((__typeof__(&name))real)

static void record_function(const void *function, const void *module, const char *name)
{
  int rc = kparam_register_library_kernel(function, module, name);
  if (rc) shim_debug("kparam: kernel %s of module %p not recorded (%s)", name, module,
                     strerror(-rc));
}

/* ---- modules ----------------------------------------------------------------------------- */

SHIM_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
  ENTER(cuModuleLoadData);
  shim_kparam_init();
  CUresult result = REAL(cuModuleLoadData)(module, image);
  if (result == CUDA_SUCCESS && module && image) shim_kparam_library_copy(*module, image);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image,
                                        unsigned int numOptions, CUjit_option *options,
                                        void **optionValues)
{
  ENTER(cuModuleLoadDataEx);
  shim_kparam_init();
  CUresult result = REAL(cuModuleLoadDataEx)(module, image, numOptions, options, optionValues);
  if (result == CUDA_SUCCESS && module && image) shim_kparam_library_copy(*module, image);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
  ENTER(cuModuleLoadFatBinary);
  shim_kparam_init();
  CUresult result = REAL(cuModuleLoadFatBinary)(module, fatCubin);
  if (result == CUDA_SUCCESS && module && fatCubin) shim_kparam_library_copy(*module, fatCubin);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
  ENTER(cuModuleLoad);
  shim_kparam_init();
  CUresult result = REAL(cuModuleLoad)(module, fname);
  if (result == CUDA_SUCCESS && module && fname) shim_kparam_library_file(*module, fname);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuModuleUnload(CUmodule hmod)
{
  ENTER(cuModuleUnload);
  CUresult result = REAL(cuModuleUnload)(hmod);
  if (result == CUDA_SUCCESS) shim_kparam_library_remove(hmod);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
  ENTER(cuModuleGetFunction);
  CUresult result = REAL(cuModuleGetFunction)(hfunc, hmod, name);
  if (result == CUDA_SUCCESS && hfunc && *hfunc && name) record_function(*hfunc, hmod, name);
  shim_gate_leave();
  return result;
}

/* ---- libraries ----------------------------------------------------------------------------- */

SHIM_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code,
                                       CUjit_option *jitOptions, void **jitOptionsValues,
                                       unsigned int numJitOptions,
                                       CUlibraryOption *libraryOptions,
                                       void **libraryOptionValues,
                                       unsigned int numLibraryOptions)
{
  ENTER(cuLibraryLoadData);
  shim_kparam_init();
  CUresult result = REAL(cuLibraryLoadData)(library, code, jitOptions, jitOptionsValues,
                                            numJitOptions, libraryOptions, libraryOptionValues,
                                            numLibraryOptions);
  if (result == CUDA_SUCCESS && library && code) shim_kparam_library_copy(*library, code);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName,
                                           CUjit_option *jitOptions, void **jitOptionsValues,
                                           unsigned int numJitOptions,
                                           CUlibraryOption *libraryOptions,
                                           void **libraryOptionValues,
                                           unsigned int numLibraryOptions)
{
  ENTER(cuLibraryLoadFromFile);
  shim_kparam_init();
  CUresult result = REAL(cuLibraryLoadFromFile)(library, fileName, jitOptions, jitOptionsValues,
                                                numJitOptions, libraryOptions,
                                                libraryOptionValues, numLibraryOptions);
  if (result == CUDA_SUCCESS && library && fileName)
    shim_kparam_library_file(*library, fileName);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuLibraryUnload(CUlibrary library)
{
  ENTER(cuLibraryUnload);
  CUresult result = REAL(cuLibraryUnload)(library);
  if (result == CUDA_SUCCESS) shim_kparam_library_remove(library);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
  ENTER(cuLibraryGetKernel);
  CUresult result = REAL(cuLibraryGetKernel)(pKernel, library, name);
  if (result == CUDA_SUCCESS && pKernel && *pKernel && name)
    record_function(*pKernel, library, name);
  shim_gate_leave();
  return result;
}

/* ---- kernels cudaw has no image for: the driver's own parameter layout ---------------------- */

/* Functions the driver could not describe, asked once each. */
#define UNDESCRIBED_MAX 256
static pthread_mutex_t undescribed_lock = PTHREAD_MUTEX_INITIALIZER;
static const void *undescribed[UNDESCRIBED_MAX];
static unsigned undescribed_count;

/* A static runtime may load its fatbins by ways cudaw does not see, and a CUfunction from
 * cuKernelGetFunction names no image either. The driver still knows each parameter's offset and
 * size (cuFuncGetParamInfo) and the kernel's name: kparam builds a plan from them (kinds from a
 * mangled name, every aligned word of the rest scanned). Offered to the kparam glue, which asks
 * for a handle without a plan under translate; 0 when a plan was registered. */
static int learn_layout(const void *function)
{
  CUfunction f = (CUfunction)function;
  pthread_mutex_lock(&undescribed_lock);
  int asked = 0;
  for (unsigned i = 0; i < undescribed_count && !asked; i++) asked = undescribed[i] == function;
  pthread_mutex_unlock(&undescribed_lock);
  if (asked || !shim_drv_loaded()) return -ENOENT;
  uint32_t *offsets = NULL, *sizes = NULL;
  uint32_t count = 0, capacity = 0;
  size_t offset, size;
  int rc = 0;
  while (rc == 0 && SHIM_DRV_REAL(cuFuncGetParamInfo)(f, count, &offset, &size) == CUDA_SUCCESS) {
    if (count == capacity) {
      capacity = capacity ? 2 * capacity : 16;
      uint32_t *o = realloc(offsets, capacity * sizeof *o);
      if (o) offsets = o;
      uint32_t *z = o ? realloc(sizes, capacity * sizeof *z) : NULL;
      if (z) sizes = z;
      if (!o || !z) rc = -ENOMEM;
    }
    if (rc == 0) offsets[count] = (uint32_t)offset, sizes[count++] = (uint32_t)size;
  }
  const char *name = NULL;
  if (SHIM_DRV_REAL(cuFuncGetName)(&name, f) != CUDA_SUCCESS || !name) name = "";
  if (rc == 0 && count) rc = kparam_register_kernel_layout(function, name, count, offsets, sizes);
  else if (rc == 0) rc = -ENOENT;
  free(offsets);
  free(sizes);
  if (rc == 0) {
    shim_info("kparam: kernel %s: no image seen; %u parameters from the driver", name, count);
    return 0;
  }
  pthread_mutex_lock(&undescribed_lock);
  if (undescribed_count < UNDESCRIBED_MAX) undescribed[undescribed_count++] = function;
  pthread_mutex_unlock(&undescribed_lock);
  return rc;
}

static void offer_to_kparam(void)
{
  shim_kparam_use_layout_source(learn_layout);
}
SHIM_START_STEP(SHIM_START_HOOKS, -1, offer_to_kparam);

/* ---- launches ------------------------------------------------------------------------------ */

CUresult shim_drv_prepare(CUfunction f, void **params, void **extra,
                          struct shim_kparam_frame *frame)
{
  int rc = shim_kparam_prepare(f, SHIM_KPARAM_HANDLE, params, extra, frame);
  if (rc == 0) return CUDA_SUCCESS;
  return rc == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
}

/* A launch's translated path is a function of its own (name##_prepared: the real entry point,
 * the launch's parameters, then `extra`, NULL for cooperative launches), so that the fast path's
 * frame does not hold the argument copy. */
#define LAUNCH_PREPARED(name, call_translated, stream, per_thread, node, ...)                  \
  static __attribute__((noinline)) CUresult name##_prepared(__typeof__(&name) forward,         \
                                                            __VA_ARGS__, void **extra)         \
  {                                                                                            \
    struct shim_kparam_frame frame;                                                            \
    frame.args = kernelParams;                                                                 \
    frame.extra = extra;                                                                       \
    frame.heap = NULL;                                                                         \
    struct shim_gpu_ticket ticket;                                                             \
    shim_gpu_before(stream, per_thread, &ticket);                                              \
    CUresult result = shim_kparam_active() ? shim_drv_prepare(f, kernelParams, extra, &frame)  \
                                           : CUDA_SUCCESS;                                     \
    if (result == CUDA_SUCCESS) {                                                              \
      void **translated_params = frame.args, **translated_extra = frame.extra;                 \
      (void)translated_extra;                                                                  \
      result = forward call_translated;                                                        \
    }                                                                                          \
    shim_gpu_after(&ticket);                                                                   \
    shim_kparam_frame_release(&frame);                                                         \
    if (result == CUDA_SUCCESS && shim_translate_end && shim_capture_possible()) node;          \
    return result;                                                                             \
  }

/* After a translated launch that a stream capture may have turned into a node (graph.c). In a
 * _ptsz call, stream 0 is the calling thread's default stream. */
#define PER_THREAD(stream) ((stream) ? (stream) : CU_STREAM_PER_THREAD)
#define NODE_GRID(stream)                                                                      \
  shim_drv_captured_launch(stream, &(CUDA_KERNEL_NODE_PARAMS){                                 \
      .func = f, .gridDimX = gridDimX, .gridDimY = gridDimY, .gridDimZ = gridDimZ,             \
      .blockDimX = blockDimX, .blockDimY = blockDimY, .blockDimZ = blockDimZ,                  \
      .sharedMemBytes = sharedMemBytes, .kernelParams = kernelParams, .extra = extra})
#define NODE_CONFIG(stream)                                                                    \
  shim_drv_captured_launch(stream, &(CUDA_KERNEL_NODE_PARAMS){                                 \
      .func = f, .gridDimX = config->gridDimX, .gridDimY = config->gridDimY,                   \
      .gridDimZ = config->gridDimZ, .blockDimX = config->blockDimX,                            \
      .blockDimY = config->blockDimY, .blockDimZ = config->blockDimZ,                          \
      .sharedMemBytes = config->sharedMemBytes, .kernelParams = kernelParams, .extra = extra})

#define LAUNCH_BODY(name, call_args, ...)                                                 \
  ENTER(name);                                                                            \
  CUresult result = SHIM_LIKELY(!shim_launch_slow())                                      \
                        ? REAL(name) call_args                                            \
                        : name##_prepared(REAL(name), __VA_ARGS__);                       \
  shim_gate_leave();                                                                      \
  return result

#define GRID_PARAMS                                                                           \
  unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX, \
      unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes,            \
      CUstream hStream
#define GRID gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream

#define CONFIG_STREAM (config ? (void *)config->hStream : NULL)
LAUNCH_PREPARED(cuLaunchKernel, (f, GRID, translated_params, translated_extra), hStream, 0,
                NODE_GRID(hStream), CUfunction f, GRID_PARAMS, void **kernelParams)
LAUNCH_PREPARED(cuLaunchKernel_ptsz, (f, GRID, translated_params, translated_extra), hStream, 1,
                NODE_GRID(PER_THREAD(hStream)), CUfunction f, GRID_PARAMS, void **kernelParams)
LAUNCH_PREPARED(cuLaunchKernelEx, (config, f, translated_params, translated_extra),
                CONFIG_STREAM, 0, NODE_CONFIG(config->hStream), const CUlaunchConfig *config,
                CUfunction f, void **kernelParams)
LAUNCH_PREPARED(cuLaunchKernelEx_ptsz, (config, f, translated_params, translated_extra),
                CONFIG_STREAM, 1, NODE_CONFIG(PER_THREAD(config->hStream)),
                const CUlaunchConfig *config, CUfunction f, void **kernelParams)
LAUNCH_PREPARED(cuLaunchCooperativeKernel, (f, GRID, translated_params), hStream, 0,
                NODE_GRID(hStream), CUfunction f, GRID_PARAMS, void **kernelParams)
LAUNCH_PREPARED(cuLaunchCooperativeKernel_ptsz, (f, GRID, translated_params), hStream, 1,
                NODE_GRID(PER_THREAD(hStream)), CUfunction f, GRID_PARAMS, void **kernelParams)

SHIM_EXPORT CUresult cuLaunchKernel(CUfunction f, GRID_PARAMS, void **kernelParams, void **extra)
{
  LAUNCH_BODY(cuLaunchKernel, (f, GRID, kernelParams, extra), f, GRID, kernelParams, extra);
}

SHIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, GRID_PARAMS, void **kernelParams,
                                         void **extra)
{
  LAUNCH_BODY(cuLaunchKernel_ptsz, (f, GRID, kernelParams, extra), f, GRID, kernelParams, extra);
}

SHIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                      void **kernelParams, void **extra)
{
  LAUNCH_BODY(cuLaunchKernelEx, (config, f, kernelParams, extra), config, f, kernelParams, extra);
}

SHIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                           void **kernelParams, void **extra)
{
  LAUNCH_BODY(cuLaunchKernelEx_ptsz, (config, f, kernelParams, extra), config, f, kernelParams,
              extra);
}

/* Cooperative launches take no `extra`. */
SHIM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, GRID_PARAMS, void **kernelParams)
{
  LAUNCH_BODY(cuLaunchCooperativeKernel, (f, GRID, kernelParams), f, GRID, kernelParams, NULL);
}

SHIM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, GRID_PARAMS,
                                                    void **kernelParams)
{
  LAUNCH_BODY(cuLaunchCooperativeKernel_ptsz, (f, GRID, kernelParams), f, GRID, kernelParams,
              NULL);
}
