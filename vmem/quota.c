/* The per-device quota (CUDAW_MEM_LIMIT, parsed by size.c) and the cudaMemGetInfo view that
 * respects it. Enforcement itself is one comparison where chunks are created (alloc.c). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int vmem_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes) {
  struct vmem_space *s = &vmem_space;
  if (!free_bytes || !total_bytes) return -EINVAL;
  pthread_mutex_lock(&s->lock);
  int rc = -EINVAL;
  if (s->initialized && device >= 0 && device < s->devices) {
    uint64_t device_free, device_total;
    rc = s->prims->mem_info(s->ctx, device, &device_free, &device_total);
    if (rc == 0) {
      /* An empty arena or freed memory kept for reuse is ours to hand out: free for this
       * process. */
      uint64_t kept = (uint64_t)s->device[device].empty_arenas * s->granule;
      uint64_t total = device_total;
      uint64_t held = s->device[device].held - kept + s->device[device].charged;
      if (s->mem_limit && s->mem_limit < total) total = s->mem_limit;
      uint64_t free_view = total > held ? total - held : 0;
      device_free += kept + s->device[device].kept_bytes;
      *free_bytes = free_view < device_free ? free_view : device_free;
      *total_bytes = total;
    }
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

/* The quota's view of memory the shim passes through (arrays, managed memory). */
static int charge_once(int device, uint64_t bytes, bool *could_trim) {
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->lock);
  int rc = -EINVAL;
  if (s->initialized && device >= 0 && device < s->devices) {
    struct device_state *d = &s->device[device];
    rc = 0;
    if (s->mem_limit && d->held + d->charged + d->kept_bytes + bytes > s->mem_limit) {
      rc = -ENOMEM;
      s->quota_refusals++;
    } else {
      d->charged += bytes;
    }
    *could_trim = d->empty_arenas != 0 || d->kept_count != 0;
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int vmem_quota_charge(int device, uint64_t bytes) {
  bool could_trim = false;
  int rc = charge_once(device, bytes, &could_trim);
  if (rc == -ENOMEM && could_trim && vmem_trim() == 0) rc = charge_once(device, bytes, &could_trim);
  return rc;
}

uint64_t vmem_quota_refusals(int device, uint64_t *held_bytes) {
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->lock);
  uint64_t refusals = s->quota_refusals;
  if (held_bytes) {
    const struct device_state *d =
        s->initialized && device >= 0 && device < s->devices ? &s->device[device] : NULL;
    *held_bytes = d ? d->held + d->charged + d->kept_bytes : 0;
  }
  pthread_mutex_unlock(&s->lock);
  return refusals;
}

void vmem_quota_uncharge(int device, uint64_t bytes) {
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->lock);
  if (s->initialized && device >= 0 && device < s->devices) {
    struct device_state *d = &s->device[device];
    d->charged = d->charged > bytes ? d->charged - bytes : 0;
  }
  pthread_mutex_unlock(&s->lock);
}
