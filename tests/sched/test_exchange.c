/* Description: cudawd's exchanges (issue 30 item 1) on the emulated device. Two jobs of 72 MiB
 * (pieces of 2 MiB) take turns on a device that holds one (--device-memory 96M) and a host that
 * holds one image plus the window but not two images: a fake /proc/meminfo (CUDAWD_MEMINFO)
 * leaves 60 MiB beyond what cudawd keeps free once one image is in host memory. A plain swap
 * would be refused ("would leave the host short"); cudawd exchanges instead.
 *   rotate       exchanges happen (the snapshot counts them, the log says one line each with
 *                the peak extra host memory, at most the window), no swap is refused, both
 *                jobs verify their data after every turn and exit 0; cudaw-ctl sched (text
 *                and --json) counts them
 *   kill_out     the job going out is killed with -9 in the middle of an exchange (each step
 *                slowed by CUDAW_TEST_EXCHANGE_DELAY_MS, a test-only option): the other
 *                finishes its resume alone, verifies its data and exits 0
 *   kill_in      the job coming in is killed in the middle: the one going out finishes its
 *                checkpoint, is resumed and verifies its data
 *   kill_cudawd  cudawd is killed in the middle: both finish the exchange on their own page; a
 *                new cudawd resumes the one swapped out, and both verify their data
 *   translate    the same under CUDAW_VMEM=translate, where memory cannot move piece by piece:
 *                no exchange, the old refusal in the log (saying why not), both jobs verified
 *   big_pieces   pieces of 36 MiB (CUDAW_VMEM_PIECE): the window (60 MiB) and the device's spare
 *                (24 MiB) hold less than a piece of each job and a chunk, so each side could wait
 *                for the other's whole piece for ever: no exchange, the refusal says why, both
 *                jobs verified (one after the other)
 *   exiting      a fake program coming back paused exits as its exchange is ordered (it says
 *                SCHED_LEAVING and refuses its side): the exchange is cut short, neither done
 *                nor failed, and the job going out runs on and verifies its data
 * The pool_ modes run the same with cudawd's host-memory pool on (the default under cudaw run
 * --share), sized for one image and not two (128 MiB: a 72 MiB job is lent 90 MiB), and the
 * host without room for a private image beside it: the image swapped out lies in the pool, and
 * cudawd hands its range over to the job going out (a handover: its image goes where the other
 * one's was, written only where that one is done; device 100M, so that the spare covers the
 * window):
 *   pool_rotate  exchanges happen, each a handover (the log says so, no swap refused), the
 *                image going out lies whole in the pool (its job's log), no range is lent once
 *                the jobs are gone, both jobs verify their data
 *   pool_kill_out, pool_kill_in, pool_kill_cudawd  as above, with the pool; after kill_out the
 *                range goes to the job coming in until its resume is done
 *   usage: sched_test_exchange CUDAWD CUDAW_CTL JOB MODE */
#define _GNU_SOURCE
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "client.h"
#include "exchange_page.h"

#define MIB (1024ull * 1024)
#define JOB_BYTES (72 * MIB)
#define JOBS 2
/* Beyond cudawd's margin with one image in host memory: under a job's image (a plain swap is
 * refused), but a job's image fits once the other's is gone, even one swapped out with only
 * one of its four blocks allocated (72 <= 60 + 18). */
#define ROOM (60 * MIB)

/* The pool modes: cudawd's pool holds one image (90 MiB lent for a 72 MiB job) but not two. */
#define POOL_SIZE "128M"

static const char *cudawd_path, *job_path, *ctl_path;
static bool pooled;
static char run_dir[64], meminfo[160];
static pid_t cudawd_pid, jobs[JOBS];

static void end_children(void)
{
  client_kill_all(cudawd_pid, jobs, JOBS);
}

/* MemAvailable: the margin, ROOM and one image, less one image per image in host memory: the
 * first swap-out fits, the next ones do not beside the image already there. */
static void write_meminfo(int images_in_host)
{
  /* With the pool the images lie in memory the host had given it: ROOM alone is left, under a
   * private image, so a swap needs the pool. */
  uint64_t out = pooled ? JOB_BYTES : (uint64_t)images_in_host * JOB_BYTES;
  client_write_meminfo(meminfo, 1024 * MIB + ROOM + JOB_BYTES - out);
}

static void start_cudawd(void)
{
  char log[128];
  snprintf(log, sizeof log, "%s/cudawd.log", run_dir);
  const char *argv[] = {cudawd_path, "--device-memory", pooled ? "100M" : "96M", "--quantum",
                        "0.5", "--min-run", "0.1", "--host-memory", pooled ? POOL_SIZE : "off",
                        "--verbose", "--gpu-list", "none", NULL};
  cudawd_pid = client_spawn(argv, log, false);
  CHECK(client_wait_up(run_dir, 10), "cudawd did not answer on %s (see %s)", run_dir, log);
}

/* One look at cudawd: the fake host follows the images in host memory. With two jobs, once one
 * was swapped out an image is in host memory for good (the one out, or the exchange's), so the
 * count sticks at one: a look that comes late (a loaded machine) never shows a roomy host. */
static int follow(struct sched_snapshot *s)
{
  static int sticky;
  if (!client_snapshot(run_dir, s)) return 0;
  int in_host = sticky;
  for (int i = 0; i < s->programs; i++) {
    int state = s->program[i].state;
    if ((state == SCHED_SWAPPED_OUT || state == SCHED_SWAPPING_OUT) && s->program[i].bytes)
      in_host++;
  }
  sticky = in_host > 0;
  write_meminfo(sticky);
  return s->programs;
}

static void start_jobs(const char *rounds)
{
  client_start_jobs(job_path, run_dir, jobs, JOBS, JOB_BYTES, rounds);
}

static bool jobs_done(void)
{
  return client_jobs_done(jobs, JOBS, run_dir);
}

static void wait_jobs(double seconds, const char *what)
{
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  for (double end = client_now() + seconds; !jobs_done();) {
    CHECK(client_now() < end, "the jobs did not finish within %.0f s %s (see %s)", seconds, what,
          run_dir);
    follow(s);
    client_sleep_ms(40);
  }
  free(s);
}

static char *log_path(const char *name)
{
  static char path[160];
  snprintf(path, sizeof path, "%s/%s", run_dir, name);
  return path;
}

/* Two jobs of 40 rounds each under the mode's cudawd, then its snapshot: they exchanged at least
 * twice and moved about their memory each time. */
static struct sched_snapshot *rotate(void)
{
  start_cudawd();
  start_jobs("40");
  wait_jobs(50, "");
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL && follow(s), "cudawd did not answer after the jobs");
  const struct sched_exchange_info *x = &s->exchange;
  CHECK(x->exchanges >= 2, "%llu exchanges (%llu failed): the swaps did not exchange",
        (unsigned long long)x->exchanges, (unsigned long long)x->failures);
  /* A job swapped out before it allocated all of its blocks (the first swap) has a smaller
   * image, and so does one that freed some at its end: allow one such exchange each way. */
  CHECK(x->out_bytes >= (x->exchanges - 1) * JOB_BYTES &&
        x->in_bytes >= (x->exchanges - 1) * JOB_BYTES,
        "%llu exchanges moved %llu bytes out and %llu in: less than the jobs' memory",
        (unsigned long long)x->exchanges, (unsigned long long)x->out_bytes,
        (unsigned long long)x->in_bytes);
  return s;
}

static void test_rotate(void)
{
  struct sched_snapshot *s = rotate();
  const struct sched_exchange_info *x = &s->exchange;
  const char *log = log_path("cudawd.log");
  CHECK(x->failures == 0, "%llu exchanges failed", (unsigned long long)x->failures);
  /* At most the window while both copy; once B is in, A's image may exceed B's whole image by
   * what the host can spare (a job swapped out before it allocated everything is smaller). */
  CHECK(x->peak_extra_bytes > 0 && x->peak_extra_bytes <= ROOM,
        "peak extra host memory %llu bytes: expected some, at most what the host can spare (%llu)",
        (unsigned long long)x->peak_extra_bytes, ROOM);
  CHECK(client_file_has(log, "(window 24.0 MiB)"), "the window is not 4 pieces + 16 MiB");
  CHECK(client_file_has(log, "exchange done: pid"), "no exchange line in the log");
  CHECK(client_file_has(log, "peak extra host memory"), "the exchange line has no peak");
  CHECK(!client_file_has(log, "would leave the host short"), "a swap was refused for host "
        "memory although an exchange applied");
  CHECK(client_file_has(log_path("job0.log"), "sched: exchange") &&
        client_file_has(log_path("job1.log"), "sched: exchange"), "a job's log has no exchange");
  /* What a user sees: cudaw-ctl sched, as text and as JSON. */
  char command[300], line[512] = "";
  snprintf(command, sizeof command, "'%s' sched --json", ctl_path);
  FILE *json = popen(command, "r");
  CHECK(json != NULL);
  char expect[96];
  snprintf(expect, sizeof expect, "\"exchanges\":{\"done\":%llu,\"failed\":0,",
           (unsigned long long)x->exchanges);
  bool found = false;
  while (fgets(line, sizeof line, json)) found |= strstr(line, expect) != NULL;
  CHECK(pclose(json) == 0 && found, "cudaw-ctl sched --json does not say %s", expect);
  snprintf(command, sizeof command, "'%s' sched", ctl_path);
  FILE *text = popen(command, "r");
  CHECK(text != NULL);
  snprintf(expect, sizeof expect, "exchanges: %llu (", (unsigned long long)x->exchanges);
  found = false;
  while (fgets(line, sizeof line, text)) found |= strncmp(line, expect, strlen(expect)) == 0;
  CHECK(pclose(text) == 0 && found, "cudaw-ctl sched does not say '%s'", expect);
  printf("rotate: %llu exchanges (%llu bytes out, %llu in), peak extra host memory %llu bytes, "
         "swaps %llu; both jobs verified their data\n", (unsigned long long)x->exchanges,
         (unsigned long long)x->out_bytes, (unsigned long long)x->in_bytes,
         (unsigned long long)x->peak_extra_bytes, (unsigned long long)s->device[0].swaps);
  free(s);
}

/* A job's exchanges out whose checkpoint put the whole image into cudawd's pool: its result
 * line says so (or that the job, ending, held nothing), and no line of that checkpoint says the
 * pool was not used. */
static int pooled_outs(const char *path)
{
  FILE *f = fopen(path, "r");
  char line[1024];
  bool missed = false, pooled_image = false;
  int count = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (strstr(line, "checkpoint: running -> pausing")) missed = pooled_image = false;
    else if (strstr(line, "pool not used")) missed = true;
    else if (strstr(line, "checkpoint: pausing -> paused"))
      pooled_image = strstr(line, "straight into cudawd's pool") || /* or nothing left */
                     strstr(line, "saved 0 B of 0 regions");
    else if (strstr(line, "sched: exchange out:")) count += pooled_image && !missed;
  }
  if (f) fclose(f);
  return count;
}

/* Every range of the pool came back once the jobs are gone (a handover's range, passed on from
 * the job going out to the one coming in where needed, included). */
static void check_pool_back(void)
{
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  /* The jobs have exited: their hang-ups reach cudawd within a moment. */
  for (double end = client_now() + 2; client_now() < end; client_sleep_ms(50)) {
    CHECK(client_snapshot(run_dir, s), "cudawd did not answer after the jobs");
    if (s->pool.lent == 0 && s->pool.loans == 0) break;
  }
  CHECK(s->pool.enabled, "no host-memory pool: the pool modes need one");
  CHECK(s->pool.lent == 0 && s->pool.loans == 0, "%llu bytes of the pool still lent (%d ranges) "
        "with no job left", (unsigned long long)s->pool.lent, s->pool.loans);
  free(s);
}

static void test_pool_rotate(void)
{
  struct sched_snapshot *s = rotate();
  const struct sched_exchange_info *x = &s->exchange;
  char log[160]; /* log_path's buffer is reused for the jobs' logs below */
  snprintf(log, sizeof log, "%s", log_path("cudawd.log"));
  /* A handover ordered while the job going out was still page-locking a window cudawd had just
   * grown fails at its first chunk (documented: it runs on, and is tried again later); no
   * other failure is allowed. */
  int not_ready = client_count_lines(log_path("job0.log"), "has no place in cudawd's pool") +
                  client_count_lines(log_path("job1.log"), "has no place in cudawd's pool");
  CHECK(x->failures <= (uint64_t)not_ready / 2, "%llu exchanges failed (%d for a range not "
        "page-locked yet)", (unsigned long long)x->failures, not_ready / 2);
  /* A job swapped out before its pool window was page-locked has its image in private memory
   * (the pool's fallback), and its next exchange is a private one: the handovers are most. */
  int handovers = client_count_lines(log, "(handover in the host-memory pool)");
  CHECK(handovers >= 2 && (uint64_t)handovers * 2 >= x->exchanges, "%d of %llu exchanges were "
        "handovers", handovers, (unsigned long long)x->exchanges);
  CHECK(!client_file_has(log, "would leave the host short"), "a swap was refused for host "
        "memory although a handover applied");
  /* The job going out wrote its whole image into the range handed over, never into private
   * memory beside the image in the pool. */
  int into_pool = pooled_outs(log_path("job0.log")) + pooled_outs(log_path("job1.log"));
  CHECK(into_pool >= handovers, "%d exchanges out put the whole image into the pool, fewer than "
        "the %d handovers", into_pool, handovers);
  printf("pool_rotate: %llu exchanges, %d of them handovers (%llu bytes out, %llu in), no swap "
         "refused; both jobs verified their data\n", (unsigned long long)x->exchanges, handovers,
         (unsigned long long)x->out_bytes, (unsigned long long)x->in_bytes);
  free(s);
  check_pool_back();
  printf("pool_rotate: no range left lent\n");
}

static void test_translate(void)
{
  start_cudawd();
  start_jobs("40");
  wait_jobs(50, "");
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL && follow(s), "cudawd did not answer after the jobs");
  CHECK(s->exchange.exchanges == 0 && s->exchange.failures == 0, "%llu exchanges under translate",
        (unsigned long long)(s->exchange.exchanges + s->exchange.failures));
  CHECK(client_file_has(log_path("cudawd.log"), "would leave the host short"),
        "no refusal for host memory in the log: the host was never short");
  /* The refusal says why no exchange: a user sees what to change. */
  CHECK(client_file_has(log_path("cudawd.log"), "; no exchange: pid ") &&
        client_file_has(log_path("cudawd.log"), "memory cannot move piece by piece (an exchange "
                        "needs CUDAW_VMEM=remap"),
        "the refusal does not say why there is no exchange (see %s)", log_path("cudawd.log"));
  printf("translate: no exchange, the swap refused for host memory as before (saying why); both "
         "jobs verified their data\n");
  free(s);
}

static void test_big_pieces(void)
{
  start_cudawd();
  start_jobs("40");
  wait_jobs(50, "");
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL && follow(s), "cudawd did not answer after the jobs");
  CHECK(s->exchange.exchanges == 0 && s->exchange.failures == 0,
        "%llu exchanges with pieces larger than the window and the spare can hold",
        (unsigned long long)(s->exchange.exchanges + s->exchange.failures));
  const char *log = log_path("cudawd.log");
  CHECK(client_file_has(log, "would leave the host short") &&
        client_file_has(log, "; no exchange: the window (60 MiB) and the device's spare (24 MiB) "
                        "hold less than a piece of each program and a chunk (88 MiB)"),
        "the refusal does not say that the window and the spare hold too little (see %s)", log);
  printf("big_pieces: no exchange with pieces of 36 MiB (window 60 MiB, spare 24 MiB), the "
         "refusal says why; both jobs verified their data\n");
  free(s);
}

/* Wait until an exchange is under way and both sides have begun moving; its pids into out/in. */
static void wait_middle(pid_t *out, pid_t *in)
{
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  for (double end = client_now() + 30;;) {
    CHECK(client_now() < end, "no exchange began within 30 s (see %s)", run_dir);
    CHECK(!jobs_done(), "the jobs finished before any exchange");
    if (follow(s) && s->exchange.active) {
      *out = *in = 0;
      for (int i = 0; i < s->programs; i++) {
        if (s->program[i].state == SCHED_SWAPPING_OUT) *out = s->program[i].pid;
        if (s->program[i].state == SCHED_SWAPPING_IN) *in = s->program[i].pid;
      }
      if (*out && *in) break;
    }
    client_sleep_ms(10);
  }
  free(s);
  /* A few chunks moved each way (each step waits 50 ms), far fewer than the window and the
   * spare would let the survivor finish without knowing that its peer died. */
  client_sleep_ms(150);
}

static void kill_job(pid_t victim)
{
  for (int i = 0; i < JOBS; i++)
    if (jobs[i] == victim) {
      CHECK_EQ(kill(victim, SIGKILL), 0);
      CHECK(waitpid(victim, NULL, 0) == victim);
      jobs[i] = 0;
      return;
    }
  test_fail("pid %d is none of the jobs", victim);
}

static void test_kill_job(bool out_side)
{
  start_cudawd();
  start_jobs("30");
  pid_t out, in;
  wait_middle(&out, &in);
  pid_t victim = out_side ? out : in, survivor = out_side ? in : out;
  kill_job(victim);
  wait_jobs(40, "after the kill");
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL && follow(s), "cudawd did not answer after the jobs");
  CHECK(s->exchange.failures >= 1, "the interrupted exchange was not counted as failed");
  CHECK(client_file_has(log_path("cudawd.log"), "exchange FAILED"), "no failed exchange line");
  if (pooled) {
    CHECK(client_file_has(log_path("cudawd.log"), "(handover in the host-memory pool)"),
          "the interrupted exchange was no handover");
    char heir[96];
    snprintf(heir, sizeof heir, "goes to pid %d (gone)", survivor);
    CHECK(!out_side || client_file_has(log_path("cudawd.log"), heir), "the range of pid %d "
          "(killed) did not go to pid %d, whose image still lay in it", victim, survivor);
  }
  printf("%s%s: pid %d killed -9 in the middle of the exchange, pid %d finished and verified its "
         "data\n", pooled ? "pool_" : "", out_side ? "kill_out" : "kill_in", victim, survivor);
  free(s);
  if (pooled) check_pool_back();
}

static void test_kill_cudawd(void)
{
  start_cudawd();
  start_jobs("30");
  pid_t out, in;
  wait_middle(&out, &in);
  CHECK_EQ(kill(cudawd_pid, SIGKILL), 0);
  CHECK(waitpid(cudawd_pid, NULL, 0) == cudawd_pid);
  cudawd_pid = 0;
  /* Both sides finish on the page alone: out's log says its exchange went out. */
  char out_log[32];
  snprintf(out_log, sizeof out_log, "job%d.log", jobs[0] == out ? 0 : 1);
  for (double end = client_now() + 20; !client_file_has(log_path(out_log), "sched: exchange out");)
  {
    CHECK(client_now() < end, "pid %d did not finish its side within 20 s of cudawd's death",
          out);
    client_sleep_ms(20);
  }
  write_meminfo(1);
  start_cudawd();
  wait_jobs(50, "after a new cudawd started");
  char rejoined[96];
  snprintf(rejoined, sizeof rejoined, "pid %d (uid %u) joined (paused)", out, (unsigned)getuid());
  CHECK(client_file_has(log_path("cudawd.log"), rejoined), "pid %d never re-joined as paused",
        out);
  char handover[96];
  snprintf(handover, sizeof handover, "pid %d's image goes into range", out);
  CHECK(!pooled || client_file_has(log_path("cudawd.log"), handover), "the exchange cudawd died "
        "in was no handover");
  printf("%skill_cudawd: cudawd killed -9 in the middle of the exchange of pid %d (out) and pid "
         "%d (in); both finished it, a new cudawd resumed pid %d, both verified their data\n",
         pooled ? "pool_" : "", out, in, out);
}

/* A fake program that comes back paused with an image of JOB_BYTES (as to a new cudawd) and,
 * ordered into an exchange, exits as the order comes: it says it is leaving, ends its side on
 * the page as failed before it began (what the library does, exchange_side_refuse) and answers
 * with the error its stopped checkpoint module gives. Exits 0 once it did so, 2 if no exchange
 * came within 20 s. */
static pid_t exiting_program(void)
{
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid > 0) return pid;
  int fd = client_connect(run_dir);
  if (fd < 0 || !client_say(fd, SCHED_HELLO, 1, 0, 0) ||
      !client_say(fd, SCHED_DEVICE, 0, 0, 256 * MIB) ||
      !client_say(fd, SCHED_CAN_EXCHANGE, 0, 0, 2 * MIB) ||
      !client_say(fd, SCHED_USAGE, 0, 0, JOB_BYTES))
    _exit(1);
  struct sched_msg order;
  int page_fd = -1;
  if (client_next_order(fd, 20, &order, &page_fd) != SCHED_EXCHANGE || order.value != 2 ||
      page_fd < 0)
    _exit(2);
  struct exchange_page *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd, 0);
  if (page == MAP_FAILED || page->in_pid != getpid()) _exit(1);
  if (!client_say(fd, SCHED_LEAVING, 0, 0, 0)) _exit(1);
  atomic_store(&page->in_failed, 1);
  atomic_store(&page->in_done, 1);
  if (!client_say(fd, SCHED_DONE, 2, -ENOTCONN, 0)) _exit(1);
  client_sleep_ms(300); /* its teardown */
  _exit(0);
}

/* The one coming in exits as its exchange is ordered: the exchange is cut short, not failed, no
 * exchange is counted, and the job going out stops its side, runs on and verifies its data. */
static void test_exiting(void)
{
  start_cudawd();
  client_start_jobs(job_path, run_dir, jobs, 1, JOB_BYTES, "80");
  struct sched_snapshot *s = calloc(1, sizeof *s);
  CHECK(s != NULL);
  bool resident = false;
  for (double end = client_now() + 20; !resident; client_sleep_ms(20)) {
    CHECK(client_now() < end, "the job never held its memory (see %s)", run_dir);
    follow(s);
    for (int i = 0; i < s->programs; i++)
      resident |= s->program[i].pid == jobs[0] && s->program[i].bytes >= JOB_BYTES;
  }
  pid_t fake = exiting_program();
  int status = 0;
  for (double end = client_now() + 30; waitpid(fake, &status, WNOHANG) != fake;) {
    if (client_now() >= end) {
      kill(fake, SIGKILL);
      test_fail("the fake program did not end within 30 s (see %s)", run_dir);
    }
    follow(s); /* its image counts as in host memory: a plain swap is refused */
    client_sleep_ms(20);
  }
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the fake program: %s (see %s)",
        WIFEXITED(status) && WEXITSTATUS(status) == 2 ? "no exchange ordered" : "failed",
        run_dir);
  wait_jobs(50, "after the other program left");
  CHECK(follow(s), "cudawd did not answer after the job");
  const char *log = log_path("cudawd.log");
  CHECK(s->exchange.failures == 0 && s->exchange.exchanges == 0, "%llu exchanges, %llu failed: "
        "expected neither (see %s)", (unsigned long long)s->exchange.exchanges,
        (unsigned long long)s->exchange.failures, log);
  CHECK(client_file_has(log, "exchange cut short") && !client_file_has(log, "exchange FAILED"),
        "the log does not say the exchange was cut short (see %s)", log);
  CHECK(client_file_has(log, "(exiting: its order came as it went)"), "the log does not say "
        "which side was exiting (see %s)", log);
  printf("exiting: the side coming in exited as its exchange was ordered: cut short, not "
         "failed; the job going out ran on and verified its data\n");
  free(s);
}

int main(int argc, char **argv)
{
  setpgid(0, 0);
  atexit(end_children);
  CHECK(argc == 5, "usage: %s CUDAWD CUDAW_CTL JOB [pool_]rotate|kill_out|kill_in|kill_cudawd "
        "or translate|big_pieces|exiting", argv[0]);
  cudawd_path = argv[1];
  ctl_path = argv[2];
  job_path = argv[3];
  argv[3] = argv[4];
  if (!strncmp(argv[3], "pool_", 5)) {
    pooled = true;
    argv[3] += 5;
  }
  snprintf(run_dir, sizeof run_dir, "/tmp/cudaw-exchange-XXXXXX");
  CHECK(mkdtemp(run_dir) != NULL, "mkdtemp: %s", strerror(errno));
  snprintf(meminfo, sizeof meminfo, "%s/meminfo", run_dir);
  write_meminfo(0);
  setenv("CUDAWD_MEMINFO", meminfo, 1);
  setenv("CUDAW_RUN_DIR", run_dir, 1);
  setenv("CUDAW_SHARE", "1", 1);
  setenv("CUDAW_LOG", "info", 1);
  setenv("CUDAW_VMEM", strcmp(argv[3], "translate") ? "remap" : "translate", 1);
  setenv("CUDAW_VMEM_PIECE", strcmp(argv[3], "big_pieces") ? "2M" : "36M", 1);
  setenv("CUDAW_CKPT_RESERVE", "off", 1); /* the image in private memory, freed as consumed */
  if (strcmp(argv[3], "rotate") != 0) setenv("CUDAW_TEST_EXCHANGE_DELAY_MS", "50", 1);
  if (!strcmp(argv[3], "rotate")) pooled ? test_pool_rotate() : test_rotate();
  else if (!strcmp(argv[3], "kill_out")) test_kill_job(true);
  else if (!strcmp(argv[3], "kill_in")) test_kill_job(false);
  else if (!strcmp(argv[3], "kill_cudawd")) test_kill_cudawd();
  else if (!strcmp(argv[3], "translate")) test_translate();
  else if (!strcmp(argv[3], "big_pieces")) test_big_pieces();
  else if (!strcmp(argv[3], "exiting")) test_exiting();
  else test_fail("unknown mode %s", argv[3]);
  if (cudawd_pid > 0) kill(cudawd_pid, SIGTERM);
  if (cudawd_pid > 0) waitpid(cudawd_pid, NULL, 0);
  cudawd_pid = 0;
  char command[200];
  snprintf(command, sizeof command, "rm -rf '%s'", run_dir);
  if (!getenv("KEEP") && system(command) != 0) fprintf(stderr, "could not remove %s\n", run_dir);
  printf("ok\n");
  return 0;
}
