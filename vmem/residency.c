/* Residency of device memory for checkpointing: enumerate the backing chunks, give all device
 * memory back while keeping every virtual address, and re-create it all or none. */
#include <errno.h>

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

static int release_one(struct chunk *c, void *arg) {
  int *first_error = arg;
  if (!c->resident) return 0;
  vmem_unpublish_delta(c);
  int rc = vmem_backing_destroy(c);
  if (rc) {
    vmem_publish(c);
    if (*first_error == 0) *first_error = rc;
    return 0;
  }
  vmem_space.released_chunks++;
  return 0;
}

int vmem_release_all(void) {
  struct vmem_space *s = &vmem_space;
  int first_error = 0;
  pthread_mutex_lock(&s->lock);
  if (s->initialized) vmem_walk(release_one, &first_error);
  else first_error = -EINVAL;
  pthread_mutex_unlock(&s->lock);
  return first_error;
}

struct recreate_args {
  uint64_t epoch;
  uint64_t created_bytes;
  uint64_t need[VMEM_MAX_DEVICES];
};

static int count_need(struct chunk *c, void *arg) {
  struct recreate_args *a = arg;
  if (!c->resident) a->need[c->device] += c->backed;
  return 0;
}

static int recreate_one(struct chunk *c, void *arg) {
  struct recreate_args *a = arg;
  if (c->resident) return 0;
  int rc = vmem_backing_create(c);
  if (rc) return rc;
  c->epoch = a->epoch;
  a->created_bytes += c->backed;
  return 0;
}

static int undo_one(struct chunk *c, void *arg) {
  struct recreate_args *a = arg;
  if (c->resident && c->epoch == a->epoch) vmem_backing_destroy(c);
  return 0;
}

static int publish_one(struct chunk *c, void *arg) {
  struct recreate_args *a = arg;
  if (c->epoch == a->epoch) vmem_publish(c);
  return 0;
}

static int recreate_locked(uint64_t *shortfall) {
  struct vmem_space *s = &vmem_space;
  struct recreate_args a = {.epoch = ++s->epoch};
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
  int rc = vmem_walk(recreate_one, &a);
  if (rc) {
    vmem_walk(undo_one, &a);
    *shortfall = total_need - a.created_bytes;
    return rc;
  }
  vmem_walk(publish_one, &a);
  s->released_chunks = 0;
  return 0;
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
