/* Description: only the owner's uid or root may use the control socket. As root: a process of
 * uid nobody is refused, first by the 0700 run dir (cudaw-ctl exit 5), then, with the
 * permissions loosened, by the SO_PEERCRED check in the server; root may control a process
 * of another uid. Skipped (77) when not root. */
#define _GNU_SOURCE
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fake_host.h"
#include "test.h"

static struct fake_host host;

static void become(const struct passwd *pw) {
  if (setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0) _exit(100);
}

/* Run `ctl status <pid>` as `pw`; returns its exit code. */
static int ctl_as(const struct passwd *pw, const char *ctl, const char *pid) {
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    become(pw);
    execl(ctl, ctl, "status", pid, (char *)NULL);
    _exit(127);
  }
  int status;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(int argc, char **argv) {
  if (argc < 2) test_fail("usage: %s <cudaw-ctl>", argv[0]);
  if (geteuid() != 0) test_skip("needs root to setuid to nobody");
  struct passwd *pw = getpwnam("nobody");
  if (!pw) test_skip("no user nobody");
  const char *ctl = argv[1];
  char dir[64], pid[16], path[100];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);
  fake_host_init(&host, 1);
  fake_host_add_region(&host, 4096, 0, 1);
  /* 1: root controls a process of uid nobody */
  char nobody_dir[96];
  snprintf(nobody_dir, sizeof nobody_dir, "%s/nobody", dir);
  CHECK_EQ(chmod(dir, 0711), 0); /* nobody must reach its own dir inside ours */
  CHECK_EQ(mkdir(nobody_dir, 0700), 0);
  CHECK_EQ(chown(nobody_dir, pw->pw_uid, pw->pw_gid), 0);
  int ready[2];
  CHECK_EQ(pipe(ready), 0);
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    become(pw);
    setenv("CUDAW_RUN_DIR", nobody_dir, 1);
    struct fake_host h;
    fake_host_init(&h, 1);
    fake_host_add_region(&h, 4096, 0, 2);
    if (ckpt_init(&fake_host_ops, &h) != 0) _exit(5);
    char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(6);
    pause(); /* until killed */
    _exit(0);
  }
  char byte;
  close(ready[1]);
  CHECK(read(ready[0], &byte, 1) == 1, "nobody's process started");
  char child_pid[16], out[4096];
  snprintf(child_pid, sizeof child_pid, "%ld", (long)child);
  setenv("CUDAW_RUN_DIR", nobody_dir, 1);
  int code = test_run_ctl(out, sizeof out, ctl, "status", child_pid, NULL);
  kill(child, SIGKILL);
  int status;
  waitpid(child, &status, 0);
  CHECK_EQ(code, 0);
  CHECK(strstr(out, "running") != NULL, "root sees nobody's process");

  setenv("CUDAW_RUN_DIR", dir, 1);
  CHECK_EQ(chmod(dir, 0700), 0);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);
  snprintf(pid, sizeof pid, "%ld", (long)getpid());
  snprintf(path, sizeof path, "%s/%s.sock", dir, pid);
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "socket mode 0600");
  CHECK(stat(dir, &st) == 0 && (st.st_mode & 0777) == 0700, "run dir mode 0700");

  /* 2: the run dir keeps nobody out */
  CHECK_EQ(ctl_as(pw, ctl, pid), 5);

  /* 3: with the file permissions opened, the server's SO_PEERCRED check refuses */
  CHECK_EQ(chmod(dir, 0755), 0);
  CHECK_EQ(chmod(path, 0666), 0);
  fflush(NULL);
  child = fork();
  if (child == 0) {
    become(pw);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) _exit(2);
    if (send(fd, "checkpoint\n", 11, MSG_NOSIGNAL) != 11) _exit(3);
    char reply[512] = "";
    ssize_t n = read(fd, reply, sizeof reply - 1);
    if (n > 0) reply[n] = '\0';
    printf("reply to nobody: %s", reply);
    _exit(strstr(reply, "\"error\":\"permission\"") && strstr(reply, "refused") ? 0 : 4);
  }
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) test_fail("raw client as nobody: status 0x%x", status);
  CHECK_EQ(ctl_as(pw, ctl, pid), 5);
  CHECK_EQ(ckpt_state(), CKPT_RUNNING);

  ckpt_shutdown();
  rmdir(nobody_dir);
  char stale[160];
  snprintf(stale, sizeof stale, "%s/%s.sock", nobody_dir, child_pid);
  unlink(stale);
  rmdir(nobody_dir);
  test_remove_run_dir(dir);
  return 0;
}
