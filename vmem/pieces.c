/* Residency piece by piece, for exchanges: a checkpoint gives back what it has saved while it
 * copies, a resume creates just what it is about to fill, so that two programs can trade one
 * device without either holding all of its memory and the other's at once. Remap only: a
 * translate chunk is one cudaMalloc'd block, which cannot be split. */
#include <errno.h>

#include "internal.h"

struct range_args {
  uintptr_t start, end;
  uint64_t bytes;      /* released or created so far */
  uint64_t epoch;      /* recreate: chunks it touched */
  uint64_t stamp;      /* recreate: pieces it made */
};

/* cb on every chunk overlapping [a->start, a->end), in address order; stops at the first error. */
static int each_chunk(struct range_args *a, int (*cb)(struct chunk *c, struct range_args *a)) {
  struct vmem_space *s = &vmem_space;
  uintptr_t start = a->start < s->base ? s->base : a->start;
  uintptr_t end = a->end > s->base + s->size ? s->base + s->size : a->end;
  for (uintptr_t p = start; p < end;) {
    struct chunk *c = s->owner[(p - s->base) >> s->shift];
    if (!c) {
      p = s->base + ((((p - s->base) >> s->shift) + 1) << s->shift);
      continue;
    }
    int rc = cb(c, a);
    if (rc) return rc;
    p = c->vaddr + c->va_bytes;
  }
  return 0;
}

static bool inside(const struct range_args *a, uintptr_t start, uint64_t bytes) {
  return start >= a->start && start + bytes <= a->end;
}

static bool overlaps(const struct range_args *a, uintptr_t start, uint64_t bytes) {
  return start < a->end && start + bytes > a->start;
}

/* c stops being wholly resident: it reads as released (its pieces may be gone any moment). */
static void leave_resident(struct chunk *c) {
  vmem_unpublish_delta(c);
  vmem_space.released_chunks++;
}

static int release_in(struct chunk *c, struct range_args *a) {
  if (!vmem_pieced(c)) {
    if (!c->resident || !inside(a, c->vaddr, c->backed)) return 0;
    leave_resident(c);
    int rc = vmem_backing_destroy(c);
    if (rc) {
      vmem_publish(c);
      vmem_space.released_chunks--;
      return rc;
    }
    a->bytes += c->backed;
    return 0;
  }
  for (uint32_t i = 0; i < c->piece_count; i++) {
    uintptr_t start;
    uint64_t bytes;
    vmem_piece_span(c, i, &start, &bytes);
    if (!c->pieces[i].handle || !inside(a, start, bytes)) continue;
    bool was_resident = c->resident;
    if (was_resident) leave_resident(c);
    int rc = vmem_piece_destroy(c, i);
    if (rc) {
      if (was_resident) {
        vmem_publish(c);
        vmem_space.released_chunks--;
      }
      return rc;
    }
    a->bytes += bytes;
  }
  return 0;
}

/* c became wholly resident again. */
static void become_resident(struct chunk *c) {
  vmem_publish(c);
  vmem_space.released_chunks--;
}

/* The released chunk that starts right where c ends, on c's device and backed whole (not in
 * pieces, not in a slab), or NULL. */
static struct chunk *next_released(const struct chunk *c) {
  struct vmem_space *s = &vmem_space;
  uintptr_t at = c->vaddr + c->backed;
  if (at < s->base || at >= s->base + s->size) return NULL;
  struct chunk *n = s->owner[(at - s->base) >> s->shift];
  if (!n || n->vaddr != at || n->resident || n->slab || vmem_pieced(n) || n->device != c->device)
    return NULL;
  return n;
}

/* c, backed whole and released, and the run of released chunks adjacent after it (even past the
 * range: a resume's copy comes to them next) get one slab, as recreate_all gives them: thousands
 * of small allocations made one driver call each halved a resume made beside its copy (8 GiB in
 * 2048 allocations: 0.50x of H2D on the H100, 2026-11-27). */
static int recreate_run_from(struct chunk *c, struct range_args *a) {
  struct chunk *run[SLAB_MAX_MEMBERS];
  size_t count = 1;
  run[0] = c;
  for (struct chunk *n = c->slab ? NULL : next_released(c); n && count < SLAB_MAX_MEMBERS;
       n = next_released(n)) {
    if (n->vaddr + n->backed - c->vaddr > SLAB_MAX_BYTES) break;
    run[count++] = n;
  }
  int rc = count > 1 ? vmem_slab_create(run, count) : vmem_backing_create(c);
  if (rc) return rc;
  for (size_t i = 0; i < count; i++) {
    run[i]->epoch = a->epoch;
    a->bytes += run[i]->backed;
    become_resident(run[i]);
  }
  return 0;
}

static int recreate_in(struct chunk *c, struct range_args *a) {
  if (c->resident) return 0;
  if (!vmem_pieced(c)) return recreate_run_from(c, a);
  for (uint32_t i = 0; i < c->piece_count; i++) {
    uintptr_t start;
    uint64_t bytes;
    vmem_piece_span(c, i, &start, &bytes);
    if (c->pieces[i].handle || !overlaps(a, start, bytes)) continue;
    int rc = vmem_piece_create(c, i, a->stamp);
    if (rc) return rc;
    c->epoch = a->epoch;
    a->bytes += bytes;
  }
  if (c->resident) become_resident(c);
  return 0;
}

/* A recreate failed: give back what it made, nothing else (pieces made before may hold data). */
static int undo_in(struct chunk *c, struct range_args *a) {
  if (c->epoch != a->epoch) return 0;
  if (c->resident) leave_resident(c);
  if (vmem_pieced(c)) vmem_pieces_undo(c, a->stamp);
  else vmem_backing_destroy(c); /* nothing better to do if the device refuses */
  return 0;
}

static int count_missing(struct chunk *c, struct range_args *a) {
  if (c->resident) return 0;
  if (!vmem_pieced(c)) {
    a->bytes += c->backed;
    return 0;
  }
  for (uint32_t i = 0; i < c->piece_count; i++) {
    uintptr_t start;
    uint64_t bytes;
    vmem_piece_span(c, i, &start, &bytes);
    if (!c->pieces[i].handle && overlaps(a, start, bytes)) a->bytes += bytes;
  }
  return 0;
}

static int run(uintptr_t start, uint64_t bytes, bool create, bool missing, uint64_t *bytes_changed) {
  struct vmem_space *s = &vmem_space;
  struct range_args a = {.start = start, .end = start + bytes < start ? UINTPTR_MAX : start + bytes};
  pthread_mutex_lock(&s->lock);
  int rc = !s->initialized ? -EINVAL : s->policy != VMEM_REMAP ? -ENOSYS : 0;
  if (rc == 0 && missing) {
    rc = each_chunk(&a, count_missing);
  } else if (rc == 0 && !create) {
    rc = each_chunk(&a, release_in);
  } else if (rc == 0) {
    a.epoch = ++s->epoch;
    a.stamp = ++s->piece_stamp;
    rc = each_chunk(&a, recreate_in);
    if (rc) {
      each_chunk(&a, undo_in);
      a.bytes = 0;
    }
  }
  pthread_mutex_unlock(&s->lock);
  if (bytes_changed) *bytes_changed = a.bytes;
  return rc;
}

int vmem_release_range(uintptr_t start, uint64_t bytes, uint64_t *bytes_changed) {
  return run(start, bytes, false, false, bytes_changed);
}

int vmem_recreate_range(uintptr_t start, uint64_t bytes, uint64_t *bytes_changed) {
  return run(start, bytes, true, false, bytes_changed);
}

int vmem_range_missing(uintptr_t start, uint64_t bytes, uint64_t *missing) {
  return run(start, bytes, false, true, missing);
}

uint64_t vmem_piece_bytes(void) {
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->lock);
  uint64_t bytes = s->initialized && s->policy == VMEM_REMAP ? s->piece_bytes : 0;
  pthread_mutex_unlock(&s->lock);
  return bytes;
}
