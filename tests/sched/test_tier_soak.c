/* Description: the tier soak (issue 30's CI item): jobs of random sizes and phases rotate through
 * cudawd on an emulated device that holds one or two of them (--device-memory 96M), on a fake
 * host (CUDAWD_MEMINFO) with room for about one swapped-out image, with a disk tier
 * (--spill-dir, on disk) for the rest. Six jobs start; while events remain, one that ends is
 * replaced so that four rotate (how soon jobs end depends on the machine's load). During the
 * run, in an order drawn from the seed:
 *   spill     cudawd is killed -9 while a job's image is being written to disk, and restarted
 *             on the same run dir: every living job re-joins
 *   swap      the same while a checkpoint or resume is under way
 *   job       one job is killed -9 in the middle of its checkpoint or of its spill
 *   exchange  (only with a cudawd that orders exchanges) cudawd or one of the two programs is
 *             killed -9 while an exchange streams one out as the other comes in (the jobs run
 *             with pieces and private images); a side killed must leave the exchange counted
 *             as failed
 * Each event waits for the state it needs, read from cudawd's report: the fake host is squeezed
 * (too tight for a second image) while the program whose turn is next has its image in host
 * memory (exchange), or while another's is there (spill), so that cudawd acts at once instead
 * of when it has nothing else to do.
 * At the end every surviving job has verified all its data (its own pattern, every round, exit
 * 0), no killed job is left in cudawd's report as anything but exited, a living job's image on
 * disk never went missing, and the images killed jobs left on disk are listed.
 * The seed, the jobs and every kill are printed so that a failure can be replayed.
 *   usage: sched_test_tier_soak CUDAWD CUDAW_CTL JOB SPILL_BASE SEED
 * (SPILL_BASE: a directory on a disk, not tmpfs; 77 if it is memory-backed.) */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/wait.h>

#include "tier.h"

#define MIB (1024ull * 1024)
#define JOBS_AT_START 6 /* two may be killed (a job event, a side of an exchange) */
/* While events remain, a job that ends is replaced so that this many rotate on: how fast jobs
 * finish depends on the machine's load, the events must not run out of jobs. */
#define JOBS_ROTATING 4
#define MAX_JOBS 32
#define SOAK_SECONDS 100 /* the whole run, at the most (ctest's timeout is above it) */

enum job_state { JOB_RUNNING, JOB_PASSED, JOB_KILLED };

struct job {
  pid_t pid;
  uint64_t bytes;
  int rounds;
  const char *mode;
  enum job_state state;
  char log[128];
};

/* The kinds of event, in the order drawn from the seed. */
enum event { KILL_CUDAWD_IN_SPILL, KILL_CUDAWD_IN_SWAP, KILL_JOB_IN_CHECKPOINT, KILL_IN_EXCHANGE,
             EVENTS };
static const char *const event_names[] = {"kill -9 of cudawd in the middle of a spill",
                                          "kill -9 of cudawd in the middle of a swap",
                                          "kill -9 of a job in its checkpoint or spill",
                                          "kill -9 in the middle of an exchange"};

static const char *cudawd_path, *job_path;
static struct tier tier;
static pid_t cudawd_pid;
static struct job jobs[MAX_JOBS];
static int job_count;
static bool topping_up; /* while events remain */
static unsigned seed, draws; /* draws: rand_r's state, from the seed */
static double t0;
static int cudawd_restarts;
/* What the event awaited needs of the fake host (see available()): a host too tight for a second
 * image while the program whose turn is next has its image in host memory (exchange), or while
 * an image of another is there (spill). The squeeze follows cudawd's report at every look, and
 * lets go one second in four (let_go). */
enum squeeze_for { SQUEEZE_NONE, SQUEEZE_FOR_EXCHANGE, SQUEEZE_FOR_SPILL };
static enum squeeze_for awaiting;
static bool squeeze, let_go;
static int exchanges_seen, exchange_kills;
static pid_t exchange_last[2]; /* the pair last seen exchanging, counted once */

static void end_children(void)
{
  if (cudawd_pid > 0) kill(cudawd_pid, SIGKILL);
  for (int i = 0; i < job_count; i++)
    if (jobs[i].pid > 0 && jobs[i].state == JOB_RUNNING) kill(jobs[i].pid, SIGKILL);
}

/* A number in [0, n) from the seed's sequence (rand_r: the sequence is the seed's alone). */
static unsigned draw(unsigned n)
{
  return (unsigned)rand_r(&draws) % n;
}

static double elapsed(void)
{
  return client_now() - t0;
}

/* Whether this cudawd can order exchanges (a swap streaming one program out as the other comes
 * in, issue 30 item 1). The one place that knows how to tell: an exchange-capable cudawd
 * documents its exchange option in --help. */
static bool cudawd_orders_exchanges(void)
{
  char command[600];
  snprintf(command, sizeof command, "'%s' --help 2>&1", cudawd_path);
  FILE *help = popen(command, "r");
  CHECK(help != NULL, "cannot run %s --help", cudawd_path);
  char line[512];
  bool found = false;
  while (fgets(line, sizeof line, help)) found |= strstr(line, "exchange") != NULL;
  pclose(help);
  return found;
}

/* Whether a job not killed has resumed from disk (its log says so), looked at once a second. */
static bool disk_resume_seen(void)
{
  static double looked_at;
  static bool seen;
  if (client_now() - looked_at < 1) return seen;
  looked_at = client_now();
  seen = false; /* the one that did may have been killed since */
  for (int i = 0; i < job_count && !seen; i++)
    seen = jobs[i].state != JOB_KILLED && jobs[i].log[0] &&
           client_file_has(jobs[i].log, "resume streamed from disk");
  return seen;
}

/* MemAvailable 2 GiB + 80 MiB less the bytes of the images in host memory: about one image fits
 * (one of 72 MiB, or two small ones) before cudawd moves images to disk (under 2 GiB), when it
 * has nothing else to do. Squeezed, the host holds one image of any size beyond cudawd's margin
 * (1 GiB), and beside one only 39 MiB: no second image fits (40 MiB and up: the checkpoint is
 * refused for host memory), but the window (one piece of 2 MiB + 16 MiB) does, and so does any
 * job's image once another's is gone (they differ by 32 MiB at most). A refused checkpoint
 * makes cudawd act at once (docs/sharing.md): it exchanges the two where the program whose turn
 * is next has its image in host memory ("Exchanges"), else it spills the coldest image there
 * that is not needed soon (the disk tier). The squeeze lets go one second in four: a host that
 * short also refuses the checkpoint a running job's growth needs (not an exchange: the job that
 * waits is not swapped out), and the jobs must not wait on each other for good.
 * While the exchange is awaited and the host is not squeezed, it has room for four more images
 * (EXCHANGE_ROOM): an exchange needs the image of the program whose turn is next in host memory,
 * and on a host with room for one, cudawd spills the others beside the swaps (sched/spill.c) as
 * soon as a second one comes, so that the next one's was most often on disk already (CI, seed 2
 * under ASan: no exchange in 25 s of waiting). */
#define EXCHANGE_ROOM (4 * 72 * MIB)
static uint64_t available(uint64_t image_bytes_in_host)
{
  if (squeeze) return (1024 + (image_bytes_in_host ? 39 : 80)) * MIB;
  uint64_t room = (2048 + 80) * MIB + (awaiting == SQUEEZE_FOR_EXCHANGE ? EXCHANGE_ROOM : 0);
  uint64_t left = room > image_bytes_in_host ? room - image_bytes_in_host : 0;
  /* Until a job that may survive has resumed from disk (the soak requires one): under twice
   * the margin plus the smallest image, so that cudawd reads no image back ahead of its turn
   * and resumes stream from disk, yet at twice the margin or more (no more spills than before). */
  uint64_t no_read_back = (2048 + 39) * MIB;
  return !disk_resume_seen() && left > no_read_back ? no_read_back : left;
}

static void start_cudawd(void)
{
  cudawd_pid = tier_start_cudawd(&tier, cudawd_path);
}

static int job_of(pid_t pid)
{
  for (int i = 0; i < job_count; i++)
    if (jobs[i].pid == pid) return i;
  return -1;
}

/* <spill dir>/cudaw-<uid>-<pid>: where job i writes its image (cudart_shim/glue/sched.c). */
static void image_dir(int i, char *out, size_t size)
{
  snprintf(out, size, "%s/cudaw-%u-%d", tier.spill_dir, (unsigned)geteuid(), (int)jobs[i].pid);
}

/* 1: job i's image directory holds a finished image (its manifest, written last); 0: the
 * directory exists without one (being written); -1: no directory. */
static int image_state(int i)
{
  char dir[600], manifest[700];
  image_dir(i, dir, sizeof dir);
  snprintf(manifest, sizeof manifest, "%s/manifest.json", dir);
  if (access(manifest, F_OK) == 0) return 1;
  return access(dir, F_OK) == 0 ? 0 : -1;
}

static void start_job(void);

/* Reap the jobs that ended: a job that was not killed must have exited 0 (it verified all its
 * data); while events remain, start others to keep JOBS_ROTATING running. Returns how many
 * run. */
static int reap(void)
{
  int running = 0;
  for (int i = 0; i < job_count; i++) {
    if (jobs[i].state != JOB_RUNNING) continue;
    int status;
    if (waitpid(jobs[i].pid, &status, WNOHANG) != jobs[i].pid) {
      running++;
      continue;
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "seed %u: job %d (pid %d) failed "
          "(status 0x%x) at %.1f s: see %s", seed, i, jobs[i].pid, status, elapsed(),
          jobs[i].log);
    /* Its own word that the whole pattern was checked, every round (sched_share_job). */
    char verified[160];
    snprintf(verified, sizeof verified, "%d rounds of %s over %llu bytes verified", jobs[i].rounds,
             jobs[i].mode, (unsigned long long)jobs[i].bytes);
    CHECK(client_file_has(jobs[i].log, verified), "seed %u: job %d (pid %d) exited 0 without "
          "saying '%s' (see %s)", seed, i, jobs[i].pid, verified, jobs[i].log);
    jobs[i].state = JOB_PASSED;
    printf("%6.2f s  job %d (pid %d) verified all its data and exited\n", elapsed(), i,
           jobs[i].pid);
  }
  for (; topping_up && running < JOBS_ROTATING && job_count < MAX_JOBS; running++)
    start_job();
  return running;
}

/* A job's image on disk that cudawd shows must be there: check a living job seen swapped out
 * with its image on disk (looked at again, every 100 ms for up to 2 s, before failing: it may
 * have been read back and removed between the snapshot and the look, its word to cudawd still
 * on its way or not yet read by a loaded cudawd). */
static void check_images_kept(const struct sched_snapshot *s)
{
  for (int k = 0; k < s->programs; k++) {
    int i = job_of(s->program[k].pid);
    if (i < 0 || jobs[i].state != JOB_RUNNING || !s->disk[k].on_disk ||
        s->program[k].state != SCHED_SWAPPED_OUT || image_state(i) == 1)
      continue;
    struct sched_snapshot *again = calloc(1, sizeof *again);
    CHECK(again != NULL);
    bool still = true;
    for (int look = 0; still && image_state(i) != 1 && look < 20; look++) {
      client_sleep_ms(100);
      still = false;
      if (client_snapshot(tier.run_dir, again))
        for (int m = 0; m < again->programs; m++)
          still |= again->program[m].pid == jobs[i].pid && again->disk[m].on_disk &&
                   again->program[m].state == SCHED_SWAPPED_OUT &&
                   again->program[m].swaps == s->program[k].swaps;
    }
    free(again);
    CHECK(!still || image_state(i) == 1, "seed %u: job %d (pid %d) is swapped out with its "
          "image on disk, and its image is gone from %s", seed, i, jobs[i].pid, tier.spill_dir);
  }
}

/* One look at cudawd: the fake host follows the image bytes in host memory and, while an event
 * is awaited, squeezes when cudawd's state is the one the event needs; a living job's image on
 * disk is checked. False if cudawd did not answer. */
static bool look(struct sched_snapshot *s)
{
  if (!client_snapshot(tier.run_dir, s)) return false;
  uint64_t in_host = 0;
  bool next_in_host = false, other_in_host = false;
  for (int k = 0; k < s->programs; k++) {
    int state = s->program[k].state;
    if ((state != SCHED_SWAPPED_OUT && state != SCHED_SWAPPING_OUT) || s->disk[k].on_disk)
      continue;
    in_host += s->program[k].bytes;
    /* Its turn is next: it waits for memory with nobody ahead of it (not QUEUED). */
    int why = s->detail[k].wait_reason;
    bool next = why == SCHED_WAIT_MEMORY || why == SCHED_WAIT_HOST_MEMORY;
    if (state == SCHED_SWAPPED_OUT) {
      next_in_host |= next;
      other_in_host |= !next;
    }
  }
  squeeze = !let_go && ((awaiting == SQUEEZE_FOR_EXCHANGE && next_in_host) ||
                        (awaiting == SQUEEZE_FOR_SPILL && other_in_host));
  tier_write_meminfo(&tier, available(in_host));
  check_images_kept(s);
  return true;
}

/* No job killed or ended is shown as a living program (a ghost), within a few seconds of its
 * end: checked after each kill, after each restart of cudawd and at the end. */
static void check_no_ghost(void)
{
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  for (double end = client_now() + 5;;) {
    int ghost = -1;
    CHECK(look(s), "seed %u: cudawd did not answer", seed);
    for (int k = 0; k < s->programs && ghost < 0; k++) {
      int i = job_of(s->program[k].pid);
      if (i >= 0 && jobs[i].state != JOB_RUNNING && s->program[k].state != SCHED_EXITED)
        ghost = i;
    }
    if (ghost < 0) break;
    CHECK(client_now() < end, "seed %u: job %d (pid %d, %s) is gone, and cudawd still shows "
          "it %s", seed, ghost, jobs[ghost].pid,
          jobs[ghost].state == JOB_KILLED ? "killed" : "exited", "as a living program");
    client_sleep_ms(50);
  }
  free(s);
}

static void kill_job(int i, const char *where)
{
  CHECK_EQ(kill(jobs[i].pid, SIGKILL), 0);
  CHECK(waitpid(jobs[i].pid, NULL, 0) == jobs[i].pid);
  jobs[i].state = JOB_KILLED;
  printf("%6.2f s  KILL -9 job %d (pid %d, %llu MiB) %s\n", elapsed(), i, jobs[i].pid,
         (unsigned long long)(jobs[i].bytes / MIB), where);
  check_no_ghost();
}

/* cudawd killed -9 (why), restarted on the same run dir after a pause drawn from the seed; every
 * living job must re-join the new one. */
static void kill_cudawd(const char *why, struct sched_snapshot *s)
{
  CHECK_EQ(kill(cudawd_pid, SIGKILL), 0);
  CHECK(waitpid(cudawd_pid, NULL, 0) == cudawd_pid);
  long down_ms = 100 + (long)draw(400);
  printf("%6.2f s  KILL -9 cudawd (pid %d) %s; restarted %ld ms later\n", elapsed(), cudawd_pid,
         why, down_ms);
  client_sleep_ms(down_ms);
  start_cudawd();
  cudawd_restarts++;
  for (double end = client_now() + 15;;) {
    int missing = -1;
    bool seen = look(s);
    reap();
    for (int i = 0; i < job_count && missing < 0; i++) {
      bool listed = false;
      for (int k = 0; seen && k < s->programs; k++)
        listed |= s->program[k].pid == jobs[i].pid && s->program[k].state != SCHED_EXITED;
      if (jobs[i].state == JOB_RUNNING && !listed) missing = i;
    }
    if (seen && missing < 0) break;
    CHECK(client_now() < end, "seed %u: job %d (pid %d) did not re-join the new cudawd within "
          "15 s (see %s)", seed, missing, missing >= 0 ? jobs[missing].pid : 0, jobs[missing].log);
    client_sleep_ms(20);
  }
  check_no_ghost();
  printf("%6.2f s  every living job re-joined the new cudawd, no killed one\n", elapsed());
}

/* A job whose image is being written to disk now (its directory exists, its manifest not yet;
 * cudawd does not show it on disk yet), or -1. */
static int job_in_spill(const struct sched_snapshot *s)
{
  for (int k = 0; k < s->programs; k++) {
    int i = job_of(s->program[k].pid);
    if (i >= 0 && jobs[i].state == JOB_RUNNING && s->program[k].state == SCHED_SWAPPED_OUT &&
        !s->disk[k].on_disk && image_state(i) == 0)
      return i;
  }
  return -1;
}

/* A job in a checkpoint (which) or a resume now, or -1. */
static int job_in_state(const struct sched_snapshot *s, int which)
{
  for (int k = 0; k < s->programs; k++) {
    int i = job_of(s->program[k].pid);
    if (i >= 0 && jobs[i].state == JOB_RUNNING && s->program[k].state == which) return i;
  }
  return -1;
}

/* An exchange under way (cudawd says one is active): one job streams out while another comes
 * in, at the same time (an ordinary swap finishes the checkpoint before the resume starts).
 * Sets *out and *in; counts each pair once in exchanges_seen. */
static bool exchange_in_progress(const struct sched_snapshot *s, int *out, int *in)
{
  *out = job_in_state(s, SCHED_SWAPPING_OUT);
  *in = job_in_state(s, SCHED_SWAPPING_IN);
  if (!s->exchange.active || *out < 0 || *in < 0) return false;
  if (exchange_last[0] != jobs[*out].pid || exchange_last[1] != jobs[*in].pid) {
    exchanges_seen++;
    exchange_last[0] = jobs[*out].pid;
    exchange_last[1] = jobs[*in].pid;
  }
  return true;
}

/* After a side of an exchange was killed: cudawd counts that exchange as failed (its side
 * answered -ESRCH), within a few seconds. */
static void check_exchange_failed(struct sched_snapshot *s)
{
  for (double end = client_now() + 5;;) {
    if (look(s) && s->exchange.failures >= 1) return;
    CHECK(client_now() < end, "seed %u: a side of an exchange was killed and cudawd does not "
          "count a failed exchange (see %s)", seed, tier.run_dir);
    reap();
    client_sleep_ms(20);
  }
}

/* Wait for the window of event e, no sooner than a moment drawn from the seed, and kill in it
 * after a delay drawn from the seed. False if the window did not come before the jobs ran out
 * or within `seconds`. */
static bool provoke(enum event e, struct sched_snapshot *s, double seconds)
{
  long delay_ms = (long)draw(e == KILL_CUDAWD_IN_SPILL ? 20 : 5);
  bool take_cudawd = draw(2) == 0; /* exchange: cudawd, or one of the two programs */
  bool in_spill = draw(2) == 0;    /* job: in its spill, or in its checkpoint */
  double not_before = elapsed() + 0.3 + (double)draw(1200) / 1000;
  printf("%6.2f s  waiting for: %s, not before %.2f s, then %ld ms into it\n", elapsed(),
         event_names[e], not_before, delay_ms);
  for (double end = client_now() + seconds; client_now() < end;) {
    if (elapsed() < not_before) {
      reap();
      look(s);
      client_sleep_ms(20);
      continue;
    }
    if (reap() < 2) break; /* one job alone does not rotate */
    awaiting = e == KILL_IN_EXCHANGE ? SQUEEZE_FOR_EXCHANGE
               : e == KILL_CUDAWD_IN_SPILL || (e == KILL_JOB_IN_CHECKPOINT && in_spill)
                   ? SQUEEZE_FOR_SPILL : SQUEEZE_NONE;
    let_go = (long)((elapsed() - not_before) * 1000) % 4000 >= 3000;
    if (!look(s)) {
      client_sleep_ms(5);
      continue;
    }
    int i = -1, other = -1;
    char where[160];
    if (e == KILL_CUDAWD_IN_SPILL && (i = job_in_spill(s)) >= 0) {
      awaiting = SQUEEZE_NONE; /* from the next look on, the host has its room back */
      client_sleep_ms(delay_ms);
      snprintf(where, sizeof where, "while job %d (pid %d) writes its image to disk (image "
               "finished at the kill: %s)", i, jobs[i].pid, image_state(i) == 1 ? "yes" : "no");
      kill_cudawd(where, s);
      return true;
    }
    if (e == KILL_CUDAWD_IN_SWAP && ((i = job_in_state(s, SCHED_SWAPPING_OUT)) >= 0 ||
                                     (i = job_in_state(s, SCHED_SWAPPING_IN)) >= 0)) {
      client_sleep_ms(delay_ms);
      snprintf(where, sizeof where, "while job %d (pid %d) swaps %s", i, jobs[i].pid,
               job_in_state(s, SCHED_SWAPPING_IN) == i ? "in" : "out");
      kill_cudawd(where, s);
      return true;
    }
    if (e == KILL_JOB_IN_CHECKPOINT &&
        (i = in_spill ? job_in_spill(s) : job_in_state(s, SCHED_SWAPPING_OUT)) >= 0) {
      awaiting = SQUEEZE_NONE;
      client_sleep_ms(delay_ms);
      kill_job(i, in_spill ? "in the middle of its spill" : "in the middle of its checkpoint");
      return true;
    }
    if (e == KILL_IN_EXCHANGE && exchange_in_progress(s, &i, &other)) {
      awaiting = SQUEEZE_NONE;
      client_sleep_ms(delay_ms);
      exchange_kills++;
      if (take_cudawd) {
        snprintf(where, sizeof where, "in the middle of an exchange (job %d out, job %d in)", i,
                 other);
        kill_cudawd(where, s);
      } else {
        bool out_side = draw(2);
        kill_job(out_side ? i : other, out_side ? "in the middle of an exchange (going out)"
                                                : "in the middle of an exchange (coming in)");
        check_exchange_failed(s);
      }
      return true;
    }
    client_sleep_ms(5);
  }
  awaiting = SQUEEZE_NONE;
  return false;
}

/* The images left in the spill directory: a killed job's are listed (an image of a program
 * that died is its owner's to delete); one of a job that finished is a failure (it must have
 * removed it after reading it back). Returns how many were left. */
static int report_leftovers(void)
{
  DIR *d = opendir(tier.spill_dir);
  CHECK(d != NULL, "%s: %s", tier.spill_dir, strerror(errno));
  int left = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    unsigned uid;
    int pid, i = -1;
    if (sscanf(e->d_name, "cudaw-%u-%d", &uid, &pid) == 2) i = job_of(pid);
    CHECK(i >= 0 && jobs[i].state == JOB_KILLED, "seed %u: %s/%s is left in the spill "
          "directory, and it is not a killed job's image", seed, tier.spill_dir, e->d_name);
    char manifest[800];
    snprintf(manifest, sizeof manifest, "%s/%s/manifest.json", tier.spill_dir, e->d_name);
    printf("left on disk by killed job %d (pid %d): %s/%s (%s)\n", i, pid, tier.spill_dir,
           e->d_name, access(manifest, F_OK) == 0 ? "a finished image" : "an image cut short");
    left++;
  }
  closedir(d);
  return left;
}

/* How many lines of cudawd's log (appended across its restarts) hold `what`. */
static int log_lines_with(const char *what)
{
  char path[128], line[1024];
  snprintf(path, sizeof path, "%s/cudawd.log", tier.run_dir);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "%s: %s", path, strerror(errno));
  int count = 0;
  while (fgets(line, sizeof line, f)) count += strstr(line, what) != NULL;
  fclose(f);
  return count;
}

/* One more job, its size, rounds and mode drawn from the seed. */
static void start_job(void)
{
  static const char *const modes[] = {"pieces", "phases"};
  int i = job_count++;
  struct job *j = &jobs[i];
  /* 40-72 MiB: the device (96 MiB) holds one large or two small ones. */
  j->bytes = (40 + 8 * (uint64_t)draw(5)) * MIB;
  j->rounds = 20 + (int)draw(21);
  j->mode = modes[draw(2)];
  j->state = JOB_RUNNING;
  snprintf(j->log, sizeof j->log, "%s/job%d.log", tier.run_dir, i);
  char bytes[32], rounds[16];
  snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)j->bytes);
  snprintf(rounds, sizeof rounds, "%d", j->rounds);
  const char *argv[] = {job_path, bytes, rounds, j->mode, NULL};
  j->pid = client_spawn(argv, j->log, true);
  printf("%6.2f s  job %d: pid %d, %llu MiB, %d rounds, %s\n", elapsed(), i, j->pid,
         (unsigned long long)(j->bytes / MIB), j->rounds, j->mode);
}

static void soak(void)
{
  bool exchanges = cudawd_orders_exchanges();
  if (!exchanges)
    printf("this cudawd orders no exchanges (its --help names none): the exchange kill is left "
           "out, the rest runs\n");
  /* What an exchange needs of the programs (docs/sharing.md, "Exchanges"): remap with pieces
   * (2 MiB: every job's memory is split), images in private memory (no reserve; cudawd has no
   * pool here), and each step slowed (test-only) so that the middle lasts long enough to kill
   * in. Only exchanges are slowed; the other events are as before. */
  setenv("CUDAW_VMEM", "remap", 1);
  setenv("CUDAW_VMEM_PIECE", "2M", 1);
  setenv("CUDAW_CKPT_RESERVE", "off", 1);
  setenv("CUDAW_TEST_EXCHANGE_DELAY_MS", "20", 1);
  /* The events in an order drawn from the seed. */
  enum event order[EVENTS];
  int events = 0;
  for (int e = 0; e < EVENTS; e++)
    if (e != KILL_IN_EXCHANGE || exchanges) order[events++] = (enum event)e;
  for (int k = events - 1; k > 0; k--) {
    unsigned m = draw((unsigned)k + 1);
    enum event swap = order[k];
    order[k] = order[m];
    order[m] = swap;
  }
  printf("schedule:");
  for (int k = 0; k < events; k++) printf(" %d) %s;", k + 1, event_names[order[k]]);
  printf("\n");
  t0 = client_now();
  start_cudawd();
  for (int i = 0; i < JOBS_AT_START; i++) start_job();
  /* Static: a failed check exits with it still in use, and a leak report would hide the
   * failure. */
  static struct sched_snapshot snapshot;
  struct sched_snapshot *s = &snapshot;
  topping_up = true;
  for (int k = 0; k < events; k++) {
    /* What cudawd did meanwhile tells why a window never came (read from its log). */
    CHECK(provoke(order[k], s, 25), "seed %u: no window for '%s' within 25 s of waiting (at "
          "%.1f s): the soak did not test it (so far cudawd ordered %d exchanges and %d spills, "
          "and refused %d swaps for host room; see %s)", seed, event_names[order[k]], elapsed(),
          log_lines_with("cudawd: exchanging pid"), log_lines_with("cudawd: spilling pid"),
          log_lines_with("cudawd: not swapping pid"), tier.run_dir);
  }
  topping_up = false; /* the jobs left finish their rounds */
  while (reap() > 0) {
    CHECK(elapsed() < SOAK_SECONDS, "seed %u: the jobs did not finish within %d s (see %s)",
          seed, SOAK_SECONDS, tier.run_dir);
    look(s);
    client_sleep_ms(40);
  }
  check_no_ghost();
  CHECK(look(s), "seed %u: cudawd did not answer at the end", seed);
  uint64_t spills = s->spill.spills;
  int left = report_leftovers();
  int passed = 0, killed = 0;
  for (int i = 0; i < job_count; i++) {
    passed += jobs[i].state == JOB_PASSED;
    killed += jobs[i].state == JOB_KILLED;
  }
  CHECK(passed >= 1, "seed %u: no job survived", seed);
  CHECK(!exchanges || exchange_kills == 1, "seed %u: %d kills in the middle of an exchange "
        "(%d exchanges seen): expected one", seed, exchange_kills, exchanges_seen);
  int ordered = log_lines_with("cudawd: exchanging pid");
  /* The disk tier was used: some survivor came back from disk. */
  int from_disk = 0;
  for (int i = 0; i < job_count; i++)
    from_disk += jobs[i].state == JOB_PASSED &&
                 client_file_has(jobs[i].log, "resume streamed from disk");
  CHECK(from_disk > 0, "seed %u: no surviving job resumed from disk: the disk tier was not "
        "exercised (see %s)", seed, tier.run_dir);
  printf("seed %u: %d jobs verified all their data (%d resumed from disk), %d killed (%d images "
         "left on disk by them), cudawd killed %d times, %llu spills since its last start, "
         "%d exchanges ordered (%d seen under way, %d killed in the middle), %.1f s\n", seed,
         passed, from_disk, killed, left, cudawd_restarts, (unsigned long long)spills, ordered,
         exchanges_seen, exchange_kills, elapsed());
}

int main(int argc, char **argv)
{
  setpgid(0, 0);
  atexit(end_children);
  setvbuf(stdout, NULL, _IOLBF, 0);
  CHECK(argc == 6, "usage: %s CUDAWD CUDAW_CTL JOB SPILL_BASE SEED", argv[0]);
  cudawd_path = argv[1];
  job_path = argv[3];
  seed = draws = (unsigned)strtoul(argv[5], NULL, 10);
  printf("tier soak, seed %s (replay: %s %s %s %s %s %s)\n", argv[5], argv[0], argv[1], argv[2],
         argv[3], argv[4], argv[5]);
  if (tier_setup(&tier, argv[4], "tier", available(0)) != 0) return 77;
  printf("run dir %s, spill dir %s\n", tier.run_dir, tier.spill_dir);
  soak();
  /* The killed jobs' images were listed above; the test's own directories go (KEEP=1 keeps
   * them for a look). */
  tier_finish(&tier, cudawd_pid);
  cudawd_pid = 0;
  printf("ok\n");
  return 0;
}
