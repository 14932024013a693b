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
  /* Call cb for every resident mapping that a checkpoint may release (not exported or imported
   * memory). The registry's lock is held: cb must not call back. A non-zero return stops the
   * walk and is returned. */
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
};

/* The driver layer offers its registry to the checkpoint glue (glue/checkpoint.c), once, from a
 * start step; ops must stay valid for the life of the process. */
void shim_ckpt_use_vmm(const struct shim_vmm_ops *ops);

#endif
