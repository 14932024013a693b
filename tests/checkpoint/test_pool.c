/* Description: cudawd's host-memory pool in the copy engine (sharing). A shared mapping handed
 * to the engine is page-locked in the background (reserve_new_shared); a checkpoint with a loan
 * puts the image inside the lent range and copies straight into it (no staging), and the resume
 * restores every byte; a loan smaller than the image, or none, takes the old path (or the
 * reserve) with the data still right; dropping the image gives the range back; freeing the
 * engine unregisters and unmaps the pool; a handover (an exchange's save) into a range not
 * page-locked yet still goes into the pool, staged, in the pool's order; a window that grew is
 * page-locked from where it was; a plain checkpoint whose range is page-locked only in part goes
 * to the image reserve where that holds all of it page-locked, and stays in the pool where the
 * reserve holds only part; the pool waits while the reserve grows;
 * while the program computes, the pool is page-locked one piece at a time, and by every thread
 * once it does not; on standby its page-locking is given back the same way. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_host.h"
#include "internal.h"
#include "test.h"

#define CHUNK 16384ull
#define MIB (1ull << 20)
#define POOL (16 * MIB)

static struct ckpt_options base_options(void) {
  struct ckpt_options options;
  ckpt_options_from_env(&options, NULL, 0);
  options.staging_bytes = CHUNK;
  options.streams = 4;
  options.threads = 2;
  options.reserve_piece = 2 * MIB;
  return options;
}

static struct engine_stats cycle(struct engine *e, struct fake_host *h) {
  struct engine_stats stats, restored;
  char reason[256] = "";
  h->gate_closed = true;
  CHECK_EQ(engine_save(e, &stats, reason, sizeof reason), 0);
  uint64_t shortfall, offset;
  CHECK_EQ(fake_host_ops.release_all(h), 0);
  CHECK_EQ(fake_host_ops.recreate_all(h, &shortfall), 0);
  CHECK_EQ(engine_restore(e, &restored, reason, sizeof reason), 0);
  CHECK_EQ(fake_host_verify(h, &offset), 0);
  h->gate_closed = false;
  return stats;
}

static uint64_t total_bytes(const struct fake_host *h) {
  uint64_t total = 0;
  for (size_t i = 0; i < h->region_count; i++) total += h->regions[i].size;
  return total;
}

/* A memfd of POOL bytes mapped shared, as the client maps cudawd's. */
static uint8_t *map_pool(void) {
  int fd = memfd_create("test-pool", MFD_CLOEXEC);
  CHECK(fd >= 0 && ftruncate(fd, (off_t)POOL) == 0);
  void *p = mmap(NULL, POOL, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(p != MAP_FAILED);
  close(fd);
  return p;
}

static void check_inside(struct engine *e, const uint8_t *from, const uint8_t *to) {
  for (size_t i = 0;; i++) {
    uint64_t size;
    uint8_t *data = engine_image_data(e, i, &size);
    if (!data) break;
    CHECK(data >= from && data + size <= to, "region %zu lies outside the lent range", i);
  }
}

static void run(bool with_reserve) {
  struct fake_host h;
  fake_host_init(&h, 1);
  for (int i = 0; i < 5; i++)
    fake_host_add_region(&h, 3 * CHUNK + 100 * (uint64_t)i, 0, 21 + (uint32_t)i);
  fake_host_add_region(&h, 3 * MIB, 0, 40);
  struct ckpt_options options = base_options();
  if (with_reserve) options.reserve_bytes = 16 * MIB;
  struct engine *e = engine_new(&fake_host_ops, &h, &options);
  uint8_t *base = map_pool();
  struct reserve *pool =
      reserve_new_shared(&fake_host_ops, &h, base, POOL, POOL, 2 * MIB, 2, false);
  CHECK(pool != NULL);
  CHECK(reserve_wait(pool, POOL, 10), "the pool is page-locked in the background");
  CHECK_EQ(engine_set_pool(e, pool), 0);
  if (with_reserve) CHECK(reserve_wait(engine_reserve(e), 16 * MIB, 10), "reserve ready");
  CHECK_EQ(engine_prepare(e), 0);

  /* A loan that holds the image: straight in, inside the range, straight back. */
  engine_lend(e, 6 * MIB, 8 * MIB);
  struct engine_stats saved = cycle(e, &h);
  CHECK_EQ(saved.pool_bytes, total_bytes(&h));
  CHECK_EQ(saved.reserve_bytes, 0);
  CHECK_EQ(saved.staged_bytes, 0);
  CHECK(engine_image_in_pool(e), "the image lies in the pool");
  check_inside(e, base + 6 * MIB, base + 14 * MIB);
  CHECK_EQ(engine_set_pool(e, NULL), -EBUSY); /* not replaced under the image */
  struct reserve_info info;
  reserve_status(pool, &info);
  CHECK(info.used >= total_bytes(&h), "the image holds the range");
  engine_drop_image(e);
  CHECK(!engine_image_in_pool(e), "dropped");
  reserve_status(pool, &info);
  CHECK_EQ(info.used, 0);

  /* The loan ended with the image: the next checkpoint without a new one does not use it. */
  saved = cycle(e, &h);
  CHECK_EQ(saved.pool_bytes, 0);
  CHECK_EQ(saved.reserve_bytes, with_reserve ? total_bytes(&h) : 0);
  engine_drop_image(e);

  /* A range too small: the old way (or the reserve), the data still right. */
  engine_lend(e, 0, 2 * MIB);
  saved = cycle(e, &h);
  CHECK_EQ(saved.pool_bytes, 0);
  CHECK_EQ(saved.reserve_bytes, with_reserve ? total_bytes(&h) : 0);
  engine_drop_image(e);

  /* A range past what is registered (the end of the pool): not used. */
  engine_lend(e, POOL - 2 * MIB, 8 * MIB);
  saved = cycle(e, &h);
  CHECK_EQ(saved.pool_bytes, 0);
  engine_drop_image(e);

  /* The same range lent again after the drop: used again. */
  engine_lend(e, 6 * MIB, 8 * MIB);
  saved = cycle(e, &h);
  CHECK_EQ(saved.pool_bytes, total_bytes(&h));
  engine_drop_image(e);

  engine_free(e); /* unregisters and unmaps the pool */
  CHECK_EQ(h.registered_live, 0);
  CHECK_EQ(h.violations, 0);
  fake_host_free(&h);
}

/* A handover's place callback: every chunk lies in the pool, in the pool's order. */
struct places {
  uint64_t calls, last_end;
  bool outside, backwards;
};

static int record_place(void *arg, uint64_t pool_at, uint64_t n) {
  struct places *p = arg;
  p->calls++;
  if (pool_at == UINT64_MAX) p->outside = true;
  else if (pool_at < p->last_end) p->backwards = true;
  else p->last_end = pool_at + n;
  return 0;
}

/* A fake /proc/meminfo (CUDAW_TEST_MEMINFO) at path: 1 GiB in all, `available_mib` available. */
static void write_meminfo(const char *path, unsigned long long available_mib) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fprintf(f, "MemTotal:       1048576 kB\nMemAvailable:   %llu kB\n", available_mib * 1024);
  fclose(f);
}

/* A handover into a range not page-locked yet (a program sent a larger window re-registers it
 * from its start; here the pool's registration fails): the image still goes into the pool, in
 * the pool's order, staged; so does a plain checkpoint in the same state. */
static void handover_unregistered(int fail_after) {
  struct fake_host h;
  fake_host_init(&h, 1);
  h.piece_bytes = 1 * MIB;
  for (int i = 0; i < 4; i++)
    fake_host_add_region(&h, 2 * MIB + 4096 * (uint64_t)i, 0, 61 + (uint32_t)i);
  struct ckpt_options options = base_options();
  options.reserve_auto = 0; /* no reserve of its own to take the injected failure */
  options.reserve_bytes = 0;
  struct engine *e = engine_new(&fake_host_ops, &h, &options);
  uint8_t *base = map_pool();
  h.register_fail_after = fail_after; /* that piece fails: only those before it page-locked */
  struct reserve *pool =
      reserve_new_shared(&fake_host_ops, &h, base, POOL, POOL, 2 * MIB, 1, false);
  CHECK(pool != NULL);
  for (int i = 0; i < 1000 && h.register_calls == 0; i++) usleep(1000);
  for (int i = 0; i < 1000 && h.register_calls < fail_after; i++) usleep(1000);
  usleep(10000);
  CHECK_EQ(reserve_ready(pool), (uint64_t)(fail_after - 1) * 2 * MIB);
  CHECK_EQ(engine_set_pool(e, pool), 0);
  CHECK_EQ(engine_prepare(e), 0);

  /* Not a handover, the range not page-locked: still into the range lent, staged, never into
   * memory of the image's own beside the pool (which the host may not have: here 20 MiB are
   * available, and cudawd faults the window's 16 MiB in whatever the image does). Without a
   * range, the old way must leave room for that window: the checkpoint fails, cleanly, and says
   * why. */
  struct engine_stats saved;
  if (fail_after == 1) {
    char meminfo[] = "/tmp/cudaw-pool-meminfo-XXXXXX";
    int fd = mkstemp(meminfo);
    CHECK(fd >= 0);
    close(fd);
    write_meminfo(meminfo, 20);
    setenv("CUDAW_TEST_MEMINFO", meminfo, 1);
    engine_lend(e, 0, 0);
    char why[256] = "";
    h.gate_closed = true;
    CHECK_EQ(engine_save(e, &saved, why, sizeof why), -ENOMEM);
    h.gate_closed = false;
    CHECK(strstr(why, "of which cudawd's pool window may still take 16.00 MiB") != NULL,
          "reason: %s", why);
    uint64_t offset;
    CHECK_EQ(fake_host_verify(&h, &offset), 0); /* nothing lost: still on the device */
    /* Into the range: cudawd's memory, none of the host's; so even with less available than
     * the image takes, it goes. */
    write_meminfo(meminfo, 2);
    engine_lend(e, 2 * MIB, 12 * MIB);
    saved = cycle(e, &h);
    unsetenv("CUDAW_TEST_MEMINFO");
    unlink(meminfo);
    CHECK_EQ(saved.pool_bytes, 0);
    /* what the done message turns into `held` >= 1, so that cudawd keeps the range lent */
    CHECK_EQ(saved.pool_image_bytes, total_bytes(&h));
    CHECK_EQ(saved.staged_bytes, total_bytes(&h));
    CHECK_EQ(saved.reserve_bytes, 0);
    CHECK(engine_image_in_pool(e), "a plain checkpoint left the range lent for memory of its own");
    check_inside(e, base + 2 * MIB, base + 14 * MIB);
    engine_drop_image(e);
  }

  engine_lend(e, 2 * MIB, 12 * MIB);
  struct places places = {0};
  struct engine_pace pace = {.place = record_place, .arg = &places};
  char reason[256] = "";
  h.gate_closed = true;
  CHECK_EQ(engine_save_releasing(e, &pace, &saved, reason, sizeof reason), 0);
  /* pool_bytes: what went straight in (the page-locked start of the range), the rest staged */
  CHECK_EQ(saved.pool_bytes + saved.staged_bytes, total_bytes(&h));
  CHECK(fail_after == 1 ? saved.pool_bytes == 0 : saved.pool_bytes > 0 && saved.staged_bytes > 0,
        "%" PRIu64 " bytes straight in, %" PRIu64 " staged", saved.pool_bytes, saved.staged_bytes);
  CHECK(engine_image_in_pool(e), "the handover's image lies in the pool");
  check_inside(e, base + 2 * MIB, base + 14 * MIB);
  CHECK(places.calls > 0 && !places.outside, "a chunk was placed outside the pool");
  CHECK(!places.backwards, "the chunks were not placed in the pool's order");
  uint64_t shortfall, offset;
  CHECK_EQ(fake_host_ops.release_all(&h), 0);
  CHECK_EQ(fake_host_ops.recreate_all(&h, &shortfall), 0);
  struct engine_stats restored;
  CHECK_EQ(engine_restore(e, &restored, reason, sizeof reason), 0);
  CHECK_EQ(fake_host_verify(&h, &offset), 0);
  h.gate_closed = false;
  engine_drop_image(e);
  engine_free(e);
  CHECK_EQ(h.violations, 0);
  fake_host_free(&h);
}

/* cudawd's window grew: the pool page-locks the rest from where it was (nothing registered
 * twice), and the next image may lie in the part that is new. Not larger, or past the mapping:
 * refused. */
static void grow_in_place(void) {
  struct fake_host h;
  fake_host_init(&h, 1);
  for (int i = 0; i < 3; i++) fake_host_add_region(&h, 2 * MIB + 4096 * (uint64_t)i, 0, 81);
  struct ckpt_options options = base_options();
  options.reserve_auto = 0;
  options.reserve_bytes = 0;
  struct engine *e = engine_new(&fake_host_ops, &h, &options);
  uint8_t *base = map_pool();
  struct reserve *pool =
      reserve_new_shared(&fake_host_ops, &h, base, POOL / 2, POOL, 2 * MIB, 2, false);
  CHECK(pool != NULL);
  CHECK(reserve_wait(pool, POOL / 2, 10), "the first window is page-locked");
  usleep(100 * 1000); /* the threads would go on past the window now if they were to */
  CHECK_EQ(reserve_ready(pool), POOL / 2);
  int calls = h.register_calls;
  CHECK_EQ(reserve_grow_shared(pool, POOL / 2), -EINVAL);
  CHECK_EQ(reserve_grow_shared(pool, POOL + 2 * MIB), -EINVAL);
  CHECK_EQ(reserve_grow_shared(pool, POOL), 0);
  CHECK(reserve_wait(pool, POOL, 10), "the grown window is page-locked");
  CHECK_EQ(h.register_calls - calls, (int)(POOL / 2 / (2 * MIB))); /* the new part only */
  /* A window that ends inside a piece (here 3 MiB of 2 MiB pieces) is not grown in place: the
   * next piece would start off the pieces' grid. */
  uint8_t *odd_base = map_pool();
  struct reserve *odd =
      reserve_new_shared(&fake_host_ops, &h, odd_base, 3 * MIB, POOL, 2 * MIB, 1, false);
  CHECK(odd != NULL);
  CHECK_EQ(reserve_grow_shared(odd, 8 * MIB), -EINVAL);
  reserve_free(odd);
  CHECK_EQ(engine_set_pool(e, pool), 0);
  CHECK_EQ(engine_prepare(e), 0);
  engine_lend(e, POOL / 2 + 1 * MIB, 7 * MIB); /* in the part that is new */
  struct engine_stats saved = cycle(e, &h);
  CHECK_EQ(saved.pool_bytes, total_bytes(&h));
  check_inside(e, base + POOL / 2 + 1 * MIB, base + POOL);
  engine_drop_image(e);
  engine_free(e); /* unregisters it all, unmaps the whole mapping */
  CHECK_EQ(h.registered_live, 0);
  CHECK_EQ(h.violations, 0);
  fake_host_free(&h);
}

/* Hands e a pool of which only the first 2 MiB piece gets page-locked; its mapping. */
static uint8_t *pool_locked_2mib(struct engine *e, struct fake_host *h) {
  uint8_t *base = map_pool();
  h->register_fail_after = 2; /* the next piece after the first fails */
  struct reserve *pool =
      reserve_new_shared(&fake_host_ops, h, base, POOL, POOL, 2 * MIB, 1, false);
  CHECK(pool != NULL);
  for (int i = 0; i < 1000 && reserve_ready(pool) < 2 * MIB; i++) usleep(1000);
  usleep(20000);
  CHECK_EQ(reserve_ready(pool), 2 * MIB);
  CHECK_EQ(engine_set_pool(e, pool), 0);
  CHECK_EQ(engine_prepare(e), 0);
  return base;
}

/* A borrower paused soon after allocating: its range of the pool is page-locked only in part,
 * its own reserve wholly. The image goes where more of it is page-locked, the reserve, instead of
 * through staging into the pool (5 GB/s against the reserve's 49 on the H100). With the range
 * ready, the pool takes it again. */
static void reserve_beats_partial_pool(void) {
  struct fake_host h;
  fake_host_init(&h, 1);
  fake_host_add_region(&h, 3 * MIB, 0, 60);
  fake_host_add_region(&h, 3 * CHUNK, 0, 61);
  struct ckpt_options options = base_options();
  options.reserve_bytes = 16 * MIB;
  struct engine *e = engine_new(&fake_host_ops, &h, &options);
  CHECK(reserve_wait(engine_reserve(e), 16 * MIB, 10), "reserve ready");
  pool_locked_2mib(e, &h);
  engine_lend(e, 0, 8 * MIB);
  struct engine_stats saved = cycle(e, &h);
  CHECK_EQ(saved.pool_bytes, 0);
  CHECK_EQ(saved.reserve_bytes, total_bytes(&h));
  CHECK_EQ(saved.staged_bytes, 0);
  engine_drop_image(e);
  engine_free(e);
  CHECK_EQ(h.registered_live, 0);
  CHECK_EQ(h.violations, 0);
  fake_host_free(&h);
}

/* A reserve page-locked only in part does not take the image from a range page-locked in part:
 * it would fault fresh memory of its own for the rest beside cudawd's window. The image goes
 * into the range lent, its page-locked start straight in, the rest staged. */
static void partial_reserve_leaves_pool(void) {
  struct fake_host h;
  fake_host_init(&h, 1);
  fake_host_add_region(&h, 3 * MIB, 0, 70);
  fake_host_add_region(&h, 3 * MIB, 0, 71);
  struct ckpt_options options = base_options();
  options.reserve_auto = 0;
  options.reserve_bytes = 4 * MIB; /* less than the image's 6 MiB */
  struct engine *e = engine_new(&fake_host_ops, &h, &options);
  CHECK(reserve_wait(engine_reserve(e), 4 * MIB, 10), "reserve ready");
  usleep(20000);
  CHECK_EQ(reserve_ready(engine_reserve(e)), 4 * MIB);
  uint8_t *base = pool_locked_2mib(e, &h);
  engine_lend(e, 0, 12 * MIB);
  struct engine_stats saved = cycle(e, &h);
  CHECK(engine_image_in_pool(e), "a reserve ready in part took the image from the pool");
  CHECK_EQ(saved.reserve_bytes, 0);
  CHECK(saved.pool_bytes > 0 && saved.pool_bytes + saved.staged_bytes == total_bytes(&h),
        "%" PRIu64 " bytes straight in, %" PRIu64 " staged", saved.pool_bytes, saved.staged_bytes);
  check_inside(e, base, base + 12 * MIB);
  engine_drop_image(e);
  engine_free(e);
  CHECK_EQ(h.registered_live, 0);
  CHECK_EQ(h.violations, 0);
  fake_host_free(&h);
}

/* The pool's threads page-lock nothing while the program's own reserve has pieces under way
 * (each competes for the host's memory bandwidth; the reserve is what a pause soon after
 * allocating needs first), and all of it afterwards. */
static void pool_yields_to_reserve(void) {
  struct fake_host h;
  fake_host_init(&h, 1);
  fake_host_add_region(&h, 3 * MIB, 0, 70);
  h.register_delay_us = 20000; /* up to 20 ms a piece, for the reserve and the pool alike */
  struct ckpt_options options = base_options();
  options.reserve_bytes = 16 * MIB;
  options.reserve_threads = 1; /* 8 pieces one after another */
  struct engine *e = engine_new(&fake_host_ops, &h, &options);
  /* Its first piece done, the reserve holds its next one under way until it is whole (each
   * claimed under the same lock that counts the last one done): no gap for the pool. */
  for (int i = 0; i < 5000 && reserve_ready(engine_reserve(e)) == 0; i++) usleep(1000);
  CHECK(reserve_ready(engine_reserve(e)) < 16 * MIB, "the reserve grew too fast to test");
  uint8_t *base = map_pool();
  struct reserve *pool =
      reserve_new_shared(&fake_host_ops, &h, base, POOL, POOL, 2 * MIB, 2, false);
  CHECK(pool != NULL);
  CHECK_EQ(engine_set_pool(e, pool), 0);
  uint64_t most = 0; /* the pool's ready bytes while the reserve grew */
  while (reserve_ready(engine_reserve(e)) < 16 * MIB) {
    uint64_t ready = reserve_ready(pool);
    if (ready > most) most = ready;
    usleep(1000);
  }
  printf("the pool had %" PRIu64 " MiB page-locked while the reserve grew\n", (uint64_t)(most / MIB));
  /* Each of its two threads may have taken one piece before the engine had it. */
  CHECK(most <= 4 * MIB, "the pool page-locked %" PRIu64 " MiB beside the reserve", (uint64_t)(most / MIB));
  CHECK(reserve_wait(pool, POOL, 10), "the pool is page-locked once the reserve is");
  engine_free(e);
  CHECK_EQ(h.registered_live, 0);
  CHECK_EQ(h.violations, 0);
  fake_host_free(&h);
}

/* Quiet (the program computes: ckpt_pool_quiet): one piece page-locked at a time whatever the
 * threads, with a pause as long as each took after it, since the driver holds the program's
 * launches back while it page-locks; every thread again, without pauses, once quiet ends. */
static void quiet_while_computing(void) {
  struct fake_host h;
  fake_host_init(&h, 1);
  fake_host_add_region(&h, 3 * MIB, 0, 80); /* device memory held: the pool is wanted */
  h.register_delay_us = 20000;
  uint8_t *base = map_pool();
  struct reserve *pool = reserve_new_shared(&fake_host_ops, &h, base, POOL, POOL, MIB, 4, true);
  CHECK(pool != NULL);
  double t0 = ckpt_now();
  for (int i = 0; i < 10000 && reserve_ready(pool) < POOL / 2; i++) usleep(1000);
  double took = ckpt_now() - t0;
  CHECK(reserve_ready(pool) >= POOL / 2, "half the pool page-locked while quiet");
  pthread_mutex_lock(&h.lock);
  int most = h.registering_most;
  double busy = h.registering_s;
  pthread_mutex_unlock(&h.lock);
  CHECK_EQ(most, 1);
  /* Eight pieces or more done: their page-locking, and a pause as long after all but the last. */
  printf("quiet: %.3f s page-locking in %.3f s\n", busy, took);
  CHECK(took >= 1.5 * busy, "quiet page-locked %.3f s of %.3f s", busy, took);
  reserve_quiet(pool, false);
  CHECK(reserve_wait(pool, POOL, 10), "the rest page-locked");
  pthread_mutex_lock(&h.lock);
  most = h.registering_most;
  pthread_mutex_unlock(&h.lock);
  printf("at most %d pieces page-locked at once after quiet ended (4 threads)\n", most);
  CHECK(most > 1, "the 4 threads page-locked one piece at a time after quiet ended");
  reserve_free(pool);
  CHECK_EQ(h.registered_live, 0);
  CHECK_EQ(h.violations, 0);
  fake_host_free(&h);
}

/* On standby (the program alone and idle: reserve_standby) the pool gives its page-locking
 * back; while the program computes, one piece at a time with a pause as long after it, as it
 * grows: a lone program that called the GPU again just after its pool went on standby waited
 * for every thread's unpinning to end (2.4 s for 94 GiB, H200 as an H100, session 29). Every
 * thread again once quiet ends. */
static void standby_while_computing(void) {
  struct fake_host h;
  fake_host_init(&h, 1);
  fake_host_add_region(&h, 3 * MIB, 0, 80);
  uint8_t *base = map_pool();
  struct reserve *pool = reserve_new_shared(&fake_host_ops, &h, base, POOL, POOL, MIB, 4, false);
  CHECK(pool != NULL);
  CHECK(reserve_wait(pool, POOL, 10), "the pool page-locked before its standby");
  pthread_mutex_lock(&h.lock);
  h.unregister_delay_us = 20000;
  pthread_mutex_unlock(&h.lock);
  reserve_quiet(pool, true);
  reserve_standby(pool, true);
  double t0 = ckpt_now();
  for (int i = 0; i < 10000 && reserve_ready(pool) > POOL / 2; i++) usleep(1000);
  double took = ckpt_now() - t0;
  CHECK(reserve_ready(pool) <= POOL / 2, "half the pool given back while quiet");
  pthread_mutex_lock(&h.lock);
  int most = h.unregistering_most;
  double busy = h.unregistering_s;
  pthread_mutex_unlock(&h.lock);
  printf("standby, quiet: %.3f s unpinning in %.3f s, at most %d piece(s) at once\n", busy, took,
         most);
  CHECK_EQ(most, 1);
  CHECK(took >= 1.5 * busy, "quiet unpinned %.3f s of %.3f s", busy, took);
  reserve_quiet(pool, false);
  int live = -1;
  for (int i = 0; i < 10000 && live != 0; i++) { /* the last pieces' calls end after `ready` */
    usleep(1000);
    pthread_mutex_lock(&h.lock);
    live = h.registered_live;
    pthread_mutex_unlock(&h.lock);
  }
  CHECK_EQ(reserve_ready(pool), 0);
  pthread_mutex_lock(&h.lock);
  most = h.unregistering_most;
  pthread_mutex_unlock(&h.lock);
  printf("at most %d pieces unpinned at once after quiet ended (4 threads)\n", most);
  CHECK(most > 1, "the 4 threads unpinned one piece at a time after quiet ended");
  CHECK_EQ(live, 0);
  reserve_free(pool);
  CHECK_EQ(h.violations, 0);
  fake_host_free(&h);
}

int main(void) {
  quiet_while_computing();
  standby_while_computing();
  reserve_beats_partial_pool();
  partial_reserve_leaves_pool();
  pool_yields_to_reserve();
  run(false);
  run(true);
  grow_in_place();
  handover_unregistered(1);
  handover_unregistered(3);
  printf("pool: ok\n");
  return 0;
}
