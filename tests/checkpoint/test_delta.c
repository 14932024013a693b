/* Description: delta checkpoints. With checksums on the device and a kept image, a checkpoint
 * copies only the chunks whose contents changed, and a changed byte is never missed: one byte
 * changed at the first and last byte of every chunk, in the short last word of odd-sized regions
 * and at random offsets, is found each time, and the resumed memory equals what the device held
 * byte for byte. A byte changed and changed back is rightly skipped; a corrupt image is caught at
 * resume by the device's checksums; without the device checksums every chunk is copied. The
 * reference checksum itself changes for every single-bit flip of a buffer. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "delta_hash.h"
#include "fake_host.h"
#include "internal.h"
#include "test.h"

#define REGIONS 10
static const uint64_t chunk = 4096;

static struct fake_host h;
static uint8_t *shadow[REGIONS]; /* what each region must hold after a resume */
static uint64_t total_bytes, most_registered;

static void every_bit_flip_changes_the_sum(void) {
  uint8_t buffer[1031]; /* not a multiple of 8: the short last word counts too */
  for (size_t i = 0; i < sizeof buffer; i++) buffer[i] = (uint8_t)(i * 131 + 7);
  uint64_t reference = ckpt_delta_hash(buffer, sizeof buffer);
  for (size_t i = 0; i < sizeof buffer; i++)
    for (int bit = 0; bit < 8; bit++) {
      buffer[i] ^= (uint8_t)(1u << bit);
      if (ckpt_delta_hash(buffer, sizeof buffer) == reference)
        test_fail("flipping bit %d of byte %zu leaves the checksum unchanged", bit, i);
      buffer[i] ^= (uint8_t)(1u << bit);
    }
  /* Zero bytes are not "nothing": a longer run of zeros has another sum. */
  uint8_t zeros[16] = {0};
  CHECK(ckpt_delta_hash(zeros, 8) != ckpt_delta_hash(zeros, 16), "length counts");
}

static uint64_t chunk_bytes_at(size_t region, uint64_t offset) {
  uint64_t start = offset / chunk * chunk, size = h.regions[region].size;
  return size - start < chunk ? size - start : chunk;
}

/* Checkpoint, then release, recreate (garbage) and resume; the device must equal the shadow.
 * Every other cycle registers the image while "paused", so that the next copies go straight
 * between the image and the device, and the one after checkpoints into a registered image. */
static void cycle(struct engine *e, uint64_t expect_copied, const char *what) {
  static int cycles;
  struct engine_stats stats;
  char reason[256] = "";
  CHECK_EQ(engine_save(e, &stats, reason, sizeof reason), 0);
  if (cycles++ % 2) { /* a pause long enough for the image to be registered whole */
    engine_register_image(e);
    for (int wait = 0; wait < 2000 && engine_image_registered(e) < total_bytes; wait++) usleep(1000);
    if (engine_image_registered(e) > most_registered) most_registered = engine_image_registered(e);
  }
  if (total_bytes - stats.unchanged_bytes != expect_copied)
    test_fail("%s: copied %" PRIu64 " bytes, expected %" PRIu64, what,
              total_bytes - stats.unchanged_bytes, expect_copied);
  uint64_t shortfall;
  CHECK_EQ(fake_host_ops.release_all(&h), 0);
  CHECK_EQ(fake_host_ops.recreate_all(&h, &shortfall), 0);
  if (engine_restore(e, &stats, reason, sizeof reason) != 0) test_fail("%s: resume: %s", what, reason);
  for (size_t r = 0; r < REGIONS; r++)
    if (memcmp(h.regions[r].memory, shadow[r], h.regions[r].size) != 0)
      test_fail("%s: region %zu differs from the device's contents after resume", what, r);
}

static void change(size_t region, uint64_t offset, uint8_t bits) {
  h.regions[region].memory[offset] ^= bits;
  shadow[region][offset] ^= bits;
}

int main(void) {
  every_bit_flip_changes_the_sum();
  fake_host_init(&h, 1);
  h.device_hash = true;
  for (int i = 0; i < REGIONS; i++) {
    size_t r = fake_host_add_region(&h, 3 * chunk + 100 * (uint64_t)i + (i % 3), 0, 500 + i);
    shadow[r] = malloc(h.regions[r].size);
    memcpy(shadow[r], h.regions[r].memory, h.regions[r].size);
    total_bytes += h.regions[r].size;
  }
  struct ckpt_options options;
  ckpt_options_from_env(&options, NULL, 0);
  options.staging_bytes = chunk;
  options.streams = 2;
  options.threads = 2;
  struct engine *e = engine_new(&fake_host_ops, &h, &options);
  CHECK_EQ(engine_prepare(e), 0);
  h.gate_closed = true;

  cycle(e, total_bytes, "first checkpoint (fresh image)");
  cycle(e, 0, "nothing changed");
  int changes = 0;
  for (size_t r = 0; r < REGIONS; r++) {
    uint64_t size = h.regions[r].size;
    for (uint64_t start = 0; start < size; start += chunk) {
      uint64_t end = start + chunk < size ? start + chunk : size;
      uint64_t offsets[] = {start, end - 1, start + (end - start) / 2};
      for (int k = 0; k < 3; k++) {
        change(r, offsets[k], (uint8_t)(1u << (changes % 8)));
        cycle(e, chunk_bytes_at(r, offsets[k]), "one byte changed");
        changes++;
      }
    }
  }
  srand(11);
  for (int trial = 0; trial < 200; trial++) {
    size_t r = (size_t)rand() % REGIONS;
    uint64_t offset = (uint64_t)rand() % h.regions[r].size;
    change(r, offset, (uint8_t)(1 + rand() % 255));
    cycle(e, chunk_bytes_at(r, offset), "one random byte changed");
    changes++;
  }
  /* Two chunks in two regions. */
  change(1, 5, 0x10);
  change(7, h.regions[7].size - 1, 0x80);
  cycle(e, chunk_bytes_at(1, 5) + chunk_bytes_at(7, h.regions[7].size - 1), "two chunks changed");
  /* Changed and changed back before the checkpoint: the kept image is right as it is. */
  change(3, 77, 0x01);
  change(3, 77, 0x01);
  cycle(e, 0, "changed back");
  printf("ok %d single-byte changes found, each copying only its chunk\n", changes);

  /* A corrupt image is caught on the device after the copy, and names region and offset. */
  struct engine_stats stats;
  char reason[256] = "";
  CHECK_EQ(engine_save(e, &stats, reason, sizeof reason), 0);
  uint64_t size, shortfall;
  uint8_t *data = engine_image_data(e, 4, &size);
  data[chunk + 9] ^= 0x04;
  CHECK_EQ(fake_host_ops.release_all(&h), 0);
  CHECK_EQ(fake_host_ops.recreate_all(&h, &shortfall), 0);
  CHECK_EQ(engine_restore(e, &stats, reason, sizeof reason), -EBADMSG);
  char expected[96];
  snprintf(expected, sizeof expected, "offset %" PRIu64 " ", chunk);
  CHECK(strstr(reason, expected) && strstr(reason, "on the device"), "reason names the chunk");
  data[chunk + 9] ^= 0x04;
  CHECK_EQ(engine_restore(e, &stats, reason, sizeof reason), 0);
  printf("ok corrupt image caught at resume: %s\n", reason[0] ? reason : "(see above)");

  /* Without checksums on the device: every chunk, every time. */
  h.device_hash = false;
  cycle(e, total_bytes, "no device checksums");
  cycle(e, total_bytes, "no device checksums, again");
  CHECK(most_registered >= total_bytes, "the image was registered for direct copies");
  engine_free(e);
  CHECK_EQ(h.registered_live, 0);
  CHECK_EQ(h.violations, 0);
  CHECK(h.device_hash_calls > changes, "checksums were taken on the device");
  for (size_t r = 0; r < REGIONS; r++) free(shadow[r]);
  fake_host_free(&h);
  printf("ok delta checkpoints\n");
  return 0;
}
