/* Description: a checkpoint that fails after memory has left the device puts that memory back and
 * the program runs on; where putting it back fails too, the image is the only copy of that memory,
 * so the program stays paused with it and a resume brings every byte back. It never runs on
 * without it. The regions go back piece by piece as they are saved (a fake with pieces), then:
 *  1. moving managed memory off the device (park_other) fails; the put-back works: running,
 *     byte-exact;
 *  2. the same, and recreate_all fails: paused, the reason says so; the resume is byte-exact;
 *  3. release_all fails (the host makes the memory again, its content undefined) and the restore
 *     of the saved bytes lands garbled: paused; the resume is byte-exact. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fake_host.h"
#include "test.h"

#define PIECE 65536ull

static const uint64_t sizes[] = {300000, 3 * PIECE, 1u << 20, 5000};
#define REGIONS (sizeof sizes / sizeof sizes[0])

static struct fake_host host;

static void check_exact(const char *when) {
  uint64_t offset = 0;
  size_t bad = fake_host_verify(&host, &offset);
  CHECK(bad == 0, "%s: region %zu differs at offset %llu", when, bad - 1,
        (unsigned long long)offset);
  CHECK(host.violations == 0, "%s: %s", when, host.violation);
}

static void check_reason(const char *part) {
  struct ckpt_result last;
  CHECK_EQ(ckpt_last_result(&last), 0);
  CHECK(strstr(last.reason, part) != NULL, "the reason lacks \"%s\": %s", part, last.reason);
}

/* The checkpoint failed and the program stays paused with its image. */
static void paused_with_image(void) {
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);
  check_reason("stays paused with its image");
}

/* The resume brings every byte back. */
static void resume_exact(const char *when) {
  CHECK_EQ(ckpt_request_resume(), 0);
  CHECK_EQ(ckpt_state(), CKPT_RUNNING);
  check_exact(when);
}

int main(void) {
  char dir[64];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);
  setenv("CUDAW_CKPT_STAGING", "16K", 1);
  setenv("CUDAW_CKPT_THREADS", "2", 1);
  fake_host_init(&host, 1);
  host.piece_bytes = PIECE;
  host.device_hash = true;
  uint64_t all = 0;
  for (size_t i = 0; i < REGIONS; i++) {
    fake_host_add_region(&host, sizes[i], 0, 70 + (uint32_t)i);
    all += sizes[i];
  }
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);

  /* 1. The park fails; what went back while saving comes back from the image. */
  host.park_error = -EIO;
  CHECK_EQ(ckpt_request_checkpoint(), -EIO);
  CHECK(host.range_releases > 0, "the pieces went back as they were saved");
  CHECK_EQ(host.park_calls, 1);
  CHECK_EQ(ckpt_state(), CKPT_RUNNING);
  CHECK_EQ(host.device_used, all);
  check_exact("the park failed, the put-back worked");

  /* 2. ... and putting it back fails: paused with the image, never running without it. */
  int releases = host.range_releases;
  host.recreate_failures = 1;
  host.recreate_shortfall = PIECE;
  CHECK_EQ(ckpt_request_checkpoint(), -EIO);
  CHECK(host.range_releases > releases, "the pieces went back as they were saved");
  paused_with_image();
  host.park_error = 0;
  resume_exact("resumed after a failed put-back");

  /* 3. release_all fails and the bytes put back land garbled: paused with the image. */
  host.release_all_error = -EIO;
  host.h2d_garble_after = 1; /* the save copies only to the host: the first is the put-back's */
  CHECK_EQ(ckpt_request_checkpoint(), -EIO);
  paused_with_image();
  host.release_all_error = 0;
  resume_exact("resumed after a failed restore");

  /* And an ordinary round trip still works after all of it. */
  CHECK_EQ(ckpt_request_checkpoint(), 0);
  resume_exact("an ordinary round trip");
  ckpt_shutdown();
  fake_host_free(&host);
  test_remove_run_dir(dir);
  printf("ok\n");
  return 0;
}
