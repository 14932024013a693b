/* Description: a corrupt host image is detected on resume: the error names the region and the
 * chunk's offset, the corrupt chunk never reaches the device, the program stays paused with its
 * memory released; the engine alone (internal API) reports the same. A first checkpoint filled
 * by the kernel (userfaultfd) and one copied into zeroed pages give the same image, and nothing
 * of the image is left waiting for a fill afterwards. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fake_host.h"
#include "internal.h"
#include "test.h"

static struct fake_host host;

static void engine_alone(void) {
  struct fake_host h;
  fake_host_init(&h, 1);
  const uint64_t chunk = 4096;
  for (int i = 0; i < 10; i++) fake_host_add_region(&h, 3 * chunk + 100 * i, 0, 77 + i);
  struct ckpt_options options = fake_host_options(chunk, 1, 2);
  struct engine *e = engine_new(&fake_host_ops, &h, &options);
  CHECK_EQ(engine_prepare(e), 0);
  h.gate_closed = true; /* the fake checks copies happen with the gate closed */
  struct engine_stats stats;
  char reason[256] = "";
  CHECK_EQ(engine_save(e, &stats, reason, sizeof reason), 0);
  CHECK_EQ(stats.regions, 10);
  uint64_t size;
  uint8_t *data = engine_image_data(e, 4, &size);
  CHECK(data != NULL, "region 4 in the image");
  data[2 * chunk + 5] ^= 0x40;
  engine_register_image(e); /* the image's own pages go to the device, checked first */
  uint64_t shortfall;
  CHECK_EQ(fake_host_ops.release_all(&h), 0);
  CHECK_EQ(fake_host_ops.recreate_all(&h, &shortfall), 0);
  CHECK_EQ(engine_restore(e, &stats, reason, sizeof reason), -EBADMSG);
  char expected[96];
  snprintf(expected, sizeof expected, "region %" PRIu64 " ", h.regions[4].id);
  CHECK(strstr(reason, expected) != NULL, "reason names the region");
  snprintf(expected, sizeof expected, "offset %" PRIu64 " ", 2 * chunk);
  CHECK(strstr(reason, expected) != NULL, "reason names the chunk's offset");
  /* the corrupt chunk was not sent: the device still holds recreate's garbage there */
  for (uint64_t o = 2 * chunk; o < size; o++)
    if (h.regions[4].memory[o] != 0xa5) test_fail("corrupt chunk reached the device at %llu", (unsigned long long)o);
  /* fixing the byte back makes the image restorable */
  data[2 * chunk + 5] ^= 0x40;
  CHECK_EQ(engine_restore(e, &stats, reason, sizeof reason), 0);
  uint64_t offset;
  CHECK_EQ(fake_host_verify(&h, &offset), 0);
  engine_free(e);
  CHECK_EQ(h.pinned_live, 0);
  CHECK_EQ(h.registered_live, 0);
  CHECK_EQ(h.streams_live, 0);
  CHECK_EQ(h.violations, 0);
  fake_host_free(&h);
}

/* Both ways of filling a fresh image: the same bytes, every region's memory back on restore,
 * and the pages past each region's end (never filled) read as zeroes instead of hanging. */
static void fill_ways(void) {
  struct image_filler probe = {0};
  bool available = image_filler_open(&probe) == 0;
  image_filler_close(&probe);
  for (int kernel = 0; kernel <= 1; kernel++) {
    struct fake_host h;
    fake_host_init(&h, 1);
    const uint64_t chunk = 16384;
    uint64_t total = 0;
    for (int i = 0; i < 6; i++) {
      uint64_t size = 5 * chunk + (uint64_t)i * 4096 + (i % 2 ? 7 : 0); /* some end mid-page */
      fake_host_add_region(&h, size, 0, 200 + (uint32_t)i);
      total += size;
    }
    /* No reserve: one that grew in time took the image (nothing filled, no padding). */
    struct ckpt_options options = fake_host_options(chunk, 2, 4);
    options.fill_kernel = kernel;
    struct engine *e = engine_new(&fake_host_ops, &h, &options);
    CHECK_EQ(engine_prepare(e), 0);
    h.gate_closed = true;
    struct engine_stats stats;
    char reason[256] = "";
    CHECK_EQ(engine_save(e, &stats, reason, sizeof reason), 0);
    CHECK_EQ(stats.filled_bytes, kernel && available ? total : 0);
    for (size_t i = 0; i < h.region_count; i++) {
      uint64_t size;
      uint8_t *data = engine_image_data(e, i, &size);
      CHECK(data && size == h.regions[i].size, "region in the image");
      CHECK(memcmp(data, h.regions[i].memory, size) == 0, "image holds the region's bytes");
      for (uint64_t o = size; o < image_span(size); o += 1000)
        if (data[o]) test_fail("byte %llu past region %zu's end is %d", (unsigned long long)o, i, data[o]);
    }
    uint64_t shortfall, offset;
    CHECK_EQ(fake_host_ops.release_all(&h), 0);
    CHECK_EQ(fake_host_ops.recreate_all(&h, &shortfall), 0);
    CHECK_EQ(engine_restore(e, &stats, reason, sizeof reason), 0);
    CHECK_EQ(fake_host_verify(&h, &offset), 0);
    engine_free(e);
    CHECK_EQ(h.violations, 0);
    fake_host_free(&h);
  }
  if (!available) fprintf(stderr, "note: userfaultfd refused here: only the copying fill ran\n");
}

int main(void) {
  alarm(60); /* a read waiting for a fill that never comes would hang: fail instead */
  engine_alone();
  fill_ways();

  char dir[64];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);
  setenv("CUDAW_CKPT_STAGING", "8K", 1);
  fake_host_init(&host, 1);
  for (int i = 0; i < 20; i++) fake_host_add_region(&host, 50000 + 13 * i, 0, i);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);
  CHECK_EQ(ckpt_request_checkpoint(), 0);
  uint64_t size;
  uint8_t *data = engine_image_data(transition_engine(), 17, &size);
  CHECK(data && size > 40000, "image of region 17");
  data[40000] ^= 1;
  int releases = host.release_calls;
  CHECK_EQ(ckpt_request_resume(), -EBADMSG);
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);
  CHECK(host.gate_closed, "gate still closed");
  CHECK_EQ(host.release_calls, releases + 1); /* the recreated memory was given back */
  struct ckpt_result last;
  CHECK_EQ(ckpt_last_result(&last), 0);
  char expected[64];
  snprintf(expected, sizeof expected, "region %" PRIu64 " ", host.regions[17].id);
  CHECK(strstr(last.reason, expected) && strstr(last.reason, "offset 32768 "), "reason names region and offset");
  fprintf(stderr, "reason: %s\n", last.reason);
  /* still corrupt: resume keeps failing rather than restoring it */
  CHECK_EQ(ckpt_request_resume(), -EBADMSG);
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);
  data[40000] ^= 1;
  CHECK_EQ(ckpt_request_resume(), 0);
  uint64_t offset;
  CHECK_EQ(fake_host_verify(&host, &offset), 0);
  ckpt_shutdown();
  CHECK_EQ(host.violations, 0);
  test_remove_run_dir(dir);
  return 0;
}
