/* Description: lock-free readers. Reader threads translate pointers into allocations that stay
 * live and must always get the same real address, while writer threads allocate and free
 * concurrently (under translate, where the table changes) and a final check finds the accounting
 * exact. Meant to be run under the thread sanitizer too (CUDAW_SANITIZE=thread). With --identity
 * the allocations sit at their real addresses outside the range (issue 21): readers then also
 * ask vmem_owns, and take the locked path whenever a concurrent free makes one irregular. */
#include <pthread.h>
#include <stdatomic.h>

#include "harness.h"

#define STABLE 64
#define WRITERS 2
#define READERS 2

static void *stable[STABLE];
static char *stable_real[STABLE];
static atomic_int stop_flag;

static void *reader(void *arg) {
  (void)arg;
  uint64_t n = 0;
  while (!atomic_load(&stop_flag)) {
    unsigned i = (unsigned)(n++ % STABLE);
    char *r = vmem_translate((char *)stable[i] + 100);
    if (r != stable_real[i] + 100) test_fail("translation of a live allocation changed");
    if (!vmem_owns((char *)stable[i] + 100)) test_fail("a live allocation is not owned");
  }
  return NULL;
}

static void *writer(void *arg) {
  uint64_t seed = (uintptr_t)arg * 7919 + 1;
  void *mine[32] = {0};
  for (int round = 0; round < 20000; round++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    unsigned slot = (unsigned)(seed >> 40) % 32;
    if (mine[slot]) {
      CHECK_EQ(vmem_free(mine[slot], NULL), 0);
      mine[slot] = NULL;
    } else {
      uint64_t size = (seed >> 20) % 3 == 0 ? 3 * MiB : 200 + (seed >> 33) % 70000;
      CHECK_EQ(vmem_alloc(0, size, 0, &mine[slot]), 0);
      CHECK(vmem_translate(mine[slot]) != NULL, "fresh allocation translates");
    }
  }
  for (int i = 0; i < 32; i++) CHECK_EQ(vmem_free(mine[i], NULL), 0);
  return NULL;
}

int main(int argc, char **argv) {
  int identity = argc > 1 && strcmp(argv[1], "--identity") == 0;
  struct fake *f = start((struct setup){.policy = VMEM_TRANSLATE, .device_bytes = 16 * GiB,
                                        .identity = identity});
  for (int i = 0; i < STABLE; i++) {
    CHECK_EQ(vmem_alloc(0, 1000 + (uint64_t)i * 5000, 0, &stable[i]), 0);
    stable_real[i] = vmem_translate(stable[i]);
    CHECK(!identity || (stable_real[i] == stable[i] && !vmem_in_range(stable[i])));
  }
  pthread_t readers[READERS], writers[WRITERS];
  for (int i = 0; i < READERS; i++) pthread_create(&readers[i], NULL, reader, NULL);
  for (int i = 0; i < WRITERS; i++) pthread_create(&writers[i], NULL, writer, (void *)(uintptr_t)i);
  for (int i = 0; i < WRITERS; i++) pthread_join(writers[i], NULL);
  atomic_store(&stop_flag, 1);
  for (int i = 0; i < READERS; i++) pthread_join(readers[i], NULL);
  struct vmem_stats st;
  CHECK_EQ(vmem_get_stats(0, &st), 0);
  CHECK_EQ(st.allocations, STABLE);
  for (int i = 0; i < STABLE; i++) CHECK_EQ(vmem_free(stable[i], NULL), 0);
  CHECK_EQ(vmem_trim(), 0);
  CHECK_EQ(vmem_get_stats(0, &st), 0);
  CHECK_EQ(st.held_bytes, 0);
  stop(f);
  printf("ok%s\n", identity ? " (identity)" : "");
  return 0;
}
