/* The image reserve (CUDAW_CKPT_RESERVE): page-locked host memory kept for the next checkpoint's
 * image. Threads of its own fault it in and register it (host_register) piece by piece as the
 * program's device memory grows, never on the program's threads, so that a first checkpoint
 * copies from the device straight into it: no fresh pages to fault and zero, no staging pass.
 * It is bounded by a share of the host memory available to it (CUDAW_CKPT_RESERVE_BUDGET): an
 * image larger than that is said once and the reserve grows up to the budget. A checkpoint uses whatever part of it is ready (its
 * rest goes through staging).
 * The same machinery registers cudawd's host-memory pool (reserve_new_shared): memory that
 * cudawd faulted in and lends range by range, registered here once the program uses a device. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "internal.h"

/* Registered in pieces, so that stopping waits for one piece at most; a copy is split where it
 * crosses from one piece into the next (engine.c). Several threads grow it, each a piece at a
 * time; pieces finish out of order, and `ready` counts only the prefix that is all done. */
#define RESERVE_ALIGN 4096ull
#define FAULT_STEP (8ull << 20)
#define POLL_NS (50ull * 1000 * 1000)
#define WINDOW 64 /* pieces past `ready` handed out at most (bits of done_mask) */
#define MAX_THREADS 64

struct reserve {
  const struct ckpt_host_ops *ops;
  void *ctx;
  uint64_t fixed;        /* the size asked for, 0 for auto */
  bool shared;           /* cudawd's pool: mapped by the caller, sized by cudawd, no budget */
  _Atomic bool standby;  /* want nothing (shrinks): auto, as cudawd's pool takes the images;
                            the pool, while its program is alone and idle (SCHED_POOL_ALONE) */
  struct reserve *yield_to; /* shared: page-lock nothing while this one is (reserve_yield_to) */
  bool quiet;            /* one piece at a time, whatever the threads (reserve_quiet) ... */
  double quiet_until;    /* ... after a pause as long as the last one's page-locking (or its
                            giving back) took */
  int active;            /* threads inside grow_piece */
  const char *name;      /* for the messages */
  uint32_t budget_pct;   /* of MemAvailable the reserve may take */
  uint64_t align;        /* where an image region starts inside the reserve: pages, so that
                            thousands of small regions waste little of it */
  uint64_t piece;
  uint8_t *base;         /* one mapping of `capacity` bytes, faulted in from the start */
  uint64_t capacity;
  uint64_t mapping;      /* shared: the mapping's length, unmapped at the end (>= capacity) */
  pthread_mutex_t lock;
  pthread_cond_t wake;
  pthread_t threads[MAX_THREADS];
  int started;
  bool taken, refused;   /* refused: page-locking failed, the reserve stops growing */
  bool over_budget;      /* the image would pass the budget: it grows up to it, said once */
  bool shrinking;        /* auto: device memory fell to half the reserve; give back to it (the
                            pool: on standby, all of it) */
  double shrink_start;   /* ... since then, from this many bytes ready (for the log) */
  uint64_t shrink_from;
  _Atomic bool stop;     /* also read between the steps of faulting a piece in */
  uint64_t ready;        /* faulted in and registered, a prefix: usable by a checkpoint */
  uint64_t claimed;      /* [ready, claimed): pieces handed to the threads, done or not */
  uint64_t done_mask;    /* bit i: the piece at ready + i * piece is registered */
  int unregistering;     /* pieces being given back (shrink): no growth meanwhile */
  uint64_t used;         /* taken by the current image (its end; may pass `ready`) */
  uint64_t dirty_end;    /* pages up to here past `claimed` may be faulted in (an image wrote
                            there, or a piece failed): given back once nothing wants them */
  uint64_t target;       /* what the threads grow towards, for status */
  /* A growth spurt (from `spurt_from` while nothing was under way, to the target), timed for the
   * debug log: how fast the host lets memory be faulted in and page-locked is what decides how
   * soon after an allocation a checkpoint finds its reserve ready. */
  double spurt_start;
  uint64_t spurt_from;
  _Atomic uint64_t fault_ns, register_ns;
  char refusal[512];
};

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* What the next checkpoint's image needs: the size asked for, or (auto) the program's device
 * memory with each region's start rounded up to `align`. */
static uint64_t wanted(struct reserve *rs) {
  if (rs->fixed && !rs->shared) return rs->fixed;
  if (atomic_load(&rs->standby)) return 0;
  uint64_t bytes = 0, regions = 0;
  if (!rs->ops->device_bytes || rs->ops->device_bytes(rs->ctx, &bytes, &regions) != 0) return 0;
  /* The pool: all of it (a loan may lie anywhere in it), once the program holds device memory;
   * registering earlier would create a context on a device the program may never use. */
  if (rs->shared) return bytes ? rs->capacity : 0;
  return bytes ? bytes + regions * rs->align : 0;
}

/* Said once, when the program's device memory grows past what the budget allows (not at its
 * first checkpoint), with the setting that would let it grow. */
static void refuse(struct reserve *rs, uint64_t want, uint64_t held, uint64_t available) {
  char need[32], have[32];
  ckpt_format_bytes(want, need, sizeof need);
  ckpt_format_bytes(available, have, sizeof have);
  uint64_t pool = held + (available == UINT64_MAX ? 0 : available);
  uint64_t pct = pool ? (want * 100 + pool - 1) / pool : 101;
  char fix[128];
  if (pct <= 100)
    snprintf(fix, sizeof fix, "CUDAW_CKPT_RESERVE_BUDGET=%" PRIu64 "%% would allow it", pct);
  else
    snprintf(fix, sizeof fix, "no budget allows it on this machine");
  snprintf(rs->refusal, sizeof rs->refusal,
           "CUDAW_CKPT_RESERVE: keeping %s of page-locked host memory for the checkpoint image "
           "would leave the machine short (%s available, CUDAW_CKPT_RESERVE_BUDGET=%u%%; %s); it "
           "grows up to the budget, and checkpoints stage the rest", need, have, rs->budget_pct,
           fix);
  ckpt_logf(CKPT_LOG_WARN, "%s", rs->refusal);
}

/* Whether the threads may page-lock now: while the program runs, and while it is paused with
 * its image in host memory, so that the part of an image that did not fit the ready prefix
 * (copied there through staging) is page-locked before the resume, which then copies all of it
 * directly; not during a transition, nor while the driver holds the process (release all). */
static bool may_register(void) {
  enum ckpt_state_id state = ckpt_state();
  if (state == CKPT_RUNNING) return true;
  return state == CKPT_PAUSED && !transition_image_away();
}

/* Fault in and register [at, at + n); 0 or -errno, and the seconds spent registering. Called
 * without the lock. */
static int grow_piece(struct reserve *rs, uint64_t at, uint64_t n, double *registering) {
  *registering = 0;
  uint8_t *p = rs->base + at;
  /* A few huge pages at a time: faulting holds the address space's lock, which the program's
   * own mmap and munmap (allocations) need; a whole piece at once made them wait ~0.3 s.
   * MADV_POPULATE_WRITE zeroes each page once and skips pages present already (an image may
   * have written there); the register below then finds them all present, its fast case. */
  for (uint64_t done = 0; done < n; done += FAULT_STEP) {
    if (atomic_load(&rs->stop)) return -ECANCELED; /* the program is leaving */
    /* A checkpoint or resume under way needs the host's memory bandwidth (its staged part,
     * the DMA): faulting and zeroing beside it slowed a 45 GiB pause on the H100. Wait. */
    while (!may_register()) {
      if (atomic_load(&rs->stop)) return -ECANCELED;
      struct timespec pause = {0, 5 * 1000 * 1000};
      nanosleep(&pause, NULL);
    }
    size_t step = (size_t)(n - done < FAULT_STEP ? n - done : FAULT_STEP);
    double t0 = now_seconds();
    if (madvise(p + done, step, MADV_POPULATE_WRITE) != 0)
      for (size_t i = 0; i < step; i += 4096) ((volatile uint8_t *)p + done)[i] |= 0;
    atomic_fetch_add(&rs->fault_ns, (uint64_t)((now_seconds() - t0) * 1e9));
  }
  /* A transition may have begun while this piece was faulted in: page-lock it only once the
   * program runs or rests paused (with CUDAW_CKPT_RELEASE=all the driver holds the process
   * meanwhile, and a register then fails or waits inside it). */
  while (!may_register()) {
    if (atomic_load(&rs->stop)) return -ECANCELED;
    struct timespec pause = {0, 10 * 1000 * 1000};
    nanosleep(&pause, NULL);
  }
  double t0 = now_seconds();
  int rc = rs->ops->host_register(rs->ctx, p, (size_t)n);
  *registering = now_seconds() - t0;
  atomic_fetch_add(&rs->register_ns, (uint64_t)(*registering * 1e9));
  return rc;
}

static uint64_t piece_at(const struct reserve *rs, uint64_t at) {
  return rs->capacity - at < rs->piece ? rs->capacity - at : rs->piece;
}

/* A thread finished the piece at `at` (lock held): count it into `ready` once every piece
 * before it is done too. */
static void piece_done(struct reserve *rs, uint64_t at, uint64_t n, int rc) {
  if (rc == -ECANCELED) return; /* stopping: not registered, nothing to undo */
  if (rc == -ESHUTDOWN) { /* the runtime is unloading: the process exits; grow no more, quietly */
    rs->refused = true;
    return;
  }
  if (rc) {
    if (!rs->refused) {
      char cause[256] = "";
      if (rs->ops->last_error) rs->ops->last_error(rs->ctx, cause, sizeof cause);
      snprintf(rs->refusal, sizeof rs->refusal, "%s: page-locking it failed at %" PRIu64 " MiB "
               "of it (%s%s%s); checkpoints that do not fit copy the old way", rs->name,
               at >> 20, strerror(-rc), cause[0] ? ": " : "", cause);
      ckpt_logf(CKPT_LOG_WARN, "%s", rs->refusal);
    }
    rs->refused = true;
    /* Its pages go back now unless an image may lie there (then once it is given back). */
    if (!rs->taken && !rs->shared) madvise(rs->base + at, (size_t)n, MADV_DONTNEED);
    else if (at + n > rs->dirty_end) rs->dirty_end = at + n;
    return;
  }
  rs->done_mask |= 1ull << ((at - rs->ready) / rs->piece);
  while ((rs->done_mask & 1) && rs->ready < rs->capacity) {
    rs->ready += piece_at(rs, rs->ready);
    rs->done_mask >>= 1;
  }
  if (rs->spurt_start > 0 && rs->ready >= rs->target) {
    double took = now_seconds() - rs->spurt_start;
    char size[32];
    ckpt_format_bytes(rs->ready - rs->spurt_from, size, sizeof size);
    ckpt_logf(CKPT_LOG_DEBUG, "%s: %s more ready in %.2f s (%.1f GB/s; the threads spent %.2f s "
              "faulting in, %.2f s page-locking)", rs->name, size, took,
              took > 0 ? (double)(rs->ready - rs->spurt_from) / took / 1e9 : 0.0,
              (double)atomic_load(&rs->fault_ns) * 1e-9,
              (double)atomic_load(&rs->register_ns) * 1e-9);
    rs->spurt_start = 0;
  }
  if (rs->shared && rs->ready == rs->capacity) {
    char size[32];
    ckpt_format_bytes(rs->capacity, size, sizeof size);
    ckpt_logf(CKPT_LOG_INFO, "%s: %s page-locked", rs->name, size);
  }
  pthread_cond_broadcast(&rs->wake);
}

/* Whether the program's own reserve has pieces under way (rs->lock held; the reserve never
 * takes the pool's lock). */
static bool other_growing(const struct reserve *rs) {
  struct reserve *other = rs->yield_to;
  if (!other) return false;
  pthread_mutex_lock(&other->lock);
  bool growing = other->claimed > other->ready;
  pthread_mutex_unlock(&other->lock);
  return growing;
}

/* Every thread runs this loop: hand itself the next piece, or shrink, or wait. */
static void *grow(void *arg) {
  struct reserve *rs = arg;
  pthread_mutex_lock(&rs->lock);
  while (!rs->stop) {
    uint64_t want = wanted(rs);
    want = (want + rs->piece - 1) / rs->piece * rs->piece;
    if (want > rs->capacity) want = rs->capacity;
    rs->target = want;
    /* Not during transitions nor while the driver holds the process (may_register). While a
     * kept image holds the reserve it still grows past it, for the next image that replaces
     * that one, and while paused over the image's staged part. */
    bool running = may_register();
    if (!rs->refused && want > rs->claimed && running && !rs->unregistering &&
        (rs->claimed - rs->ready) / rs->piece < WINDOW &&
        (!rs->quiet || (rs->active == 0 && now_seconds() >= rs->quiet_until)) &&
        !other_growing(rs)) {
      uint64_t available = rs->shared ? UINT64_MAX : ckpt_meminfo("MemAvailable");
      /* The budget is a share of the memory available to the reserve: what it holds already
       * (pieces under way, an image's pages) and what is available beside it. A share of
       * MemAvailable alone shrank as the reserve grew (it refused 59.5 GiB at 50% on a host
       * of 128 GiB once 46 GiB were in it). */
      uint64_t held = rs->claimed > rs->dirty_end ? rs->claimed : rs->dirty_end;
      uint64_t allowed = available == UINT64_MAX ? UINT64_MAX
                                                 : (held + available) / 100 * rs->budget_pct;
      uint64_t at = rs->claimed, n = piece_at(rs, at);
      if (want > allowed && !rs->over_budget) {
        rs->over_budget = true; /* once: a program near the limit would otherwise log forever */
        refuse(rs, want, held, available);
      }
      /* Past the budget it grows up to it: a checkpoint uses whatever part is ready. */
      if (want <= allowed || at + n <= allowed) {
        if (rs->claimed == rs->ready && rs->spurt_start == 0) {
          rs->spurt_start = now_seconds();
          rs->spurt_from = rs->ready;
          atomic_store(&rs->fault_ns, 0);
          atomic_store(&rs->register_ns, 0);
        }
        rs->claimed += n;
        rs->active++;
        pthread_mutex_unlock(&rs->lock);
        double registering;
        int rc = grow_piece(rs, at, n, &registering);
        pthread_mutex_lock(&rs->lock);
        rs->active--;
        /* Quiet: the program computes, and its launches wait while the driver page-locks. Half
         * the time at most: cudawd faults the pool in no faster than one thread page-locks it
         * at half its pace (about 5 GB/s). */
        if (rs->quiet) rs->quiet_until = now_seconds() + registering;
        piece_done(rs, at, n, rc);
        continue;
      }
    }
    /* auto: the program gave much of its device memory back; so does the reserve, piece by
     * piece from the top (at half, so that a program that frees and allocates again does not
     * make it shrink and grow each time). Only once no piece is under way above `ready`. */
    /* The pool on standby (the program alone and idle, reserve_standby) gives back all of its
     * page-locking the same way, and keeps its pages: they are cudawd's. */
    bool may_shrink = !rs->fixed || (rs->shared && atomic_load(&rs->standby));
    if (may_shrink && !rs->taken && want * 2 <= rs->ready && rs->ready > want && !rs->shrinking) {
      rs->shrinking = true;
      rs->shrink_start = now_seconds();
      rs->shrink_from = rs->ready;
      if (rs->shared) {
        char size[32];
        ckpt_format_bytes(rs->ready, size, sizeof size);
        ckpt_logf(CKPT_LOG_DEBUG, "%s: giving back the page-locking of %s from now%s", rs->name,
                  size, rs->quiet ? " (quiet: one piece at a time)" : "");
      }
    }
    if (rs->shrinking && (rs->taken || rs->ready <= want)) {
      rs->shrinking = false;
      if (rs->shared && rs->ready == 0) {
        char size[32];
        ckpt_format_bytes(rs->shrink_from, size, sizeof size);
        ckpt_logf(CKPT_LOG_INFO, "%s: page-locking of %s given back in %.2f s", rs->name, size,
                  now_seconds() - rs->shrink_start);
      }
    }
    /* Quiet, one piece at a time and half the time at most, as it grows: the driver holds the
     * program's launches back while it unpins too. A lone program that called the GPU again
     * just after its pool went on standby waited 2.4 s for every thread's unpinning of 94 GiB
     * to end (its last check, 0.04 s alone: H200 as an H100, share_bench host, session 29). */
    if (rs->shrinking && ckpt_state() == CKPT_RUNNING && rs->claimed == rs->ready &&
        (!rs->quiet || (rs->unregistering == 0 && now_seconds() >= rs->quiet_until))) {
      uint64_t top_at = (rs->ready - 1) / rs->piece * rs->piece; /* the last may be short */
      size_t n = (size_t)(rs->ready - top_at);
      rs->ready = top_at; /* a checkpoint now cannot take it */
      rs->claimed = rs->ready;
      rs->unregistering++;
      uint8_t *top = rs->base + top_at;
      pthread_mutex_unlock(&rs->lock);
      double t0 = now_seconds();
      rs->ops->host_unregister(rs->ctx, top);
      double took = now_seconds() - t0;
      if (!rs->shared) madvise(top, n, MADV_DONTNEED);
      pthread_mutex_lock(&rs->lock);
      rs->unregistering--;
      if (rs->quiet) rs->quiet_until = now_seconds() + took;
      continue;
    }
    /* Pages past what the threads were handed, faulted in by an image's staged part or a piece
     * that failed: kept while the reserve will grow over them (they page-lock fast), given
     * back once it will not. No thread touches memory past `claimed`. */
    if (!rs->taken && rs->dirty_end > rs->claimed &&
        (rs->refused || rs->over_budget || want <= rs->claimed)) {
      if (!rs->shared)
        madvise(rs->base + rs->claimed, (size_t)(rs->dirty_end - rs->claimed), MADV_DONTNEED);
      rs->dirty_end = 0;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double pause = rs->quiet ? rs->quiet_until - now_seconds() : 0;
    until.tv_nsec += pause > 0 && pause < POLL_NS * 1e-9 ? (long)(pause * 1e9) + 1 : (long)POLL_NS;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&rs->wake, &rs->lock, &until);
  }
  pthread_mutex_unlock(&rs->lock);
  return NULL;
}

static void start_threads(struct reserve *rs, uint32_t threads) {
  if (threads < 1 && !rs->shared) threads = 1; /* cudawd's pool may go without (all staged) */
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  pthread_mutex_init(&rs->lock, NULL);
  pthread_cond_init(&rs->wake, NULL);
  for (uint32_t t = 0; t < threads; t++) {
    if (pthread_create(&rs->threads[rs->started], NULL, grow, rs) != 0) break;
    rs->started++;
  }
}

struct reserve *reserve_new(const struct ckpt_host_ops *ops, void *ctx,
                            const struct ckpt_options *options) {
  if (!options->reserve_auto && !options->reserve_bytes) return NULL;
  if (!ops->host_register || !ops->host_unregister) {
    ckpt_logf(CKPT_LOG_WARN, "CUDAW_CKPT_RESERVE: the host cannot page-lock memory; no reserve");
    return NULL;
  }
  struct reserve *rs = calloc(1, sizeof *rs);
  if (!rs) return NULL;
  rs->ops = ops;
  rs->ctx = ctx;
  rs->name = "CUDAW_CKPT_RESERVE";
  rs->fixed = options->reserve_bytes; /* a size wins over auto (the default) */
  rs->budget_pct = options->reserve_budget_pct;
  rs->align = RESERVE_ALIGN;
  rs->piece = options->reserve_piece ? options->reserve_piece : IMAGE_ALIGN;
  rs->piece = (rs->piece + rs->align - 1) / rs->align * rs->align;
  if (rs->fixed && rs->fixed < rs->piece) /* a small reserve is one piece of its own size */
    rs->piece = (rs->fixed + rs->align - 1) / rs->align * rs->align;
  /* At most the machine's memory, reserved as address space only until faulted in. */
  uint64_t total = ckpt_meminfo("MemTotal");
  rs->capacity = total == UINT64_MAX ? (64ull << 30) : total / rs->piece * rs->piece;
  if (rs->fixed && rs->fixed < rs->capacity)
    rs->capacity = (rs->fixed + rs->piece - 1) / rs->piece * rs->piece;
  if (rs->fixed && rs->fixed > rs->capacity) { /* more than the machine: up to the budget */
    rs->over_budget = true;
    refuse(rs, rs->fixed, 0, ckpt_meminfo("MemAvailable"));
  }
  /* At a huge-page boundary, so that every piece is whole huge pages: the kernel (before 6.7)
   * aligns a large mapping only to pages, and a piece's first and last huge page would then be
   * shared with its neighbours (small pages where a shrink splits them). */
  size_t length = (size_t)rs->capacity + IMAGE_ALIGN;
  uint8_t *p = rs->capacity ? mmap(NULL, length, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                            : MAP_FAILED;
  if (p == MAP_FAILED) {
    ckpt_logf(CKPT_LOG_WARN, "CUDAW_CKPT_RESERVE: cannot map address space for it; no reserve");
    free(rs);
    return NULL;
  }
  uint8_t *start = (uint8_t *)(((uintptr_t)p + IMAGE_ALIGN - 1) & ~(uintptr_t)(IMAGE_ALIGN - 1));
  if (start > p) munmap(p, (size_t)(start - p));
  if (p + length > start + rs->capacity)
    munmap(start + rs->capacity, (size_t)(p + length - (start + rs->capacity)));
  rs->base = start;
  madvise(rs->base, (size_t)rs->capacity, MADV_HUGEPAGE);
  start_threads(rs, options->reserve_threads);
  return rs;
}

struct reserve *reserve_new_shared(const struct ckpt_host_ops *ops, void *ctx, void *base,
                                   uint64_t size, uint64_t mapping, uint64_t piece,
                                   uint32_t threads, bool quiet) {
  if (!ops->host_register || !ops->host_unregister || !size || mapping < size) return NULL;
  struct reserve *rs = calloc(1, sizeof *rs);
  if (!rs) return NULL;
  rs->ops = ops;
  rs->ctx = ctx;
  rs->name = "cudawd's host-memory pool";
  rs->shared = true;
  rs->fixed = rs->capacity = size;
  rs->mapping = mapping;
  rs->align = RESERVE_ALIGN;
  rs->piece = piece ? (piece + rs->align - 1) / rs->align * rs->align : IMAGE_ALIGN;
  rs->base = base;
  rs->quiet = quiet;
  start_threads(rs, threads);
  return rs;
}

int reserve_grow_shared(struct reserve *rs, uint64_t size) {
  if (!rs || !rs->shared) return -EINVAL;
  pthread_mutex_lock(&rs->lock);
  /* Pieces start at multiples of `piece` (the accounting of `ready` and the unregistering at the
   * end count on it): a window that ended inside a piece is replaced instead. */
  int rc = size > rs->capacity && size <= rs->mapping && rs->capacity % rs->piece == 0 ? 0
                                                                                   : -EINVAL;
  if (rc == 0) {
    rs->fixed = rs->capacity = size; /* the threads go on from `claimed`: nothing is redone */
    pthread_cond_broadcast(&rs->wake);
  }
  pthread_mutex_unlock(&rs->lock);
  return rc;
}


void reserve_standby(struct reserve *rs, bool standby) {
  if (!rs) return;
  atomic_store(&rs->standby, standby);
  pthread_mutex_lock(&rs->lock);
  pthread_cond_broadcast(&rs->wake);
  pthread_mutex_unlock(&rs->lock);
}

void reserve_quiet(struct reserve *rs, bool quiet) {
  if (!rs) return;
  pthread_mutex_lock(&rs->lock);
  rs->quiet = quiet;
  pthread_cond_broadcast(&rs->wake);
  pthread_mutex_unlock(&rs->lock);
}

void reserve_yield_to(struct reserve *rs, struct reserve *other) {
  if (!rs) return;
  pthread_mutex_lock(&rs->lock);
  rs->yield_to = other;
  pthread_cond_broadcast(&rs->wake);
  pthread_mutex_unlock(&rs->lock);
}

void reserve_free(struct reserve *rs) {
  if (!rs) return;
  pthread_mutex_lock(&rs->lock);
  rs->stop = true;
  pthread_cond_broadcast(&rs->wake);
  pthread_mutex_unlock(&rs->lock);
  for (int t = 0; t < rs->started; t++) pthread_join(rs->threads[t], NULL);
  /* The prefix, and pieces registered past a gap (one failed, or stopped under way). */
  for (uint64_t at = 0; at < rs->ready; at += rs->piece)
    rs->ops->host_unregister(rs->ctx, rs->base + at);
  for (int i = 0; i < WINDOW; i++)
    if (rs->done_mask & (1ull << i))
      rs->ops->host_unregister(rs->ctx, rs->base + rs->ready + (uint64_t)i * rs->piece);
  munmap(rs->base, (size_t)(rs->shared ? rs->mapping : rs->capacity));
  pthread_mutex_destroy(&rs->lock);
  pthread_cond_destroy(&rs->wake);
  free(rs);
}

uint8_t *reserve_take(struct reserve *rs, bool kept, struct reserve_span *span) {
  *span = (struct reserve_span){0};
  if (!rs) return NULL;
  pthread_mutex_lock(&rs->lock);
  uint8_t *p = NULL;
  if (rs->taken == kept) {
    rs->taken = true;
    rs->used = rs->capacity; /* until reserve_use says how far the image reaches */
    *span = (struct reserve_span){rs->ready, rs->capacity};
    p = rs->base;
  }
  pthread_mutex_unlock(&rs->lock);
  return p;
}

uint8_t *reserve_take_range(struct reserve *rs, uint64_t offset, uint64_t bytes,
                            struct reserve_span *span) {
  *span = (struct reserve_span){0};
  if (!rs) return NULL;
  pthread_mutex_lock(&rs->lock);
  uint8_t *p = NULL;
  if (!rs->taken && offset <= rs->capacity && bytes <= rs->capacity - offset) {
    rs->taken = true;
    rs->used = offset + bytes;
    uint64_t ready = rs->ready > offset ? rs->ready - offset : 0;
    *span = (struct reserve_span){ready < bytes ? ready : bytes, bytes};
    p = rs->base + offset;
  }
  pthread_mutex_unlock(&rs->lock);
  return p;
}

void reserve_use(struct reserve *rs, uint64_t end) {
  if (!rs) return;
  pthread_mutex_lock(&rs->lock);
  rs->used = end;
  pthread_mutex_unlock(&rs->lock);
}

uint64_t reserve_ready(struct reserve *rs) {
  if (!rs) return 0;
  pthread_mutex_lock(&rs->lock);
  uint64_t ready = rs->ready;
  pthread_mutex_unlock(&rs->lock);
  return ready;
}

void reserve_give_back(struct reserve *rs) {
  if (!rs) return;
  pthread_mutex_lock(&rs->lock);
  if (rs->taken && rs->used > rs->dirty_end) rs->dirty_end = rs->used;
  rs->taken = false;
  rs->used = 0;
  pthread_cond_broadcast(&rs->wake); /* grow again if the program grew meanwhile */
  pthread_mutex_unlock(&rs->lock);
}

const uint8_t *reserve_base(const struct reserve *rs) { return rs ? rs->base : NULL; }

uint64_t reserve_align(const struct reserve *rs) { return rs ? rs->align : IMAGE_ALIGN; }

uint64_t reserve_size(struct reserve *rs) {
  if (!rs) return 0;
  pthread_mutex_lock(&rs->lock);
  uint64_t size = rs->capacity;
  pthread_mutex_unlock(&rs->lock);
  return size;
}

size_t reserve_piece_left(const struct reserve *rs, const uint8_t *p, size_t n) {
  uint64_t left = rs->piece - (uint64_t)(p - rs->base) % rs->piece;
  return n < left ? n : (size_t)left;
}

void reserve_status(struct reserve *rs, struct reserve_info *out) {
  *out = (struct reserve_info){0};
  if (!rs) return;
  pthread_mutex_lock(&rs->lock);
  out->enabled = true;
  out->bytes = rs->ready;
  out->used = rs->used;
  out->target = rs->target;
  out->refused = rs->refused || rs->over_budget;
  pthread_mutex_unlock(&rs->lock);
}

bool reserve_wait(struct reserve *rs, uint64_t bytes, double seconds) {
  if (!rs) return false;
  double until = ckpt_now() + seconds;
  pthread_mutex_lock(&rs->lock);
  while (rs->ready < bytes && !rs->refused && !rs->over_budget && ckpt_now() < until) {
    pthread_mutex_unlock(&rs->lock);
    struct timespec pause = {0, 5 * 1000 * 1000};
    nanosleep(&pause, NULL);
    pthread_mutex_lock(&rs->lock);
  }
  bool ok = rs->ready >= bytes;
  pthread_mutex_unlock(&rs->lock);
  return ok;
}
