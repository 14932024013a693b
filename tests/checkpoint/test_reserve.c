/* Description: the image reserve (CUDAW_CKPT_RESERVE). A checkpoint copies straight into it (the
 * engine counts every image byte there and none through staging) and a resume restores every
 * byte; auto grows it as the program's device memory grows and shrinks it when that memory is
 * freed; an image it cannot hold puts what fits there and the rest takes the old path; a
 * reserve past the host-memory budget is said once in a message naming the variable and grows up
 * to the budget only, and the checkpoint uses it; freeing the engine unregisters it. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake_host.h"
#include "internal.h"
#include "test.h"

#define CHUNK 16384ull
#define MIB (1ull << 20)

static struct ckpt_options base_options(void) {
  struct ckpt_options options;
  ckpt_options_from_env(&options, NULL, 0);
  options.staging_bytes = CHUNK;
  options.streams = 4;
  options.threads = 2;
  options.reserve_piece = 2 * MIB;
  return options;
}

/* One checkpoint and resume of every region of h; returns the save's stats. */
static struct engine_stats cycle(struct engine *e, struct fake_host *h, struct engine_stats *restored) {
  struct engine_stats stats;
  char reason[256] = "";
  h->gate_closed = true; /* the fake checks that copies run with the gate closed */
  CHECK_EQ(engine_save(e, &stats, reason, sizeof reason), 0);
  uint64_t shortfall, offset;
  CHECK_EQ(fake_host_ops.release_all(h), 0);
  CHECK_EQ(fake_host_ops.recreate_all(h, &shortfall), 0);
  CHECK_EQ(engine_restore(e, restored, reason, sizeof reason), 0);
  CHECK_EQ(fake_host_verify(h, &offset), 0);
  h->gate_closed = false;
  return stats;
}

static uint64_t total_bytes(const struct fake_host *h) {
  uint64_t total = 0;
  for (size_t i = 0; i < h->region_count; i++) total += h->regions[i].size;
  return total;
}

/* A fixed reserve that holds the image: straight in, straight back, then given back. */
static void fixed_reserve(void) {
  struct fake_host h;
  fake_host_init(&h, 1);
  for (int i = 0; i < 5; i++) fake_host_add_region(&h, 3 * CHUNK + 100 * (uint64_t)i, 0, 11 + (uint32_t)i);
  struct ckpt_options options = base_options();
  options.reserve_bytes = 16 * MIB;
  struct engine *e = engine_new(&fake_host_ops, &h, &options);
  CHECK(engine_reserve(e) != NULL, "a reserve exists");
  CHECK(reserve_wait(engine_reserve(e), 16 * MIB, 10), "the reserve fills up in the background");
  CHECK_EQ(h.registered_live, 8); /* 16 MiB in pieces of 2 MiB, page-locked */
  struct reserve_info info;
  reserve_status(engine_reserve(e), &info);
  CHECK_EQ(info.bytes, 16 * MIB);
  CHECK_EQ(info.used, 0);
  CHECK_EQ(engine_prepare(e), 0);
  struct engine_stats restored, saved = cycle(e, &h, &restored);
  CHECK_EQ(saved.reserve_bytes, total_bytes(&h));
  CHECK_EQ(saved.staged_bytes, 0);    /* no staging pass */
  CHECK_EQ(restored.staged_bytes, 0); /* and none on the way back */
  reserve_status(engine_reserve(e), &info);
  CHECK(info.used >= total_bytes(&h), "the image holds the reserve");
  CHECK(engine_image_registered(e) >= total_bytes(&h), "status counts the image as page-locked");
  engine_drop_image(e);
  reserve_status(engine_reserve(e), &info);
  CHECK_EQ(info.used, 0);
  /* A second cycle: the reserve given back is taken again. */
  saved = cycle(e, &h, &restored);
  CHECK_EQ(saved.reserve_bytes, total_bytes(&h));
  CHECK_EQ(saved.staged_bytes, 0);
  engine_free(e);
  CHECK_EQ(h.registered_live, 0); /* freed with the engine */
  CHECK_EQ(h.violations, 0);
  fake_host_free(&h);
}

/* auto: the reserve follows the program's device memory; an image larger than the reserve at
 * the moment of the checkpoint takes the old path. */
static void auto_reserve(void) {
  struct fake_host h;
  fake_host_init(&h, 1);
  fake_host_add_region(&h, MIB + 4096, 0, 5); /* the next regions start off chunk boundaries */
  struct ckpt_options options = base_options();
  options.reserve_auto = 1;
  struct engine *e = engine_new(&fake_host_ops, &h, &options);
  /* 1 MiB in one region (and a page of slack): one piece of 2 MiB. */
  CHECK(reserve_wait(engine_reserve(e), 2 * MIB, 10), "auto reserve for 1 MiB");
  for (int i = 0; i < 3; i++) fake_host_add_region(&h, 3 * MIB, 0, 20 + (uint32_t)i);
  /* 10 MiB: six pieces, and regions of 3 MiB cross from one piece into the next (the copies
   * are split there; the fake fails a copy that leaves its registered range). */
  CHECK(reserve_wait(engine_reserve(e), 12 * MIB, 10), "the reserve grew with device memory");
  struct reserve_info info;
  reserve_status(engine_reserve(e), &info);
  CHECK_EQ(info.target, 12 * MIB);
  CHECK_EQ(h.registered_live, 6);
  CHECK_EQ(engine_prepare(e), 0);
  struct engine_stats restored, saved = cycle(e, &h, &restored);
  CHECK_EQ(saved.reserve_bytes, total_bytes(&h));
  CHECK_EQ(saved.staged_bytes, 0);
  engine_drop_image(e);
  /* The program frees the three regions: the reserve shrinks back to one piece. */
  pthread_mutex_lock(&h.lock);
  for (size_t i = 1; i < h.region_count; i++) free(h.regions[i].memory);
  h.region_count = 1;
  pthread_mutex_unlock(&h.lock);
  /* `bytes` falls before the piece is unregistered (a checkpoint must not take a piece on its
   * way out), so wait for both. */
  double deadline = ckpt_now() + 10;
  int live;
  do {
    reserve_status(engine_reserve(e), &info);
    pthread_mutex_lock(&h.lock);
    live = h.registered_live;
    pthread_mutex_unlock(&h.lock);
  } while ((info.bytes > 2 * MIB || live > 1) && ckpt_now() < deadline);
  CHECK_EQ(info.bytes, 2 * MIB);
  CHECK_EQ(live, 1);
  for (int i = 0; i < 3; i++) fake_host_add_region(&h, 3 * MIB, 0, 20 + (uint32_t)i);
  engine_free(e);

  /* A fixed reserve too small for the image: what fits in it goes there (the first region;
   * the next would pass its end), the rest the old way, same bytes. */
  options = base_options();
  options.reserve_bytes = 4 * MIB;
  e = engine_new(&fake_host_ops, &h, &options);
  CHECK(reserve_wait(engine_reserve(e), 4 * MIB, 10), "small reserve ready");
  CHECK_EQ(engine_prepare(e), 0);
  saved = cycle(e, &h, &restored);
  CHECK_EQ(saved.reserve_bytes, MIB + 4096);
  CHECK_EQ(saved.staged_bytes, total_bytes(&h) - (MIB + 4096));
  engine_free(e);
  CHECK_EQ(h.registered_live, 0);
  CHECK_EQ(h.violations, 0);
  fake_host_free(&h);
}

static uint64_t meminfo_bytes(const char *key) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[128], name[64];
  unsigned long long kib = 0, found = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%63[^:]: %llu", name, &kib) == 2 && strcmp(name, key) == 0) found = kib;
  fclose(f);
  return (uint64_t)found << 10;
}

/* Past the budget: said at once (more than the machine has) or by the growing threads (more
 * than the budget's share of what is available), in a message that names the variable; the
 * reserve grows up to the budget (1% here) and no further, and the checkpoint uses it. */
static void budget(void) {
  uint64_t total = meminfo_bytes("MemTotal"), available = meminfo_bytes("MemAvailable");
  if (!total || !available) test_skip("no /proc/meminfo");
  if (available < (8ull << 30)) test_skip("less than 8 GiB available: 1%% of it is under a piece");
  struct fake_host h;
  fake_host_init(&h, 1);
  fake_host_add_region(&h, MIB, 0, 3);
  ckpt_rt.ops = &fake_host_ops; /* the module's messages go to h's log */
  ckpt_rt.ctx = &h;
  uint64_t sizes[2] = {2 * total, available / 10 * 9};
  for (int k = 0; k < 2; k++) {
    struct ckpt_options options = base_options();
    options.reserve_bytes = sizes[k];
    options.reserve_budget_pct = 1;
    options.reserve_piece = 64 * MIB; /* few pieces even at 1% of a large machine */
    h.last_log[0] = '\0';
    struct engine *e = engine_new(&fake_host_ops, &h, &options);
    CHECK(engine_reserve(e) != NULL, "the reserve exists");
    CHECK(!reserve_wait(engine_reserve(e), sizes[k], 2), "refused");
    struct reserve_info info;
    uint64_t last = UINT64_MAX;
    double deadline = ckpt_now() + 20;
    do { /* until it stops growing: at the budget */
      last = info.bytes;
      usleep(300 * 1000);
      reserve_status(engine_reserve(e), &info);
    } while ((last != info.bytes || info.bytes == 0) && ckpt_now() < deadline);
    CHECK(info.refused, "status says refused");
    CHECK(info.bytes >= 64 * MIB, "it grew up to the budget");
    CHECK(info.bytes <= total / 100 + 64 * MIB, "and no further");
    pthread_mutex_lock(&h.lock);
    bool named = strstr(h.last_log, "CUDAW_CKPT_RESERVE") != NULL &&
                 strstr(h.last_log, "short") != NULL;
    pthread_mutex_unlock(&h.lock);
    CHECK(named, "the refusal names the variable");
    CHECK_EQ(engine_prepare(e), 0);
    struct engine_stats restored, saved = cycle(e, &h, &restored);
    CHECK_EQ(saved.reserve_bytes, total_bytes(&h));
    CHECK_EQ(saved.staged_bytes, 0);
    engine_free(e);
  }
  CHECK_EQ(h.registered_live, 0);
  CHECK_EQ(h.violations, 0);
  ckpt_rt.ops = NULL;
  fake_host_free(&h);
}

/* The benchmark's rows: a program checkpointed twice (its image kept in the reserve), then its
 * big allocation freed and a larger one made while a small one stays (the benchmark's own
 * buffers). Once the reserve has grown to the new size, the next checkpoint goes straight into
 * it too: the small region, reused from the kept image, does not keep the new one out. Then the
 * same with a reserve just large enough, where the kept region must move. */
static void rows(void) {
  for (int tight = 0; tight < 2; tight++) {
    struct fake_host h;
    fake_host_init(&h, 1);
    fake_host_add_region(&h, 256 * 1024, 0, 1); /* stays */
    fake_host_add_region(&h, 4 * MIB, 0, 2);
    struct ckpt_options options = base_options();
    options.reserve_auto = 1;
    options.keep_image = 1;
    struct engine *e = engine_new(&fake_host_ops, &h, &options);
    CHECK(reserve_wait(engine_reserve(e), 6 * MIB, 10), "reserve for the first row");
    CHECK_EQ(engine_prepare(e), 0);
    struct engine_stats restored, saved = cycle(e, &h, &restored);
    CHECK_EQ(saved.reserve_bytes, total_bytes(&h));
    saved = cycle(e, &h, &restored);
    CHECK_EQ(saved.staged_bytes, 0);
    pthread_mutex_lock(&h.lock);
    free(h.regions[1].memory);
    h.region_count = 1;
    pthread_mutex_unlock(&h.lock);
    /* tight: 16 MiB and the small region fill the reserve's 18 MiB only from its start. */
    fake_host_add_region(&h, tight ? 16 * MIB : 12 * MIB, 0, 3);
    CHECK(reserve_wait(engine_reserve(e), tight ? 18 * MIB : 14 * MIB, 10),
          "reserve for the second row");
    saved = cycle(e, &h, &restored);
    CHECK_EQ(saved.staged_bytes, 0);
    CHECK_EQ(saved.reserve_bytes, total_bytes(&h));
    engine_free(e);
    CHECK_EQ(h.violations, 0);
    fake_host_free(&h);
  }
}

int main(void) {
  rows();
  fixed_reserve();
  auto_reserve();
  budget();
  printf("reserve: ok\n");
  return 0;
}
