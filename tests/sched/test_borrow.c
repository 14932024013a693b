/* Description: a program NOT under sharing borrows cudawd's host-memory pool for its checkpoint
 * images (CUDAW_BORROW_POOL=auto, docs/sharing.md "Borrowing the pool"), on the emulated device.
 * Each job is sched_share_job (72 MiB, every byte verified every round, so an image that comes
 * back wrong fails it) paused and resumed with cudaw-ctl:
 *   used     with a cudawd (pool 256M): cudaw-ctl sched lists it as a borrower with a standing
 *            loan of at least its image; each of two checkpoints puts the whole image into the
 *            pool (pool_bytes == bytes); resumes, data verified; the loan comes back at its exit
 *   alone    no cudawd: the same checkpoint puts nothing into a pool and the image goes into
 *            the program's own reserve (reserve_bytes > 0); no line about borrowing
 *   kill     cudawd killed -9 while the borrower is paused with its image in the pool: resume
 *            is byte-exact (the image lives on in the program's mapping), and the program says
 *            its reserve takes the images again
 *   beside   two sharing jobs of 72 MiB take turns on a 96M device while a borrower of 72 MiB
 *            runs beside them: the sharing jobs swap, the borrower is never paused by cudawd,
 *            never in its program table nor in its device books (max resident <= capacity)
 *   off      CUDAW_BORROW_POOL=off with a cudawd running: the program never connects
 *   old      a cudawd of before borrowing closes the connection at the borrower's hello: the
 *            program runs on as without a cudawd (its reserve takes the image), asks once in
 *            the test's seconds, and says nothing above debug
 *   usage: sched_test_borrow CUDAWD CUDAW_CTL JOB MODE */
#define _GNU_SOURCE
#include "client.h"

#define MIB (1024ull * 1024)
#define JOB_BYTES (72 * MIB)

static const char *cudawd_path, *ctl_path, *job_path;
static char run_dir[64];
static pid_t cudawd_pid;
static pid_t children[8];
static int child_count;

static void end_children(void)
{
  for (int i = 0; i < child_count; i++)
    if (children[i] > 0) kill(children[i], SIGKILL);
}

static pid_t spawn(const char *const argv[], const char *log_name)
{
  char log[160];
  snprintf(log, sizeof log, "%s/%s", run_dir, log_name);
  pid_t pid = client_spawn(argv, log, true);
  if (child_count < 8) children[child_count++] = pid;
  return pid;
}

static void start_cudawd(void)
{
  const char *argv[] = {cudawd_path, "--device-memory", "96M", "--quantum", "0.5", "--min-run",
                        "0.1", "--host-memory", "256M", "--gpu-list", "none", "--verbose", NULL};
  cudawd_pid = spawn(argv, "cudawd.log");
  CHECK(client_wait_up(run_dir, 5), "cudawd did not answer on %s", run_dir);
}

/* A job of `rounds` rounds, its log <run_dir>/<name>.log. */
static pid_t start_job(const char *name, const char *rounds)
{
  char log[64], size[32];
  snprintf(log, sizeof log, "%s.log", name);
  snprintf(size, sizeof size, "%llu", (unsigned long long)JOB_BYTES);
  const char *argv[] = {job_path, size, rounds, "pieces", NULL};
  return spawn(argv, log);
}

static void must_snapshot(struct sched_snapshot *s)
{
  CHECK(client_snapshot(run_dir, s), "cudawd did not answer");
}

static const struct sched_borrower_info *borrower(const struct sched_snapshot *s, pid_t pid)
{
  for (int i = 0; i < s->borrowers; i++)
    if (s->borrower[i].pid == pid) return &s->borrower[i];
  return NULL;
}

/* `cudaw-ctl --json ARGS` (one line of JSON) into out; its exit status. */
static int ctl(const char *args, char *out, size_t len)
{
  char command[256];
  snprintf(command, sizeof command, "'%s' --json %s 2>&1", ctl_path, args);
  FILE *p = popen(command, "r");
  CHECK(p != NULL);
  size_t n = fread(out, 1, len - 1, p);
  out[n] = '\0';
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static unsigned long long json_number(const char *json, const char *key)
{
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char *at = strstr(json, pattern);
  CHECK(at != NULL, "no %s in %s", key, json);
  return strtoull(at + strlen(pattern), NULL, 10);
}

/* Checkpoint pid with cudaw-ctl; the reply's figures. */
static void checkpoint(pid_t pid, unsigned long long *bytes, unsigned long long *pool,
                       unsigned long long *reserve)
{
  char args[64], out[4096];
  snprintf(args, sizeof args, "checkpoint %d", (int)pid);
  CHECK(ctl(args, out, sizeof out) == 0, "cudaw-ctl %s: %s", args, out);
  *bytes = json_number(out, "bytes");
  *pool = json_number(out, "pool_bytes");
  *reserve = json_number(out, "reserve_bytes");
  printf("checkpoint: %llu bytes, %llu into cudawd's pool, %llu into the reserve\n", *bytes,
         *pool, *reserve);
}

/* The program's own reserve holds its 72 MiB page-locked (cudaw-ctl status) within `seconds`. */
static void wait_for_reserve(pid_t pid, double seconds)
{
  char args[64], out[4096];
  snprintf(args, sizeof args, "status %d", (int)pid);
  for (double deadline = client_now() + seconds;; client_sleep_ms(100)) {
    CHECK(client_now() < deadline, "pid %d's reserve was not ready within %.0f s: %s", (int)pid,
          seconds, out);
    if (ctl(args, out, sizeof out) == 0 && strstr(out, "\"reserve_bytes\":") &&
        json_number(out, "reserve_bytes") >= JOB_BYTES)
      return;
  }
}

static void resume(pid_t pid)
{
  char args[64], out[4096];
  snprintf(args, sizeof args, "resume %d", (int)pid);
  CHECK(ctl(args, out, sizeof out) == 0, "cudaw-ctl %s: %s", args, out);
}

static void wait_job(pid_t *job, const char *name, double seconds)
{
  double deadline = client_now() + seconds;
  int status;
  pid_t done;
  while ((done = waitpid(*job, &status, WNOHANG)) == 0 && client_now() < deadline)
    client_sleep_ms(50);
  CHECK(done == *job, "%s did not finish within %.0f s", name, seconds);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed (status 0x%x): see %s/%s.log",
        name, status, run_dir, name);
  *job = 0;
}

/* If job (0: gone) has exited, it must have exited 0 (its data verified); then 0. */
static void reap(pid_t *job, const char *name)
{
  int status;
  if (!*job || waitpid(*job, &status, WNOHANG) != *job) return;
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed (status 0x%x): see %s/%s.log",
        name, status, run_dir, name);
  *job = 0;
}

static bool job_log_has(const char *name, const char *text)
{
  char path[160];
  snprintf(path, sizeof path, "%s/%s.log", run_dir, name);
  return client_file_has(path, text);
}

/* The borrower holds a standing loan of at least its image (72 MiB) within `seconds`, and has
 * page-locked the window it lies in (its log says so for the window cudawd offers now): a
 * checkpoint copies straight into it from then on. */
static void wait_for_loan(pid_t job, double seconds)
{
  struct sched_snapshot s;
  for (double deadline = client_now() + seconds;; client_sleep_ms(50)) {
    CHECK(client_now() < deadline, "pid %d held no page-locked loan of its 72 MiB image within "
          "%.0f s", (int)job, seconds);
    must_snapshot(&s);
    const struct sched_borrower_info *b = borrower(&s, job);
    char locked[96];
    snprintf(locked, sizeof locked, "cudawd's host-memory pool: %.2f MiB page-locked",
             (double)s.pool_window / MIB);
    if (b && b->lent >= JOB_BYTES && b->bytes >= JOB_BYTES && job_log_has("borrower", locked))
      break;
  }
}

static void test_used(void)
{
  start_cudawd();
  pid_t job = start_job("borrower", "120");
  wait_for_loan(job, 15);
  struct sched_snapshot s;
  must_snapshot(&s);
  CHECK_EQ(s.programs, 0); /* a borrower is never scheduled */
  /* Twice: the loan stands for every checkpoint, not only the next one. */
  for (int round = 0; round < 2; round++) {
    unsigned long long bytes, pool, reserve;
    checkpoint(job, &bytes, &pool, &reserve);
    CHECK(bytes >= JOB_BYTES && pool == bytes, "checkpoint %d: %llu of the image's %llu bytes "
          "went into the pool", round + 1, pool, bytes);
    resume(job);
    client_sleep_ms(200);
  }
  wait_job(&job, "borrower", 30);
  for (double deadline = client_now() + 3;; client_sleep_ms(50)) {
    must_snapshot(&s);
    if (!s.borrowers && !s.pool.lent) break;
    CHECK(client_now() < deadline, "%d borrowers, %llu bytes lent after the borrower exited",
          s.borrowers, (unsigned long long)s.pool.lent);
  }
  CHECK(job_log_has("borrower", "straight into cudawd's pool"), "its checkpoint line does not say "
        "where the image went");
}

/* A job (`name`) that borrows nothing: once its own reserve is ready, its checkpoint puts the
 * image there and none into a pool (where: a phrase for the message); resumed, data verified,
 * and not a line about borrowing above debug. */
static void job_without_pool(const char *name, const char *where)
{
  pid_t job = start_job(name, "120");
  wait_for_reserve(job, 15);
  unsigned long long bytes, pool, reserve;
  checkpoint(job, &bytes, &pool, &reserve);
  CHECK(bytes >= JOB_BYTES && pool == 0 && reserve > 0, "%s: %llu of %llu bytes into a pool, "
        "%llu into the program's own reserve", where, pool, bytes, reserve);
  resume(job);
  wait_job(&job, name, 30);
  CHECK(!job_log_has(name, "borrow:") && !job_log_has(name, "warn"), "%s: the program said "
        "something about borrowing", where);
}

static void test_alone(void)
{
  job_without_pool("alone", "without a cudawd");
}

static void test_kill(void)
{
  start_cudawd();
  pid_t job = start_job("borrower", "120");
  wait_for_loan(job, 15);
  unsigned long long bytes, pool, reserve;
  checkpoint(job, &bytes, &pool, &reserve);
  CHECK(pool == bytes && bytes >= JOB_BYTES, "%llu of %llu bytes in the pool", pool, bytes);
  CHECK_EQ(kill(cudawd_pid, SIGKILL), 0);
  int status;
  CHECK(waitpid(cudawd_pid, &status, 0) == cudawd_pid);
  client_sleep_ms(300); /* the borrower sees its connection end */
  resume(job); /* from the image in the dead cudawd's pool, still mapped by the program */
  wait_job(&job, "borrower", 30);
  CHECK(job_log_has("borrower", "cudawd went away"), "the borrower did not say it lost cudawd");
}

static void test_beside(void)
{
  setenv("CUDAW_SHARE", "1", 1);
  start_cudawd();
  pid_t shared[2] = {start_job("shared0", "30"), start_job("shared1", "30")};
  unsetenv("CUDAW_SHARE");
  pid_t job = start_job("borrower", "60"), borrower_pid = job;
  struct sched_snapshot s;
  bool lent = false;
  double deadline = client_now() + 60;
  while (shared[0] || shared[1] || job) {
    CHECK(client_now() < deadline, "the jobs did not finish within 60 s");
    must_snapshot(&s);
    for (int i = 0; i < s.programs; i++)
      CHECK(s.program[i].pid != job, "the borrower is in cudawd's program table (%s)",
            sched_state_name(s.program[i].state));
    const struct sched_borrower_info *b = borrower(&s, job);
    lent |= b && b->lent >= JOB_BYTES;
    reap(&shared[0], "shared0");
    reap(&shared[1], "shared1");
    reap(&job, "borrower");
    client_sleep_ms(50);
  }
  CHECK(lent, "the borrower never held a loan of its image");
  must_snapshot(&s);
  CHECK(s.devices == 1 && s.device[0].swaps > 0, "the sharing jobs never took turns");
  CHECK(s.device[0].max_resident <= s.device[0].capacity, "cudawd counted %llu bytes resident "
        "on a device of %llu", (unsigned long long)s.device[0].max_resident,
        (unsigned long long)s.device[0].capacity);
  CHECK(!job_log_has("borrower", "running -> pausing"), "the borrower was paused");
  CHECK(!job_log_has("borrower", "sent an order"), "cudawd sent the borrower an order");
  char path[160], line[64];
  snprintf(path, sizeof path, "%s/cudawd.log", run_dir);
  snprintf(line, sizeof line, "pid %d: running -> ", (int)borrower_pid);
  CHECK(!client_file_has(path, line), "cudawd changed the borrower's state (%s)", line);
  printf("beside: %llu swaps of the sharing jobs, the borrower never paused\n",
         (unsigned long long)s.device[0].swaps);
}

static void test_off(void)
{
  setenv("CUDAW_BORROW_POOL", "off", 1);
  start_cudawd();
  pid_t job = start_job("off", "120");
  client_sleep_ms(1500);
  struct sched_snapshot s;
  must_snapshot(&s);
  CHECK_EQ(s.borrowers, 0);
  /* The only connection ever made besides the snapshots: none. */
  CHECK(s.uids == 1 && s.uid[0].programs == 0 && s.uid[0].connections == 1,
        "%d uids, %d programs, %d connections open", s.uids, s.uids ? s.uid[0].programs : 0,
        s.uids ? s.uid[0].connections : 0);
  unsigned long long bytes, pool, reserve;
  checkpoint(job, &bytes, &pool, &reserve);
  CHECK_EQ(pool, 0);
  resume(job);
  wait_job(&job, "off", 30);
}

/* A cudawd of before borrowing: it closes the connection at a hello whose value it does not know
 * (a malformed hello), as cudawd.c did. Each hello it closes so is counted in
 * <run dir>/older-cudawd.log. */
static pid_t start_old_cudawd(void)
{
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%s", run_dir, SCHED_SOCKET_NAME);
  int listener = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  CHECK(listener >= 0 && bind(listener, (struct sockaddr *)&addr, sizeof addr) == 0 &&
        listen(listener, 8) == 0, "listening on %s: %s", addr.sun_path, strerror(errno));
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid > 0) {
    close(listener);
    if (child_count < 8) children[child_count++] = pid;
    return pid;
  }
  char log[160];
  snprintf(log, sizeof log, "%s/older-cudawd.log", run_dir);
  for (;;) {
    int fd = accept(listener, NULL, NULL);
    if (fd < 0) continue;
    struct sched_msg msg;
    if (recv(fd, &msg, sizeof msg, 0) == (ssize_t)sizeof msg && msg.type == SCHED_HELLO &&
        msg.value != 0 && msg.value != 1) {
      FILE *f = fopen(log, "a");
      if (f) fprintf(f, "closed a hello of value %d\n", msg.value);
      if (f) fclose(f);
    }
    close(fd);
  }
}

static void test_old(void)
{
  start_old_cudawd();
  job_without_pool("old", "beside an older cudawd");
  char path[160];
  snprintf(path, sizeof path, "%s/older-cudawd.log", run_dir);
  CHECK(client_count_lines(path, "closed a hello of value 2") == 1, "the program said hello as "
        "a borrower %d times while it ran (once: it asks again after 60 s)",
        client_count_lines(path, "closed a hello"));
}

static void wait_all(pid_t *jobs, int count)
{
  for (int i = 0; i < count; i++)
    if (jobs[i]) waitpid(jobs[i], NULL, 0);
}

int main(int argc, char **argv)
{
  setpgid(0, 0);
  atexit(end_children);
  CHECK(argc == 5, "usage: %s CUDAWD CUDAW_CTL JOB used|alone|kill|beside|off|old", argv[0]);
  cudawd_path = argv[1];
  ctl_path = argv[2];
  job_path = argv[3];
  snprintf(run_dir, sizeof run_dir, "/tmp/cudaw-borrow-XXXXXX");
  CHECK(mkdtemp(run_dir) != NULL, "mkdtemp: %s", strerror(errno));
  setenv("CUDAW_RUN_DIR", run_dir, 1);
  unsetenv("CUDAW_SHARE");
  unsetenv("CUDAW_SCHED_SOCKET");
  setenv("CUDAW_LOG", "info", 1);
  if (!strcmp(argv[4], "used")) test_used();
  else if (!strcmp(argv[4], "alone")) test_alone();
  else if (!strcmp(argv[4], "kill")) test_kill();
  else if (!strcmp(argv[4], "beside")) test_beside();
  else if (!strcmp(argv[4], "off")) test_off();
  else if (!strcmp(argv[4], "old")) test_old();
  else test_fail("unknown mode %s", argv[4]);
  end_children();
  wait_all(children, child_count);
  char command[128];
  snprintf(command, sizeof command, "rm -rf '%s'", run_dir);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", run_dir);
  printf("ok\n");
  return 0;
}
