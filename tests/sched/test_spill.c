/* Description: cudawd's disk tier (--spill-dir) on the emulated device. Three jobs of 72 MiB take
 * turns on a device that holds one (--device-memory 96M), on a host whose MemAvailable (a fake
 * /proc/meminfo, CUDAWD_MEMINFO) this test lowers by 72 MiB for every image cudawd reports in
 * host memory. cudawd keeps 1 GiB free and spills under twice that; a read-back ahead of a turn
 * must leave twice that too. Tight host (rotate, kill, disk_full, write_fails, cleanup): under
 * 2 GiB + 72 MiB available, so one image in host memory makes it short and no read-back fits.
 * Roomy host (readback): 2 GiB + 150 MiB, short at three images, a read-back fits beside one.
 *   rotate      cudawd moves the coldest images to disk as the host runs short; the snapshot shows
 *               them on disk; a job whose turn is next (first in the queue) is never the one
 *               spilled; every job verifies its data after every resume (some streamed from disk)
 *               and exits 0; the spill directory is empty at the end (each image removed once read
 *               back)
 *   kill        once an image is on disk, cudawd is killed with -9 and a new one started: the job
 *               re-joins with its image on disk (the new snapshot shows it), resumes from it on
 *               its turn and verifies its data
 *   readback    an image on disk whose job wants its turn is read back into host memory while it
 *               waits: cudawd's log shows the read-back before that job's resume, the resume is
 *               from host memory (not "from disk"), the image is not spilled again in between,
 *               and the job says so; data verified
 *   disk_full   the spill directory's disk has 1 MiB free (CUDAWD_TEST_DISK_FREE, test-only):
 *               no spill is ordered, cudawd says why exactly once, the jobs finish verified
 *   write_fails a chunk file of each job's image is in the way (a directory of that name): its
 *               spills fail part way, as on a full disk; cudawd notes each failure, the image
 *               stays in host memory (the job resumes from it and verifies its data) and the
 *               failed write leaves no chunk file on the disk
 *   cleanup     a job is killed with -9 while its image is on disk: cudawd removes its directory
 *               (cudaw-<uid>-<pid>, which cudawd's order made) and logs it
 *   usage: sched_test_spill CUDAWD CUDAW_CTL JOB SPILL_BASE MODE
 * (SPILL_BASE: a directory on a disk, not tmpfs, for the spill directory; 77 if it is tmpfs.) */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/wait.h>

#include "tier.h"

#define MIB (1024ull * 1024)
#define JOB_BYTES (72 * MIB)
#define JOBS 3

static const char *cudawd_path, *job_path;
static uint64_t host_mib = 2048 + 70; /* MemAvailable with no image in host memory */
static struct tier tier;
static pid_t cudawd_pid, jobs[JOBS];

static void end_children(void)
{
  client_kill_all(cudawd_pid, jobs, JOBS);
}

/* MemAvailable host_mib less 72 MiB per image in host memory (the header says which host each
 * mode has). */
static uint64_t available(int images_in_host)
{
  return host_mib * MIB - (uint64_t)images_in_host * JOB_BYTES;
}

static void start_cudawd(void)
{
  cudawd_pid = tier_start_cudawd(&tier, cudawd_path);
}

/* One look at cudawd: the fake host follows the images in host memory. Returns the snapshot's
 * program count (0 if cudawd did not answer). */
static int follow(struct sched_snapshot *s)
{
  if (!client_snapshot(tier.run_dir, s)) return 0;
  int in_host = 0;
  for (int i = 0; i < s->programs; i++) {
    int state = s->program[i].state;
    if ((state == SCHED_SWAPPED_OUT || state == SCHED_SWAPPING_OUT) && !s->disk[i].on_disk &&
        s->program[i].bytes)
      in_host++;
  }
  tier_write_meminfo(&tier, available(in_host));
  return s->programs;
}

static int job_index_of(const pid_t *pids, pid_t pid)
{
  for (int i = 0; i < JOBS; i++)
    if (pids[i] == pid) return i;
  return -1;
}

static int job_index(pid_t pid) { return job_index_of(jobs, pid); }

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
  client_start_jobs(job_path, tier.run_dir, jobs, JOBS, JOB_BYTES, rounds);
}

static bool jobs_done(void)
{
  return client_jobs_done(jobs, JOBS, tier.run_dir);
}

static bool spill_dir_empty(void)
{
  DIR *d = opendir(tier.spill_dir);
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
  start_jobs("40");
  struct watch w = {0};
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  bool disk_seen = false;
  for (double end = client_now() + 110; !jobs_done();) {
    CHECK(client_now() < end, "the jobs did not finish within 110 s (see %s)", tier.run_dir);
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
  snprintf(log, sizeof log, "%s/cudawd.log", tier.run_dir);
  CHECK(client_file_has(log, "it is the coldest swapped-out image"),
        "the log does not say why a spill was chosen");
  CHECK(client_file_has(log, "swapped in from disk"), "no resume from disk in the log");
  /* The resume streamed the image from disk through the staging buffers, never whole in host
   * memory (checkpoint/disk_stream.c says what it held beyond them). */
  bool streamed = false;
  for (int i = 0; i < JOBS && !streamed; i++) {
    snprintf(log, sizeof log, "%s/job%d.log", tier.run_dir, i);
    streamed = client_file_has(log, "resume streamed from disk") &&
               client_file_has(log, "beyond the 2 staging buffers: at most 0 bytes");
  }
  CHECK(streamed, "no job's resume says it streamed from disk through its staging buffers");
  CHECK(spill_dir_empty(), "images left in %s after every job resumed", tier.spill_dir);
  printf("rotate: %llu spills, %llu swaps, every job verified its data\n",
         (unsigned long long)s->spill.spills, (unsigned long long)s->device[0].swaps);
  free(s);
}

/* Start cudawd and the jobs; return the pid of the first job seen with its image on disk. */
/* The next job seen with its image on disk (rounds of 20 ms, for at most `seconds`). */
static pid_t next_on_disk(double seconds)
{
  struct watch w = {0};
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  for (double end = client_now() + seconds; !w.on_disk;) {
    CHECK(client_now() < end, "no image went to disk within %.0f s (see %s)", seconds,
          tier.run_dir);
    CHECK(!jobs_done(), "the jobs finished before any image went to disk");
    if (follow(s)) watch_step(&w, s);
    client_sleep_ms(20);
  }
  free(s);
  return w.on_disk;
}

static pid_t start_until_on_disk(void)
{
  start_cudawd();
  start_jobs("60");
  return next_on_disk(30);
}

static void test_kill(void)
{
  pid_t spilled = start_until_on_disk();
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
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
  for (double end = client_now() + 100; !jobs_done();) {
    CHECK(client_now() < end, "the jobs did not finish within 100 s of the new cudawd (see %s)",
          tier.run_dir);
    follow(s);
    client_sleep_ms(40);
  }
  char log[160];
  snprintf(log, sizeof log, "%s/job%d.log", tier.run_dir, spilled_job);
  CHECK(client_file_has(log, "from disk"), "pid %d's log says no resume from disk", spilled);
  CHECK(spill_dir_empty(), "images left in %s after every job resumed", tier.spill_dir);
  printf("kill: pid %d re-joined the new cudawd with its image on disk, resumed from it and "
         "verified its data\n", spilled);
  free(s);
}

static bool line_has_pid(const char *line, const char *format, pid_t pid)
{
  char text[96];
  snprintf(text, sizeof text, format, (long)pid);
  return strstr(line, text) != NULL;
}

/* A job cudawd's log shows read back ahead of its turn, then resumed from host memory: its pid
 * (0: none). Fails the test if such a job was spilled again, or resumed from disk, in between. */
static pid_t read_back_then_resumed(const char *log, const pid_t *pids)
{
  FILE *f = fopen(log, "r");
  CHECK(f != NULL, "%s: %s", log, strerror(errno));
  char line[1024];
  bool read_back[JOBS] = {false};
  pid_t found = 0;
  while (!found && fgets(line, sizeof line, f))
    for (int i = 0; i < JOBS; i++) {
      if (line_has_pid(line, "pid %ld read back from disk ahead of its turn", pids[i])) {
        read_back[i] = true;
        continue;
      }
      if (!read_back[i]) continue;
      CHECK(!line_has_pid(line, "spilling pid %ld's image", pids[i]),
            "pid %d was spilled again after its read-back, before its turn (ping-pong)", pids[i]);
      CHECK(!line_has_pid(line, "cudawd: pid %ld swapped in from disk", pids[i]),
            "pid %d was read back ahead, yet its resume read from disk", pids[i]);
      if (line_has_pid(line, "cudawd: pid %ld swapped in: ", pids[i])) found = pids[i];
    }
  fclose(f);
  return found;
}

/* Wait for every job, following cudawd; `each` (may be NULL) runs after every look. */
static void run_jobs(double seconds, struct watch *w, void (*each)(void))
{
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  for (double end = client_now() + seconds; !jobs_done();) {
    CHECK(client_now() < end, "the jobs did not finish within %.0f s (see %s)", seconds,
          tier.run_dir);
    if (follow(s) && w) watch_step(w, s);
    if (each) each();
    client_sleep_ms(40);
  }
  free(s);
}

/* The number (from 1) of the first line of `path` after line `after` that holds `text`; 0 if
 * none. */
static int line_number(const char *path, const char *text, int after)
{
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "%s: %s", path, strerror(errno));
  char line[1024];
  int n = 0, found = 0;
  while (!found && fgets(line, sizeof line, f))
    if (++n > after && strstr(line, text)) found = n;
  fclose(f);
  return found;
}

static void test_readback(void)
{
  start_cudawd();
  /* Removing the files takes 8 s more (a slow disk): the resume cudawd orders meanwhile must not
   * wait for it (the job's connection thread removed them itself, and a resume waited 7.9 s on
   * the GPU machine, session 30). */
  setenv("CUDAW_TEST_REMOVE_DELAY_MS", "8000", 1);
  start_jobs("60");
  unsetenv("CUDAW_TEST_REMOVE_DELAY_MS");
  pid_t pids[JOBS];
  memcpy(pids, jobs, sizeof pids);
  struct watch w = {0};
  run_jobs(100, &w, NULL);
  char log[128];
  snprintf(log, sizeof log, "%s/cudawd.log", tier.run_dir);
  pid_t pid = read_back_then_resumed(log, pids);
  CHECK(pid, "no job was read back from disk ahead of its turn and then resumed from host memory "
        "(see %s)", log);
  snprintf(log, sizeof log, "%s/job%d.log", tier.run_dir, job_index_of(pids, pid));
  CHECK(client_file_has(log, "read back from disk ahead of our turn"),
        "pid %d's log does not say its image was read back ahead of its turn", pid);
  /* Its files went with the read-back, not only at its resume: they serve nothing more. And
   * on a thread of their own: the resume came while they were still being removed. */
  int read_at = line_number(log, "had our image read back", 0);
  int resumed_at = line_number(log, "resuming -> running", read_at);
  int removed_at = line_number(log, "(read back): its files on disk removed", read_at);
  CHECK(removed_at > 0, "pid %d's read-back left its files on disk until its resume (see %s)",
        pid, log);
  CHECK(resumed_at > 0 && resumed_at < removed_at, "pid %d's resume (line %d) waited for its "
        "files' removal (line %d, 8 s more: CUDAW_TEST_REMOVE_DELAY_MS; see %s)", pid, resumed_at,
        removed_at, log);
  CHECK(spill_dir_empty(), "images left in %s after every job resumed", tier.spill_dir);
  snprintf(log, sizeof log, "%s/cudawd.log", tier.run_dir);
  printf("readback: %d read-backs ahead of a turn, %d spills; pid %d read back, then resumed "
         "from host memory\n", client_count_lines(log, "read back from disk ahead of its turn"),
         client_count_lines(log, "spilled:"), pid);
}

static void test_disk_full(void)
{
  setenv("CUDAWD_TEST_DISK_FREE", "1048576", 1); /* for cudawd: 1 MiB free on the disk */
  start_cudawd();
  unsetenv("CUDAWD_TEST_DISK_FREE");
  start_jobs("30");
  run_jobs(100, NULL, NULL);
  char log[128];
  snprintf(log, sizeof log, "%s/cudawd.log", tier.run_dir);
  int said = client_count_lines(log, "not spilling pid");
  CHECK(client_count_lines(log, "host memory runs short") > 0 || said > 0,
        "the host never ran short: the test proves nothing (see %s)", log);
  CHECK(client_count_lines(log, "spilling pid") == said, "a spill was ordered to a full disk");
  CHECK(said == 1, "cudawd said %d times that the disk has no room (expected once)", said);
  printf("disk_full: no spill ordered, said once\n");
}

static char failed_seen[JOBS];

/* write_fails: a job whose spill just failed has no chunk file left on the disk (cudawd orders
 * it again only after 10 turns); the directory in the way is not a file. */
static void check_failed_writes(void)
{
  char log[128];
  snprintf(log, sizeof log, "%s/cudawd.log", tier.run_dir);
  for (int i = 0; i < JOBS; i++) {
    char text[64], dir[600];
    snprintf(text, sizeof text, "spill of pid %ld failed", (long)jobs[i]);
    if (!jobs[i] || failed_seen[i] || !client_file_has(log, text)) continue;
    failed_seen[i] = 1;
    snprintf(dir, sizeof dir, "%s/cudaw-%u-%ld", tier.spill_dir, (unsigned)getuid(),
             (long)jobs[i]);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
      CHECK(strncmp(e->d_name, "region-", 7) != 0 || e->d_type == DT_DIR,
            "the failed spill left %s/%s", dir, e->d_name);
    if (d) closedir(d);
  }
}

static void test_write_fails(void)
{
  start_cudawd();
  start_jobs("40");
  /* The second region's first chunk file of each job's image is a directory already: a spill's
   * write fails part way (EISDIR), after the first region's file was written. */
  for (int i = 0; i < JOBS; i++) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/cudaw-%u-%ld", tier.spill_dir, (unsigned)getuid(),
             (long)jobs[i]);
    CHECK(mkdir(dir, 0700) == 0, "%s: %s", dir, strerror(errno));
    strcat(dir, "/region-1-0.bin");
    CHECK(mkdir(dir, 0700) == 0, "%s: %s", dir, strerror(errno));
  }
  run_jobs(100, NULL, check_failed_writes);
  char log[128];
  snprintf(log, sizeof log, "%s/cudawd.log", tier.run_dir);
  int failed = client_count_lines(log, "): its image stays in host memory");
  CHECK(failed >= 1, "no failed spill noted (see %s)", log);
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL && follow(s), "cudawd did not answer after the jobs");
  CHECK(s->spill.spill_failures == (uint64_t)failed, "the snapshot counts %llu failed spills, "
        "the log %d", (unsigned long long)s->spill.spill_failures, failed);
  free(s);
  printf("write_fails: %d spills failed part way, each image stayed in host memory and left no "
         "chunk file; every job verified its data\n", failed);
}

static void test_cleanup(void)
{
  pid_t victim = start_until_on_disk();
  char dir[600], log[128], text[64];
  /* Frozen first: a job whose turn came between cudawd's report and the kill reads its image
   * back and removes it itself, which would leave nothing for cudawd to clean up. Such a job is
   * let go and the next image on disk taken instead. */
  for (int tries = 0;; tries++) {
    CHECK_EQ(kill(victim, SIGSTOP), 0);
    snprintf(dir, sizeof dir, "%s/cudaw-%u-%ld", tier.spill_dir, (unsigned)getuid(),
             (long)victim);
    if (access(dir, F_OK) == 0) break;
    CHECK(tries < 5, "5 jobs reported on disk had read their images back before the kill");
    CHECK_EQ(kill(victim, SIGCONT), 0);
    victim = next_on_disk(30);
  }
  CHECK_EQ(kill(victim, SIGKILL), 0);
  CHECK(waitpid(victim, NULL, 0) == victim);
  jobs[job_index(victim)] = 0;
  snprintf(log, sizeof log, "%s/cudawd.log", tier.run_dir);
  snprintf(text, sizeof text, "pid %ld died with its image on disk: removed", (long)victim);
  for (double end = client_now() + 10; access(dir, F_OK) == 0 || !client_file_has(log, text);) {
    CHECK(client_now() < end, "%s still there (or not logged) 10 s after pid %d died", dir,
          victim);
    client_sleep_ms(40);
  }
  run_jobs(100, NULL, NULL);
  CHECK(spill_dir_empty(), "images left in %s", tier.spill_dir);
  printf("cleanup: pid %d killed with its image on disk; cudawd removed %s\n", victim, dir);
}

int main(int argc, char **argv)
{
  setpgid(0, 0);
  atexit(end_children);
  CHECK(argc == 6, "usage: %s CUDAWD CUDAW_CTL JOB SPILL_BASE "
        "rotate|kill|readback|disk_full|write_fails|cleanup", argv[0]);
  cudawd_path = argv[1];
  job_path = argv[3];
  if (!strcmp(argv[5], "readback")) host_mib = 2048 + 150;
  if (tier_setup(&tier, argv[4], "spill", available(0)) != 0) return 77;
  if (!strcmp(argv[5], "rotate")) test_rotate();
  else if (!strcmp(argv[5], "kill")) test_kill();
  else if (!strcmp(argv[5], "readback")) test_readback();
  else if (!strcmp(argv[5], "disk_full")) test_disk_full();
  else if (!strcmp(argv[5], "write_fails")) test_write_fails();
  else if (!strcmp(argv[5], "cleanup")) test_cleanup();
  else test_fail("unknown mode %s", argv[5]);
  tier_finish(&tier, cudawd_pid);
  cudawd_pid = 0;
  printf("ok\n");
  return 0;
}
