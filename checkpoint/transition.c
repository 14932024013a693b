/* The transition thread: runs the pause sequence (close gate, drain, save, release) and the
 * resume sequence (recreate, restore and verify, open gate) one at a time, off the control
 * thread so that status requests are answered while a checkpoint runs. It also runs the steps a
 * group pause takes on each rank (hold: gate closed without a drain; a drain bounded in time;
 * unhold), and reopens a held gate by itself when its lease runs out, so that a controller that
 * dies mid-way never leaves a rank frozen. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disk.h"
#include "exchange_page.h"
#include "internal.h"

static struct {
  pthread_mutex_t lock;
  pthread_cond_t wake;
  pthread_t thread;
  bool started, stopping, pending;
  enum ckpt_op op;
  double requested_at;
  transition_done_fn done;
  void *done_arg;
  struct engine *engine;
  struct ckpt_other_memory other; /* while paused */
  struct transition_request request; /* of the pending checkpoint */
  struct transition_paused paused;   /* where the paused program's state is */
  struct ckpt_region *disk_regions;  /* what the image on disk must hold (paused.dir set) */
  size_t disk_region_count;
  bool drop_image;                /* after this transition: free the image */
  uint64_t loan_offset, loan_length; /* cudawd's pool range for the next checkpoint's image */
  bool loan_standing;             /* ... and every one after it (a borrower's standing loan) */
  bool prepare;                   /* ckpt_prepare_early asked for the staging buffers */
  bool preparing;                 /* ... which are being pinned (not inside the gate) */
  bool dropping;                  /* ... which is under way */
  bool from_held;                 /* the pending checkpoint starts with the gate closed */
  uint32_t lease_ms;              /* while held: reopen after this long without a command */
  double lease_deadline;          /* ckpt_now() at which it runs out (0: not held) */
  unsigned hold_generation;       /* counts holds: a drain must have started in this one */
  struct exchange_side side;      /* the pending transition's side of an exchange (page set) */
  struct engine_pace pace;        /* ... and its copy's pace */
  bool stay_paused;               /* an exchange's checkpoint failed after giving memory back */
} tr = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

/* The bounded drain. device_drain cannot be interrupted, so it runs on a thread of its own and
 * the transition thread waits for it with a deadline; a drain that does not finish in time (a
 * collective whose peer is held before it enqueued its side) stays behind, finishes once the
 * gates are open again and the peer catches up, and a later drain waits for it first. */
static struct {
  pthread_mutex_t lock;
  pthread_cond_t done;
  bool running;
  unsigned finished; /* hold_generation of the last finished drain */
  int rc;
} drainer = {.lock = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

#define LEASE_MS_DEFAULT 30000u
#define DRAIN_MS_DEFAULT 2000u

static void fail(struct ckpt_result *r, int error, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(struct ckpt_result *r, int error, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(r->reason, sizeof r->reason, format, args);
  va_end(args);
  r->error = error;
}

/* The image's regions, kept while it is on disk: the manifest must name exactly these (the
 * released regions are not listed by the host while paused). Then the host copy goes. */
/* Whether the paused program's image is away from host memory (on disk, or the driver holds
 * the process), published without tr.lock for the reserve's threads (transition_image_away):
 * they ask while holding the reserve's lock, which transition_reserve takes under tr.lock. */
static _Atomic bool image_away;

static void note_paused_locked(void) {
  atomic_store(&image_away, tr.paused.driver_released || tr.paused.disk_bytes);
}

bool transition_image_away(void) { return atomic_load(&image_away); }

/* A checkpoint failed after memory had left the device, and putting it back failed: the image is
 * the only copy of that memory, so the program stays paused with it (the gate closed) and a
 * resume brings everything back; never run on without it. */
static void stay_paused_with_image(void) {
  tr.stay_paused = true;
  pthread_mutex_lock(&tr.lock);
  tr.other = (struct ckpt_other_memory){0};
  tr.paused = (struct transition_paused){0};
  note_paused_locked();
  pthread_mutex_unlock(&tr.lock);
}

static void remember_disk_regions(void) {
  size_t count = (size_t)engine_image_regions(tr.engine);
  struct ckpt_region *regions = calloc(count ? count : 1, sizeof *regions);
  for (size_t i = 0; regions && i < count; i++) {
    struct engine_image_view view;
    engine_image_region(tr.engine, i, &view);
    regions[i] = view.region;
  }
  engine_drop_image(tr.engine);
  free(tr.disk_regions);
  tr.disk_regions = regions;
  tr.disk_region_count = regions ? count : 0;
}

/* Where a copy's time went, per copy thread, averaged: an exchange side's (docs/sharing.md: a
 * handover should run near the link's speed both ways at once) or a resume's (share_bench host:
 * the swap-ins beside another program's exit ran at 17-21 GB/s, cause not yet known). */
static void log_copy_times(const char *what, const struct engine_stats *stats, double seconds) {
  const struct engine_times *t = &stats->times;
  ckpt_logf(CKPT_LOG_DEBUG, "%s: %.3f GiB in %.3f s, %d threads each waiting %.3f s on the DMA, "
            "%.3f in the driver, %.3f refused by the pace, %.3f hashing, %.3f copying staged "
            "(%.3f GiB); checks on the device %.3f s, %.3f s after the copy", what,
            (double)stats->bytes / (1u << 30), seconds, stats->threads, t->wait, t->issue,
            t->admit, t->hash, t->copy, (double)stats->staged_bytes / (1u << 30),
            stats->device_hash_seconds, stats->verify_tail_seconds);
}

static void result_from_stats(struct ckpt_result *r, const struct engine_stats *stats) {
  r->bytes = stats->bytes;
  r->regions = stats->regions;
  r->dma_wait_seconds = stats->times.wait;
  r->host_copy_seconds = stats->times.copy;
  r->hash_seconds = stats->times.hash;
  r->fault_seconds = stats->times.fault;
  r->issue_seconds = stats->times.issue;
  r->image_seconds = stats->image_seconds;
  r->device_hash_seconds = stats->device_hash_seconds;
  r->copy_threads = (uint32_t)stats->threads;
  r->unchanged_bytes = stats->unchanged_bytes;
  r->filled_bytes = stats->filled_bytes;
  r->reserve_bytes = stats->reserve_bytes;
  r->pool_bytes = stats->pool_bytes;
  r->pool_image_bytes = stats->pool_image_bytes;
  r->staged_bytes = stats->staged_bytes;
  r->released_early_bytes = stats->released_early;
  r->release_early_seconds = stats->release_driver_seconds;
  r->release_tail_seconds = stats->release_tail_seconds;
  r->exchange_moved = stats->exchange_moved;
  r->exchange_given = stats->exchange_given;
}

/* A live checkpoint's first part, while the program runs: copy everything into the image
 * (engine_precopy). Where the host cannot, the checkpoint goes on stop-the-world; -ECANCELED
 * (the program is ending) ends it. True when the releases are held (end them after the save). */
static bool precopy(struct ckpt_result *r, int *error) {
  char reason[224] = "";
  struct engine_stats stats;
  double t = ckpt_now();
  int rc = engine_prepare(tr.engine);
  if (rc) snprintf(reason, sizeof reason, "preparing the copy engine failed: %s", strerror(-rc));
  else rc = engine_precopy(tr.engine, &stats, reason, sizeof reason);
  r->precopy_seconds = ckpt_now() - t;
  *error = 0;
  if (rc == -ECANCELED) {
    fail(r, rc, "live checkpoint cancelled: the program is ending");
    *error = rc;
    return false;
  }
  if (rc) {
    ckpt_logf(CKPT_LOG_WARN, "live checkpoint: copying while the program runs failed (%s); "
              "checkpointing with the program paused", reason);
    return false;
  }
  r->live = true;
  r->precopy_bytes = stats.bytes;
  return true;
}

/* The pending transition as one side of an exchange (tr.request.exchange): its pace. */
static void exchange_open(struct ckpt_result *r, bool out) {
  int rc = exchange_side_open(&tr.side, tr.request.exchange, out);
  if (rc) {
    tr.side = (struct exchange_side){.peer_pidfd = -1};
    fail(r, rc, "an exchange's page names another program: %s", out ? "not checkpointed"
         : "still paused");
    return;
  }
  tr.side.delay_ns = (uint64_t)ckpt_rt.options.exchange_delay_ms * 1000000u;
  exchange_side_pace(&tr.side, &tr.pace);
}

/* This side's copy ended: the peer goes on without its limit, or, if this side failed, stops. */
static void exchange_close(struct ckpt_result *r) {
  exchange_side_close(&tr.side, r->error != 0);
  r->exchange = true;
  if (tr.side.peer_pidfd >= 0) close(tr.side.peer_pidfd);
  tr.side = (struct exchange_side){.peer_pidfd = -1};
  tr.pace = (struct engine_pace){0};
}

static void pause_program(struct ckpt_result *r, double requested_at) {
  const struct ckpt_host_ops *ops = ckpt_rt.ops;
  void *ctx = ckpt_rt.ctx;
  char reason[224] = "";
  uint32_t timeout_ms = ckpt_rt.options.pause_timeout_ms;
  int rc = 0;
  bool held = !tr.from_held && tr.request.live && precopy(r, &rc);
  if (rc) return;

  double precopied = ckpt_now();
  /* Held by a group pause: the gate is closed already and a bounded drain has succeeded. */
  rc = tr.from_held ? 0 : ops->gate_close(ctx, (uint64_t)timeout_ms * 1000000u);
  double t = ckpt_now(), closed = t;
  r->gate_seconds = t - (held ? precopied : requested_at);
  if (rc && held) { /* nothing saved: the image goes with the hold */
    engine_drop_image(tr.engine);
    ops->live_end(ctx);
  }
  if (rc == -ETIMEDOUT) {
    fail(r, rc, "API calls still in flight after %u ms (CUDAW_PAUSE_TIMEOUT); checkpoint "
         "abandoned, the program keeps running", timeout_ms);
    return;
  }
  if (rc) {
    fail(r, rc, "closing the API gate failed: %s", strerror(-rc));
    return;
  }

  /* Nothing of cudaw's to release: a pause would keep every byte on the device while looking
   * like success, so it is refused and the program runs on. The driver's checkpoint (release
   * all) takes the memory whoever allocated it. */
  uint64_t stays = 0;
  if (!tr.request.release_all && ops->memory_not_held &&
      ops->memory_not_held(ctx, &stays, reason, sizeof reason) == 1) {
    char amount[32];
    ckpt_format_bytes(stays, amount, sizeof amount);
    fail(r, CKPT_ERROR_NOT_HELD, "%s: %" PRIu64 " bytes (%s) stay on the device; nothing was "
         "checkpointed and the program keeps running (a checkpoint with release all lets the "
         "driver take them)", reason, stays, amount);
    goto reopen;
  }
  if (ops->refuse_checkpoint && (rc = ops->refuse_checkpoint(ctx, reason, sizeof reason)) != 0) {
    fail(r, rc, "checkpoint refused: %s", reason);
    goto reopen;
  }
  rc = ops->device_drain(ctx);
  r->drain_seconds = ckpt_now() - t;
  t = ckpt_now();
  if (rc) {
    fail(r, rc, "device synchronize failed: %s", strerror(-rc));
    goto reopen;
  }
  rc = engine_prepare(tr.engine);
  r->setup_seconds = ckpt_now() - t;
  t = ckpt_now();
  if (rc) {
    fail(r, rc, "preparing the copy engine failed: %s", strerror(-rc));
    goto reopen;
  }
  struct engine_stats stats;
  /* Where everything is released right after the save anyway, each region goes back as soon as
   * it is saved, beside the copy of the rest (not before an image goes to disk, which may fail and
   * leave the program running; the driver's checkpoint and a live pause's held memory aside). */
  engine_release_as_saved(tr.engine, !held && !tr.side.page && !tr.request.to_dir[0] &&
                                         !tr.request.release_all);
  rc = tr.side.page ? engine_save_releasing(tr.engine, &tr.pace, &stats, reason, sizeof reason)
                    : engine_save(tr.engine, &stats, reason, sizeof reason);
  /* The memory freed during the pre-copy is not read again: give it back before the rest. */
  if (held) ops->live_end(ctx);
  held = false;
  r->copy_seconds = ckpt_now() - t;
  if (tr.side.page) log_copy_times("exchange side out", &stats, r->copy_seconds);
  r->setup_seconds += stats.setup_seconds;
  result_from_stats(r, &stats);
  r->recopy_bytes = stats.bytes - stats.unchanged_bytes;
  t = ckpt_now();
  if (rc && ((tr.side.page && stats.exchange_given) || stats.given_back)) {
    /* Memory given back lives only in the image now: paused, a resume brings it back. */
    fail(r, rc, "%s failed after giving %" PRIu64 " bytes of device memory back: %s; the "
         "program stays paused with its image (a resume brings it back)",
         tr.side.page ? "an exchange's checkpoint" : "the checkpoint",
         tr.side.page ? stats.exchange_given : stats.given_back, reason);
    stay_paused_with_image();
    return;
  }
  if (rc) {
    fail(r, rc, "saving device memory failed: %s", reason);
    goto reopen;
  }
  const struct transition_request *request = &tr.request;
  if (request->to_dir[0]) {
    /* Before anything leaves the device: a disk that fails costs nothing but the attempt. */
    struct disk_stats disk;
    rc = disk_write_image(tr.engine, request->to_dir, request->compress,
                          (int)ckpt_rt.options.threads, &disk, reason, sizeof reason);
    r->disk_bytes = disk.bytes;
    r->disk_stored = disk.stored;
    r->disk_seconds = disk.seconds;
    t = ckpt_now();
    if (rc) {
      engine_drop_image(tr.engine);
      fail(r, rc, "writing the image to disk failed: %s; the program keeps running", reason);
      goto reopen;
    }
  }
  struct ckpt_other_memory other = {0};
  if (ops->park_other && (rc = ops->park_other(ctx, &other)) != 0) {
    /* What went back while saving comes back from the image before the program runs on. */
    uint64_t shortfall = 0;
    int undone = stats.released_early ? ops->recreate_all(ctx, &shortfall) : 0;
    struct engine_stats again;
    if (stats.released_early && !undone)
      undone = engine_restore(tr.engine, &again, reason, sizeof reason);
    if (undone) {
      fail(r, rc, "moving managed memory off the device failed: %s; putting back the memory "
           "given back while saving failed too: the program stays paused with its image (a "
           "resume brings it back)", strerror(-rc));
      stay_paused_with_image();
      return;
    }
    engine_drop_image(tr.engine);
    fail(r, rc, "moving managed memory off the device failed: %s", strerror(-rc));
    goto reopen;
  }
  rc = ops->release_all(ctx);
  r->memory_seconds = ckpt_now() - t;
  if (rc) {
    if (ops->unpark_other) (void)ops->unpark_other(ctx);
    /* The host re-created what it had released, with undefined content: put the saved bytes
     * back before the program continues. */
    int restored = engine_restore(tr.engine, &stats, reason, sizeof reason);
    if (restored) {
      fail(r, rc, "releasing device memory failed: %s, and restoring the saved bytes too: the "
           "program stays paused with its image (a resume brings it back); %s", strerror(-rc),
           reason);
      stay_paused_with_image();
      return;
    }
    engine_drop_image(tr.engine);
    fail(r, rc, "releasing device memory failed: %s", strerror(-rc));
    goto reopen;
  }
  if (request->release_all) {
    t = ckpt_now();
    rc = driver_checkpoint(timeout_ms, reason, sizeof reason);
    r->driver_seconds = ckpt_now() - t;
    if (rc) {
      /* The driver left the process as it was: undo cudaw's part, the program runs on. */
      char undo[224] = "";
      uint64_t shortfall = 0;
      int undone = ops->recreate_all(ctx, &shortfall);
      if (!undone) undone = engine_restore(tr.engine, &stats, undo, sizeof undo);
      if (ops->unpark_other) (void)ops->unpark_other(ctx);
      if (undone) {
        fail(r, rc, "releasing everything failed: %s; restoring cudaw's part failed too: the "
             "program stays paused with its image (a resume brings it back)", reason);
        stay_paused_with_image();
        return;
      }
      engine_drop_image(tr.engine);
      fail(r, rc, "releasing everything failed: %s; the program keeps running", reason);
      goto reopen;
    }
    r->driver_released = true;
  }
  r->stall_seconds = ckpt_now() - closed;
  if (request->to_dir[0]) remember_disk_regions(); /* the disk holds the image now */
  pthread_mutex_lock(&tr.lock);
  tr.other = other;
  tr.paused = (struct transition_paused){.driver_released = request->release_all};
  if (request->to_dir[0]) {
    tr.paused.disk_bytes = r->disk_bytes;
    tr.paused.disk_stored = r->disk_stored;
    snprintf(tr.paused.dir, sizeof tr.paused.dir, "%s", request->to_dir);
  }
  note_paused_locked();
  pthread_mutex_unlock(&tr.lock);
  if (request->to_dir[0]) engine_empty_reserve(tr.engine); /* free host memory: all of it */
  /* While paused, page-lock the image so that the resume copies without staging buffers. */
  /* Not after the driver's checkpoint: page-locking calls into the driver, which holds the
   * process until the resume. */
  if (ckpt_rt.options.register_image && !request->release_all) engine_register_image(tr.engine);
  return; /* paused: the gate stays closed until resume */
reopen:
  if (held) { /* failed before the save: the pre-copied image is not used */
    engine_drop_image(tr.engine);
    ops->live_end(ctx);
  }
  ops->gate_open(ctx);
}

/* The paused process's image from dir into the engine, checked against its regions. */
static int read_disk_image(struct ckpt_result *r, const char *dir) {
  char reason[224] = "";
  struct disk_stats disk = {0};
  int rc = -ENOMEM;
  if (!tr.disk_regions)
    snprintf(reason, sizeof reason, "out of memory when the image was written");
  else
    rc = disk_read_image(tr.engine, dir, tr.disk_regions, tr.disk_region_count,
                         (int)ckpt_rt.options.threads, &disk, reason, sizeof reason);
  r->disk_bytes = disk.bytes;
  r->disk_stored = disk.stored;
  r->disk_seconds = disk.seconds;
  if (rc) fail(r, rc, "%s; still paused, nothing lost: fix the file and resume again", reason);
  return rc;
}

/* The paused process's image in dir, opened for a streamed restore: the manifest, its regions
 * and every file's size are checked before anything changes. */
static int open_disk_source(struct ckpt_result *r, const char *dir, struct disk_source **source) {
  char reason[224] = "";
  int rc = -ENOMEM;
  if (!tr.disk_regions)
    snprintf(reason, sizeof reason, "out of memory when the image was written");
  else
    rc = disk_source_open(dir, engine_chunk_bytes(tr.engine), tr.disk_regions,
                          tr.disk_region_count, source, reason, sizeof reason);
  if (rc) fail(r, rc, "%s; still paused, nothing lost: fix the file and resume again", reason);
  return rc;
}

/* Restore the recreated regions from the files in dir, each chunk verified before it goes. */
static int restore_from_disk(struct ckpt_result *r, struct disk_source *source,
                             struct engine_stats *stats, char *reason, size_t len) {
  struct disk_stats disk = {0};
  uint64_t peak = 0;
  int rc = disk_source_restore(tr.engine, source, stats, &disk, &peak, reason, len);
  r->disk_bytes = disk.bytes;
  r->disk_stored = disk.stored;
  r->disk_seconds = disk.seconds;
  r->disk_peak_bytes = peak;
  if (!rc)
    ckpt_logf(CKPT_LOG_INFO, "resume streamed from disk: %" PRIu64 " bytes (%" PRIu64 " in "
              "%" PRIu64 " files) in %.3f s; host memory for the reading beyond the %d staging "
              "buffers: at most %" PRIu64 " bytes", disk.bytes, disk.stored, disk.files,
              disk.seconds, stats->threads, peak);
  return rc;
}

/* Running again after a resume: the image goes (see resume_program), the state is cleared. */
static void resumed(void) {
  const struct ckpt_host_ops *ops = ckpt_rt.ops;
  void *ctx = ckpt_rt.ctx;
  int rc;
  /* Freeing the image (unregistering and unmapping it) waits until the program runs again. One
   * in cudawd's pool goes whatever CUDAW_CKPT_KEEP_IMAGE says: cudawd lends its range again. */
  tr.drop_image = !ckpt_rt.options.keep_image || engine_image_in_pool(tr.engine);
  /* Managed memory migrates back on first touch anyway: a failure here only costs speed. */
  if (ops->unpark_other && (rc = ops->unpark_other(ctx)) != 0)
    ckpt_logf(CKPT_LOG_WARN, "resume: bringing managed memory back to the device failed: %s",
              strerror(-rc));
  pthread_mutex_lock(&tr.lock);
  tr.other = (struct ckpt_other_memory){0};
  tr.paused = (struct transition_paused){0};
  note_paused_locked();
  free(tr.disk_regions);
  tr.disk_regions = NULL;
  tr.disk_region_count = 0;
  pthread_mutex_unlock(&tr.lock);
  if (!tr.request.hold_after) ops->gate_open(ctx); /* else a group's unhold opens it */
}

/* The side of an exchange coming in: each piece created just before its bytes go in, paced by
 * what the other program released; then whatever vmem still lacks. A failure leaves what
 * reached the device there and the rest in the image: still paused, a resume copies the rest. */
static void exchange_resume(struct ckpt_result *r) {
  char reason[224] = "";
  uint64_t shortfall = 0;
  struct engine_stats stats;
  /* The image registered while paused would stay whole in host memory as it is consumed. */
  double t = ckpt_now();
  uint64_t registered = engine_image_registered(tr.engine);
  engine_unregister_image(tr.engine);
  double unpinned = ckpt_now() - t;
  /* Said when it shows: an exchange of notebook_bench took 9.9 s where each side's copy took
   * 1.5-1.7 s (session 29), and this step comes before the copy's own clock. */
  if (unpinned > 0.1)
    ckpt_logf(CKPT_LOG_INFO, "exchange side in: the image's page-locking (%.2f GiB) given back "
              "in %.3f s before its copy", (double)registered / (1u << 30), unpinned);
  t = ckpt_now();
  int rc = engine_restore_creating(tr.engine, &tr.pace, &stats, reason, sizeof reason);
  r->copy_seconds = ckpt_now() - t;
  log_copy_times("exchange side in", &stats, r->copy_seconds);
  r->setup_seconds = stats.setup_seconds;
  result_from_stats(r, &stats);
  if (rc) {
    fail(r, rc, "an exchange's resume failed: %s; still paused, what reached the device stays "
         "there and a resume copies the rest", reason);
    return;
  }
  t = ckpt_now();
  rc = ckpt_rt.ops->recreate_all(ckpt_rt.ctx, &shortfall);
  r->memory_seconds = ckpt_now() - t;
  if (rc) {
    fail(r, rc, "an exchange's resume copied the image but recreating the rest of device memory "
         "failed (%" PRIu64 " bytes short): %s; still paused", shortfall, strerror(-rc));
    return;
  }
  resumed();
}

/* Re-creating device memory failed (r->shortfall set): nothing is held, still paused. */
static void fail_recreating(struct ckpt_result *r, int rc) {
  char missing[32];
  ckpt_format_bytes(r->shortfall, missing, sizeof missing);
  if (r->shortfall)
    fail(r, rc, "recreating device memory failed: %s short (%s); still paused, retry when "
         "memory is free", missing, strerror(-rc));
  else
    fail(r, rc, "recreating device memory failed: %s; still paused", strerror(-rc));
}

static void resume_program(struct ckpt_result *r) {
  const struct ckpt_host_ops *ops = ckpt_rt.ops;
  void *ctx = ckpt_rt.ctx;
  char reason[224] = "";
  uint64_t shortfall = 0;
  struct transition_paused paused;
  transition_paused_info(&paused);

  double t = ckpt_now();
  int rc;
  /* An image on disk streams to the device (disk_stream.c), never whole in host memory. What
   * can be checked without the device is, before anything changes: a missing or cut file
   * leaves the program paused exactly as it was. */
  struct disk_source *source = NULL;
  if (paused.dir[0] && open_disk_source(r, paused.dir, &source) != 0) return;
  if (paused.driver_released) {
    t = ckpt_now();
    rc = driver_restore(reason, sizeof reason);
    r->driver_seconds = ckpt_now() - t;
    if (rc) {
      disk_source_close(source);
      fail(r, rc, "the driver's restore failed: %s; still paused", reason);
      return;
    }
    pthread_mutex_lock(&tr.lock);
    tr.paused.driver_released = false;
    note_paused_locked();
    pthread_mutex_unlock(&tr.lock);
  }
  /* The image's page-locking may still run (engine_register_image); the driver's VMM calls of
   * the re-creation waited behind it (a 59 GiB JAX resume 1 s after its pause: recreate 4.6 s
   * under translate, 0.33 s under remap, against 20-60 ms once registered; H100 2026-11-27).
   * What is not registered by now is staged. */
  engine_stop_registering(tr.engine);
  if (tr.side.page) {
    if (source || paused.driver_released) {
      disk_source_close(source);
      fail(r, -EINVAL, "an exchange needs the image in host memory and the context here; still "
           "paused");
      return;
    }
    exchange_resume(r);
    return;
  }
  /* From a host image, where memory moves piece by piece (remap), memory is made beside the
   * copy (engine_restore_beside): re-creating it all first cost 187-201 ms in front of a 64 GiB
   * copy on the H100. From disk the chunks arrive in the files' order: made first, as before. */
  bool beside = !source && !ckpt_rt.options.create_first && engine_creates_beside(tr.engine);
  if (!beside) {
    t = ckpt_now();
    rc = ops->recreate_all(ctx, &shortfall);
    r->memory_seconds = ckpt_now() - t;
    if (rc) {
      r->shortfall = shortfall;
      disk_source_close(source); /* the disk still holds it */
      fail_recreating(r, rc);
      return;
    }
  }
  t = ckpt_now();
  struct engine_stats stats;
  rc = source  ? restore_from_disk(r, source, &stats, reason, sizeof reason)
       : beside ? engine_restore_beside(tr.engine, &stats, reason, sizeof reason)
                : engine_restore(tr.engine, &stats, reason, sizeof reason);
  disk_source_close(source);
  r->copy_seconds = ckpt_now() - t;
  r->setup_seconds = stats.setup_seconds;
  result_from_stats(r, &stats);
  if (rc == 0)
    log_copy_times(source ? "resume copy from disk" : beside ? "resume copy, memory made beside"
                                                             : "resume copy",
                   &stats, r->copy_seconds);
  if (beside) {
    r->memory_beside = true;
    r->memory_seconds = stats.create_seconds;
    r->memory_wait_seconds = stats.create_wait_seconds;
  }
  if (rc) {
    /* Give the memory back so that "paused" means the same as before the attempt; memory made
     * beside the copy may be made in part (pieces of an allocation): all of it goes. */
    int released = ops->release_all(ctx);
    if (beside && stats.create_failed && !released) {
      r->shortfall = stats.create_shortfall;
      fail_recreating(r, rc);
      return;
    }
    fail(r, rc, "%s; still paused%s%s", reason,
         released ? " (and releasing the recreated memory failed too)" : "",
         source ? ", image on disk" : "");
    return;
  }
  resumed();
}

/* ---- a paused program's image between host memory and disk ---- */

/* Write the paused program's host image to the request's dir, then free it: still paused, the
 * resume streams it from there. On any failure the image stays in host memory. */
static void spill_image(struct ckpt_result *r) {
  char reason[224] = "";
  struct disk_stats disk = {0};
  const struct transition_request *request = &tr.request;
  int rc = disk_write_image(tr.engine, request->to_dir, request->compress,
                            (int)ckpt_rt.options.threads, &disk, reason, sizeof reason);
  r->bytes = r->disk_bytes = disk.bytes;
  r->disk_stored = disk.stored;
  r->disk_seconds = disk.seconds;
  r->regions = engine_image_regions(tr.engine);
  if (rc) {
    fail(r, rc, "writing the image to disk failed: %s; the image stays in host memory, still "
         "paused", reason);
    return;
  }
  remember_disk_regions(); /* frees the host image (and a pool range cudawd lent for it) */
  pthread_mutex_lock(&tr.lock);
  tr.paused.disk_bytes = disk.bytes;
  tr.paused.disk_stored = disk.stored;
  snprintf(tr.paused.dir, sizeof tr.paused.dir, "%s", request->to_dir);
  note_paused_locked();
  pthread_mutex_unlock(&tr.lock);
  engine_empty_reserve(tr.engine); /* the disk holds the image to free host memory: all of it */
}

/* Read a spilled image back into host memory, verified; the files stay. Still paused. */
static void unspill_image(struct ckpt_result *r) {
  struct transition_paused paused;
  transition_paused_info(&paused);
  if (read_disk_image(r, paused.dir) != 0) return;
  r->bytes = r->disk_bytes;
  r->regions = engine_image_regions(tr.engine);
  pthread_mutex_lock(&tr.lock);
  tr.paused.disk_bytes = tr.paused.disk_stored = 0;
  tr.paused.dir[0] = '\0';
  note_paused_locked();
  free(tr.disk_regions);
  tr.disk_regions = NULL;
  tr.disk_region_count = 0;
  pthread_mutex_unlock(&tr.lock);
  if (ckpt_rt.options.register_image && !paused.driver_released)
    engine_register_image(tr.engine);
}

/* Whether a spill or unspill may start now (tr.lock held): paused, nothing under way, and the
 * image where the step moves it from. The state stays paused meanwhile; tr.pending keeps a
 * resume (or another step) from starting until it is done. */
static int may_move_image(enum ckpt_op op, const char **why) {
  if (ckpt_state() != CKPT_PAUSED) {
    *why = "not paused (only a paused program's image can move)";
    return ckpt_state() == CKPT_RUNNING || ckpt_state() == CKPT_HELD ? -EALREADY : -EBUSY;
  }
  if (op == CKPT_OP_SPILL && tr.paused.dir[0]) {
    *why = "the image is on disk already";
    return -EALREADY;
  }
  if (op == CKPT_OP_UNSPILL && !tr.paused.dir[0]) {
    *why = "the image is in host memory already";
    return -EALREADY;
  }
  return 0;
}

/* ---- the steps of a group pause ---- */

static void hold_program(struct ckpt_result *r, double requested_at) {
  uint32_t timeout_ms = ckpt_rt.options.pause_timeout_ms;
  int rc = ckpt_rt.ops->gate_close(ckpt_rt.ctx, (uint64_t)timeout_ms * 1000000u);
  r->gate_seconds = ckpt_now() - requested_at;
  if (rc == -ETIMEDOUT)
    fail(r, rc, "API calls still in flight after %u ms (CUDAW_PAUSE_TIMEOUT); not held, the "
         "program keeps running", timeout_ms);
  else if (rc)
    fail(r, rc, "closing the API gate failed: %s", strerror(-rc));
  else
    tr.hold_generation++;
}

static void *drain_thread(void *arg) {
  unsigned generation = (unsigned)(uintptr_t)arg;
  int rc = ckpt_rt.ops->device_drain(ckpt_rt.ctx);
  pthread_mutex_lock(&drainer.lock);
  drainer.running = false;
  drainer.finished = generation;
  drainer.rc = rc;
  pthread_cond_broadcast(&drainer.done);
  pthread_mutex_unlock(&drainer.lock);
  return NULL;
}

/* Wait up to wait_ms for a drain that started during the current hold. */
static void drain_held(struct ckpt_result *r, uint32_t wait_ms) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  uint64_t ns = (uint64_t)deadline.tv_nsec + (uint64_t)wait_ms * 1000000u;
  deadline.tv_sec += (time_t)(ns / 1000000000u);
  deadline.tv_nsec = (long)(ns % 1000000000u);
  double t = ckpt_now();
  int rc = 0;
  pthread_mutex_lock(&drainer.lock);
  while (drainer.finished != tr.hold_generation) {
    if (!drainer.running) { /* none behind, or the one behind has finished: start ours */
      pthread_t thread;
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
      rc = -pthread_create(&thread, &attr, drain_thread, (void *)(uintptr_t)tr.hold_generation);
      pthread_attr_destroy(&attr);
      if (rc) break;
      drainer.running = true;
    }
    if (pthread_cond_timedwait(&drainer.done, &drainer.lock, &deadline) == ETIMEDOUT &&
        drainer.finished != tr.hold_generation) {
      rc = -ETIMEDOUT;
      break;
    }
  }
  if (!rc) rc = drainer.rc;
  pthread_mutex_unlock(&drainer.lock);
  r->drain_seconds = ckpt_now() - t;
  if (rc == -ETIMEDOUT)
    fail(r, rc, "the device did not drain within %u ms (work waiting for another process, "
         "e.g. a collective whose peer is held); still held", wait_ms);
  else if (rc)
    fail(r, rc, "device synchronize failed: %s; still held", strerror(-rc));
}

/* The lease ran out (called with tr.lock held, nothing pending, state held): reopen. */
static void lease_expired(void) {
  const char *why = "";
  if (state_begin(CKPT_OP_UNHOLD, &why) != 0) return;
  tr.lease_deadline = 0;
  pthread_mutex_unlock(&tr.lock);
  ckpt_logf(CKPT_LOG_WARN, "held for %u ms without a command (the controller went away?): "
            "reopening the gate", tr.lease_ms);
  ckpt_rt.ops->gate_open(ckpt_rt.ctx);
  struct ckpt_result result = {.op = CKPT_OP_UNHOLD};
  snprintf(result.reason, sizeof result.reason, "lease of %u ms ran out", tr.lease_ms);
  state_finish(&result, CKPT_RUNNING);
  control_state_changed();
  pthread_mutex_lock(&tr.lock);
}

/* Where a transition landed. */
static enum ckpt_state_id landed(const struct ckpt_result *r) {
  switch (r->op) {
  case CKPT_OP_CHECKPOINT: return r->error && !tr.stay_paused ? CKPT_RUNNING : CKPT_PAUSED;
  case CKPT_OP_RESUME: return r->error ? CKPT_PAUSED : tr.request.hold_after ? CKPT_HELD
                                                                              : CKPT_RUNNING;
  case CKPT_OP_HOLD: return r->error ? CKPT_RUNNING : CKPT_HELD;
  case CKPT_OP_DRAIN: return CKPT_HELD;
  case CKPT_OP_SPILL:
  case CKPT_OP_UNSPILL: return CKPT_PAUSED;
  default: return CKPT_RUNNING;
  }
}

/* Wait for work; while held, only until the lease runs out. Called with tr.lock held. */
static void wait_for_work(void) {
  if (!tr.lease_deadline) {
    pthread_cond_wait(&tr.wake, &tr.lock);
    return;
  }
  double left = tr.lease_deadline - ckpt_now();
  if (left <= 0) {
    lease_expired();
    return;
  }
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  uint64_t ns = (uint64_t)deadline.tv_nsec + (uint64_t)(left * 1e9);
  deadline.tv_sec += (time_t)(ns / 1000000000u);
  deadline.tv_nsec = (long)(ns % 1000000000u);
  pthread_cond_timedwait(&tr.wake, &tr.lock, &deadline);
}

static void *run(void *unused) {
  (void)unused;
  pthread_mutex_lock(&tr.lock);
  for (;;) {
    while (!tr.pending && !tr.stopping && !tr.prepare) wait_for_work();
    if (tr.prepare && !tr.pending && !tr.stopping) {
      /* Pin the staging buffers now, so that the first checkpoint does not wait for them. */
      tr.prepare = false;
      tr.preparing = true;
      pthread_mutex_unlock(&tr.lock);
      int rc = engine_prepare(tr.engine);
      if (rc) ckpt_logf(CKPT_LOG_DEBUG, "pinning staging buffers ahead failed: %s", strerror(-rc));
      pthread_mutex_lock(&tr.lock);
      engine_cancel_pinning(tr.engine, false); /* a transition still pending pins what it needs */
      tr.preparing = false;
      pthread_cond_broadcast(&tr.wake);
      continue;
    }
    if (!tr.pending) break;
    enum ckpt_op op = tr.op;
    double requested_at = tr.requested_at;
    transition_done_fn done = tr.done;
    void *done_arg = tr.done_arg;
    pthread_mutex_unlock(&tr.lock);

    struct ckpt_result result = {.op = op};
    tr.stay_paused = false;
    bool exchange = tr.request.exchange && (op == CKPT_OP_CHECKPOINT || op == CKPT_OP_RESUME);
    if (exchange) exchange_open(&result, op == CKPT_OP_CHECKPOINT);
    if (exchange && result.error) {
      /* nothing started: running or paused as before */
    } else if (op == CKPT_OP_CHECKPOINT) {
      pthread_mutex_lock(&tr.lock);
      engine_lend(tr.engine, tr.loan_offset, tr.loan_length); /* for this checkpoint only */
      if (!tr.loan_standing) tr.loan_length = 0;
      pthread_mutex_unlock(&tr.lock);
      pause_program(&result, requested_at);
      if (!engine_image_in_pool(tr.engine)) engine_lend(tr.engine, 0, 0);
    }
    else if (op == CKPT_OP_RESUME) resume_program(&result);
    else if (op == CKPT_OP_SPILL) spill_image(&result);
    else if (op == CKPT_OP_UNSPILL) unspill_image(&result);
    else if (op == CKPT_OP_HOLD) hold_program(&result, requested_at);
    else if (op == CKPT_OP_DRAIN) drain_held(&result, tr.request.hold_ms ? tr.request.hold_ms
                                                                         : DRAIN_MS_DEFAULT);
    else ckpt_rt.ops->gate_open(ckpt_rt.ctx); /* unhold */
    if (tr.side.page) exchange_close(&result);
    result.total_seconds = ckpt_now() - requested_at;
    enum ckpt_state_id to = landed(&result);
    /* Free the request slot before the state changes: the moment state_finish returns, a
     * controller may submit the next transition. */
    pthread_mutex_lock(&tr.lock);
    tr.pending = false;
    if (to == CKPT_HELD) {
      if (op != CKPT_OP_DRAIN) tr.lease_ms = tr.request.hold_ms ? tr.request.hold_ms
                                                               : LEASE_MS_DEFAULT;
      tr.lease_deadline = ckpt_now() + tr.lease_ms / 1e3; /* every command renews it */
    } else {
      tr.lease_deadline = 0;
    }
    pthread_mutex_unlock(&tr.lock);
    state_finish(&result, to);
    control_state_changed(); /* before the reply: a stop may follow it at once */
    if (done) done(done_arg, &result);
    if (tr.drop_image) { /* status does not read the image meanwhile */
      pthread_mutex_lock(&tr.lock);
      tr.dropping = true;
      pthread_mutex_unlock(&tr.lock);
      engine_drop_image(tr.engine);
      pthread_mutex_lock(&tr.lock);
      tr.dropping = tr.drop_image = false;
      pthread_mutex_unlock(&tr.lock);
    }
    pthread_mutex_lock(&tr.lock);
  }
  pthread_mutex_unlock(&tr.lock);
  return NULL;
}

int transition_start(void) {
  tr.engine = engine_new(ckpt_rt.ops, ckpt_rt.ctx, &ckpt_rt.options);
  if (!tr.engine) return -ENOMEM;
  tr.stopping = false;
  tr.pending = false;
  int rc = pthread_create(&tr.thread, NULL, run, NULL);
  if (rc) {
    engine_free(tr.engine);
    tr.engine = NULL;
    return -rc;
  }
  tr.started = true;
  return 0;
}

void transition_stop(void) {
  if (!tr.started) return;
  pthread_mutex_lock(&tr.lock);
  tr.stopping = true;
  /* The program is leaving: buffers pinned ahead would never be used. Waiting for all of them
   * made a short program's exit wait for all 128 MiB (~70 ms at cudaHostAlloc's 1.8 GB/s). */
  if (tr.preparing) engine_cancel_pinning(tr.engine, true);
  /* Nor is a live checkpoint's copy worth finishing: the real runtime is going away. */
  engine_cancel_precopy(tr.engine, true);
  pthread_cond_broadcast(&tr.wake);
  pthread_mutex_unlock(&tr.lock);
  pthread_join(tr.thread, NULL); /* a pending transition finishes first */
  /* A drain left behind by a group pause may still be in the runtime: give it a second, since
   * the host operations may go away after this returns. */
  pthread_mutex_lock(&drainer.lock);
  for (int i = 0; i < 100 && drainer.running; i++) {
    pthread_mutex_unlock(&drainer.lock);
    nanosleep(&(struct timespec){0, 10000000}, NULL);
    pthread_mutex_lock(&drainer.lock);
  }
  if (drainer.running) ckpt_logf(CKPT_LOG_WARN, "a device drain is still running at shutdown");
  pthread_mutex_unlock(&drainer.lock);
  /* The shim's sched and borrow threads are detached and call in (ckpt_pool_attach and co.)
   * until the process ends: the engine goes under the lock, so that they find none, before it
   * is freed. Freed with tr.engine still set, an attach meanwhile freed the old pool a second
   * time and wrote into the freed reserve (ASan, a job of sched.pool_idle_jobs at its exit). */
  pthread_mutex_lock(&tr.lock);
  struct engine *engine = tr.engine;
  tr.engine = NULL;
  tr.started = false;
  pthread_mutex_unlock(&tr.lock);
  /* What of cudawd's pool is still page-locked here, the driver unpins as the process ends
   * (about 50 GB/s): a lone program's standby should have given it back before (share_bench
   * host's last exit took 2.2 s, session 30). */
  uint64_t pinned = engine ? reserve_ready(engine_pool(engine)) : 0;
  if (pinned)
    ckpt_logf(CKPT_LOG_DEBUG, "checkpoint: at exit %.2f GiB of cudawd's pool still page-locked",
              (double)pinned / (1u << 30));
  free(tr.disk_regions);
  tr.disk_regions = NULL;
  /* Giving the reserve and the pool back is one host_unregister per 32 MiB piece: a program that
   * page-locked a 94 GiB pool took about 3 s from its last call to its exit (H200 as an H100,
   * share_bench gpu), against under 0.6 s with a 47 GiB one. Said, to tell it from the runtime's
   * own teardown. */
  double t0 = ckpt_now();
  engine_free(engine);
  double took = ckpt_now() - t0;
  if (took > 0.1)
    ckpt_logf(CKPT_LOG_DEBUG, "checkpoint: its memory given back at exit in %.3f s", took);
}

void transition_forget_after_fork(void) {
  /* The thread and the engine's streams and pinned buffers belong to the parent. */
  pthread_mutex_init(&tr.lock, NULL);
  pthread_cond_init(&tr.wake, NULL);
  tr.started = tr.pending = tr.stopping = false;
  tr.engine = NULL;
  tr.lease_deadline = 0;
  pthread_mutex_init(&drainer.lock, NULL);
  pthread_cond_init(&drainer.done, NULL);
  drainer.running = false;
}

int transition_submit(enum ckpt_op op, double requested_at, transition_done_fn done, void *arg,
                      const char **why) {
  return transition_submit_with(op, requested_at, NULL, done, arg, why);
}

int transition_submit_with(enum ckpt_op op, double requested_at, const struct transition_request *request,
                           transition_done_fn done, void *arg, const char **why) {
  pthread_mutex_lock(&tr.lock);
  if (!tr.started || tr.stopping) {
    pthread_mutex_unlock(&tr.lock);
    *why = "checkpoint module not running";
    return -ENOTCONN;
  }
  bool held = ckpt_state() == CKPT_HELD; /* stable: only this lock's holders leave it */
  int rc;
  if (tr.pending && ckpt_state() == CKPT_PAUSED) { /* the state stays paused through these */
    *why = "a spill or unspill of the image is under way";
    rc = -EBUSY;
  } else if (op == CKPT_OP_SPILL || op == CKPT_OP_UNSPILL) {
    rc = may_move_image(op, why);
    if (rc) ckpt_logf(CKPT_LOG_WARN, "%s refused: %s", ckpt_op_name(op), *why);
  } else {
    rc = state_begin(op, why);
  }
  if (rc == 0) {
    tr.from_held = held;
    tr.pending = true;
    tr.op = op;
    tr.requested_at = requested_at;
    tr.done = done;
    tr.done_arg = arg;
    if (request) tr.request = *request;
    else tr.request = (struct transition_request){.release_all = ckpt_rt.options.release_all != 0,
                                                  .live = ckpt_rt.options.live != 0};
    pthread_cond_broadcast(&tr.wake);
  }
  pthread_mutex_unlock(&tr.lock);
  return rc;
}

uint64_t transition_image_bytes(void) {
  pthread_mutex_lock(&tr.lock);
  uint64_t bytes = tr.engine && !tr.pending && !tr.dropping ? engine_image_bytes(tr.engine) : 0;
  pthread_mutex_unlock(&tr.lock);
  return bytes;
}

int transition_image_device_bytes(uint64_t *bytes, int max_devices) {
  pthread_mutex_lock(&tr.lock);
  int devices = tr.engine && !tr.pending && !tr.dropping
                    ? engine_image_device_bytes(tr.engine, bytes, max_devices) : 0;
  pthread_mutex_unlock(&tr.lock);
  return devices;
}

uint64_t transition_image_registered(void) {
  pthread_mutex_lock(&tr.lock);
  uint64_t bytes = tr.engine ? engine_image_registered(tr.engine) : 0;
  pthread_mutex_unlock(&tr.lock);
  return bytes;
}

uint64_t transition_image_regions(void) {
  pthread_mutex_lock(&tr.lock);
  uint64_t regions = tr.engine && !tr.pending && !tr.dropping ? engine_image_regions(tr.engine) : 0;
  pthread_mutex_unlock(&tr.lock);
  return regions;
}

struct engine *transition_engine(void) { return tr.engine; }

/* Whether the program computes (ckpt_pool_quiet). Meanwhile cudawd's pool is page-locked one
 * piece at a time, at most half the time; otherwise by every reserve thread. Every program of a
 * share page-locks the same window at once, and the driver holds a program's launches back
 * while it page-locks. share_bench on the H100 (session 21, docs/sharing.md): with every thread
 * everywhere, the computing program's kernels ran 1.13-2.2x slower; with one thread everywhere
 * they ran at 1.03x, but the window was ready 25% later and a first swap-out staged 72% of its
 * image. Kept here, so that a pool attached later starts so. */
static _Atomic bool pool_quiet;
/* cudawd said we are the only program it schedules and idle (ckpt_pool_alone): the pool stands
 * by. Kept here too, for a pool attached later. */
static _Atomic bool pool_alone;

int transition_pool_attach(void *base, uint64_t size, uint64_t mapping) {
  pthread_mutex_lock(&tr.lock);
  int rc = 0;
  if (!tr.started || !tr.engine) rc = -ENOTCONN;
  else if (tr.pending || tr.dropping || engine_image_in_pool(tr.engine)) rc = -EBUSY;
  struct reserve *pool = NULL;
  if (!rc && size && !(pool = reserve_new_shared(ckpt_rt.ops, ckpt_rt.ctx, base, size, mapping,
                                                 ckpt_rt.options.reserve_piece,
                                                 ckpt_rt.options.pool_threads,
                                                 atomic_load(&pool_quiet))))
    rc = -ENOSYS;
  if (pool && atomic_load(&pool_alone)) reserve_standby(pool, true);
  if (!rc) engine_set_pool(tr.engine, pool); /* no image in the last one: cannot fail */
  static bool said_unlocked; /* under tr.lock: once, not at every new window */
  if (!rc && size && !ckpt_rt.options.pool_threads && !said_unlocked) {
    said_unlocked = true;
    ckpt_logf(CKPT_LOG_INFO, "cudawd's host-memory pool: not page-locked (CUDAW_CKPT_POOL_THREADS"
              "=0): every copy to and from it goes through staging");
  }
  pthread_mutex_unlock(&tr.lock);
  return rc;
}

void transition_pool_quiet(bool quiet) {
  pthread_mutex_lock(&tr.lock);
  atomic_store(&pool_quiet, quiet);
  reserve_quiet(tr.engine ? engine_pool(tr.engine) : NULL, quiet);
  pthread_mutex_unlock(&tr.lock);
}

void transition_pool_alone(bool alone) {
  pthread_mutex_lock(&tr.lock);
  atomic_store(&pool_alone, alone);
  reserve_standby(tr.engine ? engine_pool(tr.engine) : NULL, alone);
  pthread_mutex_unlock(&tr.lock);
}

int transition_pool_grow(void *base, uint64_t size) {
  pthread_mutex_lock(&tr.lock);
  struct reserve *pool = tr.engine ? engine_pool(tr.engine) : NULL;
  int rc = !pool || base != reserve_base(pool) ? -ENOENT : reserve_grow_shared(pool, size);
  pthread_mutex_unlock(&tr.lock);
  return rc;
}

void transition_pool_lend(uint64_t offset, uint64_t length) {
  pthread_mutex_lock(&tr.lock);
  tr.loan_offset = offset;
  tr.loan_length = length;
  tr.loan_standing = false;
  pthread_mutex_unlock(&tr.lock);
}

bool transition_pool_lend_standing(uint64_t offset, uint64_t length, bool covers) {
  pthread_mutex_lock(&tr.lock);
  tr.loan_offset = offset;
  tr.loan_length = length;
  tr.loan_standing = length > 0;
  /* The reserve stands by only once the range is page-locked: until then a pause finds more of
   * its image ready there (place_in_pool takes whichever holds more). */
  bool standby = tr.engine && covers && length > 0 &&
                 reserve_ready(engine_pool(tr.engine)) >= offset + length;
  if (tr.engine) reserve_standby(engine_reserve(tr.engine), standby);
  pthread_mutex_unlock(&tr.lock);
  return standby;
}

int transition_pool_unlend(void) {
  pthread_mutex_lock(&tr.lock);
  /* A checkpoint takes the loan under this lock when it starts (tr.pending is set from its
   * request to its end); its image keeps the range until the drop after its resume. */
  int rc = tr.pending || tr.dropping || (tr.engine && engine_image_in_pool(tr.engine)) ? -EBUSY
                                                                                       : 0;
  if (!rc) {
    tr.loan_length = 0;
    tr.loan_standing = false;
  }
  pthread_mutex_unlock(&tr.lock);
  return rc;
}

void transition_reserve(struct reserve_info *out) {
  /* The reserve lives as long as the engine; its own lock guards what it reports. */
  pthread_mutex_lock(&tr.lock);
  reserve_status(tr.engine ? engine_reserve(tr.engine) : NULL, out);
  pthread_mutex_unlock(&tr.lock);
}

void transition_paused_info(struct transition_paused *out) {
  pthread_mutex_lock(&tr.lock);
  *out = tr.paused;
  pthread_mutex_unlock(&tr.lock);
}

struct ckpt_other_memory transition_other_memory(void) {
  pthread_mutex_lock(&tr.lock);
  struct ckpt_other_memory other = tr.other;
  pthread_mutex_unlock(&tr.lock);
  return other;
}

void ckpt_prepare_early(void) {
  if (!ckpt_rt.options.pin_early) return;
  pthread_mutex_lock(&tr.lock);
  if (tr.started && !tr.stopping) {
    tr.prepare = true;
    pthread_cond_broadcast(&tr.wake);
  }
  pthread_mutex_unlock(&tr.lock);
}

void ckpt_device_reset(void) {
  /* Transitions run with the gate closed; the caller is inside a counted API call, so none is
   * running now and none can start before the call returns. Early pinning runs outside the
   * gate: cancel it, or wait for it, before forgetting what it pinned. */
  pthread_mutex_lock(&tr.lock);
  tr.prepare = false;
  while (tr.preparing) pthread_cond_wait(&tr.wake, &tr.lock);
  pthread_mutex_unlock(&tr.lock);
  if (tr.engine) engine_forget_pinned(tr.engine);
}
