/* Description: the run dir and signals under abuse (issue 10 hardening), each case in a child
 * process over the fake host: CUDAW_RUN_DIR world-writable or a planted symlink (refused with a
 * reason, no socket made there, the link's target untouched); SIGTERM while paused (the process
 * still dies of SIGTERM, and its socket is gone: before the fix it stayed); SIGKILL while paused
 * (the socket stays, `cudaw-ctl list` removes it); a storm of 100 SIGUSR1 while API calls run,
 * and 20 more during a checkpoint (one pause, the rest refused, data intact, program runs on). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_host.h"
#include "test.h"

static struct fake_host host;
static const char *ctl;

static void sleep_ms(long ms)
{
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static int socket_exists(const char *dir, pid_t pid)
{
  char path[256];
  struct stat st;
  snprintf(path, sizeof path, "%s/%ld.sock", dir, (long)pid);
  return lstat(path, &st) == 0;
}

/* The fake host's operations, with the module's lines about its socket kept. */
static struct ckpt_host_ops ops;
static char socket_log[512];

static void record_log(void *ctx, int level, const char *message)
{
  if (strstr(message, "control socket")) snprintf(socket_log, sizeof socket_log, "%s", message);
  fake_host_ops.log(ctx, level, message);
}

static void start_module(void)
{
  setenv("CUDAW_CKPT_STAGING", "64K", 1);
  fake_host_init(&host, 1);
  for (int i = 0; i < 3; i++) fake_host_add_region(&host, 150000 + i, 0, i);
  ops = fake_host_ops;
  ops.log = record_log;
  CHECK_EQ(ckpt_init(&ops, &host), 0);
}

/* Run fn in a child; returns its wait status. */
static int in_child(void (*fn)(const char *), const char *arg)
{
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    fn(arg);
    fflush(NULL);
    _exit(0);
  }
  int status;
  waitpid(pid, &status, 0);
  return status;
}

static void refused_dir(const char *dir)
{
  setenv("CUDAW_RUN_DIR", dir, 1);
  setenv("CUDAW_SIGNAL", "none", 1);
  start_module();
  CHECK(!socket_exists(dir, getpid()), "a socket was made in %s", dir);
  CHECK(strstr(socket_log, "control socket disabled") &&
            (strstr(socket_log, "writable by") || strstr(socket_log, "symbolic link")),
        "log: %s", socket_log);
  printf("  %s\n", socket_log);
  ckpt_shutdown();
}

static void run_dirs(const char *base)
{
  char open_dir[256], target[256], link[256];
  snprintf(open_dir, sizeof open_dir, "%s/world", base);
  CHECK(mkdir(open_dir, 0700) == 0 && chmod(open_dir, 0777) == 0);
  int status = in_child(refused_dir, open_dir);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "world-writable run dir case failed");
  snprintf(target, sizeof target, "%s/target", base);
  snprintf(link, sizeof link, "%s/planted", base);
  CHECK(mkdir(target, 0700) == 0 && symlink(target, link) == 0);
  status = in_child(refused_dir, link);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "symlink run dir case failed");
  struct stat st;
  char inside[300];
  snprintf(inside, sizeof inside, "%s/.", target);
  CHECK(stat(inside, &st) == 0 && st.st_nlink == 2, "the link's target was written to");
  printf("run dir: world-writable and planted symlink refused, nothing created\n");
}

static void pause_and_wait(const char *dir)
{
  setenv("CUDAW_RUN_DIR", dir, 1);
  setenv("CUDAW_SIGNAL", "none", 1);
  start_module();
  CHECK_EQ(ckpt_request_checkpoint(), 0);
  printf("  child %ld paused\n", (long)getpid());
  fflush(stdout);
  for (;;) pause();
}

/* Fork a paused child, kill it with sig; returns the child's pid after reaping it. */
static pid_t kill_paused(const char *dir, int sig)
{
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) pause_and_wait(dir);
  for (int i = 0; i < 500 && !socket_exists(dir, pid); i++) sleep_ms(10);
  CHECK(socket_exists(dir, pid), "child socket never appeared");
  sleep_ms(200); /* the checkpoint is done well within this on the fake host */
  kill(pid, sig);
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == sig, "child did not die of signal %d (%#x)",
        sig, status);
  return pid;
}

static void termination(const char *dir)
{
  pid_t pid = kill_paused(dir, SIGTERM);
  CHECK(!socket_exists(dir, pid), "SIGTERM while paused left %s/%ld.sock behind", dir, (long)pid);
  pid = kill_paused(dir, SIGKILL);
  CHECK(socket_exists(dir, pid), "expected SIGKILL to leave the socket");
  char out[4096];
  setenv("CUDAW_RUN_DIR", dir, 1);
  test_run_ctl(out, sizeof out, ctl, "list", NULL);
  CHECK(!socket_exists(dir, pid), "cudaw-ctl list left the dead process's socket");
  printf("termination: SIGTERM while paused leaves nothing; after SIGKILL, cudaw-ctl list "
         "removes the socket\n");
}

static atomic_int stop_calls;
static atomic_long calls_made;

static void *api_caller(void *unused)
{
  (void)unused;
  while (!atomic_load(&stop_calls)) {
    fake_host_call_enter(&host);
    atomic_fetch_add(&calls_made, 1);
    fake_host_call_exit(&host);
  }
  return NULL;
}

static void storm(const char *dir)
{
  setenv("CUDAW_RUN_DIR", dir, 1);
  setenv("CUDAW_SIGNAL", "USR1", 1);
  start_module();
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, api_caller, NULL) == 0);
  for (int i = 0; i < 100; i++) {
    kill(getpid(), SIGUSR1);
    if (i % 10 == 0) sleep_ms(1);
  }
  CHECK(test_wait_state(CKPT_PAUSED, 10), "not paused after 100 SIGUSR1");
  sleep_ms(100);
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);
  CHECK_EQ(ckpt_request_resume(), 0);
  long before = atomic_load(&calls_made);
  sleep_ms(50);
  CHECK(atomic_load(&calls_made) > before, "API calls do not run after the resume");
  uint64_t offset;
  CHECK_EQ(fake_host_verify(&host, &offset), 0);

  /* 20 more while a checkpoint is under way. */
  host.drain_block = true;
  host.drain_entered = false;
  kill(getpid(), SIGUSR1);
  CHECK(fake_host_wait_drain_entered(&host, 10), "checkpoint did not start");
  for (int i = 0; i < 20; i++) kill(getpid(), SIGUSR1);
  fake_host_unblock_drain(&host);
  CHECK(test_wait_state(CKPT_PAUSED, 10), "not paused");
  sleep_ms(100);
  CHECK_EQ(ckpt_state(), CKPT_PAUSED);
  CHECK_EQ(ckpt_request_resume(), 0);
  CHECK_EQ(fake_host_verify(&host, &offset), 0);
  atomic_store(&stop_calls, 1);
  pthread_join(thread, NULL);
  ckpt_shutdown();
  printf("signal storm: 100 SIGUSR1 while calls ran, then 20 during a checkpoint: one pause "
         "each, data intact, %ld calls made\n", atomic_load(&calls_made));
}

int main(int argc, char **argv)
{
  if (argc < 2) test_fail("usage: %s <cudaw-ctl>", argv[0]);
  ctl = argv[1];
  char base[64];
  test_make_run_dir(base, sizeof base);
  run_dirs(base);
  char dir[128];
  snprintf(dir, sizeof dir, "%s/private", base);
  CHECK(mkdir(dir, 0700) == 0);
  termination(dir);
  int status = in_child(storm, dir);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "signal storm case failed");
  char cmd[256];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
  CHECK(system(cmd) == 0);
  printf("run dir and signals: ok\n");
  return 0;
}
