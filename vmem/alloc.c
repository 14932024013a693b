/* Allocation and free: small sizes share arenas (arena.c), large ones (and dedicated
 * ones) get their own granule-aligned chunk. Also lookup and statistics, which read the same
 * bookkeeping. */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

static void open_push(struct device_state *d, struct chunk *c) {
  c->open_prev = NULL;
  c->open_next = d->open_arenas;
  if (c->open_next) c->open_next->open_prev = c;
  d->open_arenas = c;
  c->in_open = true;
}

static void open_remove(struct device_state *d, struct chunk *c) {
  if (c->open_prev) c->open_prev->open_next = c->open_next;
  else d->open_arenas = c->open_next;
  if (c->open_next) c->open_next->open_prev = c->open_prev;
  c->open_next = c->open_prev = NULL;
  c->in_open = false;
}

static void chunk_free_memory(struct chunk *c) {
  if (c->outside) vmem_outside_remove(c);
  if (c->in_all) {
    if (c->all_prev) c->all_prev->all_next = c->all_next;
    else vmem_space.all_chunks = c->all_next;
    if (c->all_next) c->all_next->all_prev = c->all_prev;
  }
  if (c->is_arena) vmem_arena_fini(c);
  free(c->pieces);
  free(c);
}

/* Identity placement (translate): the device memory first, then the chunk goes at its real
 * address when that extent is free, else takes virtual space from the range. On success c is
 * resident; on failure nothing is held. */
static int place_identity(struct chunk *c, uint64_t va_granules) {
  int rc = vmem_backing_create(c);
  if (rc) return rc;
  if (vmem_outside_free(c->real, c->backed)) {
    c->vaddr = c->real;
    c->entry = 1; /* translates to itself from the start */
    if (vmem_outside_insert(c) == 0) return 0;
  }
  rc = vmem_va_take(va_granules, &c->vaddr);
  if (rc) vmem_backing_destroy(c);
  return rc;
}

/* A new chunk of va_granules granules backing `backed` device bytes: quota, virtual space,
 * descriptor, device memory, tables, in that order, each undone if a later step fails. */
static int chunk_create(int device, uint64_t va_granules, uint64_t backed, bool arena,
                        struct chunk **out) {
  struct vmem_space *s = &vmem_space;
  struct device_state *d = &s->device[device];
  /* Kept memory counts against the quota too, unless this chunk takes it. */
  uint64_t kept = d->kept_bytes - (!arena && vmem_backing_kept(device, backed) ? backed : 0);
  if (s->mem_limit && d->held + d->charged + kept + backed > s->mem_limit) {
    s->quota_refusals++;
    return -ENOMEM;
  }
  struct chunk *c = calloc(1, sizeof(*c));
  if (!c) return -ENOMEM;
  c->device = device;
  c->va_bytes = va_granules << s->shift;
  c->backed = backed;
  if (arena && vmem_arena_init(c) != 0) {
    chunk_free_memory(c);
    return -ENOMEM;
  }
  int rc = s->identity ? place_identity(c, va_granules) : vmem_va_take(va_granules, &c->vaddr);
  if (rc) {
    chunk_free_memory(c);
    return rc;
  }
  if (!c->resident && (rc = vmem_backing_create(c)) != 0) {
    vmem_va_give(c->vaddr, va_granules);
    chunk_free_memory(c);
    return rc;
  }
  vmem_publish(c);
  c->all_next = s->all_chunks;
  if (c->all_next) c->all_next->all_prev = c;
  s->all_chunks = c;
  c->in_all = true;
  d->held += backed;
  d->chunks++;
  if (arena) {
    d->arenas++;
    d->empty_arenas++;
    open_push(d, c);
  }
  *out = c;
  return 0;
}

/* The device side of a chunk's end: its memory and its virtual range. */
static int chunk_unback(struct chunk *c, bool retire) {
  struct vmem_space *s = &vmem_space;
  bool in_slab = c->slab != NULL;
  vmem_unpublish_delta(c);
  int rc = 0;
  if (in_slab) vmem_slab_leave(c, true); /* its range is given back with the slab */
  else rc = retire ? vmem_backing_retire(c) : vmem_backing_destroy(c);
  if (rc) return rc;
  if (c->home) vmem_home_leave(c);
  if (!in_slab && !c->outside) vmem_va_give(c->vaddr, c->va_bytes >> s->shift);
  s->device[c->device].held -= c->backed;
  return 0;
}

/* Hold a resident chunk instead (vmem_hold_releases): off the owner table, so that nothing finds
 * it, but its delta stays, so that vmem_translate (the copy engine's) still maps its range. */
static void chunk_hold(struct chunk *c, bool retire) {
  struct vmem_space *s = &vmem_space;
  vmem_hide(c);
  if (c->in_all) {
    if (c->all_prev) c->all_prev->all_next = c->all_next;
    else s->all_chunks = c->all_next;
    if (c->all_next) c->all_next->all_prev = c->all_prev;
    c->in_all = false;
  }
  c->held_retire = retire;
  c->all_prev = NULL;
  c->all_next = s->held;
  s->held = c;
}

int vmem_release_held(void) {
  struct vmem_space *s = &vmem_space;
  int first_error = 0;
  while (s->held) {
    struct chunk *c = s->held;
    s->held = c->all_next;
    c->all_next = NULL;
    int rc = chunk_unback(c, c->held_retire);
    if (rc && !first_error) first_error = rc; /* the device refused: forget it anyway */
    chunk_free_memory(c);
  }
  s->holding = false;
  return first_error;
}

/* retire: the program freed it (its memory may be kept for reuse, backing.c). */
static int chunk_destroy(struct chunk *c, bool retire) {
  struct vmem_space *s = &vmem_space;
  struct device_state *d = &s->device[c->device];
  bool was_released = !c->resident, hold = s->holding && c->resident;
  if (hold) {
    chunk_hold(c, retire);
  } else {
    vmem_forget(c);
    int rc = chunk_unback(c, retire);
    if (rc) {
      vmem_publish(c);
      return rc;
    }
  }
  if (was_released) s->released_chunks--;
  d->chunks--;
  if (c->is_arena) {
    d->arenas--;
    if (c->free_units == c->units) d->empty_arenas--;
    if (c->in_open) open_remove(d, c);
  }
  if (!hold) chunk_free_memory(c);
  return 0;
}

int vmem_hold_releases(int on) {
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->lock);
  int rc = -EINVAL;
  if (s->initialized) {
    rc = 0;
    if (on) s->holding = true;
    else rc = vmem_release_held();
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

uint64_t vmem_held_bytes(void) {
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->lock);
  uint64_t bytes = 0;
  for (struct chunk *c = s->held; c; c = c->all_next) bytes += c->backed;
  pthread_mutex_unlock(&s->lock);
  return bytes;
}

static int walk_destroy(struct chunk *c, void *arg) {
  (void)arg;
  struct device_state *d = &vmem_space.device[c->device];
  if (chunk_destroy(c, false) != 0) { /* the device refused; forget it anyway */
    vmem_forget(c);
    if (c->is_arena && c->in_open) open_remove(d, c);
    chunk_free_memory(c);
  }
  return 0;
}

void vmem_chunk_destroy_all(void) { vmem_walk(walk_destroy, NULL); }

/* Small: first fit in the open arenas, newest first; a new arena when none has room. */
static int alloc_small(int device, uint64_t size, uintptr_t *addr) {
  struct vmem_space *s = &vmem_space;
  struct device_state *d = &s->device[device];
  uint32_t units = vmem_arena_units(size);
  struct chunk *c;
  for (c = d->open_arenas; c; c = c->open_next)
    if (c->free_units >= units && vmem_arena_take(c, size, addr) == 0) break;
  if (!c) {
    int rc = chunk_create(device, 1, s->granule, true, &c);
    if (rc) return rc;
    rc = vmem_arena_take(c, size, addr);
    if (rc) return rc; /* cannot happen: size <= half a granule */
  }
  if (c->free_units + units == c->units) d->empty_arenas--;
  if (c->free_units == 0) open_remove(d, c);
  return 0;
}

/* A small allocation's arena became empty: keep one empty arena per device, so that alloc/free
 * pairs do not create and destroy device memory each time; give back any other. */
static int arena_emptied(struct chunk *c) {
  struct device_state *d = &vmem_space.device[c->device];
  d->empty_arenas++;
  if (d->empty_arenas > 1) return chunk_destroy(c, false);
  return 0;
}

uint64_t vmem_small_max(void) { return vmem_space.granule / 2; }

static int alloc_once(int device, uint64_t size, unsigned flags, void **vptr) {
  struct vmem_space *s = &vmem_space;
  struct device_state *d = &s->device[device];
  uintptr_t addr;
  int rc;
  if (size <= vmem_small_max() && !(flags & VMEM_ALLOC_DEDICATED)) {
    rc = alloc_small(device, size, &addr);
    if (rc) return rc;
  } else {
    uint64_t granules = (size + s->granule - 1) >> s->shift;
    if (granules > s->granules) return -ENOMEM;
    uint64_t backed = s->policy == VMEM_REMAP ? granules << s->shift
                                              : vmem_round_up(size, VMEM_NATIVE_ROUND);
    struct chunk *c;
    rc = chunk_create(device, granules, backed, false, &c);
    if (rc) return rc;
    c->alloc_size = size;
    addr = c->vaddr;
  }
  d->allocations++;
  d->requested += size;
  *vptr = (void *)addr;
  return 0;
}

static int walk_trim(struct chunk *c, void *arg);

/* Out of device memory or quota: give back the empty arenas and the memory kept for reuse and
 * try again. */
static int alloc_locked(int device, uint64_t size, unsigned flags, void **vptr) {
  int rc = alloc_once(device, size, flags, vptr);
  struct device_state *d = &vmem_space.device[device];
  if (rc == -ENOMEM && (d->empty_arenas || d->kept_count)) {
    vmem_walk(walk_trim, NULL);
    vmem_backing_drop_kept(-1);
    rc = alloc_once(device, size, flags, vptr);
  }
  return rc;
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
  if (!c->is_arena) {
    if (offset >= c->alloc_size) return false;
    *base = c->vaddr;
    *size = c->alloc_size;
  } else {
    uint64_t start;
    if (!vmem_arena_find(c, offset, &start, size)) return false;
    *base = c->vaddr + start;
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
  atomic_fetch_add_explicit(&vmem_fast.ended, 1, memory_order_release);
  struct device_state *d = &s->device[c->device];
  if (c->is_arena) {
    vmem_arena_give(c, p - c->vaddr);
    if (!c->in_open) open_push(d, c);
    if (c->free_units == c->units) {
      int rc = arena_emptied(c);
      if (rc) return rc;
    }
  } else {
    int rc = chunk_destroy(c, true);
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
      stats->arenas += d->arenas;
      stats->empty_arenas += d->empty_arenas;
    }
    stats->moved_bytes = s->moved_bytes; /* not kept per device: a resume is process-wide */
    stats->moved_chunks = s->moved_chunks;
    stats->in_place_bytes = s->in_place_bytes;
    stats->in_place_chunks = s->in_place_chunks;
    stats->in_place_mapped_bytes = s->in_place_mapped_bytes;
    stats->in_place_refused = s->in_place_refused;
    stats->home_bytes = s->home_bytes;
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

static int walk_trim(struct chunk *c, void *arg) {
  (void)arg;
  if (c->is_arena && c->free_units == c->units) return chunk_destroy(c, false);
  return 0;
}

int vmem_trim(void) {
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->lock);
  int rc = s->initialized ? vmem_walk(walk_trim, NULL) : -EINVAL;
  if (rc == 0) vmem_backing_drop_kept(-1);
  pthread_mutex_unlock(&s->lock);
  return rc;
}
