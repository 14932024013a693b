/* Description: translate puts memory back where it was. A device pointer stored in device memory
 * (as a library keeps a pointer table) survives a checkpoint when the device allocator hands the
 * same addresses out again: vmem re-creates chunks in their old real order and checks each one,
 * so nothing moves and moved_bytes is 0. With an allocator that never reuses an address (a forced
 * move) every chunk lands elsewhere, the stored pointer is stale, and moved_bytes/moved_chunks
 * say exactly how much. */
#include <stdlib.h>

#include "harness.h"

#define ALLOCS 24

struct image {
  uintptr_t vaddr;
  uint64_t size;
  void *copy;
};

static struct image images[ALLOCS * 2];
static int image_count;

static int save(const struct vmem_chunk *c, void *ctx) {
  (void)ctx;
  struct image *i = &images[image_count++];
  *i = (struct image){c->vaddr, c->size, malloc(c->size)};
  memcpy(i->copy, (void *)(uintptr_t)c->real, c->size);
  return 0;
}

static int restore(const struct vmem_chunk *c, void *ctx) {
  (void)ctx;
  for (int i = 0; i < image_count; i++) {
    if (images[i].vaddr != c->vaddr) continue;
    memcpy((void *)(uintptr_t)c->real, images[i].copy, c->size);
    free(images[i].copy);
    images[i].copy = NULL;
    return 0;
  }
  test_fail("chunk %#lx was not saved", (unsigned long)c->vaddr);
}

/* One checkpoint: returns how many allocations' real addresses changed. */
static int round_trip(void **p, struct vmem_stats *stats) {
  uint64_t before[ALLOCS];
  for (int i = 0; i < ALLOCS; i++) before[i] = (uintptr_t)vmem_translate(p[i]);
  image_count = 0;
  CHECK_EQ(vmem_for_each(save, NULL), 0);
  CHECK_EQ(vmem_release_all(), 0);
  CHECK_EQ(vmem_recreate_all(NULL), 0);
  CHECK_EQ(vmem_for_each(restore, NULL), 0);
  CHECK_EQ(vmem_get_stats(-1, stats), 0);
  int changed = 0;
  for (int i = 0; i < ALLOCS; i++) changed += (uintptr_t)vmem_translate(p[i]) != before[i];
  return changed;
}

static void run(int reuse) {
  struct fake *f = start((struct setup){.policy = VMEM_TRANSLATE, .device_bytes = GiB,
                                        .reuse_freed = reuse});
  void *p[ALLOCS];
  for (int i = 0; i < ALLOCS; i++) {
    uint64_t size = i % 3 == 0 ? 3 * MiB + 512u * (unsigned)i : 256 + 100u * (unsigned)i;
    CHECK_EQ(vmem_alloc(0, size, 0, &p[i]), 0);
  }
  /* A pointer table in device memory: allocation 0 holds the device addresses of the others. */
  uint64_t *table = vmem_translate(p[0]);
  for (int i = 1; i < ALLOCS; i++) {
    table[i] = (uintptr_t)vmem_translate(p[i]);
    *(uint64_t *)vmem_translate(p[i]) = 1000u + (unsigned)i;
  }
  struct vmem_stats stats;
  CHECK_EQ(vmem_get_stats(-1, &stats), 0);
  uint64_t held = stats.held_bytes, chunks = stats.chunks;
  CHECK_EQ(stats.moved_bytes, 0);

  /* A recreate that runs out of memory midway gives back what it made; the retry still asks for
   * the original addresses (and is judged against them). */
  uint64_t first_real = (uintptr_t)vmem_translate(p[0]);
  image_count = 0;
  CHECK_EQ(vmem_for_each(save, NULL), 0);
  CHECK_EQ(vmem_release_all(), 0);
  fake_fail(f, FAKE_DEV_MALLOC, 3);
  CHECK_EQ(vmem_recreate_all(NULL), -ENOMEM);
  CHECK_EQ(vmem_recreate_all(NULL), 0);
  CHECK_EQ(vmem_for_each(restore, NULL), 0);
  CHECK_EQ(vmem_get_stats(-1, &stats), 0);
  CHECK_EQ(stats.moved_bytes, reuse ? 0 : held);
  if (reuse) CHECK_EQ((uintptr_t)vmem_translate(p[0]), first_real);

  int changed = round_trip(p, &stats);
  table = vmem_translate(p[0]);
  int stale = 0;
  for (int i = 1; i < ALLOCS; i++) {
    if (table[i] != (uintptr_t)vmem_translate(p[i])) {
      stale++;
      continue;
    }
    CHECK_EQ(*(uint64_t *)(uintptr_t)table[i], 1000u + (unsigned)i); /* the kernel's dereference */
  }
  if (reuse) {
    CHECK_EQ(changed, 0);
    CHECK_EQ(stale, 0);
    CHECK_EQ(stats.moved_bytes, 0);
    CHECK_EQ(stats.moved_chunks, 0);
  } else {
    CHECK_EQ(changed, ALLOCS);
    CHECK_EQ(stale, ALLOCS - 1);
    CHECK_EQ(stats.moved_bytes, held); /* every chunk: the counts are exact, not estimates */
    CHECK_EQ(stats.moved_chunks, chunks);
  }
  for (int i = 0; i < ALLOCS; i++) CHECK_EQ(vmem_free(p[i], NULL), 0);
  stop(f);
  printf("ok %s: %d of %d allocations moved, moved_bytes %llu in %llu chunks\n",
         reuse ? "identity" : "forced move", changed, ALLOCS,
         (unsigned long long)stats.moved_bytes, (unsigned long long)stats.moved_chunks);
}

int main(void) {
  run(1);
  run(0);
  return 0;
}
