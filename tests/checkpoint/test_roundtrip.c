/* Description: checkpoint and resume of many regions on two devices, sizes around the chunk
 * size and odd ones, restore every byte; a kept image (CUDAW_CKPT_KEEP_IMAGE=1) is reused by
 * the next checkpoint and holds the new data. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_host.h"
#include "internal.h"
#include "test.h"

static struct fake_host host;

static void cycle(uint64_t expected_bytes) {
  CHECK_EQ(ckpt_request_checkpoint(), 0);
  for (size_t i = 0; i < host.region_count; i++)
    CHECK(host.regions[i].memory == NULL, "every region released while paused");
  struct ckpt_result r;
  CHECK_EQ(ckpt_last_result(&r), 0);
  CHECK_EQ(r.bytes, expected_bytes);
  CHECK_EQ(r.regions, host.region_count);
  CHECK(r.gate_seconds >= 0 && r.total_seconds >= r.copy_seconds, "timings are consistent");
  CHECK_EQ(ckpt_request_resume(), 0);
  uint64_t offset = 0;
  size_t bad = fake_host_verify(&host, &offset);
  if (bad) test_fail("region %zu differs at offset %llu", bad - 1, (unsigned long long)offset);
}

int main(void) {
  char dir[64];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);
  setenv("CUDAW_CKPT_STAGING", "64K", 1);
  setenv("CUDAW_CKPT_STREAMS", "6", 1);
  setenv("CUDAW_CKPT_THREADS", "3", 1);
  setenv("CUDAW_CKPT_KEEP_IMAGE", "1", 1);
  fake_host_init(&host, 2);
  const uint64_t chunk = 64 << 10;
  uint64_t sizes[] = {1, 7, chunk - 1, chunk, chunk + 1, 3 * chunk, 5 * chunk + 4095, 3 << 20};
  uint64_t total = 0;
  srand(42);
  for (int i = 0; i < 200; i++) {
    uint64_t size = i < 8 ? sizes[i] : 1 + (uint64_t)rand() % (300u << 10);
    fake_host_add_region(&host, size, i % 2, (uint32_t)i);
    total += size;
  }
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);
  cycle(total);
  CHECK_EQ(transition_image_bytes(), total); /* kept */

  /* The program changes its data; the next checkpoint reuses the kept image and saves the new. */
  for (size_t i = 0; i < host.region_count; i += 3) {
    struct fake_region *r = &host.regions[i];
    r->seed += 1000;
    for (uint64_t o = 0; o < r->size; o++) {
      uint64_t x = (o + 1) * 0x9E3779B97F4A7C15ull ^ r->seed;
      x ^= x >> 29;
      r->memory[o] = (uint8_t)(x ^ (x >> 17));
    }
  }
  uint64_t size0 = 0;
  uint8_t *before = engine_image_data(transition_engine(), 0, &size0);
  cycle(total);
  uint64_t size1 = 0;
  CHECK(engine_image_data(transition_engine(), 0, &size1) == before, "image memory reused");
  CHECK_EQ(size1, size0);

  ckpt_shutdown();
  CHECK_EQ(host.pinned_live, 0);
  CHECK_EQ(host.streams_live, 0);
  CHECK_EQ(host.violations, 0);
  test_remove_run_dir(dir);
  return 0;
}
