/* Allocation and free: small sizes share slabs of their size class, large ones (and dedicated
 * ones) get their own granule-aligned chunk. Also lookup and statistics, which read the same
 * bookkeeping. */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

static void partial_push(struct device_state *d, struct chunk *c) {
  c->partial_prev = NULL;
  c->partial_next = d->partial[c->size_class];
  if (c->partial_next) c->partial_next->partial_prev = c;
  d->partial[c->size_class] = c;
  c->in_partial = true;
}

static void partial_remove(struct device_state *d, struct chunk *c) {
  if (c->partial_prev) c->partial_prev->partial_next = c->partial_next;
  else d->partial[c->size_class] = c->partial_next;
  if (c->partial_next) c->partial_next->partial_prev = c->partial_prev;
  c->partial_next = c->partial_prev = NULL;
  c->in_partial = false;
}

static void chunk_free_memory(struct chunk *c) {
  free(c->used_bits);
  free(c->slot_bytes);
  free(c);
}

/* A new chunk of va_granules granules backing `backed` device bytes: quota, virtual space,
 * descriptor, device memory, tables, in that order, each undone if a later step fails. */
static int chunk_create(int device, uint64_t va_granules, uint64_t backed, bool slab,
                        unsigned size_class, struct chunk **out) {
  struct vmem_space *s = &vmem_space;
  struct device_state *d = &s->device[device];
  if (s->mem_limit && d->held + backed > s->mem_limit) return -ENOMEM;
  struct chunk *c = calloc(1, sizeof(*c));
  if (!c) return -ENOMEM;
  c->device = device;
  c->va_bytes = va_granules << s->shift;
  c->backed = backed;
  if (slab) {
    c->is_slab = true;
    c->size_class = size_class;
    c->slot_size = vmem_class_size(size_class);
    c->slots = (uint32_t)(c->va_bytes / c->slot_size);
    c->used_bits = calloc((c->slots + 63) / 64, sizeof(uint64_t));
    c->slot_bytes = calloc(c->slots, sizeof(uint32_t));
    if (!c->used_bits || !c->slot_bytes) {
      chunk_free_memory(c);
      return -ENOMEM;
    }
  }
  int rc = vmem_va_take(va_granules, &c->vaddr);
  if (rc) {
    chunk_free_memory(c);
    return rc;
  }
  rc = vmem_backing_create(c);
  if (rc) {
    vmem_va_give(c->vaddr, va_granules);
    chunk_free_memory(c);
    return rc;
  }
  vmem_publish(c);
  d->held += backed;
  d->chunks++;
  if (slab) {
    d->class_slabs[size_class]++;
    partial_push(d, c);
  }
  *out = c;
  return 0;
}

static int chunk_destroy(struct chunk *c) {
  struct vmem_space *s = &vmem_space;
  struct device_state *d = &s->device[c->device];
  bool was_released = !c->resident;
  vmem_unpublish_delta(c);
  int rc = vmem_backing_destroy(c);
  if (rc) {
    vmem_publish(c);
    return rc;
  }
  if (was_released) s->released_chunks--;
  vmem_forget(c);
  vmem_va_give(c->vaddr, c->va_bytes >> s->shift);
  d->held -= c->backed;
  d->chunks--;
  if (c->is_slab) {
    d->class_slabs[c->size_class]--;
    if (c->in_partial) partial_remove(d, c);
  }
  chunk_free_memory(c);
  return 0;
}

static int walk_destroy(struct chunk *c, void *arg) {
  (void)arg;
  struct device_state *d = &vmem_space.device[c->device];
  if (chunk_destroy(c) != 0) { /* the device refused; forget it anyway */
    vmem_forget(c);
    if (c->is_slab && c->in_partial) partial_remove(d, c);
    chunk_free_memory(c);
  }
  return 0;
}

void vmem_chunk_destroy_all(void) { vmem_walk(walk_destroy, NULL); }

static int slot_take(struct chunk *c, uint64_t size, uintptr_t *vptr) {
  uint32_t words = (c->slots + 63) / 64;
  for (uint32_t n = 0; n < words; n++) {
    uint32_t w = (c->hint_word + n) % words;
    uint64_t free_bits = ~c->used_bits[w];
    if (w == words - 1 && c->slots % 64) free_bits &= (1ull << (c->slots % 64)) - 1;
    if (!free_bits) continue;
    uint32_t slot = w * 64 + (uint32_t)__builtin_ctzll(free_bits);
    c->used_bits[w] |= 1ull << (slot % 64);
    c->slot_bytes[slot] = (uint32_t)size;
    c->used++;
    c->hint_word = w;
    *vptr = c->vaddr + (uint64_t)slot * c->slot_size;
    return 0;
  }
  return -ENOSPC; /* unreachable while the partial list is right */
}

static int alloc_locked(int device, uint64_t size, unsigned flags, void **vptr) {
  struct vmem_space *s = &vmem_space;
  struct device_state *d = &s->device[device];
  uintptr_t addr;
  int rc;
  if (size <= vmem_class_max() && !(flags & VMEM_ALLOC_DEDICATED)) {
    unsigned size_class = vmem_class_of(size);
    struct chunk *c = d->partial[size_class];
    if (!c) {
      rc = chunk_create(device, vmem_class_granules(size_class),
                        (uint64_t)vmem_class_granules(size_class) << s->shift, true, size_class,
                        &c);
      if (rc) return rc;
    }
    rc = slot_take(c, size, &addr);
    if (rc) return rc;
    if (c->used == c->slots) partial_remove(d, c);
  } else {
    uint64_t granules = (size + s->granule - 1) >> s->shift;
    if (granules > s->granules) return -ENOMEM;
    uint64_t backed = s->policy == VMEM_REMAP ? granules << s->shift
                                              : vmem_round_up(size, VMEM_NATIVE_ROUND);
    struct chunk *c;
    rc = chunk_create(device, granules, backed, false, 0, &c);
    if (rc) return rc;
    c->alloc_size = size;
    addr = c->vaddr;
  }
  d->allocations++;
  d->requested += size;
  *vptr = (void *)addr;
  return 0;
}

int vmem_alloc(int device, uint64_t size, unsigned flags, void **vptr) {
  struct vmem_space *s = &vmem_space;
  if (!vptr || (flags & ~VMEM_ALLOC_DEDICATED)) return -EINVAL;
  if (size == 0) {
    *vptr = NULL;
    return 0;
  }
  if (size > (1ull << 47)) return -ENOMEM;
  pthread_mutex_lock(&s->lock);
  int rc;
  if (!s->initialized) rc = -EINVAL;
  else if (device < 0 || device >= s->devices) rc = -EINVAL;
  else if (s->released_chunks) rc = -EBUSY;
  else rc = alloc_locked(device, size, flags, vptr);
  pthread_mutex_unlock(&s->lock);
  return rc;
}

/* The live allocation containing p, if any. Caller holds the lock. */
bool vmem_find_allocation(uintptr_t p, struct chunk **chunk, uintptr_t *base, uint64_t *size) {
  struct chunk *c = vmem_owner(p);
  if (!c) return false;
  uint64_t offset = p - c->vaddr;
  if (!c->is_slab) {
    if (offset >= c->alloc_size) return false;
    *base = c->vaddr;
    *size = c->alloc_size;
  } else {
    uint32_t slot = (uint32_t)(offset / c->slot_size);
    if (slot >= c->slots || !(c->used_bits[slot / 64] >> (slot % 64) & 1)) return false;
    uint64_t start = (uint64_t)slot * c->slot_size;
    if (offset - start >= c->slot_bytes[slot]) return false;
    *base = c->vaddr + start;
    *size = c->slot_bytes[slot];
  }
  *chunk = c;
  return true;
}

static int free_locked(uintptr_t p, const void *where) {
  struct vmem_space *s = &vmem_space;
  struct chunk *c;
  uintptr_t base;
  uint64_t size;
  if (!vmem_find_allocation(p, &c, &base, &size) || base != p) return -EINVAL;
  struct device_state *d = &s->device[c->device];
  if (c->is_slab) {
    uint32_t slot = (uint32_t)((p - c->vaddr) / c->slot_size);
    if (c->used == 1) {
      int rc = chunk_destroy(c);
      if (rc) return rc;
    } else {
      c->used_bits[slot / 64] &= ~(1ull << (slot % 64));
      c->slot_bytes[slot] = 0;
      c->used--;
      if (!c->in_partial) partial_push(d, c);
    }
  } else {
    int rc = chunk_destroy(c);
    if (rc) return rc;
  }
  d->allocations--;
  d->requested -= size;
  vmem_history_record(base, size, where);
  return 0;
}

int vmem_free(void *vptr, const void *where) {
  struct vmem_space *s = &vmem_space;
  if (!vptr) return 0;
  pthread_mutex_lock(&s->lock);
  int rc = s->initialized ? free_locked((uintptr_t)vptr, where) : -EINVAL;
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int vmem_lookup(const void *p, struct vmem_info *info) {
  struct vmem_space *s = &vmem_space;
  if (!info) return -EINVAL;
  pthread_mutex_lock(&s->lock);
  struct chunk *c;
  uintptr_t base;
  uint64_t size;
  int rc = -ENOENT;
  if (vmem_find_allocation((uintptr_t)p, &c, &base, &size)) {
    info->base = (void *)base;
    info->size = size;
    info->offset = (uintptr_t)p - base;
    info->real = c->resident ? c->real + (base - c->vaddr) : 0;
    info->device = c->device;
    info->state = c->resident ? VMEM_RESIDENT : VMEM_RELEASED;
    rc = 0;
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int vmem_get_stats(int device, struct vmem_stats *stats) {
  struct vmem_space *s = &vmem_space;
  if (!stats) return -EINVAL;
  pthread_mutex_lock(&s->lock);
  int rc = 0;
  if (!s->initialized || device >= s->devices) {
    rc = -EINVAL;
  } else {
    *stats = (struct vmem_stats){0};
    for (int i = 0; i < s->devices; i++) {
      if (device >= 0 && i != device) continue;
      struct device_state *d = &s->device[i];
      stats->allocations += d->allocations;
      stats->requested_bytes += d->requested;
      stats->chunks += d->chunks;
      stats->held_bytes += d->held;
      for (unsigned k = 0; k < vmem_class_count(); k++) stats->size_classes_used += d->class_slabs[k] != 0;
    }
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}
