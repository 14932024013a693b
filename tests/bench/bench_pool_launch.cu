/* Description: what page-locking cudawd's host-memory pool costs the GPU work beside it (issue
 * 30: a shared job's first GPU phase ran 3-4x slow while the programs page-locked the pool).
 * The launching thread runs batches as sched_share_bench_job does: 16 kernels of ~2 ms (a spin on
 * the SM clock), then cudaStreamSynchronize. Per batch: its wall time and the GPU's (events).
 * Measured alone, then beside each of these in the background:
 *   register T[/P]  T threads of this process page-lock a memfd that is faulted in already (as
 *                   cudawd's pool is): MADV_POPULATE_WRITE through its own mapping in 8 MiB steps,
 *                   then cudaHostRegister(Portable), a piece at a time (checkpoint/reserve.c)
 *   others P x T    P other processes do the same on the same memfd (the other programs of a
 *                   share), this one page-locking nothing or also T threads
 *   nice            the page-locking threads at nice 19
 *   populate T      T threads fault a fresh memfd in (cudawd growing its pool), no page-locking
 *   spin T          T threads spin on the CPU
 * For each: the background's GB/s, the batches' mean wall and GPU time against alone's, and
 * the slowest batch. Ratios near 1.00 mean that background costs the GPU work nothing.
 *   usage: bench_pool_launch [GiB (32)]
 * Exit 0; 1 on an error; 77 without a GPU. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
using std::atomic_fetch_add;
using std::atomic_fetch_sub;
using std::atomic_load;
using std::atomic_store;

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define FAULT_STEP (8ull << 20)
#define BATCH 16
#define OTHERS 2
#define MAX_PIECES 8192
#define MAX_GIB ((MAX_PIECES * (16ull << 20)) >> 30) /* its smallest pieces: 16 MiB */

static double now(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *what, const char *why)
{
  fprintf(stderr, "bench_pool_launch: %s: %s\n", what, why);
  exit(1);
}

static void check(cudaError_t e, const char *what)
{
  if (e != cudaSuccess) die(what, cudaGetErrorString(e));
}

__global__ void spin(long long cycles, unsigned *sink)
{
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
  if (threadIdx.x == 0) atomicAdd(sink, 1u);
}

/* ---- the background work ------------------------------------------------------------------ */

enum work { WORK_NONE, WORK_REGISTER, WORK_POPULATE, WORK_SPIN };

static struct {
  enum work work;
  uint8_t *map;
  uint64_t length, piece;
  int nice;
  std::atomic<uint64_t> next;
  std::atomic<int> running; /* threads not yet finished */
  std::atomic<int> failed;
  std::atomic<bool> stop;   /* spin: the batches are done */
  void *pieces[MAX_PIECES];
} bg;

static void *background(void *arg)
{
  (void)arg;
  if (bg.nice) setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), bg.nice);
  if (bg.work == WORK_SPIN) {
    volatile uint64_t x = 0;
    while (!atomic_load(&bg.stop)) x++;
  }
  while (bg.work != WORK_SPIN) {
    uint64_t at = atomic_fetch_add(&bg.next, bg.piece);
    if (at >= bg.length) break;
    uint64_t n = bg.length - at < bg.piece ? bg.length - at : bg.piece;
    for (uint64_t done = 0; done < n; done += FAULT_STEP) {
      size_t step = (size_t)(n - done < FAULT_STEP ? n - done : FAULT_STEP);
      if (madvise(bg.map + at + done, step, MADV_POPULATE_WRITE) != 0) atomic_store(&bg.failed, 1);
    }
    if (bg.work == WORK_REGISTER) {
      if (cudaHostRegister(bg.map + at, (size_t)n, cudaHostRegisterPortable) != cudaSuccess)
        atomic_store(&bg.failed, 2);
      else
        bg.pieces[at / bg.piece] = bg.map + at;
    }
  }
  atomic_fetch_sub(&bg.running, 1);
  return NULL;
}

static pthread_t threads[64];

static void start_background(enum work work, uint8_t *map, uint64_t length, uint64_t piece,
                             int count, int nice)
{
  bg.work = work;
  bg.map = map;
  bg.length = length;
  bg.piece = piece;
  bg.nice = nice;
  atomic_store(&bg.next, 0);
  atomic_store(&bg.failed, 0);
  atomic_store(&bg.stop, false);
  atomic_store(&bg.running, count);
  memset(bg.pieces, 0, sizeof bg.pieces);
  for (int i = 0; i < count; i++)
    if (pthread_create(&threads[i], NULL, background, NULL) != 0) die("pthread_create", "failed");
}

static void join_background(int count)
{
  atomic_store(&bg.stop, true);
  for (int i = 0; i < count; i++) pthread_join(threads[i], NULL);
  if (atomic_load(&bg.failed)) die("background", atomic_load(&bg.failed) == 1 ? "madvise failed" : "cudaHostRegister failed");
  for (uint64_t i = 0; i < MAX_PIECES; i++)
    if (bg.pieces[i]) cudaHostUnregister(bg.pieces[i]);
}

/* ---- the other programs: children forked before any CUDA call ----------------------------- */

struct order {
  int threads, nice; /* threads 0: exit */
  uint64_t piece;
};

static int to_child[OTHERS][2], from_child[OTHERS][2];

static void child(int i, int fd, uint64_t length)
{
  uint8_t *map = (uint8_t *)mmap(NULL, (size_t)length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) die("child mmap", strerror(errno));
  struct order o;
  while (read(to_child[i][0], &o, sizeof o) == (ssize_t)sizeof o && o.threads > 0) {
    check(cudaFree(0), "child cudaFree(0)"); /* once there is a GPU (the first order) */
    double t0 = now();
    start_background(WORK_REGISTER, map, length, o.piece, o.threads, o.nice);
    while (atomic_load(&bg.running) > 0) usleep(1000);
    double took = now() - t0;
    if (write(from_child[i][1], &took, sizeof took) != (ssize_t)sizeof took) break;
    join_background(o.threads); /* unregisters, after the reply: not timed */
    if (write(from_child[i][1], &took, sizeof took) != (ssize_t)sizeof took) break;
  }
  exit(0);
}

static void order_others(int threads, int nice, uint64_t piece)
{
  struct order o = {threads, nice, piece};
  for (int i = 0; i < OTHERS; i++)
    if (write(to_child[i][1], &o, sizeof o) != (ssize_t)sizeof o) die("order", strerror(errno));
}

/* ---- the measured batches ----------------------------------------------------------------- */

struct stats {
  int batches;
  double wall_ms, gpu_ms, worst_ms, bg_seconds;
};

static long long cycles;
static unsigned *sink;
static cudaStream_t stream;
static cudaEvent_t ev[2];

static double batch(double *gpu_ms)
{
  double t0 = now();
  check(cudaEventRecord(ev[0], stream), "cudaEventRecord");
  for (int k = 0; k < BATCH; k++) spin<<<1, 32, 0, stream>>>(cycles, sink);
  check(cudaGetLastError(), "launch");
  check(cudaEventRecord(ev[1], stream), "cudaEventRecord");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime");
  *gpu_ms = ms;
  return (now() - t0) * 1e3;
}

/* Batches until `busy` says the background is done (at least `min` of them). */
static struct stats measure(int min, bool (*busy)(void))
{
  struct stats s = {0, 0, 0, 0, 0};
  double t0 = now();
  while (s.batches < min || (busy && busy())) {
    double gpu, wall = batch(&gpu);
    s.batches++;
    s.wall_ms += wall;
    s.gpu_ms += gpu;
    if (wall > s.worst_ms) s.worst_ms = wall;
  }
  s.wall_ms /= s.batches;
  s.gpu_ms /= s.batches;
  s.bg_seconds = now() - t0;
  return s;
}

static bool self_busy(void) { return atomic_load(&bg.running) > 0; }

static struct stats alone;

static void report(const char *name, struct stats s, double bg_bytes)
{
  printf("%-26s %8.2f %8d %10.2fx %9.2fx %11.1f\n", name,
         bg_bytes > 0 ? bg_bytes / s.bg_seconds / 1e9 : 0.0, s.batches, s.wall_ms / alone.wall_ms,
         s.gpu_ms / alone.gpu_ms, s.worst_ms);
  fflush(stdout);
}

/* Whether the other programs are still page-locking: a child writes its time when done. */
static bool others_done[OTHERS];
static int others_pending;

static bool others_busy(void)
{
  for (int i = 0; i < OTHERS; i++) {
    if (others_done[i]) continue;
    struct pollfd p = {from_child[i][0], POLLIN, 0};
    double took;
    if (poll(&p, 1, 0) == 1) {
      if (read(from_child[i][0], &took, sizeof took) != (ssize_t)sizeof took) die("child", "gone");
      others_done[i] = true;
      others_pending--;
    }
  }
  return others_pending > 0;
}

static bool any_busy(void) { return self_busy() | others_busy(); }

/* This process page-locks with `self` threads (0: none) while the others do with `others`;
 * batches run until all of them are done. */
static void registering(const char *name, uint8_t *map, uint64_t length, uint64_t piece, int self,
                        int others, int nice)
{
  memset(others_done, 0, sizeof others_done);
  others_pending = others ? OTHERS : 0;
  atomic_store(&bg.running, 0);
  if (others) order_others(others, nice, piece);
  if (self) start_background(WORK_REGISTER, map, length, piece, self, nice);
  struct stats s = measure(5, any_busy);
  if (self) join_background(self);
  for (int i = 0; others && i < OTHERS; i++) { /* their unregistering, not timed */
    double took;
    if (read(from_child[i][0], &took, sizeof took) != (ssize_t)sizeof took)
      die("child", "gone while unregistering");
  }
  double bytes = (double)length * ((self ? 1 : 0) + (others ? OTHERS : 0));
  report(name, s, bytes);
}

int main(int argc, char **argv)
{
  uint64_t gib = argc > 1 ? strtoull(argv[1], NULL, 10) : 32;
  if (gib == 0 || gib > MAX_GIB) {
    fprintf(stderr, "usage: bench_pool_launch [GiB, 1 to %llu]\n", (unsigned long long)MAX_GIB);
    return 2;
  }
  uint64_t length = gib << 30, piece = 256ull << 20;
  int fd = memfd_create("bench-pool-launch", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)length) != 0) die("memfd", strerror(errno));
  for (int i = 0; i < OTHERS; i++) {
    if (pipe(to_child[i]) || pipe(from_child[i])) die("pipe", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) die("fork", strerror(errno));
    if (pid == 0) child(i, fd, length);
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("skipped: no GPU\n");
    order_others(0, 0, 0);
    for (int i = 0; i < OTHERS; i++) wait(NULL);
    return 77;
  }
  uint8_t *map = (uint8_t *)mmap(NULL, (size_t)length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) die("mmap", strerror(errno));
  /* cudawd's pool: faulted in before the programs page-lock it (no page-locking here). */
  double t0 = now();
  start_background(WORK_POPULATE, map, length, FAULT_STEP * 8, 16, 0);
  join_background(16);
  printf("pool: %llu GiB memfd faulted in by 16 threads at %.2f GB/s; %d other programs\n",
         (unsigned long long)gib, (double)length / (now() - t0) / 1e9, OTHERS);

  int clock_khz = 0;
  check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0), "clock rate");
  cycles = (long long)clock_khz * 2; /* 2 ms at the nominal clock */
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaEventCreate(&ev[0]), "cudaEventCreate");
  check(cudaEventCreate(&ev[1]), "cudaEventCreate");
  check(cudaMalloc(&sink, sizeof *sink), "cudaMalloc");
  measure(5, NULL); /* warm up */
  alone = measure(40, NULL);
  printf("alone: a batch of %d kernels takes %.2f ms (GPU %.2f ms)\n", BATCH, alone.wall_ms,
         alone.gpu_ms);
  printf("%-26s %8s %8s %11s %10s %11s\n", "beside", "GB/s", "batches", "wall/alone",
         "gpu/alone", "slowest ms");

  registering("register 1", map, length, piece, 1, 0, 0);
  registering("register 2", map, length, piece, 2, 0, 0);
  registering("register 8", map, length, piece, 8, 0, 0);
  registering("register 8, 16 MiB pieces", map, length, 16ull << 20, 8, 0, 0);
  registering("register 8, 32 MiB pieces", map, length, 32ull << 20, 8, 0, 0);
  registering("register 8, 64 MiB pieces", map, length, 64ull << 20, 8, 0, 0);
  registering("register 16, 32 MiB pieces", map, length, 32ull << 20, 16, 0, 0);
  registering("register 8, nice 19", map, length, piece, 8, 0, 19);
  registering("others 2 x 8", map, length, piece, 0, 8, 0);
  registering("others 2 x 2", map, length, piece, 0, 2, 0);
  registering("8 + others 2 x 8", map, length, piece, 8, 8, 0);
  registering("8 + others 2 x 8, nice 19", map, length, piece, 8, 8, 19);
  registering("8 + others 2 x 8, 32 MiB", map, length, 32ull << 20, 8, 8, 0);
  registering("2 + others 2 x 2", map, length, piece, 2, 2, 0);
  registering("1 + others 2 x 1", map, length, piece, 1, 1, 0);

  /* cudawd growing its pool: a fresh memfd faulted in, nothing page-locked. */
  uint64_t fresh_length = length / 2;
  int fresh = memfd_create("bench-pool-fresh", MFD_CLOEXEC);
  uint8_t *fresh_map = fresh >= 0 && ftruncate(fresh, (off_t)fresh_length) == 0
                           ? (uint8_t *)mmap(NULL, (size_t)fresh_length, PROT_READ | PROT_WRITE,
                                             MAP_SHARED, fresh, 0)
                           : (uint8_t *)MAP_FAILED;
  if (fresh_map == MAP_FAILED) die("fresh memfd", strerror(errno));
  t0 = now();
  start_background(WORK_POPULATE, fresh_map, fresh_length, FAULT_STEP * 8, 8, 0);
  struct stats s = measure(5, self_busy);
  join_background(8);
  report("populate 8 (fresh)", s, (double)fresh_length);
  munmap(fresh_map, (size_t)fresh_length);
  close(fresh);

  start_background(WORK_SPIN, NULL, 0, 0, 24, 0);
  s = measure(40, NULL);
  join_background(24);
  report("spin 24", s, 0);

  order_others(0, 0, 0);
  for (int i = 0; i < OTHERS; i++) wait(NULL);
  return 0;
}
