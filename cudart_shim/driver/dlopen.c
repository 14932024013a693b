/* The route from dlopen("libcuda.so.1") to cudaw's driver layer. A static CUDA runtime (nvcc's
 * default, CuPy's modules, cuBLAS & co.), JAX and others open the driver by name and look up
 * cuGetProcAddress in that handle; a symbol cudaw merely exports does not answer such a dlsym. So
 * cudaw exports dlopen and hands back its own handle for the driver's names: dlsym then finds
 * cudaw's wrappers. The real runtime that cudaw itself loaded gets the real driver (its calls are
 * already gated and translated at the runtime layer). dlopen is defined under both of glibc's
 * version names, so that programs built against either bind to it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include "shim.h"
#include "shim_profile.h"

/* libcuda.so.1 or libcuda.so, with or without a directory. */
static int names_driver(const char *file)
{
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  return strcmp(base, "libcuda.so.1") == 0 || strcmp(base, "libcuda.so") == 0;
}

/* The object a code address belongs to, by its load base. */
static const void *object_of(const void *address)
{
  Dl_info info;
  return dladdr(address, &info) ? info.dli_fbase : NULL;
}

/* True when the caller is the real runtime cudaw loaded (shim_real_load). */
static int from_real_runtime(const void *caller)
{
  const char *path = shim_real_path();
  if (!path) return 0;
  void *sym = shim_real_symbol("cudaGetDeviceCount");
  return sym && object_of(caller) == object_of(sym);
}

static void *self_handle(void)
{
  Dl_info info;
  if (!dladdr((void *)&names_driver, &info) || !info.dli_fname) return NULL;
  return shim_real_dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
}

/* The real dlopen, timed as the span's real part. */
static void *real_dlopen(const char *file, int mode, struct shim_span *span)
{
  shim_span_real_begin(span);
  void *handle = shim_real_dlopen(file, mode);
  shim_span_real_end(span);
  return handle;
}

static void *route(const char *file, int mode, const void *caller, struct shim_span *span)
{
  if (file && names_driver(file) && shim_drv_enabled()) {
    if (!atomic_load_explicit(&shim_ready, memory_order_acquire)) shim_init();
    /* cudaw's own calls (shim_depth > 0: NVML loaded for status, the real runtime's) get the
     * real driver: a library cudaw uses must never wait at cudaw's own gate during a pause. */
    if (shim_depth == 0 && !from_real_runtime(caller)) {
      /* RTLD_NOLOAD asks whether the driver is loaded: answer for the real one, load nothing. */
      if ((mode & RTLD_NOLOAD) && !shim_drv_loaded()) {
        void *real = real_dlopen(file, mode, span);
        if (!real) return NULL;
        dlclose(real);
      }
      shim_depth++;
      int loaded = shim_drv_load() == 0;
      shim_depth--;
      if (loaded) {
        void *self = self_handle();
        if (self) {
          shim_debug("dlopen(%s): the driver layer (cudaw) answers", file);
          return self;
        }
      }
    }
  }
  return real_dlopen(file, mode, span);
}

/* Every dlopen of the process passes here: a span of the start-up profile each. */
static void *timed_route(const char *file, int mode, const void *caller)
{
  struct shim_span span;
  shim_span_begin(&span);
  void *handle = route(file, mode, caller, &span);
  shim_span_end(&span, SHIM_PROFILE_DLOPEN, 1);
  return handle;
}

SHIM_EXPORT void *cudaw_dlopen_2_34(const char *file, int mode);

SHIM_EXPORT void *cudaw_dlopen_2_2_5(const char *file, int mode);
__asm__(".symver cudaw_dlopen_2_34, dlopen@@GLIBC_2.34");
__asm__(".symver cudaw_dlopen_2_2_5, dlopen@GLIBC_2.2.5");

void *cudaw_dlopen_2_34(const char *file, int mode)
{
  return timed_route(file, mode, __builtin_return_address(0));
}

void *cudaw_dlopen_2_2_5(const char *file, int mode)
{
  return timed_route(file, mode, __builtin_return_address(0));
}
