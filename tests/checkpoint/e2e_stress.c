/* Description: a program under cudaw (emulated device) with 8 threads allocating, freeing,
 * copying (sync, async, device to device) and setting memory, checkpointed and resumed at random
 * moments for hundreds of cycles through SIGUSR1, the control socket and cudaw-ctl. Every byte
 * of every buffer is checked against a host shadow copy by the threads as they go and at the end;
 * while paused the threads must make no progress and the device memory must be given back.
 * Run under CUDAW_VMEM=remap and translate (the emulated device never reuses an address, so
 * under translate the real addresses change at every resume). With CUDAW_CKPT_LIVE=1 every
 * checkpoint is live: memory is copied while the threads write, allocate and free, and the pause
 * must re-copy whatever changed (the replies must say live, with bytes pre-copied).
 * usage: e2e_stress <cudaw-ctl> [cycles] */
#include "e2e_common.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#define THREADS 8
#define BUFFERS 12

struct buffer {
  unsigned char *device;
  unsigned char *shadow;
  size_t size;
};

struct worker {
  int index;
  pthread_t thread;
  uint64_t random;
  struct buffer buffers[BUFFERS];
  int count;
  cudaStream_t stream;
  unsigned char *scratch; /* pinned, for async copies and checks */
};

#define SCRATCH_BYTES ((size_t)4 << 20)

static atomic_int stop;
static atomic_ulong operations;
static struct worker workers[THREADS];

static void fill_random(struct worker *w, unsigned char *p, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    if (i % 8 == 0) e2e_random(&w->random);
    p[i] = (unsigned char)(w->random >> (8 * (i % 8)));
  }
}

static void verify(struct worker *w, struct buffer *b, const char *when)
{
  CUDA_OK(cudaMemcpy(w->scratch, b->device, b->size, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < b->size; i++)
    if (w->scratch[i] != b->shadow[i])
      test_fail("thread %d, %s: buffer %p (%zu bytes) byte %zu is %#x, expected %#x", w->index,
                when, (void *)b->device, b->size, i, w->scratch[i], b->shadow[i]);
}

static void step(struct worker *w)
{
  uint64_t r = e2e_random(&w->random);
  int op = (int)(r % 8);
  if (op < 2 || w->count == 0) {
    if (w->count == BUFFERS) return;
    struct buffer *b = &w->buffers[w->count];
    b->size = (r >> 8) % 16 == 0 ? ((size_t)1 << 20) + (size_t)((r >> 16) % (1u << 20))
                                : 1 + (size_t)((r >> 16) % 65536);
    b->shadow = malloc(b->size);
    CHECK(b->shadow);
    fill_random(w, b->shadow, b->size);
    CUDA_OK(cudaMalloc((void **)&b->device, b->size));
    CUDA_OK(cudaMemcpy(b->device, b->shadow, b->size, cudaMemcpyHostToDevice));
    w->count++;
    return;
  }
  struct buffer *b = &w->buffers[(r >> 8) % (uint64_t)w->count];
  size_t offset = (size_t)((r >> 20) % b->size), length = b->size - offset;
  if (length > 4096 + (r >> 40) % 65536) length = 4096 + (size_t)((r >> 40) % 65536);
  switch (op) {
  case 2: /* free, after a last check */
    verify(w, b, "before free");
    CUDA_OK(cudaFree(b->device));
    free(b->shadow);
    *b = w->buffers[--w->count];
    break;
  case 3:
  case 4:
    verify(w, b, "check");
    break;
  case 5: {
    int value = (int)(r >> 56);
    CUDA_OK(cudaMemset(b->device + offset, value, length));
    memset(b->shadow + offset, value, length);
    break;
  }
  case 6:
    fill_random(w, w->scratch, length);
    CUDA_OK(cudaMemcpyAsync(b->device + offset, w->scratch, length, cudaMemcpyHostToDevice,
                            w->stream));
    CUDA_OK(cudaStreamSynchronize(w->stream));
    memcpy(b->shadow + offset, w->scratch, length);
    break;
  default: { /* device to device, between two of this thread's buffers */
    struct buffer *from = &w->buffers[(r >> 12) % (uint64_t)w->count];
    size_t n = from->size < b->size - offset ? from->size : b->size - offset;
    if (from == b) break;
    CUDA_OK(cudaMemcpy(b->device + offset, from->device, n, cudaMemcpyDeviceToDevice));
    memcpy(b->shadow + offset, from->shadow, n);
    break;
  }
  }
}

static void *work(void *arg)
{
  struct worker *w = arg;
  CUDA_OK(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking));
  CUDA_OK(cudaMallocHost((void **)&w->scratch, SCRATCH_BYTES));
  while (!atomic_load(&stop)) {
    step(w);
    /* Some steps make no API call (a full buffer table, a copy onto itself): end every step at
     * the gate, so that a step is only counted by a thread that got through it. */
    int device;
    CUDA_OK(cudaGetDevice(&device));
    atomic_fetch_add(&operations, 1);
  }
  for (int i = 0; i < w->count; i++) {
    verify(w, &w->buffers[i], "at the end");
    CUDA_OK(cudaFree(w->buffers[i].device));
    free(w->buffers[i].shadow);
  }
  CUDA_OK(cudaFreeHost(w->scratch));
  CUDA_OK(cudaStreamDestroy(w->stream));
  return NULL;
}

enum method { BY_SOCKET, BY_SIGNAL, BY_CTL };

/* With CUDAW_CKPT_RESERVE set: checkpoints whose whole image went straight into the reserve. */
static int reserved_checkpoints;
/* With CUDAW_CKPT_LIVE=1: what the live checkpoints copied before and inside their pauses. */
static int live_checkpoints;
static unsigned long long precopied, recopied;

static unsigned long long json_u64(const char *reply, const char *key)
{
  char want[64];
  snprintf(want, sizeof want, "\"%s\":", key);
  const char *at = strstr(reply, want);
  return at ? strtoull(at + strlen(want), NULL, 10) : 0;
}

static void checkpoint(enum method how, const char *ctl)
{
  char reply[4096];
  if (how == BY_SIGNAL) {
    CHECK(kill(getpid(), SIGUSR1) == 0);
    CHECK(e2e_wait_state("paused", 20), "not paused 20 s after SIGUSR1");
    e2e_ask("status", reply, sizeof reply);
    CHECK(strstr(reply, "\"last_op\":\"checkpoint\",\"last_ok\":true"), "status: %s", reply);
  } else if (how == BY_CTL) {
    int code = e2e_run_ctl(ctl, "checkpoint", (long)getpid(), reply, sizeof reply);
    CHECK(code == 0 && strstr(reply, "paused: saved"), "cudaw-ctl checkpoint: exit %d: %s", code,
          reply);
  } else {
    e2e_ask("checkpoint", reply, sizeof reply);
    CHECK(e2e_reply_ok(reply) && e2e_reply_state(reply, "paused"), "checkpoint: %s", reply);
    unsigned long long bytes = json_u64(reply, "bytes"), in = json_u64(reply, "reserve_bytes");
    unsigned long long staged = json_u64(reply, "staged_bytes");
    /* A reserve ready in part takes that part, the rest is staged: together the whole image
     * (its 32 MiB pieces make a part likely here). Live: regions that appeared after the
     * pre-copy's image took the reserve lie outside it. */
    CHECK(in == 0 || in + staged == bytes || strstr(reply, "\"live\":true"),
          "an image neither in the reserve nor staged: %s", reply);
    if (in && staged == 0) reserved_checkpoints++;
    if (strstr(reply, "\"live\":true")) {
      live_checkpoints++;
      precopied += json_u64(reply, "precopy_bytes");
      recopied += json_u64(reply, "recopy_bytes");
    }
  }
}

static void resume(enum method how, const char *ctl)
{
  char reply[4096];
  if (how == BY_CTL) {
    int code = e2e_run_ctl(ctl, "resume", (long)getpid(), reply, sizeof reply);
    CHECK(code == 0 && strstr(reply, "running: restored and verified"),
          "cudaw-ctl resume: exit %d: %s", code, reply);
  } else {
    e2e_ask("resume", reply, sizeof reply);
    CHECK(e2e_reply_ok(reply) && e2e_reply_state(reply, "running"), "resume: %s", reply);
  }
}

int main(int argc, char **argv)
{
  CHECK(argc >= 2, "usage: e2e_stress <cudaw-ctl> [cycles]");
  const char *ctl = argv[1];
  int cycles = argc > 2 ? atoi(argv[2]) : 300;
  size_t free_start, total;
  CUDA_OK(cudaFree(NULL)); /* vmem starts with the first allocation; the device is up now */
  /* Paused before the first allocation: the context's stack memory goes all the same
   * (regression: it stayed while cudaw held no memory yet, and a pause at cycle 0 that beat
   * every thread's first cudaMalloc saw 2 MiB in use). */
  checkpoint(BY_SOCKET, ctl);
  e2e_emu_mem_info(&free_start, &total);
  CHECK(free_start == total, "paused before any allocation: %zu of %zu bytes still in use",
        total - free_start, total);
  resume(BY_SOCKET, ctl);
  e2e_emu_mem_info(&free_start, &total);
  CHECK(free_start < total, "the context's stack memory did not come back at resume");

  for (int t = 0; t < THREADS; t++) {
    workers[t].index = t;
    workers[t].random = 0x9E3779B97F4A7C15ull * (uint64_t)(t + 1);
    CHECK(pthread_create(&workers[t].thread, NULL, work, &workers[t]) == 0);
  }
  uint64_t random = 12345;
  unsigned long paused_checks = 0;
  double pause_total = 0;
  for (int cycle = 0; cycle < cycles; cycle++) {
    e2e_sleep_us((long)(e2e_random(&random) % 3000));
    enum method how = cycle % 50 == 7 ? BY_CTL : cycle % 5 == 3 ? BY_SIGNAL : BY_SOCKET;
    double t0 = e2e_now();
    checkpoint(how, ctl);
    pause_total += e2e_now() - t0;

    /* Paused: no thread gets through the gate, and the device memory is back on the device. A
     * thread whose last call returned just before the gate closed may still count its step:
     * let it settle first (regression: the check raced with that increment once pauses got
     * faster). */
    e2e_sleep_us(2000);
    unsigned long before = atomic_load(&operations);
    e2e_sleep_us(cycle % 10 == 0 ? 20000 : 500);
    CHECK(atomic_load(&operations) == before, "threads made progress while paused");
    size_t free_paused;
    e2e_emu_mem_info(&free_paused, &total);
    CHECK(free_paused == total, "cycle %d: %zu of %zu bytes still in use while paused", cycle,
          total - free_paused, total);
    paused_checks++;
    resume(how == BY_SIGNAL ? BY_SOCKET : how, ctl);
  }
  unsigned long ops = atomic_load(&operations);
  atomic_store(&stop, 1);
  for (int t = 0; t < THREADS; t++) pthread_join(workers[t].thread, NULL);
  size_t free_end;
  e2e_emu_mem_info(&free_end, &total);
  printf("e2e_stress: %d checkpoint/resume cycles (%lu paused checks, %.2f ms per checkpoint), "
         "%lu operations by %d threads, every byte verified; ok\n",
         cycles, paused_checks, pause_total / cycles * 1e3, ops, THREADS);
  CHECK(ops > (unsigned long)cycles, "the threads barely ran: %lu operations", ops);
  const char *live = getenv("CUDAW_CKPT_LIVE");
  if (live && strcmp(live, "1") == 0) {
    printf("e2e_stress: %d live checkpoints by socket: %llu bytes copied while running, %llu "
           "re-copied in the pauses\n", live_checkpoints, precopied, recopied);
    CHECK(live_checkpoints > cycles / 2, "checkpoints by socket were not live");
    CHECK(precopied > 0, "nothing was copied while the program ran");
  }
  const char *reserve = getenv("CUDAW_CKPT_RESERVE");
  if (reserve && *reserve) {
    char reply[4096];
    double deadline = e2e_now() + 5; /* the image is freed just after the resume's reply */
    do e2e_ask("status", reply, sizeof reply);
    while (!strstr(reply, "\"reserve_used\":0,") && e2e_now() < deadline);
    printf("e2e_stress: %d checkpoints copied straight into the reserve; status: reserve %llu "
           "bytes, %llu used\n", reserved_checkpoints, json_u64(reply, "reserve_bytes"),
           json_u64(reply, "reserve_used"));
    CHECK(reserved_checkpoints > 0, "no checkpoint used the reserve");
    CHECK(json_u64(reply, "reserve_bytes") > 0, "status shows no reserve: %s", reply);
    CHECK(strstr(reply, "\"reserve_used\":0,"), "the reserve is given back at resume: %s", reply);
  }
  return 0;
}
