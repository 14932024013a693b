/* Description: SIGUSR1 sent to the process checkpoints it through the signal pipe; the handler
 * the program installed earlier is still called; a signal while paused changes nothing;
 * shutdown restores the program's handler. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "fake_host.h"
#include "test.h"

static struct fake_host host;
static volatile sig_atomic_t program_handler_calls;

static void program_handler(int signo) {
  (void)signo;
  program_handler_calls++;
}

int main(void) {
  char dir[64];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "USR1", 1);
  fake_host_init(&host, 1);
  fake_host_add_region(&host, 5 << 20, 0, 9);
  signal(SIGUSR1, program_handler);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);

  kill(getpid(), SIGUSR1);
  CHECK(test_wait_state(CKPT_PAUSED, 10), "paused after SIGUSR1");
  CHECK_EQ(program_handler_calls, 1);
  struct ckpt_result last;
  CHECK_EQ(ckpt_last_result(&last), 0);
  CHECK_EQ(last.error, 0);
  CHECK(last.gate_seconds >= 0 && last.gate_seconds < 1, "gate closed soon after the signal");
  fprintf(stderr, "signal -> gate closed: %.3f ms\n", last.gate_seconds * 1e3);

  kill(getpid(), SIGUSR1); /* while paused: refused (logged), stays paused */
  usleep(100000);
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);
  CHECK_EQ(program_handler_calls, 2);

  CHECK_EQ(ckpt_request_resume(), 0);
  uint64_t offset;
  CHECK_EQ(fake_host_verify(&host, &offset), 0);
  ckpt_shutdown();
  struct sigaction now;
  sigaction(SIGUSR1, NULL, &now);
  CHECK(now.sa_handler == program_handler, "the program's handler is back");
  CHECK_EQ(host.violations, 0);
  test_remove_run_dir(dir);
  return 0;
}
