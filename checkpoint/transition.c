/* The transition thread: runs the pause sequence (close gate, drain, save, release) and the
 * resume sequence (recreate, restore and verify, open gate) one at a time, off the control
 * thread so that status requests are answered while a checkpoint runs. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

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
  bool drop_image;                /* after this transition: free the image */
  bool prepare;                   /* ckpt_prepare_early asked for the staging buffers */
  bool preparing;                 /* ... which are being pinned (not inside the gate) */
  bool dropping;                  /* ... which is under way */
} tr = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static void fail(struct ckpt_result *r, int error, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static void fail(struct ckpt_result *r, int error, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(r->reason, sizeof r->reason, format, args);
  va_end(args);
  r->error = error;
}

static void result_from_stats(struct ckpt_result *r, const struct engine_stats *stats) {
  r->bytes = stats->bytes;
  r->regions = stats->regions;
  r->dma_wait_seconds = stats->times.wait;
  r->host_copy_seconds = stats->times.copy;
  r->hash_seconds = stats->times.hash;
  r->fault_seconds = stats->times.fault;
  r->device_hash_seconds = stats->device_hash_seconds;
  r->copy_threads = (uint32_t)stats->threads;
  r->unchanged_bytes = stats->unchanged_bytes;
}

static void pause_program(struct ckpt_result *r, double requested_at) {
  const struct ckpt_host_ops *ops = ckpt_rt.ops;
  void *ctx = ckpt_rt.ctx;
  char reason[224] = "";
  uint32_t timeout_ms = ckpt_rt.options.pause_timeout_ms;

  int rc = ops->gate_close(ctx, (uint64_t)timeout_ms * 1000000u);
  double t = ckpt_now();
  r->gate_seconds = t - requested_at;
  if (rc == -ETIMEDOUT) {
    fail(r, rc, "API calls still in flight after %u ms (CUDAW_PAUSE_TIMEOUT); checkpoint "
         "abandoned, the program keeps running", timeout_ms);
    return;
  }
  if (rc) {
    fail(r, rc, "closing the API gate failed: %s", strerror(-rc));
    return;
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
  rc = engine_save(tr.engine, &stats, reason, sizeof reason);
  r->copy_seconds = ckpt_now() - t;
  r->setup_seconds += stats.setup_seconds;
  result_from_stats(r, &stats);
  t = ckpt_now();
  if (rc) {
    fail(r, rc, "saving device memory failed: %s", reason);
    goto reopen;
  }
  struct ckpt_other_memory other = {0};
  if (ops->park_other && (rc = ops->park_other(ctx, &other)) != 0) {
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
    engine_drop_image(tr.engine);
    fail(r, rc, "releasing device memory failed: %s%s%s", strerror(-rc),
         restored ? "; restoring the saved bytes failed too: " : "", restored ? reason : "");
    goto reopen;
  }
  pthread_mutex_lock(&tr.lock);
  tr.other = other;
  pthread_mutex_unlock(&tr.lock);
  /* While paused, page-lock the image so that the resume copies without staging buffers. */
  if (ckpt_rt.options.register_image) engine_register_image(tr.engine);
  return; /* paused: the gate stays closed until resume */
reopen:
  ops->gate_open(ctx);
}

static void resume_program(struct ckpt_result *r) {
  const struct ckpt_host_ops *ops = ckpt_rt.ops;
  void *ctx = ckpt_rt.ctx;
  char reason[224] = "";
  uint64_t shortfall = 0;

  double t = ckpt_now();
  int rc = ops->recreate_all(ctx, &shortfall);
  r->memory_seconds = ckpt_now() - t;
  if (rc) {
    char missing[32];
    ckpt_format_bytes(shortfall, missing, sizeof missing);
    r->shortfall = shortfall;
    if (shortfall)
      fail(r, rc, "recreating device memory failed: %s short (%s); still paused, retry when "
           "memory is free", missing, strerror(-rc));
    else
      fail(r, rc, "recreating device memory failed: %s; still paused", strerror(-rc));
    return;
  }
  t = ckpt_now();
  struct engine_stats stats;
  rc = engine_restore(tr.engine, &stats, reason, sizeof reason);
  r->copy_seconds = ckpt_now() - t;
  r->setup_seconds = stats.setup_seconds;
  result_from_stats(r, &stats);
  if (rc) {
    /* Give the memory back so that "paused" means the same as before the attempt. */
    int released = ops->release_all(ctx);
    fail(r, rc, "%s; still paused%s", reason,
         released ? " (and releasing the recreated memory failed too)" : "");
    return;
  }
  /* Freeing the image (unregistering and unmapping it) waits until the program runs again. */
  tr.drop_image = !ckpt_rt.options.keep_image;
  /* Managed memory migrates back on first touch anyway: a failure here only costs speed. */
  if (ops->unpark_other && (rc = ops->unpark_other(ctx)) != 0)
    ckpt_logf(CKPT_LOG_WARN, "resume: bringing managed memory back to the device failed: %s",
              strerror(-rc));
  pthread_mutex_lock(&tr.lock);
  tr.other = (struct ckpt_other_memory){0};
  pthread_mutex_unlock(&tr.lock);
  ops->gate_open(ctx);
}

static void *run(void *unused) {
  (void)unused;
  pthread_mutex_lock(&tr.lock);
  for (;;) {
    while (!tr.pending && !tr.stopping && !tr.prepare) pthread_cond_wait(&tr.wake, &tr.lock);
    if (tr.prepare && !tr.pending && !tr.stopping) {
      /* Pin the staging buffers now, so that the first checkpoint does not wait for them. */
      tr.prepare = false;
      tr.preparing = true;
      pthread_mutex_unlock(&tr.lock);
      int rc = engine_prepare(tr.engine);
      if (rc) ckpt_logf(CKPT_LOG_DEBUG, "pinning staging buffers ahead failed: %s", strerror(-rc));
      pthread_mutex_lock(&tr.lock);
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
    if (op == CKPT_OP_CHECKPOINT) pause_program(&result, requested_at);
    else resume_program(&result);
    result.total_seconds = ckpt_now() - requested_at;
    /* Free the request slot before the state changes: the moment state_finish returns, a
     * controller may submit the next transition. */
    pthread_mutex_lock(&tr.lock);
    tr.pending = false;
    pthread_mutex_unlock(&tr.lock);
    state_finish(&result);
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
  pthread_cond_broadcast(&tr.wake);
  pthread_mutex_unlock(&tr.lock);
  pthread_join(tr.thread, NULL); /* a pending transition finishes first */
  engine_free(tr.engine);
  tr.engine = NULL;
  tr.started = false;
}

void transition_forget_after_fork(void) {
  /* The thread and the engine's streams and pinned buffers belong to the parent. */
  pthread_mutex_init(&tr.lock, NULL);
  pthread_cond_init(&tr.wake, NULL);
  tr.started = tr.pending = tr.stopping = false;
  tr.engine = NULL;
}

int transition_submit(enum ckpt_op op, double requested_at, transition_done_fn done, void *arg,
                      const char **why) {
  pthread_mutex_lock(&tr.lock);
  if (!tr.started || tr.stopping) {
    pthread_mutex_unlock(&tr.lock);
    *why = "checkpoint module not running";
    return -ENOTCONN;
  }
  int rc = state_begin(op, why);
  if (rc == 0) {
    tr.pending = true;
    tr.op = op;
    tr.requested_at = requested_at;
    tr.done = done;
    tr.done_arg = arg;
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
