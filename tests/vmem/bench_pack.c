/* Description: packing overhead. 10,000 allocations of random sizes 64 B..64 KiB (fixed seed);
 * prints the device bytes vmem holds against the native model and fails unless
 * held <= 1.01 x native + one granule (small allocations share arenas: one size class).
 * Then half of them are freed and re-allocated with new sizes, and the same ratio is printed
 * (fragmentation; informative, no bound).
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
  double ratio = (double)st.held_bytes / (double)native;
  double ratio_less_tail = ((double)st.held_bytes - granule) / (double)native;
  printf("allocations %" PRIu64 ", requested %.1f MiB, native model %.1f MiB, held %.1f MiB\n",
         st.allocations, st.requested_bytes / 1048576.0, native / 1048576.0,
         st.held_bytes / 1048576.0);
  printf("arenas %" PRIu64 ", chunks %" PRIu64 "\n", st.arenas, st.chunks);
  printf("ratio held/native %.4f; (held - one granule)/native %.4f (bound 1.01)\n", ratio,
         ratio_less_tail);
  CHECK(ratio_less_tail <= 1.01, "packing overhead above 1%%");
  CHECK_EQ(fake_used(f, 0), st.held_bytes);

  /* Churn: free every other allocation, allocate new random sizes in their place. */
  for (uint64_t i = 0; i < count; i += 2) {
    struct vmem_info info;
    CHECK_EQ(vmem_lookup(p[i], &info), 0);
    native -= (info.size + 511) / 512 * 512;
    CHECK_EQ(vmem_free(p[i], NULL), 0);
  }
  for (uint64_t i = 0; i < count; i += 2) {
    uint64_t size = 64 + rnd() % (64 * 1024 - 64 + 1);
    native += (size + 511) / 512 * 512;
    CHECK_EQ(vmem_alloc(0, size, 0, &p[i]), 0);
  }
  CHECK_EQ(vmem_get_stats(0, &st), 0);
  printf("after churn: native model %.1f MiB, held %.1f MiB, ratio %.4f (informative)\n",
         native / 1048576.0, st.held_bytes / 1048576.0, (double)st.held_bytes / (double)native);
  for (uint64_t i = 0; i < count; i++) CHECK_EQ(vmem_free(p[i], NULL), 0);
  free(p);
  stop(f);
  return 0;
}
