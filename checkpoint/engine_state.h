/* The copy engine's state, shared by its two halves: engine.c (the copies between the device and
 * the image) and image.c (the host image: its regions, where each lies, their page-locking while
 * paused). Only those two include it; the rest of the module goes through internal.h. */
#ifndef CUDAW_CHECKPOINT_ENGINE_STATE_H
#define CUDAW_CHECKPOINT_ENGINE_STATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

#define REGISTER_THREADS 8 /* page-lock the image while paused (engine_register_image) */

/* Registered in pieces, so that a resume arriving meanwhile waits for one piece at most, by
 * several threads: the driver page-locks faulted memory at ~35 GB/s a thread in 64 MiB pieces and
 * scales to ~30 GB/s with 8 threads, where one thread of 1 GiB pieces left a 59 GiB image half
 * registered when the resume came (H100, 2026-11-27). A region's `registered` stays a prefix:
 * pieces finished ahead of it wait in `ahead` until the gap before them closes. */
#define REGISTER_PIECE (64ull << 20)

struct image_region {
  struct ckpt_region region;
  uint8_t *data; /* mmap'd, region.size bytes (rounded up to pages) */
  size_t mapped;
  bool fresh; /* mapped for this checkpoint: no page of it is in memory yet */
  bool untouched; /* fresh and registered with the filler: written only through it */
  bool in_reserve; /* data lies in the reserve: registered already, never unmapped here */
  bool in_pool; /* ... in the reserve that is cudawd's lent pool range (in_reserve too) */
  uint64_t registered; /* bytes from the start registered for direct DMA, in REGISTER_PIECE steps */
  bool device_sums; /* sums are ckpt_delta_hash values taken on the device, else host XXH3-64 */
  uint64_t *sums; /* one per chunk */
  uint64_t chunks;
  /* Exchanges: bit k set while chunk k's bytes are in the image and the device's copy may be
   * gone (NULL: every chunk is). A releasing save that stopped midway holds only what it saved;
   * a creating resume clears a chunk once it is on the device, its pages freed. */
  uint8_t *holds;
  uint64_t held_prefix; /* a releasing save: chunks from the start that hold (released so far) */
};

struct engine {
  const struct ckpt_host_ops *ops;
  bool prefault; /* fault fresh image pages in while their DMA runs (CUDAW_CKPT_PREFAULT) */
  bool fill; /* fill fresh pages through userfaultfd (CUDAW_CKPT_FILL=kernel) */
  struct image_filler filler;
  uint8_t *filling; /* the fresh mapping registered with the filler during a save, and its size */
  uint64_t filling_bytes;
  /* Registers the image for direct DMA while the program is paused (engine_register_image). */
  pthread_t registrar[REGISTER_THREADS];
  int registrar_count;
  _Atomic bool registrar_stop;
  pthread_mutex_t registrar_lock; /* the cursor below and `ahead` */
  size_t register_region;         /* the next piece to register: region, offset */
  uint64_t register_offset;
  struct piece_ref { size_t region; uint64_t offset; } ahead[8 * REGISTER_THREADS];
  size_t ahead_count;             /* registered pieces past their region's prefix */
  _Atomic uint64_t registered_bytes; /* of the whole image, for status */
  void *ctx;
  size_t chunk_bytes;
  int threads;
  int slots_per_thread;
  int slots; /* threads * slots_per_thread staging buffers, and streams per device */
  int devices;
  void **staging;  /* [slots], pinned by engine_prepare and kept */
  _Atomic bool pin_cancel; /* stop pinning more of them (engine_cancel_pinning) */
  /* A save giving memory back as it goes (engine_release_as_saved), until it ends: its units
   * (pieces of unit_chunks chunks, UINT64_MAX: whole regions), region i's from unit_first[i] to
   * unit_first[i + 1], and which went back (bit per unit: only those are wholly saved). */
  uint64_t unit_chunks;
  uint64_t *unit_first;
  uint8_t *unit_gone;
  uint8_t **unit_holds; /* per region, zeroed: its chunk map should the put-back fail */
  _Atomic bool precopy_cancel; /* stop a pre-copy under way (engine_cancel_precopy) */
  void **streams;  /* [devices * slots], created and destroyed by the workers in each job */
  struct image_region *image;
  size_t image_count;
  uint64_t image_bytes;
  bool device_hash_warned;
  struct reserve *reserve; /* CUDAW_CKPT_RESERVE, or NULL */
  struct ckpt_options options; /* what engine_new was given, for a new reserve */
  bool reserve_held;       /* the image's regions lie in it */
  struct reserve *pool;    /* cudawd's host-memory pool (engine_set_pool), or NULL */
  uint64_t loan_offset, loan_length; /* the range lent for the next checkpoint's image */
  bool pool_held;          /* the image's fresh regions lie in the lent range */
  engine_source_fn source; /* engine_restore_from: where a restore's chunks come from */
  const struct engine_pace *pace; /* the exchange under way (engine_save_releasing and co.) */
  void *source_arg;
  bool release_as_saved; /* engine_release_as_saved */
  bool verify_in_flight;  /* engine_restore's job: check what lands beside the copy */
  bool create_beside;     /* engine_restore_beside's job: make the memory ahead of the copy */
  uint64_t create_missing; /* ... what it lacks in all (the shortfall's base) */
};

/* What a host lists for a checkpoint (image_collect_region). */
struct region_list {
  struct ckpt_region *items;
  size_t count, capacity;
};

/* image.c, for engine.c's save and restore. */
/* for_each_region's callback: append the region to the list (a region_list). */
int image_collect_region(void *arg, const struct ckpt_region *region);
/* Build the image for `list`: reuse a kept buffer whose region has the same id and size, place
 * the rest (cudawd's lent range, the reserve, or a fresh mapping: with fill, registered with the
 * filler), free what is no longer needed. 0, or -errno with `reason`. */
int image_build(struct engine *e, struct region_list *list, bool fill, char *reason, size_t len);
/* Count what the reserve or the pool page-locked since under the regions that lie in them. */
void image_note_registered(struct engine *e);
/* A save is over: the fresh mapping leaves the filler (its untouched pages fault as usual). */
void image_stop_filling(struct engine *e);
/* Bytes of r copied to and from directly (page-locked). */
uint64_t image_direct_bytes(const struct image_region *r);

#endif
