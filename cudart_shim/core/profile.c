/* The start-up profile: per phase, calls, cudaw's own time and the real libraries' time, printed
 * at exit with CUDAW_PROFILE=1 and given to cudaw-ctl status. Counting is always on (one atomic
 * add per registration-like call); the clock is read only when the profile is asked for. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "options.h"
#include "shim.h"
#include "shim_profile.h"

enum real_part {
  REAL_NONE,     /* cudaw's own work only */
  REAL_MEASURED, /* calls into a real library, timed apart */
  REAL_MIXED,    /* real calls inside, not timed apart: the whole is kept as "own" */
};

static const struct {
  const char *name;
  enum real_part real;
  int background; /* runs on cudaw's own threads, beside the program */
} phases[SHIM_PROFILE_PHASES] = {
  [SHIM_PROFILE_INIT] = {"init", REAL_NONE, 0},
  [SHIM_PROFILE_RUNTIME] = {"runtime", REAL_MEASURED, 0},
  [SHIM_PROFILE_STATIC_CHECK] = {"static_check", REAL_NONE, 0},
  [SHIM_PROFILE_CHECKPOINT] = {"checkpoint", REAL_NONE, 0},
  [SHIM_PROFILE_SCHED] = {"sched", REAL_NONE, 0},
  [SHIM_PROFILE_DRIVER] = {"driver", REAL_MEASURED, 0},
  [SHIM_PROFILE_DLOPEN] = {"dlopen", REAL_MEASURED, 0},
  [SHIM_PROFILE_ENTRY_POINT] = {"entry_points", REAL_MEASURED, 0},
  [SHIM_PROFILE_FATBIN] = {"fatbins", REAL_MEASURED, 0},
  [SHIM_PROFILE_FUNCTION] = {"functions", REAL_MEASURED, 0},
  [SHIM_PROFILE_MODULE] = {"modules", REAL_MEASURED, 0},
  [SHIM_PROFILE_VMEM] = {"vmem", REAL_MIXED, 0},
  [SHIM_PROFILE_PINNING] = {"pinning", REAL_MEASURED, 1},
  [SHIM_PROFILE_UNREGISTER] = {"unregister", REAL_MEASURED, 0},
  [SHIM_PROFILE_EXIT] = {"exit", REAL_NONE, 0},
};

static struct {
  atomic_uint_fast64_t calls, own_ns, real_ns;
} totals[SHIM_PROFILE_PHASES];

static atomic_int timed;     /* CUDAW_PROFILE=1; set once, at initialisation */
static uint64_t loaded_ns;   /* CLOCK_MONOTONIC when the library was loaded */
static uint64_t loaded_boot_ns; /* the same moment on CLOCK_BOOTTIME (process start is on it) */
/* Time of this thread's spans that ended, own and real: an enclosing span subtracts it. */
static SHIM_TLS uint64_t nested_ns;

static uint64_t clock_ns(clockid_t clock)
{
  struct timespec t;
  clock_gettime(clock, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t now(void) { return clock_ns(CLOCK_MONOTONIC); }

/* Before every other constructor of the library: "since cudaw was loaded" starts here. */
__attribute__((constructor(101))) static void note_load(void)
{
  loaded_ns = now();
  loaded_boot_ns = clock_ns(CLOCK_BOOTTIME);
}

/* A forked child (a DataLoader worker) would print its parent's profile again at its exit. */
static void forget_in_child(void) { atomic_store_explicit(&timed, 0, memory_order_relaxed); }

int shim_profile_setup(void)
{
  int on = cudaw_option_flag("CUDAW_PROFILE");
  cudaw_options_time(on);
  atomic_store_explicit(&timed, on, memory_order_relaxed);
  if (on) pthread_atfork(NULL, NULL, forget_in_child);
  return on;
}

void shim_span_begin(struct shim_span *span)
{
  span->start = 0;
  span->real_ns = 0;
  if (!atomic_load_explicit(&timed, memory_order_relaxed)) return;
  span->nested_at_start = nested_ns;
  span->start = now();
}

void shim_span_real_begin(struct shim_span *span)
{
  if (!span->start) return;
  span->nested_at_real = nested_ns;
  span->real_start = now();
}

void shim_span_real_end(struct shim_span *span)
{
  if (!span->start) return;
  uint64_t elapsed = now() - span->real_start, inner = nested_ns - span->nested_at_real;
  span->real_ns += elapsed > inner ? elapsed - inner : 0;
}

void shim_span_end(struct shim_span *span, enum shim_profile_phase phase, unsigned calls)
{
  if (calls) atomic_fetch_add_explicit(&totals[phase].calls, calls, memory_order_relaxed);
  if (!span->start) return;
  uint64_t elapsed = now() - span->start, inner = nested_ns - span->nested_at_start;
  uint64_t own = elapsed > inner + span->real_ns ? elapsed - inner - span->real_ns : 0;
  atomic_fetch_add_explicit(&totals[phase].own_ns, own, memory_order_relaxed);
  atomic_fetch_add_explicit(&totals[phase].real_ns, span->real_ns, memory_order_relaxed);
  nested_ns = span->nested_at_start + elapsed;
}

/* ---- the report --------------------------------------------------------------------------- */

/* How long the process had run when cudaw was loaded (ms; -1 if unknown): /proc/self/stat's
 * start time, in clock ticks since boot. */
static double before_load_ms(void)
{
  char stat[1024];
  int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, stat, sizeof stat - 1);
  close(fd);
  if (n <= 0) return -1;
  stat[n] = 0;
  const char *field = strrchr(stat, ')'); /* the command name may hold spaces */
  for (int i = 2; field && i < 22; i++) field = strchr(field + 1, ' ');
  long ticks = sysconf(_SC_CLK_TCK);
  if (!field || ticks <= 0) return -1;
  double started_ns = strtod(field + 1, NULL) * 1e9 / (double)ticks;
  double before = ((double)loaded_boot_ns - started_ns) / 1e6;
  return before > 0 ? before : 0;
}

struct snapshot {
  uint64_t calls, own_ns, real_ns;
};

static void snapshot(struct snapshot *out)
{
  for (int p = 0; p < SHIM_PROFILE_PHASES; p++)
    out[p] = (struct snapshot){atomic_load(&totals[p].calls), atomic_load(&totals[p].own_ns),
                               atomic_load(&totals[p].real_ns)};
}

static void report(void)
{
  struct snapshot s[SHIM_PROFILE_PHASES];
  snapshot(s);
  uint64_t own = 0, real = 0, mixed = 0, lookups, lookup_ns;
  for (int p = 0; p < SHIM_PROFILE_PHASES; p++) {
    if (phases[p].background) continue;
    if (phases[p].real == REAL_MIXED) mixed += s[p].own_ns;
    else own += s[p].own_ns, real += s[p].real_ns;
  }
  cudaw_options_stats(&lookups, &lookup_ns);
  double since_load = (double)(now() - loaded_ns) / 1e6, before = before_load_ms();
  char before_text[64] = "";
  if (before >= 0)
    snprintf(before_text, sizeof before_text, " (the process ran %.0f ms before)", before);
  shim_log_always(SHIM_LOG_INFO,
                  "start-up profile: %.3f ms since cudaw was loaded%s; on the program's threads "
                  "cudaw %.3f ms, real libraries %.3f ms, both (vmem) %.3f ms",
                  since_load, before_text, own / 1e6, real / 1e6, mixed / 1e6);
  for (int p = 0; p < SHIM_PROFILE_PHASES; p++) {
    if (!s[p].calls && p != SHIM_PROFILE_INIT) continue;
    char times[96];
    if (phases[p].real == REAL_MIXED)
      snprintf(times, sizeof times, "cudaw and real %.3f ms (not separated)", s[p].own_ns / 1e6);
    else if (phases[p].real == REAL_NONE)
      snprintf(times, sizeof times, "cudaw %.3f ms", s[p].own_ns / 1e6);
    else
      snprintf(times, sizeof times, "cudaw %.3f ms, real %.3f ms", s[p].own_ns / 1e6,
               s[p].real_ns / 1e6);
    shim_log_always(SHIM_LOG_INFO, "start-up profile: %s: %" PRIu64 " calls, %s%s", phases[p].name,
                    s[p].calls, times, phases[p].background ? " (background threads)" : "");
  }
  shim_log_always(SHIM_LOG_INFO,
                  "start-up profile: options: %" PRIu64 " lookups, %.3f ms (inside the phases "
                  "above)", lookups, lookup_ns / 1e6);
}

/* After cudaw's other destructors (the checkpoint module's stop is timed as "exit"). */
__attribute__((destructor(101))) static void report_at_exit(void)
{
  if (atomic_load_explicit(&timed, memory_order_relaxed)) report();
}

size_t shim_profile_json(char *buf, size_t len)
{
  struct snapshot s[SHIM_PROFILE_PHASES];
  snapshot(s);
  int on = atomic_load_explicit(&timed, memory_order_relaxed);
  size_t used = 0;
#define APPEND(...)                                                               \
  do {                                                                            \
    int n = used < len ? snprintf(buf + used, len - used, __VA_ARGS__) : 0;       \
    used += n > 0 ? (size_t)n : 0;                                                \
  } while (0)
  APPEND(",\"startup\":{\"timed\":%s,\"since_load_ms\":%.3f", on ? "true" : "false",
         (double)(now() - loaded_ns) / 1e6);
  for (int p = 0; p < SHIM_PROFILE_PHASES; p++) {
    if (!s[p].calls) continue;
    APPEND(",\"%s\":{\"calls\":%" PRIu64, phases[p].name, s[p].calls);
    if (on) {
      APPEND(",\"cudaw_ms\":%.3f", s[p].own_ns / 1e6);
      if (phases[p].real == REAL_MIXED) APPEND(",\"real_ms\":null");
      else APPEND(",\"real_ms\":%.3f", s[p].real_ns / 1e6);
    }
    APPEND("}");
  }
  APPEND("}");
#undef APPEND
  if (used >= len) { /* cut short: better nothing than broken JSON */
    if (len) buf[0] = 0;
    return 0;
  }
  return used;
}
