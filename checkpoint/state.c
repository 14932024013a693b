/* The pause/resume state machine: running -> pausing -> paused -> resuming -> running, and for a
 * group pause running -> holding -> held (gate closed, nothing saved), from which a checkpoint,
 * a drain (held again) or an unhold (running) leaves. Failures always land in a state the next
 * command can leave: a failed pause is running again, a failed resume is still paused. Every
 * transition is logged with its timing. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int current = CKPT_RUNNING;
static struct ckpt_result last;
static bool have_last;

static const char *const state_names[] = {"running", "pausing", "paused", "resuming", "held",
                                          "holding"};
static const char *const op_names[] = {"?",      "checkpoint", "resume", "hold",
                                       "drain",  "unhold",     "spill",  "unspill"};

const char *ckpt_state_name(enum ckpt_state_id state) {
  return (unsigned)state < 6 ? state_names[state] : "unknown";
}

const char *ckpt_op_name(int op) {
  return (unsigned)op < sizeof op_names / sizeof *op_names ? op_names[op] : "?";
}

/* The state `op` leaves from, or a refusal in *why. */
static int may_begin(enum ckpt_op op, int state, const char **why) {
  if (state == CKPT_PAUSING || state == CKPT_RESUMING || state == CKPT_HOLDING) {
    *why = state == CKPT_PAUSING    ? "a checkpoint is already under way"
           : state == CKPT_RESUMING ? "a resume is already under way"
                                    : "a hold, drain or unhold is under way";
    return -EBUSY;
  }
  switch (op) {
  case CKPT_OP_CHECKPOINT: /* from running, or from held (the gate is closed already) */
    *why = "already paused";
    return state == CKPT_PAUSED ? -EALREADY : 0;
  case CKPT_OP_RESUME:
    *why = "not paused";
    return state == CKPT_PAUSED ? 0 : -EALREADY;
  case CKPT_OP_HOLD:
    *why = state == CKPT_HELD ? "already held" : "paused";
    return state == CKPT_RUNNING ? 0 : -EALREADY;
  case CKPT_OP_DRAIN:
  case CKPT_OP_UNHOLD:
    *why = "not held";
    return state == CKPT_HELD ? 0 : -EALREADY;
  case CKPT_OP_SPILL:
  case CKPT_OP_UNSPILL: /* paused to paused: transition.c checks and orders them */
    break;
  }
  *why = "unknown operation";
  return -EINVAL;
}

enum ckpt_state_id ckpt_state(void) { return (enum ckpt_state_id)atomic_load(&current); }

int state_begin(enum ckpt_op op, const char **why) {
  int next = 0;
  pthread_mutex_lock(&lock);
  int state = atomic_load(&current);
  int rc = may_begin(op, state, why);
  if (rc == 0) {
    next = op == CKPT_OP_CHECKPOINT ? CKPT_PAUSING : op == CKPT_OP_RESUME ? CKPT_RESUMING
                                                                          : CKPT_HOLDING;
    atomic_store(&current, next);
  }
  pthread_mutex_unlock(&lock);
  /* Logged outside the lock: the shim's log callback may take its own locks. */
  if (rc)
    ckpt_logf(CKPT_LOG_WARN, "%s refused: %s (state %s)", ckpt_op_name(op), *why,
              state_names[state]);
  else
    ckpt_logf(CKPT_LOG_INFO, "%s: %s -> %s", ckpt_op_name(op), state_names[state],
              state_names[next]);
  return rc;
}

static void log_result(const struct ckpt_result *r, int from, int to) {
  char bytes[32];
  ckpt_format_bytes(r->bytes, bytes, sizeof bytes);
  char reserve[64] = "";
  if (r->reserve_bytes) {
    char in[32];
    ckpt_format_bytes(r->reserve_bytes, in, sizeof in);
    snprintf(reserve, sizeof reserve, ", %s straight into the reserve", in);
  }
  if (r->pool_bytes) {
    char in[32];
    ckpt_format_bytes(r->pool_bytes, in, sizeof in);
    snprintf(reserve, sizeof reserve, ", %s straight into cudawd's pool", in);
  }
  char early[64] = "";
  if (r->released_early_bytes) {
    char went[32];
    ckpt_format_bytes(r->released_early_bytes, went, sizeof went);
    snprintf(early, sizeof early, " (%s of it while saving)", went);
  }
  char live[160] = "";
  if (r->live) {
    char pre[32], re[32];
    ckpt_format_bytes(r->precopy_bytes, pre, sizeof pre);
    ckpt_format_bytes(r->recopy_bytes, re, sizeof re);
    snprintf(live, sizeof live, "; live: %s copied in %.3f s while running, %s re-copied in the "
             "pause", pre, r->precopy_seconds, re);
  }
  double rate = r->copy_seconds > 0 ? (double)r->bytes / r->copy_seconds / 1e9 : 0.0;
  if (r->op >= CKPT_OP_HOLD) {
    /* A drain that times out is an expected step of a group pause, not a problem. */
    ckpt_logf(r->error && r->op != CKPT_OP_DRAIN ? CKPT_LOG_WARN : CKPT_LOG_INFO,
              "%s: %s -> %s in %.3f ms%s%s",
              ckpt_op_name(r->op), state_names[from], state_names[to], r->total_seconds * 1e3,
              r->error ? ": " : "", r->error ? r->reason : "");
  } else if (r->error) {
    ckpt_logf(CKPT_LOG_ERROR, "%s failed: %s -> %s after %.3f s: %s", ckpt_op_name(r->op),
              state_names[from], state_names[to], r->total_seconds, r->reason);
  } else if (r->op == CKPT_OP_CHECKPOINT) {
    ckpt_logf(CKPT_LOG_INFO,
              "checkpoint: %s -> %s in %.3f s: gate closed %.3f ms after the request, drain "
              "%.3f ms, setup %.3f ms, saved %s of %llu regions in %.3f s (%.2f GB/s), "
              "release %.3f ms%s%s; stall %.3f ms%s",
              state_names[from], state_names[to], r->total_seconds, r->gate_seconds * 1e3,
              r->drain_seconds * 1e3, r->setup_seconds * 1e3, bytes,
              (unsigned long long)r->regions, r->copy_seconds, rate, r->memory_seconds * 1e3,
              early, reserve, r->stall_seconds * 1e3, live);
  } else if (r->memory_beside) {
    ckpt_logf(CKPT_LOG_INFO,
              "resume: %s -> %s in %.3f s: restored and verified %s of %llu regions in %.3f s "
              "(%.2f GB/s), memory re-created beside the copy (%.3f ms in the driver, the copy "
              "waited %.3f ms)",
              state_names[from], state_names[to], r->total_seconds, bytes,
              (unsigned long long)r->regions, r->copy_seconds, rate, r->memory_seconds * 1e3,
              r->memory_wait_seconds * 1e3);
  } else {
    ckpt_logf(CKPT_LOG_INFO,
              "resume: %s -> %s in %.3f s: recreate %.3f ms, restored and verified %s of %llu "
              "regions in %.3f s (%.2f GB/s)",
              state_names[from], state_names[to], r->total_seconds, r->memory_seconds * 1e3, bytes,
              (unsigned long long)r->regions, r->copy_seconds, rate);
  }
}

void state_finish(const struct ckpt_result *result, enum ckpt_state_id to) {
  pthread_mutex_lock(&lock);
  int from = atomic_load(&current);
  if (result->op == CKPT_OP_CHECKPOINT || result->op == CKPT_OP_RESUME) {
    last = *result; /* status's "last" stays the last checkpoint or resume, not a hold step */
    have_last = true;
  }
  atomic_store(&current, (int)to);
  pthread_mutex_unlock(&lock);
  log_result(result, from, to);
}

void state_reset(void) {
  pthread_mutex_lock(&lock);
  atomic_store(&current, CKPT_RUNNING);
  have_last = false;
  pthread_mutex_unlock(&lock);
}

void state_forget_after_fork(void) {
  pthread_mutex_init(&lock, NULL); /* a parent thread may have held it at fork */
  atomic_store(&current, CKPT_RUNNING);
  have_last = false;
}

bool state_last(struct ckpt_result *out) {
  pthread_mutex_lock(&lock);
  bool have = have_last;
  if (have) *out = last;
  pthread_mutex_unlock(&lock);
  return have;
}

int ckpt_last_result(struct ckpt_result *out) { return state_last(out) ? 0 : -ENOENT; }
