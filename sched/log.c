/* cudawd's log, kept bounded against peers that misbehave on purpose: the lines any peer can
 * cause (connections refused or closed, malformed or out-of-turn messages, joins and leaves)
 * are printed at most a few times per line of the code and window, then summed up once
 * ("77000 connections refused in 10 s"); and a log that is a file is rotated once it outgrows
 * its cap. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"

#define WINDOW_SECONDS 10.0
#define LINES_PER_WINDOW 5
#define CAP_CHECK_SECONDS 1.0

static const char *const noise_names[SCHED_NOISE_KINDS] = {
  [SCHED_NOISE_REFUSED] = "connections refused",
  [SCHED_NOISE_CLOSED] = "connections closed by cudawd",
  [SCHED_NOISE_PROTOCOL] = "messages that broke the protocol",
  [SCHED_NOISE_IGNORED] = "messages ignored",
  [SCHED_NOISE_JOINED] = "programs joined",
  [SCHED_NOISE_LEFT] = "programs left",
};

/* One line of the code that a peer can make cudawd log (its format, or a key of its own where one
 * format says several things): each has its own budget, so that a flood of one kind does not
 * hide the first few of another. */
struct site {
  const char *key;
  enum sched_noise kind;
  double window_start;
  unsigned long long in_window;
};

#define MAX_SITES 48

static struct {
  struct site site[MAX_SITES];
  int sites;
  uint64_t cap;
  double cap_checked_at;
} noise;

static struct site *site_of(enum sched_noise kind, const char *key)
{
  for (int i = 0; i < noise.sites; i++)
    if (noise.site[i].key == key) return &noise.site[i];
  if (noise.sites == MAX_SITES) return &noise.site[MAX_SITES - 1]; /* never reached: sites are
                                                                      * the calls in the code */
  noise.site[noise.sites] = (struct site){.key = key, .kind = kind};
  return &noise.site[noise.sites++];
}

static void noisy(enum sched_noise kind, const char *key, const char *format, va_list args)
{
  if ((unsigned)kind >= SCHED_NOISE_KINDS) return;
  struct site *site = site_of(kind, key);
  double now = sched_now();
  if (site->in_window == 0) site->window_start = now;
  if (++site->in_window > LINES_PER_WINDOW) return;
  vfprintf(stderr, format, args);
  if (site->in_window == LINES_PER_WINDOW)
    fprintf(stderr, "cudawd: (more such lines in the next %.0f s are counted, not logged)\n",
            WINDOW_SECONDS);
}

void sched_log_noisy(enum sched_noise kind, const char *format, ...)
{
  va_list args;
  va_start(args, format);
  noisy(kind, format, format, args);
  va_end(args);
}

void sched_log_noisy_as(enum sched_noise kind, const char *key, const char *format, ...)
{
  va_list args;
  va_start(args, format);
  noisy(kind, key, format, args);
  va_end(args);
}

/* The log file behind standard error, renamed to <name>.1 and opened anew; nothing when
 * standard error is not a regular file (a terminal, a pipe, journald). */
static void rotate(void)
{
  char path[4096];
  ssize_t n = readlink("/proc/self/fd/2", path, sizeof path - 3);
  if (n <= 0 || path[0] != '/') return;
  path[n] = '\0';
  char old[sizeof path + 4];
  snprintf(old, sizeof old, "%s.1", path);
  if (rename(path, old) != 0) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  dup2(fd, STDERR_FILENO);
  close(fd);
  fprintf(stderr, "cudawd: log reached %llu bytes: the earlier part is in %s\n",
          (unsigned long long)noise.cap, old);
}

void sched_log_set_cap(uint64_t bytes) { noise.cap = bytes; }

void sched_log_tick(void)
{
  double now = sched_now();
  for (int i = 0; i < noise.sites; i++) {
    struct site *site = &noise.site[i];
    if (!site->in_window || now - site->window_start < WINDOW_SECONDS) continue;
    if (site->in_window > LINES_PER_WINDOW)
      fprintf(stderr, "cudawd: %llu %s in %.0f s (%llu not logged one by one)\n",
              site->in_window, noise_names[site->kind], now - site->window_start,
              site->in_window - LINES_PER_WINDOW);
    site->in_window = 0;
  }
  if (!noise.cap || now - noise.cap_checked_at < CAP_CHECK_SECONDS) return;
  noise.cap_checked_at = now;
  struct stat st;
  if (fstat(STDERR_FILENO, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > noise.cap)
    rotate();
}
