/* Description: an idle cudawd costs nothing (issue 30, "Idle cudawd"), on the emulated device
 * with the delays made short (--pool-release, --idle-exit):
 *   giveback  nothing is faulted in at start; two peers that say they hold 1 GiB each make the
 *             pool fault in what their images need (the memfd's blocks, read from /proc, and
 *             the ledger entry show it); 2 s after they leave (--pool-release 2) the memfd has
 *             no pages left, the ledger entry says 0, cudawd's RSS is at most 256 MiB and
 *             MemAvailable is back within 1 GiB of what it was before cudawd started
 *   jobs       three real jobs of 72 MiB take turns through the pool (the window grows while
 *             they run and each maps it again); after the last one exits the pool gives its
 *             pages back and cudawd exits by itself (--idle-exit 4), its socket removed
 *   stop      `cudaw-ctl sched --stop` is refused while a program is joined (exit 1, says how
 *             many), stops it with --force, and at once with no program; --force alone is a
 *             usage error; any connection restarts the idle count (--idle-exit 2 asked every
 *             0.5 s for 4 s lives on, then exits); a system cudawd refuses a user that is not
 *             root (exit 5; as root)
 *   alone     a job alone under cudawd and idle on the GPU (host phases) is told so and gives
 *             back its page-locking of the pool; once a second job joins it page-locks the pool
 *             again; both verify their data
 *   usage: sched_test_pool_idle CUDAWD CUDAW_CTL JOB MODE */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "client.h"

#define MIB (1024ull * 1024)
#define GIB (1024 * MIB)

static const char *cudawd_path, *ctl_path, *job_path;
static char run_dir[64], ledger_dir[96], log_path[96];
static pid_t children[16];
static int child_count;

static void end_children(void)
{
  for (int i = 0; i < child_count; i++)
    if (children[i] > 0) kill(children[i], SIGKILL);
}

static pid_t start_cudawd(const char *const extra[])
{
  const char *argv[24] = {cudawd_path, "--gpu-list", "none", "--device-memory", "96M",
                          "--quantum", "0.5", "--min-run", "0.1", "--verbose"};
  int n = 10;
  for (int i = 0; extra[i] && n < 23; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  pid_t pid = client_spawn(argv, log_path, true);
  if (child_count < 16) children[child_count++] = pid;
  CHECK(client_wait_up(run_dir, 10), "cudawd did not answer (log %s)", log_path);
  return pid;
}

/* A field of /proc/meminfo or /proc/<pid>/status, in bytes (the figure is in kB). */
static uint64_t kb_field(const char *path, const char *key)
{
  FILE *f = fopen(path, "r");
  char line[256];
  unsigned long long kb = 0;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, n) && line[n] == ':') {
      sscanf(line + n + 1, "%llu", &kb);
      break;
    }
  if (f) fclose(f);
  return (uint64_t)kb << 10;
}

static uint64_t mem_available(void) { return kb_field("/proc/meminfo", "MemAvailable"); }

static uint64_t rss(pid_t pid)
{
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  return kb_field(path, "VmRSS");
}

/* The populated figure of cudawd pid's host-wide ledger entry (-1: no entry). */
static long long ledger_populated(pid_t pid)
{
  char path[160];
  snprintf(path, sizeof path, "%s/cudawd-pool.%d", ledger_dir, pid);
  FILE *f = fopen(path, "r");
  unsigned long long size, populated;
  long long result = f && fscanf(f, "%llu %llu", &size, &populated) == 2 ? (long long)populated
                                                                         : -1;
  if (f) fclose(f);
  return result;
}

static pid_t fake_program(uint64_t bytes)
{
  pid_t pid = client_fake_program(run_dir, bytes);
  if (child_count < 16) children[child_count++] = pid;
  return pid;
}

static void end_program(pid_t pid)
{
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

static void must_snapshot(struct sched_snapshot *s)
{
  CHECK(client_snapshot(run_dir, s), "cudawd did not answer (log %s)", log_path);
}

/* Wait until the pool holds no page (cudawd's blocks, from outside); false after `seconds`. */
static bool wait_given_back(pid_t cudawd, double seconds)
{
  for (double end = client_now() + seconds; client_now() < end; client_sleep_ms(100))
    if (client_pool_bytes(cudawd) == 0) return true;
  return false;
}

/* cudawd exits 0 by itself within `seconds`, its socket gone. */
static void wait_exit(pid_t cudawd, double seconds)
{
  int status = 0;
  pid_t done = 0;
  for (double end = client_now() + seconds; !done && client_now() < end; client_sleep_ms(100))
    done = waitpid(cudawd, &status, WNOHANG);
  CHECK(done == cudawd, "cudawd still runs %.0f s later (log %s)", seconds, log_path);
  for (int i = 0; i < child_count; i++)
    if (children[i] == cudawd) children[i] = 0;
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "cudawd ended with status 0x%x", status);
  char sock[160];
  snprintf(sock, sizeof sock, "%s/%s", run_dir, SCHED_SOCKET_NAME);
  CHECK(access(sock, F_OK) != 0, "%s left behind", sock);
  CHECK(ledger_populated(cudawd) < 0, "its ledger entry left behind");
}

static void test_giveback(void)
{
  uint64_t before = mem_available();
  const char *extra[] = {"--host-memory", "2G", "--pool-release", "2", "--idle-exit", "0", NULL};
  pid_t cudawd = start_cudawd(extra);
  client_sleep_ms(1500);
  CHECK_EQ(client_pool_bytes(cudawd), 0); /* nothing faulted in at start */
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  must_snapshot(s);
  CHECK(s->pool.enabled && s->pool.size == 2 * GIB && s->pool_window == 0,
        "a pool of %llu bytes, window %llu at start", (unsigned long long)s->pool.size,
        (unsigned long long)s->pool_window);
  pid_t peers[2];
  peers[0] = fake_program(1 * GIB);
  peers[1] = fake_program(1 * GIB);
  long long held = 0;
  for (double end = client_now() + 30; held < (long long)(2 * GIB) && client_now() < end;
       client_sleep_ms(100))
    held = client_pool_bytes(cudawd);
  CHECK(held >= (long long)(2 * GIB), "two images of 1 GiB faulted in only %lld MiB of the pool",
        held / (long long)MIB);
  uint64_t during = mem_available();
  long long ledger = 0;
  for (double end = client_now() + 5; ledger < held && client_now() < end; client_sleep_ms(100))
    ledger = ledger_populated(cudawd);
  CHECK(ledger == held, "the ledger says %lld bytes populated, the memfd holds %lld", ledger,
        held);
  printf("giveback: %lld MiB faulted in for two 1 GiB images; MemAvailable %llu -> %llu MiB\n",
         held / (long long)MIB, (unsigned long long)(before / MIB),
         (unsigned long long)(during / MIB));
  end_program(peers[0]);
  end_program(peers[1]);
  double left = client_now();
  CHECK(wait_given_back(cudawd, 10), "%lld MiB of the pool still held 10 s after the last "
        "program left (--pool-release 2)", client_pool_bytes(cudawd) / (long long)MIB);
  double took = client_now() - left;
  CHECK(took >= 1.5, "given back %.1f s after the programs left: before --pool-release 2", took);
  for (double end = client_now() + 3; ledger && client_now() < end; client_sleep_ms(100))
    ledger = ledger_populated(cudawd);
  CHECK_EQ(ledger, 0);
  uint64_t resident = rss(cudawd), after = 0;
  CHECK(resident > 0 && resident <= 256 * MIB, "cudawd's RSS is %llu MiB",
        (unsigned long long)(resident / MIB));
  /* Other processes on this machine come and go: give MemAvailable a few seconds. */
  for (double end = client_now() + 10; client_now() < end; client_sleep_ms(250))
    if ((after = mem_available()) + GIB >= before) break;
  CHECK(after + GIB >= before, "MemAvailable %llu MiB, %llu before cudawd started",
        (unsigned long long)(after / MIB), (unsigned long long)(before / MIB));
  must_snapshot(s);
  CHECK(s->pool_window == 0 && s->pool_released >= (uint64_t)held,
        "window %llu, %llu bytes given back", (unsigned long long)s->pool_window,
        (unsigned long long)s->pool_released);
  CHECK(client_file_has(log_path, "given back to the kernel"), "cudawd did not say so");
  printf("giveback: back to 0 after %.1f s; RSS %llu MiB; MemAvailable %llu MiB\n", took,
         (unsigned long long)(resident / MIB), (unsigned long long)(after / MIB));
  free(s);
}

static void test_jobs(void)
{
  const char *extra[] = {"--host-memory", "256M", "--pool-release", "1", "--idle-exit", "4",
                         NULL};
  pid_t cudawd = start_cudawd(extra);
  pid_t jobs[3];
  for (int i = 0; i < 3; i++) {
    char log[128];
    snprintf(log, sizeof log, "%s/job%d.log", run_dir, i);
    const char *argv[] = {job_path, "75497472", "30", "pieces", NULL};
    jobs[i] = client_spawn(argv, log, true);
    children[child_count++] = jobs[i];
  }
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  uint64_t max_window = 0;
  double deadline = client_now() + 150;
  for (int left = 3; left;) {
    CHECK(client_now() < deadline, "jobs did not finish within 150 s");
    if (client_snapshot(run_dir, s) && s->pool_window > max_window) max_window = s->pool_window;
    left = 0;
    for (int i = 0; i < 3; i++) {
      int status;
      if (!jobs[i]) continue;
      if (waitpid(jobs[i], &status, WNOHANG) != jobs[i]) {
        left++;
        continue;
      }
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "job %d failed (status 0x%x): see "
            "%s/job%d.log", i, status, run_dir, i);
      jobs[i] = 0;
    }
    client_sleep_ms(100);
  }
  must_snapshot(s);
  CHECK(s->pool.placed_bytes > 0, "no image went into the pool");
  CHECK(max_window > 0 && max_window <= s->pool.size, "window at most %llu of %llu",
        (unsigned long long)max_window, (unsigned long long)s->pool.size);
  double left = client_now();
  CHECK(wait_given_back(cudawd, 4), "%lld MiB of the pool still held after the jobs left",
        client_pool_bytes(cudawd) / (long long)MIB);
  uint64_t resident = rss(cudawd);
  CHECK(resident <= 256 * MIB, "cudawd's RSS is %llu MiB", (unsigned long long)(resident / MIB));
  wait_exit(cudawd, 10);
  double took = client_now() - left;
  CHECK(took >= 3, "cudawd exited %.1f s after the last job: before --idle-exit 4", took);
  CHECK(client_file_has(log_path, "(--idle-exit): stopping"), "cudawd did not say why it exits");
  printf("jobs: %.1f MiB of images placed, window up to %llu MiB, given back; cudawd exited "
         "%.1f s after the last job\n", (double)s->pool.placed_bytes / MIB,
         (unsigned long long)(max_window / MIB), took);
  free(s);
}

/* Waits up to `seconds` for the log at path to say `text`. */
static bool log_says(const char *path, const char *text, double seconds)
{
  for (double end = client_now() + seconds; client_now() < end; client_sleep_ms(50))
    if (client_file_has(path, text)) return true;
  return client_file_has(path, text);
}

static pid_t start_job(int i, const char *rounds)
{
  char log[128];
  snprintf(log, sizeof log, "%s/job%d.log", run_dir, i);
  const char *argv[] = {job_path, "75497472", rounds, "phases", NULL};
  pid_t pid = client_spawn(argv, log, true);
  children[child_count++] = pid;
  return pid;
}

static void wait_job(pid_t job, int i)
{
  int status;
  CHECK(waitpid(job, &status, 0) == job && WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "job %d failed (status 0x%x): see %s/job%d.log", i, status, run_dir, i);
  char log[128];
  snprintf(log, sizeof log, "%s/job%d.log", run_dir, i);
  CHECK(client_file_has(log, "verified"), "job %d did not verify its data (%s)", i, log);
}

/* A program alone under cudawd, idle on the GPU, gives back its page-locking of the pool (its
 * exit then waits for no unpinning); once another joins it page-locks again. */
static void test_alone(void)
{
  const char *extra[] = {"--host-memory", "256M", NULL};
  start_cudawd(extra);
  char log0[128];
  snprintf(log0, sizeof log0, "%s/job0.log", run_dir);
  pid_t first = start_job(0, "64"); /* 1.2 s on the CPU every 8 rounds */
  CHECK(log_says(log0, "MiB page-locked", 20),
        "the first job never page-locked the pool (%s)", log0);
  CHECK(log_says(log0, "giving back our page-locking", 20), "the job alone and idle was not "
        "told to give back its page-locking (%s, %s)", log0, log_path);
  CHECK(log_says(log0, "MiB given back in", 10), "the job did not give "
        "its page-locking back (%s)", log0);
  CHECK(client_file_has(log_path, "is the only program scheduled and idle"),
        "cudawd's log does not say why (%s)", log_path);
  pid_t second = start_job(1, "16");
  CHECK(log_says(log0, "page-locking its host-memory pool again", 20), "the first job was not "
        "told to page-lock again once a second joined (%s)", log0);
  bool again = false;
  for (double end = client_now() + 20; !again && client_now() < end; client_sleep_ms(50))
    again = client_count_lines(log0, "MiB page-locked") >= 2;
  CHECK(again, "the first job did not page-lock the pool again (%s)", log0);
  wait_job(second, 1);
  wait_job(first, 0);
  CHECK(client_file_has(log_path, "is no longer alone"), "cudawd's log does not say the first "
        "job is no longer alone (%s)", log_path);
  printf("alone: the job alone and idle gave back its page-locking of the pool, and page-locked "
         "it again once a second job joined; both verified their data\n");
}

/* cudaw-ctl with args (as uid when not -1), its exit status; its output appended to out. */
static int ctl(const char *args, const char *out, long uid)
{
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    char command[512];
    snprintf(command, sizeof command, "'%s' %s >> '%s' 2>&1", ctl_path, args, out);
    if (uid >= 0 && (setgid((gid_t)uid) != 0 || setuid((uid_t)uid) != 0)) _exit(126);
    execl("/bin/sh", "sh", "-c", command, (char *)NULL);
    _exit(127);
  }
  int status;
  CHECK(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_stop(void)
{
  char out[128];
  snprintf(out, sizeof out, "%s/ctl.out", run_dir);
  const char *extra[] = {"--host-memory", "off", NULL};
  pid_t cudawd = start_cudawd(extra);
  CHECK_EQ(ctl("sched --force", out, -1), 2);
  pid_t peer = fake_program(64 * MIB);
  client_sleep_ms(300);
  CHECK_EQ(ctl("sched --stop", out, -1), 1);
  CHECK(client_file_has(out, "refused: 1 program is joined"), "the refusal does not say why (%s)",
        out);
  CHECK(client_wait_up(run_dir, 1), "cudawd stopped though it refused");
  CHECK_EQ(ctl("sched --stop --force", out, -1), 0);
  wait_exit(cudawd, 5);
  end_program(peer);
  cudawd = start_cudawd(extra);
  CHECK_EQ(ctl("sched --stop", out, -1), 0);
  wait_exit(cudawd, 5);
  /* Any connection restarts the idle count (the launcher's check before its program joins). */
  const char *idle[] = {"--host-memory", "off", "--idle-exit", "2", NULL};
  cudawd = start_cudawd(idle);
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  for (double end = client_now() + 4; client_now() < end; client_sleep_ms(500))
    CHECK(client_snapshot(run_dir, s), "cudawd exited while asked every 0.5 s (--idle-exit 2)");
  free(s);
  wait_exit(cudawd, 6);
  CHECK(client_file_has(log_path, "asked it to stop: stopping"), "cudawd's log does not say who");
  if (geteuid() != 0) {
    printf("stop: refused with a program, stopped with --force and without (the non-root part "
           "needs root)\n");
    return;
  }
  /* A system cudawd: any user may connect, only root may stop it. */
  CHECK(chmod(run_dir, 0755) == 0 && chmod(out, 0666) == 0);
  const char *system[] = {"--host-memory", "off", "--system", NULL};
  cudawd = start_cudawd(system);
  CHECK_EQ(ctl("sched --stop", out, 65534), 5);
  CHECK(client_file_has(out, "only its owner or root may stop it"), "no reason given (%s)", out);
  CHECK(client_wait_up(run_dir, 1), "a user stopped the system cudawd");
  CHECK_EQ(ctl("sched --stop", out, -1), 0);
  wait_exit(cudawd, 5);
  printf("stop: refused with a program, stopped with --force and without; a user cannot stop "
         "the system cudawd\n");
}

int main(int argc, char **argv)
{
  setpgid(0, 0);
  atexit(end_children);
  CHECK(argc == 5, "usage: %s CUDAWD CUDAW_CTL JOB giveback|jobs|stop", argv[0]);
  cudawd_path = argv[1];
  ctl_path = argv[2];
  job_path = argv[3];
  snprintf(run_dir, sizeof run_dir, "/tmp/cudaw-idle-XXXXXX");
  CHECK(mkdtemp(run_dir) != NULL, "mkdtemp: %s", strerror(errno));
  snprintf(ledger_dir, sizeof ledger_dir, "%s/ledger", run_dir);
  snprintf(log_path, sizeof log_path, "%s/cudawd.log", run_dir);
  CHECK(mkdir(ledger_dir, 01777) == 0);
  setenv("CUDAW_RUN_DIR", run_dir, 1);
  setenv("CUDAWD_LEDGER", ledger_dir, 1);
  setenv("CUDAW_SHARE", "1", 1);
  setenv("CUDAW_LOG", "info", 1);
  unsetenv("CUDAW_SCHED_SOCKET");
  if (!strcmp(argv[4], "giveback")) test_giveback();
  else if (!strcmp(argv[4], "jobs")) test_jobs();
  else if (!strcmp(argv[4], "stop")) test_stop();
  else if (!strcmp(argv[4], "alone")) test_alone();
  else test_fail("unknown mode %s", argv[4]);
  char command[128];
  snprintf(command, sizeof command, "rm -rf '%s'", run_dir);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", run_dir);
  printf("ok\n");
  return 0;
}
