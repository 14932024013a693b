/* The fake host operations (see fake_host.h) and the helpers the checkpoint tests share. */
#define _GNU_SOURCE
#include "fake_host.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_MAX 8
#define PINNED_MAX 256

struct pending_copy {
  bool to_device;
  bool garbled; /* lands with its first byte flipped (h2d_garble_after) */
  void *host;
  uint64_t vaddr;
  size_t n;
};

struct fake_stream {
  struct fake_host *host;
  int device;
  struct pending_copy queue[QUEUE_MAX];
  int count;
  int error;
};

static struct {
  void *base;
  size_t size;
} pinned[PINNED_MAX];

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t pattern_byte(uint32_t seed, uint64_t offset) {
  uint64_t x = (offset + 1) * 0x9E3779B97F4A7C15ull ^ seed;
  x ^= x >> 29;
  return (uint8_t)(x ^ (x >> 17));
}

static void violation(struct fake_host *host, const char *format, ...) {
  pthread_mutex_lock(&host->lock);
  host->violations++;
  va_list args;
  va_start(args, format);
  vsnprintf(host->violation, sizeof host->violation, format, args);
  va_end(args);
  fprintf(stderr, "fake host: contract violation: %s\n", host->violation);
  pthread_mutex_unlock(&host->lock);
}

/* Device memory came or went (host->lock held, or no copy thread running yet). */
static void account(struct fake_host *host, int64_t bytes) {
  host->device_used += (uint64_t)bytes;
  if (host->device_used > host->device_peak) host->device_peak = host->device_used;
  struct fake_device *d = host->device;
  if (!d) return;
  pthread_mutex_lock(&d->lock);
  d->used += (uint64_t)bytes;
  if (d->used > d->peak) d->peak = d->used;
  pthread_mutex_unlock(&d->lock);
}

void fake_host_init(struct fake_host *host, int devices) {
  memset(host, 0, sizeof *host);
  pthread_mutex_init(&host->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&host->changed, &attr);
  pthread_condattr_destroy(&attr);
  host->devices = devices;
}

struct ckpt_options fake_host_options(uint64_t chunk, uint32_t threads, uint32_t streams) {
  struct ckpt_options options;
  ckpt_options_from_env(&options, NULL, 0);
  options.staging_bytes = chunk;
  options.threads = threads;
  options.streams = streams;
  options.reserve_auto = 0;
  options.reserve_bytes = 0;
  return options;
}

void fake_host_free(struct fake_host *host) {
  for (size_t i = 0; i < host->region_count; i++) {
    free(host->regions[i].memory);
    free(host->regions[i].piece_gone);
  }
  free(host->regions);
  host->regions = NULL;
  host->region_count = 0;
}

size_t fake_host_add_region(struct fake_host *host, uint64_t size, int device, uint32_t seed) {
  pthread_mutex_lock(&host->lock); /* device_bytes reads the list from the module's threads */
  host->regions = realloc(host->regions, (host->region_count + 1) * sizeof *host->regions);
  uint64_t vaddr = 0x100000000000ull;
  if (host->region_count) {
    struct fake_region *prev = &host->regions[host->region_count - 1];
    vaddr = (prev->vaddr + prev->size + 0x10000) & ~0xffffull;
  }
  struct fake_region *r = &host->regions[host->region_count];
  *r = (struct fake_region){1000 + host->region_count, vaddr, size, device, malloc(size), seed, NULL};
  for (uint64_t i = 0; i < size; i++) r->memory[i] = pattern_byte(seed, i);
  if (host->piece_bytes) r->piece_gone = calloc(size / host->piece_bytes + 1, sizeof(bool));
  account(host, (int64_t)size);
  size_t index = host->region_count++;
  pthread_mutex_unlock(&host->lock);
  return index;
}

size_t fake_host_verify(struct fake_host *host, uint64_t *bad_offset) {
  for (size_t i = 0; i < host->region_count; i++) {
    struct fake_region *r = &host->regions[i];
    for (uint64_t o = 0; o < r->size; o++)
      if (!r->memory || r->memory[o] != pattern_byte(r->seed, o)) {
        *bad_offset = o;
        return i + 1;
      }
  }
  return 0;
}

void fake_host_call_enter(struct fake_host *host) {
  pthread_mutex_lock(&host->lock);
  while (host->gate_closed) pthread_cond_wait(&host->changed, &host->lock);
  host->in_flight++;
  pthread_mutex_unlock(&host->lock);
}

void fake_host_call_exit(struct fake_host *host) {
  pthread_mutex_lock(&host->lock);
  host->in_flight--;
  pthread_cond_broadcast(&host->changed);
  pthread_mutex_unlock(&host->lock);
}

static bool wait_flag(struct fake_host *host, bool *flag, double seconds) {
  double deadline = now() + seconds;
  pthread_mutex_lock(&host->lock);
  while (!*flag && now() < deadline) {
    pthread_mutex_unlock(&host->lock);
    usleep(1000);
    pthread_mutex_lock(&host->lock);
  }
  bool set = *flag;
  pthread_mutex_unlock(&host->lock);
  return set;
}

static void clear_flag(struct fake_host *host, bool *flag) {
  pthread_mutex_lock(&host->lock);
  *flag = false;
  pthread_cond_broadcast(&host->changed);
  pthread_mutex_unlock(&host->lock);
}

bool fake_host_wait_drain_entered(struct fake_host *host, double seconds) {
  return wait_flag(host, &host->drain_entered, seconds);
}
void fake_host_unblock_drain(struct fake_host *host) { clear_flag(host, &host->drain_block); }
bool fake_host_wait_recreate_entered(struct fake_host *host, double seconds) {
  return wait_flag(host, &host->recreate_entered, seconds);
}
void fake_host_unblock_recreate(struct fake_host *host) { clear_flag(host, &host->recreate_block); }

/* ---- the operations ---- */

static int gate_close(void *ctx, uint64_t timeout_ns) {
  struct fake_host *host = ctx;
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  deadline.tv_sec += (time_t)(timeout_ns / 1000000000u);
  deadline.tv_nsec += (long)(timeout_ns % 1000000000u);
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&host->lock);
  host->gate_closes++;
  host->gate_closed = true;
  int rc = 0;
  while (host->in_flight > 0 && rc == 0)
    if (pthread_cond_timedwait(&host->changed, &host->lock, &deadline) == ETIMEDOUT) rc = -ETIMEDOUT;
  if (host->in_flight > 0) { /* the contract: on timeout the host reopens itself */
    host->gate_closed = false;
    pthread_cond_broadcast(&host->changed);
    rc = -ETIMEDOUT;
  } else {
    rc = 0;
  }
  pthread_mutex_unlock(&host->lock);
  return rc;
}

static void gate_open(void *ctx) {
  struct fake_host *host = ctx;
  pthread_mutex_lock(&host->lock);
  bool was_closed = host->gate_closed;
  pthread_mutex_unlock(&host->lock);
  if (!was_closed) violation(host, "gate_open while the gate is open");
  pthread_mutex_lock(&host->lock);
  host->gate_opens++;
  host->gate_closed = false;
  pthread_cond_broadcast(&host->changed);
  pthread_mutex_unlock(&host->lock);
}

static int device_drain(void *ctx) {
  struct fake_host *host = ctx;
  pthread_mutex_lock(&host->lock);
  host->drain_entered = true;
  while (host->drain_block) pthread_cond_wait(&host->changed, &host->lock);
  int rc = host->drain_error;
  pthread_mutex_unlock(&host->lock);
  return rc;
}

static int for_each_region(void *ctx, ckpt_region_visit_fn visit, void *visit_ctx) {
  struct fake_host *host = ctx;
  if (!host->gate_closed) violation(host, "for_each_region with the gate open");
  for (size_t i = 0; i < host->region_count; i++) {
    struct fake_region *r = &host->regions[i];
    struct ckpt_region region = {r->id, r->vaddr, r->size, r->device};
    int rc = visit(visit_ctx, &region);
    if (rc) return rc;
  }
  return 0;
}

/* r resident again (lock held): new memory holds garbage; pieces an exchange released come back. */
static void make_whole(struct fake_host *host, struct fake_region *r) {
  if (!r->memory) {
    r->memory = malloc(r->size);
    memset(r->memory, 0xa5, r->size);
    account(host, (int64_t)r->size);
    return;
  }
  for (uint64_t p = 0; r->piece_gone && p * host->piece_bytes < r->size; p++)
    if (r->piece_gone[p]) {
      uint64_t n = r->size - p * host->piece_bytes;
      r->piece_gone[p] = false;
      account(host, (int64_t)(n < host->piece_bytes ? n : host->piece_bytes));
    }
}

static int release_all(void *ctx) {
  struct fake_host *host = ctx;
  if (!host->gate_closed) violation(host, "release_all with the gate open");
  pthread_mutex_lock(&host->lock);
  host->release_calls++;
  if (host->release_all_error) { /* made again where it went, its content undefined */
    for (size_t i = 0; i < host->region_count; i++) {
      make_whole(host, &host->regions[i]);
      memset(host->regions[i].memory, 0xee, host->regions[i].size);
    }
    pthread_mutex_unlock(&host->lock);
    return host->release_all_error;
  }
  for (size_t i = 0; i < host->region_count; i++) {
    struct fake_region *r = &host->regions[i];
    if (r->memory) memset(r->memory, 0xdd, r->size); /* stale data must not survive */
    free(r->memory);
    r->memory = NULL;
    if (r->piece_gone) memset(r->piece_gone, 0, r->size / host->piece_bytes + 1);
  }
  account(host, -(int64_t)host->device_used);
  host->released = true;
  host->context_given_up = true;
  pthread_mutex_unlock(&host->lock);
  return 0;
}

static int restore_context(void *ctx) {
  struct fake_host *host = ctx;
  pthread_mutex_lock(&host->lock);
  host->context_event = ++host->events;
  int rc = 0;
  if (host->context_failures > 0) {
    host->context_failures--;
    rc = -ENOMEM;
  } else {
    host->context_given_up = false;
  }
  pthread_mutex_unlock(&host->lock);
  return rc;
}

static int recreate_all(void *ctx, uint64_t *shortfall) {
  struct fake_host *host = ctx;
  pthread_mutex_lock(&host->lock);
  host->recreate_calls++;
  host->recreate_entered = true;
  while (host->recreate_block) pthread_cond_wait(&host->changed, &host->lock);
  if (host->recreate_failures > 0) {
    host->recreate_failures--;
    *shortfall = host->recreate_shortfall;
    pthread_mutex_unlock(&host->lock);
    return -ENOMEM;
  }
  for (size_t i = 0; i < host->region_count; i++) make_whole(host, &host->regions[i]);
  host->released = false;
  host->context_given_up = false;
  pthread_mutex_unlock(&host->lock);
  return 0;
}

static int device_count(void *ctx, int *count) {
  *count = ((struct fake_host *)ctx)->devices;
  return 0;
}

static int stream_create(void *ctx, int device, void **stream) {
  struct fake_host *host = ctx;
  struct fake_stream *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  s->host = host;
  s->device = device;
  pthread_mutex_lock(&host->lock);
  host->streams_live++;
  pthread_mutex_unlock(&host->lock);
  *stream = s;
  return 0;
}

static void stream_destroy(void *ctx, void *stream) {
  struct fake_host *host = ctx;
  struct fake_stream *s = stream;
  if (s->count) violation(host, "stream destroyed with %d copies queued", s->count);
  pthread_mutex_lock(&host->lock);
  host->streams_live--;
  pthread_mutex_unlock(&host->lock);
  free(s);
}

static struct fake_region *find_region(struct fake_host *host, uint64_t vaddr, size_t n) {
  for (size_t i = 0; i < host->region_count; i++) {
    struct fake_region *r = &host->regions[i];
    if (vaddr >= r->vaddr && vaddr + n <= r->vaddr + r->size) return r;
  }
  return NULL;
}

static bool is_pinned(const void *p, size_t n) {
  for (int i = 0; i < PINNED_MAX; i++)
    if (pinned[i].base && (const char *)p >= (char *)pinned[i].base &&
        (const char *)p + n <= (char *)pinned[i].base + pinned[i].size)
      return true;
  return false;
}

static void execute(struct fake_stream *s, const struct pending_copy *copy) {
  struct fake_host *host = s->host;
  struct fake_region *r = find_region(host, copy->vaddr, copy->n);
  if (!r || !r->memory) {
    violation(host, "copy of 0x%llx (+%zu) hits no live region", (unsigned long long)copy->vaddr, copy->n);
    s->error = -EFAULT;
    return;
  }
  if (host->copy_delay_us) usleep((useconds_t)host->copy_delay_us);
  uint8_t *device = r->memory + (copy->vaddr - r->vaddr);
  if (copy->to_device) memcpy(device, copy->host, copy->n);
  else memcpy(copy->host, device, copy->n);
  if (copy->garbled) device[0] ^= 0xff;
}

/* Whether every piece under [vaddr, vaddr + n) of r is on the device. */
static bool pieces_resident(const struct fake_host *host, const struct fake_region *r,
                            uint64_t vaddr, size_t n) {
  if (!r->piece_gone || n == 0) return true;
  for (uint64_t p = (vaddr - r->vaddr) / host->piece_bytes;
       p <= (vaddr + n - 1 - r->vaddr) / host->piece_bytes; p++)
    if (r->piece_gone[p]) return false;
  return true;
}

/* Exchanges: the pieces of each region inside (release) or overlapping (recreate, missing)
 * [vaddr, vaddr + bytes). */
enum range_op { RANGE_RELEASE, RANGE_RECREATE, RANGE_MISSING };

/* Whether a release (or recreate) of [vaddr, end) would change any piece. */
static bool changes(const struct fake_host *host, bool release, uint64_t vaddr, uint64_t end) {
  for (size_t i = 0; i < host->region_count; i++) {
    const struct fake_region *r = &host->regions[i];
    if (!r->piece_gone || (!r->memory && release)) continue;
    for (uint64_t p = 0; p * host->piece_bytes < r->size; p++) {
      uint64_t start = r->vaddr + p * host->piece_bytes, n = r->size - p * host->piece_bytes;
      n = n < host->piece_bytes ? n : host->piece_bytes;
      bool gone = !r->memory || r->piece_gone[p];
      if (release ? !gone && start >= vaddr && start + n <= end
                  : gone && start < end && start + n > vaddr)
        return true;
    }
  }
  return false;
}

static int range_op(struct fake_host *host, enum range_op op, uint64_t vaddr, uint64_t bytes,
                    uint64_t *done) {
  *done = 0;
  if (!host->piece_bytes) return -ENOSYS;
  if (op != RANGE_MISSING && !host->gate_closed) violation(host, "range operation with the gate open");
  pthread_mutex_lock(&host->lock);
  host->range_calls++;
  if (op == RANGE_RELEASE) host->range_releases++;
  uint64_t end = vaddr + bytes;
  /* Injected failures count the calls that would change something. */
  int *fail = op == RANGE_RECREATE ? &host->range_fail_after
              : op == RANGE_RELEASE ? &host->release_fail_after : NULL;
  bool changing = op != RANGE_MISSING && changes(host, op == RANGE_RELEASE, vaddr, end);
  if (fail && *fail > 0 && changing && --*fail == 0) {
    pthread_mutex_unlock(&host->lock);
    return op == RANGE_RECREATE ? -ENOMEM : -EIO;
  }
  if (op == RANGE_RECREATE && changing && host->range_delay_us) { /* a slow driver */
    pthread_mutex_unlock(&host->lock);
    usleep((useconds_t)host->range_delay_us);
    pthread_mutex_lock(&host->lock);
  }
  if (op == RANGE_RECREATE && changing) host->last_create_event = ++host->events;
  for (size_t i = 0; i < host->region_count; i++) {
    struct fake_region *r = &host->regions[i];
    if (!r->piece_gone || (!r->memory && op == RANGE_RELEASE)) continue;
    if (!r->memory && op == RANGE_RECREATE) { /* released whole (release_all): every piece gone */
      r->memory = malloc(r->size);
      memset(r->memory, 0xdd, r->size);
      memset(r->piece_gone, 1, (r->size / host->piece_bytes + 1) * sizeof(bool));
    }
    for (uint64_t p = 0; p * host->piece_bytes < r->size; p++) {
      uint64_t start = r->vaddr + p * host->piece_bytes, n = r->size - p * host->piece_bytes;
      n = n < host->piece_bytes ? n : host->piece_bytes;
      bool inside = start >= vaddr && start + n <= end, overlaps = start < end && start + n > vaddr;
      if (op == RANGE_RELEASE && inside && !r->piece_gone[p]) {
        memset(r->memory + (start - r->vaddr), 0xdd, n); /* stale data must not survive */
        r->piece_gone[p] = true;
        account(host, -(int64_t)n);
        *done += n;
      } else if (op != RANGE_RELEASE && overlaps && (!r->memory || r->piece_gone[p])) {
        if (op == RANGE_RECREATE) {
          memset(r->memory + (start - r->vaddr), 0xa5, n); /* new memory holds garbage */
          r->piece_gone[p] = false;
          account(host, (int64_t)n);
          host->range_created += n;
        }
        *done += n;
      }
    }
  }
  pthread_mutex_unlock(&host->lock);
  return 0;
}

static int device_free(void *ctx, int device, uint64_t *bytes) {
  struct fake_host *host = ctx;
  (void)device;
  *bytes = host->free_bytes;
  return host->report_free ? 0 : -ENOSYS;
}

static int release_range(void *ctx, uint64_t vaddr, uint64_t bytes, uint64_t *done) {
  return range_op(ctx, RANGE_RELEASE, vaddr, bytes, done);
}

static uint64_t piece_bytes(void *ctx) {
  struct fake_host *host = ctx;
  return host->piece_bytes;
}

static int recreate_range(void *ctx, uint64_t vaddr, uint64_t bytes, uint64_t *done) {
  return range_op(ctx, RANGE_RECREATE, vaddr, bytes, done);
}

static int range_missing(void *ctx, uint64_t vaddr, uint64_t bytes, uint64_t *missing) {
  return range_op(ctx, RANGE_MISSING, vaddr, bytes, missing);
}

static int queue_copy(struct fake_host *host, bool to_device, void *hostp, uint64_t vaddr, size_t n, void *stream) {
  struct fake_stream *s = stream;
  pthread_mutex_lock(&host->lock);
  host->copies++;
  host->events++;
  if (to_device && !host->first_h2d_event) host->first_h2d_event = host->events;
  if (host->copy_fail_after > 0 && --host->copy_fail_after == 0) {
    pthread_mutex_unlock(&host->lock);
    return -EIO;
  }
  bool garbled = to_device && host->h2d_garble_after > 0 && --host->h2d_garble_after == 0;
  struct fake_region *r = find_region(host, vaddr, n);
  bool closed = host->gate_closed, ok_pinned = is_pinned(hostp, n);
  pthread_mutex_unlock(&host->lock);
  if (!closed) violation(host, "copy with the gate open");
  if (!r) { violation(host, "copy outside every region"); return -EFAULT; }
  if (!r->memory || !pieces_resident(host, r, vaddr, n)) {
    violation(host, "copy into released memory of region %llu", (unsigned long long)r->id);
    return -EFAULT;
  }
  if (r->device != s->device) { violation(host, "region on device %d copied on a stream of device %d", r->device, s->device); return -EINVAL; }
  if (!ok_pinned) { violation(host, "host side of a copy is not pinned staging"); return -EINVAL; }
  if (s->count == QUEUE_MAX) { /* the oldest copy completes */
    execute(s, &s->queue[0]);
    memmove(s->queue, s->queue + 1, (QUEUE_MAX - 1) * sizeof s->queue[0]);
    s->count--;
  }
  s->queue[s->count++] = (struct pending_copy){to_device, garbled, hostp, vaddr, n};
  return 0;
}

static int copy_d2h_async(void *ctx, void *hostp, uint64_t vaddr, size_t n, void *stream) {
  return queue_copy(ctx, false, hostp, vaddr, n, stream);
}

static int copy_h2d_async(void *ctx, uint64_t vaddr, const void *hostp, size_t n, void *stream) {
  return queue_copy(ctx, true, (void *)hostp, vaddr, n, stream);
}

static int stream_sync(void *ctx, void *stream) {
  (void)ctx;
  struct fake_stream *s = stream;
  for (int i = 0; i < s->count; i++) execute(s, &s->queue[i]);
  s->count = 0;
  int rc = s->error;
  s->error = 0;
  return rc;
}

static int host_alloc_pinned(void *ctx, size_t n, void **out) {
  struct fake_host *host = ctx;
  if (host->pin_delay_us) usleep((useconds_t)host->pin_delay_us);
  void *p = malloc(n);
  if (!p) return -ENOMEM;
  memset(p, 0x5a, n);
  pthread_mutex_lock(&host->lock);
  for (int i = 0; i < PINNED_MAX; i++)
    if (!pinned[i].base) {
      pinned[i].base = p;
      pinned[i].size = n;
      host->pinned_live++;
      break;
    }
  host->pin_calls++;
  pthread_mutex_unlock(&host->lock);
  *out = p;
  return 0;
}

static void host_free_pinned(void *ctx, void *p) {
  struct fake_host *host = ctx;
  pthread_mutex_lock(&host->lock);
  for (int i = 0; i < PINNED_MAX; i++)
    if (pinned[i].base == p) {
      pinned[i].base = NULL;
      host->pinned_live--;
    }
  pthread_mutex_unlock(&host->lock);
  free(p);
}

/* The device's checksums, by the same reference the real kernel implements. */
static int device_hash(void *ctx, int device, const struct ckpt_delta_piece *pieces, size_t count,
                       uint64_t *sums) {
  struct fake_host *host = ctx;
  if (!host->device_hash) return -ENOSYS;
  pthread_mutex_lock(&host->lock);
  host->device_hash_calls++;
  bool closed = host->gate_closed;
  pthread_mutex_unlock(&host->lock);
  if (!closed) violation(host, "device checksums with the gate open");
  for (size_t i = 0; i < count; i++) {
    struct fake_region *r = find_region(host, pieces[i].address, pieces[i].bytes);
    if (!r || !r->memory || r->device != device) {
      violation(host, "device checksum outside the device's resident regions");
      return -EFAULT;
    }
    sums[i] = ckpt_delta_hash(r->memory + (pieces[i].address - r->vaddr), pieces[i].bytes);
  }
  return 0;
}

/* The last failed host call of this thread, for last_error. */
static __thread char failed_call[128];

/* Registered image ranges count as pinned for the copies' check. As the runtime does, a range
 * overlapping one registered already is refused (cudaErrorHostMemoryAlreadyRegistered); here it
 * is also a contract violation, since the module never means to do it. */
static int host_register(void *ctx, void *p, size_t n) {
  struct fake_host *host = ctx;
  pthread_mutex_lock(&host->lock);
  int delay = host->register_delay_us;
  bool fail = host->register_fail_after > 0 && --host->register_fail_after == 0;
  host->register_calls++;
  if (++host->registering > host->registering_most) host->registering_most = host->registering;
  pthread_mutex_unlock(&host->lock);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (delay > 0) { /* a random share of it, so that several threads finish out of order */
    struct timespec pause = {0, (long)(rand() % delay) * 1000};
    nanosleep(&pause, NULL);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  pthread_mutex_lock(&host->lock);
  host->registering--;
  host->registering_s += (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  pthread_mutex_unlock(&host->lock);
  if (fail) {
    pthread_mutex_lock(&host->lock);
    host->register_failed = p;
    pthread_mutex_unlock(&host->lock);
    snprintf(failed_call, sizeof failed_call, "cudaHostRegister returned cudaErrorInjected (999)");
    return -EIO;
  }
  int rc = -ENOMEM;
  pthread_mutex_lock(&host->lock);
  for (int i = 0; i < PINNED_MAX; i++)
    if (pinned[i].base && (char *)p < (char *)pinned[i].base + pinned[i].size &&
        (char *)pinned[i].base < (char *)p + n)
      rc = -EEXIST;
  for (int i = 0; i < PINNED_MAX && rc == -ENOMEM; i++)
    if (!pinned[i].base) {
      pinned[i].base = p;
      pinned[i].size = n;
      host->registered_live++;
      rc = 0;
    }
  pthread_mutex_unlock(&host->lock);
  if (rc == -EEXIST) violation(host, "registering a range that overlaps a registered one");
  return rc;
}

static void last_error(void *ctx, char *buf, size_t len) {
  (void)ctx;
  snprintf(buf, len, "%s", failed_call);
}

bool fake_host_registered(struct fake_host *host, const void *p, size_t n) {
  pthread_mutex_lock(&host->lock);
  const char *at = p, *end = (const char *)p + n;
  bool progress = true;
  while (at < end && progress) { /* walk from range to adjacent range */
    progress = false;
    for (int i = 0; i < PINNED_MAX; i++)
      if (pinned[i].base && at >= (char *)pinned[i].base &&
          at < (char *)pinned[i].base + pinned[i].size) {
        at = (char *)pinned[i].base + pinned[i].size;
        progress = true;
      }
  }
  pthread_mutex_unlock(&host->lock);
  return at >= end;
}

static void host_unregister(void *ctx, void *p) {
  struct fake_host *host = ctx;
  pthread_mutex_lock(&host->lock);
  int delay = host->unregister_delay_us;
  if (++host->unregistering > host->unregistering_most)
    host->unregistering_most = host->unregistering;
  pthread_mutex_unlock(&host->lock);
  double t0 = now();
  if (delay > 0) {
    struct timespec pause = {0, (long)(rand() % delay) * 1000};
    nanosleep(&pause, NULL);
  }
  pthread_mutex_lock(&host->lock);
  host->unregistering--;
  host->unregistering_s += now() - t0;
  int found = 0;
  for (int i = 0; i < PINNED_MAX; i++)
    if (pinned[i].base == p) {
      pinned[i].base = NULL;
      host->registered_live--;
      found = 1;
    }
  pthread_mutex_unlock(&host->lock);
  if (!found) violation(host, "unregistering a range that was not registered");
}

static int mem_held(void *ctx, int device, uint64_t *bytes) {
  struct fake_host *host = ctx;
  uint64_t total = 527ull << 20; /* a context */
  pthread_mutex_lock(&host->lock);
  for (size_t i = 0; i < host->region_count; i++)
    if (host->regions[i].device == device && host->regions[i].memory) total += host->regions[i].size;
  pthread_mutex_unlock(&host->lock);
  *bytes = total;
  return 0;
}

static int device_bytes(void *ctx, uint64_t *bytes, uint64_t *regions) {
  struct fake_host *host = ctx;
  pthread_mutex_lock(&host->lock);
  *bytes = 0;
  *regions = host->region_count;
  for (size_t i = 0; i < host->region_count; i++) *bytes += host->regions[i].size;
  pthread_mutex_unlock(&host->lock);
  return 0;
}

static int park_other(void *ctx, struct ckpt_other_memory *held) {
  struct fake_host *host = ctx;
  pthread_mutex_lock(&host->lock);
  host->park_calls++;
  int rc = host->park_error;
  pthread_mutex_unlock(&host->lock);
  *held = (struct ckpt_other_memory){0};
  return rc;
}

static int unpark_other(void *ctx) {
  struct fake_host *host = ctx;
  pthread_mutex_lock(&host->lock);
  host->unpark_calls++;
  pthread_mutex_unlock(&host->lock);
  return 0;
}

static void log_line(void *ctx, int level, const char *message) {
  struct fake_host *host = ctx;
  pthread_mutex_lock(&host->lock);
  host->log_lines++;
  snprintf(host->last_log, sizeof host->last_log, "%s", message);
  pthread_mutex_unlock(&host->lock);
  fprintf(stderr, "[ckpt %d] %s\n", level, message);
}

const struct ckpt_host_ops fake_host_ops = {
    .gate_close = gate_close,
    .gate_open = gate_open,
    .device_drain = device_drain,
    .for_each_region = for_each_region,
    .release_all = release_all,
    .recreate_all = recreate_all,
    .restore_context = restore_context,
    .park_other = park_other,
    .unpark_other = unpark_other,
    .release_range = release_range,
    .recreate_range = recreate_range,
    .range_missing = range_missing,
    .piece_bytes = piece_bytes,
    .device_free = device_free,
    .device_count = device_count,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .copy_d2h_async = copy_d2h_async,
    .copy_h2d_async = copy_h2d_async,
    .stream_sync = stream_sync,
    .host_alloc_pinned = host_alloc_pinned,
    .host_free_pinned = host_free_pinned,
    .device_hash = device_hash,
    .host_register = host_register,
    .host_unregister = host_unregister,
    .last_error = last_error,
    .mem_held = mem_held,
    .device_bytes = device_bytes,
    .log = log_line,
};

/* ---- test helpers ---- */

void test_make_run_dir(char *path, size_t len) {
  snprintf(path, len, "/tmp/cudaw-ckpt-test-XXXXXX");
  if (!mkdtemp(path)) {
    perror("mkdtemp");
    exit(1);
  }
  setenv("CUDAW_RUN_DIR", path, 1);
}

void test_remove_run_dir(const char *path) {
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *entry;
  char file[512];
  while ((entry = readdir(d)))
    if (entry->d_name[0] != '.') {
      snprintf(file, sizeof file, "%s/%s", path, entry->d_name);
      unlink(file);
    }
  closedir(d);
  rmdir(path);
}

bool test_wait_state(enum ckpt_state_id state, double seconds) {
  double deadline = now() + seconds;
  while (ckpt_state() != state) {
    if (now() > deadline) return false;
    usleep(1000);
  }
  return true;
}

int test_run_ctl(char *out, size_t out_len, const char *ctl, ...) {
  const char *argv[16] = {ctl};
  int argc = 1;
  va_list args;
  va_start(args, ctl);
  const char *arg;
  while ((arg = va_arg(args, const char *)) && argc < 15) argv[argc++] = arg;
  va_end(args);
  int pipefd[2];
  if (pipe(pipefd) != 0) return -1;
  fflush(NULL);
  pid_t child = fork();
  if (child == 0) {
    dup2(pipefd[1], 1);
    close(pipefd[0]);
    close(pipefd[1]);
    execv(ctl, (char *const *)argv);
    _exit(127);
  }
  close(pipefd[1]);
  size_t used = 0;
  ssize_t n;
  while ((n = read(pipefd[0], out + used, out_len - 1 - used)) > 0) used += (size_t)n;
  out[used] = '\0';
  close(pipefd[0]);
  int status;
  waitpid(child, &status, 0);
  fprintf(stderr, "$ cudaw-ctl");
  for (int i = 1; i < argc; i++) fprintf(stderr, " %s", argv[i]);
  fprintf(stderr, " -> %d\n%s", WIFEXITED(status) ? WEXITSTATUS(status) : -1, out);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
