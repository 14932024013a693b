/* Description: the control socket under abuse (issue 10 hardening): 1,000 connections of random
 * garbage (NUL bytes included), a 10 MB line, 60 half-written requests held open while other
 * clients ask for status and a checkpoint (neither may wait for them: before the fix each held
 * the single control thread for 2 s), and 200 concurrent clients. Every well-formed request gets
 * its answer, every bad one a bad_request reply, and the module still works afterwards. Also the
 * group pause's words (hold, drain, unhold, resume hold): malformed ones are bad requests, each is
 * refused in the wrong state, and a hold nobody ends reopens by itself when its lease runs out.
 * Prints its figures. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "fake_host.h"
#include "test.h"

static struct fake_host host;
static char socket_path[108];

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int connect_socket(void)
{
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0, "socket: %s", strerror(errno));
  CHECK(connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0, "connect: %s", strerror(errno));
  struct timeval timeout = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return fd;
}

/* Read the reply until the server closes; returns its length (0: closed without a reply). */
static size_t read_reply(int fd, char *reply, size_t len)
{
  size_t used = 0;
  while (used + 1 < len) {
    ssize_t n = recv(fd, reply + used, len - 1 - used, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    used += (size_t)n;
  }
  reply[used] = '\0';
  return used;
}

static size_t ask(const void *request, size_t request_len, char *reply, size_t len)
{
  int fd = connect_socket();
  size_t sent = 0;
  while (sent < request_len) {
    ssize_t n = send(fd, (const char *)request + sent, request_len - sent, MSG_NOSIGNAL);
    if (n <= 0) break; /* the server may refuse before reading everything */
    sent += (size_t)n;
  }
  shutdown(fd, SHUT_WR);
  size_t got = read_reply(fd, reply, len);
  close(fd);
  return got;
}

static void expect_status(const char *when)
{
  char reply[4096];
  double t0 = now();
  ask("status\n", 7, reply, sizeof reply);
  CHECK(strstr(reply, "\"ok\":true"), "status %s: '%s'", when, reply);
  CHECK(now() - t0 < 1.0, "status %s took %.3f s", when, now() - t0);
}

static void garbage(void)
{
  unsigned seed = 12345;
  char request[600], reply[4096];
  int answered = 0;
  double t0 = now();
  for (int i = 0; i < 1000; i++) {
    size_t len = (size_t)(rand_r(&seed) % sizeof request);
    for (size_t k = 0; k < len; k++) request[k] = (char)rand_r(&seed);
    if (i % 3 == 0 && len) request[len - 1] = '\n';
    if (ask(request, len, reply, sizeof reply) && strstr(reply, "\"error\":\"bad_request\""))
      answered++;
  }
  /* The empty request and a few that never send a byte close without a line: still refused. */
  CHECK(answered >= 990, "only %d of 1000 garbage requests got a bad_request reply", answered);
  expect_status("after garbage");
  printf("garbage: 1000 random requests, %d refused with bad_request, %.3f s\n", answered,
         now() - t0);
}

static void huge_line(void)
{
  size_t len = 10u << 20;
  char *request = malloc(len), reply[4096];
  CHECK(request != NULL);
  memset(request, 's', len - 1);
  request[len - 1] = '\n';
  double t0 = now();
  ask(request, len, reply, sizeof reply);
  free(request);
  CHECK(strstr(reply, "too long"), "10 MB line: '%s'", reply);
  expect_status("after a 10 MB line");
  printf("10 MB line: refused (request line too long) in %.3f s\n", now() - t0);
}

static void half_written(void)
{
  enum { HELD = 60 };
  int held[HELD];
  for (int i = 0; i < HELD; i++) {
    held[i] = connect_socket();
    CHECK(send(held[i], "stat", 4, MSG_NOSIGNAL) == 4);
  }
  double t0 = now();
  expect_status("with 60 half-written requests open");
  double status_s = now() - t0;
  char reply[4096];
  t0 = now();
  ask("checkpoint\n", 11, reply, sizeof reply);
  double pause_s = now() - t0;
  CHECK(strstr(reply, "\"ok\":true") && strstr(reply, "paused"), "checkpoint: '%s'", reply);
  CHECK(pause_s < 1.0, "the checkpoint waited %.3f s behind half-written requests", pause_s);
  ask("resume\n", 7, reply, sizeof reply);
  CHECK(strstr(reply, "\"ok\":true"), "resume: '%s'", reply);
  /* The held ones are answered once their time is up. */
  int timed_out = 0;
  for (int i = 0; i < HELD; i++) {
    if (read_reply(held[i], reply, sizeof reply) && strstr(reply, "within 2 s")) timed_out++;
    close(held[i]);
  }
  CHECK(timed_out == HELD, "%d of %d held requests got their timeout reply", timed_out, HELD);
  printf("60 half-written requests held open: status in %.3f s, checkpoint in %.3f s; each "
         "held one refused after 2 s\n", status_s, pause_s);
}

static void *client(void *arg)
{
  char reply[4096];
  ask("status\n", 7, reply, sizeof reply);
  *(int *)arg = strstr(reply, "\"ok\":true") != NULL;
  return NULL;
}

static void concurrent(void)
{
  enum { CLIENTS = 200 };
  pthread_t threads[CLIENTS];
  int ok[CLIENTS], good = 0;
  double t0 = now();
  for (int i = 0; i < CLIENTS; i++) CHECK(pthread_create(&threads[i], NULL, client, &ok[i]) == 0);
  for (int i = 0; i < CLIENTS; i++) {
    pthread_join(threads[i], NULL);
    good += ok[i];
  }
  CHECK(good == CLIENTS, "%d of %d concurrent clients got their status", good, CLIENTS);
  printf("200 concurrent clients: all answered in %.3f s\n", now() - t0);
}

/* One request line; the reply must contain every one of `expect` (NULL-terminated). */
static void expect_reply(const char *request, ...)
{
  char line[256], reply[4096];
  int n = snprintf(line, sizeof line, "%s\n", request);
  ask(line, (size_t)n, reply, sizeof reply);
  va_list args;
  va_start(args, request);
  for (const char *want; (want = va_arg(args, const char *)) != NULL;)
    CHECK(strstr(reply, want), "'%s': expected %s in '%s'", request, want, reply);
  va_end(args);
}

static void group_steps(void)
{
  static const char *const malformed[] = {
      "hold lease=0", "hold lease=-5", "hold lease=99999999999", "hold lease=", "hold  lease=5",
      "hold lease=5x", "drain wait=", "drain 100", "unhold now", "resume hold lease=abc",
      "resume hold=1", "holdx", "drain wait=3600001"};
  for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++)
    expect_reply(malformed[i], "\"error\":\"bad_request\"", NULL);
  expect_reply("drain wait=10", "\"error\":\"wrong_state\"", "not held", NULL);
  expect_reply("unhold", "\"error\":\"wrong_state\"", "not held", NULL);
  expect_reply("resume hold", "\"error\":\"wrong_state\"", "not paused", NULL);
  expect_reply("hold lease=5000", "\"ok\":true", "\"state\":\"held\"", NULL);
  expect_reply("hold", "\"error\":\"wrong_state\"", "already held", NULL);
  expect_reply("resume", "\"error\":\"wrong_state\"", NULL);
  expect_reply("status", "\"state\":\"held\"", NULL);
  expect_reply("drain wait=1000", "\"ok\":true", "\"op\":\"drain\"", "held", NULL);
  expect_reply("checkpoint", "\"ok\":true", "\"state\":\"paused\"", NULL);
  expect_reply("hold", "\"error\":\"wrong_state\"", NULL);
  expect_reply("resume hold lease=5000", "\"ok\":true", "\"state\":\"held\"", NULL);
  expect_reply("unhold", "\"ok\":true", "\"state\":\"running\"", NULL);
  /* status's last transition stays the resume, not the unhold */
  expect_reply("status", "\"last_op\":\"resume\"", NULL);
  double t0 = now();
  expect_reply("hold lease=200", "\"ok\":true", NULL);
  while (ckpt_state() != CKPT_RUNNING) {
    CHECK(now() - t0 < 5, "the lease did not run out");
    struct timespec pause = {0, 5000000};
    nanosleep(&pause, NULL);
  }
  double lease_s = now() - t0;
  CHECK(lease_s >= 0.19, "reopened after %.3f s, before the lease ran out", lease_s);
  expect_status("after a lease ran out");
  printf("group steps: %zu malformed refused, states enforced, a 200 ms lease reopened after "
         "%.3f s\n", sizeof malformed / sizeof *malformed, lease_s);
}

int main(int argc, char **argv)
{
  const char *only = argc > 1 ? argv[1] : NULL; /* one case: garbage, huge, held, concurrent */
  signal(SIGPIPE, SIG_IGN);
  char dir[64];
  test_make_run_dir(dir, sizeof dir);
  setenv("CUDAW_SIGNAL", "none", 1);
  setenv("CUDAW_CKPT_STAGING", "64K", 1);
  fake_host_init(&host, 1);
  for (int i = 0; i < 3; i++) fake_host_add_region(&host, 100000 + i, 0, i);
  CHECK_EQ(ckpt_init(&fake_host_ops, &host), 0);
  snprintf(socket_path, sizeof socket_path, "%s/%ld.sock", dir, (long)getpid());

  if (!only || !strcmp(only, "garbage")) garbage();
  if (!only || !strcmp(only, "huge")) huge_line();
  if (!only || !strcmp(only, "held")) half_written();
  if (!only || !strcmp(only, "concurrent")) concurrent();
  if (!only || !strcmp(only, "group")) group_steps();
  uint64_t offset;
  CHECK_EQ(fake_host_verify(&host, &offset), 0);
  ckpt_shutdown();
  fake_host_free(&host);
  test_remove_run_dir(dir);
  printf("control abuse: ok\n");
  return 0;
}
