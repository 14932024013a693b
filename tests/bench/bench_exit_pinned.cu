/* Description: what a program's exit costs when it page-locked cudawd's host-memory pool, and
 * what that exit costs another program making device memory at the same moment (issue 30: the
 * last job of share_bench host took ~2 s from its last word to being reaped, and two resumes
 * beside other jobs' exits spent ~1.4 s in the driver making memory, against ~0.9 s alone).
 * One memfd of GiB (2 MiB pages where shmem_enabled allows), faulted in once by this process,
 * which makes no CUDA call itself. Then, for each case, a child page-locks all of it
 * (cudaHostRegister Portable, 8 threads, a piece at a time, as checkpoint/reserve.c does) and
 * a second child makes its CUDA context; on "go" the first one ends and the second makes DEV
 * GiB of device memory (cudaMalloc, 1 GiB at a time):
 *   alone        the second child alone (the first ends only after it)
 *   exit P       the first exits with pieces of P MiB still page-locked
 *   unreg P      the first gives its pieces back (cudaHostUnregister, timed) before it exits
 *   bare         the first never touches the pool (its context alone)
 *   touched      the first faults the pool into its page tables, page-locks none of it
 *   munmap       the first unmaps the page-locked pool, then cudaDeviceReset, each timed
 *   all          the first gives the pieces back, unmaps the pool, cudaDeviceReset, each timed
 * Per case: the first's end from "go" to reaped, and the second's making of memory.
 * With `copy` (the end of share_bench host: a swap-in copies at half the link's speed while the
 * job before it exits), the second child instead copies DEV GiB of the pool, page-locked by
 * itself, to device memory it made before "go", timed; the first child exits:
 *   alone        after the copy
 *   exit         with the pool page-locked (its unpinning beside the copy)
 *   devexit      holding DEV GiB of device memory it wrote, the pool untouched (the driver
 *                clears memory freed by one process before another gets it)
 *   both         with both
 * then the same four (made-*) with the second child's memory made after "go", a GiB at a time
 * just ahead of its copy, as a resume makes it beside its copy (does a process's exit, or the
 * device memory it frees, slow the making and the copy down together?).
 *   usage: bench_exit_pinned [GiB (94)] [DEV GiB (45)] [copy]
 * Exit 0; 1 on an error; 77 without a GPU. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define THREADS 8

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *what, const char *why)
{
  fprintf(stderr, "bench_exit_pinned: %s: %s\n", what, why);
  exit(1);
}

static uint8_t *pool;
static uint64_t pool_bytes, piece;

struct lockers {
  pthread_mutex_t lock;
  uint64_t next;
  bool lock_them; /* page-lock the pieces, else give them back */
  int failed;
};

/* Page-lock (or give back) the pool a piece at a time, THREADS threads taking pieces in turn. */
static void *walk_pieces(void *arg)
{
  struct lockers *l = (struct lockers *)arg;
  for (;;) {
    pthread_mutex_lock(&l->lock);
    uint64_t at = l->next;
    l->next += piece;
    pthread_mutex_unlock(&l->lock);
    if (at >= pool_bytes) return NULL;
    uint64_t n = pool_bytes - at < piece ? pool_bytes - at : piece;
    if (!l->lock_them)
      cudaHostUnregister(pool + at);
    else if (cudaHostRegister(pool + at, n, cudaHostRegisterPortable) != cudaSuccess)
      l->failed = 1;
  }
}

/* The seconds THREADS threads took to page-lock the pool (lock_them) or give it back. */
static double in_threads(bool lock_them, int *failed)
{
  struct lockers l = {PTHREAD_MUTEX_INITIALIZER, 0, lock_them, 0};
  pthread_t t[THREADS];
  double t0 = now();
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, walk_pieces, &l);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  if (failed) *failed = l.failed;
  return now() - t0;
}

/* Write `line` to fd; read one back from fd (0 on EOF). */
static void say(int fd, const char *line) { (void)!write(fd, line, strlen(line)); }
static int hear(int fd, char *buf, size_t len)
{
  ssize_t n = read(fd, buf, len - 1);
  buf[n > 0 ? n : 0] = '\0';
  return n > 0;
}

/* What the first child does: page-lock the pool or not (BARE, TOUCHED), and on "go", before
 * it exits, the steps of STEP_* it is given, each timed. */
enum mode { EXIT, UNREG, BARE, TOUCHED, STEPS, DEVEXIT, BOTH };
enum { STEP_UNREG = 1, STEP_MUNMAP = 2, STEP_RESET = 4 };
static int steps;
static int first_dev; /* GiB of device memory the first child holds (DEVEXIT, BOTH) */
static bool copying; /* the second child copies instead of making memory */
static bool making;  /* ... and makes the memory after "go", 1 GiB at a time ahead of its copy */

/* The first child: page-lock the pool in pieces (BARE: nothing; TOUCHED: only fault it into its
 * own page tables), say "ready <seconds>", wait for "go", then (UNREG) give the pieces back and
 * say how long that took, and exit. */
static void first_child(int in, int out, int mode)
{
  char buf[128];
  if (cudaFree(0) != cudaSuccess) die("first child", "no CUDA context");
  int failed = 0;
  double took = 0;
  if (mode == EXIT || mode == UNREG || mode == STEPS || mode == BOTH)
    took = in_threads(true, &failed);
  if (mode == DEVEXIT || mode == BOTH) {
    void *held;
    size_t n = (size_t)first_dev << 30;
    if (cudaMalloc(&held, n) != cudaSuccess || cudaMemset(held, 7, n) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
      die("first child", "no device memory");
  }
  if (mode == TOUCHED) {
    double t0 = now();
    if (madvise(pool, pool_bytes, MADV_POPULATE_WRITE) != 0) die("populate", strerror(errno));
    took = now() - t0;
  }
  if (failed) die("cudaHostRegister", "failed");
  snprintf(buf, sizeof buf, "ready %.3f\n", took);
  say(out, buf);
  if (!hear(in, buf, sizeof buf)) _exit(1);
  double back = mode == UNREG || (steps & STEP_UNREG) ? in_threads(false, NULL) : 0;
  double t0 = now();
  if (steps & STEP_MUNMAP) munmap(pool, pool_bytes);
  double unmapped = now() - t0;
  t0 = now();
  if (steps & STEP_RESET) cudaDeviceReset();
  snprintf(buf, sizeof buf, "gone %.3f unmapped %.3f reset %.3f\n", back, unmapped, now() - t0);
  say(out, buf);
  /* exit, not _exit: the runtime's and the driver's teardown follow, as in a program's end
   * (the parent flushed its stdout before the fork, so nothing of it is written twice) */
  exit(0);
}

/* The second child copying: dev GiB of the pool, page-locked here, to device memory made before
 * "go", in 256 MiB copies on one stream, timed from "go" to the last copy's end. */
static void second_copies(int in, int out, int dev)
{
  char buf[128];
  size_t n = (size_t)dev << 30, part = (size_t)256 << 20, gib = (size_t)1 << 30;
  void *to = NULL, *piece_at[1024];
  cudaStream_t s;
  if ((!making && cudaMalloc(&to, n) != cudaSuccess) || cudaStreamCreate(&s) != cudaSuccess ||
      cudaHostRegister(pool, n, cudaHostRegisterPortable) != cudaSuccess)
    die("second child", "no device memory or no page-locking");
  say(out, "ready 0\n");
  if (!hear(in, buf, sizeof buf)) _exit(1);
  double t0 = now();
  if (making) { /* as a resume that makes memory beside its copy: each GiB, then its copy */
    for (size_t at = 0; at < n && at / gib < 1024; at += gib) {
      if (cudaMalloc(&piece_at[at / gib], gib) != cudaSuccess) die("second child", "cudaMalloc");
      cudaMemcpyAsync(piece_at[at / gib], pool + at, gib, cudaMemcpyHostToDevice, s);
    }
  }
  for (size_t at = 0; !making && at < n; at += part)
    cudaMemcpyAsync((char *)to + at, pool + at, part, cudaMemcpyHostToDevice, s);
  if (cudaStreamSynchronize(s) != cudaSuccess) die("second child", "the copy failed");
  snprintf(buf, sizeof buf, "made %.3f\n", now() - t0);
  say(out, buf);
  _exit(0);
}

/* The second child: its context first; on "go", dev GiB of device memory, timed. */
static void second_child(int in, int out, int dev)
{
  char buf[128];
  if (cudaFree(0) != cudaSuccess) die("second child", "no CUDA context");
  if (copying) second_copies(in, out, dev);
  say(out, "ready 0\n");
  if (!hear(in, buf, sizeof buf)) _exit(1);
  void *p[1024];
  int n = dev < 1024 ? dev : 1024;
  double t0 = now();
  for (int i = 0; i < n; i++)
    if (cudaMalloc(&p[i], 1ull << 30) != cudaSuccess) die("cudaMalloc", "failed");
  double took = now() - t0;
  for (int i = 0; i < n; i++) cudaFree(p[i]);
  snprintf(buf, sizeof buf, "made %.3f\n", took);
  say(out, buf);
  _exit(0);
}

struct child {
  pid_t pid;
  int to, from;
};

static struct child spawn(int which, int arg)
{
  int down[2], up[2];
  if (pipe(down) || pipe(up)) die("pipe", strerror(errno));
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) die("fork", strerror(errno));
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    if (which == 0) first_child(down[0], up[1], arg);
    second_child(down[0], up[1], arg);
  }
  close(down[0]);
  close(up[1]);
  return (struct child){pid, down[1], up[0]};
}

static double field(const char *line, const char *word)
{
  const char *at = strstr(line, word);
  return at ? atof(at + strlen(word)) : -1;
}

/* One case: pieces of piece_mib (0: no first child's exit beside, "alone"). */
static void one_case(const char *name, uint64_t piece_mib, int mode, int dev, double *alone)
{
  char a[128] = "", b[128] = "";
  piece = piece_mib << 20;
  struct child first = spawn(0, mode), second = spawn(1, dev);
  if (!hear(first.from, a, sizeof a) || !hear(second.from, b, sizeof b))
    die(name, "a child failed to start");
  double locked = field(a, "ready ");
  double t0 = now(), end = 0, made;
  if (alone) { /* the second alone, then the first's exit */
    say(second.to, "go\n");
    hear(second.from, b, sizeof b);
    say(first.to, "go\n");
    t0 = now();
  } else {
    say(first.to, "go\n");
    say(second.to, "go\n");
  }
  hear(first.from, a, sizeof a);
  int status;
  waitpid(first.pid, &status, 0);
  end = now() - t0;
  if (!alone) hear(second.from, b, sizeof b);
  waitpid(second.pid, &status, 0);
  made = field(b, "made ");
  if (made < 0) die(name, "the second child did not make its memory");
  if (alone) *alone = made;
  if (mode == BARE)
    printf("%-10s nothing page-locked nor touched: ", name);
  else if (mode == TOUCHED)
    printf("%-10s faulted in, not page-locked, in %.2f s: ", name, locked);
  else if (mode == DEVEXIT)
    printf("%-10s %d GiB of device memory, the pool untouched: ", name, first_dev);
  else
    printf("%-10s pieces of %4" PRIu64 " MiB (%5" PRIu64 "): page-locked in %.2f s; ", name,
           piece_mib, (pool_bytes + piece - 1) / piece, locked);
  if (mode == UNREG || (steps & STEP_UNREG)) printf("given back in %.2f s, then ", field(a, "gone "));
  if (steps & STEP_MUNMAP) printf("munmap %.2f s, then ", field(a, "unmapped "));
  if (steps & STEP_RESET) printf("cudaDeviceReset %.2f s, then ", field(a, "reset "));
  if (mode == BOTH) printf("and %d GiB of device memory; ", first_dev);
  if (copying)
    printf("exit %.2f s (from go to reaped); %d GiB copied to the device%s in %.3f s "
           "(%.1f GB/s)%s\n", end, dev, making ? ", its memory made beside," : "", made,
           dev * 1.073741824 / made,
           alone ? " (alone, before the exit)" : " beside the exit");
  else
    printf("exit %.2f s (from go to reaped); %d GiB of device memory made in %.3f s%s\n", end,
           dev, made, alone ? " (alone, before the exit)" : " beside the exit");
  close(first.to);
  close(first.from);
  close(second.to);
  close(second.from);
}

int main(int argc, char **argv)
{
  uint64_t gib = argc > 1 ? strtoull(argv[1], NULL, 10) : 94;
  int dev = argc > 2 ? atoi(argv[2]) : 45;
  pid_t probe = fork(); /* no CUDA in this process: its children fork from it */
  if (probe == 0) {
    int count = 0;
    _exit(cudaGetDeviceCount(&count) == cudaSuccess && count > 0 ? 0 : 77);
  }
  int status;
  waitpid(probe, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 77) {
    printf("skipped: no GPU\n");
    return 77;
  }
  pool_bytes = gib << 30;
  int fd = (int)syscall(SYS_memfd_create, "bench_exit_pinned", 0);
  if (fd < 0 || ftruncate(fd, (off_t)pool_bytes) != 0) die("memfd", strerror(errno));
  pool = (uint8_t *)mmap(NULL, pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (pool == MAP_FAILED) die("mmap", strerror(errno));
  madvise(pool, pool_bytes, MADV_HUGEPAGE);
  double t0 = now();
  if (madvise(pool, pool_bytes, MADV_POPULATE_WRITE) != 0) memset(pool, 1, pool_bytes);
  printf("pool: %" PRIu64 " GiB faulted in in %.2f s\n", gib, now() - t0);
  fflush(stdout);
  double alone = 0;
  if (argc > 3 && strcmp(argv[3], "copy") == 0) {
    copying = true;
    first_dev = dev;
    one_case("alone", 32, EXIT, dev, &alone);
    one_case("exit", 32, EXIT, dev, NULL);
    one_case("devexit", 0, DEVEXIT, dev, NULL);
    one_case("both", 32, BOTH, dev, NULL);
    one_case("alone", 32, BOTH, dev, &alone);
    making = true; /* the memory made after "go", beside the copy */
    one_case("made-alone", 32, EXIT, dev, &alone);
    one_case("made-exit", 32, EXIT, dev, NULL);
    one_case("made-dev", 0, DEVEXIT, dev, NULL);
    one_case("made-both", 32, BOTH, dev, NULL);
    return 0;
  }
  one_case("alone", 32, EXIT, dev, &alone);
  one_case("exit", 32, EXIT, dev, NULL);
  one_case("unreg", 32, UNREG, dev, NULL);
  one_case("exit", 1024, EXIT, dev, NULL);
  one_case("bare", 0, BARE, dev, NULL);
  one_case("touched", 0, TOUCHED, dev, NULL);
  steps = STEP_MUNMAP | STEP_RESET; /* what comes after the page-locked pool's teardown */
  one_case("munmap", 32, STEPS, dev, NULL);
  steps = STEP_UNREG | STEP_MUNMAP | STEP_RESET;
  one_case("all", 32, STEPS, dev, NULL);
  return 0;
}
