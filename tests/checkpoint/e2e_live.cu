/* Description: live checkpoints of an unmodified nvcc program (shared runtime) under cudaw on the
 * emulated device. Mode "writers": 4 threads write their buffers with kernel launches (pointer
 * arguments), async copies, memsets and copies from short-lived allocations while the main
 * thread live-checkpoints and resumes them again and again; every byte is verified against host
 * shadows during and after. Mode "exit": child processes end while a live checkpoint copies their
 * memory; each must exit cleanly (status 0) within seconds. Exits 77 without a device.
 * usage: e2e_live writers [cycles] | e2e_live exit [children] */
#include <errno.h>
#include <pthread.h>
#include <atomic>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "cudaw_emu.h"
#include "test.h"

#define CUDA_OK(call)                                                                    \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    CHECK(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorName(e_));                     \
  } while (0)

__host__ __device__ static unsigned stamp_value(unsigned seed, unsigned long long i)
{
  return seed * 2654435761u ^ (unsigned)(i * 40503u + (i >> 7));
}

__global__ void stamp(unsigned *p, unsigned long long n, unsigned seed)
{
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    p[i] = stamp_value(seed, i);
}

/* What stamp does, for the emulated device. */
CUDAW_EMU_KERNEL(_Z5stampPjyj) {
  (void)launch;
  unsigned *p = CUDAW_EMU_ARG(args, 0, unsigned *);
  unsigned long long n = CUDAW_EMU_ARG(args, 1, unsigned long long);
  unsigned seed = CUDAW_EMU_ARG(args, 2, unsigned);
  for (unsigned long long i = 0; i < n; i++) p[i] = stamp_value(seed, i);
}

static double now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(long us)
{
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static uint64_t next_random(uint64_t *state)
{
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* One request line to this process's control socket; the reply line into reply. */
static int ask(const char *request, char *reply, size_t len)
{
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  const char *dir = getenv("CUDAW_RUN_DIR");
  CHECK(dir && *dir, "CUDAW_RUN_DIR must be set");
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%ld.sock", dir, (long)getpid());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    if (fd >= 0) close(fd);
    return -errno;
  }
  size_t n = strlen(request), used = 0;
  if (send(fd, request, n, MSG_NOSIGNAL) != (ssize_t)n) {
    close(fd);
    return -EIO;
  }
  while (used + 1 < len) {
    ssize_t got = recv(fd, reply + used, len - 1 - used, 0);
    if (got <= 0) break;
    used += (size_t)got;
    if (memchr(reply, '\n', used)) break;
  }
  reply[used] = '\0';
  close(fd);
  return used ? 0 : -ENODATA;
}

static unsigned long long json_u64(const char *reply, const char *key)
{
  char want[64];
  snprintf(want, sizeof want, "\"%s\":", key);
  const char *at = strstr(reply, want);
  return at ? strtoull(at + strlen(want), NULL, 10) : 0;
}

/* ---- writers ---- */

#define WRITERS 4
#define BIG_WORDS ((size_t)6 << 18) /* 6 MiB of unsigned */
#define SMALL_WORDS ((size_t)25 << 10) /* 100 KiB */

struct writer {
  pthread_t thread;
  int index;
  uint64_t random;
  cudaStream_t stream;
  unsigned *device[2], *shadow[2];
  size_t words[2];
  unsigned *scratch; /* pinned */
  std::atomic<unsigned long> done; /* steps finished */
};

static std::atomic<int> stop;
static std::atomic<unsigned long> steps;
static struct writer writers[WRITERS];

static void verify(struct writer *w, int b, const char *when)
{
  CUDA_OK(cudaStreamSynchronize(w->stream));
  unsigned *host = (unsigned *)malloc(w->words[b] * sizeof *host);
  CHECK(host);
  CUDA_OK(cudaMemcpy(host, w->device[b], w->words[b] * sizeof *host, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < w->words[b]; i++)
    if (host[i] != w->shadow[b][i])
      test_fail("writer %d, %s: buffer %d word %zu is %#x, expected %#x", w->index, when, b, i,
                host[i], w->shadow[b][i]);
  free(host);
}

static void step(struct writer *w)
{
  uint64_t r = next_random(&w->random);
  int b = (int)(r >> 4) & 1;
  size_t first = (size_t)((r >> 8) % w->words[b]), n = w->words[b] - first;
  size_t most = 1 + (size_t)((r >> 32) % (256u << 10));
  if (n > most) n = most;
  unsigned seed = (unsigned)(r >> 40);
  switch (r % 5) {
  case 0: /* a kernel writes through its pointer argument */
    stamp<<<64, 128, 0, w->stream>>>(w->device[b] + first, n, seed);
    CUDA_OK(cudaGetLastError());
    for (size_t i = 0; i < n; i++) w->shadow[b][first + i] = stamp_value(seed, i);
    break;
  case 1: { /* an async copy from pinned memory */
    if (n > (256u << 10)) n = 256u << 10;
    for (size_t i = 0; i < n; i++) w->scratch[i] = seed + (unsigned)i * 7u;
    CUDA_OK(cudaMemcpyAsync(w->device[b] + first, w->scratch, n * sizeof(unsigned),
                            cudaMemcpyHostToDevice, w->stream));
    memcpy(w->shadow[b] + first, w->scratch, n * sizeof(unsigned));
    break;
  }
  case 2: /* memset */
    CUDA_OK(cudaMemsetAsync(w->device[b] + first, (int)(seed & 0xff), n * sizeof(unsigned),
                            w->stream));
    memset(w->shadow[b] + first, (int)(seed & 0xff), n * sizeof(unsigned));
    break;
  case 3: { /* a short-lived allocation: written, copied from, freed (during the pre-copy too) */
    unsigned *temp;
    size_t temp_bytes = n * sizeof(unsigned) + (size_t)(r >> 62) * (256u << 10);
    cudaError_t e_ = cudaMalloc((void **)&temp, temp_bytes);
    CHECK(e_ == cudaSuccess, "cudaMalloc(%zu): %s", temp_bytes, cudaGetErrorName(e_));
    stamp<<<16, 128, 0, w->stream>>>(temp, n, seed);
    CUDA_OK(cudaMemcpyAsync(w->device[b] + first, temp, n * sizeof(unsigned),
                            cudaMemcpyDeviceToDevice, w->stream));
    CUDA_OK(cudaStreamSynchronize(w->stream));
    CUDA_OK(cudaFree(temp));
    for (size_t i = 0; i < n; i++) w->shadow[b][first + i] = stamp_value(seed, i);
    break;
  }
  default:
    if ((r >> 20) % 8 == 0) verify(w, b, "check");
    break;
  }
  CUDA_OK(cudaStreamSynchronize(w->stream)); /* scratch is reused by the next step */
}

static void *write_loop(void *arg)
{
  struct writer *w = (struct writer *)arg;
  CUDA_OK(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking));
  CUDA_OK(cudaMallocHost((void **)&w->scratch, (256u << 10) * sizeof(unsigned)));
  while (!stop.load()) {
    step(w);
    steps.fetch_add(1);
    w->done.fetch_add(1);
  }
  for (int b = 0; b < 2; b++) verify(w, b, "at the end");
  return NULL;
}

static int run_writers(int cycles)
{
  for (int t = 0; t < WRITERS; t++) {
    struct writer *w = &writers[t];
    w->index = t;
    w->random = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 3);
    w->words[0] = BIG_WORDS;
    w->words[1] = SMALL_WORDS;
    for (int b = 0; b < 2; b++) {
      w->shadow[b] = (unsigned *)calloc(w->words[b], sizeof(unsigned));
      CHECK(w->shadow[b]);
      CUDA_OK(cudaMalloc((void **)&w->device[b], w->words[b] * sizeof(unsigned)));
      CUDA_OK(cudaMemset(w->device[b], 0, w->words[b] * sizeof(unsigned)));
    }
  }
  for (int t = 0; t < WRITERS; t++)
    CHECK(pthread_create(&writers[t].thread, NULL, write_loop, &writers[t]) == 0);
  uint64_t random = 777;
  unsigned long long precopied = 0, recopied = 0;
  double stall = 0;
  for (int cycle = 0; cycle < cycles; cycle++) {
    sleep_us((long)(next_random(&random) % 3000));
    char reply[4096];
    CHECK(ask("checkpoint live\n", reply, sizeof reply) == 0);
    CHECK(strstr(reply, "\"ok\":true") && strstr(reply, "\"state\":\"paused\""), "checkpoint: %s",
          reply);
    CHECK(strstr(reply, "\"live\":true") && json_u64(reply, "precopy_bytes") > 0,
          "not a live checkpoint: %s", reply);
    precopied += json_u64(reply, "precopy_bytes");
    recopied += json_u64(reply, "recopy_bytes");
    stall += strtod(strstr(reply, "\"stall_ms\":") + 11, NULL);
    /* A writer past its step's last call when the gate closed may still count that step; one
     * that finished two steps while paused made a call through a closed gate. */
    unsigned long before[WRITERS];
    for (int t = 0; t < WRITERS; t++) before[t] = writers[t].done.load();
    sleep_us(20000);
    for (int t = 0; t < WRITERS; t++)
      CHECK(writers[t].done.load() <= before[t] + 1, "writer %d made progress while paused: %lu "
            "steps", t, writers[t].done.load() - before[t]);
    CHECK(ask("resume\n", reply, sizeof reply) == 0);
    CHECK(strstr(reply, "\"ok\":true"), "resume: %s", reply);
  }
  unsigned long done = steps.load();
  stop.store(1);
  for (int t = 0; t < WRITERS; t++) pthread_join(writers[t].thread, NULL);
  printf("e2e_live: %d live checkpoints with %d writers (%lu steps), %llu MiB pre-copied, %llu MiB "
         "re-copied in the pauses, mean stall %.3f ms; every word verified; ok\n",
         cycles, WRITERS, done, precopied >> 20, recopied >> 20, stall / cycles);
  CHECK(done > (unsigned long)cycles, "the writers barely ran: %lu steps", done);
  return 0;
}

/* ---- exit during the pre-copy ---- */

static void *request_live(void *unused)
{
  (void)unused;
  char reply[4096];
  ask("checkpoint live\n", reply, sizeof reply); /* the process may end before the reply */
  return NULL;
}

/* A child: memory to copy, a live checkpoint requested, and the end of main soon after. */
static int exit_child(long delay_us)
{
  void *memory;
  CUDA_OK(cudaMalloc(&memory, (size_t)160 << 20));
  CUDA_OK(cudaMemset(memory, 1, (size_t)160 << 20));
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, request_live, NULL) == 0);
  pthread_detach(thread);
  sleep_us(delay_us);
  return 0;
}

static int run_exits(const char *self, int children)
{
  uint64_t random = 99;
  for (int c = 0; c < children; c++) {
    char delay[32];
    snprintf(delay, sizeof delay, "%ld", (long)(next_random(&random) % 20000));
    double t0 = now();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      execl(self, self, "exit-child", delay, (char *)NULL);
      _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (now() - t0 > 30) {
        kill(pid, SIGKILL);
        test_fail("child %d (delay %s us) did not end within 30 s", c, delay);
      }
      sleep_us(1000);
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "child %d (delay %s us) ended with status %#x", c, delay, status);
  }
  printf("e2e_live: %d programs ended during a live checkpoint's copy, each cleanly; ok\n",
         children);
  return 0;
}

int main(int argc, char **argv)
{
  CHECK(argc >= 2, "usage: e2e_live writers [cycles] | exit [children]");
  if (strcmp(argv[1], "exit-child") == 0) return exit_child(argc > 2 ? atol(argv[2]) : 0);
  int count;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return 77;
  if (strcmp(argv[1], "writers") == 0) return run_writers(argc > 2 ? atoi(argv[2]) : 100);
  if (strcmp(argv[1], "exit") == 0) return run_exits(argv[0], argc > 2 ? atoi(argv[2]) : 20);
  test_fail("unknown mode %s", argv[1]);
}
