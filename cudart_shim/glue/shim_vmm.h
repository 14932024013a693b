/* The program's own virtual memory management (cuMemCreate/cuMemMap & co.): XLA, PyTorch's
 * expandable segments and NCCL map physical memory into address ranges they reserved themselves.
 * The driver layer (driver/vmm.c) records every handle and mapping, hands the program handles of
 * its own (the physical allocation behind one changes across a checkpoint), and offers the
 * checkpoint glue these operations, to save, release and re-create the mappings at the same
 * addresses. Independent of cuda.h's views. */
#ifndef CUDAW_SHIM_VMM_H
#define CUDAW_SHIM_VMM_H

#include <stdint.h>

struct shim_vmm_region {
  uint64_t vaddr;  /* the mapping's address, the same before and after a checkpoint */
  uint64_t size;
  int device;
};

struct shim_vmm_ops {
  /* Call cb for every resident mapping whose contents a checkpoint saves: one it may release
   * (not exported or imported memory) that the program has given a device access to. The
   * registry's lock is held: cb must not call back. A non-zero return stops the walk and is
   * returned. */
  int (*for_each)(int (*cb)(const struct shim_vmm_region *region, void *ctx), void *ctx);
  /* Unmap every releasable mapping and release its physical memory, all or nothing: on a driver
   * error what was released is re-created (its contents are then lost: the caller restores
   * them). Contents must have been copied out first. 0 or -errno. Call inside cudaw
   * (shim_depth > 0). */
  int (*release_all)(void);
  /* Re-create the physical memory of every released mapping with the properties it was created
   * with, map it at the same address with the same access. All or nothing; -ENOMEM with
   * *shortfall_bytes the bytes still missing. */
  int (*recreate_all)(uint64_t *shortfall_bytes);
  /* Bytes the program has mapped through its own VMM calls, and how many of them a checkpoint
   * cannot release (exported to or imported from another process). */
  void (*totals)(uint64_t *mapped_bytes, uint64_t *kept_bytes);
  /* A live checkpoint copies mappings while the program runs. live_hold(1) at its start: from
   * then on the program's cuMemUnmap of a mapping waits until the copies pinned on it are
   * unpinned, and no new pin is given on it meanwhile. live_hold(0) at its end drops every pin
   * and wakes those waiting. */
  void (*live_hold)(int on);
  /* Before a copy out of [vaddr, vaddr + size): 0 and the mapping pinned (its unmap waits for
   * copy_unpin) when the range lies inside one mapping that may be copied; -ENOENT when it does
   * not (unmapped, being unmapped, or another mapping now): the copy must not start. */
  int (*copy_pin)(uint64_t vaddr, uint64_t size);
  /* The pinned copy at vaddr is done (its stream synchronised), or was never started. */
  void (*copy_unpin)(uint64_t vaddr);
};

/* The driver layer offers its registry to the checkpoint glue (glue/checkpoint.c), once, from a
 * start step; ops must stay valid for the life of the process. */
void shim_ckpt_use_vmm(const struct shim_vmm_ops *ops);

#endif
