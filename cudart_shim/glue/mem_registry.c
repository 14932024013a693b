/* The registry of memory cudaw passes to the real runtime but must know about: managed memory,
 * page-locked host memory, registered host ranges and CUDA arrays (their contents live on the
 * device, outside vmem, and a checkpoint must reach them). A mutex and a vector kept sorted by
 * handle: O(log n) lookups, O(n) insert/remove (memmove), fine for the few thousand such
 * allocations programs make. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "shim_vmem.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct shim_mem_record *records;
static size_t count, capacity;

/* Index of the first record whose handle is >= handle. */
static size_t lower_bound(uintptr_t handle)
{
  size_t low = 0, high = count;
  while (low < high) {
    size_t middle = low + (high - low) / 2;
    if ((uintptr_t)records[middle].handle < handle) low = middle + 1;
    else high = middle;
  }
  return low;
}

int shim_mem_track(const struct shim_mem_record *record)
{
  pthread_mutex_lock(&lock);
  int rc = 0;
  if (count == capacity) {
    size_t grown = capacity ? capacity * 2 : 64;
    struct shim_mem_record *bigger = realloc(records, grown * sizeof *bigger);
    if (!bigger) {
      rc = -ENOMEM;
      goto out;
    }
    records = bigger;
    capacity = grown;
  }
  size_t at = lower_bound((uintptr_t)record->handle);
  memmove(&records[at + 1], &records[at], (count - at) * sizeof *records);
  records[at] = *record;
  count++;
out:
  pthread_mutex_unlock(&lock);
  return rc;
}

int shim_mem_untrack(enum shim_mem_kind kind, const void *handle, struct shim_mem_record *out)
{
  pthread_mutex_lock(&lock);
  int rc = -ENOENT;
  for (size_t at = lower_bound((uintptr_t)handle);
       at < count && records[at].handle == handle; at++) {
    if (records[at].kind != kind) continue;
    if (out) *out = records[at];
    memmove(&records[at], &records[at + 1], (count - at - 1) * sizeof *records);
    count--;
    rc = 0;
    break;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

int shim_mem_find(const void *p, struct shim_mem_record *out)
{
  pthread_mutex_lock(&lock);
  int rc = -ENOENT;
  uintptr_t u = (uintptr_t)p;
  size_t at = lower_bound(u + 1); /* records at < at start at or below p */
  while (at-- > 0) {
    const struct shim_mem_record *r = &records[at];
    if (r->kind == SHIM_MEM_ARRAY || r->kind == SHIM_MEM_MIPMAPPED) continue;
    if (u - (uintptr_t)r->handle < (r->size ? r->size : 1)) {
      if (out) *out = *r;
      rc = 0;
    }
    break; /* ranges do not overlap: only the nearest one below can contain p */
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

int shim_mem_for_each(int (*cb)(const struct shim_mem_record *record, void *ctx), void *ctx)
{
  pthread_mutex_lock(&lock);
  int rc = 0;
  for (size_t i = 0; i < count && rc == 0; i++) rc = cb(&records[i], ctx);
  pthread_mutex_unlock(&lock);
  return rc;
}

void shim_mem_forget_device(int device)
{
  pthread_mutex_lock(&lock);
  size_t kept = 0;
  for (size_t i = 0; i < count; i++)
    if (records[i].device != device) records[kept++] = records[i];
  count = kept;
  pthread_mutex_unlock(&lock);
}
