/* Description: the range a handover lends (sched/pool.c's pool_lend_over, docs/sharing.md
 * "Handover"): first fit as if the incoming image's range were free, starting at or before it
 * (the free bytes before it are the run-ahead) and covering it to its end, since its borrower
 * reads it until its resume is done; -EEXIST where a plain loan would do, -ENOSPC and -ENOENT
 * with the books unchanged, and pool_undo_over putting the old loan back. No pages are touched:
 * the window is never set, ranges are lent below a limit the test gives. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pool.h"
#include "test.h"

#define MIB (1024ull * 1024)
#define LIMIT (32 * MIB)

static struct host_pool pool;

/* A pool whose window is LIMIT in the books only (pool_set_window would fault it in). */
static void reset(void)
{
  pool_close(&pool);
  char why[256] = "";
  CHECK(pool_open(&pool, LIMIT, why, sizeof why) == 0, "pool_open: %s", why);
  pool.window = LIMIT;
}

static struct pool_loan lend(uint64_t bytes)
{
  struct pool_loan loan;
  CHECK_EQ(pool_lend(&pool, bytes, LIMIT, &loan), 0);
  return loan;
}

static struct pool_loan over(uint64_t bytes, uint64_t at, int expect)
{
  struct pool_loan loan = {0};
  int count = pool.count;
  uint64_t lent = pool.lent;
  int rc = pool_lend_over(&pool, bytes, LIMIT, at, &loan);
  CHECK(rc == expect, "pool_lend_over(%llu MiB over %llu MiB): %d, expected %d",
        (unsigned long long)(bytes / MIB), (unsigned long long)(at / MIB), rc, expect);
  if (rc) CHECK(pool.count == count && pool.lent == lent, "the books changed on error %d", rc);
  return loan;
}

int main(void)
{
  /* B at [0,10), free [10,32): a plain loan of 12 fits: no handover. */
  reset();
  struct pool_loan b = lend(10 * MIB);
  over(12 * MIB, b.offset, -EEXIST);
  CHECK(pool.count == 1 && pool.loan[0].offset == 0 && pool.loan[0].length == 10 * MIB);

  /* B [0,10), C [10,20), free [20,32): 16 fits neither beside B nor over it; nor over a range
   * nobody was lent. */
  lend(10 * MIB);
  over(16 * MIB, b.offset, -ENOSPC);
  over(16 * MIB, 4 * MIB, -ENOENT);

  /* X [0,4), B [4,14), C [20,32) lent, free [14,20): A of 8 over B starts at 4 and covers B to
   * its end (10, not 8). */
  reset();
  lend(4 * MIB);
  b = lend(10 * MIB);
  struct pool_loan gap = lend(6 * MIB);
  lend(12 * MIB);
  pool_return(&pool, gap.offset);
  struct pool_loan a = over(8 * MIB, b.offset, 0);
  CHECK(a.offset == 4 * MIB && a.length == 10 * MIB, "A's range %llu+%llu MiB: expected 4+10",
        (unsigned long long)(a.offset / MIB), (unsigned long long)(a.length / MIB));
  CHECK(pool.count == 3 && pool.lent == 26 * MIB, "B's loan did not make way for A's");

  /* X [0,2), free [2,6), B [6,14), C [14,32): A of 10 starts 4 MiB ahead of B, covers it. */
  reset();
  struct pool_loan x = lend(2 * MIB);
  gap = lend(4 * MIB);
  b = lend(8 * MIB);
  lend(18 * MIB);
  pool_return(&pool, gap.offset);
  uint64_t lent = pool.lent;
  a = over(10 * MIB, b.offset, 0);
  CHECK(a.offset == x.length && a.length == 12 * MIB, "A's range %llu+%llu MiB: expected 2+12",
        (unsigned long long)(a.offset / MIB), (unsigned long long)(a.length / MIB));
  /* Undone (the orders could not be sent): B's loan as it was. */
  pool_undo_over(&pool, a.offset, b);
  CHECK(pool.count == 3 && pool.lent == lent, "the undo left %d loans, %llu MiB", pool.count,
        (unsigned long long)(pool.lent / MIB));
  CHECK(pool.loan[1].offset == b.offset && pool.loan[1].length == b.length,
        "B's loan is not back in its place");
  pool_close(&pool);
  printf("ok\n");
  return 0;
}
