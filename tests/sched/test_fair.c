/* Description: fair GPU time (issue 30, item 5). Four jobs share an emulated device that holds one
 * at a time (cudawd --device-memory 96M, quantum 0.25 s), each doing a fixed amount of work per
 * GPU phase: A (88 MiB) and D (72 MiB, priority 2) never idle, B and C (72 MiB) sleep 0.7 s
 * after each phase (the idle hint hands their turn over). A starts alone; while the others join,
 * a fake /proc/meminfo (CUDAWD_MEMINFO) leaves the host no room for A's image (but for theirs)
 * for 2 s, so A keeps the GPU past its turn and must give the excess back by waiting. Over the
 * 40 s after all four joined, cudawd's GPU seconds of A, B and C must be within 10% of each
 * other ((max - min) / min) and D's about twice their mean (1.6-2.4x); cudawd's log must show
 * A's swap refused.
 * With "sizes": a large job L (88 MiB, alone on the device) and three small ones (40 MiB, two fit
 * together), none idle. Memory a swap frees for L must not go to a small one that fits in it
 * (they would take turns and L would wait for ever): over 20 s L's GPU seconds must be within
 * 25% of the small ones' mean (each small one accrues while another runs beside it).
 *   usage: sched_test_fair CUDAWD CTL JOB [sizes] */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/wait.h>

#include "client.h"

#define MIB (1024ull * 1024)
#define JOBS 4
#define SHORT_SECONDS 2.0
#define MEASURE_SECONDS 40.0

static char run_dir[64], meminfo[128];
static pid_t cleanup[JOBS + 1]; /* the jobs and cudawd, ended at exit, also when a check fails */

static void end_all(void)
{
  for (int i = 0; i <= JOBS; i++)
    if (cleanup[i] > 0) kill(cleanup[i], SIGKILL);
}

/* The fake /proc/meminfo: 32 GiB of RAM (cudawd keeps 1 GiB free) and `available` bytes. */
static void write_meminfo(uint64_t available)
{
  char tmp[160];
  snprintf(tmp, sizeof tmp, "%s.tmp", meminfo);
  FILE *f = fopen(tmp, "w");
  CHECK(f != NULL, "%s: %s", tmp, strerror(errno));
  fprintf(f, "MemTotal:       33554432 kB\nMemAvailable:   %llu kB\n",
          (unsigned long long)(available >> 10));
  CHECK(fclose(f) == 0 && rename(tmp, meminfo) == 0, "%s: %s", meminfo, strerror(errno));
}

static const struct sched_program_info *find(const struct sched_snapshot *s, pid_t pid)
{
  for (int i = 0; i < s->programs; i++)
    if (s->program[i].pid == pid && s->program[i].state != SCHED_EXITED) return &s->program[i];
  return NULL;
}

static void snapshot(struct sched_snapshot *s)
{
  CHECK(client_snapshot(run_dir, s), "cudawd of %s did not answer", run_dir);
}

static pid_t start_job(const char *job, const char *bytes, const char *host_ms, const char *log)
{
  const char *argv[] = {job, bytes, "100000", "1000", host_ms, "sleep", "work", NULL};
  return client_spawn(argv, log, true);
}

static void all_alive(const pid_t *jobs, const char *log)
{
  for (int i = 0; i < JOBS; i++) {
    int status;
    CHECK(waitpid(jobs[i], &status, WNOHANG) == 0, "job %d ended (status %d); see %s", jobs[i],
          status, log);
  }
}

static void end_and_clean(struct sched_snapshot *s)
{
  end_all();
  for (int i = 0; i <= JOBS; i++) {
    waitpid(cleanup[i], NULL, 0);
    cleanup[i] = 0;
  }
  free(s);
  char command[128];
  snprintf(command, sizeof command, "rm -rf '%s'", run_dir);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", run_dir);
  printf("ok\n");
}

/* The large job and the small ones: L's GPU time against theirs. */
static int sizes(const char *job, const char *log, struct sched_snapshot *s)
{
  pid_t jobs[JOBS];
  static const char *const bytes[JOBS] = {"92274688", "41943040", "41943040", "41943040"};
  for (int i = 0; i < JOBS; i++) jobs[i] = cleanup[i] = start_job(job, bytes[i], "0", log);
  for (double end = client_now() + 20;; client_sleep_ms(20)) {
    CHECK(client_now() < end, "the jobs did not all join; see %s", log);
    snapshot(s);
    int joined = 0;
    for (int i = 0; i < JOBS; i++) joined += find(s, jobs[i]) != NULL;
    if (joined == JOBS) break;
  }
  double base[JOBS];
  for (int i = 0; i < JOBS; i++) base[i] = find(s, jobs[i])->gpu_seconds;
  client_sleep_ms(20000);
  snapshot(s);
  all_alive(jobs, log);
  double gpu[JOBS], small = 0;
  for (int i = 0; i < JOBS; i++) {
    const struct sched_program_info *p = find(s, jobs[i]);
    CHECK(p != NULL, "job %d is not listed", jobs[i]);
    gpu[i] = p->gpu_seconds - base[i];
    if (i) small += gpu[i] / 3;
  }
  printf("GPU seconds over 20 s: L (88 MiB) %.2f, the small ones (40 MiB) %.2f %.2f %.2f "
         "(mean %.2f); %llu swaps\n", gpu[0], gpu[1], gpu[2], gpu[3], small,
         (unsigned long long)s->device[0].swaps);
  CHECK(small > 1, "the small jobs hardly ran: the test measures nothing");
  CHECK(gpu[0] >= 0.75 * small && gpu[0] <= 1.25 * small,
        "the large job got %.2fx the small ones' GPU time, not within 25%%", gpu[0] / small);
  end_and_clean(s);
  return 0;
}

int main(int argc, char **argv)
{
  CHECK(argc == 4 || (argc == 5 && !strcmp(argv[4], "sizes")),
        "usage: %s CUDAWD CTL JOB [sizes]", argv[0]);
  atexit(end_all);
  snprintf(run_dir, sizeof run_dir, "/tmp/cudaw-fair-XXXXXX");
  CHECK(mkdtemp(run_dir) != NULL, "mkdtemp: %s", strerror(errno));
  snprintf(meminfo, sizeof meminfo, "%s/meminfo", run_dir);
  char log[128], daemon_log[128];
  snprintf(log, sizeof log, "%s/jobs.log", run_dir);
  snprintf(daemon_log, sizeof daemon_log, "%s/cudawd.log", run_dir);
  setenv("CUDAW_RUN_DIR", run_dir, 1);
  setenv("CUDAW_SHARE", "1", 1);
  setenv("CUDAW_SHARE_IDLE_MS", "100", 1);

  /* Room for a 72 MiB image beside the 1 GiB kept free, not for an 88 MiB one. */
  write_meminfo(argc == 5 ? 20ull << 30 : (1ull << 30) + 80 * MIB);
  setenv("CUDAWD_MEMINFO", meminfo, 1); /* cudawd's only: the jobs check the real host */
  const char *daemon_argv[] = {argv[1], "--device-memory", "96M", "--quantum", "0.25",
                               "--min-run", "0.1", "--host-memory", "off", "--verbose", NULL};
  cleanup[JOBS] = client_spawn(daemon_argv, daemon_log, false);
  unsetenv("CUDAWD_MEMINFO");
  CHECK(client_wait_up(run_dir, 10), "cudawd did not answer in %s", run_dir);

  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  if (argc == 5) return sizes(argv[3], log, s);
  pid_t jobs[JOBS];
  jobs[0] = cleanup[0] = start_job(argv[3], "92274688", "0", log);
  for (double end = client_now() + 20;; client_sleep_ms(20)) { /* until A holds its memory */
    CHECK(client_now() < end, "job A never got its memory; see %s", log);
    snapshot(s);
    if (s->devices && s->device[0].resident >= 88 * MIB) break;
  }
  jobs[1] = cleanup[1] = start_job(argv[3], "75497472", "700", log);
  jobs[2] = cleanup[2] = start_job(argv[3], "75497472", "700", log);
  jobs[3] = cleanup[3] = start_job(argv[3], "75497472", "0", log);
  char pid_text[16];
  snprintf(pid_text, sizeof pid_text, "%d", (int)jobs[3]);
  for (double end = client_now() + 20;; client_sleep_ms(20)) { /* all joined, D at priority 2 */
    CHECK(client_now() < end, "the jobs did not all join; see %s", log);
    snapshot(s);
    int joined = 0;
    for (int i = 0; i < JOBS; i++) joined += find(s, jobs[i]) != NULL;
    const char *ctl_argv[] = {argv[2], "priority", pid_text, "2", NULL};
    int status;
    pid_t ctl = joined == JOBS ? client_spawn(ctl_argv, log, true) : -1;
    if (ctl > 0 && waitpid(ctl, &status, 0) == ctl && WIFEXITED(status) && !WEXITSTATUS(status))
      break;
  }
  snapshot(s);
  double start = client_now(), base[JOBS];
  for (int i = 0; i < JOBS; i++) base[i] = find(s, jobs[i])->gpu_seconds;

  client_sleep_ms((long)(SHORT_SECONDS * 1000));
  snapshot(s);
  double excess[JOBS];
  for (int i = 0; i < JOBS; i++) excess[i] = find(s, jobs[i])->gpu_seconds - base[i];
  write_meminfo(20ull << 30);
  printf("after %.0f s of host shortage: GPU s A %.2f B %.2f C %.2f D %.2f\n", SHORT_SECONDS,
         excess[0], excess[1], excess[2], excess[3]);
  CHECK(excess[0] >= 0.75 * SHORT_SECONDS && excess[1] + excess[2] + excess[3] < 0.5,
        "A did not keep the GPU through the shortage: the test does not cover its excess");
  CHECK(client_file_has(daemon_log, "would leave the host short"),
        "cudawd never refused A's swap for host memory: the test does not cover it; see %s",
        daemon_log);

  client_sleep_ms((long)((start + MEASURE_SECONDS - client_now()) * 1000));
  snapshot(s);
  all_alive(jobs, log);
  double gpu[JOBS];
  for (int i = 0; i < JOBS; i++) {
    const struct sched_program_info *p = find(s, jobs[i]);
    CHECK(p != NULL, "job %d is not listed", jobs[i]);
    gpu[i] = p->gpu_seconds - base[i];
  }
  double least = gpu[0], most = gpu[0];
  for (int i = 1; i < 3; i++) {
    if (gpu[i] < least) least = gpu[i];
    if (gpu[i] > most) most = gpu[i];
  }
  double mean = (gpu[0] + gpu[1] + gpu[2]) / 3, spread = least > 0 ? (most - least) / least : 1;
  printf("GPU seconds over %.0f s, all four running: A %.2f B %.2f C %.2f (priority 1, spread "
         "%.1f%%), D %.2f (priority 2, %.2fx their mean); %llu swaps\n", MEASURE_SECONDS, gpu[0],
         gpu[1], gpu[2], 100 * spread, gpu[3], gpu[3] / mean,
         (unsigned long long)s->device[0].swaps);
  CHECK(spread <= 0.10, "equal priorities got GPU time %.1f%% apart (> 10%%)", 100 * spread);
  CHECK(gpu[3] >= 1.6 * mean && gpu[3] <= 2.4 * mean,
        "priority 2 got %.2fx the GPU time of priority 1, not about 2x", gpu[3] / mean);
  end_and_clean(s);
  return 0;
}
