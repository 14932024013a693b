/* Description: cudawd's disk tier (--spill-dir) on the emulated device. Three jobs of 72 MiB take
 * turns on a device that holds one (--device-memory 96M), on a host that has room for two
 * swapped-out images before it runs short (under 2 GiB available, twice what cudawd keeps free):
 * a fake /proc/meminfo (CUDAWD_MEMINFO) whose MemAvailable this test lowers by 72 MiB for every
 * image cudawd reports in host memory.
 *   rotate  cudawd moves the coldest images to disk as the host runs short; the snapshot shows
 *           them on disk; a job whose turn is next (first in the queue) is never the one spilled;
 *           every job verifies its data after every resume (some from disk) and exits 0; the
 *           spill directory is empty at the end (each image removed once read back)
 *   kill    once an image is on disk, cudawd is killed with -9 and a new one started: the job
 *           re-joins with its image on disk (the new snapshot shows it), resumes from it on its
 *           turn and verifies its data
 *   usage: sched_test_spill CUDAWD CUDAW_CTL JOB SPILL_BASE MODE
 * (SPILL_BASE: a directory on a disk, not tmpfs, for the spill directory; 77 if it is tmpfs.) */
#define _GNU_SOURCE
#include <linux/magic.h>
#include <signal.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#include "client.h"

#define MIB (1024ull * 1024)
#define JOB_BYTES (72 * MIB)
#define JOBS 3

static const char *cudawd_path, *job_path;
static char run_dir[64], spill_dir[512], meminfo[160];
static pid_t cudawd_pid, jobs[JOBS];

static void end_children(void)
{
  client_kill_all(cudawd_pid, jobs, JOBS);
}

/* MemAvailable 2 GiB + 150 MiB less 72 MiB per image in host memory: two images fit, a third
 * does not (cudawd keeps 1 GiB free and moves images to disk under twice that). Three jobs
 * rotating need three (the one going out, the next one's, the third's) unless one is on disk. */
static void write_meminfo(int images_in_host)
{
  client_write_meminfo(meminfo, (2048 + 150) * MIB - (uint64_t)images_in_host * JOB_BYTES);
}

static void start_cudawd(void)
{
  char log[128];
  snprintf(log, sizeof log, "%s/cudawd.log", run_dir);
  const char *argv[] = {cudawd_path, "--device-memory", "96M", "--quantum", "0.5", "--min-run",
                        "0.1", "--host-memory", "off", "--spill-dir", spill_dir, "--verbose",
                        "--gpu-list", "none", NULL};
  cudawd_pid = client_spawn(argv, log, false);
  CHECK(client_wait_up(run_dir, 10), "cudawd did not answer on %s (see %s)", run_dir, log);
}

/* One look at cudawd: the fake host follows the images in host memory. Returns the snapshot's
 * program count (0 if cudawd did not answer). */
static int follow(struct sched_snapshot *s)
{
  if (!client_snapshot(run_dir, s)) return 0;
  int in_host = 0;
  for (int i = 0; i < s->programs; i++) {
    int state = s->program[i].state;
    if ((state == SCHED_SWAPPED_OUT || state == SCHED_SWAPPING_OUT) && !s->disk[i].on_disk &&
        s->program[i].bytes)
      in_host++;
  }
  write_meminfo(in_host);
  return s->programs;
}

static int job_index(pid_t pid)
{
  for (int i = 0; i < JOBS; i++)
    if (jobs[i] == pid) return i;
  return -1;
}

struct watch {
  double at;               /* when the last snapshot was taken */
  uint64_t spills[JOBS];   /* per job, as last seen */
  pid_t head;              /* the swapped-out job last seen first in the queue */
  uint64_t total_spills;
  pid_t on_disk;           /* a job seen with its image on disk (0: none yet) */
};

/* Follow the snapshot: a job spilled since the last look must not be the one that was first in
 * the queue then (its turn was next). */
static void watch_step(struct watch *w, const struct sched_snapshot *s)
{
  pid_t head = 0;
  /* Two looks further apart than a turn (a loaded machine) may miss a whole turn between them:
   * the queue seen then is no judge. */
  double now = client_now();
  if (now - w->at > 0.3) w->head = 0;
  w->at = now;
  for (int i = 0; i < s->programs; i++) {
    int j = job_index(s->program[i].pid);
    if (j < 0 || s->program[i].state == SCHED_EXITED) continue;
    if (s->disk[i].spills > w->spills[j]) {
      CHECK(s->program[i].pid != w->head, "pid %d was spilled while its turn was next",
            s->program[i].pid);
      w->total_spills += s->disk[i].spills - w->spills[j];
      w->spills[j] = s->disk[i].spills;
    }
    if (s->disk[i].on_disk) w->on_disk = s->program[i].pid;
    /* The head of the queue: waits for memory (or host memory), not behind another. */
    int why = s->detail[i].wait_reason;
    if (s->program[i].state == SCHED_SWAPPED_OUT &&
        (why == SCHED_WAIT_MEMORY || why == SCHED_WAIT_HOST_MEMORY))
      head = s->program[i].pid;
  }
  w->head = head;
}

static void start_jobs(const char *rounds)
{
  client_start_jobs(job_path, run_dir, jobs, JOBS, JOB_BYTES, rounds);
}

static bool jobs_done(void)
{
  return client_jobs_done(jobs, JOBS, run_dir);
}

static bool spill_dir_empty(void)
{
  DIR *d = opendir(spill_dir);
  CHECK(d != NULL);
  int entries = 0;
  for (struct dirent *e; (e = readdir(d));)
    entries += e->d_name[0] != '.';
  closedir(d);
  return entries == 0;
}

static void test_rotate(void)
{
  start_cudawd();
  start_jobs("90");
  struct watch w = {0};
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  bool disk_seen = false;
  for (double end = client_now() + 50; !jobs_done();) {
    CHECK(client_now() < end, "the jobs did not finish within 50 s (see %s)", run_dir);
    if (follow(s)) {
      watch_step(&w, s);
      disk_seen |= s->spill.enabled && s->spill.on_disk > 0 && s->spill.disk_bytes > 0;
    }
    client_sleep_ms(40);
  }
  CHECK(follow(s), "cudawd did not answer after the jobs");
  CHECK(s->spill.enabled, "the snapshot says there is no disk tier");
  CHECK(w.total_spills >= 2 && s->spill.spills >= 2, "%llu spills seen, cudawd counts %llu: "
        "the swaps were not unblocked through the disk", (unsigned long long)w.total_spills,
        (unsigned long long)s->spill.spills);
  CHECK(disk_seen, "no image was ever shown on disk");
  CHECK(s->spill.spill_failures == 0, "%llu spills failed",
        (unsigned long long)s->spill.spill_failures);
  char log[128];
  snprintf(log, sizeof log, "%s/cudawd.log", run_dir);
  CHECK(client_file_has(log, "it is the coldest swapped-out image"),
        "the log does not say why a spill was chosen");
  CHECK(client_file_has(log, "swapped in from disk"), "no resume from disk in the log");
  /* The resume streamed the image from disk through the staging buffers, never whole in host
   * memory (checkpoint/disk_stream.c says what it held beyond them). */
  bool streamed = false;
  for (int i = 0; i < JOBS && !streamed; i++) {
    snprintf(log, sizeof log, "%s/job%d.log", run_dir, i);
    streamed = client_file_has(log, "resume streamed from disk") &&
               client_file_has(log, "beyond the 2 staging buffers: at most 0 bytes");
  }
  CHECK(streamed, "no job's resume says it streamed from disk through its staging buffers");
  CHECK(spill_dir_empty(), "images left in %s after every job resumed", spill_dir);
  printf("rotate: %llu spills, %llu swaps, every job verified its data\n",
         (unsigned long long)s->spill.spills, (unsigned long long)s->device[0].swaps);
  free(s);
}

static void test_kill(void)
{
  start_cudawd();
  start_jobs("60");
  struct watch w = {0};
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  for (double end = client_now() + 30; !w.on_disk;) {
    CHECK(client_now() < end, "no image went to disk within 30 s (see %s)", run_dir);
    CHECK(!jobs_done(), "the jobs finished before any image went to disk");
    if (follow(s)) watch_step(&w, s);
    client_sleep_ms(20);
  }
  pid_t spilled = w.on_disk;
  int spilled_job = job_index(spilled); /* jobs[] forgets each job as it exits */
  CHECK_EQ(kill(cudawd_pid, SIGKILL), 0);
  CHECK(waitpid(cudawd_pid, NULL, 0) == cudawd_pid);
  start_cudawd();
  /* The spilled job re-joins and says its image is on disk. */
  bool rejoined = false;
  for (double end = client_now() + 10; !rejoined;) {
    CHECK(client_now() < end, "pid %d did not re-join with its image on disk within 10 s",
          spilled);
    if (follow(s))
      for (int i = 0; i < s->programs; i++)
        rejoined |= s->program[i].pid == spilled && s->program[i].state == SCHED_SWAPPED_OUT &&
                    s->disk[i].on_disk && s->disk[i].bytes > 0 &&
                    s->disk[i].spills == 0; /* it said so: the new cudawd did not spill it */
    client_sleep_ms(20);
  }
  for (double end = client_now() + 40; !jobs_done();) {
    CHECK(client_now() < end, "the jobs did not finish within 40 s of the new cudawd (see %s)",
          run_dir);
    follow(s);
    client_sleep_ms(40);
  }
  char log[160];
  snprintf(log, sizeof log, "%s/job%d.log", run_dir, spilled_job);
  CHECK(client_file_has(log, "from disk"), "pid %d's log says no resume from disk", spilled);
  CHECK(spill_dir_empty(), "images left in %s after every job resumed", spill_dir);
  printf("kill: pid %d re-joined the new cudawd with its image on disk, resumed from it and "
         "verified its data\n", spilled);
  free(s);
}

int main(int argc, char **argv)
{
  setpgid(0, 0);
  atexit(end_children);
  CHECK(argc == 6, "usage: %s CUDAWD CUDAW_CTL JOB SPILL_BASE rotate|kill", argv[0]);
  cudawd_path = argv[1];
  job_path = argv[3];
  struct statfs fs;
  CHECK(statfs(argv[4], &fs) == 0, "%s: %s", argv[4], strerror(errno));
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) {
    printf("SKIP: %s is memory-backed: no disk tier to test there\n", argv[4]);
    return 77;
  }
  snprintf(run_dir, sizeof run_dir, "/tmp/cudaw-spill-XXXXXX");
  CHECK(mkdtemp(run_dir) != NULL, "mkdtemp: %s", strerror(errno));
  snprintf(spill_dir, sizeof spill_dir, "%s/spill-XXXXXX", argv[4]);
  CHECK(mkdtemp(spill_dir) != NULL, "mkdtemp %s: %s", spill_dir, strerror(errno));
  snprintf(meminfo, sizeof meminfo, "%s/meminfo", run_dir);
  write_meminfo(0);
  setenv("CUDAWD_MEMINFO", meminfo, 1);
  setenv("CUDAW_RUN_DIR", run_dir, 1);
  setenv("CUDAW_SHARE", "1", 1);
  setenv("CUDAW_LOG", "info", 1);
  if (!strcmp(argv[5], "rotate")) test_rotate();
  else if (!strcmp(argv[5], "kill")) test_kill();
  else test_fail("unknown mode %s", argv[5]);
  if (cudawd_pid > 0) kill(cudawd_pid, SIGTERM);
  waitpid(cudawd_pid, NULL, 0);
  cudawd_pid = 0;
  char command[700];
  snprintf(command, sizeof command, "rm -rf '%s' '%s'", run_dir, spill_dir);
  if (!getenv("KEEP") && system(command) != 0) fprintf(stderr, "could not remove %s\n", run_dir);
  printf("ok\n");
  return 0;
}
