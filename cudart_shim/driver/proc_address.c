/* The driver layer's entry points: once the real driver is loaded (core/real_driver.c), a map from
 * its entry points to cudaw's wrappers answers cuGetProcAddress and cudaGetDriverEntryPoint, whose
 * versioning rules (cuMemAlloc at 3020 is cuMemAlloc_v2, per-thread flags give _ptsz variants)
 * stay the real driver's. */
#define _GNU_SOURCE
#include <pthread.h>

#include "shim_ckpt.h"
#include "shim_driver.h"
#include "shim_profile.h"
#include "shim_vmem.h"

/* Open addressing, real entry point -> id + 1 (0: empty). Written once under map_once, then
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

static pthread_once_t map_once = PTHREAD_ONCE_INIT;

static void build_map(void)
{
  for (unsigned id = 0; id < SHIM_DRV_COUNT; id++) {
    shim_real_fn real = shim_drv_real_table[id];
    if (real) map_insert((const void *)real, id);
  }
}

void *shim_drv_wrap(void *real, const char *symbol)
{
  if (!real || !shim_drv_enabled()) return real;
  if (shim_drv_load() != 0) return real;
  pthread_once(&map_once, build_map);
  int id = map_find(real);
  if (id < 0) {
    shim_capture_unseen(); /* it might begin a stream capture that cudaw would not count */
    shim_ckpt_note_ungated(real, symbol);
    return real;
  }
  return (void *)shim_drv_wrappers[id];
}

/* ---- missing entry points, trampolines -------------------------------------------------- */

static atomic_uchar missing_logged[SHIM_DRV_COUNT];

static CUresult report_missing(enum shim_drv_id id)
{
  shim_options_first_call();
  if (!shim_drv_loaded()) return CUDA_ERROR_NOT_INITIALIZED;
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
  if (shim_depth == 0) shim_options_first_call();
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
