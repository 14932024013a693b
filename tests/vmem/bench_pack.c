/* Description: packing overhead. 10,000 allocations of random sizes 64 B..64 KiB (fixed seed);
 * prints the device bytes vmem holds against the native model and fails unless
 * held <= 1.01 x native + one granule per size class in use.
 * Native model: cudaMalloc rounds each small size up to 512 bytes and packs them perfectly (its
 * own 2 MiB pools' partly filled tails are not counted, which favours native).
 * Usage: vmem_bench_pack [count] [seed]. */
#include <inttypes.h>
#include <stdlib.h>

#include "harness.h"

static uint64_t rng_state;
static uint64_t rnd(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Dull;
}

int main(int argc, char **argv) {
  uint64_t count = argc > 1 ? strtoull(argv[1], NULL, 0) : 10000;
  rng_state = argc > 2 ? strtoull(argv[2], NULL, 0) : 0xbe4c1;
  struct fake *f = start((struct setup){.policy = VMEM_TRANSLATE, .device_bytes = 64 * GiB});
  uint64_t native = 0;
  void **p = calloc(count, sizeof(*p));
  CHECK(p != NULL, "");
  for (uint64_t i = 0; i < count; i++) {
    uint64_t size = 64 + rnd() % (64 * 1024 - 64 + 1);
    native += (size + 511) / 512 * 512;
    CHECK_EQ(vmem_alloc(0, size, 0, &p[i]), 0);
  }
  struct vmem_stats st;
  CHECK_EQ(vmem_get_stats(0, &st), 0);
  double granule = (double)vmem_granule();
  double allowance = (double)st.size_classes_used * granule;
  double ratio = (double)st.held_bytes / (double)native;
  double ratio_less_tails = ((double)st.held_bytes - allowance) / (double)native;
  printf("allocations %" PRIu64 ", requested %.1f MiB, native model %.1f MiB, held %.1f MiB\n",
         st.allocations, st.requested_bytes / 1048576.0, native / 1048576.0,
         st.held_bytes / 1048576.0);
  printf("size classes used %" PRIu64 ", slabs %" PRIu64 "\n", st.size_classes_used, st.chunks);
  printf("ratio held/native %.4f; (held - one granule per class)/native %.4f (bound 1.01)\n", ratio,
         ratio_less_tails);
  CHECK(ratio_less_tails <= 1.01, "packing overhead above 1%%");
  CHECK_EQ(fake_used(f, 0), st.held_bytes);
  for (uint64_t i = 0; i < count; i++) CHECK_EQ(vmem_free(p[i], NULL), 0);
  free(p);
  stop(f);
  return 0;
}
