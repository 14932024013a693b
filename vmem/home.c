/* Homes (translate, devices with VMM): a resume re-creates released chunks at their old real
 * addresses instead of asking the allocator for new memory, which on a GPU returns other
 * addresses and leaves every device pointer stored in device memory (pointer tables, library
 * plans and generators) stale. The granule-aligned ranges covering the chunks' old memory are
 * reserved with the old address as the hint; where the device grants exactly that address,
 * physical memory is mapped over the range and each chunk is resident at its old address again.
 * Chunks that share a granule (the allocator packs small blocks) share one range, and adjacent
 * ranges of one device are merged up to the slab bound (fewer driver calls per resume).
 *
 * A home keeps its reservation while any live chunk lies in it, across later checkpoints: a
 * release unmaps and releases its physical memory once none of its chunks is resident, and the
 * next resume maps new memory at the same, still reserved, address (nothing made meanwhile, such
 * as the context's stack memory set back before the chunks, can take it). Where the device will
 * not reserve the address, or any step fails, the chunks are left to the allocator (residency.c),
 * and what lands elsewhere is counted as moved. A chunk freed while others in its home live keeps
 * its memory mapped until the last one goes (a mapping is undone whole); such a home is not
 * mapped again whole at the next resume but freed, and its chunks get tight homes of their own
 * there, so freed memory is held for one checkpoint at most.
 *
 * Where the device has VMM, a chunk is born in a home of its own (vmem_home_create) instead of
 * coming from the allocator: small cudaMalloc blocks live in ranges the driver keeps reserved for
 * itself after they are freed, so the H100 would not grant their old address back (tests/gpu/
 * vmm_hint.cu: 64 MiB and 1 GiB blocks were granted, 256 B and 3 MiB ones not, and every program
 * of the corpus had a 2 MiB chunk move); a home made at birth keeps its address across every
 * checkpoint, as remap's ranges do. */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

struct home {
  uint64_t start, bytes; /* the reserved range, granule-aligned */
  uint64_t handle;       /* physical memory mapped over the whole range, while mapped */
  int device;
  bool mapped;
  uint32_t members;  /* live chunks whose memory lies in it */
  uint32_t resident; /* of those, the resident ones: the mapping lives while there are any */
  bool shrink;       /* a chunk left while others live: re-made to fit at the next resume */
  struct home *next, *prev;
};

static bool have_vmm_prims(const struct vmem_prims *p) {
  return p->vmm_supported && p->va_reserve && p->va_free && p->phys_create && p->phys_release &&
         p->map && p->unmap && p->set_access;
}

/* Physical memory over the whole reserved range, accessible to its device and its peers. */
static int map_home(struct home *h) {
  struct vmem_space *s = &vmem_space;
  const struct vmem_prims *p = s->prims;
  uint64_t handle;
  int rc = p->phys_create(s->ctx, h->device, h->bytes, &handle);
  if (rc) return rc;
  rc = p->map(s->ctx, h->start, h->bytes, handle);
  if (rc == 0) {
    rc = vmem_grant_access(h->start, h->bytes, h->device);
    if (rc) p->unmap(s->ctx, h->start, h->bytes);
  }
  if (rc) {
    p->phys_release(s->ctx, handle);
    return rc;
  }
  h->handle = handle;
  h->mapped = true;
  return 0;
}

static int unmap_home(struct home *h) {
  struct vmem_space *s = &vmem_space;
  int rc = s->prims->unmap(s->ctx, h->start, h->bytes);
  if (rc) return rc;
  s->prims->phys_release(s->ctx, h->handle); /* unmapped: the handle is gone either way */
  h->handle = 0;
  h->mapped = false;
  return 0;
}

static void drop_home(struct home *h) {
  struct vmem_space *s = &vmem_space;
  if (h->mapped) unmap_home(h);
  s->prims->va_free(s->ctx, h->start, h->bytes);
  if (h->prev) h->prev->next = h->next;
  else s->homes = h->next;
  if (h->next) h->next->prev = h->prev;
  s->home_bytes -= h->bytes;
  free(h);
}

static void enter_home(struct chunk *c, struct home *h) {
  c->home = h;
  c->real = c->old_real;
  c->resident = true;
  h->members++;
  h->resident++;
}

int vmem_home_unback(struct chunk *c) {
  struct home *h = c->home;
  if (h->resident == 1 && h->mapped) {
    int rc = unmap_home(h);
    if (rc) return rc;
  }
  h->resident--;
  return 0;
}

void vmem_home_leave(struct chunk *c) {
  struct home *h = c->home;
  c->home = NULL;
  if (--h->members == 0) drop_home(h);
  else h->shrink = true;
}

int vmem_home_create(struct chunk *c) {
  struct vmem_space *s = &vmem_space;
  const struct vmem_prims *p = s->prims;
  if (s->in_place < 2 || !have_vmm_prims(p)) return -ENOSYS;
  struct device_state *d = &s->device[c->device];
  if (d->vmm_known == 0) d->vmm_known = p->vmm_supported(s->ctx, c->device) == 1 ? 1 : -1;
  if (d->vmm_known < 0) return -ENOSYS;
  uint64_t bytes = vmem_round_up(c->backed, s->granule), start = 0;
  int rc = p->va_reserve(s->ctx, bytes, s->granule, 0, &start);
  if (rc) return rc;
  struct home *h = calloc(1, sizeof *h);
  if (!h) {
    p->va_free(s->ctx, start, bytes);
    return -ENOMEM;
  }
  *h = (struct home){.start = start, .bytes = bytes, .device = c->device};
  rc = map_home(h);
  if (rc) {
    free(h);
    p->va_free(s->ctx, start, bytes);
    return rc;
  }
  h->next = s->homes;
  if (h->next) h->next->prev = h;
  s->homes = h;
  s->home_bytes += bytes;
  c->old_real = start;
  enter_home(c, h);
  return 0;
}

/* Whether device can have homes at this resume (asked once per device and resume). */
static bool device_has_vmm(int device, signed char *known) {
  struct vmem_space *s = &vmem_space;
  if (known[device] < 0) known[device] = s->prims->vmm_supported(s->ctx, device) == 1;
  return known[device] == 1;
}

/* A run of candidates (sorted by old real address) whose granule-aligned ranges overlap: they
 * must share one reservation. mixed: of several devices (cannot share physical memory). */
struct cluster {
  size_t first, count;
  uint64_t start, end;
  int device;
  bool mixed;
};

static uint64_t align_down(uint64_t x, uint64_t to) { return x / to * to; }

/* Reserve [start, end) at exactly start and back it: a new home for chunks[0..count). false when
 * the device picked another address (or refused), or backing it failed: nothing is left held. */
static bool make_home(struct chunk **chunks, size_t count, uint64_t start, uint64_t end,
                      int device) {
  struct vmem_space *s = &vmem_space;
  const struct vmem_prims *p = s->prims;
  uint64_t bytes = end - start, got = 0;
  int rc = p->va_reserve(s->ctx, bytes, s->granule, start, &got);
  if (rc == 0 && got != start) {
    p->va_free(s->ctx, got, bytes);
    rc = -EADDRINUSE;
  }
  if (rc) {
    s->in_place_refused++;
    return false;
  }
  struct home *h = calloc(1, sizeof *h);
  if (h) *h = (struct home){.start = start, .bytes = bytes, .device = device};
  if (!h || map_home(h) != 0) {
    free(h);
    p->va_free(s->ctx, start, bytes);
    return false;
  }
  h->next = s->homes;
  if (h->next) h->next->prev = h;
  s->homes = h;
  s->home_bytes += bytes;
  for (size_t i = 0; i < count; i++) enter_home(chunks[i], h);
  return true;
}

/* Clusters of the candidates, in address order; *count receives how many (NULL: no memory). */
static struct cluster *find_clusters(struct chunk **cand, size_t n, size_t *count) {
  struct vmem_space *s = &vmem_space;
  struct cluster *clusters = malloc(n * sizeof *clusters);
  if (!clusters) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    struct chunk *c = cand[i];
    uint64_t start = align_down(c->old_real, s->granule);
    uint64_t end = vmem_round_up(c->old_real + c->backed, s->granule);
    struct cluster *last = k ? &clusters[k - 1] : NULL;
    if (last && start < last->end) { /* shares a granule with the cluster */
      if (end > last->end) last->end = end;
      if (c->device != last->device) last->mixed = true;
      last->count++;
      continue;
    }
    clusters[k++] = (struct cluster){i, 1, start, end, c->device, false};
  }
  *count = k;
  return clusters;
}

/* Homes for runs of adjacent clusters of one device (at most slab_max_bytes together, a single
 * cluster always); a run the device refuses is tried again cluster by cluster. */
static void place_clusters(struct chunk **cand, struct cluster *clusters, size_t count) {
  struct vmem_space *s = &vmem_space;
  for (size_t i = 0; i < count;) {
    size_t end = i + 1;
    if (!clusters[i].mixed)
      while (end < count && !clusters[end].mixed && clusters[end].device == clusters[i].device &&
             clusters[end].start == clusters[end - 1].end &&
             clusters[end].end - clusters[i].start <= s->slab_max_bytes)
        end++;
    struct cluster *a = &clusters[i], *b = &clusters[end - 1];
    size_t chunks = b->first + b->count - a->first;
    if (!a->mixed && !make_home(cand + a->first, chunks, a->start, b->end, a->device) &&
        end - i > 1)
      for (size_t j = i; j < end; j++)
        make_home(cand + clusters[j].first, clusters[j].count, clusters[j].start,
                  clusters[j].end, clusters[j].device);
    i = end;
  }
}

void vmem_home_place(struct chunk **items, size_t count) {
  struct vmem_space *s = &vmem_space;
  s->in_place_refused = 0;
  if (!s->in_place || !have_vmm_prims(s->prims)) return;
  signed char known[VMEM_MAX_DEVICES];
  for (int d = 0; d < VMEM_MAX_DEVICES; d++) known[d] = -1;
  /* Homes kept from earlier resumes: their addresses are still reserved, only memory is needed.
   * A chunk whose home cannot be backed, or holds freed space (shrink), leaves it: the last one
   * out frees the reservation, and below the chunks are placed again as new ones, at the same
   * addresses, which nothing can have taken in between (the lock is held). */
  for (struct home *h = s->homes; h; h = h->next)
    if (!h->mapped && h->resident == 0 && !h->shrink) map_home(h);
  for (size_t i = 0; i < count; i++) {
    struct chunk *c = items[i];
    if (!c->home) continue;
    struct home *h = c->home;
    if (h->mapped) {
      c->real = c->old_real;
      c->resident = true;
      h->resident++;
    } else {
      vmem_home_leave(c);
    }
  }
  /* New homes for the rest, in old address order. */
  struct chunk **cand = malloc(count * sizeof *cand + 1);
  if (!cand) return;
  size_t n = 0;
  for (size_t i = 0; i < count; i++) {
    struct chunk *c = items[i];
    if (!c->resident && !c->home && c->old_real && device_has_vmm(c->device, known))
      cand[n++] = c;
  }
  size_t clusters_count = 0;
  struct cluster *clusters = n ? find_clusters(cand, n, &clusters_count) : NULL;
  if (clusters) place_clusters(cand, clusters, clusters_count);
  free(clusters);
  free(cand);
}

int vmem_home_access(int owner, int device, int enable) {
  struct vmem_space *s = &vmem_space;
  int first_error = 0;
  for (struct home *h = s->homes; h; h = h->next) {
    if (h->device != owner || !h->mapped) continue;
    int rc = enable ? s->prims->set_access(s->ctx, h->start, h->bytes, device)
                    : s->prims->revoke_access(s->ctx, h->start, h->bytes, device);
    if (rc && !first_error) first_error = rc;
    if (rc && enable) break;
  }
  return first_error;
}

void vmem_home_fini(void) {
  while (vmem_space.homes) drop_home(vmem_space.homes);
}
