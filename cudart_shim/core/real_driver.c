/* The real CUDA driver, for every layer above: libcuda.so.1 is opened once, lazily (a program that
 * never touches the driver does not load it because of cudaw), and every export is resolved into
 * shim_drv_real_table. Also glibc's own dlopen (cudaw exports one of its own, driver/dlopen.c),
 * and whether the driver layer is on and sees the libraries' calls. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "options.h"
#include "shim.h"
#include "shim_profile.h"

shim_real_fn shim_drv_real_table[SHIM_DRV_COUNT];

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status = -ENOENT;
static atomic_int loaded; /* load_status == 0, published */

typedef void *(*dlopen_fn)(const char *, int);

static _Atomic(dlopen_fn) glibc_dlopen;

void *shim_real_dlopen(const char *file, int mode)
{
  dlopen_fn real = atomic_load_explicit(&glibc_dlopen, memory_order_acquire);
  if (SHIM_UNLIKELY(!real)) {
    real = (dlopen_fn)dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.34");
    if (!real) real = (dlopen_fn)dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.2.5");
    if (!real) real = (dlopen_fn)dlsym(RTLD_NEXT, "dlopen");
    if (!real) return NULL;
    atomic_store_explicit(&glibc_dlopen, real, memory_order_release);
  }
  return real(file, mode);
}

static void *open_driver(char *path, size_t size)
{
  const char *chosen = cudaw_option("CUDAW_REAL_CUDA");
  void *handle = NULL;
  if (*chosen) {
    if (chosen[0] != '/')
      shim_warn("CUDAW_REAL_CUDA=%s is not an absolute path; using %s as the loader finds it",
                chosen, SHIM_DRV_SONAME);
    else if (!(handle = shim_real_dlopen(chosen, RTLD_NOW | RTLD_LOCAL)))
      shim_warn("CUDAW_REAL_CUDA=%s cannot be loaded (%s); using %s as the loader finds it",
                chosen, dlerror(), SHIM_DRV_SONAME);
  }
  if (!handle) handle = shim_real_dlopen(SHIM_DRV_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (handle && shim_is_self_handle(handle)) {
    shim_error("the %s found first is cudaw itself; the driver layer is off. Set CUDAW_REAL_CUDA "
               "to the real driver's absolute path", SHIM_DRV_SONAME);
    dlclose(handle);
    return NULL;
  }
  struct link_map *map = NULL;
  if (handle && dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name)
    snprintf(path, size, "%s", map->l_name);
  return handle;
}

static void load(void)
{
  shim_depth++;
  struct shim_span span;
  shim_span_begin(&span);
  char path[PATH_MAX] = SHIM_DRV_SONAME;
  shim_span_real_begin(&span);
  void *handle = open_driver(path, sizeof path);
  shim_span_real_end(&span);
  if (!handle) {
    shim_info("driver layer: no CUDA driver (%s) could be loaded; driver calls fail with "
              "CUDA_ERROR_NOT_INITIALIZED", SHIM_DRV_SONAME);
    goto out;
  }
  unsigned missing = 0;
  for (unsigned id = 0; id < SHIM_DRV_COUNT; id++) {
    shim_real_fn real = (shim_real_fn)dlsym(handle, shim_drv_names[id]);
    missing += !real;
    __atomic_store_n(&shim_drv_real_table[id], real, __ATOMIC_RELEASE);
  }
  shim_info("driver layer: forwarding to %s (%u of %u functions present)", path,
            SHIM_DRV_COUNT - missing, SHIM_DRV_COUNT);
  load_status = 0;
  atomic_store_explicit(&loaded, 1, memory_order_release);
out:
  shim_span_end(&span, SHIM_PROFILE_DRIVER, 1);
  shim_depth--;
}

int shim_drv_load(void)
{
  pthread_once(&load_once, load);
  return load_status;
}

int shim_drv_loaded(void)
{
  return atomic_load_explicit(&loaded, memory_order_acquire);
}

shim_real_fn shim_drv_resolve(enum shim_drv_id id)
{
  shim_drv_load();
  return __atomic_load_n(&shim_drv_real_table[id], __ATOMIC_ACQUIRE);
}

int shim_drv_enabled(void)
{
  static atomic_int answer; /* 0 unknown, 1 on, 2 off: read once, asked per entry-point query */
  int known = atomic_load_explicit(&answer, memory_order_relaxed);
  if (!known) {
    known = strcmp(cudaw_option("CUDAW_DRIVER"), "0") != 0 ? 1 : 2;
    atomic_store_explicit(&answer, known, memory_order_relaxed);
  }
  return known == 1;
}

/* The object a code address belongs to, by its load base. */
static const void *object_of(const void *address)
{
  Dl_info info;
  return address && dladdr(address, &info) ? info.dli_fbase : NULL;
}

int shim_drv_routing(void)
{
  static atomic_int answer; /* 0 unknown, 1 yes, 2 no */
  int known = atomic_load_explicit(&answer, memory_order_relaxed);
  if (known) return known == 1;
  /* The dlopen the process resolves is cudaw's (driver/dlopen.c) when it lies in cudaw. */
  const void *resolved = dlvsym(RTLD_DEFAULT, "dlopen", "GLIBC_2.34");
  int yes = shim_drv_enabled() && object_of(resolved) == object_of((void *)&object_of);
  atomic_store_explicit(&answer, yes ? 1 : 2, memory_order_relaxed);
  return yes;
}
