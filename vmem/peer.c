/* Peer access to VMM-backed chunks. cudaDeviceEnablePeerAccess opens cudaMalloc memory of the
 * peer to the current device, but not memory mapped with cuMemMap: that is reachable only from
 * the devices cuMemSetAccess named. Under remap all of vmem's memory is of the second kind, so
 * vmem keeps, per owning device, the set of devices the program opened it to, and applies it to
 * every mapping it makes (new chunks, slabs, chunks re-created after a checkpoint). Under
 * translate the same holds for the chunks a resume re-created in place (home.c). */
#include <errno.h>

#include "internal.h"

int vmem_grant_access(uintptr_t vaddr, uint64_t bytes, int owner) {
  struct vmem_space *s = &vmem_space;
  int rc = s->prims->set_access(s->ctx, vaddr, bytes, owner);
  uint64_t peers = s->device[owner].peers;
  for (int d = 0; rc == 0 && d < s->devices; d++)
    if (d != owner && (peers >> d & 1)) rc = s->prims->set_access(s->ctx, vaddr, bytes, d);
  return rc;
}

struct apply {
  int owner, device, enable;
  uintptr_t last_slab; /* slab members are adjacent: apply once per slab, to the whole mapping */
  int rc;
};

/* Runs with the lock held, in address order. A mapping's access can only be changed whole, so a
 * slab's members are handled through their slab. */
static int apply_one(struct chunk *c, void *arg) {
  struct apply *a = arg;
  if (c->device != a->owner || !c->resident) return 0;
  uintptr_t vaddr = c->vaddr;
  uint64_t bytes = c->backed;
  if (c->slab) {
    vaddr = vmem_slab_vaddr(c);
    if (vaddr == a->last_slab) return 0;
    a->last_slab = vaddr;
    bytes = vmem_slab_bytes(c);
  }
  struct vmem_space *s = &vmem_space;
  int rc = a->enable ? s->prims->set_access(s->ctx, vaddr, bytes, a->device)
                     : s->prims->revoke_access(s->ctx, vaddr, bytes, a->device);
  if (rc && a->rc == 0) a->rc = rc;
  return a->enable ? rc : 0; /* enabling stops at the first error; revoking does what it can */
}

int vmem_peer_access(int device, int peer, int enable) {
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->lock);
  int rc = 0;
  if (!s->initialized || device < 0 || peer < 0 || device >= s->devices || peer >= s->devices ||
      device == peer) {
    rc = -EINVAL;
    goto out;
  }
  struct device_state *owner = &s->device[peer];
  uint64_t bit = 1ull << device;
  if (!!(owner->peers & bit) == !!enable) goto out;
  if (s->policy == VMEM_TRANSLATE && s->homes) { /* memory re-created in place (home.c) */
    if (!enable && !s->prims->revoke_access) {
      rc = -ENOSYS;
      goto out;
    }
    rc = vmem_home_access(peer, device, enable);
    if (rc && enable && s->prims->revoke_access) vmem_home_access(peer, device, 0);
  }
  if (s->policy == VMEM_REMAP) {
    if (!enable && !s->prims->revoke_access) {
      rc = -ENOSYS;
      goto out;
    }
    struct apply a = {.owner = peer, .device = device, .enable = enable};
    vmem_walk(apply_one, &a);
    rc = a.rc;
    if (rc && enable) { /* as it was: take back what was given */
      struct apply undo = {.owner = peer, .device = device, .enable = 0};
      if (s->prims->revoke_access) vmem_walk(apply_one, &undo);
    }
  }
  if (rc == 0 || !enable) { /* a failed revoke still stops future grants */
    if (enable) owner->peers |= bit;
    else owner->peers &= ~bit;
  }
out:
  pthread_mutex_unlock(&s->lock);
  return rc;
}

int vmem_peer_enabled(int device, int peer) {
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->lock);
  int enabled = s->initialized && device >= 0 && peer >= 0 && device < s->devices &&
                peer < s->devices && (s->device[peer].peers >> device & 1);
  pthread_mutex_unlock(&s->lock);
  return enabled;
}
