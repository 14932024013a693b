/* Description: one million random vmem_alloc/vmem_free/vmem_lookup/vmem_translate operations per
 * policy, two fake devices, checked against a brute-force reference model (a sorted array of live
 * allocations): no overlap, alignment, exact lookup of interior and nearby pointers, consistent
 * translation, tags written through real addresses survive until free (so no two allocations
 * share real memory), statistics match. A third run, translate on devices with VMM, checkpoints
 * every 20,000 operations: the resume re-creates every chunk at its old real address (issue 21,
 * home.c; the fake allocator would never give one back), and the reserved ranges and their
 * memory are all gone once everything is freed. Usage: vmem_test_random [ops] [seed]. */
#include <inttypes.h>
#include <stdlib.h>

#include "harness.h"

struct live {
  uintptr_t base;
  uint64_t size, id;
  int device;
};

static struct live *model;
static size_t live_count;
static uint64_t rng_state;

static uint64_t rnd(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Dull;
}

/* Index of the last allocation with base <= p, or -1. */
static long model_floor(uintptr_t p) {
  long lo = 0, hi = (long)live_count - 1, found = -1;
  while (lo <= hi) {
    long mid = (lo + hi) / 2;
    if (model[mid].base <= p) found = mid, lo = mid + 1;
    else hi = mid - 1;
  }
  return found;
}

static const struct live *model_containing(uintptr_t p) {
  long i = model_floor(p);
  return i >= 0 && p - model[i].base < model[i].size ? &model[i] : NULL;
}

static void write_tags(const struct live *a) {
  if (a->size < 16) return; /* head and tail tags must not overlap */
  char *real = vmem_translate((void *)a->base);
  CHECK(real != NULL, "live allocation translates");
  memcpy(real, &a->id, 8);
  memcpy(real + a->size - 8, &a->id, 8);
}

static void check_tags(const struct live *a) {
  if (a->size < 16) return;
  char *real = vmem_translate((void *)a->base);
  uint64_t head, tail;
  memcpy(&head, real, 8);
  memcpy(&tail, real + a->size - 8, 8);
  CHECK(head == a->id && tail == a->id, "tags of allocation %" PRIu64 " intact (size %" PRIu64 " dev %d head %" PRIu64 " tail %" PRIu64 " base %#lx real %p)", a->id, a->size, a->device, head, tail, (unsigned long)a->base, (void *)real);
}

static uint64_t random_size(void) {
  uint64_t r = rnd() % 100;
  if (r < 70) return 1 + rnd() % (64 << 10);
  if (r < 93) return (64 << 10) + 1 + rnd() % (960 << 10);
  return MiB + rnd() % (5 * MiB);
}

static void do_alloc(uint64_t id) {
  uint64_t size = rnd() % 200 == 0 ? 0 : random_size();
  int device = (int)(rnd() % 2);
  unsigned flags = rnd() % 20 == 0 ? VMEM_ALLOC_DEDICATED : 0;
  void *p = (void *)1;
  CHECK_EQ(vmem_alloc(device, size, flags, &p), 0);
  if (size == 0) {
    CHECK(p == NULL, "size 0");
    return;
  }
  uintptr_t base = (uintptr_t)p;
  CHECK(vmem_in_range(p), "in range");
  CHECK_EQ(base % (size > 256 ? 512 : 256), 0);
  long i = model_floor(base);
  CHECK(i < 0 || model[i].base + model[i].size <= base, "no overlap with the one below");
  CHECK(i + 1 >= (long)live_count || base + size <= model[i + 1].base, "no overlap above");
  memmove(&model[i + 2], &model[i + 1], (live_count - (size_t)(i + 1)) * sizeof(*model));
  model[i + 1] = (struct live){base, size, id, device};
  live_count++;
  write_tags(&model[i + 1]);
}

static void do_free(void) {
  if (live_count == 0) return;
  size_t i = rnd() % live_count;
  struct live a = model[i];
  uint64_t r = rnd() % 20;
  if (r == 0 && a.size > 1) {
    CHECK_EQ(vmem_free((void *)(a.base + 1 + rnd() % (a.size - 1)), NULL), -EINVAL);
    return;
  }
  check_tags(&a);
  CHECK_EQ(vmem_free((void *)a.base, NULL), 0);
  memmove(&model[i], &model[i + 1], (live_count - i - 1) * sizeof(*model));
  live_count--;
  if (r == 1) CHECK_EQ(vmem_free((void *)a.base, NULL), -EINVAL); /* double free */
}

static void do_lookup(void) {
  uintptr_t p;
  if (live_count && rnd() % 2) {
    const struct live *a = &model[rnd() % live_count];
    p = a->base + rnd() % a->size;
  } else if (live_count) {
    const struct live *a = &model[rnd() % live_count];
    p = a->base - 2 * MiB + rnd() % (4 * MiB + a->size);
  } else {
    return;
  }
  const struct live *want = model_containing(p);
  struct vmem_info info;
  int rc = vmem_lookup((void *)p, &info);
  if (!want) {
    CHECK_EQ(rc, -ENOENT);
    return;
  }
  CHECK_EQ(rc, 0);
  CHECK(info.base == (void *)want->base && info.size == want->size, "lookup finds the allocation");
  CHECK_EQ(info.offset, p - want->base);
  CHECK_EQ(info.device, want->device);
  CHECK_EQ(info.state, VMEM_RESIDENT);
  CHECK(info.real == (uint64_t)(uintptr_t)vmem_translate((void *)want->base), "lookup.real");
}

static void do_translate(void) {
  if (!live_count) return;
  const struct live *a = &model[rnd() % live_count];
  uint64_t offset = rnd() % a->size;
  char *base_real = vmem_translate((void *)a->base);
  char *real = vmem_translate((void *)(a->base + offset));
  CHECK(base_real && real == base_real + offset, "translation is linear inside an allocation");
  if (vmem_policy() == VMEM_REMAP) CHECK(real == (char *)a->base + offset, "identity");
  else CHECK(!vmem_in_range(real), "real address outside the virtual range");
}

static void check_stats(void) {
  struct vmem_stats st;
  uint64_t requested = 0;
  for (size_t i = 0; i < live_count; i++) requested += model[i].size;
  CHECK_EQ(vmem_get_stats(-1, &st), 0);
  CHECK_EQ(st.allocations, live_count);
  CHECK_EQ(st.requested_bytes, requested);
}

/* The granule-aligned ranges over every chunk's memory, for their union's size. */
struct spans {
  uint64_t (*range)[2];
  size_t count;
};

static int collect_span(const struct vmem_chunk *c, void *arg) {
  struct spans *s = arg;
  uint64_t g = vmem_granule();
  s->range[s->count][0] = c->real / g * g;
  s->range[s->count][1] = (c->real + c->size + g - 1) / g * g;
  s->count++;
  return 0;
}

static int by_start(const void *a, const void *b) {
  uint64_t x = ((const uint64_t *)a)[0], y = ((const uint64_t *)b)[0];
  return x < y ? -1 : x > y;
}

static uint64_t union_bytes(uint64_t chunks) {
  struct spans s = {malloc((chunks + 1) * sizeof *s.range), 0};
  CHECK(s.range != NULL);
  CHECK_EQ(vmem_for_each(collect_span, &s), 0);
  qsort(s.range, s.count, sizeof *s.range, by_start);
  uint64_t total = 0, end = 0;
  for (size_t i = 0; i < s.count; i++) {
    uint64_t from = s.range[i][0] > end ? s.range[i][0] : end;
    if (s.range[i][1] > from) total += s.range[i][1] - from;
    if (s.range[i][1] > end) end = s.range[i][1];
  }
  free(s.range);
  return total;
}

/* Release and re-create everything: nothing may move. The contents are not copied (a checkpoint
 * would): the tags are written again. */
static void do_checkpoint(struct fake *f) {
  CHECK_EQ(vmem_release_all(), 0);
  CHECK_EQ(vmem_recreate_all(NULL), 0);
  struct vmem_stats st;
  CHECK_EQ(vmem_get_stats(-1, &st), 0);
  CHECK(st.moved_bytes == 0 && st.in_place_mapped_bytes == st.held_bytes,
        "moved %" PRIu64 ", in place %" PRIu64 " of %" PRIu64 " bytes", st.moved_bytes,
        st.in_place_mapped_bytes, st.held_bytes);
  /* Every range is mapped whole and holds no freed space (a shared range is re-made to fit at
   * the next resume): the ranges are exactly the granules the chunks touch. */
  CHECK_EQ(fake_used(f, 0) + fake_used(f, 1), st.home_bytes);
  CHECK_EQ(st.home_bytes, union_bytes(st.chunks));
  for (size_t i = 0; i < live_count; i++) write_tags(&model[i]);
}

static void run(enum vmem_policy policy, int in_place, uint64_t ops, uint64_t seed) {
  struct fake *f = start((struct setup){.policy = policy, .devices = 2, .device_bytes = 64 * GiB,
                                        .va_size = 256 * GiB, .vmm = in_place,
                                        .in_place = in_place});
  rng_state = seed;
  for (uint64_t n = 1; n <= ops; n++) {
    uint64_t r = rnd() % 100;
    if (r < 35 && live_count < 3000) do_alloc(n);
    else if (r < 60 || live_count >= 3000) do_free();
    else if (r < 80) do_lookup();
    else do_translate();
    if (n % 50000 == 0) check_stats();
    if (in_place && n % 20000 == 0) do_checkpoint(f);
  }
  check_stats();
  while (live_count) {
    check_tags(&model[live_count - 1]);
    CHECK_EQ(vmem_free((void *)model[--live_count].base, NULL), 0);
  }
  struct vmem_stats st;
  CHECK_EQ(vmem_get_stats(-1, &st), 0);
  CHECK(st.empty_arenas <= 2 && st.held_bytes == st.empty_arenas * vmem_granule(),
        "after freeing everything only the kept empty arenas (one per device) remain");
  CHECK_EQ(vmem_trim(), 0);
  CHECK_EQ(vmem_get_stats(-1, &st), 0);
  CHECK_EQ(st.held_bytes, 0);
  CHECK_EQ(st.chunks, 0);
  CHECK_EQ(fake_used(f, 0) + fake_used(f, 1), 0);
  if (in_place) CHECK_EQ(fake_reservations(f), 0); /* remap: vmem's own range is one */
  stop(f);
  printf("ok %s%s: %" PRIu64 " operations\n", policy_name(policy),
         in_place ? " with checkpoints, in place" : "", ops);
}

int main(int argc, char **argv) {
  uint64_t ops = argc > 1 ? strtoull(argv[1], NULL, 0) : 1000000;
  uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x5eed2026;
  printf("seed %#" PRIx64 "\n", seed);
  model = calloc(3001, sizeof(*model));
  CHECK(model != NULL, "model");
  run(VMEM_TRANSLATE, 0, ops, seed);
  run(VMEM_REMAP, 0, ops, seed);
  run(VMEM_TRANSLATE, 1, ops, seed);
  free(model);
  return 0;
}
