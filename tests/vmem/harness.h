/* Shared set-up for vmem's tests: vmem over fake devices. */
#ifndef CUDAW_TEST_VMEM_HARNESS_H
#define CUDAW_TEST_VMEM_HARNESS_H

#include <errno.h>
#include <string.h>

#include "../common/test.h"
#include "fake_prims.h"
#include "vmem.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

struct setup {
  enum vmem_policy policy;
  int devices;
  uint64_t device_bytes, va_size, mem_limit;
  int check;
  enum fake_hint hint;
  int reuse_freed; /* fake_config.reuse_freed */
  int identity;    /* vmem_config.identity */
  int vmm;         /* translate: the fake devices report VMM anyway (remap: always) */
  int in_place;    /* vmem_config.in_place */
  uint64_t piece_bytes; /* vmem_config.piece_bytes */
};

static inline struct fake *start(struct setup s) {
  struct fake_config fc = {.devices = s.devices ? s.devices : 1,
                           .device_bytes = s.device_bytes ? s.device_bytes : 4 * GiB,
                           .vmm = s.policy != VMEM_TRANSLATE || s.vmm,
                           .hint = s.hint,
                           .reuse_freed = s.reuse_freed};
  struct fake *f = fake_create(&fc);
  CHECK(f != NULL, "fake_create");
  struct vmem_config vc = {.va_size = s.va_size ? s.va_size : 64 * GiB,
                           .mem_limit = s.mem_limit,
                           .policy = s.policy,
                           .check = s.check,
                           .identity = s.identity,
                           .in_place = s.in_place,
                           .piece_bytes = s.piece_bytes};
  int rc = vmem_init(&vc, fake_prims(), f);
  CHECK(rc == 0, "vmem_init: %d", rc);
  return f;
}

static inline void stop(struct fake *f) {
  vmem_fini();
  for (int d = 0; d < 4; d++) CHECK_EQ(fake_used(f, d), 0);
  fake_destroy(f);
}

static inline const char *policy_name(enum vmem_policy p) {
  return p == VMEM_REMAP ? "remap" : p == VMEM_TRANSLATE ? "translate" : "auto";
}

#endif
