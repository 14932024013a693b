/* Description: a resume where memory moves piece by piece (remap) makes device memory beside its
 * copy, not all before it (issue 32, item 5): the first chunk goes to the device before the last
 * range is made, and no chunk before its own memory exists (the fake counts a copy into missing
 * memory as a violation); a region the range operations do not know (memory the program maps
 * itself) is made by recreate_all before its own copy. The contexts (their stacks) are set back
 * before anything else, and a failure there leaves the program paused with nothing made. Making
 * memory failing at the k-th range,
 * or at that recreate_all, or a device that says beforehand it is short, fails the resume with
 * the shortfall in today's words, gives back all that was made and leaves the program paused; so
 * does a copy failing while memory is still being made. The retry is byte-exact.
 * CUDAW_CKPT_CREATE=first makes all memory before the copy, as before. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fake_host.h"
#include "test.h"

#define PIECE 65536ull

static const uint64_t sizes[] = {300000, 3 * PIECE, 200000, PIECE, 5000, 1u << 20};
#define REGIONS (sizeof sizes / sizeof sizes[0])
#define UNRANGED 2 /* the region the range operations do not know */

static struct fake_host host;

static void check_exact(void) {
  uint64_t offset = 0;
  size_t bad = fake_host_verify(&host, &offset);
  CHECK(bad == 0, "region %zu differs at offset %llu", bad - 1, (unsigned long long)offset);
  CHECK(host.violations == 0, "%s", host.violation);
}

/* A failed resume: the error in today's words, nothing held, still paused. */
static void check_failed(int rc, uint64_t shortfall, const char *short_text) {
  CHECK_EQ(rc, -ENOMEM);
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);
  struct ckpt_result last;
  CHECK_EQ(ckpt_last_result(&last), 0);
  CHECK_EQ(last.shortfall, shortfall);
  char expected[160];
  snprintf(expected, sizeof expected, "recreating device memory failed: %s short (%s); still "
           "paused, retry when memory is free", short_text, strerror(ENOMEM));
  CHECK(strcmp(last.reason, expected) == 0, "reason: %s", last.reason);
  CHECK_EQ(host.device_used, 0); /* all that was made went back */
  for (size_t i = 0; i < REGIONS; i++) CHECK(host.regions[i].memory == NULL, "region %zu held", i);
  CHECK(host.violations == 0, "%s", host.violation);
}

int main(void) {
  char dir[64];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);
  setenv("CUDAW_CKPT_STAGING", "16K", 1);
  setenv("CUDAW_CKPT_THREADS", "2", 1);
  struct ckpt_options defaults;
  unsetenv("CUDAW_CKPT_CREATE");
  ckpt_options_from_env(&defaults, NULL, 0);
  CHECK(!defaults.create_first, "CUDAW_CKPT_CREATE's default is beside (measured on the H100)");
  setenv("CUDAW_CKPT_CREATE", "beside", 1);
  fake_host_init(&host, 1);
  host.piece_bytes = PIECE;
  host.device_hash = true; /* checked on the "device" beside the copy, as on a GPU */
  uint64_t ranged = 0;
  for (size_t i = 0; i < REGIONS; i++) {
    fake_host_add_region(&host, sizes[i], 0, 40 + (uint32_t)i);
    if (i != UNRANGED) ranged += sizes[i];
  }
  free(host.regions[UNRANGED].piece_gone);
  host.regions[UNRANGED].piece_gone = NULL;
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);
  int rc_context;

  /* The order: each range made takes 2 ms, so that a copy made to wait for all of them first
   * would come after the last. */
  CHECK_EQ(ckpt_request_checkpoint(), 0);
  host.range_delay_us = 2000;
  host.events = host.first_h2d_event = host.last_create_event = host.context_event = 0;
  int recreates = host.recreate_calls;
  CHECK_EQ(ckpt_request_resume(), 0);
  struct ckpt_result last;
  CHECK_EQ(ckpt_last_result(&last), 0);
  CHECK(last.memory_beside, "memory made beside the copy");
  CHECK(host.first_h2d_event > 0 && host.first_h2d_event < host.last_create_event,
        "the first copy (event %llu) went before the last range was made (event %llu)",
        (unsigned long long)host.first_h2d_event, (unsigned long long)host.last_create_event);
  CHECK_EQ(host.recreate_calls, recreates + 1); /* the unranged region and the rest, once */
  /* The contexts (their stacks) before any memory or copy: set back after the copy, beside
   * another process's exit, the driver held it 1.4-1.7 s (H200, session 30). */
  CHECK(host.context_event == 1, "the contexts were set back at event %llu (the first range made "
        "at or before %llu, the first copy at %llu), not before anything else",
        (unsigned long long)host.context_event, (unsigned long long)host.last_create_event,
        (unsigned long long)host.first_h2d_event);
  CHECK(!host.context_given_up, "the contexts were not set back");
  check_exact();
  host.range_delay_us = 0;

  /* Setting the contexts back fails: nothing is made, still paused, the retry below works. */
  CHECK_EQ(ckpt_request_checkpoint(), 0);
  host.context_failures = 1;
  host.range_created = 0;
  rc_context = ckpt_request_resume();
  CHECK_EQ(rc_context, -ENOMEM);
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);
  CHECK_EQ(host.range_created, 0);
  CHECK_EQ(host.device_used, 0);
  CHECK_EQ(ckpt_request_resume(), 0);
  check_exact();

  /* The third range that makes memory fails: what was still to make is the shortfall. */
  CHECK_EQ(ckpt_request_checkpoint(), 0);
  host.range_fail_after = 3;
  host.range_created = 0;
  int rc = ckpt_request_resume();
  CHECK(host.range_created > 0, "some memory was made before the failure");
  uint64_t shortfall = ranged - host.range_created;
  char text[32];
  ckpt_format_bytes(shortfall, text, sizeof text);
  check_failed(rc, shortfall, text);

  /* The device says beforehand that it lacks 100000 bytes: nothing is made at all. */
  host.report_free = true;
  host.free_bytes = ranged - 100000;
  host.range_created = 0;
  check_failed(ckpt_request_resume(), 100000, "97.66 KiB");
  CHECK_EQ(host.range_created, 0);
  host.report_free = false;

  /* recreate_all, for the unranged region once the ranged ones are copied, fails. */
  host.recreate_failures = 1;
  host.recreate_shortfall = 200000;
  check_failed(ckpt_request_resume(), 200000, "195.31 KiB");

  /* A copy fails while memory is still being made: the making stops, all goes back. */
  host.range_delay_us = 2000;
  host.copy_fail_after = 2;
  CHECK_EQ(ckpt_request_resume(), -EIO);
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);
  CHECK_EQ(host.device_used, 0);
  host.range_delay_us = 0;

  CHECK_EQ(ckpt_request_resume(), 0);
  check_exact();
  ckpt_shutdown();

  /* CUDAW_CKPT_CREATE=first: all memory made before the copy, as before (recreate_all). */
  setenv("CUDAW_CKPT_CREATE", "first", 1);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);
  CHECK_EQ(ckpt_request_checkpoint(), 0);
  host.events = host.first_h2d_event = host.last_create_event = 0;
  CHECK_EQ(ckpt_request_resume(), 0);
  CHECK_EQ(ckpt_last_result(&last), 0);
  CHECK(!last.memory_beside, "memory made first");
  CHECK_EQ(host.last_create_event, 0); /* no range made: recreate_all made it all */
  check_exact();
  ckpt_shutdown();
  fake_host_free(&host);
  test_remove_run_dir(dir);
  printf("ok\n");
  return 0;
}
