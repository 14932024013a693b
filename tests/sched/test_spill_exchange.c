/* Description: regression test for a spilled image left on disk by a program that lives on
 * (found by the tier soak, seed 5 under load): cudawd spills an idle program's image to disk,
 * reads it back into host memory ahead of the program's turn, then brings it in through an
 * exchange rather than a resume. The files used to stay until the program ran again, and the
 * coming-in side of an exchange kept them: every such program left its whole image on the
 * user's disk. Since session 29 the read-back removes them (its log says so), and the check
 * after the exchange stands as it was.
 * Staged on the emulated device with cudawd (device of 32 MiB: one job of 24 MiB), a disk tier
 * and a fake host (CUDAWD_MEMINFO) that the test sets at each step:
 *   1. job A (idle-first: allocates, then 12 s without a call) is swapped out for job B; B gets
 *      priority 100, so that its turn lasts and only the host decides what happens next;
 *   2. the host runs short (under twice cudawd's margin): A's image, the coldest, is spilled;
 *   3. the host has room: once A wants the GPU again, its image is read back ahead of its turn;
 *   4. the host holds 20 MiB beyond the margin (the window fits, B's image beside A's does not)
 *      and B's priority drops to 1: cudawd exchanges B out and A in.
 * Once A runs again, and while it runs, its image directory must go within a few seconds; A
 * then verifies its data and exits 0. B (only the partner here) is killed once A is checked.
 *   usage: sched_test_spill_exchange CUDAWD CUDAW_CTL JOB SPILL_BASE */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/wait.h>

#include "tier.h"

#define MIB (1024ull * 1024)
#define JOB_BYTES (24 * MIB)
#define ROOMY (4096 * MIB)        /* MemAvailable with room for anything */
#define SHORT (1536 * MIB)        /* under twice the margin (1 GiB): the disk tier spills */
#define TIGHT ((1024 + 20) * MIB) /* the margin and 20 MiB: the window, not a second image */
#define ROUNDS_A "150"            /* A runs on a while after its exchange */

static const char *cudawd_path, *ctl_path, *job_path;
static struct tier tier;
static pid_t cudawd_pid, job_a, job_b;

static void end_children(void)
{
  pid_t jobs[] = {job_a, job_b};
  client_kill_all(cudawd_pid, jobs, 2);
}

static pid_t start_job(const char *mode, const char *rounds, const char *log_name)
{
  char log[160], bytes[32];
  snprintf(log, sizeof log, "%s/%s", tier.run_dir, log_name);
  snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)JOB_BYTES);
  const char *argv[] = {job_path, bytes, rounds, mode, NULL};
  return client_spawn(argv, log, true);
}

/* Job `pid` as cudawd shows it: its state, whether its image lies on disk and the device
 * memory it holds; false if cudawd does not list it. */
static bool job_state(pid_t pid, int *state, bool *on_disk, uint64_t *bytes)
{
  static struct sched_snapshot s;
  if (!client_snapshot(tier.run_dir, &s)) return false;
  for (int k = 0; k < s.programs; k++) {
    if (s.program[k].pid != pid) continue;
    *state = s.program[k].state;
    *on_disk = s.disk[k].on_disk;
    *bytes = s.program[k].bytes;
    return true;
  }
  return false;
}

/* Wait until job A is swapped out with its image on disk (want_disk) or in host memory. */
static void wait_a(bool want_disk, double seconds, const char *step)
{
  for (double end = client_now() + seconds;;) {
    int state = -1;
    bool on_disk = false;
    uint64_t bytes;
    if (job_state(job_a, &state, &on_disk, &bytes) && state == SCHED_SWAPPED_OUT &&
        on_disk == want_disk)
      return;
    CHECK(client_now() < end, "step %s: job A (pid %d) not seen swapped out with its image %s "
          "within %.0f s (see %s)", step, job_a, want_disk ? "on disk" : "in host memory",
          seconds, tier.run_dir);
    client_sleep_ms(20);
  }
}

static void set_priority(pid_t pid, int weight)
{
  char command[600];
  snprintf(command, sizeof command, "'%s' priority %d %d >/dev/null", ctl_path, (int)pid, weight);
  CHECK(system(command) == 0, "%s failed", command);
}

int main(int argc, char **argv)
{
  setpgid(0, 0);
  atexit(end_children);
  setvbuf(stdout, NULL, _IOLBF, 0);
  CHECK(argc == 5, "usage: %s CUDAWD CUDAW_CTL JOB SPILL_BASE", argv[0]);
  cudawd_path = argv[1];
  ctl_path = argv[2];
  job_path = argv[3];
  if (tier_setup(&tier, argv[4], "spillx", ROOMY) != 0) return 77;
  /* What an exchange needs of the programs (docs/sharing.md, "Exchanges"). */
  setenv("CUDAW_VMEM", "remap", 1);
  setenv("CUDAW_VMEM_PIECE", "2M", 1);
  setenv("CUDAW_CKPT_RESERVE", "off", 1);
  char log[128];
  snprintf(log, sizeof log, "%s/cudawd.log", tier.run_dir);
  const char *cudawd_argv[] = {cudawd_path, "--device-memory", "32M", "--quantum", "0.5",
                               "--min-run", "0.1", "--host-memory", "off", "--spill-dir",
                               tier.spill_dir, "--verbose", "--gpu-list", "none", NULL};
  cudawd_pid = client_spawn(cudawd_argv, log, false);
  CHECK(client_wait_up(tier.run_dir, 10), "cudawd did not answer on %s (see %s)", tier.run_dir,
        log);

  /* 1. A holds all its memory and goes idle (then it wants nothing: its image is not kept for
   * its turn); B (busy throughout) takes the device. */
  job_a = start_job("idle-first", ROUNDS_A, "a.log");
  for (double end = client_now() + 10;;) {
    int state = -1;
    bool on_disk;
    uint64_t bytes = 0;
    if (job_state(job_a, &state, &on_disk, &bytes) && state == SCHED_RUNNING &&
        bytes >= JOB_BYTES)
      break;
    CHECK(client_now() < end, "job A did not allocate its memory (see %s)", tier.run_dir);
    client_sleep_ms(20);
  }
  job_b = start_job("pieces", "100000", "b.log");
  for (double end = client_now() + 10;;) {
    int state = -1;
    bool on_disk;
    uint64_t bytes;
    if (job_state(job_b, &state, &on_disk, &bytes)) break;
    CHECK(client_now() < end, "job B did not join cudawd (see %s)", tier.run_dir);
    client_sleep_ms(20);
  }
  set_priority(job_b, 100);
  wait_a(false, 10, "1 (A swapped out for B)");
  printf("1. job A (pid %d) swapped out for job B (pid %d)\n", job_a, job_b);

  /* 2. Short host: A's image goes to disk. */
  tier_write_meminfo(&tier, SHORT);
  wait_a(true, 10, "2 (A spilled)");
  printf("2. job A's image spilled to disk\n");

  /* 3. Room: A's image is read back once A wants the GPU again (its idle phase ends). */
  tier_write_meminfo(&tier, ROOMY);
  wait_a(false, 20, "3 (A read back)");
  char a_log[160];
  snprintf(a_log, sizeof a_log, "%s/a.log", tier.run_dir);
  /* cudawd hears of the read-back before the job's log line is written: wait for it. */
  for (double end = client_now() + 5;
       !client_file_has(a_log, "had our image read back from disk ahead of our turn");) {
    CHECK(client_now() < end, "job A's image left the disk without a read-back (see %s)", a_log);
    client_sleep_ms(20);
  }
  /* Its files go on a thread of their own, just after. */
  for (double end = client_now() + 10;
       !client_file_has(a_log, "(read back): its files on disk removed");) {
    CHECK(client_now() < end, "job A's read-back left its files on disk (see %s)", a_log);
    client_sleep_ms(20);
  }
  printf("3. job A's image read back ahead of its turn, its files removed\n");

  /* 4. Tight host, B's turn over: B out and A in through an exchange. cudawd reads the host
   * at most every 0.25 s: the new figure first, then the priority. */
  tier_write_meminfo(&tier, TIGHT);
  client_sleep_ms(600);
  set_priority(job_b, 1);
  for (double end = client_now() + 20; !client_file_has(a_log, "sched: exchange in:");) {
    CHECK(client_now() < end, "job A did not come in through an exchange within 20 s: the case "
          "was not tested (see %s)", tier.run_dir);
    CHECK(waitpid(job_a, NULL, WNOHANG) == 0, "job A ended before coming in (see %s)", a_log);
    client_sleep_ms(20);
  }
  printf("4. job A came in through an exchange\n");

  /* Running again, A has no use for the files: they go now, not when it exits (cudawd removes
   * what a program it ordered to spill leaves behind, but not after a restart, and a program
   * may run for days). */
  char dir[700];
  snprintf(dir, sizeof dir, "%s/cudaw-%u-%d", tier.spill_dir, (unsigned)geteuid(), (int)job_a);
  for (double end = client_now() + 3; access(dir, F_OK) == 0;) {
    CHECK(waitpid(job_a, NULL, WNOHANG) == 0, "job A ended before its image was seen removed: "
          "the case was not tested (see %s)", a_log);
    CHECK(client_now() < end, "job A (pid %d) runs again after coming in through an exchange, "
          "and its spilled image is still on disk 3 s later: %s", (int)job_a, dir);
    client_sleep_ms(20);
  }
  printf("job A runs, and its spilled image is gone from %s\n", tier.spill_dir);

  int status = 0;
  for (double end = client_now() + 60; waitpid(job_a, &status, WNOHANG) != job_a;) {
    CHECK(client_now() < end, "job A did not finish within 60 s (see %s)", tier.run_dir);
    client_sleep_ms(50);
  }
  job_a = 0;
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "job A failed (status 0x%x): see %s",
        status, a_log);
  CHECK(client_file_has(a_log, ROUNDS_A " rounds of idle-first over"), "job A exited 0 without "
        "saying that it verified its data (see %s)", a_log);
  printf("job A verified its data and exited\n");

  kill(job_b, SIGKILL);
  waitpid(job_b, NULL, 0);
  job_b = 0;
  tier_finish(&tier, cudawd_pid);
  cudawd_pid = 0;
  printf("ok\n");
  return 0;
}
