/* Description: GPU sharing through cudawd on the emulated device (each process has its own
 * emulated memory; cudawd --device-memory makes them share 96 MiB):
 *   share      three jobs needing 75% each all finish with their data verified, max_resident
 *              never exceeds the capacity, swaps > 0; cudaw-ctl sched/priority, metrics file
 *   faults     kill -9 of a swapped-out job frees its share at once; kill -9 of cudawd mid-run:
 *              the jobs run on unshared (a swapped-out one is resumed by the new cudawd, or by itself after 5 s) and re-join a new one
 *   too-large  a job that alone needs more than the capacity gets cudaErrorMemoryAllocation, and
 *              cudawd counts it as its one failed allocation (table, JSON, metrics); a job that
 *              waits is shown "waiting for memory", with its need and what is free
 *   idle       early hand-over: a job idle on the GPU gives its turn before the quantum ends
 *   timeout    a job that cannot reach its pause is skipped: the next candidate is swapped out
 *   launcher   cudaw run --share starts a cudawd when none answers, and the job joins it
 *   usage: sched_test_share CUDAWD CUDAW_CTL JOB MODE */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sched_proto.h"
#include "test.h"

#define MIB (1024ull * 1024)
#define CAPACITY (96 * MIB)
#define JOB_BYTES "75497472" /* 72 MiB: 75% of the capacity */

static const char *cudawd_path, *ctl_path, *job_path;
static char run_dir[64];

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
  return pid;
}

static pid_t start_cudawd_quantum(const char *quantum)
{
  char log[128], metrics[128];
  snprintf(log, sizeof log, "%s/cudawd.log", run_dir);
  snprintf(metrics, sizeof metrics, "%s/metrics.prom", run_dir);
  const char *argv[] = {cudawd_path, "--device-memory", "96M", "--quantum", quantum, "--min-run",
                        "0.2", "--metrics-file", metrics, "--verbose", "--gpu-list", "none", NULL};
  return spawn(argv, log);
}

static pid_t start_cudawd(void)
{
  return start_cudawd_quantum("1");
}

static pid_t start_job(const char *bytes, const char *rounds, const char *mode)
{
  const char *argv[] = {job_path, bytes, rounds, mode, NULL};
  return spawn(argv, NULL);
}

/* Ask cudawd for its snapshot; false if none answers. */
static bool snapshot(struct sched_snapshot *out)
{
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%s", run_dir, SCHED_SOCKET_NAME);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0);
  struct sched_msg msg = {.version = SCHED_PROTO_VERSION, .type = SCHED_STATUS};
  bool ok = connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
            send(fd, &msg, sizeof msg, MSG_NOSIGNAL) == (ssize_t)sizeof msg &&
            recv(fd, out, sizeof *out, 0) == (ssize_t)sizeof *out;
  close(fd);
  return ok;
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

static const struct sched_program_info *find_exited(const struct sched_snapshot *s, pid_t pid)
{
  for (int i = 0; i < s->programs; i++)
    if (s->program[i].pid == pid && s->program[i].state == SCHED_EXITED) return &s->program[i];
  return NULL;
}

static int run_ctl(const char *a, const char *b, const char *c, const char *d)
{
  const char *argv[] = {ctl_path, a, b, c, d, NULL};
  int status;
  pid_t pid = spawn(argv, NULL);
  CHECK(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Reap finished jobs; returns how many are still running. exit codes in `codes` (-signal). */
static int reap(pid_t *jobs, int *codes, int count)
{
  int running = 0;
  for (int i = 0; i < count; i++) {
    if (!jobs[i]) continue;
    int status;
    pid_t done = waitpid(jobs[i], &status, WNOHANG);
    if (done == jobs[i]) {
      codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
      printf("job %d (pid %d) ended: %d\n", i, jobs[i], codes[i]);
      jobs[i] = 0;
    } else {
      running++;
    }
  }
  return running;
}

/* Watch the device while the jobs run: the resident bytes never exceed the capacity. */
static void check_device(const struct sched_snapshot *s)
{
  for (int i = 0; i < s->devices; i++) {
    CHECK(s->device[i].capacity == CAPACITY, "capacity %llu",
          (unsigned long long)s->device[i].capacity);
    CHECK(s->device[i].max_resident <= s->device[i].capacity,
          "max_resident_bytes %llu exceeds the capacity %llu",
          (unsigned long long)s->device[i].max_resident,
          (unsigned long long)s->device[i].capacity);
  }
}

static void test_share(pid_t daemon)
{
  pid_t jobs[3], pids[3];
  int codes[3] = {0};
  for (int i = 0; i < 3; i++) pids[i] = jobs[i] = start_job(JOB_BYTES, "40", NULL);
  bool priority_set = false;
  struct sched_snapshot s;
  double deadline = now() + 100;
  while (reap(jobs, codes, 3)) {
    CHECK(now() < deadline, "jobs did not finish within 100 s");
    if (snapshot(&s)) {
      check_device(&s);
      const struct sched_program_info *first = find(&s, pids[0]);
      if (!priority_set && first) {
        char pid_text[16];
        snprintf(pid_text, sizeof pid_text, "%d", pids[0]);
        CHECK_EQ(run_ctl("priority", pid_text, "2", NULL), 0);
        CHECK(snapshot(&s) && find(&s, pids[0]) && find(&s, pids[0])->priority == 2,
              "priority 2 not shown for pid %d", pids[0]);
        priority_set = true;
      }
    }
    sleep_ms(50);
  }
  for (int i = 0; i < 3; i++) CHECK_EQ(codes[i], 0);
  CHECK(snapshot(&s));
  check_device(&s);
  CHECK_EQ(s.devices, 1);
  CHECK(s.device[0].swaps > 0, "no swaps: the jobs never took turns");
  CHECK(s.device[0].max_resident >= 72 * MIB, "max_resident_bytes %llu: a job's memory was never "
        "accounted", (unsigned long long)s.device[0].max_resident);
  CHECK_EQ(s.device[0].resident, 0);
  for (int i = 0; i < 3; i++) {
    const struct sched_program_info *p = find_exited(&s, pids[i]);
    CHECK(p != NULL, "job pid %d not among the exited programs", pids[i]);
    CHECK(p->gpu_seconds > 0, "job pid %d received no GPU time", pids[i]);
    printf("job %d: GPU time %.2f s, %llu swaps taking %.3f s, waited %.2f s\n", i,
           p->gpu_seconds, (unsigned long long)p->swaps, p->swap_seconds, p->wait_seconds);
  }
  printf("capacity %llu, max_resident_bytes %llu, swaps %llu\n",
         (unsigned long long)s.device[0].capacity, (unsigned long long)s.device[0].max_resident,
         (unsigned long long)s.device[0].swaps);
  CHECK_EQ(run_ctl("sched", NULL, NULL, NULL), 0);
  CHECK_EQ(run_ctl("--json", "sched", NULL, NULL), 0);
  CHECK_EQ(run_ctl("priority", "1", "2", NULL), 3); /* not a sharing program */
  sleep_ms(2100);
  char metrics[128], line[256];
  snprintf(metrics, sizeof metrics, "%s/metrics.prom", run_dir);
  FILE *f = fopen(metrics, "r");
  CHECK(f != NULL, "no metrics file %s", metrics);
  bool swaps_line = false;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "cudawd_swaps_total{", 19) == 0 && !strstr(line, "} 0\n")) swaps_line = true;
  fclose(f);
  CHECK(swaps_line, "%s has no cudawd_swaps_total above 0", metrics);
  kill(daemon, SIGTERM);
  waitpid(daemon, NULL, 0);
}

/* Wait until a job is swapped out; returns its index. */
static int wait_swapped_out(pid_t *jobs, int *codes, int count)
{
  struct sched_snapshot s;
  double deadline = now() + 60;
  while (now() < deadline) {
    CHECK(reap(jobs, codes, count) == count, "a job ended before the faults were injected");
    if (snapshot(&s)) {
      check_device(&s);
      for (int i = 0; i < count; i++) {
        const struct sched_program_info *p = jobs[i] ? find(&s, jobs[i]) : NULL;
        if (p && p->state == SCHED_SWAPPED_OUT) return i;
      }
    }
    sleep_ms(20);
  }
  test_fail("no job was swapped out within 60 s");
}

static void test_faults(pid_t daemon)
{
  pid_t jobs[3];
  int codes[3] = {0};
  for (int i = 0; i < 3; i++) jobs[i] = start_job(JOB_BYTES, "150", NULL);
  int victim = wait_swapped_out(jobs, codes, 3);
  pid_t victim_pid = jobs[victim];
  printf("kill -9 of swapped-out job %d (pid %d)\n", victim, victim_pid);
  kill(victim_pid, SIGKILL);
  waitpid(victim_pid, NULL, 0);
  jobs[victim] = 0;
  codes[victim] = -SIGKILL;
  struct sched_snapshot s;
  bool gone = false;
  for (int i = 0; i < 40 && !gone; i++) {
    sleep_ms(25);
    gone = snapshot(&s) && !find(&s, victim_pid);
  }
  CHECK(gone, "cudawd still lists the killed pid %d after 1 s", victim_pid);
  CHECK(find_exited(&s, victim_pid) != NULL, "the killed pid %d is not shown as exited",
        victim_pid);
  check_device(&s);

  pid_t left[2];
  int left_codes[2] = {0}, n = 0;
  for (int i = 0; i < 3; i++)
    if (jobs[i]) left[n++] = jobs[i];
  int swapped = wait_swapped_out(left, left_codes, 2);
  printf("kill -9 of cudawd while pid %d is swapped out\n", left[swapped]);
  kill(daemon, SIGKILL);
  waitpid(daemon, NULL, 0);
  sleep_ms(300);
  daemon = start_cudawd();
  wait_for_cudawd();
  bool rejoined = false;
  double deadline = now() + 20;
  while (!rejoined && now() < deadline) {
    CHECK(reap(left, left_codes, 2) == 2, "a job ended before it re-joined");
    rejoined = snapshot(&s) && find(&s, left[0]) && find(&s, left[1]);
    sleep_ms(50);
  }
  CHECK(rejoined, "the jobs did not re-join the new cudawd within 20 s");
  printf("both jobs re-joined the new cudawd\n");
  deadline = now() + 120;
  while (reap(left, left_codes, 2)) {
    CHECK(now() < deadline, "jobs did not finish within 120 s after the faults");
    if (snapshot(&s)) check_device(&s);
    sleep_ms(50);
  }
  CHECK_EQ(left_codes[0], 0);
  CHECK_EQ(left_codes[1], 0);
  kill(daemon, SIGTERM);
  waitpid(daemon, NULL, 0);
}

/* Whether file holds the text. */
static bool file_has(const char *path, const char *text)
{
  FILE *f = fopen(path, "r");
  char line[1024];
  bool found = false;
  while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, text) != NULL;
  if (f) fclose(f);
  return found;
}

/* Run cudaw-ctl with its standard output to path; its exit code. */
static int run_ctl_to(const char *path, const char *a, const char *b)
{
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 1) < 0) _exit(127);
    execl(ctl_path, ctl_path, a, b, (char *)NULL);
    _exit(127);
  }
  int status;
  CHECK(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* path holds one valid JSON document (python3's json module when there is one). */
static void check_json(const char *path)
{
  if (system("command -v python3 >/dev/null 2>&1") != 0) {
    printf("no python3: %s not parsed\n", path);
    return;
  }
  char command[512];
  snprintf(command, sizeof command, "python3 -c 'import json,sys; json.load(open(sys.argv[1]))' '%s'",
           path);
  CHECK(system(command) == 0, "%s is not valid JSON", path);
}

/* A job that alone needs more than the capacity gets the native error; cudawd counts that one
 * failed allocation (table, JSON, metrics), and the wait reason and last grant are shown. */
static void test_too_large(pid_t daemon)
{
  pid_t job = start_job("125829120", "1", "too-large"); /* 120 MiB > 96 MiB */
  int status;
  CHECK(waitpid(job, &status, 0) == job);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the too-large job did not get "
        "cudaErrorMemoryAllocation (status %#x)", status);
  struct sched_snapshot s;
  const struct sched_program_info *p = NULL;
  for (int i = 0; i < 40 && !p; i++) { /* its socket closes a moment after it exits */
    CHECK(snapshot(&s));
    p = find_exited(&s, job);
    if (!p) sleep_ms(25);
  }
  CHECK(p != NULL, "the too-large job is not listed as exited");
  const struct sched_program_detail *w = &s.detail[p - s.program];
  CHECK_EQ(w->failed, 1);
  CHECK_EQ(w->retries, 0);
  CHECK(w->last_grant_ago >= 0 && w->last_grant_bytes == 30 * MIB, "last grant %llu bytes %.1f s "
        "ago: expected its 30 MiB pieces", (unsigned long long)w->last_grant_bytes,
        w->last_grant_ago);
  char out[128], text[8192];
  snprintf(out, sizeof out, "%s/sched.json", run_dir);
  CHECK_EQ(run_ctl_to(out, "--json", "sched"), 0);
  check_json(out);
  FILE *f = fopen(out, "r");
  CHECK(f != NULL);
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  CHECK(strstr(text, "\"failed_allocations\":1") && strstr(text, "\"alloc_retries\":0") &&
        strstr(text, "\"last_grant\":{\"bytes\":31457280") && strstr(text, "\"wait\":{\"reason\""),
        "cudaw-ctl --json sched lacks the failed count, retries, last grant or wait: %s", text);
  snprintf(out, sizeof out, "%s/sched.txt", run_dir);
  CHECK_EQ(run_ctl_to(out, "sched", NULL), 0);
  CHECK(file_has(out, "FAILED") && file_has(out, "LAST GRANT") && file_has(out, "30.00 MiB"),
        "cudaw-ctl sched does not show the failed count or the last grant");
  /* A job that waits is shown waiting for memory, with what it needs and what is free. */
  pid_t holder = start_job(JOB_BYTES, "40", NULL), waiter = 0;
  bool waited = false;
  for (int i = 0; i < 400 && !waited; i++) {
    if (!waiter && snapshot(&s) && s.devices && s.device[0].resident >= 72 * MIB)
      waiter = start_job(JOB_BYTES, "1", NULL);
    if (waiter && snapshot(&s) && (p = find(&s, waiter)) != NULL) {
      w = &s.detail[p - s.program];
      waited = w->wait_reason == SCHED_WAIT_MEMORY && w->need_bytes > 0 &&
               w->free_bytes < w->need_bytes;
    }
    sleep_ms(10);
  }
  CHECK(waited, "the second job was never shown waiting for memory");
  CHECK_EQ(run_ctl_to(out, "sched", NULL), 0);
  CHECK(file_has(out, "waiting for memory:") || file_has(out, "swapping"),
        "cudaw-ctl sched does not say why the job waits");
  CHECK_EQ(waitpid(holder, &status, 0), holder);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK_EQ(waitpid(waiter, &status, 0), waiter);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(snapshot(&s));
  for (int i = 0; i < s.programs; i++)
    if (s.program[i].pid == holder || s.program[i].pid == waiter) CHECK_EQ(s.detail[i].failed, 0);
  sleep_ms(2100); /* the metrics file carries the same */
  char metrics[128], line[160];
  snprintf(metrics, sizeof metrics, "%s/metrics.prom", run_dir);
  snprintf(line, sizeof line, "cudawd_program_failed_allocations_total{pid=\"%d\"} 1", job);
  CHECK(file_has(metrics, line), "%s lacks %s", metrics, line);
  CHECK(file_has(metrics, "cudawd_program_wait{pid=") &&
        file_has(metrics, "cudawd_program_last_grant_bytes{pid=") &&
        file_has(metrics, "cudawd_program_alloc_retries_total{pid="), "%s lacks the wait, last "
        "grant or retry series", metrics);
  kill(daemon, SIGTERM);
  waitpid(daemon, NULL, 0);
}

/* Whatever happens, leave no cudawd or job behind: they are all in our process group. */
static void end_children(void)
{
  signal(SIGTERM, SIG_IGN);
  kill(0, SIGTERM);
}

/* Early hand-over: with a 30 s quantum, a job that allocated and then sleeps (idle GPU) is
 * swapped out after min-run once another waits, instead of keeping its turn. */
static void test_idle(void)
{
  pid_t daemon = start_cudawd_quantum("30");
  wait_for_cudawd();
  pid_t jobs[2];
  int codes[2] = {0};
  jobs[0] = start_job(JOB_BYTES, "5", "idle-first");
  struct sched_snapshot s;
  for (int i = 0; i < 400; i++) { /* until the idle job holds its memory */
    if (snapshot(&s) && s.devices && s.device[0].resident >= 72 * MIB) break;
    sleep_ms(10);
  }
  double start = now();
  jobs[1] = start_job(JOB_BYTES, "5", NULL);
  pid_t busy = jobs[1];
  while (jobs[1] == busy) {
    reap(jobs, codes, 2);
    CHECK(now() - start < 9, "the busy job did not finish within 9 s: the idle job kept its turn");
    sleep_ms(20);
  }
  printf("the busy job finished %.2f s after it started, while the idle job slept\n",
         now() - start);
  while (reap(jobs, codes, 2)) sleep_ms(50);
  CHECK_EQ(codes[0], 0);
  CHECK_EQ(codes[1], 0);
  kill(daemon, SIGTERM);
  waitpid(daemon, NULL, 0);
}

/* A program that cannot reach its pause (a call stuck in flight past CUDAW_PAUSE_TIMEOUT) is
 * skipped and the next candidate is swapped out instead. */
static void test_timeout(void)
{
  pid_t daemon = start_cudawd();
  wait_for_cudawd();
  const char *bytes = "41943040"; /* 40 MiB: two fit in 96 MiB, three do not */
  pid_t jobs[3];
  int codes[3] = {0};
  struct sched_snapshot s;
  const char *modes[3] = {"stuck", NULL, NULL};
  const char *rounds[3] = {"5", "400", "20"};
  for (int i = 0; i < 3; i++) {
    if (i == 2) sleep_ms(1200); /* both resident past their quantum */
    jobs[i] = start_job(bytes, rounds[i], modes[i]);
    for (int k = 0; i < 2 && k < 400; k++) { /* until this one holds its memory */
      if (snapshot(&s) && s.devices && s.device[0].resident >= (uint64_t)(i + 1) * 40 * MIB) break;
      sleep_ms(10);
    }
  }
  double start = now();
  pid_t stuck = jobs[0], waiting = jobs[2];
  while (jobs[2] == waiting) {
    reap(jobs, codes, 3);
    CHECK(now() - start < 6.5, "the third job did not finish while the first was stuck");
    sleep_ms(20);
  }
  CHECK(jobs[0] == stuck, "the stuck job ended first");
  printf("the third job finished %.2f s after it started, the stuck one still running\n",
         now() - start);
  while (reap(jobs, codes, 3)) sleep_ms(50);
  for (int i = 0; i < 3; i++) CHECK_EQ(codes[i], 0);
  kill(daemon, SIGTERM);
  waitpid(daemon, NULL, 0);
  char log[128], line[512];
  snprintf(log, sizeof log, "%s/cudawd.log", run_dir);
  FILE *f = fopen(log, "r");
  bool skipped = false;
  while (f && fgets(line, sizeof line, f)) skipped |= strstr(line, "checkpoint of pid") != NULL;
  if (f) fclose(f);
  CHECK(skipped, "cudawd never reported the failed checkpoint of the stuck job");
}

/* cudaw run --share with no cudawd: the launcher starts one (detached), the job joins it. */
static void test_launcher(void)
{
  char launcher[512];
  snprintf(launcher, sizeof launcher, "%s", cudawd_path);
  char *slash = strrchr(launcher, '/');
  CHECK(slash != NULL);
  snprintf(slash + 1, sizeof launcher - (size_t)(slash + 1 - launcher), "cudaw");
  unsetenv("CUDAW_SHARE"); /* --share must set it */
  const char *argv[] = {launcher, "run", "--share", "--", job_path, JOB_BYTES, "20", NULL};
  pid_t job = spawn(argv, NULL);
  bool seen = false;
  struct sched_snapshot s;
  for (int i = 0; i < 400 && !seen; i++) {
    seen = snapshot(&s) && (find(&s, job) || find_exited(&s, job));
    sleep_ms(10);
  }
  int status;
  CHECK(waitpid(job, &status, 0) == job);
  /* The launcher's cudawd is not our child: find it through the socket's credentials and end
   * it before checking anything, so that a failure leaves nothing behind. */
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%s", run_dir, SCHED_SOCKET_NAME);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  struct ucred peer = {0};
  socklen_t len = sizeof peer;
  bool found = connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
               getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 && peer.pid > 0;
  close(fd);
  if (found) kill(peer.pid, SIGTERM);
  CHECK(found, "no cudawd answers in %s after cudaw run --share", run_dir);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "job status %#x", status);
  CHECK(seen, "the job under cudaw run --share never joined a cudawd");
  printf("cudaw run --share started cudawd pid %d; the job joined it\n", peer.pid);
}

/* The soak's cudawd (again after a kill, same log and metrics file). */
static pid_t start_soak_cudawd(void)
{
  char log[128], metrics[128];
  snprintf(log, sizeof log, "%s/cudawd.log", run_dir);
  snprintf(metrics, sizeof metrics, "%s/metrics.prom", run_dir);
  const char *argv[] = {cudawd_path, "--device-memory", "128M", "--quantum", "0.5", "--min-run",
                        "0.2", "--metrics-file", metrics, "--gpu-list", "none", NULL};
  pid_t daemon = spawn(argv, log);
  wait_for_cudawd();
  return daemon;
}

/* No program cudawd lists (running or exited) had an allocation fail, but the one too-large job
 * (pid too_large), whose one failure is the native error it must get. Returns how many programs
 * were seen waiting (a reason other than none) or granted. */
static void check_failures(const struct sched_snapshot *s, pid_t too_large, unsigned seed)
{
  for (int i = 0; i < s->programs; i++) {
    const struct sched_program_info *p = &s->program[i];
    uint64_t want = p->pid == too_large && p->state == SCHED_EXITED ? 1 : 0;
    if (p->pid == too_large && p->state != SCHED_EXITED) continue;
    CHECK(s->detail[i].failed == want, "seed %u: pid %d (%s) has %llu failed allocations, "
          "expected %llu", seed, p->pid, sched_state_name(p->state),
          (unsigned long long)s->detail[i].failed, (unsigned long long)want);
  }
}

/* The soak: on one emulated device that every process shares (CUDAW_EMU_SHARED=1, so that an
 * over-grant fails an allocation), 12 jobs of random sizes (20-70% of the device) and random
 * allocation patterns (big, small, grow and shrink, stream-ordered, pieces) start at random
 * times; one more needs 120% of the device in its first allocation. In the middle one job is killed with -9, and so is cudawd,
 * which is started again: the jobs run on (unshared a moment, saying so) and re-join it. Every
 * job but the killed one and the too-large one must finish with its data verified, and cudawd
 * must count 0 failed allocations but the too-large job's one. argv seed: SOAK_SEED. */
static void test_soak(unsigned seed)
{
  enum { JOBS = 12, ALL = JOBS + 1 };
  static const char *const patterns[] = {"big", "small", "grow", "async", "pieces"};
  static const char *const pattern_rounds[] = {"6", "4", "14", "10", "6"};
  const uint64_t device = 128u << 20;
  setenv("CUDAW_EMU_SHARED", "1", 1);
  setenv("CUDAW_EMU_SHARED_KEY", run_dir + 5, 1); /* past "/tmp/" */
  setenv("CUDAW_EMU_MEM", "128M", 1);
  pid_t daemon = start_soak_cudawd();
  srand(seed);
  pid_t jobs[ALL], pids[ALL];
  int codes[ALL], killed = rand() % JOBS, pattern[ALL];
  char sizes[ALL][32], logs[ALL][128];
  double start[ALL], t0 = now();
  double daemon_kill_at = 2.0 + (double)(rand() % 1000) / 1000.0; /* at the latest */
  long daemon_down_ms = 200 + rand() % 600;
  for (int i = 0; i < ALL; i++) {
    /* The too-large job's first quarter is already more than the device. */
    uint64_t bytes = i == JOBS ? device / 100 * 480 : device / 100 * (uint64_t)(20 + rand() % 51);
    snprintf(sizes[i], sizeof sizes[i], "%llu", (unsigned long long)(bytes & ~(uint64_t)0xfff));
    snprintf(logs[i], sizeof logs[i], "%s/job%d.log", run_dir, i);
    start[i] = i == JOBS ? 0.1 : (double)(rand() % 2000) / 1000.0;
    pattern[i] = rand() % 5;
    /* Stream-ordered blocks sit in 32 MiB pool segments (as on the H100): at most 40% of the
     * device, so that one alone fits whatever the rounding (8 blocks of 5 %: two segments). */
    if (i != JOBS && pattern[i] == 3)
      snprintf(sizes[i], sizeof sizes[i], "%llu",
               (unsigned long long)((device / 100 * (uint64_t)(20 + rand() % 21)) & ~0xfffull));
    jobs[i] = pids[i] = 0;
    codes[i] = -1000;
  }
  for (int i = 0; i < ALL; i++)
    printf("job %d: %s bytes, %s, starts at %.2f s\n", i, sizes[i],
           i == JOBS ? "too-large" : patterns[pattern[i]], start[i]);
  bool kill_done = false, daemon_killed = false, seen_waiting = false, seen_grant = false;
  pid_t too_large = 0;
  struct sched_snapshot s;
  double snapshot_at = 0, restarted_at = -1, ended_at[ALL];
  for (int i = 0; i < ALL; i++) ended_at[i] = -1;
  for (int started = 0; started < ALL || reap(jobs, codes, ALL) > 0;) {
    double t = now() - t0;
    for (int i = 0; i < ALL; i++)
      if (codes[i] != -1000 && ended_at[i] < 0) ended_at[i] = t;
    for (int i = 0; i < ALL; i++)
      if (!jobs[i] && codes[i] == -1000 && t >= start[i]) {
        const char *argv[] = {job_path, sizes[i], i == JOBS ? "1" : pattern_rounds[pattern[i]],
                              i == JOBS ? "too-large" : patterns[pattern[i]], NULL};
        pids[i] = jobs[i] = spawn(argv, logs[i]);
        if (i == JOBS) too_large = pids[i];
        started++;
      }
    int running = 0;
    for (int i = 0; i < JOBS; i++) running += jobs[i] != 0;
    if (!kill_done && t > 1.5 && jobs[killed]) {
      printf("kill -9 of job %d (pid %d, %s)\n", killed, jobs[killed], patterns[pattern[killed]]);
      kill(jobs[killed], SIGKILL);
      kill_done = true;
    }
    if (t - snapshot_at > 0.2 && !(daemon_killed && t < daemon_kill_at + 1) && snapshot(&s)) {
      snapshot_at = t;
      for (int i = 0; i < s.programs; i++) {
        seen_waiting |= s.detail[i].wait_reason != SCHED_WAIT_NONE;
        seen_grant |= s.detail[i].last_grant_ago >= 0 && s.detail[i].last_grant_bytes > 0;
      }
      check_failures(&s, too_large, seed);
    }
    /* cudawd dies mid-run: once the too-large job is done, with 3 jobs running (or later). */
    if (!daemon_killed && codes[JOBS] != -1000 && t > 1.0 && (running >= 3 || t > daemon_kill_at)) {
      CHECK(snapshot(&s));
      check_failures(&s, too_large, seed);
      bool counted = false;
      for (int i = 0; i < s.programs; i++)
        counted |= s.program[i].pid == too_large && s.program[i].state == SCHED_EXITED;
      CHECK(counted, "seed %u: the too-large job (pid %d) is not listed as exited with its "
            "failed allocation", seed, too_large);
      printf("kill -9 of cudawd at %.1f s, started again %ld ms later\n", t, daemon_down_ms);
      kill(daemon, SIGKILL);
      waitpid(daemon, NULL, 0);
      daemon_killed = true;
      sleep_ms(daemon_down_ms);
      daemon = start_soak_cudawd();
      restarted_at = now() - t0;
    }
    CHECK(t < 200, "the soak did not finish in 200 s");
    sleep_ms(20);
  }
  for (int i = 0; i < ALL; i++)
    CHECK(codes[i] == 0 || (i == killed && codes[i] == -SIGKILL), "seed %u: job %d (%s bytes, %s) "
          "ended with %d (log %s)", seed, i, sizes[i], i == JOBS ? "too-large" :
          patterns[pattern[i]], codes[i], logs[i]);
  CHECK(daemon_killed, "seed %u: the jobs ended before cudawd was killed", seed);
  CHECK(snapshot(&s));
  check_failures(&s, too_large, seed);
  CHECK(seen_waiting, "seed %u: no program was ever shown waiting", seed);
  CHECK(seen_grant, "seed %u: no program was ever shown with a last grant", seed);
  /* The jobs said that they ran unshared a moment, and re-joined: the new cudawd knows them. */
  /* A job re-joins within a second or so of the restart; one that ended sooner need not have. */
  int went_away = 0, rejoined = 0, could_rejoin = 0;
  for (int i = 0; i < JOBS; i++) {
    bool saw = file_has(logs[i], "went away");
    went_away += saw;
    could_rejoin += saw && ended_at[i] > restarted_at + 2.0;
    CHECK(!file_has(logs[i], "UNSCHEDULED"), "seed %u: job %d allocated unscheduled (%s)", seed,
          i, logs[i]);
    for (int k = 0; saw && k < s.programs; k++) rejoined += s.program[k].pid == pids[i];
  }
  CHECK(went_away > 0, "seed %u: no job logged that cudawd went away", seed);
  CHECK(rejoined > 0 || could_rejoin == 0, "seed %u: no job re-joined the new cudawd (%d ran on "
        "for 2 s after its restart)", seed, could_rejoin);
  kill(daemon, SIGTERM);
  waitpid(daemon, NULL, 0);
  char name[128];
  snprintf(name, sizeof name, "/cudaw-emu-%u-%s-0", (unsigned)geteuid(), run_dir + 5);
  shm_unlink(name);
  printf("soak seed %u: %d jobs verified in %.1f s (%d saw cudawd go, %d re-joined)\n", seed,
         JOBS, now() - t0, went_away, rejoined);
}

int main(int argc, char **argv)
{
  setpgid(0, 0);
  atexit(end_children);
  CHECK(argc == 5, "usage: %s CUDAWD CUDAW_CTL JOB share|faults|too-large", argv[0]);
  cudawd_path = argv[1];
  ctl_path = argv[2];
  job_path = argv[3];
  snprintf(run_dir, sizeof run_dir, "/tmp/cudaw-sched-XXXXXX");
  CHECK(mkdtemp(run_dir) != NULL, "mkdtemp: %s", strerror(errno));
  setenv("CUDAW_RUN_DIR", run_dir, 1);
  setenv("CUDAW_SHARE", "1", 1);
  if (strncmp(argv[4], "soak", 4) == 0) {
    test_soak((unsigned)strtoul(argv[4] + 4, NULL, 10));
  } else if (strcmp(argv[4], "launcher") == 0) {
    test_launcher();
  } else if (strcmp(argv[4], "idle") == 0) {
    test_idle();
  } else if (strcmp(argv[4], "timeout") == 0) {
    test_timeout();
  } else {
    pid_t daemon = start_cudawd();
    wait_for_cudawd();
    if (strcmp(argv[4], "share") == 0) test_share(daemon);
    else if (strcmp(argv[4], "faults") == 0) test_faults(daemon);
    else if (strcmp(argv[4], "too-large") == 0) test_too_large(daemon);
    else test_fail("unknown mode %s", argv[4]);
  }
  char command[128];
  snprintf(command, sizeof command, "rm -rf '%s'", run_dir);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", run_dir);
  printf("ok\n");
  return 0;
}
