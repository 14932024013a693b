/* kparam at the driver level: modules and libraries loaded through the driver (a static runtime's
 * fatbins, CuPy's RawKernels, Triton's cubins) are recorded with their images, their functions
 * and kernels by name, and cuLaunchKernel(Ex) and cooperative launches hand their arguments to
 * the same preparation as the runtime's launches: under CUDAW_VMEM=translate the virtual device
 * pointers in them become real ones. Listed in gen/api.d/driver.conf. */
#define _GNU_SOURCE
#include "shim_driver.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kparam.h"
#include "shim_kparam.h"
#include "vmem.h"

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

/* A CUkernel's library and name, for the CUfunction cuKernelGetFunction later gives for it. */
struct kernel_name {
  CUkernel kernel;
  CUlibrary library;
  char *name;
};
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kernel_name *names;
static size_t name_count, name_capacity;

static void remember_name(CUkernel kernel, CUlibrary library, const char *name)
{
  pthread_mutex_lock(&names_lock);
  size_t i = 0;
  while (i < name_count && names[i].kernel != kernel) i++;
  if (i == name_count && name_count == name_capacity) {
    size_t capacity = name_capacity ? 2 * name_capacity : 64;
    struct kernel_name *grown = realloc(names, capacity * sizeof *grown);
    if (grown) names = grown, name_capacity = capacity;
  }
  char *copy = strdup(name);
  if (i < name_capacity && copy) {
    if (i < name_count) free(names[i].name);
    else name_count++;
    names[i] = (struct kernel_name){kernel, library, copy};
  } else {
    free(copy);
  }
  pthread_mutex_unlock(&names_lock);
}

SHIM_EXPORT CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
  ENTER(cuLibraryGetKernel);
  CUresult result = REAL(cuLibraryGetKernel)(pKernel, library, name);
  if (result == CUDA_SUCCESS && pKernel && *pKernel && name) {
    record_function(*pKernel, library, name);
    remember_name(*pKernel, library, name);
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
  ENTER(cuKernelGetFunction);
  CUresult result = REAL(cuKernelGetFunction)(pFunc, kernel);
  if (result == CUDA_SUCCESS && pFunc && *pFunc) {
    pthread_mutex_lock(&names_lock);
    for (size_t i = 0; i < name_count; i++)
      if (names[i].kernel == kernel) {
        record_function(*pFunc, names[i].library, names[i].name);
        break;
      }
    pthread_mutex_unlock(&names_lock);
  }
  shim_gate_leave();
  return result;
}

/* ---- kernels cudaw has no image for: the driver's own parameter layout ---------------------- */

/* A static runtime may load its fatbins by ways cudaw does not see. For such a kernel the driver
 * still knows each parameter's offset and size (cuFuncGetParamInfo): under translate, every
 * 8-byte-aligned word of every parameter that holds an address in cudaw's virtual range is
 * translated, like kparam's conservative scan of an aggregate. */
struct driver_layout {
  CUfunction function;
  unsigned count;        /* parameters; 0 when the driver cannot tell */
  size_t *offset, *size; /* count entries each */
  struct driver_layout *next;
};

static pthread_mutex_t layouts_lock = PTHREAD_MUTEX_INITIALIZER;
static struct driver_layout *layouts;

static const struct driver_layout *driver_layout(CUfunction f)
{
  pthread_mutex_lock(&layouts_lock);
  struct driver_layout *l = layouts;
  while (l && l->function != f) l = l->next;
  if (!l && (l = calloc(1, sizeof *l))) {
    l->function = f;
    size_t offset, size, capacity = 0;
    while (SHIM_DRV_REAL(cuFuncGetParamInfo)(f, l->count, &offset, &size) == CUDA_SUCCESS) {
      if (l->count == capacity) {
        capacity = capacity ? 2 * capacity : 16;
        size_t *o = realloc(l->offset, capacity * sizeof *o);
        if (o) l->offset = o;
        size_t *s = o ? realloc(l->size, capacity * sizeof *s) : NULL;
        if (!s) {
          l->count = 0;
          break;
        }
        l->size = s;
      }
      l->offset[l->count] = offset;
      l->size[l->count++] = size;
    }
    const char *name = NULL;
    if (SHIM_DRV_REAL(cuFuncGetName)(&name, f) != CUDA_SUCCESS || !name) name = "(unnamed)";
    if (l->count)
      shim_info("kparam: kernel %s: no image seen; %u parameters from the driver, every aligned "
                "word checked for virtual pointers", name, l->count);
    else
      shim_warn("kparam: kernel %s: no layout from its image or the driver: its arguments are "
                "passed untranslated (CUDAW_VMEM=translate; use remap where the device has VMM)",
                name);
    l->next = layouts;
    layouts = l;
  }
  pthread_mutex_unlock(&layouts_lock);
  return l;
}

/* Translate the aligned words of the len bytes at p that starts at packed offset base, in place. */
static void translate_words(unsigned char *p, size_t len, size_t base)
{
  for (size_t k = (8 - base % 8) % 8; k + 8 <= len; k += 8) {
    uint64_t word;
    memcpy(&word, p + k, 8);
    if (!vmem_in_range((const void *)(uintptr_t)word)) continue;
    void *real = vmem_translate((const void *)(uintptr_t)word);
    if (!real) continue; /* not backed: left for the device to reject */
    word = (uint64_t)(uintptr_t)real;
    memcpy(p + k, &word, 8);
  }
}

/* Arguments for a launch of a kernel without a plan: a translated copy of params (and of the
 * packed buffer of extra), in one heap block the caller frees. */
static CUresult prepare_by_driver(CUfunction f, void **params, void **extra,
                                  struct shim_drv_frame *frame)
{
  frame->args = params;
  frame->extra = extra;
  frame->heap = NULL;
  const struct driver_layout *l = driver_layout(f);
  if (!l || !l->count) return CUDA_SUCCESS;
  if (params) {
    size_t bytes = l->count * sizeof(void *);
    for (unsigned i = 0; i < l->count; i++) bytes += (l->size[i] + 15) & ~(size_t)15;
    unsigned char *heap = malloc(bytes);
    if (!heap) return CUDA_ERROR_OUT_OF_MEMORY;
    void **args = (void **)heap;
    unsigned char *at = heap + l->count * sizeof(void *);
    for (unsigned i = 0; i < l->count; i++) {
      memcpy(at, params[i], l->size[i]);
      translate_words(at, l->size[i], l->offset[i]);
      args[i] = at;
      at += (l->size[i] + 15) & ~(size_t)15;
    }
    frame->args = args;
    frame->heap = heap;
  } else if (extra) {
    void *buffer = NULL;
    size_t size = 0;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END && i < 8; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = extra[i + 1];
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *(size_t *)extra[i + 1];
    }
    if (!buffer || !size) return CUDA_SUCCESS;
    unsigned char *copy = malloc(size + sizeof(size_t));
    if (!copy) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(copy, buffer, size);
    translate_words(copy, size, 0);
    memcpy(copy + size, &size, sizeof size);
    frame->heap = copy;
    frame->extra_words[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
    frame->extra_words[1] = copy;
    frame->extra_words[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
    frame->extra_words[3] = copy + size;
    frame->extra_words[4] = CU_LAUNCH_PARAM_END;
    frame->extra = frame->extra_words;
  }
  return CUDA_SUCCESS;
}

/* ---- launches ------------------------------------------------------------------------------ */

CUresult shim_drv_prepare(CUfunction f, void **params, void **extra,
                          struct shim_drv_frame *frame)
{
  frame->heap = NULL;
  frame->kparam.heap = NULL;
  const struct kparam_plan *plan = kparam_plan_for_kernel(f);
  if (shim_translate_end && (!plan || plan->source == KPARAM_SOURCE_OPAQUE))
    return prepare_by_driver(f, params, extra, frame);
  int rc = shim_kparam_prepare(f, SHIM_KPARAM_HANDLE, params, extra, &frame->kparam);
  frame->args = frame->kparam.args;
  frame->extra = frame->kparam.extra;
  if (rc == 0) return CUDA_SUCCESS;
  return rc == -ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
}

void shim_drv_frame_release(struct shim_drv_frame *frame)
{
  free(frame->heap);
  frame->heap = NULL;
  shim_kparam_frame_release(&frame->kparam);
}

#define LAUNCH_BODY(name, call_params, call_args)                                        \
  ENTER(name);                                                                           \
  CUresult result;                                                                       \
  if (!shim_kparam_active()) {                                                           \
    result = REAL(name) call_args;                                                       \
  } else {                                                                               \
    struct shim_drv_frame frame;                                                         \
    result = shim_drv_prepare(f, kernelParams, extra, &frame);                           \
    if (result == CUDA_SUCCESS) {                                                        \
      void **translated_params = frame.args, **translated_extra = frame.extra;           \
      (void)translated_extra;                                                            \
      result = REAL(name) call_params;                                                   \
    }                                                                                    \
    shim_drv_frame_release(&frame);                                                      \
  }                                                                                      \
  shim_gate_leave();                                                                     \
  return result

#define GRID gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream

SHIM_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX,
                                    unsigned int blockDimY, unsigned int blockDimZ,
                                    unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra)
{
  LAUNCH_BODY(cuLaunchKernel, (f, GRID, translated_params, translated_extra),
              (f, GRID, kernelParams, extra));
}

SHIM_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                         unsigned int gridDimY, unsigned int gridDimZ,
                                         unsigned int blockDimX, unsigned int blockDimY,
                                         unsigned int blockDimZ, unsigned int sharedMemBytes,
                                         CUstream hStream, void **kernelParams, void **extra)
{
  LAUNCH_BODY(cuLaunchKernel_ptsz, (f, GRID, translated_params, translated_extra),
              (f, GRID, kernelParams, extra));
}

SHIM_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                      void **kernelParams, void **extra)
{
  LAUNCH_BODY(cuLaunchKernelEx, (config, f, translated_params, translated_extra),
              (config, f, kernelParams, extra));
}

SHIM_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                           void **kernelParams, void **extra)
{
  LAUNCH_BODY(cuLaunchKernelEx_ptsz, (config, f, translated_params, translated_extra),
              (config, f, kernelParams, extra));
}

/* Cooperative launches take no `extra`. */
SHIM_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                               unsigned int gridDimY, unsigned int gridDimZ,
                                               unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ,
                                               unsigned int sharedMemBytes, CUstream hStream,
                                               void **kernelParams)
{
  void **extra = NULL;
  LAUNCH_BODY(cuLaunchCooperativeKernel, (f, GRID, translated_params),
              (f, GRID, kernelParams));
}

SHIM_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                    unsigned int gridDimY, unsigned int gridDimZ,
                                                    unsigned int blockDimX,
                                                    unsigned int blockDimY,
                                                    unsigned int blockDimZ,
                                                    unsigned int sharedMemBytes,
                                                    CUstream hStream, void **kernelParams)
{
  void **extra = NULL;
  LAUNCH_BODY(cuLaunchCooperativeKernel_ptsz, (f, GRID, translated_params),
              (f, GRID, kernelParams));
}
