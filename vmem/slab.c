/* Slabs: one physical allocation behind a run of adjacent chunks that recreate_all re-creates
 * together, so that a resume costs one create + map + set_access per slab instead of per chunk
 * (the driver spends ~50 us on each mapping; thousands of allocations made a resume slow). A
 * mapping can only be undone whole, so a chunk freed while others in its slab live keeps its
 * device memory and its virtual range until the last member leaves or the next checkpoint
 * releases the slab; a slab is bounded (SLAB_MAX_MEMBERS, SLAB_MAX_BYTES) to bound that. */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

struct slab {
  uint64_t handle;
  uintptr_t vaddr;
  uint64_t bytes;
  uint32_t members; /* chunks still backed by it */
  uint32_t left;    /* chunks released while it lives: their ranges stay mapped (vmem_slab_rejoin) */
  uint32_t freed;   /* chunks freed by the program, whose ranges wait for the slab to go */
  struct {
    uintptr_t vaddr;
    uint64_t granules;
  } ranges[]; /* the freed chunks' virtual ranges */
};

uint64_t vmem_slab_bytes(const struct chunk *c) { return c->slab ? c->slab->bytes : 0; }
uintptr_t vmem_slab_vaddr(const struct chunk *c) { return c->slab->vaddr; }

int vmem_slab_create(struct chunk **chunks, size_t count) {
  struct vmem_space *s = &vmem_space;
  const struct vmem_prims *p = s->prims;
  if (count < 2) return -EINVAL;
  struct chunk *last = chunks[count - 1];
  struct slab *slab = malloc(sizeof *slab + count * sizeof slab->ranges[0]);
  if (!slab) return -ENOMEM;
  *slab = (struct slab){.vaddr = chunks[0]->vaddr,
                        .bytes = last->vaddr + last->backed - chunks[0]->vaddr,
                        .members = (uint32_t)count};
  int rc = p->phys_create(s->ctx, chunks[0]->device, slab->bytes, &slab->handle);
  if (rc) goto free_slab;
  rc = p->map(s->ctx, slab->vaddr, slab->bytes, slab->handle);
  if (rc) goto release;
  rc = vmem_grant_access(slab->vaddr, slab->bytes, chunks[0]->device);
  if (rc) goto unmap;
  for (size_t i = 0; i < count; i++) {
    chunks[i]->slab = slab;
    chunks[i]->handle = 0;
    chunks[i]->real = chunks[i]->vaddr;
    chunks[i]->resident = true;
  }
  return 0;
unmap:
  p->unmap(s->ctx, slab->vaddr, slab->bytes);
release:
  p->phys_release(s->ctx, slab->handle);
free_slab:
  free(slab);
  return rc;
}

void vmem_slab_leave(struct chunk *c, bool freed) {
  struct vmem_space *s = &vmem_space;
  struct slab *slab = c->slab;
  if (c->resident) slab->members--;
  else slab->left--; /* released before: freed now */
  c->real = 0;
  c->resident = false;
  if (freed) {
    slab->ranges[slab->freed].vaddr = c->vaddr;
    slab->ranges[slab->freed++].granules = c->va_bytes >> s->shift;
  }
  c->slab = NULL;
  if (slab->members > 0) {
    if (!freed) { /* released while others stay: its range stays mapped here */
      c->slab = slab;
      slab->left++;
    }
    return;
  }
  /* The last member: the memory goes, then the freed ranges can be handed out again. A failing
   * unmap leaves nothing we could do better; the handle is dropped either way. Chunks released
   * before are released for good now. */
  s->prims->unmap(s->ctx, slab->vaddr, slab->bytes);
  s->prims->phys_release(s->ctx, slab->handle);
  for (uintptr_t p = slab->vaddr; slab->left > 0 && p < slab->vaddr + slab->bytes;) {
    struct chunk *m = vmem_owner(p);
    if (m && m->slab == slab) {
      m->slab = NULL;
      slab->left--;
    }
    p = m && m->vaddr + m->backed > p ? m->vaddr + m->backed : p + (1ull << s->shift);
  }
  for (uint32_t i = 0; i < slab->freed; i++) vmem_va_give(slab->ranges[i].vaddr, slab->ranges[i].granules);
  free(slab);
}

void vmem_slab_rejoin(struct chunk *c) {
  c->slab->left--;
  c->slab->members++;
  c->handle = 0;
  c->real = c->vaddr;
  c->resident = true;
}
