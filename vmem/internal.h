/* vmem's internal state, shared by its .c files and by nothing else. Everything here is guarded
 * by vmem_space.lock except the delta table, which readers load lock-free (see vmem.h). */
#ifndef CUDAW_VMEM_INTERNAL_H
#define CUDAW_VMEM_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "prims.h"
#include "vmem.h"

#define VMEM_MAX_DEVICES 64
/* translate: freed chunks' device memory kept per device, and the largest one kept (backing.c) */
#define VMEM_KEPT_MAX 4
#define VMEM_KEPT_MAX_BYTES (16ull << 20)
#define SLAB_DEFAULT_MAX_BYTES (256ull << 20) /* a resume's slab, unless the config says */
#define PIECE_DEFAULT_BYTES (1ull << 30) /* remap: a large chunk's pieces, unless the config says */
#define VMEM_MIN_ALIGN 256u
#define VMEM_UNIT 512u /* arenas hand out multiples of this (cudaMalloc's own rounding) */
#define VMEM_NATIVE_ROUND 512u /* cudaMalloc's own rounding, used for translate's large chunks */

/* One backing chunk: a large allocation, or an arena shared by small ones. */
struct chunk {
  uintptr_t vaddr;
  uint64_t va_bytes;   /* granule multiple */
  uint64_t backed;     /* device bytes held */
  uint64_t real;       /* 0 while released */
  uint64_t old_real;   /* translate: the real address before the last release (0: none) */
  uint64_t handle;     /* remap: physical memory handle (0 while in a slab or in pieces) */
  /* remap, a chunk larger than vmem_space.piece_bytes: one physical allocation per piece of that
   * size (the last one shorter), mapped one after another, so that an exchange (checkpoint's
   * pace) can give back and re-create its memory piece by piece. handle 0 = piece not resident.
   * resident is true only while every piece is; pieces_resident counts them. */
  struct piece { uint64_t handle, stamp; } *pieces; /* stamp: vmem_space.piece_stamp at birth */
  uint32_t piece_count, pieces_resident;
  struct slab *slab;   /* remap: the slab whose memory backs it, if any (slab.c); also while
                        * released with the slab still mapped for other members */
  uint64_t epoch;      /* recreate_all marks what it re-created */
  int device;
  bool resident;
  bool is_arena;
  uint64_t alloc_size; /* large: the requested size */
  /* arena only (arena.c) */
  uint32_t units, free_units;
  uint32_t no_run_of;    /* a run of this many free units is known not to exist (0: unknown) */
  uint64_t *used_bits;
  uint32_t *first_unit;  /* per used unit: the first unit of its allocation */
  uint32_t *unit_bytes;  /* per first unit: the requested size */
  struct chunk *open_next, *open_prev; /* arenas with free units, newest first */
  bool in_open;
  /* Every live chunk, so that descriptors stay reachable from ordinary memory (the owner table
   * is mmap'd: leak checkers do not scan it). */
  struct chunk *all_next, *all_prev;
  bool in_all;
  bool held_retire; /* held (vmem_hold_releases): how to end it when the hold ends */
  bool moved;       /* translate: the last recreate put it at a new real address */
  /* Outside chunks (outside.c): vaddr is the real address it was created at, outside the range;
   * its virtual extent is [vaddr, vaddr + backed). hidden: forgotten or held, so lookups skip it
   * but it still translates (entry) and still holds its virtual extent. */
  bool outside, hidden;
  uint64_t entry; /* like a delta-table entry: 0 = not backed, else (real - vaddr) + 1 */
  /* translate: the reserved range its memory is mapped in at its old real address (home.c);
   * NULL for memory from dev_malloc. Kept while released: the next resume maps it again. */
  struct home *home;
};

struct device_state {
  uint64_t held, requested, allocations, chunks;
  uint64_t charged; /* memory vmem does not back but counts against the quota */
  uint64_t peers;   /* remap: other devices given access to this device's chunks (bit each) */
  struct chunk *open_arenas;
  uint32_t arenas, empty_arenas;
  /* translate: device memory of freed chunks kept for the next chunk of the same size
   * (backing.c); counted against the quota, free for mem_info. */
  struct kept_memory { uint64_t real, bytes; } kept[VMEM_KEPT_MAX];
  uint32_t kept_count;
  uint64_t kept_bytes;
  signed char vmm_known; /* translate: 1 the device has VMM (chunks get homes), -1 not, 0 unasked */
};

struct home; /* home.c */

struct extent {
  uint64_t start, count; /* in granules */
};

struct freed_record {
  uintptr_t base;
  uint64_t size;
  const void *where;
};

struct vmem_space {
  pthread_mutex_t lock;
  bool initialized;
  const struct vmem_prims *prims;
  void *ctx;
  enum vmem_policy policy;
  uintptr_t base;
  uint64_t size, granule, granules;
  uint64_t table_granules; /* entries mapped in the owner and delta tables (>= granules) */
  unsigned shift;
  bool host_reserved, device_reserved;
  struct chunk **owner; /* per granule */
  struct chunk *all_chunks;
  struct extent *free_extents;
  uint64_t extent_count, extent_capacity, live_chunks;
  int devices;
  uint64_t mem_limit;
  uint64_t quota_refusals; /* chunks and charges mem_limit refused (vmem_quota_refusals) */
  uint64_t slab_max_bytes; /* see struct vmem_config */
  uint64_t piece_bytes;    /* see struct vmem_config: granule multiple */
  uint64_t piece_stamp;    /* bumped by every call that creates pieces, so that it can undo them */
  struct device_state *device;
  uint64_t epoch, released_chunks;
  uint64_t moved_bytes, moved_chunks; /* translate: what the last recreate could not put back */
  /* translate: what the last recreate put back at its old real address, and how much of that in
   * homes; the ranges the device would not reserve at their old address (home.c) */
  uint64_t in_place_bytes, in_place_chunks, in_place_mapped_bytes, in_place_refused;
  int in_place;        /* see struct vmem_config: 1 at a resume, 2 also at birth */
  struct home *homes;  /* every home, newest first */
  uint64_t home_bytes; /* their reserved bytes */
  bool check;
  /* vmem_hold_releases: chunks freed meanwhile, still mapped, off the tables (linked by all_next) */
  bool holding;
  struct chunk *held;
  struct freed_record *history;
  uint64_t history_capacity, history_count;
  /* Identity placement (translate): chunks outside the range, sorted by vaddr, non-overlapping.
   * Changed with lock and outside_lock held; vmem_translate_outside and vmem_owns read
   * it under outside_lock alone (a mutex: its readers are the slow paths). */
  bool identity;
  pthread_mutex_t outside_lock;
  struct chunk **outside;
  uint64_t outside_count, outside_capacity;
};

extern struct vmem_space vmem_space;

/* space.c: virtual extents and the per-granule tables. */
int vmem_va_take(uint64_t granules, uintptr_t *vaddr);
void vmem_va_give(uintptr_t vaddr, uint64_t granules);
void vmem_publish(struct chunk *c);   /* owner table + delta for a resident or released chunk */
void vmem_unpublish_delta(struct chunk *c);
void vmem_forget(struct chunk *c);    /* clear owner and delta */
void vmem_hide(struct chunk *c);      /* clear the owner only (lookups no longer find it) */
struct chunk *vmem_owner(uintptr_t p); /* NULL outside the range or unowned */
/* Walk chunks in address order; cb may not change the owner table. */
int vmem_walk(int (*cb)(struct chunk *c, void *arg), void *arg);

/* outside.c: chunks placed at their real address, outside the range. */
/* Whether [start, start + bytes) may become an outside chunk's virtual extent: clear of the
 * range and of every outside chunk (hidden ones included). */
bool vmem_outside_free(uintptr_t start, uint64_t bytes);
int vmem_outside_insert(struct chunk *c);    /* c->outside set, vaddr and backed final; -ENOMEM */
void vmem_outside_remove(struct chunk *c);   /* when its descriptor is freed */
void vmem_outside_set_entry(struct chunk *c, uint64_t entry);
void vmem_outside_hide(struct chunk *c, bool hidden);
struct chunk *vmem_outside_find(uintptr_t p); /* the visible outside chunk containing p */
/* Walk the visible outside chunks with lo <= vaddr < hi in address order; cb may end the chunk
 * it is given (the walk resumes after it). */
int vmem_outside_walk(uintptr_t lo, uintptr_t hi, int (*cb)(struct chunk *c, void *arg),
                      void *arg);
void vmem_outside_fini(void);

/* backing.c: device memory of one chunk under the current policy. */
int vmem_backing_create(struct chunk *c);
int vmem_backing_destroy(struct chunk *c);
/* Pieces (remap): piece i of c, and whether c is backed in pieces at all. A chunk has device
 * memory while it is resident or has a resident piece (vmem_backing_destroy gives it all back). */
static inline bool vmem_pieced(const struct chunk *c) { return c->piece_count > 1; }
static inline bool vmem_has_memory(const struct chunk *c) {
  return c->resident || c->pieces_resident > 0;
}
/* Give piece i of c device memory (mapped, accessible, stamped `stamp`) or take it back: 0 or
 * -errno, c's pieces unchanged on error. Neither touches the tables; c->resident and c->real
 * follow the pieces. Lock held. */
int vmem_piece_create(struct chunk *c, uint32_t i, uint64_t stamp);
int vmem_piece_destroy(struct chunk *c, uint32_t i);
void vmem_piece_span(const struct chunk *c, uint32_t i, uintptr_t *start, uint64_t *bytes);
/* Give back every piece of c stamped `since` or later: what the calls since then created. */
void vmem_pieces_undo(struct chunk *c, uint64_t since);
/* The chunk's memory is no longer wanted (its allocation was freed, the device is idle there):
 * under translate kept for the next chunk of its size on its device when small enough and room
 * is left, else destroyed. Lock held. */
int vmem_backing_retire(struct chunk *c);
/* Whether creating a chunk of `backed` bytes on device would take kept memory. Lock held. */
bool vmem_backing_kept(int device, uint64_t backed);
/* Give the kept memory of device (every device: -1) back to the device. Lock held. */
void vmem_backing_drop_kept(int device);

/* home.c (translate, devices with VMM): chunks re-created at their old real addresses. */
/* items: released chunks sorted by old real address. Makes resident at its old real address
 * every chunk it can (its home kept from an earlier resume, or a new one); the others stay
 * released for the allocator. Never fails: what it cannot do is left undone. Lock held. */
void vmem_home_place(struct chunk **items, size_t count);
/* Translate, a device with VMM: back new chunk c in a home of its own, a range reserved for it
 * alone, so that its address survives every checkpoint (0; -ENOSYS without VMM: use the
 * allocator; -errno). */
int vmem_home_create(struct chunk *c);
/* c, resident in a home, is about to be released: the last resident chunk of a home unmaps its
 * memory. 0, or -errno with nothing changed. The caller marks c released. */
int vmem_home_unback(struct chunk *c);
/* c, released or freed, leaves its home for good; the last member frees the reservation. */
void vmem_home_leave(struct chunk *c);
/* Give (enable) or take device's access to owner's mapped homes; the first error. */
int vmem_home_access(int owner, int device, int enable);
void vmem_home_fini(void); /* every home, whatever it holds */

/* peer.c: make a freshly mapped range of owner's memory accessible to owner and to every device
 * that enabled peer access to it (vmem_peer_access). 0 or -errno; on error the caller unmaps. */
int vmem_grant_access(uintptr_t vaddr, uint64_t bytes, int owner);

/* A slab's bounds: what a chunk freed while its slab lives may keep on the device. */
#define SLAB_MAX_MEMBERS 64
#define SLAB_MAX_BYTES (vmem_space.slab_max_bytes)

/* slab.c: one physical allocation for a run of 2 or more adjacent released chunks of one device
 * (each chunk's vaddr + backed is the next one's vaddr): created, mapped and made accessible
 * whole; on success every chunk is resident in it. 0 or -errno, nothing held on error. */
int vmem_slab_create(struct chunk **chunks, size_t count);
/* c stops using its slab (c becomes non-resident). `freed`: the program freed c, so its virtual
 * range is given back only when the slab goes (it stays mapped until then); the caller must not
 * give it back. The last resident member to leave unmaps and releases the slab. Released, not
 * freed, while others stay, c keeps `slab`: its range is still mapped there, so that it comes
 * back only through vmem_slab_rejoin (the driver maps nothing over a mapped range). */
void vmem_slab_leave(struct chunk *c, bool freed);
/* c, released while its slab lives (c->slab set, not resident), is resident in it again, with the
 * bytes it had. */
void vmem_slab_rejoin(struct chunk *c);
uint64_t vmem_slab_bytes(const struct chunk *c); /* 0 when not in a slab */
uintptr_t vmem_slab_vaddr(const struct chunk *c); /* the slab's start; c must be in one */

/* arena.c: small allocations inside one chunk. */
int vmem_arena_init(struct chunk *c);   /* c->va_bytes set; -ENOMEM */
void vmem_arena_fini(struct chunk *c);
uint32_t vmem_arena_units(uint64_t size);
int vmem_arena_take(struct chunk *c, uint64_t size, uintptr_t *vptr); /* -ENOSPC if no room */
/* The allocation covering offset: its start offset and requested size. */
bool vmem_arena_find(const struct chunk *c, uint64_t offset, uint64_t *start, uint64_t *size);
void vmem_arena_give(struct chunk *c, uint64_t start_offset);

/* alloc.c */
void vmem_chunk_destroy_all(void);
int vmem_release_held(void); /* ends the hold: destroys the held chunks. Lock held. */
/* check.c */
void vmem_history_record(uintptr_t base, uint64_t size, const void *where);
/* The live allocation containing p, if any. */
bool vmem_find_allocation(uintptr_t p, struct chunk **chunk, uintptr_t *base, uint64_t *size);

static inline uint64_t vmem_round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

#endif
