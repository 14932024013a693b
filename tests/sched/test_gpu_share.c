/* Description: GPU-time shares on the emulated device (issue 24, part 4). The job launches
 * kernels of a fixed cost (1 ms) in a loop:
 *   - unlimited, then with CUDAW_GPU_SHARE=30: its launch rate must fall to 20-45% of the
 *     unlimited rate, and `cudaw-ctl limit <pid>` must report a share of 30 and a measured GPU
 *     time of 20-45% of the last second;
 *   - unlimited, then `cudaw-ctl limit <pid> --gpu 30` live, then `--gpu off`: the rate in the
 *     limited phase must be 20-45% of the first phase's, and come back above 70% after off;
 *   - a malformed share is refused by cudaw-ctl (exit 2) and by the program (bad_request);
 *   - a 1% share (a bucket smaller than one kernel) runs at most 5% of the rate and ends;
 *   - two at once with 70% and 30% (they take turns through the device's lock file): 50-85% and
 *     20-45% of the unlimited rate.
 *   usage: sched_test_gpu_share JOB CUDAW_CTL */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

static const char *job_path, *ctl_path;
static char run_dir[64];

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_until(double t)
{
  double left = t - now();
  if (left <= 0) return;
  struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
  nanosleep(&ts, NULL);
}

/* Start the job for `seconds` with stdout into `out`; share: CUDAW_GPU_SHARE or NULL. */
static pid_t start_job(const char *seconds, const char *share, const char *out)
{
  pid_t pid = fork();
  CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 1) < 0) _exit(127);
    if (share) setenv("CUDAW_GPU_SHARE", share, 1);
    else unsetenv("CUDAW_GPU_SHARE");
    execl(job_path, job_path, seconds, "1000", (char *)NULL);
    _exit(127);
  }
  return pid;
}

static void finish(pid_t pid)
{
  int status;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "job %ld failed (status %d)", (long)pid,
        status);
}

/* Launches per second over the job's windows that end in (from, to]; -1 without windows. */
static double rate_between(const char *out, double from, double to)
{
  FILE *f = fopen(out, "r");
  CHECK(f, "%s: %s", out, strerror(errno));
  char line[256];
  double first = 0, last = 0;
  long launches = 0;
  int windows = 0;
  double previous_end = 0;
  while (fgets(line, sizeof line, f)) {
    double end;
    long count;
    if (sscanf(line, "window %lf %ld", &end, &count) != 2) continue;
    if (end > from && end <= to && previous_end > 0) {
      if (!windows) first = previous_end;
      last = end;
      launches += count;
      windows++;
    }
    previous_end = end;
  }
  fclose(f);
  return windows && last > first ? (double)launches / (last - first) : -1;
}

static double total_rate(const char *out)
{
  FILE *f = fopen(out, "r");
  CHECK(f, "%s: %s", out, strerror(errno));
  char line[256];
  double rate = -1, seconds;
  long launches;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "total %ld %lf %lf", &launches, &seconds, &rate) == 3) break;
  fclose(f);
  CHECK(rate > 0, "no total line in %s", out);
  return rate;
}

/* Run `cudaw-ctl args` with its output into out; its exit code. */
static int ctl(const char *args, char *out, size_t len)
{
  char command[512];
  snprintf(command, sizeof command, "CUDAW_RUN_DIR=%s '%s' %s 2>&1", run_dir, ctl_path, args);
  FILE *p = popen(command, "r");
  CHECK(p, "popen %s", command);
  size_t used = fread(out, 1, len - 1, p);
  out[used] = '\0';
  int status = pclose(p);
  printf("$ cudaw-ctl %s\n%s", args, out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Send one request line to pid's control socket; the reply line into out. */
static void ask(pid_t pid, const char *request, char *out, size_t len)
{
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%ld.sock", run_dir, (long)pid);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0, "connect %s",
        addr.sun_path);
  CHECK(send(fd, request, strlen(request), 0) == (ssize_t)strlen(request));
  ssize_t n = recv(fd, out, len - 1, 0);
  close(fd);
  out[n > 0 ? n : 0] = '\0';
  printf("%s-> %s", request, out);
}

static double json_value(const char *json, const char *key)
{
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char *p = strstr(json, pattern);
  CHECK(p, "no %s in %s", key, json);
  return strtod(p + strlen(pattern), NULL);
}

static void check_ratio(const char *what, double ratio)
{
  printf("%s: %.1f%% of the unlimited rate\n", what, 100 * ratio);
  CHECK(ratio >= 0.20 && ratio <= 0.45, "%s: %.1f%%, expected 20-45%%", what, 100 * ratio);
}

int main(int argc, char **argv)
{
  CHECK(argc == 3, "usage: %s JOB CUDAW_CTL", argv[0]);
  job_path = argv[1];
  ctl_path = argv[2];
  snprintf(run_dir, sizeof run_dir, "/tmp/cudaw-gpu-share-%ld", (long)getpid());
  CHECK(mkdir(run_dir, 0700) == 0 || errno == EEXIST);
  setenv("CUDAW_RUN_DIR", run_dir, 1);
  char out[256], reply[4096], args[128];

  /* Unlimited, then CUDAW_GPU_SHARE=30. */
  snprintf(out, sizeof out, "%s/free.out", run_dir);
  pid_t pid = start_job("2", NULL, out);
  finish(pid);
  double free_rate = total_rate(out);
  printf("unlimited: %.1f launches/s\n", free_rate);
  CHECK(free_rate > 200, "the 1 ms kernel ran only %.1f times a second", free_rate);

  snprintf(out, sizeof out, "%s/env.out", run_dir);
  double t0 = now();
  pid = start_job("2", "30", out);
  sleep_until(t0 + 1.5);
  snprintf(args, sizeof args, "--json limit %ld", (long)pid);
  CHECK(ctl(args, reply, sizeof reply) == 0, "limit (report) failed");
  CHECK(json_value(reply, "gpu_share") == 30, "share %s", reply);
  double fraction = json_value(reply, "gpu_busy_fraction");
  printf("measured GPU time: %.1f%% of the last second\n", 100 * fraction);
  CHECK(fraction >= 0.20 && fraction <= 0.45, "measured %.1f%%, expected 20-45%%", 100 * fraction);
  snprintf(args, sizeof args, "status %ld", (long)pid);
  CHECK(ctl(args, reply, sizeof reply) == 0 && strstr(reply, "GPU share 30%"), "status");
  finish(pid);
  double env_rate = total_rate(out); /* checked below, against the best unlimited rate seen */

  /* Live: unlimited 1.5 s, limited to 30% until 3.5 s, then off. */
  snprintf(out, sizeof out, "%s/live.out", run_dir);
  t0 = now();
  pid = start_job("5", NULL, out);
  sleep_until(t0 + 1.5);
  snprintf(args, sizeof args, "limit %ld --gpu 30", (long)pid);
  double limited_at = now();
  CHECK(ctl(args, reply, sizeof reply) == 0 && strstr(reply, "GPU share 30% (was none)"),
        "limit --gpu 30");
  /* Malformed shares: refused by cudaw-ctl, and by the program itself. */
  snprintf(args, sizeof args, "limit %ld --gpu 250", (long)pid);
  CHECK(ctl(args, reply, sizeof reply) == 2, "--gpu 250 was not refused");
  const char *bad[] = {"limit gpu=101\n", "limit gpu=abc\n", "limit cpu=5\n", "limitgpu=5\n"};
  for (int i = 0; i < 4; i++) {
    ask(pid, bad[i], reply, sizeof reply);
    CHECK(strstr(reply, "\"ok\":false") && strstr(reply, "bad_request"), "%s", bad[i]);
  }
  sleep_until(t0 + 3.5);
  snprintf(args, sizeof args, "limit %ld --gpu off", (long)pid);
  double freed_at = now();
  CHECK(ctl(args, reply, sizeof reply) == 0 && strstr(reply, "GPU share none (was 30%)"),
        "limit --gpu off");
  finish(pid);
  double before = rate_between(out, 0, limited_at), during = rate_between(out, limited_at + 0.4,
                                                                          freed_at);
  double after = rate_between(out, freed_at + 0.3, 1e18);
  printf("live: %.1f launches/s before, %.1f limited, %.1f after off\n", before, during, after);
  CHECK(before > 0 && during > 0 && after > 0, "windows missing in %s", out);
  check_ratio("cudaw-ctl limit --gpu 30", during / before);
  CHECK(after / before > 0.7, "after --gpu off: %.1f%% of the first phase", 100 * after / before);
  /* The unlimited rate is the best one seen: on a loaded machine one run may come out slow, which
   * would make the limited ones look fast. */
  if (before > free_rate) free_rate = before;
  if (after > free_rate) free_rate = after;
  printf("unlimited, best seen: %.1f launches/s\n", free_rate);
  check_ratio("CUDAW_GPU_SHARE=30", env_rate / free_rate);

  /* A 1% share (its bucket holds 1 ms, less than one kernel) still runs, slowly. */
  snprintf(out, sizeof out, "%s/tiny.out", run_dir);
  double tiny_start = now();
  finish(start_job("1", "1", out));
  double tiny = total_rate(out) / free_rate;
  printf("CUDAW_GPU_SHARE=1: %.1f%% of the unlimited rate, done in %.2f s\n", 100 * tiny,
         now() - tiny_start);
  CHECK(tiny <= 0.05, "a 1%% share ran at %.1f%%", 100 * tiny);

  /* Two at once, 70/30. */
  char out_b[256];
  snprintf(out, sizeof out, "%s/pair_a.out", run_dir);
  snprintf(out_b, sizeof out_b, "%s/pair_b.out", run_dir);
  pid_t a = start_job("3", "70", out), b = start_job("3", "30", out_b);
  finish(a);
  finish(b);
  double rate_a = total_rate(out) / free_rate, rate_b = total_rate(out_b) / free_rate;
  printf("70/30 at once: %.1f%% and %.1f%% of the unlimited rate\n", 100 * rate_a, 100 * rate_b);
  CHECK(rate_a >= 0.50 && rate_a <= 0.85, "the 70%% job ran at %.1f%%", 100 * rate_a);
  check_ratio("the 30% job beside a 70% one", rate_b);

  char command[128];
  snprintf(command, sizeof command, "rm -rf '%s'", run_dir);
  if (system(command) != 0) printf("could not remove %s\n", run_dir);
  printf("ok\n");
  return 0;
}
