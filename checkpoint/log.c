/* Logging, clocks and the host's memory figures for the checkpoint module: every message goes
 * through the shim's log callback when it set one, else to stderr, one line each. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

void ckpt_logf(int level, const char *format, ...) {
  char line[512];
  va_list args;
  va_start(args, format);
  vsnprintf(line, sizeof line, format, args);
  va_end(args);
  if (ckpt_rt.ops && ckpt_rt.ops->log) {
    ckpt_rt.ops->log(ckpt_rt.ctx, level, line);
    return;
  }
  static const char *const names[] = {"error", "warning", "info", "debug"};
  const char *name = level >= 0 && level <= CKPT_LOG_DEBUG ? names[level] : "?";
  fprintf(stderr, "cudaw checkpoint %s: %s\n", name, line);
}

double ckpt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ckpt_format_bytes(uint64_t bytes, char *buf, size_t len) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = (double)bytes;
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    unit++;
  }
  if (unit == 0)
    snprintf(buf, len, "%llu B", (unsigned long long)bytes);
  else
    snprintf(buf, len, "%.2f %s", value, units[unit]);
}

uint64_t ckpt_meminfo(const char *key) {
  return ckpt_meminfo_at(secure_getenv("CUDAW_TEST_MEMINFO"), key);
}

uint64_t ckpt_meminfo_at(const char *path, const char *key) {
  FILE *f = fopen(path && *path ? path : "/proc/meminfo", "re");
  if (!f) return UINT64_MAX;
  char line[128], name[64];
  unsigned long long kib;
  uint64_t result = UINT64_MAX;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%63[^:]: %llu kB", name, &kib) == 2 && strcmp(name, key) == 0) {
      result = (uint64_t)kib << 10;
      break;
    }
  fclose(f);
  return result;
}
