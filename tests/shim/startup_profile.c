/* Description: the start-up profile (CUDAW_PROFILE=1). A child process loads cudaw (argv[1]) on
 * the emulated device, registers N fatbins of K kernels each, asks for a driver entry point,
 * opens a library through cudaw's dlopen, allocates (vmem starts), reads its own status from the
 * control socket, unregisters the fatbins in reverse order as nvcc's exit handlers do, and exits.
 * The parent checks the profile lines cudaw printed at exit: exact counts per phase, times that
 * fit inside the wall time and inside the child's own timing of its registrations, the status
 * JSON; and, without CUDAW_PROFILE, no profile lines but counts in status.
 * `startup_profile <cudaw> bench N K [fifo]` prints the figures of one large run instead (no
 * checks); fifo unregisters in the order registered, the worst order for cudaw's lookups. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "e2e_common.h"
#include "test.h"

typedef void **(*register_fatbin_fn)(void *);
typedef void (*register_function_fn)(void **, const char *, char *, const char *, int, void *,
                                     void *, void *, void *, int *);
typedef void (*unregister_fn)(void **);
typedef int (*malloc_fn)(void **, size_t);
typedef int (*entry_point_fn)(const char *, void **, unsigned, unsigned long long, int *);
typedef void *(*dlopen_fn)(const char *, int);

struct wrapper {
  uint32_t magic, version;
  const void *data, *extra;
};

static double now_ms(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void *symbol(void *library, const char *name)
{
  void *sym = dlsym(library, name);
  CHECK(sym, "%s: %s", name, dlerror());
  return sym;
}

/* The child: everything cudaw should count. Writes the ms its registrations took to timing_fd,
 * then the status reply. */
static void child(const char *cudaw_path, int fatbins, int kernels, int fifo, int timing_fd)
{
  void *cudaw = dlopen(cudaw_path, RTLD_NOW | RTLD_LOCAL);
  CHECK(cudaw, "%s", dlerror());
  register_fatbin_fn register_fatbin = (register_fatbin_fn)symbol(cudaw, "__cudaRegisterFatBinary");
  register_function_fn register_function =
      (register_function_fn)symbol(cudaw, "__cudaRegisterFunction");
  unregister_fn unregister = (unregister_fn)symbol(cudaw, "__cudaUnregisterFatBinary");
  malloc_fn device_malloc = (malloc_fn)symbol(cudaw, "cudaMalloc");
  entry_point_fn entry_point = (entry_point_fn)symbol(cudaw, "cudaGetDriverEntryPointByVersion");
  dlopen_fn cudaw_dlopen = (dlopen_fn)symbol(cudaw, "dlopen");

  static const unsigned char container[16] = {0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0};
  struct wrapper *wrappers = calloc((size_t)fatbins, sizeof *wrappers);
  void ***handles = calloc((size_t)fatbins, sizeof *handles);
  char *host_funs = malloc((size_t)fatbins * (size_t)kernels); /* one distinct address each */
  char (*names)[40] = malloc((size_t)fatbins * (size_t)kernels * sizeof *names);
  CHECK(wrappers && handles && host_funs && names);
  for (int i = 0; i < fatbins * kernels; i++)
    snprintf(names[i], sizeof names[i], "_Z6kernelILi%dEEvPf", i);

  double start = now_ms();
  for (int f = 0; f < fatbins; f++) {
    wrappers[f] = (struct wrapper){0x466243B1, 1, container, NULL};
    handles[f] = register_fatbin(&wrappers[f]);
    CHECK(handles[f]);
    for (int k = 0; k < kernels; k++) {
      int i = f * kernels + k;
      register_function(handles[f], host_funs + i, names[i], names[i], -1, 0, 0, 0, 0, 0);
    }
  }
  double registered = now_ms() - start;

  void *function = NULL;
  int status = 0;
  entry_point("cuMemAlloc", &function, 12000, 0, &status); /* counted whatever it answers */
  void *libm = cudaw_dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
  CHECK(libm, "dlopen(libm.so.6) through cudaw: %s", dlerror());
  void *device = NULL;
  CHECK_EQ(device_malloc(&device, 1 << 20), 0);

  char reply[8192];
  CHECK_EQ(e2e_ask_raw("status\n", 7, reply, sizeof reply), 0);

  start = now_ms();
  for (int i = 0; i < fatbins; i++) unregister(handles[fifo ? i : fatbins - 1 - i]);
  double unregistered = now_ms() - start;
  /* Unregistered: cudaw holds none of them any more (LeakSanitizer checks the exit). */
  free(names);
  free(host_funs);
  free(handles);
  free(wrappers);
  dprintf(timing_fd, "%.6f %.6f\n%s", registered, unregistered, reply);
  close(timing_fd);
  exit(0); /* cudaw's destructors print the profile */
}

struct run {
  double registered_ms, unregistered_ms;
  char status[8192];
  char log[65536];
};

static void run_child(const char *cudaw_path, int fatbins, int kernels, int profile, int fifo,
                      const char *dir, struct run *out)
{
  char log_path[512];
  snprintf(log_path, sizeof log_path, "%s/cudaw.log", dir);
  unlink(log_path);
  int timing[2];
  CHECK(pipe(timing) == 0);
  fflush(stdout); /* the child exits through exit(): nothing of ours to print twice */
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    close(timing[0]);
    setenv("CUDAW_PROFILE", profile ? "1" : "0", 1);
    setenv("CUDAW_LOG_FILE", log_path, 1);
    setenv("CUDAW_RUN_DIR", dir, 1);
    setenv("CUDAW_CKPT_PIN_EARLY", "0", 1);
    child(cudaw_path, fatbins, kernels, fifo, timing[1]);
  }
  close(timing[1]);
  FILE *in = fdopen(timing[0], "r");
  CHECK(in);
  int got = fscanf(in, "%lf %lf\n", &out->registered_ms, &out->unregistered_ms);
  size_t n = fread(out->status, 1, sizeof out->status - 1, in);
  out->status[n] = 0;
  fclose(in);
  int wstatus = 0;
  CHECK(waitpid(pid, &wstatus, 0) == pid);
  CHECK(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0, "the child failed (status %#x)", wstatus);
  CHECK_EQ(got, 2);
  FILE *log = fopen(log_path, "r");
  n = log ? fread(out->log, 1, sizeof out->log - 1, log) : 0;
  out->log[n] = 0;
  if (log) fclose(log);
}

struct row {
  int found;
  unsigned long calls;
  double cudaw_ms, real_ms; /* real_ms -1: not printed */
};

/* The profile line of `phase`, as "start-up profile: <phase>: N calls, cudaw X ms[, real Y ms]". */
static struct row row_of(const char *log, const char *phase)
{
  struct row row = {0, 0, 0, -1};
  char key[64];
  snprintf(key, sizeof key, "start-up profile: %s: ", phase);
  const char *at = strstr(log, key);
  if (!at) return row;
  at += strlen(key);
  int n = sscanf(at, "%lu calls, cudaw %lf ms, real %lf ms", &row.calls, &row.cudaw_ms,
                 &row.real_ms);
  if (n == 1) /* "cudaw and real X ms (not separated)" */
    n = 1 + sscanf(at, "%*u calls, cudaw and real %lf ms", &row.cudaw_ms);
  row.found = n >= 2;
  if (n < 3) row.real_ms = -1;
  return row;
}

static void expect_row(const char *log, const char *phase, unsigned long calls, int with_real)
{
  struct row row = row_of(log, phase);
  CHECK(row.found, "no profile line for %s in:\n%s", phase, log);
  CHECK(row.calls == calls, "%s: %lu calls, expected %lu", phase, row.calls, calls);
  CHECK(row.cudaw_ms >= 0, "%s: cudaw %.3f ms", phase, row.cudaw_ms);
  CHECK(with_real ? row.real_ms >= 0 : row.real_ms == -1, "%s: real %.3f ms", phase, row.real_ms);
}

/* "\"<phase>\":{\"calls\":N" in the status reply. */
static void expect_status_calls(const char *status, const char *phase, unsigned long calls)
{
  char want[96];
  snprintf(want, sizeof want, "\"%s\":{\"calls\":%lu", phase, calls);
  CHECK(strstr(status, want), "status lacks %s:\n%s", want, status);
}

static void check(const char *cudaw_path, const char *dir)
{
  enum { FATBINS = 300, KERNELS = 7 };
  struct run *run = calloc(1, sizeof *run);
  CHECK(run);
  run_child(cudaw_path, FATBINS, KERNELS, 1, 0, dir, run);
  const char *log = run->log;
  double since_load = 0, own = 0, real = 0, both = 0;
  const char *summary = strstr(log, "start-up profile: ");
  CHECK(summary &&
            sscanf(summary, "start-up profile: %lf ms since cudaw was loaded", &since_load) == 1,
        "no summary line in:\n%s", log);
  const char *threads = strstr(summary, "on the program's threads");
  CHECK(threads && sscanf(threads, "on the program's threads cudaw %lf ms, real libraries %lf ms, "
                          "both (vmem) %lf ms", &own, &real, &both) == 3, "summary: %s", summary);

  expect_row(log, "init", 1, 0);
  expect_row(log, "runtime", 1, 1);
  expect_row(log, "static_check", 1, 0);
  expect_row(log, "checkpoint", 1, 0);
  expect_row(log, "fatbins", FATBINS, 1);
  expect_row(log, "functions", FATBINS * KERNELS, 1);
  expect_row(log, "unregister", FATBINS, 1);
  expect_row(log, "entry_points", 1, 1);
  expect_row(log, "dlopen", 1, 1);
  expect_row(log, "exit", 1, 0);
  expect_row(log, "vmem", 1, 0); /* "cudaw and real": not separated */
  CHECK(strstr(log, "start-up profile: vmem: 1 calls, cudaw and real"), "vmem row:\n%s", log);
  CHECK(!row_of(log, "pinning").found, "CUDAW_CKPT_PIN_EARLY=0 pinned staging:\n%s", log);

  /* Each nanosecond is attributed once: the rows add up to the summary, within the wall time. */
  const char *phases[] = {"init", "runtime", "static_check", "checkpoint", "sched", "driver",
                          "dlopen", "entry_points", "fatbins", "functions", "modules",
                          "unregister", "exit"};
  double rows = 0;
  for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
    struct row row = row_of(log, phases[i]);
    if (row.found) rows += row.cudaw_ms + (row.real_ms > 0 ? row.real_ms : 0);
  }
  CHECK(rows > 0 && rows <= own + real + 0.02 && rows >= own + real - 0.02,
        "rows add up to %.3f ms, the summary says %.3f + %.3f", rows, own, real);
  CHECK(own + real + both <= since_load, "%.3f + %.3f + %.3f ms inside cudaw, %.3f ms wall",
        own, real, both, since_load);
  /* The child timed its registration loop: the two rows happened inside it. */
  struct row fatbins = row_of(log, "fatbins"), functions = row_of(log, "functions");
  double registration = fatbins.cudaw_ms + fatbins.real_ms + functions.cudaw_ms + functions.real_ms;
  CHECK(registration > 0 && registration <= run->registered_ms + 0.01,
        "registration rows %.3f ms, the loop took %.3f ms", registration, run->registered_ms);
  struct row unregister = row_of(log, "unregister");
  CHECK(unregister.cudaw_ms + unregister.real_ms <= run->unregistered_ms + 0.01,
        "unregister rows %.3f + %.3f ms, the loop took %.3f ms", unregister.cudaw_ms,
        unregister.real_ms, run->unregistered_ms);

  /* Status, asked before the unregistrations. */
  CHECK(strstr(run->status, "\"startup\":{\"timed\":true"), "status: %s", run->status);
  expect_status_calls(run->status, "fatbins", FATBINS);
  expect_status_calls(run->status, "functions", FATBINS * KERNELS);
  CHECK(strstr(run->status, "\"vmem\":{\"calls\":1,\"cudaw_ms\":") &&
        strstr(run->status, "\"real_ms\":null"), "status: %s", run->status);
  printf("profiled: %lu fatbins, %lu functions; registration %.3f ms (cudaw %.3f ms), "
         "unregistration %.3f ms (cudaw %.3f ms), wall %.3f ms\n", fatbins.calls, functions.calls,
         run->registered_ms, fatbins.cudaw_ms + functions.cudaw_ms, run->unregistered_ms,
         unregister.cudaw_ms, since_load);

  /* Without CUDAW_PROFILE: no lines, no times, but the counts. */
  run_child(cudaw_path, 5, 2, 0, 0, dir, run);
  CHECK(!strstr(run->log, "start-up profile"), "profile printed without CUDAW_PROFILE:\n%s",
        run->log);
  CHECK(strstr(run->status, "\"startup\":{\"timed\":false"), "status: %s", run->status);
  expect_status_calls(run->status, "fatbins", 5);
  expect_status_calls(run->status, "functions", 10);
  CHECK(!strstr(run->status, "cudaw_ms"), "untimed status has times: %s", run->status);
  free(run);
  printf("startup profile: ok\n");
}

static void bench(const char *cudaw_path, const char *dir, int fatbins, int kernels, int fifo)
{
  struct run *run = calloc(1, sizeof *run);
  CHECK(run);
  run_child(cudaw_path, fatbins, kernels, 1, fifo, dir, run);
  printf("%d fatbins x %d kernels: registration %.3f ms, unregistration (%s) %.3f ms "
         "(the program's clock)\n", fatbins, kernels, run->registered_ms,
         fifo ? "same order" : "reverse order", run->unregistered_ms);
  for (const char *line = strstr(run->log, "start-up profile"); line;
       line = strstr(line + 1, "start-up profile")) {
    const char *end = strchr(line, '\n');
    printf("  %.*s\n", end ? (int)(end - line) : (int)strlen(line), line);
  }
  free(run);
}

int main(int argc, char **argv)
{
  CHECK(argc == 2 || ((argc == 5 || argc == 6) && strcmp(argv[2], "bench") == 0),
        "usage: startup_profile <cudaw> [bench <fatbins> <kernels> [fifo]]");
  CHECK(getenv("CUDAW_REAL_CUDART"), "CUDAW_REAL_CUDART must name the emulated device");
  char dir[] = "/tmp/cudaw-startup-XXXXXX";
  CHECK(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
  if (argc == 2) check(argv[1], dir);
  else
    bench(argv[1], dir, atoi(argv[3]), atoi(argv[4]), argc == 6 && strcmp(argv[5], "fifo") == 0);
  char path[600];
  snprintf(path, sizeof path, "%s/cudaw.log", dir);
  unlink(path);
  rmdir(dir);
  return 0;
}
