/* Description: a reserve only partly page-locked is used for its part (issue 32: the reserve was
 * all or nothing). A checkpoint whose one region is twice what is ready copies half straight into
 * the reserve and half through staging (byte counts checked), and the data comes back. That
 * region, split between page-locked and plain reserve memory, survives a kept-image (delta)
 * checkpoint and a round trip through a disk image. Several threads grow the reserve with
 * page-locking calls that finish out of order: `ready` is always a prefix that is all
 * registered, and stopping in the middle leaves nothing registered and nothing registered twice.
 * A failed page-locking names the host's error (the runtime's name for it), not just EIO. A
 * program whose device memory grows past the budget is told once, as it allocates. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disk.h"
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
  options.reserve_piece = MIB;
  options.reserve_threads = 3;
  return options;
}

static struct engine_stats save(struct engine *e, struct fake_host *h) {
  struct engine_stats stats;
  char reason[256] = "";
  h->gate_closed = true;
  int rc = engine_save(e, &stats, reason, sizeof reason);
  if (rc) fprintf(stderr, "save: %s\n", reason);
  CHECK_EQ(rc, 0);
  return stats;
}

static void release_recreate(struct fake_host *h) {
  uint64_t shortfall;
  CHECK_EQ(fake_host_ops.release_all(h), 0);
  CHECK_EQ(fake_host_ops.recreate_all(h, &shortfall), 0);
}

static void restore_verify(struct engine *e, struct fake_host *h) {
  struct engine_stats stats;
  char reason[256] = "";
  uint64_t offset;
  int rc = engine_restore(e, &stats, reason, sizeof reason);
  if (rc) fprintf(stderr, "restore: %s\n", reason);
  CHECK_EQ(rc, 0);
  CHECK_EQ(fake_host_verify(h, &offset), 0);
  h->gate_closed = false;
}

/* A reserve grown to 8 MiB for a 7 MiB region; a pause begins (its growth stops), the
 * program's memory is then one region of 16 MiB, and the checkpoint saves half of it straight
 * into the reserve, half through staging. Returns the engine; *stats the save's figures. */
static struct engine *checkpoint_half_ready(struct fake_host *h, bool keep_image,
                                            struct engine_stats *stats) {
  fake_host_init(h, 1);
  h->device_hash = true; /* delta checkpoints need the device's checksums */
  ckpt_rt.ops = &fake_host_ops;
  ckpt_rt.ctx = h;
  fake_host_add_region(h, 7 * MIB, 0, 1); /* the reserve wants 7 MiB + a page: 8 pieces */
  struct ckpt_options options = base_options();
  options.reserve_auto = 1;
  options.keep_image = keep_image;
  struct engine *e = engine_new(&fake_host_ops, h, &options);
  struct reserve *rs = engine_reserve(e);
  CHECK(reserve_wait(rs, 8 * MIB, 10), "the reserve grew to 8 MiB");
  const char *why = NULL;
  CHECK_EQ(state_begin(CKPT_OP_CHECKPOINT, &why), 0);
  usleep(100 * 1000); /* a piece under way would finish now */
  pthread_mutex_lock(&h->lock);
  free(h->regions[0].memory);
  h->region_count = 0;
  pthread_mutex_unlock(&h->lock);
  fake_host_add_region(h, 16 * MIB, 0, 2);
  CHECK_EQ(reserve_ready(rs), 8 * MIB);
  CHECK_EQ(engine_prepare(e), 0);
  h->last_log[0] = '\0';
  *stats = save(e, h);
  CHECK_EQ(stats->reserve_bytes, 8 * MIB); /* half straight in */
  CHECK_EQ(stats->staged_bytes, 8 * MIB);  /* half through staging */
  return e;
}

/* Half ready, a delta checkpoint into the kept image, then the image through disk. */
static void half_ready(void) {
  struct fake_host h;
  struct engine_stats stats;
  struct engine *e = checkpoint_half_ready(&h, true, &stats);
  struct reserve *rs = engine_reserve(e);
  pthread_mutex_lock(&h.lock);
  bool said = strstr(h.last_log, "image reserve: 8.00 MiB of 16.00 MiB into the reserve") != NULL;
  pthread_mutex_unlock(&h.lock);
  CHECK(said, "the log says how much went where");
  uint64_t size = 0;
  CHECK(engine_image_data(e, 0, &size) == reserve_base(rs), "the region lies in the reserve");
  release_recreate(&h);
  restore_verify(e, &h);

  /* Delta: the program changes one byte in each half; the kept image takes only those chunks. */
  pthread_mutex_lock(&h.lock);
  h.regions[0].memory[100] ^= 0x5a;
  h.regions[0].memory[12 * MIB + 7] ^= 0x5a;
  pthread_mutex_unlock(&h.lock);
  stats = save(e, &h);
  CHECK_EQ(stats.unchanged_bytes, 16 * MIB - 2 * CHUNK);
  uint8_t *data = engine_image_data(e, 0, &size);
  CHECK(data[100] == h.regions[0].memory[100] && data[12 * MIB + 7] == h.regions[0].memory[12 * MIB + 7],
        "the changed bytes reached both halves of the image");
  /* fake_host_verify compares with the seed's pattern: put the bytes back on the device after
   * the restore checked them against the image. */
  release_recreate(&h);
  struct engine_stats restored;
  char reason[256] = "";
  CHECK_EQ(engine_restore(e, &restored, reason, sizeof reason), 0);
  CHECK(h.regions[0].memory[100] == data[100] && h.regions[0].memory[12 * MIB + 7] == data[12 * MIB + 7],
        "the delta image restored both halves");
  h.regions[0].memory[100] ^= 0x5a;
  h.regions[0].memory[12 * MIB + 7] ^= 0x5a;
  h.gate_closed = false;

  /* Disk: the split region written out, the image dropped, read back, restored. */
  stats = save(e, &h);
  char dir[] = "/tmp/cudaw_reserve_partial_XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "a temporary directory");
  struct disk_stats disk;
  CHECK_EQ(disk_write_image(e, dir, false, 2, &disk, reason, sizeof reason), 0);
  CHECK_EQ(disk.bytes, 16 * MIB);
  engine_drop_image(e);
  struct reserve_info info;
  reserve_status(rs, &info);
  CHECK_EQ(info.used, 0); /* given back with the image */
  release_recreate(&h);
  struct ckpt_region live = {h.regions[0].id, h.regions[0].vaddr, h.regions[0].size, 0};
  int rc = disk_read_image(e, dir, &live, 1, 2, &disk, reason, sizeof reason);
  if (rc) fprintf(stderr, "disk: %s\n", reason);
  CHECK_EQ(rc, 0);
  restore_verify(e, &h);
  char command[128];
  snprintf(command, sizeof command, "rm -rf %s", dir);
  CHECK_EQ(system(command), 0);

  state_reset();
  engine_free(e);
  CHECK_EQ(h.registered_live, 0);
  CHECK_EQ(h.violations, 0);
  ckpt_rt.ops = NULL;
  fake_host_free(&h);
}

/* Several threads, out of order: `ready` only ever counts a registered prefix. */
static void growth(bool fail) {
  struct fake_host h;
  fake_host_init(&h, 1);
  ckpt_rt.ops = &fake_host_ops;
  ckpt_rt.ctx = &h;
  h.register_delay_us = 3000;
  if (fail) h.register_fail_after = 12;
  fake_host_add_region(&h, 48 * MIB, 0, 3);
  struct ckpt_options options = base_options();
  options.reserve_auto = 1;
  options.reserve_threads = 6;
  struct reserve *rs = reserve_new(&fake_host_ops, &h, &options);
  CHECK(rs != NULL, "a reserve");
  const uint8_t *base = reserve_base(rs);
  CHECK((uintptr_t)base % (2 * MIB) == 0, "it starts at a huge-page boundary");
  uint64_t last = 0;
  struct reserve_info info;
  double deadline = ckpt_now() + 10;
  do {
    reserve_status(rs, &info);
    CHECK(info.bytes >= last, "ready never shrinks while the program's memory stays");
    CHECK(info.bytes % MIB == 0, "ready is whole pieces");
    CHECK(fake_host_registered(&h, base, info.bytes), "ready is a registered prefix");
    last = info.bytes;
  } while (info.bytes < 24 * MIB && !info.refused && ckpt_now() < deadline);
  if (fail) {
    CHECK(info.refused, "the injected failure stops the growth");
    usleep(100 * 1000); /* the pieces under way finish */
    reserve_status(rs, &info);
    pthread_mutex_lock(&h.lock);
    uint64_t failed = (uint64_t)((uint8_t *)h.register_failed - base);
    pthread_mutex_unlock(&h.lock);
    CHECK(h.register_failed != NULL, "the failure was injected");
    CHECK_EQ(info.bytes, failed); /* ready stops at the piece that failed */
    CHECK(fake_host_registered(&h, base, info.bytes), "ready is a registered prefix");
    pthread_mutex_lock(&h.lock);
    bool named = strstr(h.last_log, "cudaErrorInjected") != NULL &&
                 strstr(h.last_log, "Input/output error") != NULL;
    pthread_mutex_unlock(&h.lock);
    if (!named) fprintf(stderr, "last log: %s\n", h.last_log);
    CHECK(named, "the warning names the host's own error");
  } else {
    CHECK(info.bytes >= 24 * MIB, "half of it ready");
  }
  reserve_free(rs); /* in the middle: pieces under way are stopped or undone */
  CHECK_EQ(h.registered_live, 0);
  CHECK_EQ(h.violations, 0);
  ckpt_rt.ops = NULL;
  fake_host_free(&h);
}

/* A program whose device memory grows past the budget is told at that moment, once, with the
 * setting that would allow it; not again when it grows further (the reserve grows up to the
 * budget meanwhile, without a word). */
static void budget_at_allocation(void) {
  struct fake_host h;
  fake_host_init(&h, 1);
  ckpt_rt.ops = &fake_host_ops;
  ckpt_rt.ctx = &h;
  struct ckpt_options options = base_options();
  options.reserve_auto = 1;
  options.reserve_budget_pct = 1;
  options.reserve_piece = 64 * MIB; /* it grows up to the budget: few pieces even at 1% */
  struct engine *e = engine_new(&fake_host_ops, &h, &options);
  usleep(200 * 1000);
  CHECK_EQ(h.log_lines, 0); /* no device memory: nothing to say */
  /* 1% of what is available is less than 256 MiB on any machine this runs on. */
  fake_host_add_region(&h, 256 * MIB, 0, 4);
  struct reserve_info info;
  double deadline = ckpt_now() + 5;
  do reserve_status(engine_reserve(e), &info);
  while (!info.refused && ckpt_now() < deadline);
  CHECK(info.refused, "refused as the program allocated, before any checkpoint");
  pthread_mutex_lock(&h.lock);
  int lines = h.log_lines;
  bool named = strstr(h.last_log, "CUDAW_CKPT_RESERVE_BUDGET=1%") != NULL &&
               strstr(h.last_log, "would allow it") != NULL;
  pthread_mutex_unlock(&h.lock);
  if (!named) fprintf(stderr, "last log: %s\n", h.last_log);
  CHECK(named, "the line names the option and the value that would fit");
  CHECK_EQ(lines, 1);
  fake_host_add_region(&h, 16 * MIB, 0, 5);
  usleep(300 * 1000);
  CHECK_EQ(h.log_lines, 1); /* once */
  engine_free(e);
  CHECK_EQ(h.violations, 0);
  ckpt_rt.ops = NULL;
  fake_host_free(&h);
}

/* The part of an image staged past the ready prefix is page-locked while the program rests
 * paused, so that the resume copies all of it directly (H100: a resume 1 s after such a
 * checkpoint staged 25.52 of 45.12 GiB and ran at 0.71x of H2D). */
static void tail_locked_while_paused(void) {
  state_reset();
  struct fake_host h;
  struct engine_stats stats;
  struct engine *e = checkpoint_half_ready(&h, false, &stats);
  struct reserve *rs = engine_reserve(e);
  const char *why = NULL;
  uint64_t shortfall;
  CHECK_EQ(fake_host_ops.release_all(&h), 0);
  struct ckpt_result result = {.op = CKPT_OP_CHECKPOINT};
  state_finish(&result, CKPT_PAUSED);
  CHECK(reserve_wait(rs, 16 * MIB, 10), "the staged part was page-locked while paused (%llu MiB "
        "ready)", (unsigned long long)(reserve_ready(rs) / MIB));
  CHECK_EQ(state_begin(CKPT_OP_RESUME, &why), 0);
  CHECK_EQ(fake_host_ops.recreate_all(&h, &shortfall), 0);
  struct engine_stats restored;
  char reason[256] = "";
  uint64_t offset;
  CHECK_EQ(engine_restore(e, &restored, reason, sizeof reason), 0);
  CHECK_EQ(restored.staged_bytes, 0);
  CHECK_EQ(fake_host_verify(&h, &offset), 0);
  result.op = CKPT_OP_RESUME;
  state_finish(&result, CKPT_RUNNING);
  h.gate_closed = false;
  engine_free(e);
  CHECK_EQ(h.registered_live, 0);
  CHECK_EQ(h.violations, 0);
  fake_host_free(&h);
  state_reset();
}

int main(void) {
  tail_locked_while_paused();
  budget_at_allocation();
  half_ready();
  growth(false);
  growth(true);
  printf("reserve_partial: ok\n");
  return 0;
}
