/* Description: checkpoint round trip. Copy every chunk out through vmem_for_each, vmem_release_all
 * (no device memory left, allocations keep their virtual addresses and read as released), then
 * vmem_recreate_all: first refused before touching anything when the device is too full, then an
 * injected out-of-memory midway (all or none: nothing left behind, shortfall reported), then a
 * retry that succeeds. Under translate the real addresses change; every byte survives. Both
 * policies, two devices. */
#include <stdlib.h>

#include "harness.h"

#define ALLOCS 40

struct saved {
  uintptr_t vaddr;
  uint64_t size, real;
  void *copy;
};

static struct saved saved[ALLOCS * 4]; /* slabs() saves 100 */
static int saved_count;

static int save(const struct vmem_chunk *c, void *ctx) {
  (void)ctx;
  CHECK_EQ(c->state, VMEM_RESIDENT);
  CHECK(c->real != 0, "resident chunk has a real address");
  struct saved *s = &saved[saved_count++];
  *s = (struct saved){c->vaddr, c->size, c->real, malloc(c->size)};
  memcpy(s->copy, (void *)(uintptr_t)c->real, c->size);
  return 0;
}

static int count_released(const struct vmem_chunk *c, void *ctx) {
  if (c->state == VMEM_RELEASED && c->real == 0) ++*(int *)ctx;
  return 0;
}

static int restore(const struct vmem_chunk *c, void *ctx) {
  int *moved = ctx;
  CHECK_EQ(c->state, VMEM_RESIDENT);
  for (int i = 0; i < saved_count; i++) {
    if (saved[i].vaddr != c->vaddr) continue;
    CHECK_EQ(saved[i].size, c->size);
    if (saved[i].real != c->real) ++*moved;
    memcpy((void *)(uintptr_t)c->real, saved[i].copy, c->size);
    free(saved[i].copy);
    saved[i].copy = NULL;
    return 0;
  }
  test_fail("chunk %#lx was not saved", (unsigned long)c->vaddr);
}

static void fill(void *vptr, uint64_t size, unsigned seed) {
  unsigned char *real = vmem_translate(vptr);
  for (uint64_t i = 0; i < size; i++) real[i] = (unsigned char)(seed * 31 + i * 7 + (i >> 9));
}

static void verify(void *vptr, uint64_t size, unsigned seed) {
  unsigned char *real = vmem_translate(vptr);
  CHECK(real != NULL, "translates again");
  for (uint64_t i = 0; i < size; i++)
    if (real[i] != (unsigned char)(seed * 31 + i * 7 + (i >> 9)))
      test_fail("byte %llu of allocation %u lost", (unsigned long long)i, seed);
}

static void run(enum vmem_policy policy) {
  struct fake *f = start((struct setup){.policy = policy, .devices = 2, .device_bytes = GiB});
  void *p[ALLOCS];
  uint64_t sizes[ALLOCS];
  for (unsigned i = 0; i < ALLOCS; i++) {
    sizes[i] = i % 4 == 3 ? 3 * MiB + i * 1000 : 100 + i * 3000;
    CHECK_EQ(vmem_alloc((int)(i % 2), sizes[i], 0, &p[i]), 0);
    fill(p[i], sizes[i], i);
  }
  uint64_t used = fake_used(f, 0) + fake_used(f, 1);
  saved_count = 0;
  CHECK_EQ(vmem_for_each(save, NULL), 0);

  CHECK_EQ(vmem_release_all(), 0);
  CHECK_EQ(fake_used(f, 0) + fake_used(f, 1), 0);
  CHECK_EQ(vmem_release_all(), 0); /* idempotent */
  int released = 0;
  CHECK_EQ(vmem_for_each(count_released, &released), 0);
  CHECK_EQ(released, saved_count);
  struct vmem_info info;
  CHECK_EQ(vmem_lookup(p[5], &info), 0);
  CHECK(info.state == VMEM_RELEASED && info.real == 0 && info.base == p[5], "released lookup");
  CHECK(vmem_translate(p[5]) == NULL, "released memory does not translate");
  struct vmem_check_report report;
  CHECK_EQ(vmem_check_range(p[5], 1, &report), -EFAULT);
  CHECK_EQ(report.kind, VMEM_CHECK_RELEASED);
  void *q;
  CHECK_EQ(vmem_alloc(0, 100, 0, &q), -EBUSY);
  uint64_t free_bytes, total;
  CHECK_EQ(vmem_mem_info(0, &free_bytes, &total), 0);
  CHECK(free_bytes < GiB, "released memory still counts as this process's");

  /* The device got too full meanwhile: refused up front. */
  uint64_t shortfall = 0;
  uint64_t creates = fake_calls(f, FAKE_DEV_MALLOC) + fake_calls(f, FAKE_PHYS_CREATE);
  fake_set_device_bytes(f, 1, 4 * MiB);
  CHECK_EQ(vmem_recreate_all(&shortfall), -ENOMEM);
  CHECK(shortfall > 0, "shortfall reported");
  CHECK_EQ(fake_used(f, 0) + fake_used(f, 1), 0);
  CHECK_EQ(fake_calls(f, FAKE_DEV_MALLOC) + fake_calls(f, FAKE_PHYS_CREATE), creates);
  fake_set_device_bytes(f, 1, GiB);

  /* Out of memory midway: everything re-created so far is given back. */
  if (policy == VMEM_TRANSLATE) fake_fail(f, FAKE_DEV_MALLOC, 7);
  else fake_fail(f, FAKE_PHYS_CREATE, 2); /* runs share slabs: fewer creates */
  CHECK_EQ(vmem_recreate_all(&shortfall), -ENOMEM);
  CHECK(shortfall > 0 && shortfall < used + 1, "shortfall within what was needed");
  CHECK_EQ(fake_used(f, 0) + fake_used(f, 1), 0);
  CHECK(vmem_translate(p[0]) == NULL, "still released");
  released = 0;
  CHECK_EQ(vmem_for_each(count_released, &released), 0);
  CHECK_EQ(released, saved_count);
  /* set_access failing under remap must also undo the physical memory it created. */
  if (policy == VMEM_REMAP) {
    fake_fail(f, FAKE_SET_ACCESS, 2);
    CHECK_EQ(vmem_recreate_all(&shortfall), -ENOMEM);
    CHECK_EQ(fake_used(f, 0) + fake_used(f, 1), 0);
  }

  /* Retry succeeds; under remap adjacent chunks share one set_access. */
  uint64_t access_before = fake_calls(f, FAKE_SET_ACCESS);
  CHECK_EQ(vmem_recreate_all(&shortfall), 0);
  if (policy == VMEM_REMAP)
    CHECK(fake_calls(f, FAKE_SET_ACCESS) - access_before < (uint64_t)saved_count,
          "one set_access per run of adjacent chunks, not per chunk");
  CHECK_EQ(shortfall, 0);
  CHECK_EQ(fake_used(f, 0) + fake_used(f, 1), used);
  int moved = 0;
  CHECK_EQ(vmem_for_each(restore, &moved), 0);
  if (policy == VMEM_TRANSLATE) CHECK_EQ(moved, saved_count); /* every real address changed */
  else CHECK_EQ(moved, 0);
  for (unsigned i = 0; i < ALLOCS; i++) {
    verify(p[i], sizes[i], i);
    CHECK_EQ(vmem_lookup(p[i], &info), 0);
    CHECK_EQ(info.state, VMEM_RESIDENT);
  }
  CHECK_EQ(vmem_alloc(0, 100, 0, &q), 0);
  CHECK_EQ(vmem_free(q, NULL), 0);

  /* Frees while released work and give back the virtual space. */
  CHECK_EQ(vmem_release_all(), 0);
  for (unsigned i = 0; i < ALLOCS; i += 2) CHECK_EQ(vmem_free(p[i], NULL), 0);
  CHECK_EQ(vmem_recreate_all(NULL), 0);
  for (unsigned i = 1; i < ALLOCS; i += 2) {
    CHECK(vmem_translate(p[i]) != NULL, "odd allocations back");
    CHECK_EQ(vmem_free(p[i], NULL), 0);
  }
  stop(f);
  printf("ok %s: %d chunks round-tripped\n", policy_name(policy), saved_count);
}

/* Thousands of allocations: recreate backs runs of adjacent chunks with one slab each (one
 * create, map and set_access per slab); a chunk freed while its slab lives keeps its memory and
 * its virtual range until the slab's last member goes, and the range is not handed out meanwhile. */
static void slabs(void) {
  struct fake *f = start((struct setup){.policy = VMEM_REMAP, .devices = 1, .device_bytes = GiB});
  enum { N = 100 };
  static void *p[N];
  const uint64_t size = 3 * MiB;
  for (unsigned i = 0; i < N; i++) {
    CHECK_EQ(vmem_alloc(0, size, 0, &p[i]), 0);
    fill(p[i], size, i);
  }
  saved_count = 0;
  CHECK_EQ(vmem_for_each(save, NULL), 0);
  uint64_t used = fake_used(f, 0);
  CHECK_EQ(vmem_release_all(), 0);
  uint64_t creates = fake_calls(f, FAKE_PHYS_CREATE), maps = fake_calls(f, FAKE_MAP);
  CHECK_EQ(vmem_recreate_all(NULL), 0);
  creates = fake_calls(f, FAKE_PHYS_CREATE) - creates;
  maps = fake_calls(f, FAKE_MAP) - maps;
  CHECK(creates <= 4 && maps == creates, "%d chunks re-created in a few slabs (%llu creates)",
        saved_count, (unsigned long long)creates);
  CHECK_EQ(fake_used(f, 0), used);
  int moved = 0;
  CHECK_EQ(vmem_for_each(restore, &moved), 0);
  for (unsigned i = 0; i < N; i++) verify(p[i], size, i);

  /* Freed inside a live slab: memory and range stay until the slab goes. */
  CHECK_EQ(vmem_free(p[1], NULL), 0);
  CHECK_EQ(fake_used(f, 0), used);
  CHECK(vmem_translate(p[1]) == NULL, "freed memory does not translate");
  void *q;
  CHECK_EQ(vmem_alloc(0, size, 0, &q), 0);
  CHECK((uintptr_t)q + size <= (uintptr_t)p[1] || (uintptr_t)q >= (uintptr_t)p[1] + size,
        "a range still mapped by its slab is not handed out");
  for (unsigned i = 0; i < N; i++)
    if (i != 1) verify(p[i], size, i);
  for (unsigned i = 0; i < N; i++)
    if (i != 1) CHECK_EQ(vmem_free(p[i], NULL), 0);
  CHECK_EQ(vmem_free(q, NULL), 0);
  CHECK_EQ(fake_used(f, 0), 0);
  /* Every range came back: the whole space can be allocated again at once. */
  void *all;
  CHECK_EQ(vmem_alloc(0, N * size, 0, &all), 0);
  CHECK_EQ(vmem_free(all, NULL), 0);
  stop(f);
  printf("ok slabs: %d chunks re-created with %llu creates\n", saved_count, (unsigned long long)creates);
}

int main(void) {
  run(VMEM_TRANSLATE);
  run(VMEM_REMAP);
  slabs();
  return 0;
}
