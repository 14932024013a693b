/* The driver layer's loading and lookup: the real libcuda.so.1 is opened once, lazily (a program
 * that never touches the driver does not load it because of cudaw), every export is resolved, and
 * a map from real entry points to cudaw's wrappers answers cuGetProcAddress and
 * cudaGetDriverEntryPoint, whose versioning rules (cuMemAlloc at 3020 is cuMemAlloc_v2, per-thread
 * flags give _ptsz variants) stay the real driver's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "options.h"
#include "shim_driver.h"
#include "shim_profile.h"
#include "shim_vmem.h"

shim_real_fn shim_drv_real_table[SHIM_DRV_COUNT];

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status = -ENOENT;
static atomic_int loaded; /* load_status == 0, published */

/* Open addressing, real entry point -> id + 1 (0: empty). Written once under load_once, then
 * read without a lock. Distinct exports may share an entry point (aliases): the first one wins,
 * and any wrapper of that entry point has its signature. */
#define MAP_SIZE 2048u
_Static_assert(SHIM_DRV_COUNT * 2 <= MAP_SIZE, "grow MAP_SIZE");
static struct {
  const void *real;
  unsigned id_plus_one;
} entry_map[MAP_SIZE];

static unsigned slot_of(const void *real)
{
  uintptr_t h = (uintptr_t)real;
  h ^= h >> 17;
  h *= 0x9E3779B97F4A7C15ull;
  return (unsigned)(h >> 40) & (MAP_SIZE - 1);
}

static void map_insert(const void *real, unsigned id)
{
  for (unsigned i = slot_of(real);; i = (i + 1) & (MAP_SIZE - 1)) {
    if (entry_map[i].real == real) return;
    if (!entry_map[i].id_plus_one) {
      entry_map[i].real = real;
      entry_map[i].id_plus_one = id + 1;
      return;
    }
  }
}

static int map_find(const void *real)
{
  for (unsigned i = slot_of(real); entry_map[i].id_plus_one; i = (i + 1) & (MAP_SIZE - 1))
    if (entry_map[i].real == real) return (int)entry_map[i].id_plus_one - 1;
  return -1;
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
    if (real) map_insert((const void *)real, id);
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

/* Functions the program obtained that cudaw does not wrap, logged once each. */
#define UNWRAPPED_MAX 64
static pthread_mutex_t unwrapped_lock = PTHREAD_MUTEX_INITIALIZER;
static const void *unwrapped[UNWRAPPED_MAX];
static unsigned unwrapped_count;

static void note_unwrapped(const void *real, const char *symbol)
{
  pthread_mutex_lock(&unwrapped_lock);
  unsigned i = 0;
  while (i < unwrapped_count && unwrapped[i] != real) i++;
  int first = i == unwrapped_count;
  if (first && unwrapped_count < UNWRAPPED_MAX) unwrapped[unwrapped_count++] = real;
  pthread_mutex_unlock(&unwrapped_lock);
  /* It might begin a stream capture that cudaw would not count (runtime/stream.c). */
  shim_capture_unseen();
  if (first)
    shim_warn("driver layer: %s is not a function cudaw knows (its driver is newer than the "
              "toolkit cudaw was built with): the program calls it without cudaw's gate, so a "
              "pause does not hold it", symbol ? symbol : "(unnamed)");
}

unsigned shim_drv_unwrapped_count(void)
{
  pthread_mutex_lock(&unwrapped_lock);
  unsigned count = unwrapped_count;
  pthread_mutex_unlock(&unwrapped_lock);
  return count;
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

void *shim_drv_wrap(void *real, const char *symbol)
{
  if (!real || !shim_drv_enabled()) return real;
  if (shim_drv_load() != 0) return real;
  int id = map_find(real);
  if (id < 0) {
    note_unwrapped(real, symbol);
    return real;
  }
  return (void *)shim_drv_wrappers[id];
}

/* ---- missing entry points, trampolines -------------------------------------------------- */

static atomic_uchar missing_logged[SHIM_DRV_COUNT];

static CUresult report_missing(enum shim_drv_id id)
{
  if (load_status != 0) return CUDA_ERROR_NOT_INITIALIZED;
  if (!atomic_exchange(&missing_logged[id], 1))
    shim_warn("%s is not in the real driver; returning CUDA_ERROR_NOT_SUPPORTED",
              shim_drv_names[id]);
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult shim_drv_missing_counted(enum shim_drv_id id)
{
  shim_gate_leave();
  return report_missing(id);
}

CUresult shim_drv_missing_blocking(enum shim_drv_id id)
{
  shim_gate_leave_blocking();
  return report_missing(id);
}

static CUresult unsupported_undeclared(void) { return CUDA_ERROR_NOT_SUPPORTED; }

/* Called by shim_drv_trampoline_slow (assembly) with every argument register saved. */
shim_real_fn shim_drv_trampoline_resolve(unsigned id);
shim_real_fn shim_drv_trampoline_resolve(unsigned id)
{
  if (!atomic_load_explicit(&shim_ready, memory_order_acquire)) shim_init();
  if (shim_depth == 0) shim_gate_wait_open();
  shim_real_fn real = id < SHIM_DRV_COUNT ? shim_drv_resolve((enum shim_drv_id)id) : NULL;
  if (!real) {
    if (id < SHIM_DRV_COUNT) report_missing((enum shim_drv_id)id);
    return (shim_real_fn)unsupported_undeclared;
  }
  return real;
}

/* ---- the entry-point queries ------------------------------------------------------------- */

SHIM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                         cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
  shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_cuGetProcAddress_v2);
  if (!real) return shim_drv_missing_counted(SHIM_DRV_cuGetProcAddress_v2);
  struct shim_span span;
  shim_span_begin(&span);
  shim_span_real_begin(&span);
  CUresult result =
      ((__typeof__(&cuGetProcAddress_v2))real)(symbol, pfn, cudaVersion, flags, status);
  shim_span_real_end(&span);
  if (result == CUDA_SUCCESS && pfn) *pfn = shim_drv_wrap(*pfn, symbol);
  shim_span_end(&span, SHIM_PROFILE_ENTRY_POINT, 1);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                      cuuint64_t flags)
{
  shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_cuGetProcAddress);
  if (!real) return shim_drv_missing_counted(SHIM_DRV_cuGetProcAddress);
  struct shim_span span;
  shim_span_begin(&span);
  shim_span_real_begin(&span);
  CUresult result = ((__typeof__(&cuGetProcAddress))real)(symbol, pfn, cudaVersion, flags);
  shim_span_real_end(&span);
  if (result == CUDA_SUCCESS && pfn) *pfn = shim_drv_wrap(*pfn, symbol);
  shim_span_end(&span, SHIM_PROFILE_ENTRY_POINT, 1);
  shim_gate_leave();
  return result;
}
