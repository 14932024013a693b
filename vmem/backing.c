/* Device memory behind one chunk: physical memory mapped at the chunk's virtual address under
 * remap, a plain device allocation anywhere under translate. Both undo themselves on failure.
 * Under translate a chunk re-created at its old address by a resume lives in a home (home.c).
 * Under translate the memory of a freed chunk of up to VMEM_KEPT_MAX_BYTES is kept (a few per
 * device) for the next chunk of the same size: a program that allocates and frees a few MiB in a
 * loop otherwise pays the real cudaMalloc + cudaFree each time, on top of cudaw's own work. The
 * frees that retire a chunk come after the device passed every use of it (cudaFree synchronises,
 * stream-ordered frees wait for their event). Kept memory goes back when memory runs out, at a
 * checkpoint's release and at fini.
 * Under remap a chunk larger than the piece size is backed in pieces (one physical allocation
 * each, mapped end to end), so that an exchange can move it piece by piece (residency.c). */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

/* The index of kept memory of exactly bytes on device, or -1. */
static int find_kept(const struct device_state *d, uint64_t bytes) {
  for (uint32_t i = 0; i < d->kept_count; i++)
    if (d->kept[i].bytes == bytes) return (int)i;
  return -1;
}

bool vmem_backing_kept(int device, uint64_t backed) {
  return vmem_space.policy == VMEM_TRANSLATE && find_kept(&vmem_space.device[device], backed) >= 0;
}

void vmem_backing_drop_kept(int device) {
  struct vmem_space *s = &vmem_space;
  for (int dev = 0; dev < s->devices; dev++) {
    if (device >= 0 && dev != device) continue;
    struct device_state *d = &s->device[dev];
    for (uint32_t i = 0; i < d->kept_count; i++)
      s->prims->dev_free(s->ctx, dev, d->kept[i].real); /* nothing better to do if it fails */
    d->kept_count = 0;
    d->kept_bytes = 0;
  }
}

/* remap: new physical memory of `bytes` mapped at start, accessible to the owner and its peers;
 * nothing held on error. */
static int map_new(int device, uintptr_t start, uint64_t bytes, uint64_t *handle_out) {
  struct vmem_space *s = &vmem_space;
  const struct vmem_prims *p = s->prims;
  uint64_t handle;
  int rc = p->phys_create(s->ctx, device, bytes, &handle);
  if (rc) return rc;
  rc = p->map(s->ctx, start, bytes, handle);
  if (rc) goto release;
  rc = vmem_grant_access(start, bytes, device);
  if (rc) goto unmap;
  *handle_out = handle;
  return 0;
unmap:
  p->unmap(s->ctx, start, bytes);
release:
  p->phys_release(s->ctx, handle);
  return rc;
}

void vmem_piece_span(const struct chunk *c, uint32_t i, uintptr_t *start, uint64_t *bytes) {
  uint64_t piece = vmem_space.piece_bytes, offset = (uint64_t)i * piece;
  *start = c->vaddr + offset;
  *bytes = c->backed - offset < piece ? c->backed - offset : piece;
}

int vmem_piece_create(struct chunk *c, uint32_t i, uint64_t stamp) {
  if (c->pieces[i].handle) return 0;
  uintptr_t start;
  uint64_t bytes;
  vmem_piece_span(c, i, &start, &bytes);
  int rc = map_new(c->device, start, bytes, &c->pieces[i].handle);
  if (rc) return rc;
  c->pieces[i].stamp = stamp;
  if (++c->pieces_resident == c->piece_count) {
    c->real = c->vaddr;
    c->resident = true;
  }
  return 0;
}

int vmem_piece_destroy(struct chunk *c, uint32_t i) {
  struct vmem_space *s = &vmem_space;
  if (!c->pieces[i].handle) return 0;
  uintptr_t start;
  uint64_t bytes;
  vmem_piece_span(c, i, &start, &bytes);
  int rc = s->prims->unmap(s->ctx, start, bytes);
  if (rc) return rc;
  s->prims->phys_release(s->ctx, c->pieces[i].handle); /* unmapped: gone to us either way */
  c->pieces[i].handle = 0;
  c->pieces_resident--;
  c->real = 0;
  c->resident = false;
  return 0;
}

void vmem_pieces_undo(struct chunk *c, uint64_t since) {
  for (uint32_t i = 0; i < c->piece_count; i++)
    if (c->pieces[i].handle && c->pieces[i].stamp >= since) vmem_piece_destroy(c, i);
}

/* Every missing piece of c, all or none (the pieces resident before stay). */
static int create_pieces(struct chunk *c) {
  struct vmem_space *s = &vmem_space;
  if (!c->pieces) {
    uint64_t count = (c->backed + s->piece_bytes - 1) / s->piece_bytes;
    if (count > UINT32_MAX) return -EINVAL;
    c->pieces = calloc(count, sizeof *c->pieces);
    if (!c->pieces) return -ENOMEM;
    c->piece_count = (uint32_t)count;
  }
  uint64_t stamp = ++s->piece_stamp;
  for (uint32_t i = 0; i < c->piece_count; i++) {
    int rc = vmem_piece_create(c, i, stamp);
    if (rc) {
      vmem_pieces_undo(c, stamp);
      return rc;
    }
  }
  return 0;
}

/* Every resident piece of c: one unmap for all of them when all are there (per piece if the
 * device refuses). A failing unmap stops it with the rest resident. */
static int destroy_pieces(struct chunk *c) {
  struct vmem_space *s = &vmem_space;
  if (c->resident && s->prims->unmap(s->ctx, c->vaddr, c->backed) == 0) {
    for (uint32_t i = 0; i < c->piece_count; i++) {
      s->prims->phys_release(s->ctx, c->pieces[i].handle);
      c->pieces[i].handle = 0;
    }
    c->pieces_resident = 0;
  }
  for (uint32_t i = 0; i < c->piece_count; i++) {
    int rc = vmem_piece_destroy(c, i);
    if (rc) return rc;
  }
  c->real = 0;
  c->resident = false;
  return 0;
}

int vmem_backing_create(struct chunk *c) {
  struct vmem_space *s = &vmem_space;
  const struct vmem_prims *p = s->prims;
  if (s->policy == VMEM_TRANSLATE) {
    struct device_state *d = &s->device[c->device];
    int kept = find_kept(d, c->backed);
    if (kept >= 0) {
      c->real = d->kept[kept].real;
      d->kept[kept] = d->kept[--d->kept_count];
      d->kept_bytes -= c->backed;
      c->resident = true;
      return 0;
    }
    int rc = vmem_home_create(c);
    if (rc != -ENOSYS) return rc;
    uint64_t real = 0;
    rc = p->dev_malloc(s->ctx, c->device, c->backed, &real);
    if (rc) return rc;
    if (real == 0 || real % 2) { /* the delta table needs even, non-null addresses */
      p->dev_free(s->ctx, c->device, real);
      return -EIO;
    }
    c->real = real;
    c->resident = true;
    return 0;
  }
  if (c->slab) { /* released while its slab lives: still mapped there */
    vmem_slab_rejoin(c);
    return 0;
  }
  if (c->backed > s->piece_bytes) return create_pieces(c);
  uint64_t handle;
  int rc = map_new(c->device, c->vaddr, c->backed, &handle);
  if (rc) return rc;
  c->handle = handle;
  c->real = c->vaddr;
  c->resident = true;
  return 0;
}

/* On error the chunk is left resident and intact. A failing phys_release after a successful
 * unmap cannot be undone; the chunk counts as released (the handle is lost to us either way). */
int vmem_backing_destroy(struct chunk *c) {
  struct vmem_space *s = &vmem_space;
  const struct vmem_prims *p = s->prims;
  int rc;
  if (vmem_pieced(c)) return destroy_pieces(c);
  if (!c->resident) return 0;
  if (c->slab) {
    vmem_slab_leave(c, false);
    return 0;
  }
  if (s->policy == VMEM_TRANSLATE) {
    rc = c->home ? vmem_home_unback(c) : p->dev_free(s->ctx, c->device, c->real);
    if (rc == 0) c->old_real = c->real; /* where a recreate asks for it again */
  } else {
    rc = p->unmap(s->ctx, c->vaddr, c->backed);
    if (rc == 0) p->phys_release(s->ctx, c->handle);
  }
  if (rc) return rc;
  c->real = 0;
  c->handle = 0;
  c->resident = false;
  return 0;
}

int vmem_backing_retire(struct chunk *c) {
  struct vmem_space *s = &vmem_space;
  struct device_state *d = &s->device[c->device];
  if (s->policy != VMEM_TRANSLATE || !c->resident || c->is_arena || c->home ||
      c->backed > VMEM_KEPT_MAX_BYTES || d->kept_count == VMEM_KEPT_MAX)
    return vmem_backing_destroy(c);
  d->kept[d->kept_count++] = (struct kept_memory){c->real, c->backed};
  d->kept_bytes += c->backed;
  c->real = 0;
  c->resident = false;
  return 0;
}
