/* Description: a program that exits while its sched thread hands cudawd's pool to the module
 * (the thread is detached and runs on through the exit): ckpt_pool_attach and ckpt_pool_grow
 * during ckpt_shutdown are refused or done, never done on the engine being freed. Regression:
 * transition_stop freed the engine (its reserve and pool) with tr.engine still set, so an attach
 * at that moment freed the old pool a second time and set flags in the freed reserve (a 1-byte
 * write seen by AddressSanitizer in a job of sched.pool_idle_jobs). Run under a sanitizer to
 * catch it; without one it checks that nothing is left attached or crashes. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_host.h"
#include "test.h"

#define POOL (4ull << 20)
#define ROUNDS 150

static struct fake_host host;
static int pool_fd;
static atomic_bool done;
static atomic_long attached, refused;

/* The sched thread: a new window of the pool again and again (each mapped afresh, as the client
 * maps one it cannot grow in place), growing it in place between. The module owns (and unmaps)
 * a mapping it took; one it refused is ours. */
static void *sched_thread(void *unused) {
  (void)unused;
  while (!atomic_load(&done)) {
    void *base = mmap(NULL, POOL, PROT_READ | PROT_WRITE, MAP_SHARED, pool_fd, 0);
    CHECK(base != MAP_FAILED);
    if (ckpt_pool_attach(base, POOL / 2, POOL) == 0) {
      atomic_fetch_add(&attached, 1);
      (void)ckpt_pool_grow(base, POOL);
    } else {
      atomic_fetch_add(&refused, 1);
      munmap(base, POOL);
      usleep(100);
    }
  }
  return NULL;
}

int main(void) {
  char dir[64];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);
  setenv("CUDAW_CKPT_STAGING", "64K", 1);
  setenv("CUDAW_CKPT_RESERVE", "8M", 1); /* a small reserve of its own, threads and all */
  fake_host_init(&host, 1);
  fake_host_add_region(&host, 1 << 20, 0, 1);
  pool_fd = memfd_create("test-exit-pool", MFD_CLOEXEC);
  CHECK(pool_fd >= 0 && ftruncate(pool_fd, (off_t)POOL) == 0);
  for (int round = 0; round < ROUNDS; round++) {
    CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);
    atomic_store(&done, false);
    pthread_t thread;
    CHECK_EQ(pthread_create(&thread, NULL, sched_thread, NULL), 0);
    usleep(500 + (useconds_t)(round % 10) * 200); /* the exit lands at various points */
    ckpt_shutdown();
    long before = atomic_load(&attached);
    usleep(1000); /* the thread runs on after the exit: refused from here */
    CHECK_EQ(ckpt_pool_attach(NULL, 0, 0), -ENOTCONN);
    atomic_store(&done, true);
    pthread_join(thread, NULL);
    CHECK(atomic_load(&attached) - before <= 1, "pools attached after the module stopped");
  }
  pthread_mutex_lock(&host.lock);
  int registered = host.registered_live;
  pthread_mutex_unlock(&host.lock);
  printf("exit while attaching pools: %ld attached, %ld refused over %d exits; %d ranges still "
         "registered\n", atomic_load(&attached), atomic_load(&refused), ROUNDS, registered);
  CHECK(atomic_load(&attached) > 0, "no pool was ever attached");
  CHECK_EQ(host.violations, 0);
  close(pool_fd);
  test_remove_run_dir(dir);
  printf("ok\n");
  return 0;
}
