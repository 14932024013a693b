/* Description: a resume checks the chunks on the device as they land, in batches beside the copy
 * (issue 32: the check after the copy was 2% of a resume), not all after it: every byte is
 * checked (verified_in_flight = the image), in several batches, and the data comes back exact. A
 * byte of the image changed while paused is found, named (region, offset) and the resume fails.
 * Without checksums on the device the old check after the copy (on the host) still runs. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "fake_host.h"
#include "internal.h"
#include "test.h"

#define CHUNK 16384ull

static const uint64_t sizes[] = {3u << 20, 700000, CHUNK, 1u << 20};
#define REGIONS (sizeof sizes / sizeof sizes[0])

static struct engine *saved(struct fake_host *h, bool device_hash) {
  fake_host_init(h, 1);
  h->device_hash = device_hash;
  for (size_t i = 0; i < REGIONS; i++) fake_host_add_region(h, sizes[i], 0, 70 + (uint32_t)i);
  h->gate_closed = true;
  struct ckpt_options options = fake_host_options(CHUNK, 2, 4);
  struct engine *e = engine_new(&fake_host_ops, h, &options);
  CHECK(e != NULL, "engine_new");
  struct engine_stats stats;
  char reason[256] = "";
  int rc = engine_save(e, &stats, reason, sizeof reason);
  CHECK(rc == 0, "save: %s", reason);
  uint64_t shortfall;
  CHECK_EQ(fake_host_ops.release_all(h), 0);
  CHECK_EQ(fake_host_ops.recreate_all(h, &shortfall), 0);
  return e;
}

static void checked_as_landed(bool device_hash) {
  struct fake_host h;
  struct engine *e = saved(&h, device_hash);
  int calls = h.device_hash_calls;
  h.copy_delay_us = 300; /* ~300 chunks over 2 threads: ~45 ms of copying to check beside */
  struct engine_stats stats;
  char reason[256] = "";
  int rc = engine_restore(e, &stats, reason, sizeof reason);
  CHECK(rc == 0, "restore: %s", reason);
  uint64_t offset = 0;
  CHECK_EQ(fake_host_verify(&h, &offset), 0);
  CHECK(h.violations == 0, "%s", h.violation);
  if (device_hash) {
    CHECK_EQ(stats.verified_in_flight, engine_image_bytes(e));
    CHECK(h.device_hash_calls - calls >= 3, "checked in %d batches", h.device_hash_calls - calls);
  } else {
    CHECK_EQ(stats.verified_in_flight, 0);
    CHECK_EQ(h.device_hash_calls, calls);
  }
  engine_free(e);
  fake_host_free(&h);
}

static void corrupt_found(bool device_hash) {
  struct fake_host h;
  struct engine *e = saved(&h, device_hash);
  struct engine_image_view view;
  CHECK_EQ(engine_image_region(e, 0, &view), 0);
  view.data[2 * CHUNK + 77] ^= 1; /* bit rot in host memory while paused */
  struct engine_stats stats;
  char reason[256] = "";
  int rc = engine_restore(e, &stats, reason, sizeof reason);
  CHECK(rc == -EBADMSG, "restore of a corrupt image: %d (%s)", rc, reason);
  CHECK(strstr(reason, "image corrupt") && strstr(reason, "offset 32768"), "reason: %s", reason);
  engine_free(e);
  fake_host_free(&h);
}

int main(void) {
  checked_as_landed(true);
  checked_as_landed(false);
  corrupt_found(true);
  corrupt_found(false);
  printf("ok\n");
  return 0;
}
