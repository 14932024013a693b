/* The checkpoint signal (CUDAW_SIGNAL, default SIGUSR1). The handler only stamps the time and
 * writes it to a non-blocking pipe (8 bytes, atomic for a pipe); the control thread does the
 * work. No CUDA call, allocation or lock here.
 *
 * Chaining: a handler the program installed before us is called after ours, so the program
 * keeps its own behaviour; SIG_DFL (terminate) and SIG_IGN are not chained. A handler the
 * program installs after us replaces ours: then only the socket works (the shim may intercept
 * sigaction to prevent that).
 *
 * Termination: a program killed by SIGTERM, SIGINT, SIGHUP or SIGQUIT with their default action
 * runs no atexit handler, so its control socket would stay behind. Where the program left such a
 * signal at SIG_DFL, a handler unlinks the socket (async-signal-safe), restores SIG_DFL and
 * raises the signal again: the program still dies of it. SIGKILL cannot be caught; its socket is
 * removed by the next cudaw process or `cudaw-ctl list` in the same run dir. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

static int notify_fd = -1;
static int installed_signal;
static struct sigaction previous;

static void on_signal(int signal_number, siginfo_t *info, void *ucontext) {
  int saved_errno = errno;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  if (notify_fd >= 0) {
    ssize_t n = write(notify_fd, &ns, sizeof ns); /* full pipe: a request is already queued */
    (void)n;
  }
  errno = saved_errno;
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction) previous.sa_sigaction(signal_number, info, ucontext);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(signal_number);
  }
}

static const int termination_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
#define TERMINATION_COUNT (sizeof termination_signals / sizeof termination_signals[0])
static bool cleanup_installed[TERMINATION_COUNT];
static char cleanup_path[108];
static pid_t cleanup_owner;

static void on_termination(int signal_number) {
  int saved_errno = errno;
  if (cleanup_path[0] && getpid() == cleanup_owner) unlink(cleanup_path);
  signal(signal_number, SIG_DFL);
  errno = saved_errno;
  raise(signal_number); /* delivered when this handler returns: the default action */
}

void signal_install_cleanup(const char *socket_path) {
  if (!socket_path || strlen(socket_path) >= sizeof cleanup_path) return;
  memcpy(cleanup_path, socket_path, strlen(socket_path) + 1);
  cleanup_owner = getpid();
  for (size_t i = 0; i < TERMINATION_COUNT; i++) {
    struct sigaction current;
    if (sigaction(termination_signals[i], NULL, &current) != 0) continue;
    if ((current.sa_flags & SA_SIGINFO) || current.sa_handler != SIG_DFL) continue;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_termination;
    sigemptyset(&action.sa_mask);
    cleanup_installed[i] = sigaction(termination_signals[i], &action, NULL) == 0;
  }
}

void signal_remove_cleanup(void) {
  for (size_t i = 0; i < TERMINATION_COUNT; i++) {
    if (!cleanup_installed[i]) continue;
    cleanup_installed[i] = false;
    struct sigaction current;
    /* Only our own handler goes back to SIG_DFL; one the program installed since stays. */
    if (sigaction(termination_signals[i], NULL, &current) == 0 &&
        !(current.sa_flags & SA_SIGINFO) && current.sa_handler == on_termination)
      signal(termination_signals[i], SIG_DFL);
  }
  cleanup_path[0] = '\0';
}

int signal_install(int signal_number, int fd) {
  if (signal_number == 0) return 0;
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = on_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  notify_fd = fd;
  if (sigaction(signal_number, &action, &previous) != 0) {
    notify_fd = -1;
    return -errno;
  }
  installed_signal = signal_number;
  return 0;
}

void signal_restore(void) {
  if (!installed_signal) return;
  sigaction(installed_signal, &previous, NULL);
  installed_signal = 0;
  notify_fd = -1;
}

/* Suspend mode (CUDAW_SUSPEND=release; suspend.c does the work): SIGTSTP and SIGCONT each write
 * one event record to suspend.c's pipe. SIGTSTP's default action (stop) is not chained: the job
 * keeps running until the SIGSTOP that Slurm sends after it, so the release can run meanwhile
 * (suspend.c stops the process itself after a terminal's Ctrl-Z). A handler the program
 * installed itself is still called. */
static const int suspend_signals[] = {SIGTSTP, SIGCONT};
static struct sigaction suspend_previous[2];
static bool suspend_installed[2];
static int suspend_fd = -1;

static void on_suspend_signal(int signal_number, siginfo_t *info, void *ucontext) {
  int saved_errno = errno;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  /* The terminal's Ctrl-Z comes from the kernel; Slurm's SIGTSTP from slurmstepd's kill(). */
  struct suspend_event event = {(uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
                                (uint32_t)signal_number, info && info->si_code == SI_KERNEL};
  if (suspend_fd >= 0) {
    ssize_t n = write(suspend_fd, &event, sizeof event); /* < PIPE_BUF: atomic */
    (void)n;
  }
  errno = saved_errno;
  const struct sigaction *previous_action = &suspend_previous[signal_number == SIGCONT];
  if (previous_action->sa_flags & SA_SIGINFO) {
    if (previous_action->sa_sigaction) previous_action->sa_sigaction(signal_number, info, ucontext);
  } else if (previous_action->sa_handler != SIG_DFL && previous_action->sa_handler != SIG_IGN) {
    previous_action->sa_handler(signal_number);
  }
}

int signal_install_suspend(int fd) {
  suspend_fd = fd;
  for (int i = 0; i < 2; i++) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_suspend_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (sigaction(suspend_signals[i], &action, &suspend_previous[i]) != 0) {
      int rc = -errno;
      signal_restore_suspend();
      return rc;
    }
    suspend_installed[i] = true;
  }
  return 0;
}

void signal_restore_suspend(void) {
  for (int i = 0; i < 2; i++) {
    if (!suspend_installed[i]) continue;
    sigaction(suspend_signals[i], &suspend_previous[i], NULL);
    suspend_installed[i] = false;
  }
  suspend_fd = -1;
}
