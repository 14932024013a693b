/* The module's entry points for the shim: start and stop the threads, socket and signal
 * handler, and run checkpoint/resume requests through the same path as the socket. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "disk.h"
#include "exchange_page.h"
#include "internal.h"

struct ckpt_runtime ckpt_rt;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static bool started;
static bool atfork_registered;

/* A forked child has none of the parent's threads: forget the module there (the signal would
 * otherwise write into the parent's pipe), so that the child may call ckpt_init afresh. */
static void forget_in_child(void) {
  pthread_mutex_init(&init_lock, NULL);
  if (!started) return;
  signal_restore();
  signal_remove_cleanup();
  suspend_forget_after_fork();
  control_forget_after_fork();
  transition_forget_after_fork();
  state_forget_after_fork();
  started = false;
}

static bool ops_complete(const struct ckpt_host_ops *ops) {
  return ops && ops->gate_close && ops->gate_open && ops->device_drain && ops->for_each_region &&
         ops->release_all && ops->recreate_all && ops->device_count && ops->stream_create &&
         ops->stream_destroy && ops->copy_d2h_async && ops->copy_h2d_async && ops->stream_sync &&
         ops->host_alloc_pinned && ops->host_free_pinned;
}

int ckpt_init(const struct ckpt_host_ops *ops, void *ctx) {
  pthread_mutex_lock(&init_lock);
  int rc = 0;
  if (started) {
    rc = -EALREADY;
    goto out;
  }
  ckpt_rt.ops = ops;
  ckpt_rt.ctx = ctx;
  if (!ops_complete(ops)) {
    ckpt_logf(CKPT_LOG_ERROR, "checkpointing disabled: the host operations are incomplete");
    ckpt_rt.ops = NULL;
    rc = -EINVAL;
    goto out;
  }
  char error[512];
  /* Invalid values were named by the shim's check of the whole table (each once, with what
   * happens to it); here they only keep their defaults. */
  if (ckpt_options_from_env(&ckpt_rt.options, error, sizeof error) != 0)
    ckpt_logf(CKPT_LOG_DEBUG, "%s", error);
  state_reset();
  if ((rc = transition_start()) != 0) {
    ckpt_logf(CKPT_LOG_ERROR, "checkpointing disabled: cannot start its thread: %s", strerror(-rc));
    goto out;
  }
  /* Before the control thread, which polls its pipe from its first loop. */
  if (ckpt_rt.options.suspend_release && (rc = suspend_start()) != 0)
    ckpt_logf(CKPT_LOG_WARN, "CUDAW_SUSPEND=release disabled: %s", strerror(-rc));
  if ((rc = control_start()) != 0) {
    suspend_stop();
    ckpt_logf(CKPT_LOG_ERROR, "checkpointing disabled: cannot start the control thread: %s",
              strerror(-rc));
    transition_stop();
    goto out;
  }
  int signal_number = ckpt_rt.options.signal_number;
  int signal_rc = signal_install(signal_number, control_signal_fd());
  if (signal_rc)
    ckpt_logf(CKPT_LOG_WARN, "cannot install the checkpoint signal handler: %s", strerror(-signal_rc));
  signal_install_cleanup(control_socket_path());
  started = true;
  if (!atfork_registered && pthread_atfork(NULL, NULL, forget_in_child) == 0) atfork_registered = true;
  ckpt_logf(CKPT_LOG_DEBUG, "checkpoint ready: socket %s, signal %d",
            control_socket_path() ? control_socket_path() : "(none)", signal_number);
out:
  pthread_mutex_unlock(&init_lock);
  return rc;
}

void ckpt_shutdown(void) {
  pthread_mutex_lock(&init_lock);
  if (started) {
    signal_restore();
    signal_remove_cleanup();
    /* The control thread polls and reads the suspend pipe: it stops first, so that the pipe is
     * never closed under it (its descriptor number could be reused by the program meanwhile). */
    control_stop();
    suspend_stop();
    transition_stop();
    started = false;
  }
  pthread_mutex_unlock(&init_lock);
}

struct waiter {
  pthread_mutex_t lock;
  pthread_cond_t done_cond;
  bool done;
  int error;
  struct ckpt_result *result; /* NULL, or where the whole result goes */
};

static void wake_waiter(void *arg, const struct ckpt_result *result) {
  struct waiter *w = arg;
  pthread_mutex_lock(&w->lock);
  w->error = result->error;
  if (w->result) *w->result = *result;
  w->done = true;
  pthread_cond_signal(&w->done_cond);
  pthread_mutex_unlock(&w->lock);
}

/* Submit op (with `with`'s details, NULL: the defaults) and wait for its result (into *out
 * unless NULL). */
static int request_with(enum ckpt_op op, const struct transition_request *with,
                        struct ckpt_result *out, bool *refused) {
  struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, out};
  const char *why = "";
  int rc = transition_submit_with(op, ckpt_now(), with, wake_waiter, &w, &why);
  if (refused) *refused = rc != 0;
  if (rc) return rc;
  pthread_mutex_lock(&w.lock);
  while (!w.done) pthread_cond_wait(&w.done_cond, &w.lock);
  pthread_mutex_unlock(&w.lock);
  return w.error;
}

int ckpt_request_checkpoint(void) { return request_with(CKPT_OP_CHECKPOINT, NULL, NULL, NULL); }
int ckpt_request_resume(void) { return request_with(CKPT_OP_RESUME, NULL, NULL, NULL); }

int ckpt_request_spill(const char *dir, struct ckpt_result *result) {
  struct transition_request spill = {0};
  if (!dir || dir[0] != '/' || strlen(dir) >= sizeof spill.to_dir) return -EINVAL;
  snprintf(spill.to_dir, sizeof spill.to_dir, "%s", dir);
  return request_with(CKPT_OP_SPILL, &spill, result, NULL);
}

int ckpt_request_unspill(struct ckpt_result *result) {
  struct transition_request unspill = {0};
  return request_with(CKPT_OP_UNSPILL, &unspill, result, NULL);
}

int ckpt_request_exchange(int page_fd, bool out, struct ckpt_result *result) {
  struct transition_request exchange = {0};
  int rc = exchange_page_map(page_fd, &exchange.exchange);
  if (rc) return rc;
  bool refused;
  rc = request_with(out ? CKPT_OP_CHECKPOINT : CKPT_OP_RESUME, &exchange, result, &refused);
  /* Refused before this side began (the module stopping at exit, a pause of the user's): the
   * peer must not wait on the page for a copy that never comes, as long as this process lives. */
  if (refused) exchange_side_refuse(exchange.exchange, out);
  exchange_page_unmap(exchange.exchange);
  return rc;
}

int ckpt_image_on_disk(char *dir, size_t len, uint64_t *bytes) {
  struct transition_paused paused;
  if (ckpt_state() != CKPT_PAUSED) return 0;
  transition_paused_info(&paused);
  if (!paused.dir[0]) return 0;
  snprintf(dir, len, "%s", paused.dir);
  if (bytes) *bytes = paused.disk_bytes;
  return 1;
}

int ckpt_remove_image(const char *dir) { return disk_remove_image(dir); }
int ckpt_remove_image_at(int parent_fd, const char *name, uid_t owner) {
  return disk_remove_image_at(parent_fd, name, owner);
}
int ckpt_pool_attach(void *base, uint64_t size, uint64_t mapping) {
  return transition_pool_attach(base, size, mapping);
}
int ckpt_pool_grow(void *base, uint64_t size) { return transition_pool_grow(base, size); }
void ckpt_pool_quiet(bool computing) { transition_pool_quiet(computing); }
void ckpt_pool_alone(bool alone) { transition_pool_alone(alone); }
void ckpt_pool_lend(uint64_t offset, uint64_t length) { transition_pool_lend(offset, length); }
bool ckpt_pool_lend_standing(uint64_t offset, uint64_t length, bool covers) {
  return transition_pool_lend_standing(offset, length, covers);
}
int ckpt_pool_unlend(void) { return transition_pool_unlend(); }
