/* Description: the ranks of one job, paused together (cudaw-ctl checkpoint/resume --group), on
 * the emulated device. The test starts N rank processes (itself, re-executed), each on emulated
 * device rank % 2, that run steps of: a local kernel, then an "allreduce" kernel that posts the
 * rank's buffer in shared memory and leaves work behind on the device (cudaw_emu_defer) that
 * completes only when every peer has posted the same round, as NCCL's kernels spin on the GPU;
 * then cudaStreamSynchronize. Every few steps a rank checks its buffer against a host model.
 * Each step also takes device time (the local kernel's work completes after a deadline) and a
 * little host time; one rank's device is slower, so the fast ranks usually wait in a collective
 * for the slow rank's next step, as in a training loop that synchronises every step.
 *   group:  many group pauses and resumes mid-run (the retry path must be taken: a rank held
 *           before it enqueued its side leaves the others' drains waiting); a dead pid and a pid
 *           that is not cudaw in the group fail with nothing done and every rank running; a rank
 *           that cannot be held (an API call in flight past CUDAW_PAUSE_TIMEOUT) fails the pause
 *           and reopens the ranks already held; a rank whose checkpoint fails (its image
 *           directory is a file) runs on and the ranks already paused are resumed, then the same
 *           pause to disk succeeds; with one rank's image moved away the group resume fails and
 *           the ranks it had restored are paused again, and with the image back it succeeds; a rank
 *           held by a controller that goes away reopens by itself when its lease runs out; every
 *           rank finishes with verified data.
 *   single: what a group pause exists for: pausing the slow rank alone, then the fast one,
 *           hangs the second pause's drain (its collective waits for the paused rank) until the
 *           first is resumed; the data are still right in the end.
 * usage: e2e_group <cudaw-ctl> group|single   (and, internally, e2e_group rank ...) */
#include "e2e_common.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "cudaw_emu.h"

extern char **environ;

#define ELEMENTS 65536 /* per buffer: 512 KiB of uint64_t */
#define RANKS_MAX 4

/* nvcc's registration ABI (crt/host_runtime.h), exported by cudaw as by the real runtime. */
extern void **__cudaRegisterFatBinary(void *fatbin_wrapper);
extern void __cudaRegisterFatBinaryEnd(void **handle);
extern void __cudaRegisterFunction(void **handle, const char *host_fun, char *device_fun,
                                   const char *device_name, int thread_limit, uint3 *tid,
                                   uint3 *bid, dim3 *block_dim, dim3 *grid_dim, int *warp_size);

/* The shared memory of the job: each rank's posted buffer per round parity. */
struct shared {
  _Atomic uint64_t posted[RANKS_MAX][2]; /* the round last posted in that parity slot */
  _Atomic int ready[RANKS_MAX];
  _Atomic int stop_after; /* 0, or the last step every rank runs */
  _Atomic int stall;      /* set: the last rank's next step kernel takes 3 s (a call in flight) */
  _Atomic int stalling;   /* ... and is under way */
  uint64_t data[RANKS_MAX][2][ELEMENTS];
};

static struct shared *shm;
static int rank, ranks;

/* ---- the two kernels (host implementations on the emulated device) ---- */

static uint64_t step_value(uint64_t x, int r, uint64_t step, size_t i)
{
  return x * 3 + (uint64_t)r * 1000003u + step * 7919u + i;
}

static int (*emu_defer)(int (*)(void *), void *);
static long device_us; /* how long a step's kernel keeps the device busy */
static double busy_until;

static int compute_done(void *arg)
{
  (void)arg;
  return e2e_now() >= busy_until;
}

static void step_kernel(const struct cudaw_emu_launch *launch, void **args)
{
  (void)launch;
  uint64_t *buf = CUDAW_EMU_ARG(args, 0, uint64_t *);
  size_t n = CUDAW_EMU_ARG(args, 1, size_t);
  int r = CUDAW_EMU_ARG(args, 2, int), step = CUDAW_EMU_ARG(args, 3, int);
  for (size_t i = 0; i < n; i++) buf[i] = step_value(buf[i], r, (uint64_t)step, i);
  if (r == ranks - 1 && atomic_exchange(&shm->stall, 0)) {
    atomic_store(&shm->stalling, 1);
    e2e_sleep_us(3000000);
    atomic_store(&shm->stalling, 0);
  }
  busy_until = e2e_now() + (double)device_us * 1e-6;
  CHECK(emu_defer(compute_done, NULL) == 0);
}

/* The collective left on the device: done once every rank posted `round`. */
struct collective {
  uint64_t *buf;
  uint64_t round;
};
static struct collective pending_collective;

static int collective_done(void *arg)
{
  struct collective *c = arg;
  int parity = (int)(c->round & 1);
  for (int p = 0; p < ranks; p++)
    if (atomic_load_explicit(&shm->posted[p][parity], memory_order_acquire) < c->round) return 0;
  for (size_t i = 0; i < ELEMENTS; i++) {
    uint64_t sum = 0;
    for (int p = 0; p < ranks; p++) sum += shm->data[p][parity][i];
    c->buf[i] = sum;
  }
  return 1;
}

static void allreduce_kernel(const struct cudaw_emu_launch *launch, void **args)
{
  (void)launch;
  uint64_t *buf = CUDAW_EMU_ARG(args, 0, uint64_t *);
  uint64_t round = CUDAW_EMU_ARG(args, 1, uint64_t);
  int parity = (int)(round & 1);
  memcpy(shm->data[rank][parity], buf, ELEMENTS * sizeof *buf);
  atomic_store_explicit(&shm->posted[rank][parity], round, memory_order_release);
  pending_collective = (struct collective){buf, round};
  CHECK(emu_defer(collective_done, &pending_collective) == 0);
}

static void step_stub(void) {}
static void allreduce_stub(void) {}

static void register_kernels(void)
{
  int (*register_impl)(const char *, cudaw_emu_kernel_fn) =
      (int (*)(const char *, cudaw_emu_kernel_fn))e2e_emu_symbol("cudaw_emu_register_kernel");
  emu_defer = (int (*)(int (*)(void *), void *))e2e_emu_symbol("cudaw_emu_defer");
  CHECK(register_impl("_Z4stepPmmii", step_kernel) == 0);
  CHECK(register_impl("_Z9allreducePmm", allreduce_kernel) == 0);
  static struct { int magic, version; const void *data, *filename; } wrapper = {0x466243B1, 1, 0, 0};
  void **handle = __cudaRegisterFatBinary(&wrapper);
  __cudaRegisterFunction(handle, (const char *)step_stub, (char *)"_Z4stepPmmii", "_Z4stepPmmii",
                         -1, 0, 0, 0, 0, 0);
  __cudaRegisterFunction(handle, (const char *)allreduce_stub, (char *)"_Z9allreducePmm",
                         "_Z9allreducePmm", -1, 0, 0, 0, 0, 0);
  __cudaRegisterFatBinaryEnd(handle);
}

static struct shared *map_shared(const char *path, bool create)
{
  int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0), 0600);
  CHECK(fd >= 0, "%s: %s", path, strerror(errno));
  if (create) CHECK(ftruncate(fd, sizeof(struct shared)) == 0);
  struct shared *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(s != MAP_FAILED);
  close(fd);
  return s;
}

/* ---- one rank ---- */

static int rank_main(int argc, char **argv)
{
  CHECK(argc == 8, "usage: e2e_group rank <r> <ranks> <shm> <steps> <device us per step>");
  rank = atoi(argv[3]);
  ranks = atoi(argv[4]);
  shm = map_shared(argv[5], false);
  int steps = atoi(argv[6]);
  device_us = atol(argv[7]);
  unsigned seed = (unsigned)getpid();
  int devices = 0;
  CUDA_OK(cudaGetDeviceCount(&devices));
  CUDA_OK(cudaSetDevice(rank % devices));
  register_kernels();

  uint64_t *buf, *model = calloc(ELEMENTS, sizeof *model), *seen = malloc(ELEMENTS * 8);
  CHECK(model && seen);
  CUDA_OK(cudaMalloc((void **)&buf, ELEMENTS * sizeof *buf));
  CUDA_OK(cudaMemset(buf, 0, ELEMENTS * sizeof *buf));
  struct e2e_data data = {.count = 1, .size = {3u << 20}}; /* more to save, checked at the end */
  e2e_make_data(&data);
  size_t n = ELEMENTS;
  atomic_store(&shm->ready[rank], 1);

  for (int step = 1; step <= steps; step++) {
    int stop_after = atomic_load(&shm->stop_after);
    if (stop_after && step > stop_after) {
      steps = step - 1;
      break;
    }
    e2e_sleep_us(rand_r(&seed) % 300); /* host work between steps */
    void *step_args[] = {&buf, &n, &rank, &step};
    CUDA_OK(cudaLaunchKernel((const void *)step_stub, (dim3){1, 1, 1}, (dim3){1, 1, 1}, step_args,
                             0, 0));
    uint64_t round = (uint64_t)step;
    void *reduce_args[] = {&buf, &round};
    CUDA_OK(cudaLaunchKernel((const void *)allreduce_stub, (dim3){1, 1, 1}, (dim3){1, 1, 1},
                             reduce_args, 0, 0));
    CUDA_OK(cudaStreamSynchronize(0)); /* as .item() would: waits for the collective */
    /* The host model: every rank started the step from the same reduced buffer. */
    for (size_t i = 0; i < ELEMENTS; i++) {
      uint64_t sum = 0;
      for (int r = 0; r < ranks; r++) sum += step_value(model[i], r, (uint64_t)step, i);
      model[i] = sum;
    }
    if (step % 8 == 0 || step == steps || step == atomic_load(&shm->stop_after)) {
      CUDA_OK(cudaMemcpy(seen, buf, ELEMENTS * sizeof *buf, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < ELEMENTS; i++)
        CHECK(seen[i] == model[i], "rank %d step %d element %zu: %llu, expected %llu", rank, step,
              i, (unsigned long long)seen[i], (unsigned long long)model[i]);
    }
  }
  e2e_check_data(&data, "at the end");
  printf("rank %d: %d steps verified\n", rank, steps);
  free(seen); /* LeakSanitizer looks at every rank's exit */
  free(model);
  return 0;
}

/* ---- the controller ---- */

static const char *ctl;
static char shm_path[512];

static pid_t start_rank(const char *self, int r, int count, int steps, long slow_us)
{
  char rs[16], cs[16], ss[16], us[24];
  snprintf(rs, sizeof rs, "%d", r);
  snprintf(cs, sizeof cs, "%d", count);
  snprintf(ss, sizeof ss, "%d", steps);
  snprintf(us, sizeof us, "%ld", slow_us);
  char *argv[] = {(char *)self, (char *)ctl, "rank", rs, cs, shm_path, ss, us, NULL};
  pid_t pid;
  CHECK(posix_spawn(&pid, self, NULL, NULL, argv, environ) == 0);
  return pid;
}

/* Run cudaw-ctl with `args` (pids appended by the caller); output into out; its exit code. */
static int run_ctl(const char *args, char *out, size_t len)
{
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", ctl, args);
  FILE *p = popen(cmd, "r");
  CHECK(p != NULL);
  size_t used = fread(out, 1, len - 1, p);
  out[used] = '\0';
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Ask another process's control socket. */
static void ask_pid(pid_t pid, const char *request, char *reply, size_t len)
{
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%ld.sock", getenv("CUDAW_RUN_DIR"), (long)pid);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0, "connect %s",
        addr.sun_path);
  CHECK(send(fd, request, strlen(request), MSG_NOSIGNAL) == (ssize_t)strlen(request));
  size_t used = 0;
  ssize_t got;
  while (used + 1 < len && (got = recv(fd, reply + used, len - 1 - used, 0)) > 0) {
    used += (size_t)got;
    if (memchr(reply, '\n', used)) break;
  }
  reply[used] = '\0';
  close(fd);
}

static bool in_state(pid_t pid, const char *state)
{
  char reply[4096], want[48];
  ask_pid(pid, "status\n", reply, sizeof reply);
  snprintf(want, sizeof want, "\"state\":\"%s\"", state);
  return strstr(reply, want) != NULL;
}

static void wait_ready(int count)
{
  double deadline = e2e_now() + 30;
  for (int r = 0; r < count; r++)
    while (!atomic_load(&shm->ready[r])) {
      CHECK(e2e_now() < deadline, "rank %d did not start", r);
      e2e_sleep_us(1000);
    }
}

static void wait_ranks(const pid_t *pids, int count)
{
  for (int r = 0; r < count; r++) {
    int status = 0;
    CHECK(waitpid(pids[r], &status, 0) == pids[r]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank %d failed (status %#x)", r, status);
  }
}

static void pid_list(const pid_t *pids, int count, char *out, size_t len)
{
  size_t used = 0;
  for (int r = 0; r < count; r++)
    used += (size_t)snprintf(out + used, len - used, " %ld", (long)pids[r]);
}

static int group_test(const char *self)
{
  enum { COUNT = 3, PAUSES = 25 };
  pid_t pids[COUNT];
  for (int r = 0; r < COUNT; r++) pids[r] = start_rank(self, r, COUNT, 1000000, r == 1 ? 3000 : 300);
  wait_ready(COUNT);
  char list[128], args[1400], out[16384];
  pid_list(pids, COUNT, list, sizeof list);

  /* A dead pid, then a live process that is not cudaw: refused before anything is held. */
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  snprintf(args, sizeof args, "checkpoint --group%s %ld", list, (long)dead);
  int code = run_ctl(args, out, sizeof out);
  CHECK(code == 3 && strstr(out, "nothing was done"), "exit %d: %s", code, out);
  pid_t other = fork();
  if (other == 0) {
    pause();
    _exit(0);
  }
  snprintf(args, sizeof args, "checkpoint --group%s %ld", list, (long)other);
  code = run_ctl(args, out, sizeof out);
  CHECK(code == 4, "exit %d: %s", code, out);
  kill(other, SIGKILL);
  waitpid(other, NULL, 0);
  for (int r = 0; r < COUNT; r++) CHECK(in_state(pids[r], "running"), "rank %d not running", r);
  snprintf(args, sizeof args, "checkpoint --group%s %ld", list, (long)pids[0]);
  CHECK_EQ(run_ctl(args, out, sizeof out), 2); /* a pid twice */

  /* A rank that cannot be held: the ones held before it reopen, the pause fails. */
  atomic_store(&shm->stall, 1);
  double deadline = e2e_now() + 10;
  while (!atomic_load(&shm->stalling)) {
    CHECK(e2e_now() < deadline, "the last rank did not stall");
    e2e_sleep_us(1000);
  }
  snprintf(args, sizeof args, "checkpoint --group%s", list);
  code = run_ctl(args, out, sizeof out);
  CHECK(code == 1 && strstr(out, "cannot be held") && strstr(out, "every rank runs on"),
        "exit %d: %s", code, out);
  for (int r = 0; r < COUNT; r++)
    CHECK(in_state(pids[r], "running"), "rank %d not running after a failed hold", r);

  /* Images to disk (--to DIR: DIR/<pid>); one rank's cannot be written, so its checkpoint fails
   * after the others paused: they are resumed and every rank runs on. */
  char images[600], blocker[700];
  snprintf(images, sizeof images, "%s/images-%ld", getenv("CUDAW_RUN_DIR"), (long)getpid());
  CHECK(mkdir(images, 0700) == 0 || errno == EEXIST);
  snprintf(blocker, sizeof blocker, "%s/%ld", images, (long)pids[1]);
  FILE *f = fopen(blocker, "w");
  CHECK(f && fclose(f) == 0);
  snprintf(args, sizeof args,
           "checkpoint --group --drain-ms 50 --settle-ms 1 --attempts 200 --to '%s'%s", images, list);
  code = run_ctl(args, out, sizeof out);
  CHECK(code == 1 && strstr(out, "checkpoint failed") && strstr(out, "every rank runs on"),
        "exit %d: %s", code, out);
  for (int r = 0; r < COUNT; r++)
    CHECK(in_state(pids[r], "running"), "rank %d not running after a failed checkpoint", r);
  CHECK(unlink(blocker) == 0);
  code = run_ctl(args, out, sizeof out);
  CHECK(code == 0, "group checkpoint to disk: exit %d: %s", code, out);
  char moved[700];
  snprintf(moved, sizeof moved, "%s/moved", images);
  CHECK(rename(blocker, moved) == 0);
  snprintf(args, sizeof args, "resume --group%s", list);
  code = run_ctl(args, out, sizeof out);
  CHECK(code == 1 && strstr(out, "resume failed") && strstr(out, "every rank stays paused"),
        "exit %d: %s", code, out);
  for (int r = 0; r < COUNT; r++)
    CHECK(in_state(pids[r], "paused"), "rank %d not paused after a failed group resume", r);
  CHECK(rename(moved, blocker) == 0);
  code = run_ctl(args, out, sizeof out);
  CHECK(code == 0 && strstr(out, "read and verified from"), "group resume from disk: %d: %s", code, out);
  snprintf(args, sizeof args, "rm -rf '%s'", images);
  CHECK(system(args) == 0);

  /* A held rank whose controller is gone reopens by itself. */
  char reply[4096];
  ask_pid(pids[2], "hold lease=1000\n", reply, sizeof reply);
  CHECK(e2e_reply_ok(reply) && e2e_reply_state(reply, "held"), "%s", reply);
  e2e_sleep_us(100000);
  CHECK(in_state(pids[2], "held"));
  deadline = e2e_now() + 5;
  while (!in_state(pids[2], "running")) {
    CHECK(e2e_now() < deadline, "the lease did not run out");
    e2e_sleep_us(10000);
  }

  int retried = 0;
  unsigned seed = (unsigned)getpid();
  for (int i = 0; i < PAUSES; i++) {
    e2e_sleep_us(5000 + rand_r(&seed) % 20000);
    snprintf(args, sizeof args,
             "checkpoint --group --drain-ms 50 --settle-ms 1 --attempts 200%s", list);
    code = run_ctl(args, out, sizeof out);
    CHECK(code == 0, "group checkpoint %d: exit %d: %s", i, code, out);
    if (strstr(out, "did not drain")) retried++;
    for (int r = 0; r < COUNT; r++) CHECK(in_state(pids[r], "paused"), "rank %d not paused", r);
    snprintf(args, sizeof args, "resume --group%s", list);
    code = run_ctl(args, out, sizeof out);
    CHECK(code == 0, "group resume %d: exit %d: %s", i, code, out);
  }
  printf("%d group pauses, %d of them retried after a drain that did not finish\n", PAUSES, retried);
  CHECK(retried > 0, "the retry path was never taken");
  /* Resume of ranks that are not paused: refused, nothing changes. */
  snprintf(args, sizeof args, "resume --group%s", list);
  CHECK_EQ(run_ctl(args, out, sizeof out), 6);
  for (int r = 0; r < COUNT; r++) CHECK(in_state(pids[r], "running"), "rank %d not running", r);
  /* End together: no rank is more than a round ahead of another, so all reach this step. */
  uint64_t last = 0;
  for (int r = 0; r < COUNT; r++)
    for (int parity = 0; parity < 2; parity++)
      if (atomic_load(&shm->posted[r][parity]) > last) last = atomic_load(&shm->posted[r][parity]);
  atomic_store(&shm->stop_after, (int)last + 8);
  wait_ranks(pids, COUNT);
  return 0;
}

/* Pause the slow rank alone (usually before it enqueued its side), then a fast one: that
 * checkpoint's drain waits for a collective that cannot finish while the slow rank is paused. */
static int single_test(const char *self)
{
  enum { COUNT = 2, STEPS = 400 };
  pid_t pids[COUNT];
  for (int r = 0; r < COUNT; r++) pids[r] = start_rank(self, r, COUNT, STEPS, r == 1 ? 3000 : 300);
  wait_ready(COUNT);
  char args[256], out[8192];
  bool hung = false;
  for (int attempt = 0; attempt < 10 && !hung; attempt++) {
    e2e_sleep_us(20000);
    snprintf(args, sizeof args, "checkpoint %ld", (long)pids[1]);
    CHECK_EQ(run_ctl(args, out, sizeof out), 0);
    pid_t child = fork();
    if (child == 0) {
      char command[256];
      snprintf(command, sizeof command, "'%s' checkpoint %ld >/dev/null 2>&1", ctl, (long)pids[0]);
      _exit(system(command) == 0 ? 0 : 1);
    }
    double deadline = e2e_now() + 1.0;
    int status = 0;
    pid_t done = 0;
    while ((done = waitpid(child, &status, WNOHANG)) == 0 && e2e_now() < deadline) e2e_sleep_us(5000);
    /* Still pausing after a second: its drain waits for the paused peer (a slow machine that is
     * merely late would be past "pausing" by now or soon, and counts as no hang). */
    bool waiting = done == 0;
    hung = waiting && in_state(pids[0], "pausing");
    snprintf(args, sizeof args, "resume %ld", (long)pids[1]);
    CHECK_EQ(run_ctl(args, out, sizeof out), 0);
    if (waiting) CHECK(waitpid(child, &status, 0) == child); /* the peer came back: it finishes */
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 0's checkpoint failed");
    snprintf(args, sizeof args, "resume %ld", (long)pids[0]);
    CHECK_EQ(run_ctl(args, out, sizeof out), 0);
  }
  CHECK(hung, "pausing the ranks one at a time never hung the second drain");
  printf("pausing one rank at a time: the second rank's drain waited for the paused peer\n");
  wait_ranks(pids, COUNT);
  return 0;
}

int main(int argc, char **argv)
{
  if (argc >= 3 && strcmp(argv[2], "rank") == 0) return rank_main(argc, argv);
  CHECK(argc == 3, "usage: e2e_group <cudaw-ctl> group|single");
  ctl = argv[1];
  const char *dir = getenv("CUDAW_RUN_DIR");
  CHECK(dir && *dir, "CUDAW_RUN_DIR must be set");
  mkdir(dir, 0700);
  snprintf(shm_path, sizeof shm_path, "%s/group-%ld.shm", dir, (long)getpid());
  shm = map_shared(shm_path, true);
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(n > 0);
  self[n] = '\0';
  int rc = strcmp(argv[2], "group") == 0 ? group_test(self) : single_test(self);
  unlink(shm_path);
  return rc;
}
