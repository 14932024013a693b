/* Host-memory device primitives for vmem's unit tests: "device memory" is host memory, so tests
 * can read and write it directly. Failure injection and a per-device memory size included. */
#ifndef CUDAW_TEST_FAKE_PRIMS_H
#define CUDAW_TEST_FAKE_PRIMS_H

#include <stdint.h>

#include "prims.h"

enum fake_op {
  FAKE_ANY, FAKE_VA_RESERVE, FAKE_PHYS_CREATE, FAKE_MAP, FAKE_SET_ACCESS, FAKE_UNMAP,
  FAKE_PHYS_RELEASE, FAKE_DEV_MALLOC, FAKE_DEV_FREE, FAKE_MEM_INFO, FAKE_OPS
};

/* How va_reserve treats its hint: use it when the range is free (no other reservation and no
 * live dev_malloc block overlaps it; else as MOVE_FREE), return another host-free address, return
 * another address that it occupies on the host itself (like a UVA driver), or fail every call
 * with a hint with -ENOMEM (seen on an H200 for some sizes). */
enum fake_hint { FAKE_HINT_HONOR, FAKE_HINT_MOVE_FREE, FAKE_HINT_MOVE_OCCUPIED, FAKE_HINT_FAIL };

struct fake_config {
  int devices;           /* 1..4 */
  uint64_t device_bytes; /* memory per device */
  uint64_t granule;      /* 0: 2 MiB */
  int vmm;               /* report VMM support */
  enum fake_hint hint;
  int reuse_freed;       /* dev_malloc takes the lowest freed block of the same size first, like
                            a deterministic device allocator (0: bump pointer, always new) */
};

struct fake;

/* One fake set of devices; *prims is the shared function table, the fake is its ctx. */
struct fake *fake_create(const struct fake_config *config);
void fake_destroy(struct fake *fake);
const struct vmem_prims *fake_prims(void);

/* The nth next call (1 = the very next) of op fails with -ENOMEM; FAKE_ANY counts every call. */
void fake_fail(struct fake *fake, enum fake_op op, uint64_t nth);
/* Make count calls in a row fail, from the nth call of op on (FAKE_ANY not supported). */
void fake_fail_run(struct fake *fake, enum fake_op op, uint64_t nth, uint64_t count);
uint64_t fake_calls(const struct fake *fake, enum fake_op op);
/* Bytes in use on device, and its size (changeable, e.g. to simulate another process). */
uint64_t fake_used(const struct fake *fake, int device);
/* Live va_reserve reservations, and whether one covers [addr, addr + size). */
int fake_reservations(const struct fake *fake);
int fake_reserved(const struct fake *fake, uint64_t addr, uint64_t size);
void fake_set_device_bytes(struct fake *fake, int device, uint64_t bytes);

#endif
