/* Device memory behind one chunk: physical memory mapped at the chunk's virtual address under
 * remap, a plain device allocation anywhere under translate. Both undo themselves on failure. */
#include <errno.h>

#include "internal.h"

int vmem_backing_create(struct chunk *c) {
  struct vmem_space *s = &vmem_space;
  const struct vmem_prims *p = s->prims;
  if (s->policy == VMEM_TRANSLATE) {
    uint64_t real = 0;
    int rc = p->dev_malloc(s->ctx, c->device, c->backed, &real);
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
    rc = p->dev_free(s->ctx, c->device, c->real);
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
