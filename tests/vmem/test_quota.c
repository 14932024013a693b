/* Description: CUDAW_MEM_LIMIT parsing (bytes, K/M/G/T, fractions, N% of the device, every kind of
 * malformed text), quota enforcement (allocations beyond the per-device limit fail with -ENOMEM
 * and leave nothing behind, on either device; device exhaustion and injected device failures the
 * same) and vmem_mem_info (total = min(device, quota), free = total - held, never more than the
 * device has free). */
#include "harness.h"

static void parse_ok(const char *text, uint64_t total, uint64_t want) {
  uint64_t got = 0;
  int rc = vmem_parse_size(text, total, &got);
  if (rc != 0 || got != want)
    test_fail("parse '%s': rc %d, %llu, want %llu", text, rc, (unsigned long long)got,
              (unsigned long long)want);
}

static void parse_bad(const char *text) {
  uint64_t got = 77;
  int rc = vmem_parse_size(text, 80 * GiB, &got);
  if (rc != -EINVAL || got != 77) test_fail("parse '%s' accepted: rc %d", text, rc);
}

static void parsing(void) {
  parse_ok("1048576", 0, MiB);
  parse_ok("4096K", 0, 4 * MiB);
  parse_ok("512m", 0, 512 * MiB);
  parse_ok("2G", 0, 2 * GiB);
  parse_ok("2GiB", 0, 2 * GiB);
  parse_ok("2gb", 0, 2 * GiB);
  parse_ok("1.5G", 0, 3 * GiB / 2);
  parse_ok("1T", 0, 1024 * GiB);
  parse_ok("100B", 0, 100);
  parse_ok(" 8G", 0, 8 * GiB);
  parse_ok("50%", 80 * GiB, 40 * GiB);
  parse_ok("12.5%", 8 * GiB, GiB);
  parse_ok("100%", 8 * GiB, 8 * GiB);
  const char *bad[] = {"", " ", "G", "-1G", "0", "0%", "abc", "12Q", "1GG", "1 G B", "101%",
                       "5%x", "nan", "inf", "1e30T", "0x10", "1.5.5G", "%", "1Gx"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) parse_bad(bad[i]);
  uint64_t out;
  CHECK_EQ(vmem_parse_size("50%", 0, &out), -EINVAL); /* percent of an unknown device size */
  CHECK_EQ(vmem_parse_size(NULL, 0, &out), -EINVAL);
}

static void quota(enum vmem_policy policy) {
  struct fake *f = start((struct setup){.policy = policy, .devices = 2, .device_bytes = GiB,
                                        .mem_limit = 64 * MiB});
  uint64_t free_bytes, total;
  CHECK_EQ(vmem_mem_info(0, &free_bytes, &total), 0);
  CHECK_EQ(total, 64 * MiB);
  CHECK_EQ(free_bytes, 64 * MiB);

  void *p[64];
  int n = 0;
  for (int d = 0; d < 2; d++) {
    int rc;
    while ((rc = vmem_alloc(d, 10 * MiB, 0, &p[n])) == 0) n++;
    CHECK_EQ(rc, -ENOMEM);
  }
  CHECK_EQ(n, 12); /* 6 x 10 MiB per device (granule-rounded to 10 MiB under both policies) */
  struct vmem_stats st0, st1;
  CHECK_EQ(vmem_get_stats(0, &st0), 0);
  CHECK_EQ(vmem_get_stats(1, &st1), 0);
  CHECK(st0.held_bytes <= 64 * MiB && st1.held_bytes <= 64 * MiB, "under quota");
  uint64_t used0 = fake_used(f, 0);
  void *small;
  CHECK_EQ(vmem_alloc(0, 5 * MiB, 0, &small), -ENOMEM);
  CHECK_EQ(vmem_alloc(0, 100, 0, &small), 0); /* a new slab still fits in 4 MiB */
  CHECK_EQ(vmem_alloc(0, 3 * MiB, 0, &p[n]), -ENOMEM);
  CHECK_EQ(vmem_alloc(0, 2 * MiB, VMEM_ALLOC_DEDICATED, &p[n]), 0); /* exactly up to the limit */
  CHECK_EQ(vmem_alloc(0, 2 * MiB, VMEM_ALLOC_DEDICATED, &p[n + 1]), -ENOMEM);
  CHECK_EQ(vmem_free(p[n], NULL), 0);
  uint64_t kept = policy == VMEM_TRANSLATE ? 2 * MiB : 0; /* freed memory kept for reuse */
  CHECK_EQ(fake_used(f, 0), used0 + 2 * MiB + kept);
  CHECK_EQ(vmem_mem_info(0, &free_bytes, &total), 0);
  CHECK_EQ(total, 64 * MiB);
  CHECK_EQ(free_bytes, 64 * MiB - 62 * MiB);
  CHECK_EQ(vmem_free(small, NULL), 0);
  CHECK_EQ(fake_used(f, 0), used0 + 2 * MiB + kept); /* its empty arena is kept for reuse ... */
  CHECK_EQ(vmem_trim(), 0);
  CHECK_EQ(fake_used(f, 0), used0);            /* ... until trimmed */

  /* Another process takes the device: free follows the device, not just the quota. */
  fake_set_device_bytes(f, 0, used0 + MiB);
  CHECK_EQ(vmem_mem_info(0, &free_bytes, &total), 0);
  CHECK_EQ(free_bytes, MiB);
  fake_set_device_bytes(f, 0, GiB);
  for (int i = 0; i < n; i++) CHECK_EQ(vmem_free(p[i], NULL), 0);
  CHECK_EQ(vmem_mem_info(1, &free_bytes, &total), 0);
  CHECK_EQ(free_bytes, 64 * MiB);
  CHECK_EQ(vmem_mem_info(2, &free_bytes, &total), -EINVAL);
  stop(f);
}

/* No quota: the device itself runs out, or a device call fails; nothing may be left behind. */
static void exhaustion(enum vmem_policy policy) {
  struct fake *f = start((struct setup){.policy = policy, .device_bytes = 32 * MiB});
  uint64_t free_bytes, total;
  CHECK_EQ(vmem_mem_info(0, &free_bytes, &total), 0);
  CHECK_EQ(total, 32 * MiB);
  void *a, *b;
  CHECK_EQ(vmem_alloc(0, 20 * MiB, 0, &a), 0);
  CHECK_EQ(vmem_alloc(0, 20 * MiB, 0, &b), -ENOMEM);
  uint64_t used = fake_used(f, 0);
  struct vmem_stats st;
  enum fake_op ops[] = {FAKE_DEV_MALLOC, FAKE_PHYS_CREATE, FAKE_MAP, FAKE_SET_ACCESS};
  for (int i = 0; i < 4; i++) {
    fake_fail(f, ops[i], 1);
    int rc = vmem_alloc(0, 1000, 0, &b);
    if (fake_calls(f, ops[i]) == 0) { /* not used under this policy */
      CHECK_EQ(rc, 0);
      CHECK_EQ(vmem_free(b, NULL), 0);
      CHECK_EQ(vmem_trim(), 0); /* the next small allocation must create an arena again */
      fake_fail(f, ops[i], 0);
      continue;
    }
    CHECK_EQ(rc, -ENOMEM);
    CHECK_EQ(fake_used(f, 0), used);
    CHECK_EQ(vmem_get_stats(0, &st), 0);
    CHECK_EQ(st.allocations, 1);
    CHECK_EQ(st.chunks, 1);
  }
  CHECK_EQ(vmem_alloc(0, 1000, 0, &b), 0); /* and then it works */
  CHECK_EQ(vmem_free(b, NULL), 0);
  CHECK_EQ(vmem_free(a, NULL), 0);
  stop(f);
}

/* translate: a freed chunk's memory (up to 16 MiB, 4 per device) is kept for the next chunk of
 * its size, taken without a device call; it counts against the quota but as free in mem_info,
 * and goes back when an allocation needs the room, on trim and on release. */
static void kept_memory(void) {
  struct fake *f = start((struct setup){.policy = VMEM_TRANSLATE, .device_bytes = GiB,
                                        .mem_limit = 16 * MiB});
  void *a, *b;
  CHECK_EQ(vmem_alloc(0, 2 * MiB, 0, &a), 0);
  uint64_t mallocs = fake_calls(f, FAKE_DEV_MALLOC), frees = fake_calls(f, FAKE_DEV_FREE);
  uint64_t used = fake_used(f, 0);
  CHECK_EQ(vmem_free(a, NULL), 0);
  CHECK_EQ(fake_used(f, 0), used);
  CHECK_EQ(fake_calls(f, FAKE_DEV_FREE), frees);
  uint64_t free_bytes, total;
  CHECK_EQ(vmem_mem_info(0, &free_bytes, &total), 0);
  CHECK_EQ(free_bytes, 16 * MiB);
  CHECK_EQ(vmem_alloc(0, 2 * MiB, 0, &b), 0);
  CHECK_EQ(fake_calls(f, FAKE_DEV_MALLOC), mallocs);
  CHECK(vmem_translate(b) != NULL, "a chunk on kept memory translates");
  CHECK_EQ(vmem_free(b, NULL), 0);
  CHECK(vmem_translate(b) == NULL, "a freed chunk does not translate while its memory is kept");
  /* Fits the quota only without the kept memory: the kept memory goes, the allocation succeeds. */
  CHECK_EQ(vmem_alloc(0, 15 * MiB, 0, &a), 0);
  CHECK_EQ(fake_calls(f, FAKE_DEV_FREE), frees + 1);
  CHECK_EQ(vmem_free(a, NULL), 0);
  CHECK_EQ(fake_used(f, 0), 15 * MiB); /* kept: up to 16 MiB */
  CHECK_EQ(vmem_release_all(), 0);
  CHECK_EQ(fake_used(f, 0), 0); /* a pause gives it back */
  /* At most 4 kept per device; bigger than 16 MiB never. */
  void *p[5];
  for (int i = 0; i < 5; i++) CHECK_EQ(vmem_alloc(0, 2 * MiB + 512 * i, 0, &p[i]), 0);
  for (int i = 0; i < 5; i++) CHECK_EQ(vmem_free(p[i], NULL), 0);
  CHECK_EQ(fake_used(f, 0), 4 * 2 * MiB + 512 * (0 + 1 + 2 + 3));
  CHECK_EQ(vmem_trim(), 0);
  CHECK_EQ(fake_used(f, 0), 0);
  stop(f);
  f = start((struct setup){.policy = VMEM_TRANSLATE, .device_bytes = GiB});
  CHECK_EQ(vmem_alloc(0, 17 * MiB, 0, &a), 0);
  CHECK_EQ(vmem_free(a, NULL), 0);
  CHECK_EQ(fake_used(f, 0), 0);
  stop(f);
}

int main(void) {
  parsing();
  kept_memory();
  quota(VMEM_TRANSLATE);
  quota(VMEM_REMAP);
  exhaustion(VMEM_TRANSLATE);
  exhaustion(VMEM_REMAP);
  printf("ok\n");
  return 0;
}
