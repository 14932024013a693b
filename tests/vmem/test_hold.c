/* Description: vmem_hold_releases (live checkpoints). While held, a freed allocation (large, or the
 * last of an arena that empties, or a member of a slab) keeps its device memory, its data and its
 * translation, but lookup, vmem_for_each and new allocations no longer see it and its virtual range
 * is not handed out again; ending the hold gives the memory back. vmem_fini during a hold frees it
 * too. Both policies. */
#include <stdlib.h>

#include "harness.h"

static int count_chunks(const struct vmem_chunk *c, void *ctx) {
  (void)c;
  ++*(int *)ctx;
  return 0;
}

static int listed(void) {
  int n = 0;
  CHECK_EQ(vmem_for_each(count_chunks, &n), 0);
  return n;
}

static void fill(void *vptr, uint64_t size, unsigned seed) {
  unsigned char *real = vmem_translate(vptr);
  CHECK(real != NULL, "translates");
  for (uint64_t i = 0; i < size; i++) real[i] = (unsigned char)(seed + i * 13);
}

static void verify(const unsigned char *real, uint64_t size, unsigned seed) {
  for (uint64_t i = 0; i < size; i++)
    if (real[i] != (unsigned char)(seed + i * 13)) test_fail("byte %lu changed", (unsigned long)i);
}

static void run(enum vmem_policy policy) {
  struct fake *f = start((struct setup){.policy = policy, .devices = 1, .device_bytes = GiB});
  void *large, *small, *keep;
  CHECK_EQ(vmem_alloc(0, 6 * MiB, 0, &large), 0);
  CHECK_EQ(vmem_alloc(0, 4096, 0, &small), 0);
  CHECK_EQ(vmem_alloc(0, 3 * MiB, 0, &keep), 0);
  fill(large, 6 * MiB, 1);
  fill(small, 4096, 2);
  int chunks = listed();
  uint64_t used = fake_used(f, 0);
  unsigned char *large_real = vmem_translate(large), *small_real = vmem_translate(small);

  CHECK_EQ(vmem_hold_releases(1), 0);
  CHECK_EQ(vmem_free(large, NULL), 0);
  CHECK_EQ(vmem_free(small, NULL), 0);
  CHECK_EQ(vmem_trim(), 0); /* the emptied arena goes too: held as well */
  struct vmem_info info;
  CHECK_EQ(vmem_lookup(large, &info), -ENOENT);
  CHECK_EQ(vmem_free(large, NULL), -EINVAL); /* a double free is still one */
  CHECK_EQ(listed(), chunks - 2);
  CHECK_EQ(fake_used(f, 0), used);
  CHECK(vmem_held_bytes() >= 6 * MiB + 4096, "held: %lu", (unsigned long)vmem_held_bytes());
  CHECK(vmem_translate(large) == large_real, "a held chunk still translates");
  verify(large_real, 6 * MiB, 1);
  verify(small_real, 4096, 2);
  /* New allocations do not land on the held ranges. */
  void *fresh;
  CHECK_EQ(vmem_alloc(0, 6 * MiB, 0, &fresh), 0);
  CHECK((uintptr_t)fresh + 6 * MiB <= (uintptr_t)large || (uintptr_t)fresh >= (uintptr_t)large + 6 * MiB,
        "a held range was handed out again");
  CHECK_EQ(vmem_free(fresh, NULL), 0); /* held too */

  CHECK_EQ(vmem_hold_releases(0), 0);
  CHECK_EQ(vmem_held_bytes(), 0);
  CHECK(vmem_translate(large) == NULL, "released once the hold ends");
  CHECK_EQ(vmem_trim(), 0); /* translate keeps small freed memory for reuse: not counted */
  CHECK(fake_used(f, 0) < used, "memory given back: %lu of %lu", (unsigned long)fake_used(f, 0),
        (unsigned long)used);
  CHECK_EQ(listed(), chunks - 2);

  /* Without a hold, a free gives the memory back at once. */
  used = fake_used(f, 0);
  CHECK_EQ(vmem_alloc(0, 8 * MiB, 0, &fresh), 0);
  CHECK_EQ(vmem_free(fresh, NULL), 0);
  CHECK_EQ(vmem_held_bytes(), 0);

  /* Slab members (remap: a recreate puts adjacent chunks into one slab). */
  void *run_of[4];
  for (int i = 0; i < 4; i++) CHECK_EQ(vmem_alloc(0, 2 * MiB, 0, &run_of[i]), 0);
  CHECK_EQ(vmem_release_all(), 0);
  CHECK_EQ(vmem_recreate_all(NULL), 0);
  fill(run_of[1], 2 * MiB, 3);
  unsigned char *member = vmem_translate(run_of[1]);
  CHECK_EQ(vmem_hold_releases(1), 0);
  CHECK_EQ(vmem_free(run_of[1], NULL), 0);
  CHECK_EQ(vmem_free(run_of[2], NULL), 0);
  verify(member, 2 * MiB, 3);
  CHECK_EQ(vmem_hold_releases(0), 0);
  for (int i = 0; i < 4; i += 3) CHECK_EQ(vmem_free(run_of[i], NULL), 0);

  /* The program ends during a hold: vmem_fini gives the held memory back (stop checks). */
  CHECK_EQ(vmem_hold_releases(1), 0);
  CHECK_EQ(vmem_free(keep, NULL), 0);
  CHECK(vmem_held_bytes() >= 3 * MiB, "held at exit");
  stop(f);
  CHECK_EQ(vmem_hold_releases(1), -EINVAL);
}

int main(void) {
  run(VMEM_REMAP);
  run(VMEM_TRANSLATE);
  printf("vmem hold releases: ok\n");
  return 0;
}
