/* Description: resume when device memory cannot be recreated stays paused and reports the bytes
 * missing; the program's API calls stay blocked; a later resume succeeds with every byte. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "fake_host.h"
#include "test.h"

static struct fake_host host;
static atomic_int call_done;

static void *program_call(void *unused) {
  (void)unused;
  fake_host_call_enter(&host);
  atomic_store(&call_done, 1);
  fake_host_call_exit(&host);
  return NULL;
}

int main(void) {
  char dir[64];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);
  setenv("CUDAW_CKPT_STAGING", "16K", 1);
  fake_host_init(&host, 1);
  for (int i = 0; i < 12; i++) fake_host_add_region(&host, 33333 * (i + 1), 0, i);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);
  CHECK_EQ(ckpt_request_checkpoint(), 0);

  pthread_t program;
  pthread_create(&program, NULL, program_call, NULL);
  usleep(50000);
  CHECK(!atomic_load(&call_done), "an API call blocks while paused");

  host.recreate_failures = 2;
  host.recreate_shortfall = 3ull << 30;
  for (int attempt = 0; attempt < 2; attempt++) {
    CHECK_EQ(ckpt_request_resume(), -ENOMEM);
    CHECK_EQ(ckpt_state(), CKPT_PAUSED);
    struct ckpt_result last;
    CHECK_EQ(ckpt_last_result(&last), 0);
    CHECK_EQ(last.shortfall, 3ull << 30);
    CHECK(strstr(last.reason, "3.00 GiB short") != NULL, "reason says how much is missing");
    CHECK(!atomic_load(&call_done), "still blocked after a failed resume");
  }
  CHECK_EQ(ckpt_request_resume(), 0);
  pthread_join(program, NULL);
  CHECK(atomic_load(&call_done), "the call ran after resume");
  uint64_t offset;
  CHECK_EQ(fake_host_verify(&host, &offset), 0);
  ckpt_shutdown();
  CHECK_EQ(host.violations, 0);
  test_remove_run_dir(dir);
  return 0;
}
