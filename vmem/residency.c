/* Residency of device memory for checkpointing: enumerate the backing chunks, give all device
 * memory back while keeping every virtual address, and re-create it all or none. Under remap,
 * runs of adjacent chunks share one unmap at release and one slab (slab.c) at recreate: the
 * driver's cost is per mapping, so thousands of allocations cost what a few dozen do. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "internal.h"

struct for_each_args {
  int (*cb)(const struct vmem_chunk *chunk, void *ctx);
  void *ctx;
};

static int visit(struct chunk *c, void *arg) {
  struct for_each_args *a = arg;
  struct vmem_chunk info = {
      .vaddr = c->vaddr,
      .size = c->backed,
      .device = c->device,
      .real = c->real,
      .state = c->resident ? VMEM_RESIDENT : VMEM_RELEASED,
      .outside = c->outside,
      .moved = c->moved,
  };
  return a->cb(&info, a->ctx);
}

int vmem_for_each(int (*cb)(const struct vmem_chunk *chunk, void *ctx), void *ctx) {
  struct vmem_space *s = &vmem_space;
  if (!cb) return -EINVAL;
  struct for_each_args args = {cb, ctx};
  pthread_mutex_lock(&s->lock);
  int rc = s->initialized ? vmem_walk(visit, &args) : -EINVAL;
  pthread_mutex_unlock(&s->lock);
  return rc;
}

/* Chunks in address order, gathered so that runs of adjacent ones can share a driver call. */
struct chunk_array {
  struct chunk **items;
  size_t count, capacity;
  bool resident; /* which ones to gather */
};

/* resident: every chunk that holds device memory (a chunk in pieces may hold some); else every
 * chunk that misses some. */
static int gather(struct chunk *c, void *arg) {
  struct chunk_array *a = arg;
  if (a->resident ? !vmem_has_memory(c) : c->resident) return 0;
  if (a->count == a->capacity) {
    size_t capacity = a->capacity ? a->capacity * 2 : 256;
    struct chunk **items = realloc(a->items, capacity * sizeof *items);
    if (!items) return -ENOMEM;
    a->items = items;
    a->capacity = capacity;
  }
  a->items[a->count++] = c;
  return 0;
}

/* The end of the run of mapped-adjacent chunks on one device that starts at items[first], none
 * in a slab or in pieces, of at most max_members and max_bytes (the first chunk always counts):
 * one unmap covers such a run of separate mappings, one slab can back such a run of released
 * chunks. A chunk in pieces is a run of its own: its pieces must stay apart for exchanges. */
static size_t run_end(struct chunk **items, size_t count, size_t first, size_t max_members,
                      uint64_t max_bytes) {
  size_t end = first + 1;
  if (items[first]->slab || vmem_pieced(items[first])) return end;
  while (end < count && end - first < max_members && !items[end]->slab &&
         !vmem_pieced(items[end]) &&
         items[end]->device == items[first]->device &&
         items[end - 1]->vaddr + items[end - 1]->backed == items[end]->vaddr &&
         items[end]->vaddr + items[end]->backed - items[first]->vaddr <= max_bytes)
    end++;
  return end;
}

static uint64_t run_bytes(struct chunk **items, size_t first, size_t end) {
  return items[end - 1]->vaddr + items[end - 1]->backed - items[first]->vaddr;
}

static void release_failed(struct chunk *c, int rc, int *first_error) {
  vmem_publish(c);
  if (*first_error == 0) *first_error = rc;
}

/* Release one run under remap: one unmap for the run (per chunk if the driver refuses), then
 * each chunk's physical handle. */
static void release_run(struct chunk **items, size_t first, size_t end, int *first_error) {
  struct vmem_space *s = &vmem_space;
  for (size_t i = first; i < end; i++) vmem_unpublish_delta(items[i]);
  uint64_t bytes = run_bytes(items, first, end);
  if (end - first > 1 && s->prims->unmap(s->ctx, items[first]->vaddr, bytes) == 0) {
    for (size_t i = first; i < end; i++) {
      struct chunk *c = items[i];
      s->prims->phys_release(s->ctx, c->handle); /* unmapped: the handle is gone either way */
      c->real = c->handle = 0;
      c->resident = false;
      s->released_chunks++;
    }
    return;
  }
  for (size_t i = first; i < end; i++) {
    bool was_resident = items[i]->resident;
    int rc = vmem_backing_destroy(items[i]);
    if (rc) release_failed(items[i], rc, first_error);
    else if (was_resident) s->released_chunks++; /* else counted when it lost its first piece */
  }
}

int vmem_release_all(void) {
  struct vmem_space *s = &vmem_space;
  int first_error = 0;
  struct chunk_array a = {.resident = true};
  pthread_mutex_lock(&s->lock);
  if (!s->initialized) first_error = -EINVAL;
  else vmem_backing_drop_kept(-1); /* a pause gives the device back all it can */
  if (first_error == 0 && (first_error = vmem_walk(gather, &a)) == 0) {
    for (size_t i = 0; i < a.count;) {
      size_t end = s->policy == VMEM_REMAP ? run_end(a.items, a.count, i, SIZE_MAX, UINT64_MAX)
                                           : i + 1;
      release_run(a.items, i, end, &first_error);
      i = end;
    }
  }
  pthread_mutex_unlock(&s->lock);
  free(a.items);
  return first_error;
}

struct recreate_args {
  uint64_t epoch;
  uint64_t piece_stamp; /* pieces stamped this or later were created by this recreate */
  uint64_t created_bytes;
  uint64_t need[VMEM_MAX_DEVICES];
};

static uint64_t missing_bytes(const struct chunk *c) {
  if (c->resident) return 0;
  uint64_t bytes = c->backed;
  for (uint32_t i = 0; i < c->piece_count; i++) {
    uintptr_t start;
    uint64_t piece;
    vmem_piece_span(c, i, &start, &piece);
    if (c->pieces[i].handle) bytes -= piece;
  }
  return bytes;
}

static int count_need(struct chunk *c, void *arg) {
  struct recreate_args *a = arg;
  a->need[c->device] += missing_bytes(c);
  return 0;
}

/* Give a run of released chunks device memory again: one slab for two or more, the chunk's own
 * allocation for one. */
static int recreate_run(struct chunk **items, size_t count, struct recreate_args *a) {
  uint64_t missing = 0;
  for (size_t i = 0; i < count; i++) missing += missing_bytes(items[i]);
  int rc = count > 1 ? vmem_slab_create(items, count) : vmem_backing_create(items[0]);
  if (rc) return rc;
  for (size_t i = 0; i < count; i++) items[i]->epoch = a->epoch;
  a->created_bytes += missing;
  return 0;
}

static int undo_one(struct chunk *c, void *arg) {
  struct recreate_args *a = arg;
  if (vmem_pieced(c)) { /* its pieces made before this recreate may hold data: they stay */
    if (c->epoch == a->epoch) vmem_pieces_undo(c, a->piece_stamp);
    return 0;
  }
  if (c->resident && c->epoch == a->epoch) {
    uint64_t old_real = c->old_real; /* the address to ask for again is the original one */
    vmem_backing_destroy(c);
    c->old_real = old_real;
  }
  return 0;
}

static int publish_one(struct chunk *c, void *arg) {
  struct recreate_args *a = arg;
  if (c->epoch == a->epoch) vmem_publish(c);
  return 0;
}

/* translate: the old real address order, chunks never placed (old_real 0) last. */
static int by_old_real(const void *a, const void *b) {
  uint64_t x = (*(struct chunk *const *)a)->old_real - 1;
  uint64_t y = (*(struct chunk *const *)b)->old_real - 1;
  return x < y ? -1 : x > y;
}

/* translate: count what came back at its old real address (in a home or not) and what did not. */
static void count_moved(struct chunk **items, size_t count) {
  struct vmem_space *s = &vmem_space;
  s->moved_bytes = s->moved_chunks = 0;
  s->in_place_bytes = s->in_place_chunks = s->in_place_mapped_bytes = 0;
  for (size_t i = 0; i < count; i++) {
    struct chunk *c = items[i];
    c->moved = c->real != c->old_real;
    if (c->moved) {
      s->moved_bytes += c->backed;
      s->moved_chunks++;
    } else {
      s->in_place_bytes += c->backed;
      s->in_place_chunks++;
      if (c->home) s->in_place_mapped_bytes += c->backed;
    }
  }
}

static int recreate_locked(uint64_t *shortfall) {
  struct vmem_space *s = &vmem_space;
  struct recreate_args a = {.epoch = ++s->epoch, .piece_stamp = s->piece_stamp + 1};
  vmem_walk(count_need, &a);
  uint64_t total_need = 0, precheck_short = 0;
  for (int d = 0; d < s->devices; d++) {
    uint64_t free_bytes, total_bytes;
    total_need += a.need[d];
    if (a.need[d] && s->prims->mem_info(s->ctx, d, &free_bytes, &total_bytes) == 0 &&
        free_bytes < a.need[d])
      precheck_short += a.need[d] - free_bytes;
  }
  if (precheck_short) { /* cannot fit: fail before touching anything */
    *shortfall = precheck_short;
    return -ENOMEM;
  }
  struct chunk_array released = {.resident = false};
  int rc = vmem_walk(gather, &released);
  if (rc == 0 && s->policy == VMEM_TRANSLATE) {
    qsort(released.items, released.count, sizeof *released.items, by_old_real);
    /* First every old address that can be reserved again (home.c), then the allocator for the
     * rest, so that it cannot hand out an address a later chunk wanted back. */
    vmem_home_place(released.items, released.count);
    for (size_t i = 0; i < released.count; i++) /* all of them, for an undo */
      if (released.items[i]->resident) {
        released.items[i]->epoch = a.epoch;
        a.created_bytes += released.items[i]->backed;
      }
  }
  for (size_t i = 0; rc == 0 && i < released.count;) {
    size_t end = s->policy == VMEM_REMAP
                     ? run_end(released.items, released.count, i, SLAB_MAX_MEMBERS, SLAB_MAX_BYTES)
                     : i + 1;
    if (!released.items[i]->resident) rc = recreate_run(released.items + i, end - i, &a);
    i = end;
  }
  if (rc == 0 && s->policy == VMEM_TRANSLATE) count_moved(released.items, released.count);
  free(released.items);
  if (rc) {
    vmem_walk(undo_one, &a);
    *shortfall = total_need - a.created_bytes;
    return rc;
  }
  vmem_walk(publish_one, &a);
  s->released_chunks = 0;
  return 0;
}

int vmem_device_free(int device, uint64_t *free_bytes) {
  struct vmem_space *s = &vmem_space;
  uint64_t total;
  pthread_mutex_lock(&s->lock);
  int rc = !s->initialized || device < 0 || device >= s->devices
               ? -EINVAL
               : s->prims->mem_info(s->ctx, device, free_bytes, &total);
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int vmem_recreate_all(uint64_t *shortfall_bytes) {
  struct vmem_space *s = &vmem_space;
  uint64_t shortfall = 0;
  pthread_mutex_lock(&s->lock);
  int rc = s->initialized ? recreate_locked(&shortfall) : -EINVAL;
  pthread_mutex_unlock(&s->lock);
  if (shortfall_bytes) *shortfall_bytes = shortfall;
  return rc;
}
