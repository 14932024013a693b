/* Helpers for the tests that talk to cudawd themselves: start processes, connect to a run dir's
 * cudawd.sock, read its snapshot. Header-only (static), one copy per test program, which
 * defines _GNU_SOURCE before any include. */
#ifndef CUDAW_TESTS_SCHED_CLIENT_H
#define CUDAW_TESTS_SCHED_CLIENT_H

#include <dirent.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sched_proto.h"
#include "test.h"

static inline double client_now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline void client_sleep_ms(long ms)
{
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* argv[0] run with standard error (and output, when both is set) appended to log. */
static inline pid_t client_spawn(const char *const argv[], const char *log, bool both)
{
  pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    int fd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0600) : -1;
    if (fd >= 0) dup2(fd, 2);
    if (fd >= 0 && both) dup2(fd, 1);
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  return pid;
}

/* A connection to <dir>/cudawd.sock with 5 s timeouts, or -1. */
static inline int client_connect(const char *dir)
{
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%s", dir, SCHED_SOCKET_NAME);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct timeval timeout = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static inline bool client_send(int fd, enum sched_msg_type type, int value)
{
  struct sched_msg msg = {.version = SCHED_PROTO_VERSION, .type = type, .value = value};
  return send(fd, &msg, sizeof msg, MSG_NOSIGNAL) == (ssize_t)sizeof msg;
}

/* A fake program's message on fd (its pid ours); SCHED_DEVICE names the emulated device. */
static inline bool client_say(int fd, enum sched_msg_type type, int value, int status,
                              uint64_t bytes)
{
  struct sched_msg msg = {.version = SCHED_PROTO_VERSION, .type = type, .pid = getpid(),
                          .value = value, .status = status, .bytes = bytes};
  if (type == SCHED_DEVICE) memcpy(msg.key, "63756461772d656d752d646576696365", 32);
  return send(fd, &msg, sizeof msg, MSG_NOSIGNAL) == (ssize_t)sizeof msg;
}

/* Receive one message on fd within timeout_ms, with the descriptor it carried into *passed (-1:
 * none; NULL: closed); false on timeout or at the connection's end. */
static inline bool client_receive(int fd, struct sched_msg *msg, int timeout_ms, int *passed)
{
  if (passed) *passed = -1;
  struct pollfd ready = {.fd = fd, .events = POLLIN};
  if (poll(&ready, 1, timeout_ms > 0 ? timeout_ms : 0) != 1) return false;
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } control;
  struct iovec iov = {msg, sizeof *msg};
  struct msghdr hdr = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = sizeof control.buf};
  ssize_t n = recvmsg(fd, &hdr, MSG_CMSG_CLOEXEC);
  int carried = -1;
  for (struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&hdr) : NULL; c; c = CMSG_NXTHDR(&hdr, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      memcpy(&carried, CMSG_DATA(c), sizeof carried);
  if (passed) *passed = carried;
  else if (carried >= 0) close(carried);
  return n == (ssize_t)sizeof *msg;
}

/* The next order cudawd sends on fd within `seconds` (what else it sends is skipped), into
 * *order (may be NULL) with the descriptor it carried into *passed (NULL: closed): its type, 0
 * if none came, -1 when the connection ended. */
static inline int client_next_order(int fd, double seconds, struct sched_msg *order, int *passed)
{
  struct sched_msg msg;
  if (!order) order = &msg;
  for (double end = client_now() + seconds;;) {
    int left = (int)((end - client_now()) * 1000), carried;
    if (left <= 0) return 0;
    if (!client_receive(fd, order, left, &carried)) {
      struct pollfd ready = {.fd = fd, .events = POLLIN};
      return poll(&ready, 1, 0) == 1 ? -1 : 0; /* readable yet nothing whole: the end */
    }
    uint32_t t = order->type;
    if (t == SCHED_CHECKPOINT || t == SCHED_RESUME || t == SCHED_EXCHANGE || t == SCHED_SPILL ||
        t == SCHED_UNSPILL) {
      if (passed) *passed = carried;
      else if (carried >= 0) close(carried);
      return (int)t;
    }
    if (carried >= 0) close(carried);
  }
}

/* The cudawd of dir answered with its whole snapshot. */
static inline bool client_snapshot(const char *dir, struct sched_snapshot *out)
{
  int fd = client_connect(dir);
  if (fd < 0) return false;
  bool ok = client_send(fd, SCHED_STATUS, 0) &&
            recv(fd, out, sizeof *out, 0) == (ssize_t)sizeof *out;
  close(fd);
  return ok;
}

static inline bool client_wait_up(const char *dir, double seconds)
{
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  bool up = false;
  for (double end = client_now() + seconds; !up && client_now() < end;) {
    up = client_snapshot(dir, s);
    if (!up) client_sleep_ms(25);
  }
  free(s);
  return up;
}

/* A peer (a process of its own: cudawd knows programs by pid) that joins the cudawd of dir and
 * says it holds `bytes` on the emulated device (16 GiB), demand for the pool, until it is
 * killed. Its pid. */
static inline pid_t client_fake_program(const char *dir, uint64_t bytes)
{
  pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid > 0) return pid;
  int fd = client_connect(dir);
  if (fd < 0) _exit(1);
  struct sched_msg msg = {.version = SCHED_PROTO_VERSION, .type = SCHED_HELLO, .pid = getpid()};
  bool sent = send(fd, &msg, sizeof msg, MSG_NOSIGNAL) == (ssize_t)sizeof msg;
  msg = (struct sched_msg){.version = SCHED_PROTO_VERSION, .type = SCHED_DEVICE,
                           .pid = getpid(), .bytes = 16ull << 30};
  memcpy(msg.key, "63756461772d656d752d646576696365", 32); /* the emulated device's UUID */
  sent = sent && send(fd, &msg, sizeof msg, MSG_NOSIGNAL) == (ssize_t)sizeof msg;
  msg = (struct sched_msg){.version = SCHED_PROTO_VERSION, .type = SCHED_USAGE, .pid = getpid(),
                           .bytes = bytes};
  sent = sent && send(fd, &msg, sizeof msg, MSG_NOSIGNAL) == (ssize_t)sizeof msg;
  if (!sent) _exit(1);
  for (;;) pause();
}

/* The pages the kernel holds for cudawd pid's host-memory pool, seen from outside: its memfd's
 * blocks through /proc/<pid>/fd (not cudawd's own word). -1: it holds no pool file. */
static inline long long client_pool_bytes(pid_t pid)
{
  char dir[64], link[340], target[256];
  snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
  DIR *d = opendir(dir);
  long long bytes = -1;
  for (struct dirent *e; d && (e = readdir(d));) {
    snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    struct stat st;
    if (strstr(target, "memfd:cudawd-pool") && stat(link, &st) == 0)
      bytes = (long long)st.st_blocks * 512;
  }
  if (d) closedir(d);
  return bytes;
}

static inline bool client_file_has(const char *path, const char *text)
{
  FILE *f = fopen(path, "r");
  char line[1024];
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, text) != NULL;
  if (f) fclose(f);
  return found;
}

/* Lines of path that hold text (0 when it cannot be read). */
static inline int client_count_lines(const char *path, const char *text)
{
  FILE *f = fopen(path, "r");
  char line[1024];
  int count = 0;
  while (f && fgets(line, sizeof line, f)) count += strstr(line, text) != NULL;
  if (f) fclose(f);
  return count;
}

/* count sched_share_job processes of `bytes` each, `rounds` rounds of pieces, into jobs[];
 * job i logs (both outputs) to <run_dir>/job<i>.log. */
static inline void client_start_jobs(const char *job_path, const char *run_dir, pid_t *jobs,
                                     int count, uint64_t bytes, const char *rounds)
{
  for (int i = 0; i < count; i++) {
    char log[160], size[32];
    snprintf(log, sizeof log, "%s/job%d.log", run_dir, i);
    snprintf(size, sizeof size, "%llu", (unsigned long long)bytes);
    const char *argv[] = {job_path, size, rounds, "pieces", NULL};
    jobs[i] = client_spawn(argv, log, true);
  }
}

/* Whether every job still in jobs[] (0: gone) has exited 0; a job that failed fails the test.
 * Exited jobs are set to 0. */
static inline bool client_jobs_done(pid_t *jobs, int count, const char *run_dir)
{
  bool all = true;
  for (int i = 0; i < count; i++) {
    if (!jobs[i]) continue;
    int status;
    if (waitpid(jobs[i], &status, WNOHANG) != jobs[i]) {
      all = false;
      continue;
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "job %d (pid %d) failed (status 0x%x): see %s/job%d.log", i, jobs[i], status, run_dir, i);
    jobs[i] = 0;
  }
  return all;
}

/* A fake /proc/meminfo for cudawd (CUDAWD_MEMINFO) at path: MemTotal 8 GiB (cudawd keeps 1 GiB
 * free) and MemAvailable `available` bytes, replaced at once (a reader never sees half a file). */
static inline void client_write_meminfo(const char *path, uint64_t available)
{
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  CHECK(f != NULL);
  fprintf(f, "MemTotal:       %llu kB\nMemAvailable:   %llu kB\n", 8ull << 20,
          (unsigned long long)(available >> 10));
  fclose(f);
  CHECK(rename(tmp, path) == 0);
}

/* At exit: kill -9 the daemon and the jobs still there (0 or less: none). */
static inline void client_kill_all(pid_t daemon, const pid_t *jobs, int count)
{
  if (daemon > 0) kill(daemon, SIGKILL);
  for (int i = 0; i < count; i++)
    if (jobs[i] > 0) kill(jobs[i], SIGKILL);
}

#endif
