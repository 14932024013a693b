/* Description: a program that exits while the staging buffers are being pinned ahead
 * (CUDAW_CKPT_PIN_EARLY) does not wait for all of them: the module's shutdown stops the pinning
 * after the buffers under way. Regression: `import torch; torch.ones(1).cuda()` started the
 * pinning of 128 MiB at its first allocation and its exit waited for all of it. */
#define _GNU_SOURCE
#include <errno.h>
#include <time.h>
#include <unistd.h>

#include "fake_host.h"
#include "test.h"

enum { BUFFERS = 16, THREADS = 2, DELAY_MS = 20 };

static struct fake_host host;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int pinned(void) {
  pthread_mutex_lock(&host.lock);
  int live = host.pin_calls;
  pthread_mutex_unlock(&host.lock);
  return live;
}

int main(void) {
  char dir[64];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);
  setenv("CUDAW_CKPT_STAGING", "64K", 1);
  setenv("CUDAW_CKPT_STREAMS", "16", 1);
  setenv("CUDAW_CKPT_THREADS", "2", 1);
  fake_host_init(&host, 1);
  host.pin_delay_us = DELAY_MS * 1000;
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);

  /* The first allocation: pinning starts in the background (BUFFERS / THREADS x DELAY_MS). */
  ckpt_prepare_early();
  double deadline = now_ms() + 5000;
  while (pinned() == 0 && now_ms() < deadline) usleep(1000);
  CHECK(pinned() > 0, "early pinning did not start");
  double start = now_ms();
  ckpt_shutdown();
  double waited = now_ms() - start;
  int done = pinned();
  printf("exit during early pinning: waited %.1f ms, %d of %d buffers pinned "
         "(all of them: %d ms)\n", waited, done, BUFFERS, BUFFERS / THREADS * DELAY_MS);
  CHECK(done < BUFFERS, "every buffer was pinned before the exit returned");
  CHECK(waited < BUFFERS / THREADS * DELAY_MS / 2, "the exit waited %.1f ms", waited);

  /* Started again (as in a fork's child): pinning ahead works, and completes. */
  host.pin_delay_us = 0;
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);
  ckpt_prepare_early();
  deadline = now_ms() + 5000;
  while (pinned() < BUFFERS + done && now_ms() < deadline) usleep(1000);
  CHECK_EQ(pinned(), BUFFERS + done);
  ckpt_shutdown();
  test_remove_run_dir(dir);
  printf("ok\n");
  return 0;
}
