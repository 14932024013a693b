/* Device memory behind one chunk: physical memory mapped at the chunk's virtual address under
 * remap, a plain device allocation anywhere under translate. Both undo themselves on failure.
 * Under translate a chunk re-created at its old address by a resume lives in a home (home.c).
 * Under translate the memory of a freed chunk of up to VMEM_KEPT_MAX_BYTES is kept (a few per
 * device) for the next chunk of the same size: a program that allocates and frees a few MiB in a
 * loop otherwise pays the real cudaMalloc + cudaFree each time, on top of cudaw's own work. The
 * frees that retire a chunk come after the device passed every use of it (cudaFree synchronises,
 * stream-ordered frees wait for their event). Kept memory goes back when memory runs out, at a
 * checkpoint's release and at fini. */
#include <errno.h>

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
  uint64_t handle;
  int rc = p->phys_create(s->ctx, c->device, c->backed, &handle);
  if (rc) return rc;
  rc = p->map(s->ctx, c->vaddr, c->backed, handle);
  if (rc) goto release;
  rc = vmem_grant_access(c->vaddr, c->backed, c->device);
  if (rc) goto unmap;
  c->handle = handle;
  c->real = c->vaddr;
  c->resident = true;
  return 0;
unmap:
  p->unmap(s->ctx, c->vaddr, c->backed);
release:
  p->phys_release(s->ctx, handle);
  return rc;
}

/* On error the chunk is left resident and intact. A failing phys_release after a successful
 * unmap cannot be undone; the chunk counts as released (the handle is lost to us either way). */
int vmem_backing_destroy(struct chunk *c) {
  struct vmem_space *s = &vmem_space;
  const struct vmem_prims *p = s->prims;
  int rc;
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
