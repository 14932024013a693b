/* Description: identity placement under translate (issue 21). Every allocation's virtual address
 * is its real one (outside the reserved range), so a pointer table kept in device memory holds
 * untranslated pointers that are right on the device; lookups, frees, checks and walks find such
 * allocations, and vmem_translate answers for them without a lock while nothing moved. With an
 * allocator that hands freed addresses out again, a checkpoint moves nothing. When a foreign
 * allocation takes an old address while paused (a forced move), that chunk comes back elsewhere:
 * it is counted and flagged as moved, vmem_translate follows it, and a later allocation whose
 * real memory lands in its old extent falls back to a virtual address from the range. Also
 * outside chunks held by a live checkpoint, and freed while released. */
#include <stdlib.h>

#include "harness.h"

#define ALLOCS 12

struct saved {
  uintptr_t vaddr;
  uint64_t size;
  void *copy;
  int outside, moved;
};
static struct saved saved[ALLOCS * 2];
static int saved_count;

static int save(const struct vmem_chunk *c, void *ctx) {
  (void)ctx;
  CHECK(saved_count < ALLOCS * 2);
  struct saved *s = &saved[saved_count++];
  *s = (struct saved){c->vaddr, c->size, malloc(c->size), c->outside, c->moved};
  memcpy(s->copy, (void *)(uintptr_t)c->real, c->size);
  return 0;
}

static int restore(const struct vmem_chunk *c, void *ctx) {
  int *moved = ctx;
  for (int i = 0; i < saved_count; i++) {
    if (saved[i].vaddr != c->vaddr) continue;
    memcpy((void *)(uintptr_t)c->real, saved[i].copy, c->size);
    free(saved[i].copy);
    saved[i].copy = NULL;
    CHECK_EQ(c->outside, saved[i].outside); /* a chunk keeps its virtual address */
    CHECK_EQ(c->moved, (int)(c->real != c->vaddr && c->outside));
    *moved += c->moved;
    return 0;
  }
  test_fail("chunk %#lx was not saved", (unsigned long)c->vaddr);
}

/* Checkpoint and resume; between release and recreate, `between` runs (may be NULL). */
static int round_trip(void (*between)(void *), void *arg) {
  saved_count = 0;
  CHECK_EQ(vmem_for_each(save, NULL), 0);
  CHECK_EQ(vmem_release_all(), 0);
  CHECK(vmem_outside_irregular(), "released outside chunks must not translate to themselves");
  if (between) between(arg);
  CHECK_EQ(vmem_recreate_all(NULL), 0);
  int moved = 0;
  CHECK_EQ(vmem_for_each(restore, &moved), 0);
  return moved;
}

struct foreign {
  struct fake *f;
  uint64_t at, size, got;
};

/* A foreign allocator takes the old address of one chunk while the memory is released. */
static void take_address(void *arg) {
  struct foreign *x = arg;
  CHECK_EQ(fake_prims()->dev_malloc(x->f, 0, x->size, &x->got), 0);
  CHECK_EQ(x->got, x->at); /* the fake device hands the lowest freed block out first */
}

int main(void) {
  struct fake *f = start((struct setup){.policy = VMEM_TRANSLATE, .device_bytes = GiB,
                                        .reuse_freed = 1, .identity = 1});
  void *p[ALLOCS];
  uint64_t size[ALLOCS];
  for (int i = 0; i < ALLOCS; i++) {
    /* large ones of distinct page counts, so that each has its own size class on the device */
    size[i] = i % 3 == 0 ? 3 * MiB + 8192u * (unsigned)i + 64 : 256 + 100u * (unsigned)i;
    CHECK_EQ(vmem_alloc(0, size[i], 0, &p[i]), 0);
    CHECK(!vmem_in_range(p[i]) && vmem_owns(p[i]), "allocation %d at %p is not identity", i, p[i]);
    CHECK_EQ(vmem_translate(p[i]), p[i]);
    CHECK_EQ((uintptr_t)p[i] % 256, 0);
    struct vmem_info info;
    CHECK_EQ(vmem_lookup((char *)p[i] + 7, &info), 0);
    CHECK(info.base == p[i] && info.size == size[i] && info.real == (uintptr_t)p[i]);
    struct vmem_check_report report;
    CHECK_EQ(vmem_check_range(p[i], size[i], &report), 0);
    CHECK_EQ(vmem_check_range(p[i], size[i] + 1, &report), -EFAULT);
    CHECK_EQ(report.kind, VMEM_CHECK_OVERFLOW);
  }
  CHECK(!vmem_outside_irregular());
  /* Not ours: a host pointer, and the byte past a large allocation's backed memory. */
  int local;
  CHECK(!vmem_owns(&local));
  CHECK_EQ(vmem_translate(&local), (void *)&local);

  /* A pointer table in device memory, written with the program's own (untranslated) pointers,
   * as a kernel or a library would: on the device each entry must lead to its data. */
  uint64_t *table = p[0];
  for (int i = 1; i < ALLOCS; i++) {
    table[i] = (uintptr_t)p[i];
    *(uint64_t *)p[i] = 1000u + (unsigned)i;
  }
  CHECK_EQ(round_trip(NULL, NULL), 0);
  struct vmem_stats stats;
  CHECK_EQ(vmem_get_stats(-1, &stats), 0);
  CHECK_EQ(stats.moved_bytes, 0);
  CHECK(!vmem_outside_irregular(), "nothing moved: the fast path is back");
  for (int i = 1; i < ALLOCS; i++) /* the kernel's dereference of a stored pointer */
    CHECK_EQ(*(uint64_t *)(uintptr_t)table[i], 1000u + (unsigned)i);

  /* Forced move: a foreign allocation takes allocation 3's old address while paused. */
  struct foreign x = {f, (uintptr_t)p[3], size[3], 0};
  CHECK_EQ(round_trip(take_address, &x), 1);
  CHECK_EQ(vmem_get_stats(-1, &stats), 0);
  CHECK_EQ(stats.moved_chunks, 1);
  CHECK_EQ(stats.moved_bytes, (size[3] + 511) / 512 * 512);
  CHECK(vmem_outside_irregular());
  char *real3 = vmem_translate(p[3]);
  CHECK(real3 && real3 != (char *)p[3], "a moved chunk translates to its new memory");
  CHECK_EQ(*(uint64_t *)real3, 1003u);
  CHECK_EQ(vmem_translate((char *)p[3] + 100), real3 + 100);
  CHECK(vmem_owns(p[3]) && vmem_owns((char *)p[3] + 100));
  for (int i = 0; i < ALLOCS; i++) /* the others still translate to themselves */
    if (i != 3) CHECK_EQ(vmem_translate(p[i]), p[i]);
  CHECK_EQ(vmem_translate(&local), (void *)&local);

  /* The foreign allocation ends; the device hands its address out again, inside allocation 3's
   * extent: the new allocation cannot be identity and takes a virtual address from the range. */
  CHECK_EQ(fake_prims()->dev_free(f, 0, x.got), 0);
  void *q;
  CHECK_EQ(vmem_alloc(0, size[3], 0, &q), 0);
  CHECK(vmem_in_range(q), "%p collides with a moved chunk's extent", q);
  CHECK_EQ((uintptr_t)vmem_translate(q), x.at);
  CHECK_EQ(vmem_translate(p[3]), (void *)real3);
  CHECK_EQ(vmem_free(q, NULL), 0);

  /* Frees of outside allocations: interior pointers refused, then gone for lookups and checks. */
  CHECK_EQ(vmem_free((char *)p[3] + 512, NULL), -EINVAL);
  for (int i = 0; i < ALLOCS; i++) CHECK_EQ(vmem_free(p[i], NULL), 0);
  CHECK(!vmem_owns(p[0]) && !vmem_owns(p[3]));
  struct vmem_info info;
  CHECK_EQ(vmem_lookup(p[3], &info), -ENOENT);
  CHECK(!vmem_outside_irregular(), "the moved chunk is gone");
  CHECK_EQ(vmem_trim(), 0);
  CHECK_EQ(vmem_translate(p[3]), p[3]);
  stop(f);

  /* Live checkpoints hold freed memory: a held outside chunk still translates (to itself), is
   * gone for lookups, keeps its extent from new chunks, and goes when the hold ends. */
  f = start((struct setup){.policy = VMEM_TRANSLATE, .device_bytes = GiB, .identity = 1});
  void *a, *b;
  CHECK_EQ(vmem_alloc(0, 5 * MiB, 0, &a), 0);
  CHECK(!vmem_in_range(a));
  CHECK_EQ(vmem_hold_releases(1), 0);
  CHECK_EQ(vmem_free(a, NULL), 0);
  CHECK_EQ(vmem_translate(a), a);
  CHECK(!vmem_owns(a));
  CHECK_EQ(vmem_lookup(a, &info), -ENOENT);
  CHECK_EQ(vmem_held_bytes(), 5 * MiB);
  CHECK_EQ(vmem_alloc(0, 5 * MiB, 0, &b), 0);
  CHECK(b != a && !vmem_in_range(b));
  CHECK_EQ(vmem_hold_releases(0), 0);
  CHECK_EQ(vmem_held_bytes(), 0);
  CHECK(!vmem_outside_irregular());
  /* Freed while released (paused): gone at once, the rest comes back. */
  CHECK_EQ(vmem_alloc(0, 300, 0, &a), 0);
  CHECK_EQ(vmem_release_all(), 0);
  CHECK_EQ(vmem_translate(b), NULL);
  CHECK_EQ(vmem_free(b, NULL), 0);
  CHECK_EQ(vmem_translate(b), b); /* no longer ours */
  CHECK_EQ(vmem_recreate_all(NULL), 0);
  CHECK(vmem_translate(a) != NULL && vmem_owns(a));
  CHECK_EQ(vmem_free(a, NULL), 0);
  stop(f);

  /* identity off: every pointer comes from the range, as before. */
  f = start((struct setup){.policy = VMEM_TRANSLATE, .device_bytes = GiB});
  CHECK_EQ(vmem_alloc(0, 4096, 0, &q), 0);
  CHECK(vmem_in_range(q) && vmem_translate(q) != q);
  CHECK_EQ(vmem_free(q, NULL), 0);
  stop(f);
  printf("ok: identity placement, a checkpoint that moves nothing, a forced move and a "
         "collision with a moved chunk's old extent\n");
  return 0;
}
