/* vmem: cudaw's virtual device address space. Hands out virtual device pointers from one reserved
 * range (or, under translate with identity placement, at their real address outside it), backs
 * them with device memory through struct vmem_prims (prims.h), translates virtual to real
 * addresses lock-free, and can give all device memory back and re-create it (checkpoint).
 *
 * Conventions: every int function returns 0 or -errno. One process-wide instance. All functions
 * except the inline readers take one internal mutex; the inline readers (vmem_in_range,
 * vmem_translate) take no lock and may run concurrently with anything except vmem_fini.
 *
 * Bookkeeping costs (host memory): 16 bytes per granule of the virtual range (delta and owner
 * tables, mapped lazily, so untouched parts cost nothing); per backing chunk one ~120-byte
 * descriptor; an arena (one granule shared by small allocations, in 512-byte units) adds 8 bytes +
 * 1 bit per unit (33 KiB per 2 MiB arena). Per allocation: no further host memory. Time:
 * vmem_translate O(1) (two loads), vmem_lookup and vmem_free O(1) (a small free also clears its
 * units' bits), vmem_alloc for small sizes a first-fit bitmap scan of the open arenas (64 words
 * each), otherwise O(free extents) to find virtual space plus the device calls. */
#ifndef CUDAW_VMEM_H
#define CUDAW_VMEM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "size.h" /* vmem_parse_size */

struct vmem_prims;

enum vmem_policy {
  VMEM_AUTO,      /* remap when every device supports VMM, else translate */
  VMEM_REMAP,     /* physical memory mapped at the virtual address: virtual == real */
  VMEM_TRANSLATE, /* dev_malloc at any real address; kernel arguments need translation */
};

struct vmem_config {
  uint64_t va_size;          /* bytes of virtual range; 0: 4 x the sum of all devices' memory */
  uint64_t mem_limit;        /* per-device quota in bytes (CUDAW_MEM_LIMIT); 0: none */
  enum vmem_policy policy;   /* CUDAW_VMEM_POLICY */
  int check;                 /* CUDAW_CHECK: keep a history of frees for use-after-free reports */
  unsigned free_history;     /* entries in that history when check is on; 0: 4096 */
  int identity;              /* translate: a chunk's virtual address is its real one wherever that
                                range is free (see vmem_alloc); 0: always from the virtual range */
  uint64_t slab_max_bytes;   /* remap: what one physical allocation re-created at a resume may
                              * back (a chunk freed while its slab lives keeps its memory until
                              * the slab goes); 0: 256 MiB; 1: no slabs, every chunk its own.
                              * translate: the same bound on merging adjacent homes */
  uint64_t piece_bytes;      /* remap: a chunk larger than this is backed by several physical
                              * allocations of at most this many bytes (rounded up to the
                              * granule), so that vmem_release_range and vmem_recreate_range can
                              * move it piece by piece; 0: 1 GiB; VMEM_PIECE_NONE: never split */
  int in_place;              /* translate, devices with VMM: 1: a resume re-creates chunks at
                                their old real addresses in reserved ranges (see
                                vmem_recreate_all); 2: also, every chunk is born in a reserved
                                range of its own, which keeps its address across checkpoints (a
                                GPU keeps small cudaMalloc blocks' ranges for itself); 0: a resume
                                only asks the allocator */
};

/* Initialise the address space: pick the policy, reserve the virtual range on the host
 * (PROT_NONE, MAP_NORESERVE, so no host or device mapping can land in it) and, under remap, the
 * same range on the device. prims and ctx must stay valid until vmem_fini. Call once, before any
 * other vmem function (vmem_in_range/vmem_translate are safe before: they see an empty range).
 * -EALREADY when already initialised, -EINVAL for a bad config or primitives, -ENOSYS for
 * VMEM_REMAP without VMM, -ENOMEM when the range cannot be reserved. */
int vmem_init(const struct vmem_config *config, const struct vmem_prims *prims, void *ctx);

/* Give back every allocation's device memory and the reservations; forget everything. Only for
 * process exit and tests: no other vmem call (inline readers included) may run concurrently. */
void vmem_fini(void);

/* The policy in force (never VMEM_AUTO after init), granule size, virtual range. */
enum vmem_policy vmem_policy(void);
uint64_t vmem_granule(void);
void vmem_range(uintptr_t *base, uint64_t *size);

/* Allocation flags. */
#define VMEM_ALLOC_DEDICATED 0x1u /* own granule-aligned chunk even when small */

/* Allocate size bytes on device; *vptr receives a 512-byte-aligned virtual device pointer.
 * Under translate with config.identity the chunk's device memory is made first and, when its real
 * range [real, real + bytes) lies outside the reserved range and overlaps no other chunk's virtual
 * range, the chunk's virtual address is its real address (an "outside" chunk, 256-byte aligned
 * as cudaMalloc's are): pointers the program stores in device memory are then valid on the device
 * until a resume puts the chunk elsewhere. Otherwise it comes from the reserved range.
 * Sizes up to half a granule share arenas (packed in 512-byte units, like cudaMalloc rounds);
 * larger ones, and VMEM_ALLOC_DEDICATED, get their own granule-aligned chunk. size 0 behaves like cudaMalloc(0): success, *vptr = NULL, nothing held.
 * -ENOMEM when the quota, the device or the virtual range is exhausted (nothing is left behind),
 * -EINVAL for a bad device or flags, -EBUSY while memory is released (vmem_release_all). */
int vmem_alloc(int device, uint64_t size, unsigned flags, void **vptr);

/* Free an allocation. vptr NULL: success (like cudaFree(NULL)). -EINVAL for an interior pointer,
 * an unknown pointer or a double free (with check on, vmem_check_range then names the earlier
 * free). where: the caller's return address (__builtin_return_address(0) in the shim), kept in the
 * free history. Works in the released state too. */
int vmem_free(void *vptr, const void *where);

/* Fast checks, lock-free. Inside the virtual range? */
struct vmem_fast_path {
  uintptr_t base;
  _Atomic uint64_t size;  /* 0 until initialised: published last */
  unsigned shift;         /* log2(granule) */
  _Atomic uint64_t *delta; /* per granule: 0 = not backed, else (real - virtual) + 1 (even) */
  _Atomic uint64_t ended;  /* allocations ended so far (freed, or all by vmem_fini) */
  /* Chunks outside the range (identity placement): how many exist, and how many of them do not
   * translate to themselves (released, being freed, or moved by a resume). */
  _Atomic uint64_t outside_count, outside_irregular;
  _Atomic uintptr_t outside_low, outside_high; /* bounds of every outside chunk so far */
};
extern struct vmem_fast_path vmem_fast;

/* How many allocations have ended. While it is unchanged, what vmem_lookup said about an
 * allocation's extent still holds: callers may cache it (the shim's per-thread range checks). */
static inline uint64_t vmem_ended(void) {
  return atomic_load_explicit(&vmem_fast.ended, memory_order_acquire);
}

static inline int vmem_in_range(const void *p) {
  uint64_t off = (uint64_t)((uintptr_t)p - vmem_fast.base);
  return off < atomic_load_explicit(&vmem_fast.size, memory_order_acquire);
}

/* Whether some pointer outside the range may need translating (an outside chunk moved or is
 * released): while 0, vmem_translate of any pointer outside the range is the pointer itself. */
static inline int vmem_outside_irregular(void) {
  return atomic_load_explicit(&vmem_fast.outside_irregular, memory_order_acquire) != 0;
}

/* Slow path of vmem_translate for a pointer outside the range (takes a lock). */
void *vmem_translate_outside(const void *p);

/* Whether p belongs to vmem: inside the range, or inside a live allocation placed outside it
 * (identity). Use this, not vmem_in_range, to decide whether a pointer is cudaw's. Lock-free
 * inside the range and while no chunk lies outside it; else a lock and a binary search. */
int vmem_owns(const void *p);

/* Virtual -> real. A pointer outside the range and outside every outside chunk is returned
 * unchanged (host pointers, real device pointers of other allocators), and so is one in an
 * outside chunk that sits at its real address (identity); in a moved outside chunk, its new real
 * address; in a released or freed one, NULL. Inside the range, the real address if its granule
 * is backed (identity under remap), else NULL (never allocated, freed, or released). Granule precision: a pointer into
 * an unallocated unit of a live arena still translates; use vmem_check_range for exactness. For an
 * end pointer (one past an allocation) translate p - 1 and add 1. */
static inline void *vmem_translate(const void *p) {
  uint64_t off = (uint64_t)((uintptr_t)p - vmem_fast.base);
  if (off >= atomic_load_explicit(&vmem_fast.size, memory_order_acquire))
    return vmem_outside_irregular() ? vmem_translate_outside(p) : (void *)p;
  uint64_t entry = atomic_load_explicit(&vmem_fast.delta[off >> vmem_fast.shift],
                                        memory_order_acquire);
  if (entry == 0) return NULL;
  return (void *)((uintptr_t)p + (uintptr_t)(entry - 1));
}

enum vmem_state { VMEM_RESIDENT, VMEM_RELEASED };

struct vmem_info {
  void *base;            /* the allocation's start (what vmem_alloc returned) */
  uint64_t size;         /* its requested size */
  uint64_t offset;       /* p - base */
  uint64_t real;         /* real address of base; 0 while released */
  int device;
  enum vmem_state state;
};

/* The live allocation containing p (interior pointers included, p < base + size). O(1).
 * -ENOENT when p is in no live allocation. */
int vmem_lookup(const void *p, struct vmem_info *info);

/* One backing chunk: a large allocation's or an arena's device memory. */
struct vmem_chunk {
  uintptr_t vaddr;       /* virtual start, granule-aligned */
  uint64_t size;         /* bytes backed on the device (copy this many) */
  int device;
  uint64_t real;         /* real address (== vaddr under remap); 0 while released */
  enum vmem_state state;
  int outside;           /* translate: placed outside the range, at its real address */
  int moved;             /* translate: the last resume put it at another real address */
};

/* Call cb for every backing chunk, in address order, with the mutex held: cb may use the inline
 * readers and vmem_lookup-free code only (no vmem calls: they would deadlock). A non-zero return
 * from cb stops the walk and is returned. */
int vmem_for_each(int (*cb)(const struct vmem_chunk *chunk, void *ctx), void *ctx);

/* Give every resident chunk's device memory back (remap: unmap + release physical, the device
 * reservation stays; translate: dev_free). Allocations keep their virtual addresses; their state
 * becomes released and vmem_translate returns NULL for them. Copy contents out first. Idempotent;
 * on a device error the chunk stays resident, the rest continue, the first error is returned. */
int vmem_release_all(void);

/* Hold releases (live checkpoints): while on, a chunk whose allocation is freed (or an arena
 * that empties) keeps its device memory mapped at its real address, and vmem_translate still
 * answers for it, but it is gone for everything else (lookup, vmem_for_each, release_all) and its
 * virtual range stays unused: a copy queued on it before the free reads valid memory instead of
 * faulting the context. Turning it off gives the held memory and ranges back. 0 or -errno (off:
 * the first device error; the rest are released anyway); -EINVAL before init. */
int vmem_hold_releases(int on);
/* Bytes of device memory held so, for tests and status. */
uint64_t vmem_held_bytes(void);

/* Re-create device memory for every released chunk, all or none. Under remap the real address is
 * the virtual one again. Under translate each chunk is asked for at its old real address. With
 * config.in_place on a device with VMM, first by reserving the granule-aligned ranges that cover
 * the old addresses (chunks sharing a granule share a range) with the old address as the hint;
 * where the device grants it, physical memory is mapped there and the chunks are back where they
 * were. Such a range stays reserved while any of its chunks lives, across later checkpoints, so
 * later resumes get the same addresses for certain; it is unmapped and freed once its last chunk
 * is freed (a freed chunk's memory stays until then, or until the next resume, which re-makes
 * the range to fit the chunks left). The rest (no VMM, the address refused,
 * any step failed) comes from dev_malloc in the order of the old real addresses, with the same
 * sizes, so that a device allocator that hands out addresses deterministically returns the same
 * ones; each result is checked, and what landed elsewhere is counted in vmem_stats.moved_bytes
 * (see vmem_for_each).
 * -ENOMEM when device memory runs out: everything re-created by this call is given back again,
 * nothing is lost, *shortfall_bytes (may be NULL) receives how many released bytes were still
 * missing when it stopped (freeing that much device memory lets a retry succeed, fragmentation
 * aside). */
int vmem_recreate_all(uint64_t *shortfall_bytes);

/* Exchanges: device memory given back and re-created piece by piece while the program is paused,
 * so that a copy can release what it has saved, or create just what it is about to fill. A piece
 * is a whole chunk up to config.piece_bytes, else one piece of a larger chunk (remap only).
 * vmem_release_range releases every resident piece lying wholly inside [start, start + bytes);
 * vmem_recreate_range re-creates every released piece that overlaps it, all or none (on error
 * what this call created is given back). *bytes_changed (may be NULL) receives the device bytes
 * released or created. A chunk with some pieces released reads as released (vmem_for_each,
 * vmem_translate) until all are back; vmem_release_all and vmem_recreate_all finish what the
 * ranges began. -ENOSYS under translate (a cudaMalloc'd block cannot be split), -EINVAL before
 * init, -ENOMEM or another device error from recreate. */
int vmem_release_range(uintptr_t start, uint64_t bytes, uint64_t *bytes_changed);
int vmem_recreate_range(uintptr_t start, uint64_t bytes, uint64_t *bytes_changed);
/* The device bytes vmem_recreate_range would create for the same range now (*missing). */
int vmem_range_missing(uintptr_t start, uint64_t bytes, uint64_t *missing);
/* The piece size in force (remap), 0 under translate or before init. */
uint64_t vmem_piece_bytes(void);

/* struct vmem_config.piece_bytes: every chunk keeps one physical allocation. */
#define VMEM_PIECE_NONE UINT64_MAX

/* Peer access (cudaDeviceEnablePeerAccess / Disable with `device` current): under remap, physical
 * memory mapped with the VMM calls is accessible only to the devices cuMemSetAccess names (the
 * driver does not extend a context's peer access to it, as it does for cudaMalloc memory), so
 * enabling gives `device` access to every chunk of `peer` now, to every chunk created later and to
 * every chunk re-created by vmem_recreate_all; disabling takes it away again. Under translate
 * plain device memory follows the runtime's peer access, and only the chunks re-created in place
 * (VMM memory, see vmem_recreate_all) are changed so. Idempotent. -EINVAL
 * for bad or equal devices or before init; a device error (-EIO, ...) leaves the access as it
 * was; -ENOSYS for disabling where the primitives cannot revoke. */
int vmem_peer_access(int device, int peer, int enable);
/* Whether `device` has access to `peer`'s chunks through vmem_peer_access (0 or 1). */
int vmem_peer_enabled(int device, int peer);

/* For cudaMemGetInfo: total = min(device total, mem_limit); free = total minus what this process
 * holds through vmem (released memory included: it will come back), never more than the device
 * has free right now. */
int vmem_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes);

/* The device's own free memory now (not the quota's view): what a resume can still make there
 * (vmem_recreate_all checks the same before it starts). -EINVAL for a bad device or before init. */
int vmem_device_free(int device, uint64_t *free_bytes);

/* Device memory vmem does not back but that counts against the quota and in vmem_mem_info (the
 * shim's CUDA arrays and managed memory). Charge before (or right after) allocating: -ENOMEM when
 * it would exceed CUDAW_MEM_LIMIT (nothing is charged then), -EINVAL for a bad device or before
 * init. Uncharge exactly what was charged when the memory is freed. */
int vmem_quota_charge(int device, uint64_t bytes);
void vmem_quota_uncharge(int device, uint64_t bytes);

/* How many chunks and charges CUDAW_MEM_LIMIT has refused so far (only ever grows; a refusal a
 * trim then satisfied counts too), and what counts against the limit on `device` now
 * (*held_bytes, may be NULL). */
uint64_t vmem_quota_refusals(int device, uint64_t *held_bytes);

enum vmem_check_kind {
  VMEM_CHECK_OK,          /* inside one live allocation */
  VMEM_CHECK_OUTSIDE,     /* not in the virtual range at all (host or foreign pointer) */
  VMEM_CHECK_UNALLOCATED, /* in the range, no live allocation there and no recorded free */
  VMEM_CHECK_OVERFLOW,    /* starts in a live allocation but runs past its end */
  VMEM_CHECK_FREED,       /* in an allocation that was freed (use after free) */
  VMEM_CHECK_RELEASED,    /* in a live allocation whose memory is released */
};

struct vmem_check_report {
  enum vmem_check_kind kind;
  void *base;             /* the allocation concerned (live, or freed for VMEM_CHECK_FREED) */
  uint64_t size;
  const void *freed_where; /* VMEM_CHECK_FREED: the where passed to vmem_free */
};

/* Validate that [p, p + size) lies inside one live, resident allocation (size 0 checks p alone).
 * Returns 0 (report->kind OK) or -EFAULT with report filled. Free history is only kept with
 * config.check; without it freed memory reads as VMEM_CHECK_UNALLOCATED. O(1) when OK, O(history)
 * for a use after free. */
int vmem_check_range(const void *p, uint64_t size, struct vmem_check_report *report);

struct vmem_stats {
  uint64_t allocations;     /* live allocations */
  uint64_t requested_bytes; /* sum of their requested sizes */
  uint64_t chunks;          /* backing chunks (arenas + large) */
  uint64_t held_bytes;      /* device bytes they hold (released ones included) */
  uint64_t arenas;          /* arenas of small allocations (among the chunks) */
  uint64_t empty_arenas;    /* of those, empty ones kept for reuse (at most one per device) */
  uint64_t moved_bytes;     /* translate: bytes the last vmem_recreate_all put at a new real
                               address (pointers to them stored in device memory are stale) */
  uint64_t moved_chunks;    /* the chunks those bytes belong to */
  uint64_t in_place_bytes;  /* translate: bytes the last vmem_recreate_all put back at their old
                               real address (in reserved ranges or by the allocator) */
  uint64_t in_place_chunks;
  uint64_t in_place_mapped_bytes; /* of in_place_bytes, those mapped in reserved ranges */
  uint64_t in_place_refused; /* ranges the device would not reserve at their old address then */
  uint64_t home_bytes;      /* device address space reserved for in-place re-creation now */
};
/* Give back the device memory of empty arenas kept for reuse (after a free emptied an arena, one
 * per device is kept so that alloc/free pairs do not create device memory each time). */
int vmem_trim(void);

/* Totals over all devices (device < 0) or one device. */
int vmem_get_stats(int device, struct vmem_stats *stats);

#endif
