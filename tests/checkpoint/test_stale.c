/* Description: control sockets do not outlive their process: removed at exit (atexit), and a
 * socket left by a killed process is removed by the next process that starts, by cudaw-ctl list,
 * and by cudaw-ctl status when its pid now belongs to a process that is not listening. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_host.h"
#include "test.h"

static bool exists(const char *dir, long pid) {
  char path[128];
  struct stat st;
  snprintf(path, sizeof path, "%s/%ld.sock", dir, pid);
  return stat(path, &st) == 0;
}

/* A child that starts the module; it exits normally or is killed. Returns its pid (reaped). */
static pid_t child_process(bool killed) {
  int ready[2];
  if (pipe(ready) != 0) test_fail("pipe");
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    static struct fake_host h;
    fake_host_init(&h, 1);
    if (ckpt_init(&fake_host_ops, &h) != 0) _exit(5);
    char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(6);
    if (killed) pause();
    exit(0); /* atexit runs */
  }
  close(ready[1]);
  char byte;
  if (read(ready[0], &byte, 1) != 1) test_fail("child did not start");
  close(ready[0]);
  if (killed) kill(child, SIGKILL);
  int status;
  waitpid(child, &status, 0);
  return child;
}

int main(int argc, char **argv) {
  if (argc < 2) test_fail("usage: %s <cudaw-ctl>", argv[0]);
  const char *ctl = argv[1];
  char dir[64], out[4096];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);

  pid_t clean = child_process(false);
  CHECK(!exists(dir, clean), "socket removed at exit");
  pid_t killed = child_process(true);
  CHECK(exists(dir, killed), "a killed process leaves its socket");

  /* the next process to start cleans it */
  struct fake_host host;
  fake_host_init(&host, 1);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);
  CHECK(!exists(dir, killed), "stale socket removed by ckpt_init");
  CHECK(exists(dir, getpid()), "our socket exists");

  /* cudaw-ctl list cleans too, and lists only live processes */
  killed = child_process(true);
  CHECK(exists(dir, killed), "another stale socket");
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "list", NULL), 0);
  CHECK(!exists(dir, killed), "stale socket removed by list");
  char me[16];
  snprintf(me, sizeof me, "%ld", (long)getpid());
  CHECK(strstr(out, me) != NULL, "list shows us");

  /* a socket named for a live pid that nobody listens on (pid reused) */
  pid_t parent = getppid();
  char path[100];
  snprintf(path, sizeof path, "%s/%ld.sock", dir, (long)parent);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  CHECK_EQ(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
  close(fd);
  char parent_pid[16];
  snprintf(parent_pid, sizeof parent_pid, "%ld", (long)parent);
  CHECK_EQ(test_run_ctl(out, sizeof out, ctl, "status", parent_pid, NULL), 4);
  CHECK(!exists(dir, parent), "status removed the socket nobody listens on");

  ckpt_shutdown();
  CHECK(!exists(dir, getpid()), "shutdown removes our socket");
  test_remove_run_dir(dir);
  return 0;
}
