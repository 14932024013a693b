/* The program's own VMM calls (see shim_vmm.h). Each cuMemCreate gets a record; the program holds
 * the record's address as its CUmemGenericAllocationHandle, and every call that takes a handle
 * translates it to the real one, which a checkpoint replaces. Mappings remember their address,
 * size, offset and access so that resume can map new physical memory exactly where the old was.
 * Listed in gen/api.d/driver.conf. */
#include "shim_driver.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "shim_vmem.h"
#include "shim_vmm.h"
#include "vmem.h"

#define ACCESS_MAX 8 /* access descriptors remembered per mapping (one per device that maps it) */

struct handle {
  CUmemGenericAllocationHandle real; /* 0 while released by a checkpoint */
  size_t size;
  CUmemAllocationProp prop;
  unsigned long long flags;
  unsigned refs;      /* the program's references: cuMemCreate/Retain add, cuMemRelease drops */
  unsigned mappings;  /* live mappings of it */
  int shared;         /* exported to or imported from another process: never released */
  int device;         /* prop's device, -1 for other locations */
  uint64_t charged;   /* counted against CUDAW_MEM_LIMIT */
};

struct mapping {
  CUdeviceptr va;
  size_t size, offset;
  struct handle *handle;
  CUmemAccessDesc access[ACCESS_MAX];
  unsigned access_count;
  unsigned copies;  /* a live checkpoint's copies reading it now (copy_pin) */
  int unmapping;    /* the program's cuMemUnmap waits for those copies: start no more */
  struct mapping *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct mapping *mappings;
/* The mapping mapping_at found last: a live checkpoint asks for the chunks of one mapping after
 * another, and PyTorch's expandable segments make thousands of mappings. Cleared at its unmap. */
static struct mapping *recent;

/* A live checkpoint copies mappings while the program runs (copy_pin/copy_unpin, live_hold). */
static pthread_cond_t copies_done = PTHREAD_COND_INITIALIZER;
static int live_held;

/* The set of live handle records, so that a handle the program passes is checked before use. */
static struct handle **handles;
static size_t handle_slots, handle_count, handle_used; /* used: live + tombstones */

static size_t slot_of(const struct handle *h, size_t slots)
{
  uintptr_t x = (uintptr_t)h;
  x ^= x >> 21;
  x *= 0x9E3779B97F4A7C15ull;
  return (size_t)(x >> 32) & (slots - 1);
}

static int set_insert(struct handle *h)
{
  /* Rehash (dropping tombstones) before probe chains fill up: programs that create and release
   * handles all the time (PyTorch's expandable segments) would otherwise leave no empty slot. */
  if ((handle_used + 1) * 2 > handle_slots) {
    size_t slots = handle_slots && (handle_count + 1) * 4 <= handle_slots ? handle_slots
                   : handle_slots                                        ? handle_slots * 2
                                                                         : 256;
    struct handle **grown = calloc(slots, sizeof *grown);
    if (!grown) return -ENOMEM;
    for (size_t i = 0; i < handle_slots; i++) {
      if (!handles[i] || handles[i] == (struct handle *)1) continue;
      size_t j = slot_of(handles[i], slots);
      while (grown[j]) j = (j + 1) & (slots - 1);
      grown[j] = handles[i];
    }
    free(handles);
    handles = grown;
    handle_slots = slots;
    handle_used = handle_count;
  }
  size_t i = slot_of(h, handle_slots);
  while (handles[i] && handles[i] != (struct handle *)1) i = (i + 1) & (handle_slots - 1);
  if (!handles[i]) handle_used++;
  handles[i] = h;
  handle_count++;
  return 0;
}

/* Tombstones ((struct handle *)1) keep probe chains intact. */
static size_t set_find(const struct handle *h)
{
  if (!handle_slots) return SIZE_MAX;
  for (size_t i = slot_of(h, handle_slots), n = 0; handles[i] && n < handle_slots;
       i = (i + 1) & (handle_slots - 1), n++)
    if (handles[i] == h) return i;
  return SIZE_MAX;
}

static struct handle *lookup(CUmemGenericAllocationHandle value)
{
  struct handle *h = (struct handle *)(uintptr_t)value;
  return set_find(h) == SIZE_MAX ? NULL : h;
}

/* A handle that is not cudaw's is the driver's own (cuMemRetainAllocationHandle of memory cudaw
 * did not map for the program, e.g. vmem's): calls on it go to the driver unchanged. The ones
 * retained on vmem's memory are remembered, so that exporting one is named (NCCL registers user
 * buffers that way): a checkpoint would release that memory under the importing process. */
#define VMEM_RETAINED_MAX 64
static struct {
  CUmemGenericAllocationHandle handle;
  const void *address;
} vmem_retained[VMEM_RETAINED_MAX];
static unsigned vmem_retained_next;

static void forget(struct handle *h)
{
  size_t i = set_find(h);
  if (i != SIZE_MAX) {
    handles[i] = (struct handle *)1;
    handle_count--;
  }
  if (h->charged) vmem_quota_uncharge(h->device, h->charged);
  free(h);
}

/* A handle the program no longer references and that nothing maps is gone. */
static void maybe_forget(struct handle *h)
{
  if (h->refs == 0 && h->mappings == 0) forget(h);
}

#define ENTER(name)                                            \
  shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_##name); \
  if (!real) return shim_drv_missing_counted(SHIM_DRV_##name)
#define REAL(name) ((__typeof__(&name))real)

SHIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                 const CUmemAllocationProp *prop, unsigned long long flags)
{
  ENTER(cuMemCreate);
  CUresult result = CUDA_ERROR_INVALID_VALUE;
  struct handle *h = NULL;
  if (!handle || !prop) goto out;
  result = CUDA_ERROR_OUT_OF_MEMORY;
  if (!(h = calloc(1, sizeof *h))) goto out;
  h->size = size;
  h->prop = *prop;
  h->flags = flags;
  h->refs = 1;
  h->device = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : -1;
  if (h->device >= 0 && shim_vmem_running()) {
    if (shim_vmem_charge(h->device, size) != 0) goto out;
    h->charged = size;
  }
  result = REAL(cuMemCreate)(&h->real, size, prop, flags);
  if (result != CUDA_SUCCESS) goto out;
  pthread_mutex_lock(&lock);
  int rc = set_insert(h);
  pthread_mutex_unlock(&lock);
  if (rc != 0) {
    SHIM_DRV_REAL(cuMemRelease)(h->real);
    result = CUDA_ERROR_OUT_OF_MEMORY;
    goto out;
  }
  *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
  h = NULL;
out:
  if (h) {
    if (h->charged) vmem_quota_uncharge(h->device, h->charged);
    free(h);
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
  ENTER(cuMemRelease);
  CUresult result = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  struct handle *h = lookup(handle);
  if (!h) result = REAL(cuMemRelease)(handle);
  if (h && h->refs > 0) {
    /* cudaw holds one real reference while the program holds any (cuMemRetainAllocationHandle
     * adds program references only). The driver keeps mapped memory until its last unmap. */
    result = CUDA_SUCCESS;
    if (h->refs == 1 && h->real) result = REAL(cuMemRelease)(h->real);
    if (result == CUDA_SUCCESS && --h->refs == 0) maybe_forget(h);
  }
  pthread_mutex_unlock(&lock);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags)
{
  ENTER(cuMemMap);
  CUresult result = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  struct handle *h = lookup(handle);
  struct mapping *m = h ? calloc(1, sizeof *m) : NULL;
  if (!h) result = REAL(cuMemMap)(ptr, size, offset, handle, flags);
  if (h && !m) result = CUDA_ERROR_OUT_OF_MEMORY;
  if (m) {
    result = REAL(cuMemMap)(ptr, size, offset, h->real, flags);
    if (result == CUDA_SUCCESS) {
      *m = (struct mapping){.va = ptr, .size = size, .offset = offset, .handle = h,
                            .next = mappings};
      mappings = m;
      h->mappings++;
      m = NULL;
    }
  }
  free(m);
  pthread_mutex_unlock(&lock);
  shim_gate_leave();
  return result;
}

/* During a live checkpoint a copy may be reading a mapping of the range: the device would fault
 * on an unmapped range, so the unmap waits until those copies are done, and no new one starts on
 * it. Bounded: a copy is pinned from its start to its stream's synchronisation (one chunk), and
 * the pre-copy's end releases every pin; the wait never depends on the gate, which the pause
 * closing behind it would need. */
static void wait_for_copies(CUdeviceptr ptr, size_t size, int mark)
{
  int waiting = 1;
  for (struct mapping *m = mappings; m; m = m->next)
    if (m->va < ptr + size && m->va + m->size > ptr) m->unmapping = mark;
  while (mark && waiting && live_held) {
    waiting = 0;
    for (struct mapping *m = mappings; m && !waiting; m = m->next)
      waiting = m->unmapping && m->copies > 0;
    if (waiting) pthread_cond_wait(&copies_done, &lock);
  }
}

SHIM_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
  ENTER(cuMemUnmap);
  pthread_mutex_lock(&lock);
  wait_for_copies(ptr, size, 1);
  CUresult result = REAL(cuMemUnmap)(ptr, size);
  if (result != CUDA_SUCCESS) wait_for_copies(ptr, size, 0); /* still mapped: copies may go on */
  if (result == CUDA_SUCCESS) {
    for (struct mapping **at = &mappings; *at;) {
      struct mapping *m = *at;
      if (m->va >= ptr && m->va + m->size <= ptr + size) {
        *at = m->next;
        m->handle->mappings--;
        maybe_forget(m->handle);
        if (m == recent) recent = NULL;
        free(m);
      } else {
        at = &m->next;
      }
    }
  }
  pthread_mutex_unlock(&lock);
  shim_gate_leave();
  return result;
}

/* Remember the access of every mapping in the range (a later descriptor for the same location
 * replaces an earlier one). */
static void remember_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                            size_t count)
{
  for (struct mapping *m = mappings; m; m = m->next) {
    if (m->va + m->size <= ptr || m->va >= ptr + size) continue;
    for (size_t i = 0; i < count; i++) {
      unsigned j = 0;
      while (j < m->access_count && (m->access[j].location.type != desc[i].location.type ||
                                     m->access[j].location.id != desc[i].location.id))
        j++;
      if (j == ACCESS_MAX) continue;
      m->access[j] = desc[i];
      if (j == m->access_count) m->access_count++;
    }
  }
}

SHIM_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                    size_t count)
{
  ENTER(cuMemSetAccess);
  CUresult result = REAL(cuMemSetAccess)(ptr, size, desc, count);
  if (result == CUDA_SUCCESS && desc) {
    pthread_mutex_lock(&lock);
    remember_access(ptr, size, desc, count);
    pthread_mutex_unlock(&lock);
  }
  shim_gate_leave();
  return result;
}

/* The mapping containing address a. */
static struct mapping *mapping_at(CUdeviceptr a)
{
  if (recent && a >= recent->va && a < recent->va + recent->size) return recent;
  for (struct mapping *m = mappings; m; m = m->next)
    if (a >= m->va && a < m->va + m->size) return recent = m;
  return NULL;
}

/* Under remap an allocation larger than CUDAW_VMEM_PIECE is several physical allocations: the
 * driver's handle for an address in it covers that piece only, not the allocation. */
static void warn_if_pieced(const void *addr)
{
  struct vmem_info info;
  uint64_t piece = vmem_piece_bytes();
  if (piece && piece != VMEM_PIECE_NONE && vmem_lookup(addr, &info) == 0 && info.size > piece)
    shim_warn("cuMemRetainAllocationHandle(%p): this allocation of %llu bytes is backed in pieces "
              "of %llu bytes (CUDAW_VMEM_PIECE), and the handle covers only the piece at that "
              "address; to keep one handle per allocation, set CUDAW_VMEM_PIECE=1T",
              addr, (unsigned long long)info.size, (unsigned long long)piece);
}

SHIM_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
  ENTER(cuMemRetainAllocationHandle);
  CUresult result;
  bool ours = false; /* the driver's handle of vmem's memory */
  pthread_mutex_lock(&lock);
  struct mapping *m = handle ? mapping_at((CUdeviceptr)(uintptr_t)addr) : NULL;
  if (m) {
    result = CUDA_SUCCESS;
    if (m->handle->refs == 0) {
      /* Only the mappings hold the memory: take the real reference cudaw keeps again. */
      CUmemGenericAllocationHandle again = 0;
      result = REAL(cuMemRetainAllocationHandle)(&again, addr);
      if (result == CUDA_SUCCESS) m->handle->real = again;
    }
    if (result == CUDA_SUCCESS) {
      m->handle->refs++;
      *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->handle;
    }
  } else {
    /* Not mapped through cudaw (e.g. by the real runtime): the driver's own handle. */
    result = REAL(cuMemRetainAllocationHandle)(handle, addr);
    if (result == CUDA_SUCCESS && vmem_in_range(addr)) {
      unsigned slot = vmem_retained_next++ % VMEM_RETAINED_MAX;
      vmem_retained[slot].handle = *handle;
      vmem_retained[slot].address = addr;
      ours = true;
    }
  }
  pthread_mutex_unlock(&lock);
  if (ours) warn_if_pieced(addr); /* outside the lock: vmem takes its own */
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                            CUmemGenericAllocationHandle handle)
{
  ENTER(cuMemGetAllocationPropertiesFromHandle);
  pthread_mutex_lock(&lock);
  struct handle *h = lookup(handle);
  CUmemGenericAllocationHandle real_handle = h ? h->real : handle;
  pthread_mutex_unlock(&lock);
  CUresult result = REAL(cuMemGetAllocationPropertiesFromHandle)(prop, real_handle);
  shim_gate_leave();
  return result;
}

/* Memory another process may map cannot be released and re-created behind its back. */
SHIM_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle,
                                                  CUmemGenericAllocationHandle handle,
                                                  CUmemAllocationHandleType handleType,
                                                  unsigned long long flags)
{
  ENTER(cuMemExportToShareableHandle);
  CUresult result = CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&lock);
  struct handle *h = lookup(handle);
  if (!h) {
    result = REAL(cuMemExportToShareableHandle)(shareableHandle, handle, handleType, flags);
    for (unsigned i = 0; result == CUDA_SUCCESS && i < VMEM_RETAINED_MAX; i++)
      if (vmem_retained[i].address && vmem_retained[i].handle == handle) {
        shim_warn("cuMemExportToShareableHandle: cudaw's virtual memory at %p was exported to "
                  "another process; a checkpoint of this program releases it under that process "
                  "(pause both together, or use CUDAW_VMEM=off)", vmem_retained[i].address);
        break;
      }
  } else {
    result = REAL(cuMemExportToShareableHandle)(shareableHandle, h->real, handleType, flags);
    if (result == CUDA_SUCCESS) h->shared = 1;
  }
  pthread_mutex_unlock(&lock);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                    void *osHandle,
                                                    CUmemAllocationHandleType shHandleType)
{
  ENTER(cuMemImportFromShareableHandle);
  CUresult result = CUDA_ERROR_INVALID_VALUE;
  struct handle *h = handle ? calloc(1, sizeof *h) : NULL;
  if (handle && !h) result = CUDA_ERROR_OUT_OF_MEMORY;
  if (h) {
    result = REAL(cuMemImportFromShareableHandle)(&h->real, osHandle, shHandleType);
    if (result == CUDA_SUCCESS) {
      h->refs = 1;
      h->shared = 1;
      h->device = -1;
      pthread_mutex_lock(&lock);
      int rc = set_insert(h);
      pthread_mutex_unlock(&lock);
      if (rc == 0) {
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
        h = NULL;
      } else {
        SHIM_DRV_REAL(cuMemRelease)(h->real);
        result = CUDA_ERROR_OUT_OF_MEMORY;
      }
    }
  }
  free(h);
  shim_gate_leave();
  return result;
}

/* ---- the checkpoint's side ---------------------------------------------------------------- */

static int releasable(const struct mapping *m)
{
  return !m->handle->shared && m->handle->device >= 0;
}

/* Whether a checkpoint saves the mapping's contents: a device may read it. One the program has
 * not given access to yet (between its cuMemMap and cuMemSetAccess) holds nothing anyone wrote,
 * and no copy could read it: it is released and mapped again all the same, without contents. */
static int saved(const struct mapping *m)
{
  return releasable(m) && m->handle->real && m->access_count > 0;
}

static int for_each(int (*cb)(const struct shim_vmm_region *region, void *ctx), void *ctx)
{
  int rc = 0;
  pthread_mutex_lock(&lock);
  for (struct mapping *m = mappings; m && rc == 0; m = m->next) {
    if (!saved(m)) continue;
    struct shim_vmm_region region = {m->va, m->size, m->handle->device};
    rc = cb(&region, ctx);
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

static void totals(uint64_t *mapped_bytes, uint64_t *kept_bytes)
{
  *mapped_bytes = *kept_bytes = 0;
  pthread_mutex_lock(&lock);
  for (struct mapping *m = mappings; m; m = m->next) {
    *mapped_bytes += m->size;
    if (!releasable(m)) *kept_bytes += m->size;
  }
  pthread_mutex_unlock(&lock);
}

static CUresult map_again(struct mapping *m)
{
  CUresult result = SHIM_DRV_REAL(cuMemMap)(m->va, m->size, m->offset, m->handle->real, 0);
  if (result == CUDA_SUCCESS && m->access_count)
    result = SHIM_DRV_REAL(cuMemSetAccess)(m->va, m->size, m->access, m->access_count);
  return result;
}

/* Give the physical memory of h back (its mappings are gone); it keeps its record. */
static CUresult release_physical(struct handle *h)
{
  /* The program's references were each a real reference too, except the ones it dropped. */
  CUresult result = h->refs ? SHIM_DRV_REAL(cuMemRelease)(h->real) : CUDA_SUCCESS;
  if (result == CUDA_SUCCESS) h->real = 0;
  return result;
}

static CUresult create_physical(struct handle *h)
{
  return SHIM_DRV_REAL(cuMemCreate)(&h->real, h->size, &h->prop, h->flags);
}

static int recreate_locked(uint64_t *shortfall);

static int release_locked(void)
{
  CUresult result = CUDA_SUCCESS;
  for (struct mapping *m = mappings; m && result == CUDA_SUCCESS; m = m->next)
    if (releasable(m) && m->handle->real) result = SHIM_DRV_REAL(cuMemUnmap)(m->va, m->size);
  /* Every mapping of a handle is gone before its memory can go. */
  for (size_t i = 0; result == CUDA_SUCCESS && i < handle_slots; i++) {
    struct handle *h = handles[i];
    if (!h || h == (struct handle *)1 || h->shared || h->device < 0 || !h->real) continue;
    result = release_physical(h);
  }
  if (result == CUDA_SUCCESS) return 0;
  shim_error("checkpoint: releasing the program's own mapped memory failed (CUresult %d); "
             "re-creating it", (int)result);
  uint64_t shortfall = 0;
  recreate_locked(&shortfall);
  return -EIO;
}

static int release_all(void)
{
  pthread_mutex_lock(&lock);
  int rc = release_locked();
  pthread_mutex_unlock(&lock);
  return rc;
}

/* Handles with real memory again, then every unmapped mapping. A handle whose program references
 * are all dropped lives on in its mappings only, as before. */
static int recreate_locked(uint64_t *shortfall)
{
  CUresult result = CUDA_SUCCESS;
  for (size_t i = 0; result == CUDA_SUCCESS && i < handle_slots; i++) {
    struct handle *h = handles[i];
    if (!h || h == (struct handle *)1 || h->shared || h->device < 0 || h->real) continue;
    if (h->mappings == 0 && h->refs == 0) continue;
    result = create_physical(h);
  }
  for (struct mapping *m = mappings; m && result == CUDA_SUCCESS; m = m->next) {
    if (releasable(m)) result = map_again(m);
  }
  /* Handles the program released live in their mappings only: drop the extra reference. */
  for (size_t i = 0; result == CUDA_SUCCESS && i < handle_slots; i++) {
    struct handle *h = handles[i];
    if (!h || h == (struct handle *)1 || h->shared || h->device < 0) continue;
    if (h->refs == 0 && h->real) {
      result = SHIM_DRV_REAL(cuMemRelease)(h->real);
      /* h->real stays set: it names the memory behind the mappings until they go */
    }
  }
  if (result == CUDA_SUCCESS) return 0;
  /* All or nothing: give back what this attempt made, and say how much was missing. */
  uint64_t missing = 0;
  for (struct mapping *m = mappings; m; m = m->next)
    if (releasable(m)) {
      SHIM_DRV_REAL(cuMemUnmap)(m->va, m->size);
      missing += m->size;
    }
  for (size_t i = 0; i < handle_slots; i++) {
    struct handle *h = handles[i];
    if (!h || h == (struct handle *)1 || h->shared || h->device < 0 || !h->real) continue;
    if (h->refs) SHIM_DRV_REAL(cuMemRelease)(h->real);
    h->real = 0;
  }
  if (shortfall) *shortfall = missing;
  return result == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

static int recreate_all(uint64_t *shortfall_bytes)
{
  pthread_mutex_lock(&lock);
  int rc = recreate_locked(shortfall_bytes);
  pthread_mutex_unlock(&lock);
  return rc;
}

static void live_hold(int on)
{
  pthread_mutex_lock(&lock);
  live_held = on;
  if (!on)
    for (struct mapping *m = mappings; m; m = m->next) m->copies = 0;
  pthread_cond_broadcast(&copies_done);
  pthread_mutex_unlock(&lock);
}

static int copy_pin(uint64_t vaddr, uint64_t size)
{
  pthread_mutex_lock(&lock);
  struct mapping *m = mapping_at((CUdeviceptr)vaddr);
  int rc = -ENOENT;
  if (m && !m->unmapping && saved(m) && vaddr + size <= m->va + m->size) {
    m->copies++;
    rc = 0;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

static void copy_unpin(uint64_t vaddr)
{
  pthread_mutex_lock(&lock);
  struct mapping *m = mapping_at((CUdeviceptr)vaddr);
  if (m && m->copies > 0 && --m->copies == 0) pthread_cond_broadcast(&copies_done);
  pthread_mutex_unlock(&lock);
}

static const struct shim_vmm_ops vmm_ops = {
  .for_each = for_each,
  .release_all = release_all,
  .recreate_all = recreate_all,
  .totals = totals,
  .live_hold = live_hold,
  .copy_pin = copy_pin,
  .copy_unpin = copy_unpin,
};

static void offer_to_checkpoint(void)
{
  shim_ckpt_use_vmm(&vmm_ops);
}
SHIM_START_STEP(SHIM_START_HOOKS, -1, offer_to_checkpoint);
