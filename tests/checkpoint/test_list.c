/* Description: cudaw-ctl list shows every cudaw process of the run dir with its state, as text
 * and as a JSON array, here two: this one (running) and a child (paused). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_host.h"
#include "test.h"

int main(int argc, char **argv) {
  if (argc < 2) test_fail("usage: %s <cudaw-ctl>", argv[0]);
  const char *ctl = argv[1];
  char dir[64], out[8192];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);

  int ready[2];
  CHECK_EQ(pipe(ready), 0);
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    static struct fake_host h;
    fake_host_init(&h, 1);
    fake_host_add_region(&h, 1 << 16, 0, 3);
    if (ckpt_init(&fake_host_ops, &h) != 0 || ckpt_request_checkpoint() != 0) _exit(5);
    char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(6);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char byte;
  CHECK(read(ready[0], &byte, 1) == 1, "child paused");

  struct fake_host host;
  fake_host_init(&host, 1);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);

  char me[64], them[64];
  snprintf(me, sizeof me, "%-8ld running", (long)getpid());
  snprintf(them, sizeof them, "%-8ld paused", (long)child);
  int code = test_run_ctl(out, sizeof out, ctl, "list", NULL);
  CHECK_EQ(code, 0);
  CHECK(strstr(out, me) && strstr(out, them), "both processes listed with their state");

  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "--json", "list", NULL), 0);
  snprintf(me, sizeof me, "\"pid\":%ld,", (long)getpid());
  snprintf(them, sizeof them, "\"pid\":%ld,", (long)child);
  CHECK(out[0] == '[' && strstr(out, me) && strstr(out, them) && strstr(out, "\"state\":\"paused\""),
        "json list");

  kill(child, SIGTERM);
  int status;
  waitpid(child, &status, 0);
  ckpt_shutdown();
  test_remove_run_dir(dir);
  return 0;
}
