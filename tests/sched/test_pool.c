/* Description: cudawd's host-memory pool (--host-memory) on the emulated device (each job has its
 * own emulated memory; cudawd --device-memory 96M makes three jobs of 72 MiB take turns):
 *   used       the swapped-out jobs' images go into lent pool ranges (bytes placed > 0), every
 *              job's data is verified after its resumes, and every range comes back at the end;
 *              a job page-locks the pool one piece at a time while it computes (its debug log)
 *   keep       CUDAW_CKPT_KEEP_IMAGE=1, four jobs of 40 MiB (two resident at a time) that each
 *              keep a block unchanged: an image in the pool is dropped after the resume all the
 *              same (its range is lent to the next job; reusing it would mix two jobs' data)
 *   exhausted  a pool of 100 MiB holds one swapped-out job's image but not two: the second
 *              checkpoints the old way (fallbacks > 0) and every job still verifies its data
 *   kill       kill -9 of a swapped-out job holding a range gives the range back at once
 *   off        --host-memory off: no pool, no SCHED_POOL, the jobs share as before
 *   pages      the pool's pages in cudawd's log follow the kernel's shmem_enabled (a file the
 *              test writes: advise, then never), and a job's mapping of the pool asks for huge
 *              pages (MADV_HUGEPAGE: "hg" in its VmFlags), whatever the kernel then gives
 *   unlocked   CUDAW_CKPT_POOL_THREADS=0: every image is staged into its range, none straight
 *              in, and cudawd keeps the range lent (no take-back), every job verifies its data
 *   hostile    a message about the pool before the hello closes the connection; a peer that
 *              says it mapped the pool and lies about its memory is
 *              lent a range inside the window it mapped when swapped out, and the range comes
 *              back when it hangs up without answering
 *   usage: sched_test_pool CUDAWD CUDAW_CTL JOB MODE */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"

#define MIB (1024ull * 1024)
static const char *job_bytes = "75497472"; /* 72 MiB: one job fits at a time */
static const char *job_mode = "pieces";     /* sched_share_job's mode */
#define EMU_KEY "63756461772d656d752d646576696365" /* the emulated device's UUID, in hex */

static const char *cudawd_path, *ctl_path, *job_path;
static char run_dir[64];
static pid_t children[16];
static int child_count;

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms)
{
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

static void end_children(void)
{
  for (int i = 0; i < child_count; i++)
    if (children[i] > 0) kill(children[i], SIGKILL);
}

static pid_t spawn(const char *const argv[], const char *log)
{
  pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    if (log) {
      int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (fd >= 0) dup2(fd, 2);
    }
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  if (child_count < 16) children[child_count++] = pid;
  return pid;
}

static pid_t start_cudawd(const char *host_memory)
{
  char log[128];
  snprintf(log, sizeof log, "%s/cudawd.log", run_dir);
  const char *argv[] = {cudawd_path, "--device-memory", "96M", "--quantum", "0.5", "--min-run",
                        "0.1", "--host-memory", host_memory, "--verbose", "--gpu-list", "none",
                        NULL};
  return spawn(argv, log);
}

static pid_t start_job(const char *rounds, int index)
{
  char log[128];
  snprintf(log, sizeof log, "%s/job%d.log", run_dir, index);
  const char *argv[] = {job_path, job_bytes, rounds, job_mode, NULL};
  return spawn(argv, log);
}

static int connect_cudawd(void)
{
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%s", run_dir, SCHED_SOCKET_NAME);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0);
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static bool snapshot(struct sched_snapshot *out)
{
  int fd = connect_cudawd();
  if (fd < 0) return false;
  struct sched_msg msg = {.version = SCHED_PROTO_VERSION, .type = SCHED_STATUS};
  bool ok = send(fd, &msg, sizeof msg, MSG_NOSIGNAL) == (ssize_t)sizeof msg &&
            recv(fd, out, sizeof *out, 0) == (ssize_t)sizeof *out;
  close(fd);
  return ok;
}

static void must_snapshot(struct sched_snapshot *out)
{
  CHECK(snapshot(out), "cudawd did not answer");
}

static void wait_for_cudawd(void)
{
  struct sched_snapshot s;
  for (int i = 0; i < 200; i++) {
    if (snapshot(&s)) return;
    sleep_ms(25);
  }
  test_fail("cudawd did not answer on %s", run_dir);
}

static const struct sched_program_info *find(const struct sched_snapshot *s, pid_t pid)
{
  for (int i = 0; i < s->programs; i++)
    if (s->program[i].pid == pid && s->program[i].state != SCHED_EXITED) return &s->program[i];
  return NULL;
}

/* Wait for the jobs; each must exit 0 (its data verified after every swap). */
static void wait_jobs(pid_t *jobs, int count, double seconds)
{
  double deadline = now() + seconds;
  for (int left = count; left;) {
    CHECK(now() < deadline, "jobs did not finish within %.0f s", seconds);
    left = 0;
    for (int i = 0; i < count; i++) {
      if (!jobs[i]) continue;
      int status;
      pid_t done = waitpid(jobs[i], &status, WNOHANG);
      if (done != jobs[i]) {
        left++;
        continue;
      }
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "job %d (pid %d) failed (status 0x%x): see %s/job%d.log", i, jobs[i], status, run_dir,
            i);
      jobs[i] = 0;
    }
    sleep_ms(50);
  }
}

/* The pool's ranges all come back (within a second of the last change). */
static void check_all_back(void)
{
  struct sched_snapshot s;
  for (int i = 0; i < 40; i++) {
    must_snapshot(&s);
    if (s.pool.lent == 0 && s.pool.loans == 0) break;
    sleep_ms(50);
  }
  CHECK(s.pool.lent == 0 && s.pool.loans == 0, "%llu bytes in %d ranges still lent",
        (unsigned long long)s.pool.lent, s.pool.loans);
  CHECK_EQ(s.pool.free, s.pool.size);
}

static bool log_has(const char *name, const char *text)
{
  char path[160], line[1024];
  snprintf(path, sizeof path, "%s/%s", run_dir, name);
  FILE *f = fopen(path, "r");
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, text) != NULL;
  if (f) fclose(f);
  return found;
}

/* cudawd with a 256 MiB pool and `count` jobs of `rounds` rounds, each verifying its data, done
 * within `seconds`: the jobs took turns, images went into the pool, every range came back. */
static void run_pooled_jobs(int count, const char *rounds, double seconds,
                            struct sched_snapshot *s)
{
  start_cudawd("256M");
  wait_for_cudawd();
  pid_t jobs[8];
  CHECK(count <= 8);
  for (int i = 0; i < count; i++) jobs[i] = start_job(rounds, i);
  wait_jobs(jobs, count, seconds);
  must_snapshot(s);
  CHECK(s->device[0].swaps > 0, "no swaps: the jobs never took turns");
  CHECK(s->pool.loans_total > 0, "no range was ever lent");
  CHECK(s->pool.placed_bytes > 0, "no image bytes were placed in the pool");
  check_all_back();
  printf("%llu ranges lent, %.1f MiB of images placed, %llu swaps\n",
         (unsigned long long)s->pool.loans_total, (double)s->pool.placed_bytes / MIB,
         (unsigned long long)s->device[0].swaps);
}

static void test_used(void)
{
  setenv("CUDAW_LOG", "debug", 1); /* the pool's pace lines (below) */
  struct sched_snapshot s;
  run_pooled_jobs(3, "30", 120, &s);
  CHECK(s.pool.enabled && s.pool.size == 256 * MIB, "pool %d of %llu bytes", s.pool.enabled,
        (unsigned long long)s.pool.size);
  /* Faulted in as far as the images asked for: never more than the pool, and something. */
  CHECK(s.pool_window > 0 && s.pool_window <= s.pool.size, "window %llu of %llu",
        (unsigned long long)s.pool_window, (unsigned long long)s.pool.size);
  CHECK(s.pool.populated > 0 && s.pool.populated <= s.pool_window, "pool faulted in: %llu, "
        "window %llu", (unsigned long long)s.pool.populated, (unsigned long long)s.pool_window);
  bool said = false;
  for (int i = 0; i < 3 && !said; i++) {
    char name[32];
    snprintf(name, sizeof name, "job%d.log", i);
    said = log_has(name, "straight into cudawd's pool");
  }
  CHECK(said, "no job's checkpoint line says how much went into the pool");
  /* A job page-locks the pool one piece at a time while it computes, and with every thread
   * while it waits for its turn or is swapped out. */
  bool quiet = false, loud = false;
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "job%d.log", i);
    quiet |= log_has(name, "sched: computing: cudawd's pool is page-locked one piece at a time");
    loud |= log_has(name, "sched: not computing: cudawd's pool is page-locked by every reserve");
  }
  CHECK(quiet && loud, "the jobs' pool pace: computing said %d, not computing said %d", quiet,
        loud);
}

/* CUDAW_CKPT_POOL_THREADS=0: nothing of the pool is page-locked, so every image is staged into
 * its range with no byte straight in. The done message then says held 1, not 0, and cudawd keeps
 * the range lent until the resume: with held 0 it took the range back and lent it again under the
 * image, and the jobs found their images corrupt (H200 notebook_bench, session 23). */
static void test_unlocked(void)
{
  setenv("CUDAW_CKPT_POOL_THREADS", "0", 1);
  struct sched_snapshot s;
  run_pooled_jobs(3, "30", 120, &s);
  CHECK(!log_has("cudawd.log", "its image went elsewhere"),
        "cudawd took a range back from a checkpoint that staged its image there");
  bool said = false, staged = false, old_way = false;
  for (int i = 0; i < 3; i++) {
    char name[32];
    snprintf(name, sizeof name, "job%d.log", i);
    said |= log_has(name, "not page-locked (CUDAW_CKPT_POOL_THREADS=0)");
    staged |= log_has(name, "cudawd's host-memory pool: 0 B of ");
    old_way |= log_has(name, "cudawd's host-memory pool not used");
  }
  CHECK(said && staged && !old_way, "unlocked pool said %d, staged into the range %d, a range "
        "not used %d",
        said, staged, old_way);
}

/* Four jobs of 40 MiB, two resident at a time, each with a block it never writes again
 * (sched_share_job constant), under CUDAW_CKPT_KEEP_IMAGE=1: a job's resume gives its range back
 * while another job runs, whose checkpoint may then be lent that range. With the drop of pool
 * images after a resume removed (checkpoint/transition.c) this failed in 1 of 2 runs, the jobs
 * stuck ("did not finish"), not with mixed data: it catches that only sometimes. */
static void test_keep(void)
{
  setenv("CUDAW_CKPT_KEEP_IMAGE", "1", 1);
  job_bytes = "41943040";
  job_mode = "constant";
  struct sched_snapshot s;
  run_pooled_jobs(4, "30", 200, &s);
}

static void test_exhausted(void)
{
  start_cudawd("100M"); /* one 72 MiB job's range (90 MiB with its margin), never two */
  wait_for_cudawd();
  pid_t jobs[3];
  for (int i = 0; i < 3; i++) jobs[i] = start_job("40", i);
  wait_jobs(jobs, 3, 150);
  struct sched_snapshot s;
  must_snapshot(&s);
  CHECK(s.pool.fallbacks > 0, "the pool never ran out (%llu ranges lent, %llu swaps)",
        (unsigned long long)s.pool.loans_total, (unsigned long long)s.device[0].swaps);
  CHECK(s.pool.placed_bytes > 0, "no image bytes were placed in the pool");
  CHECK(log_has("cudawd.log", "no room in the host-memory pool"), "cudawd did not say why");
  check_all_back();
  printf("exhausted: %llu checkpoints without room, %llu with a range\n",
         (unsigned long long)s.pool.fallbacks, (unsigned long long)s.pool.loans_total);
}

static void test_kill(void)
{
  start_cudawd("256M");
  wait_for_cudawd();
  pid_t jobs[2];
  for (int i = 0; i < 2; i++) jobs[i] = start_job("100000", i);
  struct sched_snapshot s;
  pid_t victim = 0;
  double deadline = now() + 60;
  while (!victim) {
    CHECK(now() < deadline, "no job was swapped out into the pool within 60 s");
    must_snapshot(&s);
    for (int i = 0; i < 2 && s.pool.lent > 0; i++) {
      const struct sched_program_info *p = find(&s, jobs[i]);
      if (p && p->state == SCHED_SWAPPED_OUT) victim = jobs[i];
    }
    sleep_ms(20);
  }
  CHECK_EQ(kill(victim, SIGKILL), 0);
  int status;
  CHECK(waitpid(victim, &status, 0) == victim);
  for (int i = 0; i < 2; i++)
    if (jobs[i] == victim) jobs[i] = 0;
  /* The other job takes the device: once it runs (resident, it holds no range), nothing may be
   * lent any more. */
  pid_t other = jobs[0] ? jobs[0] : jobs[1];
  deadline = now() + 30;
  for (;;) {
    CHECK(now() < deadline, "the other job did not run within 30 s of the kill");
    must_snapshot(&s);
    CHECK(!find(&s, victim), "pid %d still listed after its kill", victim);
    const struct sched_program_info *p = find(&s, other);
    if (p && p->state == SCHED_RUNNING) break;
    sleep_ms(20);
  }
  CHECK(s.pool.loans == 0 && s.pool.lent == 0, "%d ranges (%llu bytes) lent while the only job "
        "left runs: the killed job's range did not come back", s.pool.loans,
        (unsigned long long)s.pool.lent);
  for (int i = 0; i < 2; i++)
    if (jobs[i]) {
      kill(jobs[i], SIGKILL);
      waitpid(jobs[i], &status, 0);
    }
  check_all_back();
  printf("kill: the range of pid %d came back\n", victim);
}

static void test_off(void)
{
  start_cudawd("off");
  wait_for_cudawd();
  /* No SCHED_POOL comes after a hello. */
  int fd = connect_cudawd();
  CHECK(fd >= 0);
  struct sched_msg hello = {.version = SCHED_PROTO_VERSION, .type = SCHED_HELLO};
  CHECK(send(fd, &hello, sizeof hello, MSG_NOSIGNAL) == (ssize_t)sizeof hello);
  struct pollfd pfd = {fd, POLLIN, 0};
  CHECK_EQ(poll(&pfd, 1, 500), 0);
  close(fd);
  pid_t jobs[3];
  for (int i = 0; i < 3; i++) jobs[i] = start_job("20", i);
  wait_jobs(jobs, 3, 120);
  struct sched_snapshot s;
  must_snapshot(&s);
  CHECK(!s.pool.enabled && !s.pool.size && !s.pool.placed_bytes, "a pool with --host-memory off");
  CHECK(s.device[0].swaps > 0, "no swaps: the jobs never took turns");
  CHECK(log_has("cudawd.log", "no host-memory pool (--host-memory off)"), "not said in the log");
  printf("off: %llu swaps without a pool\n", (unsigned long long)s.device[0].swaps);
}

/* Receive one message (closing any descriptor that comes with it, *passed_fd says which);
 * false on timeout or EOF. */
static bool receive(int fd, struct sched_msg *msg, int timeout_ms, int *passed_fd)
{
  bool got = client_receive(fd, msg, timeout_ms, passed_fd);
  if (*passed_fd >= 0) close(*passed_fd);
  return got;
}

static void send_or_fail(int fd, struct sched_msg msg)
{
  msg.version = SCHED_PROTO_VERSION;
  msg.pid = getpid();
  CHECK(send(fd, &msg, sizeof msg, MSG_NOSIGNAL) == (ssize_t)sizeof msg, "send: %s",
        strerror(errno));
}

static void test_hostile(void)
{
  start_cudawd("256M");
  wait_for_cudawd();
  /* Before its hello a peer's word about the pool closes the connection. */
  int early = connect_cudawd();
  send_or_fail(early, (struct sched_msg){.type = SCHED_POOL_MAPPED, .value = 1});
  struct sched_msg msg;
  int passed;
  CHECK(!receive(early, &msg, 2000, &passed), "cudawd answered a pool message before a hello");
  char gone;
  CHECK_EQ(recv(early, &gone, 1, MSG_DONTWAIT), 0); /* closed by cudawd */
  close(early);

  /* A liar: joins, says it holds 72 MiB; a real job then needs the device. It is sent windows
   * of the pool as the demand grows, and acknowledges each. */
  int liar = connect_cudawd();
  send_or_fail(liar, (struct sched_msg){.type = SCHED_HELLO});
  struct sched_msg device = {.type = SCHED_DEVICE, .device = 0, .bytes = 256 * MIB};
  memcpy(device.key, EMU_KEY, sizeof EMU_KEY - 1);
  send_or_fail(liar, device);
  send_or_fail(liar, (struct sched_msg){.type = SCHED_USAGE, .device = 0, .bytes = 72 * MIB});
  /* A result nobody asked for changes nothing. */
  send_or_fail(liar, (struct sched_msg){.type = SCHED_DONE, .value = 2, .held = 1ull << 40});
  pid_t job = start_job("30", 0);
  bool ordered = false;
  uint64_t mapped = 0;
  double deadline = now() + 30;
  while (!ordered) {
    CHECK(now() < deadline, "the liar was never ordered to checkpoint");
    if (!receive(liar, &msg, 200, &passed)) continue;
    if (msg.type == SCHED_POOL) {
      CHECK(passed >= 0, "a pool without its descriptor");
      CHECK(msg.bytes > 0 && msg.bytes <= 256 * MIB, "a window of %llu bytes",
            (unsigned long long)msg.bytes);
      mapped = msg.bytes;
      send_or_fail(liar, (struct sched_msg){.type = SCHED_POOL_MAPPED, .value = 1,
                                            .bytes = mapped});
    }
    ordered = msg.type == SCHED_CHECKPOINT;
  }
  CHECK(mapped > 0, "the liar was never sent the pool");
  CHECK(msg.bytes >= 72 * MIB && msg.held + msg.bytes <= mapped,
        "the order lends %llu+%llu beyond the %llu bytes mapped", (unsigned long long)msg.held,
        (unsigned long long)msg.bytes, (unsigned long long)mapped);
  struct sched_snapshot s;
  must_snapshot(&s);
  CHECK_EQ(s.pool.loans, 1);
  CHECK_EQ(s.pool.placed_bytes, 0);
  close(liar); /* hangs up instead of answering */
  check_all_back();
  wait_jobs(&job, 1, 60);
  check_all_back();
  printf("hostile: the liar's range came back when it hung up\n");
}

/* Whether pid maps cudawd's pool with MADV_HUGEPAGE ("hg" among the mapping's VmFlags); -1 while
 * it has no mapping of the pool. */
static int pool_advised(pid_t pid)
{
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/smaps", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int found = -1;
  bool inside = false;
  while (found < 0 && fgets(line, sizeof line, f)) {
    if (strstr(line, "cudawd-pool")) inside = true;
    else if (inside && !strncmp(line, "VmFlags:", 8)) found = strstr(line, " hg") != NULL;
  }
  fclose(f);
  return found;
}

static void test_pages(void)
{
  char thp[128];
  snprintf(thp, sizeof thp, "%s/shmem_enabled", run_dir);
  FILE *f = fopen(thp, "w");
  CHECK(f != NULL);
  fputs("always within_size [advise] never deny force\n", f);
  fclose(f);
  setenv("CUDAWD_SHMEM_THP", thp, 1);
  pid_t daemon = start_cudawd("256M");
  wait_for_cudawd();
  CHECK(log_has("cudawd.log", "shared memory in 2 MiB pages where the kernel has them "
                "(transparent_hugepage/shmem_enabled is advise)"), "cudawd's log does not say "
        "that the pool gets huge pages under advise");
  pid_t jobs[2] = {start_job("20", 0), start_job("20", 1)};
  int advised = -1;
  for (double deadline = now() + 60; advised < 0 && now() < deadline; sleep_ms(50))
    for (int i = 0; i < 2 && advised < 0; i++) advised = pool_advised(jobs[i]);
  CHECK(advised == 1, "a job's mapping of the pool: %s", advised < 0 ? "never seen" :
        "without MADV_HUGEPAGE");
  wait_jobs(jobs, 2, 120);
  kill(daemon, SIGTERM);
  waitpid(daemon, NULL, 0);
  /* A kernel that gives shared memory no huge pages: the log says which setting would. */
  f = fopen(thp, "w");
  CHECK(f != NULL);
  fputs("always within_size advise [never] deny force\n", f);
  fclose(f);
  char log[128];
  snprintf(log, sizeof log, "%s/cudawd.log", run_dir);
  unlink(log);
  start_cudawd("256M");
  wait_for_cudawd();
  CHECK(log_has("cudawd.log", "plain shared memory in 4 KiB pages (transparent_hugepage/"
                "shmem_enabled is never; advise gives the pool 2 MiB pages"),
        "cudawd's log does not say which pages never gives");
  printf("pages: the log follows shmem_enabled; a job maps the pool with MADV_HUGEPAGE\n");
}

int main(int argc, char **argv)
{
  setpgid(0, 0);
  atexit(end_children);
  CHECK(argc == 5, "usage: %s CUDAWD CUDAW_CTL JOB used|keep|exhausted|kill|off|hostile|pages|"
        "unlocked",
        argv[0]);
  cudawd_path = argv[1];
  ctl_path = argv[2];
  job_path = argv[3];
  snprintf(run_dir, sizeof run_dir, "/tmp/cudaw-pool-XXXXXX");
  CHECK(mkdtemp(run_dir) != NULL, "mkdtemp: %s", strerror(errno));
  setenv("CUDAW_RUN_DIR", run_dir, 1);
  setenv("CUDAW_SHARE", "1", 1);
  setenv("CUDAW_LOG", "info", 1);
  if (!strcmp(argv[4], "used")) test_used();
  else if (!strcmp(argv[4], "keep")) test_keep();
  else if (!strcmp(argv[4], "exhausted")) test_exhausted();
  else if (!strcmp(argv[4], "kill")) test_kill();
  else if (!strcmp(argv[4], "off")) test_off();
  else if (!strcmp(argv[4], "hostile")) test_hostile();
  else if (!strcmp(argv[4], "pages")) test_pages();
  else if (!strcmp(argv[4], "unlocked")) test_unlocked();
  else test_fail("unknown mode %s", argv[4]);
  char command[128];
  snprintf(command, sizeof command, "rm -rf '%s'", run_dir);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", run_dir);
  printf("ok\n");
  return 0;
}
