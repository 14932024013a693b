/* Logging: CUDAW_LOG=error|warn|info|debug, CUDAW_LOG_FILE. One write(2) per message so lines
 * from several threads and processes do not interleave. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "options.h"
#include "shim.h"

int shim_log_level = SHIM_LOG_WARN;
static int log_fd = 2;
static const char *const level_names[] = {"error", "warn", "info", "debug"};

void shim_log_open(void)
{
  const char *level = cudaw_option("CUDAW_LOG");
  for (int i = SHIM_LOG_ERROR; i <= SHIM_LOG_DEBUG; i++) /* validated: one of them */
    if (strcmp(level, level_names[i]) == 0) shim_log_level = i;
  const char *file = cudaw_option("CUDAW_LOG_FILE");
  if (*file) {
    int fd = open(file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0)
      log_fd = fd;
    else
      shim_warn("cannot open CUDAW_LOG_FILE=%s: %s; logging to standard error", file,
                strerror(errno));
  }
}

static void write_line(enum shim_log_level level, const char *fmt, va_list ap)
{
  char line[1024];
  int n = snprintf(line, sizeof line, "cudaw[%d]: %s: ", (int)getpid(), level_names[level]);
  if (n < 0) return;
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  if (m < 0) return;
  size_t len = (size_t)n + (size_t)m;
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  ssize_t ignored = write(log_fd, line, len);
  (void)ignored;
}

void shim_logv(enum shim_log_level level, const char *fmt, va_list ap)
{
  if ((int)level <= shim_log_level) write_line(level, fmt, ap);
}

void shim_log_always(enum shim_log_level level, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  write_line(level, fmt, ap);
  va_end(ap);
}

void shim_log(enum shim_log_level level, const char *fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  shim_logv(level, fmt, ap);
  va_end(ap);
}
