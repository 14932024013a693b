/* Description: the control socket driven by a real cudaw-ctl process: status, checkpoint and
 * resume (text and --json), and its exit codes for wrong state (including a second controller
 * while a checkpoint runs), no such process, not a cudaw process and bad usage. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_host.h"
#include "test.h"

static struct fake_host host;

int main(int argc, char **argv) {
  if (argc < 2) test_fail("usage: %s <cudaw-ctl>", argv[0]);
  const char *ctl = argv[1];
  char dir[64], out[8192], pid[16], other[16];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);
  setenv("CUDAW_CKPT_STAGING", "64K", 1);
  fake_host_init(&host, 1);
  for (int i = 0; i < 5; i++) fake_host_add_region(&host, 200000 + i, 0, i);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);
  snprintf(pid, sizeof pid, "%ld", (long)getpid());

  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "status", pid, NULL), 0);
  CHECK(strstr(out, "running") != NULL, "status says running");
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "--json", "status", pid, NULL), 0);
  CHECK(strstr(out, "\"state\":\"running\"") && strstr(out, "\"held_bytes\":["), "json status");

  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "resume", pid, NULL), 6);
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "checkpoint", pid, NULL), 0);
  CHECK(strstr(out, "paused") && strstr(out, "GB/s") && strstr(out, "5 regions"), "checkpoint report");
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "checkpoint", pid, NULL), 6);
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "status", pid, NULL), 0);
  CHECK(strstr(out, "paused") && strstr(out, "last checkpoint"), "status after checkpoint");
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "--json", "resume", pid, NULL), 0);
  CHECK(strstr(out, "\"ok\":true") && strstr(out, "\"op\":\"resume\"") &&
        strstr(out, "\"bytes\":1000010"), "json resume");
  CHECK_EQ(ckpt_state(), CKPT_RUNNING);
  uint64_t offset;
  CHECK_EQ(fake_host_verify(&host, &offset), 0);

  /* A second controller while a checkpoint runs gets "wrong state"; status still answers. */
  host.drain_block = true;
  host.drain_entered = false;
  fflush(NULL);
  pid_t first = fork();
  if (first == 0) {
    int null = open("/dev/null", 1);
    dup2(null, 1);
    execl(ctl, ctl, "checkpoint", pid, (char *)NULL);
    _exit(127);
  }
  CHECK(fake_host_wait_drain_entered(&host, 10), "first checkpoint running");
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "checkpoint", pid, NULL), 6);
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "resume", pid, NULL), 6);
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "status", pid, NULL), 0);
  CHECK(strstr(out, "pausing") != NULL, "status during the checkpoint");
  fake_host_unblock_drain(&host);
  int status;
  waitpid(first, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "first controller succeeded");
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "resume", pid, NULL), 0);

  /* no such process: a child that has exited and been reaped */
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, &status, 0);
  snprintf(other, sizeof other, "%ld", (long)gone);
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "status", other, NULL), 3);
  /* alive but not a cudaw process: our parent has no socket here */
  snprintf(other, sizeof other, "%ld", (long)getppid());
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "checkpoint", other, NULL), 4);
  /* usage */
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "pause", pid, NULL), 2);
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "status", "12x", NULL), 2);
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "--help", NULL), 0);
  CHECK(strstr(out, "exit codes") && strstr(out, "cudaw options"), "help shows exit codes, points to cudaw options");
  CHECK(!strstr(out, "CUDAW_CKPT_STAGING"), "help does not repeat the options table");

  ckpt_shutdown();
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "status", pid, NULL), 4); /* socket gone */
  CHECK_EQ(host.violations, 0);
  test_remove_run_dir(dir);
  return 0;
}
