/* The checkpoint signal (CUDAW_SIGNAL, default SIGUSR1). The handler only stamps the time and
 * writes it to a non-blocking pipe (8 bytes, atomic for a pipe); the control thread does the
 * work. No CUDA call, allocation or lock here.
 *
 * Chaining: a handler the program installed before us is called after ours, so the program
 * keeps its own behaviour; SIG_DFL (terminate) and SIG_IGN are not chained. A handler the
 * program installs after us replaces ours: then only the socket works (the shim may intercept
 * sigaction to prevent that). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
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
