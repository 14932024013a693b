/* Description: every bad input to vmem_alloc/vmem_free/vmem_lookup/vmem_check_range is refused
 * with the documented error and changes nothing: interior, unknown and foreign pointers, double
 * free (reported with where it was freed), huge and zero sizes, bad devices and flags, calls
 * before init and a second init. Runs under both policies. */
#include "harness.h"

static void run(enum vmem_policy policy) {
  struct fake *f = start((struct setup){.policy = policy, .check = 1, .devices = 2});
  CHECK_EQ(vmem_policy(), policy);
  struct vmem_config again = {.policy = policy};
  CHECK_EQ(vmem_init(&again, fake_prims(), f), -EALREADY);

  void *p = (void *)1, *big, *q;
  CHECK_EQ(vmem_alloc(0, 0, 0, &p), 0); /* cudaMalloc(0): success, NULL */
  CHECK(p == NULL, "size 0 gives NULL");
  CHECK_EQ(vmem_free(NULL, NULL), 0);
  CHECK_EQ(vmem_alloc(0, 1ull << 50, 0, &p), -ENOMEM);
  CHECK_EQ(vmem_alloc(0, 65 * GiB, 0, &p), -ENOMEM); /* more than the virtual range */
  CHECK_EQ(vmem_alloc(0, 5 * GiB, 0, &p), -ENOMEM);  /* more than the device */
  CHECK_EQ(vmem_alloc(2, 100, 0, &p), -EINVAL);
  CHECK_EQ(vmem_alloc(-1, 100, 0, &p), -EINVAL);
  CHECK_EQ(vmem_alloc(0, 100, 0x80, &p), -EINVAL);
  CHECK_EQ(vmem_alloc(0, 100, 0, NULL), -EINVAL);
  struct vmem_stats st;
  CHECK_EQ(vmem_get_stats(-1, &st), 0);
  CHECK_EQ(st.allocations, 0);
  CHECK_EQ(st.held_bytes, 0);
  CHECK_EQ(fake_used(f, 0), 0);

  CHECK_EQ(vmem_alloc(0, 1000, 0, &p), 0);
  CHECK_EQ((uintptr_t)p % 512, 0);
  CHECK_EQ(vmem_alloc(1, 3 * MiB, 0, &big), 0);
  CHECK_EQ(vmem_alloc(0, 100, VMEM_ALLOC_DEDICATED, &q), 0);
  CHECK_EQ((uintptr_t)q % vmem_granule(), 0);
  CHECK(vmem_in_range(p) && vmem_in_range(big) && vmem_in_range(q), "in range");
  int host_var;
  CHECK(!vmem_in_range(&host_var), "host pointer not in range");
  CHECK(vmem_translate(&host_var) == &host_var, "foreign pointers pass through");

  CHECK_EQ(vmem_free((char *)p + 8, NULL), -EINVAL);   /* interior, small */
  CHECK_EQ(vmem_free((char *)big + 4096, NULL), -EINVAL); /* interior, large */
  CHECK_EQ(vmem_free((char *)p + 4096, NULL), -EINVAL); /* free unit of a live arena */
  CHECK_EQ(vmem_free((char *)big + 8 * MiB, NULL), -EINVAL); /* unallocated, in range */
  CHECK_EQ(vmem_free(&host_var, NULL), -EINVAL);         /* foreign */

  struct vmem_info info;
  CHECK_EQ(vmem_lookup((char *)big + 12345, &info), 0);
  CHECK(info.base == big && info.size == 3 * MiB && info.offset == 12345 && info.device == 1,
        "lookup of an interior pointer");
  CHECK_EQ(info.state, VMEM_RESIDENT);
  CHECK_EQ(vmem_lookup((char *)p + 1000, &info), -ENOENT); /* one past the end */
  CHECK_EQ(vmem_lookup(&host_var, &info), -ENOENT);

  struct vmem_check_report r;
  CHECK_EQ(vmem_check_range(p, 1000, &r), 0);
  CHECK_EQ(vmem_check_range((char *)p + 999, 2, &r), -EFAULT);
  CHECK_EQ(r.kind, VMEM_CHECK_OVERFLOW);
  CHECK(r.base == p && r.size == 1000, "overflow names the allocation");
  CHECK_EQ(vmem_check_range(&host_var, 4, &r), -EFAULT);
  CHECK_EQ(r.kind, VMEM_CHECK_OUTSIDE);
  CHECK_EQ(vmem_check_range((char *)big + 8 * MiB, 4, &r), -EFAULT);
  CHECK_EQ(r.kind, VMEM_CHECK_UNALLOCATED);

  const void *where = (const void *)0x1234;
  CHECK_EQ(vmem_free(p, where), 0);
  CHECK_EQ(vmem_free(p, NULL), -EINVAL); /* double free */
  CHECK_EQ(vmem_check_range((char *)p + 10, 4, &r), -EFAULT);
  CHECK_EQ(r.kind, VMEM_CHECK_FREED);
  CHECK(r.base == p && r.size == 1000 && r.freed_where == where, "use after free names the free");
  CHECK(vmem_translate(p) != NULL, "its empty arena is kept for reuse");
  CHECK_EQ(vmem_trim(), 0);
  CHECK(vmem_translate(p) == NULL, "trimmed: its arena is gone, so is the translation");
  CHECK_EQ(vmem_free(big, where), 0);
  CHECK(vmem_translate(big) == NULL, "freed large chunk no longer translates");
  CHECK_EQ(vmem_free(big, NULL), -EINVAL);
  CHECK_EQ(vmem_free(q, NULL), 0);
  CHECK_EQ(vmem_get_stats(-1, &st), 0);
  CHECK_EQ(st.allocations, 0);
  CHECK_EQ(st.held_bytes, 0);
  CHECK_EQ(st.chunks, 0);
  /* translate keeps a freed large chunk's memory (up to 16 MiB) for reuse, until trimmed */
  if (policy == VMEM_TRANSLATE) CHECK(fake_used(f, 0) + fake_used(f, 1) > 0, "memory kept");
  CHECK_EQ(vmem_trim(), 0);
  CHECK_EQ(fake_used(f, 0) + fake_used(f, 1), 0);
  stop(f);
  printf("ok %s\n", policy_name(policy));
}

int main(void) {
  void *p;
  CHECK_EQ(vmem_alloc(0, 100, 0, &p), -EINVAL); /* before init */
  CHECK_EQ(vmem_free((void *)0x1000, NULL), -EINVAL);
  CHECK(vmem_translate((void *)0x1000) == (void *)0x1000, "no range before init");
  run(VMEM_TRANSLATE);
  run(VMEM_REMAP);
  return 0;
}
