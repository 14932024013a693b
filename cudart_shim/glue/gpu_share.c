/* GPU-time shares. A metered program's launches are grouped per (device, stream) into batches:
 * an event is recorded before the first launch of a batch and the batch's end event is recorded
 * again behind each launch, so a batch's elapsed time is the GPU time of its launches. A batch
 * closes after BATCH_LAUNCHES launches, BATCH_NS of host time, or when its stream saw no launch
 * for GAP_NS (so that host gaps while the stream is idle are not counted); closed batches are
 * read back with cudaEventQuery, never waited for. A token bucket turns the share into holding:
 * it fills at share x wall time up to share x WINDOW_MS and each completed batch takes its GPU
 * time out; a launch waits at the gate (stepped out of the gate's count, so that a pause goes
 * on) while the bucket, less the estimated GPU time still queued, is below zero. Several streams
 * busy at once count once each: a multi-stream program is held back conservatively.
 * Programs with a share below 100% take turns on each device through a lock file in the run
 * directory (flock): one launches only while it holds the device's token and gives it back once
 * its queued work is done (a program over its share rests until a burst's worth is back in its
 * bucket, so turns are bursts, not single kernels). Without it, two programs' kernels would time-slice on the GPU and each
 * batch's elapsed time would include the other's slices, so both would be held back too much. A
 * thread of the metered program closes quiet batches, reads completed ones and gives the token
 * back when the program has nothing queued on the device. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "options.h"
#include "shim_generated.h"
#include "shim_gpu_share.h"
#include "shim_vmem.h"

#define MAX_DEVICES 16
#define OPEN_MAX 16              /* streams with an open batch at once */
#define PENDING_MAX 1024         /* closed batches not yet seen complete */
#define BATCH_LAUNCHES 64
#define BATCH_NS 2000000ull      /* 2 ms */
#define GAP_NS 200000ull         /* 200 us without a launch on the stream closes its batch */
#define POLL_NS 200000ull        /* read completed batches at most this often (unless holding) */
#define WINDOW_MS 100.0          /* the bucket holds at most share x this much GPU time */
#define BUCKET_NS 100000000ull   /* busy time per 100 ms, for the measured fraction */
#define BUCKETS 12
#define HISTORY_BUCKETS 10       /* the fraction covers the last second */

atomic_int shim_gpu_metered;

struct batch {
  bool open;
  unsigned generation;
  void *stream;
  int device;
  cudaEvent_t start, end;
  unsigned launches;
  unsigned launching; /* launches between shim_gpu_before and _after: not closed meanwhile */
  uint64_t opened_ns, last_ns;
};

struct closed_batch {
  cudaEvent_t start, end;
  unsigned launches;
  int device;
};

struct pool {
  cudaEvent_t *events;
  size_t count, capacity;
};

/* A device's turn among programs with shares: the lock file, and whether we hold it. */
struct token {
  bool opened;
  int fd; /* -1: no coordination on this device (the file could not be opened) */
  bool held;
};

static struct {
  pthread_mutex_t lock;
  int percent;                 /* 0: no share */
  bool ever;                   /* a share was set once: status reports it */
  double balance_ms;
  bool resting;                /* over its share: holding launches until the bucket is half full */
  uint64_t refilled_ns, polled_ns, since_ns;
  struct batch open[OPEN_MAX];
  unsigned generation;
  struct closed_batch pending[PENDING_MAX];
  unsigned pending_count;
  unsigned queued_launches;    /* launches in open and pending batches */
  double ms_per_launch;        /* running estimate from completed batches */
  double busy_ms, held_ms;     /* totals since the share was set */
  double bucket_ms[BUCKETS];
  uint64_t bucket_id[BUCKETS];
  struct pool pool[MAX_DEVICES];
  struct token token[MAX_DEVICES];
  bool thread_started;
} meter = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double rate(void) { return meter.percent / 100.0; }

/* ---- events ---- */

static cudaEvent_t take_event(int device)
{
  struct pool *pool = &meter.pool[device];
  if (pool->count) return pool->events[--pool->count];
  cudaEvent_t event = NULL;
  if (SHIM_REAL(cudaEventCreateWithFlags)(&event, cudaEventDefault) != cudaSuccess) return NULL;
  return event;
}

static void give_event(int device, cudaEvent_t event)
{
  struct pool *pool = &meter.pool[device];
  if (!event) return;
  if (pool->count == pool->capacity) {
    size_t capacity = pool->capacity ? 2 * pool->capacity : 64;
    cudaEvent_t *grown = realloc(pool->events, capacity * sizeof *grown);
    if (!grown) {
      SHIM_REAL(cudaEventDestroy)(event);
      return;
    }
    pool->events = grown;
    pool->capacity = capacity;
  }
  pool->events[pool->count++] = event;
}

/* ---- the bucket and the measurements (lock held) ---- */

static void refill(uint64_t now)
{
  if (meter.refilled_ns && now > meter.refilled_ns) {
    double cap = rate() * WINDOW_MS;
    meter.balance_ms += rate() * (double)(now - meter.refilled_ns) * 1e-6;
    if (meter.balance_ms > cap) meter.balance_ms = cap;
  }
  meter.refilled_ns = now;
}

static void account(double busy_ms, unsigned launches, uint64_t now)
{
  meter.balance_ms -= busy_ms;
  meter.busy_ms += busy_ms;
  uint64_t id = now / BUCKET_NS;
  unsigned slot = (unsigned)(id % BUCKETS);
  if (meter.bucket_id[slot] != id) meter.bucket_id[slot] = id, meter.bucket_ms[slot] = 0;
  meter.bucket_ms[slot] += busy_ms;
  meter.queued_launches -= launches < meter.queued_launches ? launches : meter.queued_launches;
  double per_launch = launches ? busy_ms / launches : 0;
  meter.ms_per_launch = meter.ms_per_launch > 0 ? 0.75 * meter.ms_per_launch + 0.25 * per_launch
                                                : per_launch;
}

/* Read back every closed batch that completed; keep the others in order. */
static void read_back(uint64_t now)
{
  meter.polled_ns = now;
  unsigned kept = 0;
  for (unsigned i = 0; i < meter.pending_count; i++) {
    struct closed_batch *b = &meter.pending[i];
    cudaError_t state = SHIM_REAL(cudaEventQuery)(b->end);
    if (state == cudaErrorNotReady) {
      meter.pending[kept++] = *b;
      continue;
    }
    float ms = 0;
    if (state == cudaSuccess &&
        SHIM_REAL(cudaEventElapsedTime)(&ms, b->start, b->end) == cudaSuccess && ms >= 0)
      account(ms, b->launches, now);
    else
      account(0, b->launches, now); /* a failed batch: its launches are no longer queued */
    give_event(b->device, b->start);
    give_event(b->device, b->end);
  }
  meter.pending_count = kept;
}

static void close_batch(struct batch *b)
{
  b->open = false;
  if (!b->launches || meter.pending_count == PENDING_MAX) {
    meter.queued_launches -= b->launches < meter.queued_launches ? b->launches
                                                                 : meter.queued_launches;
    give_event(b->device, b->start);
    give_event(b->device, b->end);
    return;
  }
  meter.pending[meter.pending_count++] =
      (struct closed_batch){b->start, b->end, b->launches, b->device};
}

/* GPU time the program has queued and not yet seen complete, estimated. */
static double queued_ms(void) { return meter.queued_launches * meter.ms_per_launch; }

/* What a resting program waits for in its bucket: enough for a burst of half a window (a burst
 * of b ms spends b x (1 - share)), and at most half of the others' share, so that while one
 * program has its burst the others' buckets (share x window) do not overflow; at least 2 ms, but
 * never more than half its own bucket (a 1% share's bucket holds 1 ms). */
static double resume_ms(void)
{
  double share = rate(), part = share < 1 - share ? share : 1 - share;
  double ms = part * WINDOW_MS / 2;
  if (ms < 2.0) ms = 2.0;
  return ms < share * WINDOW_MS / 2 ? ms : share * WINDOW_MS / 2; /* reachable: under the cap */
}

/* Over its share: the bucket, less what is queued, below zero; once over, the program rests
 * until resume_ms is back, so that it runs in bursts (turns) rather than one kernel at a time,
 * which would hand the device's token back and forth at every kernel. */
static bool over_share(void)
{
  if (meter.pending_count + OPEN_MAX >= PENDING_MAX) return true;
  if (meter.percent >= 100) return meter.resting = false;
  double allowance = meter.balance_ms - queued_ms();
  if (allowance < 0) meter.resting = true;
  else if (meter.resting && allowance >= resume_ms()) meter.resting = false;
  return meter.resting;
}

static void release_idle_tokens(void);

/* Wait while the program is over its share. Steps out of the gate's count while it sleeps. */
static void hold(void)
{
  if (!over_share()) return;
  int stepped_out = shim_gate_step_out();
  uint64_t began = now_ns();
  while (meter.percent && over_share()) {
    double deficit = queued_ms() + resume_ms() - meter.balance_ms;
    double wait_ms = meter.percent < 100 && deficit > 0 ? deficit / rate() : 0.2;
    if (wait_ms < 0.1) wait_ms = 0.1;
    if (wait_ms > 0.5) wait_ms = 0.5; /* read back soon: our queue drains, the token goes back */
    pthread_mutex_unlock(&meter.lock);
    struct timespec pause = {0, (long)(wait_ms * 1e6)};
    nanosleep(&pause, NULL);
    pthread_mutex_lock(&meter.lock);
    uint64_t now = now_ns();
    refill(now);
    read_back(now);
    release_idle_tokens();
  }
  meter.held_ms += (double)(now_ns() - began) * 1e-6;
  pthread_mutex_unlock(&meter.lock);
  shim_gate_step_in(stepped_out); /* may wait for a pause; then take the lock again */
  pthread_mutex_lock(&meter.lock);
}

/* ---- turns: the device's token (lock held unless said otherwise) ---- */

/* The device's lock file <run dir>/gpu-share-<uuid>.lock, opened once; -1 when unavailable. */
static int token_fd(int device)
{
  struct token *t = &meter.token[device];
  if (t->opened) return t->fd;
  t->opened = true;
  t->fd = -1;
  struct cudaDeviceProp prop;
  memset(&prop, 0, sizeof prop);
  struct ckpt_options options;
  char reason[200] = "", path[256], uuid[33];
  if (SHIM_REAL(cudaGetDeviceProperties)(&prop, device) != cudaSuccess) return -1;
  for (int i = 0; i < 16; i++) snprintf(uuid + 2 * i, 3, "%02x", (unsigned char)prop.uuid.bytes[i]);
  ckpt_options_from_env(&options, NULL, 0);
  if (ckpt_run_dir_prepare(options.run_dir, reason, sizeof reason) != 0 ||
      (size_t)snprintf(path, sizeof path, "%s/gpu-share-%s.lock", options.run_dir, uuid) >=
          sizeof path ||
      (t->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
    shim_warn("gpu share: no turns with other programs on device %d (%s): kernels of programs "
              "with shares may overlap and be held back more than their shares", device,
              t->fd < 0 && !reason[0] ? strerror(errno) : reason);
    t->fd = -1;
  }
  return t->fd;
}

/* Wait for the device's turn. Steps out of the gate's count and drops the lock while it waits;
 * tries again if the thread gave the token back before the lock was taken again. */
static void take_token(int device)
{
  struct token *t = &meter.token[device];
  int fd = token_fd(device);
  while (!t->held && fd >= 0 && meter.percent && meter.percent < 100) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      t->held = true;
      return;
    }
    int stepped_out = shim_gate_step_out();
    uint64_t began = now_ns();
    pthread_mutex_unlock(&meter.lock);
    int rc;
    while ((rc = flock(fd, LOCK_EX)) != 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&meter.lock);
    if (rc == 0) t->held = true;
    meter.held_ms += (double)(now_ns() - began) * 1e-6;
    refill(now_ns());
    pthread_mutex_unlock(&meter.lock);
    shim_gate_step_in(stepped_out);
    pthread_mutex_lock(&meter.lock);
    if (rc != 0) return; /* flock failed: go on without turns */
  }
}

/* Give back the tokens of devices where nothing of ours is open or queued. */
static void release_idle_tokens(void)
{
  for (int device = 0; device < MAX_DEVICES; device++) {
    struct token *t = &meter.token[device];
    if (!t->held) continue;
    bool busy = false;
    for (int i = 0; i < OPEN_MAX && !busy; i++)
      busy = meter.open[i].open && meter.open[i].device == device;
    for (unsigned i = 0; i < meter.pending_count && !busy; i++)
      busy = meter.pending[i].device == device;
    if (busy) continue;
    flock(t->fd, LOCK_UN);
    t->held = false;
  }
}

/* The metered program's thread: every half millisecond, close batches whose streams went quiet, read
 * back completed ones and give back tokens nobody here needs. Not while paused (a driver call
 * could wait for the driver's process checkpoint). */
static void *watch(void *unused)
{
  (void)unused;
  for (;;) {
    struct timespec pause = {0, 500000};
    nanosleep(&pause, NULL);
    if (ckpt_state() != CKPT_RUNNING) continue;
    pthread_mutex_lock(&meter.lock);
    uint64_t now = now_ns();
    for (int i = 0; i < OPEN_MAX; i++)
      if (meter.open[i].open && !meter.open[i].launching && now - meter.open[i].last_ns > GAP_NS)
        close_batch(&meter.open[i]);
    if (meter.pending_count) read_back(now);
    release_idle_tokens();
    pthread_mutex_unlock(&meter.lock);
  }
  return NULL;
}

/* ---- launches ---- */

static bool capturing(void *stream)
{
  enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return SHIM_REAL(cudaStreamIsCapturing)((cudaStream_t)stream, &status) != cudaSuccess ||
         status != cudaStreamCaptureStatusNone;
}

/* The open batch of (device, stream), opened now if needed (its start event recorded): its
 * index, or -1 when the events could not be had. Closes batches whose streams went quiet. */
static int batch_for(void *stream, int device, uint64_t now)
{
  int found = -1, free_slot = -1, oldest = -1;
  for (int i = 0; i < OPEN_MAX; i++) {
    struct batch *b = &meter.open[i];
    if (b->open && !b->launching && now - b->last_ns > GAP_NS) close_batch(b);
    if (!b->open) {
      if (free_slot < 0) free_slot = i;
      continue;
    }
    if (b->stream == stream && b->device == device) found = i;
    if (!b->launching && (oldest < 0 || b->last_ns < meter.open[oldest].last_ns)) oldest = i;
  }
  if (found >= 0) return found;
  if (free_slot < 0 && oldest < 0) return -1; /* every slot has a launch under way: not metered */
  if (free_slot < 0) {
    close_batch(&meter.open[oldest]);
    free_slot = oldest;
  }
  struct batch *b = &meter.open[free_slot];
  cudaEvent_t start = take_event(device), end = start ? take_event(device) : NULL;
  if (!end || SHIM_REAL(cudaEventRecord)(start, (cudaStream_t)stream) != cudaSuccess) {
    give_event(device, start);
    give_event(device, end);
    return -1;
  }
  *b = (struct batch){true, ++meter.generation, stream, device, start, end, 0, 0, now, now};
  return free_slot;
}

void shim_gpu_before(void *stream, int per_thread, struct shim_gpu_ticket *ticket)
{
  ticket->batch = -1;
  if (!atomic_load_explicit(&shim_gpu_metered, memory_order_relaxed)) return;
  if (per_thread && !stream) stream = (void *)cudaStreamPerThread;
  if (shim_capture_possible() && capturing(stream)) return; /* a graph's node: not run now */
  int device = 0;
  if (SHIM_REAL(cudaGetDevice)(&device) != cudaSuccess || device < 0 || device >= MAX_DEVICES)
    return;
  pthread_mutex_lock(&meter.lock);
  uint64_t now = now_ns();
  refill(now);
  if (now - meter.polled_ns >= POLL_NS || over_share()) read_back(now);
  hold();
  if (meter.percent && meter.percent < 100 && meter.thread_started) take_token(device);
  if (meter.percent) {
    ticket->batch = batch_for(stream, device, now_ns());
    if (ticket->batch >= 0) {
      ticket->generation = meter.open[ticket->batch].generation;
      meter.open[ticket->batch].launching++;
    }
  }
  pthread_mutex_unlock(&meter.lock);
}

void shim_gpu_after(struct shim_gpu_ticket *ticket)
{
  if (ticket->batch < 0) return;
  pthread_mutex_lock(&meter.lock);
  struct batch *b = &meter.open[ticket->batch];
  if (b->open && b->generation == ticket->generation) {
    b->launching--;
    if (SHIM_REAL(cudaEventRecord)(b->end, (cudaStream_t)b->stream) != cudaSuccess) {
      b->launches = 0; /* no end to measure to: drop the batch */
      close_batch(b);
    } else {
      uint64_t now = now_ns();
      b->launches++;
      meter.queued_launches++;
      b->last_ns = now;
      if (b->launches >= BATCH_LAUNCHES || now - b->opened_ns >= BATCH_NS) close_batch(b);
    }
  }
  pthread_mutex_unlock(&meter.lock);
}

void shim_gpu_device_reset(void)
{
  int device = 0;
  if (SHIM_REAL(cudaGetDevice)(&device) != cudaSuccess || device < 0 || device >= MAX_DEVICES)
    return;
  pthread_mutex_lock(&meter.lock);
  /* The reset destroys the device's events: forget them without destroying them. */
  meter.pool[device].count = 0;
  for (int i = 0; i < OPEN_MAX; i++)
    if (meter.open[i].open && meter.open[i].device == device) meter.open[i].open = false;
  unsigned kept = 0;
  for (unsigned i = 0; i < meter.pending_count; i++)
    if (meter.pending[i].device != device) meter.pending[kept++] = meter.pending[i];
  meter.pending_count = kept;
  meter.queued_launches = 0;
  pthread_mutex_unlock(&meter.lock);
}

/* ---- the share ---- */

int shim_gpu_set_share(int percent)
{
  if (percent < 0 || percent > 100) return -EINVAL;
  pthread_mutex_lock(&meter.lock);
  uint64_t now = now_ns();
  if (percent && !meter.percent) { /* metering starts: an empty bucket, fresh figures */
    meter.balance_ms = 0;
    meter.busy_ms = meter.held_ms = 0;
    memset(meter.bucket_ms, 0, sizeof meter.bucket_ms);
    memset(meter.bucket_id, 0, sizeof meter.bucket_id);
    meter.since_ns = now;
  }
  if (percent && meter.percent) refill(now); /* the old rate up to now */
  if (!percent) /* batches still open are read back if metering starts again */
    for (int i = 0; i < OPEN_MAX; i++)
      if (meter.open[i].open) close_batch(&meter.open[i]);
  meter.percent = percent;
  meter.resting = false;
  meter.refilled_ns = now;
  if (percent) meter.ever = true;
  if (percent && meter.balance_ms > rate() * WINDOW_MS) meter.balance_ms = rate() * WINDOW_MS;
  if (percent && !meter.thread_started) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    meter.thread_started = pthread_create(&thread, &attr, watch, NULL) == 0;
    pthread_attr_destroy(&attr);
    if (!meter.thread_started) shim_warn("gpu share: cannot start its thread: no turns");
  }
  if (percent == 0 || percent == 100 || !meter.thread_started) /* no turns now */
    for (int device = 0; device < MAX_DEVICES; device++)
      if (meter.token[device].held) {
        flock(meter.token[device].fd, LOCK_UN);
        meter.token[device].held = false;
      }
  atomic_store_explicit(&shim_gpu_metered, percent != 0, memory_order_relaxed);
  pthread_mutex_unlock(&meter.lock);
  return 0;
}

/* "30", "30%", or "off"/"0" (0); -EINVAL otherwise. */
static int parse_percent(const char *text, int *percent)
{
  if (strcmp(text, "off") == 0 || strcmp(text, "none") == 0) {
    *percent = 0;
    return 0;
  }
  char *end;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (*end == '%') end++;
  if (errno || end == text || *end || value < 0 || value > 100) return -EINVAL;
  *percent = (int)value;
  return 0;
}

size_t shim_gpu_status_json(char *buf, size_t len)
{
  pthread_mutex_lock(&meter.lock);
  uint64_t now = now_ns(), current = now / BUCKET_NS;
  double busy = 0;
  for (unsigned i = 0; i < BUCKETS; i++)
    if (meter.bucket_id[i] < current && meter.bucket_id[i] + HISTORY_BUCKETS >= current)
      busy += meter.bucket_ms[i];
  /* The complete buckets of the last second, or fewer since metering began. */
  double span_ms = HISTORY_BUCKETS * BUCKET_NS * 1e-6;
  double since_ms = meter.since_ns ? (double)(current * BUCKET_NS - meter.since_ns) * 1e-6 : 0;
  if (since_ms < span_ms) span_ms = since_ms;
  int n = meter.ever || meter.percent
              ? snprintf(buf, len,
                         ",\"gpu_share\":%d,\"gpu_busy_fraction\":%.4f,\"gpu_busy_seconds\":%.6f,"
                         "\"gpu_held_seconds\":%.6f,\"gpu_metered_seconds\":%.3f",
                         meter.percent, span_ms > 0 ? busy / span_ms : 0.0, meter.busy_ms * 1e-3,
                         meter.held_ms * 1e-3,
                         meter.since_ns ? (double)(now - meter.since_ns) * 1e-9 : 0.0)
              : 0;
  pthread_mutex_unlock(&meter.lock);
  return n > 0 && (size_t)n < len ? (size_t)n : 0;
}

int shim_gpu_limit_request(const char *request, char *reply, size_t len)
{
  if (strncmp(request, "limit", 5) != 0 || (request[5] && request[5] != ' ')) return -ENOENT;
  const char *arg = request[5] ? request + 6 : "";
  int previous, percent = -1;
  pthread_mutex_lock(&meter.lock);
  previous = meter.percent;
  pthread_mutex_unlock(&meter.lock);
  if (*arg && (strncmp(arg, "gpu=", 4) != 0 || parse_percent(arg + 4, &percent) != 0)) {
    snprintf(reply, len, "{\"ok\":false,\"error\":\"bad_request\",\"reason\":\"expected limit "
                         "[gpu=PERCENT|gpu=off], PERCENT 1-100\"}\n");
    return 0;
  }
  if (percent >= 0) {
    shim_gpu_set_share(percent);
    shim_info("gpu share: %d%% -> %d%% (cudaw-ctl limit)", previous, percent);
  }
  size_t used = (size_t)snprintf(reply, len, "{\"ok\":true,\"pid\":%ld,\"previous_gpu_share\":%d",
                                 (long)getpid(), previous);
  if (used < len) used += shim_gpu_status_json(reply + used, len - used);
  if (used < len && (size_t)snprintf(reply + used, len - used, "}\n") < len - used) return 0;
  snprintf(reply, len, "{\"ok\":false,\"error\":\"failed\",\"reason\":\"reply too long\"}\n");
  return 0;
}

/* CUDAW_GPU_SHARE, once the real runtime is loaded. */
static void start_gpu_share(void)
{
  const char *text = cudaw_option("CUDAW_GPU_SHARE");
  int percent = 0;
  if (!text || !*text) return;
  if (parse_percent(text, &percent) != 0) {
    shim_warn("CUDAW_GPU_SHARE=%s: not a percentage from 1 to 100; no GPU share", text);
    return;
  }
  if (percent) shim_info("gpu share: %d%% of the GPU's time", percent);
  shim_gpu_set_share(percent);
}
SHIM_START_STEP(SHIM_START_SCHED + 5, -1, start_gpu_share);
