/* Suspend mode (CUDAW_SUSPEND=release): give the GPU back while a batch system holds the job
 * stopped. Slurm suspends a step with SIGTSTP, about 2 s later SIGSTOP, and resumes it with
 * SIGCONT. On SIGTSTP the program is checkpointed (device memory to the host image, then
 * released); on SIGCONT it is restored, and its API calls wait at the gate until then. The
 * handlers (signal.c) only write the event to a pipe; this file runs on the control thread and,
 * for what follows a transition, on the transition thread (done callbacks).
 * A terminal's Ctrl-Z is followed by no SIGSTOP: there the process stops itself once the release
 * is done, as SIGTSTP's default action would have (and the shell's `fg` sends SIGCONT). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Slurm 22.05's slurmstepd stops a suspended step about this long after its SIGTSTP: a release
 * that takes longer leaves the job stopped while it still holds part of its device memory. */
#define STOP_GRACE_SECONDS 2.0

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int event_pipe[2] = {-1, -1};
static bool paused_by_us;  /* our checkpoint is under way or done, and no resume followed */
static bool in_flight;     /* our checkpoint is under way */
static bool resume_wanted; /* SIGCONT came while our checkpoint was under way */
static bool stop_when_released; /* the SIGTSTP came from a terminal and no SIGCONT followed yet */
static bool want_running;  /* the last of SIGTSTP and SIGCONT was SIGCONT */
static double suspended_at, continued_at;
static double short_since, short_logged_at; /* restores refused for lack of device memory */

/* A restore after SIGCONT that finds the device full is tried again this often: under gang
 * scheduling or suspend preemption Slurm continues one job and suspends another at the same
 * moment, and the other's release takes a while (up to its 2 s before SIGSTOP). */
#define SHORT_RETRY_NS 100000000L
#define SHORT_LOG_SECONDS 30.0

int suspend_event_fd(void) { return event_pipe[0]; }

static void submit_resume(void);

static void resume_done(void *arg, const struct ckpt_result *result) {
  (void)arg;
  pthread_mutex_lock(&lock);
  double now = ckpt_now(), since = now - continued_at, waited = short_since ? now - short_since : 0;
  if (result->error && (result->shortfall || result->error == -ENOMEM) && want_running &&
      !paused_by_us) {
    /* Still paused, as ours: wait for the memory, unless a SIGTSTP or another SIGCONT (which
     * resumes itself) comes first. */
    paused_by_us = true;
    if (!short_since) short_since = now;
    if (!short_logged_at || now - short_logged_at >= SHORT_LOG_SECONDS) {
      short_logged_at = now;
      ckpt_logf(CKPT_LOG_WARN, "suspend: restoring after SIGCONT: %s; another job on the device "
                "may still be releasing its memory: trying again every %.1f s", result->reason,
                SHORT_RETRY_NS / 1e9);
    }
    pthread_mutex_unlock(&lock);
    nanosleep(&(struct timespec){0, SHORT_RETRY_NS}, NULL);
    pthread_mutex_lock(&lock);
    if (paused_by_us && want_running && !in_flight) submit_resume();
    pthread_mutex_unlock(&lock);
    return;
  }
  short_since = short_logged_at = 0;
  pthread_mutex_unlock(&lock);
  char bytes[32];
  ckpt_format_bytes(result->bytes, bytes, sizeof bytes);
  if (!result->error && waited > 0)
    ckpt_logf(CKPT_LOG_INFO, "suspend: %s restored, running again %.3f s after SIGCONT (%.3f s "
              "of it waiting for device memory)", bytes, since, waited);
  else if (result->error)
    ckpt_logf(CKPT_LOG_ERROR,
              "suspend: restoring device memory after SIGCONT failed: %s; the program stays "
              "paused (cudaw-ctl resume %ld retries)", result->reason, (long)getpid());
  else
    ckpt_logf(CKPT_LOG_INFO, "suspend: %s restored, running again %.3f s after SIGCONT", bytes,
              since);
}

/* Called with lock held. */
static void submit_resume(void) {
  const char *why = "";
  paused_by_us = false;
  if (transition_submit(CKPT_OP_RESUME, ckpt_now(), resume_done, NULL, &why) != 0)
    ckpt_logf(CKPT_LOG_ERROR, "suspend: cannot resume after SIGCONT: %s", why);
}

static void checkpoint_done(void *arg, const struct ckpt_result *result) {
  (void)arg;
  pthread_mutex_lock(&lock);
  in_flight = false;
  double took = ckpt_now() - suspended_at;
  char bytes[32];
  ckpt_format_bytes(result->bytes, bytes, sizeof bytes);
  if (result->error) {
    paused_by_us = false;
    ckpt_logf(CKPT_LOG_WARN,
              "suspend: releasing device memory failed: %s; the job is suspended holding it",
              result->reason);
  } else if (resume_wanted) {
    ckpt_logf(CKPT_LOG_WARN,
              "suspend: the release took %.3f s after SIGTSTP and the job was continued before it "
              "finished: it was stopped holding device memory; restoring %s now", took, bytes);
  } else if (took > STOP_GRACE_SECONDS) {
    ckpt_logf(CKPT_LOG_WARN,
              "suspend: %s released %.3f s after SIGTSTP, later than the stop (about %.0f s after "
              "it under Slurm): the job held device memory for the first part of its suspension",
              bytes, took, STOP_GRACE_SECONDS);
  } else {
    ckpt_logf(CKPT_LOG_INFO, "suspend: %s released %.3f s after SIGTSTP", bytes, took);
  }
  if (resume_wanted) {
    resume_wanted = false;
    if (paused_by_us) submit_resume();
  }
  bool stop_now = stop_when_released;
  stop_when_released = false;
  pthread_mutex_unlock(&lock);
  if (stop_now) kill(getpid(), SIGSTOP); /* released or not: Ctrl-Z must stop the program */
}

static void on_stop_request(double at, bool from_terminal) {
  pthread_mutex_lock(&lock);
  want_running = false;
  if (paused_by_us) { /* a second SIGTSTP before the SIGCONT */
    bool stop_now = from_terminal && !in_flight;
    if (from_terminal && in_flight) stop_when_released = true;
    pthread_mutex_unlock(&lock);
    if (stop_now) kill(getpid(), SIGSTOP);
    return;
  }
  const char *why = "";
  int rc = transition_submit(CKPT_OP_CHECKPOINT, at, checkpoint_done, NULL, &why);
  if (rc == 0) {
    paused_by_us = in_flight = true;
    resume_wanted = false;
    stop_when_released = from_terminal;
    suspended_at = at;
    ckpt_logf(CKPT_LOG_INFO, "suspend: SIGTSTP: releasing device memory before the stop");
  } else if (rc == -EALREADY) {
    ckpt_logf(CKPT_LOG_INFO, "suspend: SIGTSTP while paused: device memory already released");
  } else {
    ckpt_logf(CKPT_LOG_WARN, "suspend: SIGTSTP: cannot release device memory (%s); the job is "
              "suspended holding it", why);
  }
  pthread_mutex_unlock(&lock);
  if (rc != 0 && from_terminal) kill(getpid(), SIGSTOP);
}

static void on_continue(double at) {
  pthread_mutex_lock(&lock);
  continued_at = at;
  want_running = true;
  stop_when_released = false;
  if (!paused_by_us) {
    /* A pause someone else asked for (cudaw-ctl, cudawd) is theirs to end. */
  } else if (in_flight) {
    resume_wanted = true;
  } else {
    ckpt_logf(CKPT_LOG_INFO, "suspend: SIGCONT: restoring device memory");
    submit_resume();
  }
  pthread_mutex_unlock(&lock);
}

void suspend_on_events(void) {
  struct suspend_event events[16];
  ssize_t n;
  while ((n = read(event_pipe[0], events, sizeof events)) > 0) {
    for (size_t i = 0; i < (size_t)n / sizeof events[0]; i++) {
      double at = (double)events[i].monotonic_ns * 1e-9;
      if (events[i].signal_number == SIGTSTP) on_stop_request(at, events[i].from_terminal != 0);
      else on_continue(at);
    }
  }
}

int suspend_start(void) {
  if (pipe2(event_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -errno;
  int rc = signal_install_suspend(event_pipe[1]);
  if (rc) {
    suspend_stop();
    return rc;
  }
  paused_by_us = in_flight = resume_wanted = stop_when_released = want_running = false;
  short_since = short_logged_at = 0;
  return 0;
}

void suspend_stop(void) {
  signal_restore_suspend();
  for (int i = 0; i < 2; i++) {
    if (event_pipe[i] >= 0) close(event_pipe[i]);
    event_pipe[i] = -1;
  }
}

void suspend_forget_after_fork(void) {
  pthread_mutex_init(&lock, NULL);
  suspend_stop();
}
