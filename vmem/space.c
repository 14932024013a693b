/* The virtual range: reservation on the host (and on the device under remap), the free-extent
 * allocator that carves chunks from it, and the per-granule owner and delta tables. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

struct vmem_fast_path vmem_fast;
struct vmem_space vmem_space = {.lock = PTHREAD_MUTEX_INITIALIZER,
                                .outside_lock = PTHREAD_MUTEX_INITIALIZER};

#define RESERVE_ATTEMPTS 8
#define DEFAULT_GRANULE (2ull << 20)
#define DEFAULT_HISTORY 4096

static const int host_flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

/* PROT_NONE host reservation of size bytes aligned to align. */
static int reserve_host(uint64_t size, uint64_t align, uintptr_t *out) {
  uint64_t len = size + align;
  void *p = mmap(NULL, len, PROT_NONE, host_flags, -1, 0);
  if (p == MAP_FAILED) return -ENOMEM;
  uintptr_t start = (uintptr_t)p, aligned = vmem_round_up(start, align);
  if (aligned > start) munmap(p, aligned - start);
  uintptr_t end = start + len, used_end = aligned + size;
  if (end > used_end) munmap((void *)used_end, end - used_end);
  *out = aligned;
  return 0;
}

/* Under remap the device and the host must agree on the range. The device gets the host range as
 * a hint; if it picks another address we move the host reservation there, and if that address is
 * taken on the host (a UVA driver reserves its ranges on the host itself) we try another host
 * range. As a last resort the device's own range is accepted: a UVA driver keeps host mappings
 * out of it. */
static int reserve_both(struct vmem_space *s) {
  uintptr_t tried[RESERVE_ATTEMPTS];
  int tried_count = 0, rc = 0;
  uint64_t device_addr = 0;
  for (int attempt = 0; attempt < RESERVE_ATTEMPTS; attempt++) {
    uintptr_t host;
    rc = reserve_host(s->size, s->granule, &host);
    if (rc) break;
    rc = s->prims->va_reserve(s->ctx, s->size, s->granule, host, &device_addr);
    /* A driver may fail a hint it cannot honour instead of ignoring it (seen on an H200 for
     * some sizes): let it pick the address, the host reservation follows below. */
    if (rc == -ENOMEM) rc = s->prims->va_reserve(s->ctx, s->size, s->granule, 0, &device_addr);
    if (rc) {
      munmap((void *)host, s->size);
      break;
    }
    if (device_addr == host) {
      s->base = host;
      s->host_reserved = s->device_reserved = true;
      goto done;
    }
    void *moved = mmap((void *)(uintptr_t)device_addr, s->size, PROT_NONE,
                       host_flags | MAP_FIXED_NOREPLACE, -1, 0);
    if (moved == (void *)(uintptr_t)device_addr) {
      munmap((void *)host, s->size);
      s->base = device_addr;
      s->host_reserved = s->device_reserved = true;
      goto done;
    }
    if (moved != MAP_FAILED) munmap(moved, s->size); /* kernel without NOREPLACE: a mere hint */
    tried[tried_count++] = host;
    if (attempt + 1 < RESERVE_ATTEMPTS) s->prims->va_free(s->ctx, device_addr, s->size);
  }
  if (rc == 0 && tried_count == RESERVE_ATTEMPTS) { /* the device keeps its own address */
    s->base = device_addr;
    s->device_reserved = true;
    s->host_reserved = false;
  }
done:
  for (int i = 0; i < tried_count; i++) munmap((void *)tried[i], s->size);
  return rc;
}

static int pick_policy(struct vmem_space *s, enum vmem_policy wanted) {
  int all_vmm = s->prims->va_reserve != NULL;
  for (int d = 0; d < s->devices && all_vmm; d++)
    if (s->prims->vmm_supported == NULL || s->prims->vmm_supported(s->ctx, d) != 1) all_vmm = 0;
  if (wanted == VMEM_REMAP && !all_vmm) return -ENOSYS;
  s->policy = wanted == VMEM_AUTO ? (all_vmm ? VMEM_REMAP : VMEM_TRANSLATE) : wanted;
  return 0;
}

static uint64_t pick_granule(struct vmem_space *s) {
  uint64_t granule = DEFAULT_GRANULE;
  for (int d = 0; d < s->devices && s->prims->granularity; d++) {
    uint64_t g = 0;
    if (s->prims->granularity(s->ctx, d, &g) == 0 && g > granule) granule = g;
  }
  uint64_t pow2 = DEFAULT_GRANULE;
  while (pow2 < granule) pow2 <<= 1;
  return pow2;
}

static bool prims_complete(const struct vmem_prims *p) {
  return p && p->device_count && p->mem_info && p->dev_malloc && p->dev_free;
}

static void *map_table(uint64_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, host_flags, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

static void release_reservation(struct vmem_space *s) {
  if (s->device_reserved) s->prims->va_free(s->ctx, s->base, s->size);
  if (s->host_reserved) munmap((void *)s->base, s->size);
  s->device_reserved = s->host_reserved = false;
}

static void free_tables(struct vmem_space *s) {
  if (vmem_fast.delta) munmap((void *)vmem_fast.delta, s->table_granules * sizeof(uint64_t));
  if (s->owner) munmap(s->owner, s->table_granules * sizeof(*s->owner));
  free(s->free_extents);
  free(s->device);
  free(s->history);
  vmem_fast.delta = NULL;
  s->owner = NULL;
  s->free_extents = NULL;
  s->device = NULL;
  s->history = NULL;
}

static int init_locked(struct vmem_space *s, const struct vmem_config *config) {
  int rc = s->prims->device_count(s->ctx, &s->devices);
  if (rc) return rc;
  if (s->devices < 1 || s->devices > VMEM_MAX_DEVICES) return -EINVAL;
  rc = pick_policy(s, config->policy);
  if (rc) return rc;
  s->granule = pick_granule(s);
  s->shift = (unsigned)__builtin_ctzll(s->granule);
  uint64_t size = config->va_size;
  if (size == 0) {
    for (int d = 0; d < s->devices; d++) {
      uint64_t free_bytes, total;
      rc = s->prims->mem_info(s->ctx, d, &free_bytes, &total);
      if (rc) return rc;
      size += 4 * total;
    }
  }
  s->size = vmem_round_up(size, s->granule);
  if (s->size == 0 || s->size > (1ull << 47)) return -EINVAL;
  s->granules = s->size >> s->shift;
  s->mem_limit = config->mem_limit;
  s->slab_max_bytes = config->slab_max_bytes ? config->slab_max_bytes : SLAB_DEFAULT_MAX_BYTES;
  s->piece_bytes = config->piece_bytes == VMEM_PIECE_NONE
                       ? VMEM_PIECE_NONE
                       : vmem_round_up(config->piece_bytes ? config->piece_bytes : PIECE_DEFAULT_BYTES,
                                       s->granule);
  s->check = config->check != 0;
  s->identity = config->identity != 0 && s->policy == VMEM_TRANSLATE;
  s->in_place = s->policy == VMEM_TRANSLATE ? config->in_place : 0;

  s->device = calloc((size_t)s->devices, sizeof(*s->device));
  s->extent_capacity = 16;
  s->free_extents = malloc(s->extent_capacity * sizeof(*s->free_extents));
  s->table_granules = s->granules;
  s->owner = map_table(s->granules * sizeof(*s->owner));
  vmem_fast.delta = map_table(s->granules * sizeof(uint64_t));
  if (s->check) {
    s->history_capacity = config->free_history ? config->free_history : DEFAULT_HISTORY;
    s->history = calloc(s->history_capacity, sizeof(*s->history));
  }
  if (!s->device || !s->free_extents || !s->owner || !vmem_fast.delta ||
      (s->check && !s->history)) {
    free_tables(s);
    return -ENOMEM;
  }
  s->free_extents[0] = (struct extent){0, s->granules};
  s->extent_count = 1;
  s->live_chunks = 0;

  /* A range sized by default (4 x device memory) shrinks until it can be reserved, down to the
   * devices' memory itself; an explicit CUDAW_VA_SIZE is taken as is. */
  uint64_t floor_size = config->va_size ? s->size : vmem_round_up(size / 4, s->granule);
  for (;;) {
    if (s->policy == VMEM_REMAP) {
      rc = reserve_both(s);
    } else {
      rc = reserve_host(s->size, s->granule, &s->base);
      s->host_reserved = rc == 0;
    }
    uint64_t smaller = vmem_round_up(s->size / 4 * 3, s->granule);
    if (rc != -ENOMEM || smaller < floor_size || smaller >= s->size) break;
    s->size = smaller;
    s->granules = s->size >> s->shift;
    s->free_extents[0] = (struct extent){0, s->granules};
  }
  if (rc) {
    free_tables(s);
    return rc;
  }
  vmem_fast.base = s->base;
  vmem_fast.shift = s->shift;
  atomic_store_explicit(&vmem_fast.size, s->size, memory_order_release);
  s->initialized = true;
  return 0;
}

int vmem_init(const struct vmem_config *config, const struct vmem_prims *prims, void *ctx) {
  if (!config || !prims_complete(prims)) return -EINVAL;
  if (config->policy != VMEM_AUTO && config->policy != VMEM_REMAP &&
      config->policy != VMEM_TRANSLATE)
    return -EINVAL;
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->lock);
  int rc = -EALREADY;
  if (!s->initialized) {
    s->prims = prims;
    s->ctx = ctx;
    rc = init_locked(s, config);
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}

void vmem_fini(void) {
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->lock);
  if (s->initialized) {
    atomic_store_explicit(&vmem_fast.size, 0, memory_order_release);
    atomic_fetch_add_explicit(&vmem_fast.ended, 1, memory_order_release);
    vmem_release_held();
    vmem_backing_drop_kept(-1);
    vmem_chunk_destroy_all();
    vmem_home_fini(); /* what chunks the device refused to free still held */
    vmem_outside_fini();
    release_reservation(s);
    free_tables(s);
    s->released_chunks = 0;
    s->initialized = false;
  }
  pthread_mutex_unlock(&s->lock);
}

enum vmem_policy vmem_policy(void) { return vmem_space.policy; }
uint64_t vmem_granule(void) { return vmem_space.granule; }
void vmem_range(uintptr_t *base, uint64_t *size) {
  *base = vmem_space.base;
  *size = atomic_load_explicit(&vmem_fast.size, memory_order_acquire);
}

/* First fit over the sorted free extents. The array always has room for one more extent than
 * there are live chunks plus one, so vmem_va_give never needs to allocate. */
int vmem_va_take(uint64_t granules, uintptr_t *vaddr) {
  struct vmem_space *s = &vmem_space;
  if (s->extent_capacity < s->live_chunks + 3) {
    uint64_t capacity = s->extent_capacity * 2;
    struct extent *grown = realloc(s->free_extents, capacity * sizeof(*grown));
    if (!grown) return -ENOMEM;
    s->free_extents = grown;
    s->extent_capacity = capacity;
  }
  for (uint64_t i = 0; i < s->extent_count; i++) {
    struct extent *e = &s->free_extents[i];
    if (e->count < granules) continue;
    *vaddr = s->base + (e->start << s->shift);
    e->start += granules;
    e->count -= granules;
    if (e->count == 0) {
      memmove(e, e + 1, (s->extent_count - i - 1) * sizeof(*e));
      s->extent_count--;
    }
    s->live_chunks++;
    return 0;
  }
  return -ENOMEM;
}

void vmem_va_give(uintptr_t vaddr, uint64_t granules) {
  struct vmem_space *s = &vmem_space;
  uint64_t start = (vaddr - s->base) >> s->shift, lo = 0, hi = s->extent_count;
  while (lo < hi) { /* first extent after start */
    uint64_t mid = (lo + hi) / 2;
    if (s->free_extents[mid].start < start) lo = mid + 1;
    else hi = mid;
  }
  struct extent *e = s->free_extents;
  bool join_prev = lo > 0 && e[lo - 1].start + e[lo - 1].count == start;
  bool join_next = lo < s->extent_count && start + granules == e[lo].start;
  if (join_prev && join_next) {
    e[lo - 1].count += granules + e[lo].count;
    memmove(&e[lo], &e[lo + 1], (s->extent_count - lo - 1) * sizeof(*e));
    s->extent_count--;
  } else if (join_prev) {
    e[lo - 1].count += granules;
  } else if (join_next) {
    e[lo].start = start;
    e[lo].count += granules;
  } else {
    memmove(&e[lo + 1], &e[lo], (s->extent_count - lo) * sizeof(*e));
    e[lo] = (struct extent){start, granules};
    s->extent_count++;
  }
  s->live_chunks--;
}

static void set_delta(struct chunk *c, uint64_t entry) {
  struct vmem_space *s = &vmem_space;
  if (c->outside) {
    vmem_outside_set_entry(c, entry);
    return;
  }
  uint64_t first = (c->vaddr - s->base) >> s->shift, n = c->va_bytes >> s->shift;
  for (uint64_t i = 0; i < n; i++)
    atomic_store_explicit(&vmem_fast.delta[first + i], entry, memory_order_release);
}

/* Owner table (or, outside the range, visibility to lookups) for one chunk. */
static void set_owner(struct chunk *c, struct chunk *owner) {
  struct vmem_space *s = &vmem_space;
  if (c->outside) {
    vmem_outside_hide(c, owner == NULL);
    return;
  }
  uint64_t first = (c->vaddr - s->base) >> s->shift, n = c->va_bytes >> s->shift;
  for (uint64_t i = 0; i < n; i++) s->owner[first + i] = owner;
}

void vmem_hide(struct chunk *c) { set_owner(c, NULL); }

void vmem_publish(struct chunk *c) {
  set_owner(c, c);
  set_delta(c, c->resident ? (uint64_t)(c->real - c->vaddr) + 1 : 0);
}

void vmem_unpublish_delta(struct chunk *c) { set_delta(c, 0); }

void vmem_forget(struct chunk *c) {
  set_delta(c, 0);
  set_owner(c, NULL);
}

struct chunk *vmem_owner(uintptr_t p) {
  struct vmem_space *s = &vmem_space;
  if (!s->initialized) return NULL;
  if (p - s->base >= s->size) return s->outside_count ? vmem_outside_find(p) : NULL;
  return s->owner[(p - s->base) >> s->shift];
}

/* Address order: outside chunks below the range, the range, outside chunks above it. */
int vmem_walk(int (*cb)(struct chunk *c, void *arg), void *arg) {
  struct vmem_space *s = &vmem_space;
  int rc = vmem_outside_walk(0, s->base, cb, arg);
  if (rc) return rc;
  for (uint64_t i = 0; i < s->granules;) {
    struct chunk *c = s->owner[i];
    if (!c) {
      i++;
      continue;
    }
    i += c->va_bytes >> s->shift;
    rc = cb(c, arg);
    if (rc) return rc;
  }
  return vmem_outside_walk(s->base + s->size, UINTPTR_MAX, cb, arg);
}
