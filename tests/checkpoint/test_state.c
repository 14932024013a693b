/* Description: the state machine answers every command in every state: checkpoint and resume
 * from running, pausing, paused and resuming (a second controller gets -EBUSY while a transition
 * runs), and a failed pause returns to running with its reason. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "fake_host.h"
#include "test.h"

static struct fake_host host;

static void *checkpoint_thread(void *result) {
  *(int *)result = ckpt_request_checkpoint();
  return NULL;
}

static void *resume_thread(void *result) {
  *(int *)result = ckpt_request_resume();
  return NULL;
}

int main(void) {
  char dir[64];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);
  setenv("CUDAW_CKPT_STAGING", "64K", 1);
  fake_host_init(&host, 1);
  for (int i = 0; i < 4; i++) fake_host_add_region(&host, 100000 + 777 * i, 0, i);

  CHECK_EQ(ckpt_state(), CKPT_RUNNING);
  CHECK_EQ(ckpt_request_checkpoint(), -ENOTCONN);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), -EALREADY);
  struct ckpt_result last;
  CHECK_EQ(ckpt_last_result(&last), -ENOENT);

  /* running: resume is the wrong state */
  CHECK_EQ(ckpt_request_resume(), -EALREADY);
  CHECK_EQ(ckpt_state(), CKPT_RUNNING);

  /* running -> paused; checkpoint while paused is the wrong state */
  CHECK_EQ(ckpt_request_checkpoint(), 0);
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);
  CHECK(host.gate_closed && host.released, "paused means gate closed and memory released");
  CHECK_EQ(ckpt_request_checkpoint(), -EALREADY);
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);

  /* paused -> running */
  CHECK_EQ(ckpt_request_resume(), 0);
  CHECK_EQ(ckpt_state(), CKPT_RUNNING);
  CHECK(!host.gate_closed, "gate open after resume");
  uint64_t offset;
  CHECK_EQ(fake_host_verify(&host, &offset), 0);

  /* pausing: both commands are refused with -EBUSY */
  host.drain_block = true;
  host.drain_entered = false;
  pthread_t thread;
  int result = 1;
  pthread_create(&thread, NULL, checkpoint_thread, &result);
  CHECK(fake_host_wait_drain_entered(&host, 5), "drain reached");
  CHECK_EQ(ckpt_state(), CKPT_PAUSING);
  CHECK_EQ(ckpt_request_checkpoint(), -EBUSY);
  CHECK_EQ(ckpt_request_resume(), -EBUSY);
  fake_host_unblock_drain(&host);
  pthread_join(thread, NULL);
  CHECK_EQ(result, 0);
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);

  /* resuming: both commands are refused with -EBUSY */
  host.recreate_block = true;
  host.recreate_entered = false;
  result = 1;
  pthread_create(&thread, NULL, resume_thread, &result);
  CHECK(fake_host_wait_recreate_entered(&host, 5), "recreate reached");
  CHECK_EQ(ckpt_state(), CKPT_RESUMING);
  CHECK_EQ(ckpt_request_checkpoint(), -EBUSY);
  CHECK_EQ(ckpt_request_resume(), -EBUSY);
  fake_host_unblock_recreate(&host);
  pthread_join(thread, NULL);
  CHECK_EQ(result, 0);
  CHECK_EQ(ckpt_state(), CKPT_RUNNING);
  CHECK_EQ(fake_host_verify(&host, &offset), 0);

  /* a failed pause returns to running, gate open, memory untouched, reason kept */
  host.drain_error = -EIO;
  int releases = host.release_calls;
  CHECK_EQ(ckpt_request_checkpoint(), -EIO);
  CHECK_EQ(ckpt_state(), CKPT_RUNNING);
  CHECK(!host.gate_closed, "gate reopened after a failed pause");
  CHECK_EQ(host.release_calls, releases);
  CHECK_EQ(ckpt_last_result(&last), 0);
  CHECK_EQ(last.error, -EIO);
  CHECK(strstr(last.reason, "synchronize") != NULL, "reason names the drain");
  host.drain_error = 0;
  CHECK_EQ(ckpt_request_checkpoint(), 0);
  CHECK_EQ(ckpt_request_resume(), 0);
  CHECK_EQ(fake_host_verify(&host, &offset), 0);

  ckpt_shutdown();
  CHECK_EQ(host.pinned_live, 0);
  CHECK_EQ(host.streams_live, 0);
  CHECK_EQ(host.violations, 0);
  test_remove_run_dir(dir);
  return 0;
}
