/* Description: a pause whose gate cannot close (an API call in flight never returns) is
 * abandoned after CUDAW_PAUSE_TIMEOUT: the program keeps running, nothing is released, the
 * reason is reported; once the call returns a checkpoint succeeds. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "fake_host.h"
#include "test.h"

static struct fake_host host;
static atomic_int other_call_ran;

static void *other_call(void *unused) {
  (void)unused;
  fake_host_call_enter(&host);
  atomic_store(&other_call_ran, 1);
  fake_host_call_exit(&host);
  return NULL;
}

int main(void) {
  char dir[64];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);
  setenv("CUDAW_PAUSE_TIMEOUT", "100", 1);
  fake_host_init(&host, 1);
  fake_host_add_region(&host, 1 << 20, 0, 5);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);

  fake_host_call_enter(&host); /* a call that does not finish */
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  CHECK_EQ(ckpt_request_checkpoint(), -ETIMEDOUT);
  clock_gettime(CLOCK_MONOTONIC, &b);
  double seconds = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
  CHECK(seconds >= 0.09 && seconds < 5, "gave up after about the timeout");
  CHECK_EQ(ckpt_state(), CKPT_RUNNING);
  CHECK_EQ(host.release_calls, 0);
  struct ckpt_result last;
  CHECK_EQ(ckpt_last_result(&last), 0);
  CHECK(strstr(last.reason, "CUDAW_PAUSE_TIMEOUT") != NULL, "reason names the option");

  pthread_t thread; /* the program keeps running: other calls get through */
  pthread_create(&thread, NULL, other_call, NULL);
  pthread_join(thread, NULL);
  CHECK(atomic_load(&other_call_ran), "another call ran");

  fake_host_call_exit(&host);
  CHECK_EQ(ckpt_request_checkpoint(), 0);
  CHECK_EQ(ckpt_request_resume(), 0);
  uint64_t offset;
  CHECK_EQ(fake_host_verify(&host, &offset), 0);
  ckpt_shutdown();
  CHECK_EQ(host.violations, 0);
  test_remove_run_dir(dir);
  return 0;
}
