/* The checkpoint module's CUDAW_* options: one table (name, default, meaning) that the shim
 * merges into its own, and the one place that reads them from the environment. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "internal.h"
#include "vmem.h"

#define DEFAULT_PAUSE_TIMEOUT_MS 10000u
#define DEFAULT_STAGING_BYTES (4ull << 20)
#define MAX_DEFAULT_THREADS 12u

/* The reserve's threads: faulting fresh huge pages in scales with threads up to the memory's
 * bandwidth (8 on the H100 machine, docs/performance.md); half the CPUs leaves the program the
 * rest while it grows. */
static uint32_t default_reserve_threads(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  long threads = cpus / 2 < 1 ? 1 : cpus / 2;
  return threads > 8 ? 8u : (uint32_t)threads;
}

/* The copy threads: the program's own threads wait at the gate while they run, and the host side
 * of the copies (hashing, copying between staging and the image, first-touch page faults) needs
 * many cores to keep up with the DMA. Three quarters of the CPUs, at most 12, so that the thread
 * giving device memory back beside the copy (and the driver's own) find one: with 16 copy threads on 16 CPUs a first checkpoint of 16384
 * allocations took 0.84x of D2H, its release ending 113 ms after the copy; with 12, 0.93x, and
 * with 8, 0.91x (64 GiB, H100, 2026-11-27). */
static uint32_t default_threads(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 1) cpus = 1;
  long threads = cpus - cpus / 4;
  return threads > (long)MAX_DEFAULT_THREADS ? MAX_DEFAULT_THREADS : (uint32_t)threads;
}

#define BOOL CKPT_OPTION_BOOL, NULL, 0, 0, NULL
#define CHOICE(words) CKPT_OPTION_CHOICE, words, 0, 0, NULL
#define NUMBER(min, max, unit) CKPT_OPTION_NUMBER, NULL, min, max, unit
#define LENGTH_OF(field) (sizeof(((struct ckpt_options *)0)->field) - 1)

static const struct ckpt_option_info table[] = {
    {"CUDAW_STRICT", "1",
     "1: an invalid CUDAW_* value stops the program at its first CUDA call (exit status 78) and "
     "the tools at start; 0: it is ignored (its default used) with one line saying so",
     BOOL},
    {"CUDAW_PAUSE_TIMEOUT", "10000",
     "ms to wait for API calls in flight when pausing; then the checkpoint is abandoned",
     NUMBER(0, 24ull * 3600 * 1000, "milliseconds")},
    {"CUDAW_SIGNAL", "USR1", "signal that requests a checkpoint: USR1, USR2 or none",
     CKPT_OPTION_SIGNAL, "USR1|USR2|none|0", 0, 0, NULL},
    {"CUDAW_RUN_DIR", "$XDG_RUNTIME_DIR/cudaw, /run/cudaw (root), /tmp/cudaw-<uid>",
     "absolute directory of the control sockets <pid>.sock, writable by its owner only; %n: "
     "the pid namespace's inode, %u: the uid (containers)",
     CKPT_OPTION_DIRECTORY, NULL, 0, LENGTH_OF(run_dir), NULL},
    {"CUDAW_SCHED_SOCKET", "<run dir>/cudawd.sock",
     "the cudawd socket to join (CUDAW_SHARE=1) and that cudaw-ctl sched asks; a node's system "
     "cudawd (cudawd --system): /run/cudaw/cudawd.sock",
     CKPT_OPTION_DIRECTORY, NULL, 0, LENGTH_OF(sched_socket), NULL},
    {"CUDAW_SCHED_HOST_MEMORY", "min(50% of RAM, available - 8G)",
     "cudawd's host-memory pool when --host-memory is not given (also a cudawd that cudaw run "
     "--share starts): a size, N% of RAM, or off",
     CKPT_OPTION_SIZE_OR_PERCENT, "off|0", 0, 0, NULL},
    {"CUDAW_SCHED_SPILL_DIR", "unset: no disk tier",
     "cudawd's disk tier when --spill-dir is not given (also a cudawd that cudaw run --share "
     "starts): an absolute directory on a disk (not tmpfs) where the coldest swapped-out images "
     "go when host memory runs short; unset: images stay in host memory",
     CKPT_OPTION_DIRECTORY, NULL, 0, LENGTH_OF(sched_spill_dir), NULL},
    {"CUDAW_CKPT_STREAMS", "2 x threads",
     "copies in flight per device, and pinned staging buffers in all (shared by the devices)",
     NUMBER(1, 64, "streams")},
    {"CUDAW_CKPT_STAGING", "4M", "size of one pinned staging buffer (= one checksummed chunk)",
     CKPT_OPTION_SIZE, NULL, 4096, 4ull << 30, NULL},
    {"CUDAW_CKPT_THREADS", "3/4 of the online CPUs, at most 12",
     "host threads copying between staging buffers and the image", NUMBER(1, 64, "threads")},
    {"CUDAW_CKPT_KEEP_IMAGE", "0", "1: keep the host image after a resume for the next checkpoint",
     BOOL},
    {"CUDAW_CKPT_RELEASE", "device",
     "what a checkpoint releases by default (signal, cudaw-ctl): device (cudaw's memory) or all "
     "(the driver's process checkpoint then takes the context and the rest: 0 bytes left on the "
     "GPU)",
     CHOICE("device|all")},
    {"CUDAW_CKPT_DRIVER_TOOL", "<lib>/../bin/cudaw-ckpt-driver, then PATH",
     "the helper that runs the driver's process checkpoint for release all",
     CKPT_OPTION_PROGRAM, NULL, 0, LENGTH_OF(driver_tool), NULL},
    {"CUDAW_CKPT_REGISTER", "1",
     "1: page-lock the image while paused, so resume and kept-image checkpoints skip staging",
     BOOL},
    {"CUDAW_CKPT_PIN_EARLY", "1",
     "1: pin the staging buffers in the background once the program has device memory", BOOL},
    {"CUDAW_CKPT_CREATE", "beside",
     "resume under remap from a host image: beside: device memory is made just ahead of the "
     "copy, piece by piece (adjacent small allocations in one slab each); first: all of it "
     "before the copy",
     CHOICE("beside|first")},
    {"CUDAW_CKPT_FILL", "copy",
     "copy: copy into fresh image pages the kernel zeroed first (huge pages); kernel: the kernel "
     "fills them from staging (userfaultfd, 4 KiB pages), skipping the zeroing",
     CHOICE("copy|kernel")},
    {"CUDAW_SUSPEND", "off",
     "release: SIGTSTP checkpoints the program and releases its device memory, SIGCONT restores "
     "it (a Slurm job's suspend: SIGTSTP, about 2 s, SIGSTOP; resume: SIGCONT)",
     CHOICE("release|off")},
    {"CUDAW_SUSPEND_START_WAIT", "5",
     "with CUDAW_SUSPEND=release: for this many seconds after the program starts, an allocation "
     "that does not fit waits for a job Slurm is suspending to release its memory (gang "
     "scheduling: more than SchedulerTimeSlice + 2)",
     NUMBER(0, 3600, "seconds")},
    {"CUDAW_CKPT_RESERVE", "auto",
     "auto, a size (8G) or off: keep page-locked host memory for the image, grown in the "
     "background as device memory grows (auto: as large as it, within the budget), so that a "
     "checkpoint copies straight into it; under cudaw run --share cudawd's pool takes its place",
     CKPT_OPTION_SIZE, "auto|off|0", 1, UINT64_MAX, NULL},
    {"CUDAW_CKPT_RESERVE_BUDGET", "75%",
     "the share of the host memory available to the reserve (MemAvailable plus what it holds) "
     "it may take; an image larger than that is said once, as device memory grows, and the "
     "reserve grows up to it",
     CKPT_OPTION_PERCENT, NULL, 1, 100, NULL},
    {"CUDAW_CKPT_RESERVE_THREADS", "half the online CPUs, at most 8",
     "threads that fault in and page-lock the reserve in the background, each a piece at a time",
     NUMBER(1, 64, "threads")},
    {"CUDAW_CKPT_POOL_THREADS", "as CUDAW_CKPT_RESERVE_THREADS",
     "threads that page-lock cudawd's host-memory pool in the background; 0: none, every copy "
     "to and from the pool goes through staging (in 2 MiB pages nearly as fast, and nothing is "
     "page-locked beside the programs' kernels)",
     NUMBER(0, 64, "threads")},
    {"CUDAW_CKPT_LIVE", "0",
     "1: a checkpoint by signal is live: device memory (the program's own VMM mappings too) is "
     "copied while the program runs, then the pause re-copies only the chunks whose checksum "
     "changed (cudaw-ctl checkpoint --live)",
     BOOL},
    {"CUDAW_CKPT_PREFAULT", "0",
     "1: fault fresh image pages in while their DMA runs (slower; shows the fault cost apart)",
     BOOL},
    {"CUDAW_TEST_EXCHANGE_DELAY_MS", "0",
     "test-only: each step of an exchange's copy (docs/sharing.md) waits this long, so that a "
     "test can stop a program or cudawd in the middle of it; never set it in production",
     NUMBER(0, 10000, "milliseconds")},
    {"CUDAW_TEST_MEMINFO", "/proc/meminfo",
     "test-only: a file read instead of /proc/meminfo for the host's available memory (a host "
     "short of memory for a checkpoint's image); never set it in production",
     CKPT_OPTION_FILE, NULL, 0, 0, NULL},
    {"CUDAW_CRIU", "criu (on PATH)",
     "the criu program that cudaw-ctl checkpoint --criu and restore run", CKPT_OPTION_PROGRAM,
     NULL, 0, 0, NULL},
};

#undef BOOL
#undef CHOICE
#undef NUMBER
#undef LENGTH_OF

const struct ckpt_option_info *ckpt_option_table(size_t *count) {
  *count = sizeof table / sizeof table[0];
  return table;
}

const struct ckpt_option_info *ckpt_option_find(const char *name) {
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(table[i].name, name) == 0) return &table[i];
  return NULL;
}

/* "a|b|c" -> "a, b or c". */
static void list_words(const char *words, char *out, size_t len) {
  size_t used = 0;
  out[0] = '\0';
  for (const char *w = words; *w && used < len;) {
    size_t n = strcspn(w, "|");
    const char *sep = used == 0 ? "" : w[n] ? ", " : " or ";
    used += (size_t)snprintf(out + used, len - used, "%s%.*s", sep, (int)n, w);
    w += n + (w[n] == '|');
  }
}

static bool is_word(const char *words, const char *value, bool any_case) {
  if (!words) return false;
  size_t length = strlen(value);
  for (const char *w = words; *w;) {
    size_t n = strcspn(w, "|");
    if (n == length && (any_case ? strncasecmp(w, value, n) : strncmp(w, value, n)) == 0)
      return true;
    w += n + (w[n] == '|');
  }
  return false;
}

static bool whole_number(const char *text, uint64_t min, uint64_t max, uint64_t *out) {
  if (*text < '0' || *text > '9') return false; /* no sign, no space */
  char *end;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno || *end || value < min || value > max) return false;
  if (out) *out = value;
  return true;
}

static bool executable(const char *program) {
  if (strchr(program, '/')) return access(program, X_OK) == 0;
  const char *path = getenv("PATH");
  for (const char *dir = path && *path ? path : "/usr/bin:/bin"; *dir;) {
    size_t n = strcspn(dir, ":");
    char candidate[4096];
    if ((size_t)snprintf(candidate, sizeof candidate, "%.*s/%s", (int)(n ? n : 1), n ? dir : ".",
                         program) < sizeof candidate &&
        access(candidate, X_OK) == 0)
      return true;
    dir += n + (dir[n] == ':');
  }
  return false;
}

static bool appendable(const char *file) {
  if (access(file, F_OK) == 0) return access(file, W_OK) == 0;
  char folder[4096];
  if ((size_t)snprintf(folder, sizeof folder, "%s", file) >= sizeof folder) return false;
  char *slash = strrchr(folder, '/');
  if (!slash) return access(".", W_OK) == 0;
  slash[slash == folder] = '\0'; /* "/log" -> "/" */
  return access(folder, W_OK) == 0;
}

void ckpt_option_describe(const struct ckpt_option_info *row, char *out, size_t len) {
  char words[160] = "";
  if (row->words) list_words(row->words, words, sizeof words);
  const char *or_words = row->words ? ", or " : "";
  unsigned long long min = row->min, max = row->max;
  switch (row->kind) {
    case CKPT_OPTION_TEXT: snprintf(out, len, "expected any text"); break;
    case CKPT_OPTION_BOOL: snprintf(out, len, "expected 0 or 1"); break;
    case CKPT_OPTION_CHOICE: snprintf(out, len, "expected %s", words); break;
    case CKPT_OPTION_SIGNAL:
      snprintf(out, len, "expected %s (also written SIGUSR1, usr1)", words);
      break;
    case CKPT_OPTION_NUMBER:
      snprintf(out, len, "expected a whole number of %s from %llu to %llu", row->unit, min, max);
      break;
    case CKPT_OPTION_SIZE:
      if (max && max != UINT64_MAX)
        snprintf(out, len, "expected a size (bytes, or with K, M, G or T) from %llu to %llu "
                 "bytes%s%s", min, max, or_words, words);
      else
        snprintf(out, len, "expected a size such as 8G (bytes, or with K, M, G or T)%s%s",
                 or_words, words);
      break;
    case CKPT_OPTION_SIZE_OR_PERCENT:
      snprintf(out, len, "expected a size such as 8G (bytes, or with K, M, G or T) or a "
               "percentage from 1 to 100 such as 50%%%s%s", or_words, words);
      break;
    case CKPT_OPTION_PERCENT:
      snprintf(out, len, "expected a percentage from %llu to %llu%s%s", min, max, or_words, words);
      break;
    case CKPT_OPTION_DIRECTORY:
      snprintf(out, len, "expected an absolute path (starting with /) of at most %llu bytes", max);
      break;
    case CKPT_OPTION_FILE:
      snprintf(out, len, "expected the absolute path of a readable file");
      break;
    case CKPT_OPTION_LOG_FILE:
      snprintf(out, len, "expected a file that can be created or appended to");
      break;
    case CKPT_OPTION_PROGRAM:
      snprintf(out, len, "expected an executable program (a path, or a name found on PATH)");
      break;
  }
}

static bool valid(const struct ckpt_option_info *row, const char *value) {
  uint64_t bytes;
  switch (row->kind) {
    case CKPT_OPTION_TEXT: return true;
    case CKPT_OPTION_BOOL: return strcmp(value, "0") == 0 || strcmp(value, "1") == 0;
    case CKPT_OPTION_CHOICE: return is_word(row->words, value, false);
    case CKPT_OPTION_SIGNAL:
      return is_word(row->words, strncasecmp(value, "SIG", 3) == 0 ? value + 3 : value, true);
    case CKPT_OPTION_NUMBER: return whole_number(value, row->min, row->max, NULL);
    case CKPT_OPTION_SIZE:
      return is_word(row->words, value, false) ||
             (vmem_parse_size(value, 0, &bytes) == 0 && bytes >= row->min &&
              (!row->max || bytes <= row->max));
    case CKPT_OPTION_SIZE_OR_PERCENT:
      /* The total is not known yet (the device's or the host's memory): any nonzero one checks
       * the syntax and the 1-100 range. */
      return is_word(row->words, value, false) || vmem_parse_size(value, 1ull << 40, &bytes) == 0;
    case CKPT_OPTION_PERCENT: {
      if (is_word(row->words, value, false)) return true;
      char number[24];
      size_t n = strlen(value);
      if (n == 0 || n >= sizeof number) return false;
      memcpy(number, value, n + 1);
      if (number[n - 1] == '%') number[n - 1] = '\0';
      return whole_number(number, row->min, row->max, NULL);
    }
    case CKPT_OPTION_DIRECTORY: return value[0] == '/' && (!row->max || strlen(value) <= row->max);
    case CKPT_OPTION_FILE: return value[0] == '/' && access(value, R_OK) == 0;
    case CKPT_OPTION_LOG_FILE: return appendable(value);
    case CKPT_OPTION_PROGRAM: return (!row->max || strlen(value) <= row->max) && executable(value);
  }
  return false;
}

int ckpt_option_check(const struct ckpt_option_info *row, const char *value, char *expected,
                      size_t len) {
  if (valid(row, value)) return 0;
  if (expected && len) ckpt_option_describe(row, expected, len);
  return -EINVAL;
}

int ckpt_option_env_invalid(const struct ckpt_option_info *row, char *line, size_t len) {
  const char *value = getenv(row->name);
  char expected[256];
  if (!value || !*value || ckpt_option_check(row, value, expected, sizeof expected) == 0) return 0;
  if (line && len)
    snprintf(line, len, "%s=%.60s%s: %s", row->name, value, strlen(value) > 60 ? "..." : "",
             expected);
  return 1;
}

int ckpt_options_strict(void) {
  const char *value = getenv("CUDAW_STRICT");
  return !(value && strcmp(value, "0") == 0);
}

int ckpt_options_check_env(const char *tool, const char *const *names) {
  int strict = ckpt_options_strict(), bad = 0;
  for (; *names; names++) {
    const struct ckpt_option_info *row = ckpt_option_find(*names);
    char line[512];
    if (!row || !ckpt_option_env_invalid(row, line, sizeof line)) continue;
    bad++;
    fprintf(stderr, "%s: %s%s\n", tool, line,
            strict ? "" : "; ignored (CUDAW_STRICT=0): using the default");
  }
  if (bad && strict)
    fprintf(stderr, "%s: stopping (exit status %d): fix the value, or set CUDAW_STRICT=0 to "
            "ignore invalid values\n", tool, CUDAW_EXIT_BAD_OPTION);
  return bad && strict ? CUDAW_EXIT_BAD_OPTION : 0;
}

/* The environment's value of a row of this table if it is set and valid; NULL otherwise, with
 * an invalid one's line appended to `error` and *rc set. */
static const char *env_value(const char *name, char *error, size_t len, int *rc) {
  const struct ckpt_option_info *row = ckpt_option_find(name);
  const char *value = getenv(name);
  if (!row || !value || !*value) return NULL;
  char line[512];
  if (!ckpt_option_env_invalid(row, line, sizeof line)) return value;
  *rc = -EINVAL;
  if (error && len) {
    size_t used = strlen(error);
    if (used < len) snprintf(error + used, len - used, "%s%s", used ? "; " : "", line);
  }
  return NULL;
}

int ckpt_options_from_env(struct ckpt_options *out, char *error, size_t error_len) {
  int rc = 0;
  uint64_t value;
  const char *text;
  memset(out, 0, sizeof *out);
  out->pause_timeout_ms = DEFAULT_PAUSE_TIMEOUT_MS;
  out->signal_number = SIGUSR1;
  out->streams = 0; /* 2 x threads unless set */
  out->staging_bytes = DEFAULT_STAGING_BYTES;
  out->threads = default_threads();
  out->register_image = 1;
  out->pin_early = 1;
  out->suspend_start_wait_s = 5;
  out->reserve_auto = 1; /* a pause at any moment copies at the link's speed: docs/checkpoint.md */
  out->reserve_budget_pct = 75; /* JAX's 59.5 GiB image on a 128 GiB host: docs/checkpoint.md */
  /* A stop waits for one piece's page-locking at most. And while a piece is being page-locked,
   * the driver keeps the program's own launches waiting: with 256 MiB pieces on 2 or more threads
   * 2-ms kernels ran 4.4-6.9x slower (bench_pool_launch, H100); with 32 MiB ones 1.07-1.09x, and
   * the reserve still grew at 29.3 GB/s (bench_reserve 45 8). */
  out->reserve_piece = 32ull << 20;
  out->reserve_threads = default_reserve_threads();
  out->create_first = 0; /* beside: a 64 GiB resume 0.86x -> 0.97x of H2D (docs/performance.md) */
  if (error && error_len) error[0] = '\0';
#define VALUE(name) (text = env_value(name, error, error_len, &rc))

  /* Every value below passed its row's check: only its meaning is read here. */
  if (VALUE("CUDAW_PAUSE_TIMEOUT")) out->pause_timeout_ms = (uint32_t)strtoul(text, NULL, 10);
  if (VALUE("CUDAW_SIGNAL")) {
    const char *name = strncasecmp(text, "SIG", 3) == 0 ? text + 3 : text;
    out->signal_number = strcasecmp(name, "USR1") == 0   ? SIGUSR1
                         : strcasecmp(name, "USR2") == 0 ? SIGUSR2
                                                         : 0;
  }
  if (VALUE("CUDAW_CKPT_STREAMS")) out->streams = (uint32_t)strtoul(text, NULL, 10);
  if (VALUE("CUDAW_CKPT_STAGING") && vmem_parse_size(text, 0, &value) == 0)
    out->staging_bytes = value;
  if (VALUE("CUDAW_CKPT_THREADS")) out->threads = (uint32_t)strtoul(text, NULL, 10);
  if (VALUE("CUDAW_CKPT_KEEP_IMAGE")) out->keep_image = text[0] == '1';
  if (VALUE("CUDAW_CKPT_RELEASE")) out->release_all = strcmp(text, "all") == 0;
  if (VALUE("CUDAW_CKPT_DRIVER_TOOL"))
    snprintf(out->driver_tool, sizeof out->driver_tool, "%s", text);
  if (VALUE("CUDAW_CKPT_PIN_EARLY")) out->pin_early = text[0] == '1';
  if (VALUE("CUDAW_CKPT_REGISTER")) out->register_image = text[0] == '1';
  if (VALUE("CUDAW_CKPT_PREFAULT")) out->prefault = text[0] == '1';
  if (VALUE("CUDAW_CKPT_FILL")) out->fill_kernel = strcmp(text, "kernel") == 0;
  if (VALUE("CUDAW_CKPT_CREATE")) out->create_first = strcmp(text, "first") == 0;
  if (VALUE("CUDAW_CKPT_LIVE")) out->live = text[0] == '1';
  if (VALUE("CUDAW_TEST_EXCHANGE_DELAY_MS"))
    out->exchange_delay_ms = (uint32_t)strtoul(text, NULL, 10);
  if (VALUE("CUDAW_SUSPEND_START_WAIT"))
    out->suspend_start_wait_s = (uint32_t)strtoul(text, NULL, 10);
  if (VALUE("CUDAW_SUSPEND")) out->suspend_release = strcmp(text, "release") == 0;
  if (VALUE("CUDAW_CKPT_RESERVE")) {
    out->reserve_auto = strcmp(text, "auto") == 0;
    if (!out->reserve_auto && vmem_parse_size(text, 0, &value) == 0)
      out->reserve_bytes = value; /* else off, 0 */
  }
  if (VALUE("CUDAW_CKPT_RESERVE_THREADS"))
    out->reserve_threads = (uint32_t)strtoul(text, NULL, 10);
  out->pool_threads = out->reserve_threads;
  if (VALUE("CUDAW_CKPT_POOL_THREADS")) out->pool_threads = (uint32_t)strtoul(text, NULL, 10);
  if (VALUE("CUDAW_CKPT_RESERVE_BUDGET"))
    out->reserve_budget_pct = (uint32_t)strtoul(text, NULL, 10);
  if (out->streams == 0) out->streams = 2 * out->threads;
  /* %n and %u (containers) are expanded here; a value too long once expanded, or whose pid
   * namespace cannot be read, is refused like an invalid one. */
  if (VALUE("CUDAW_RUN_DIR") && ckpt_run_dir_expand(text, out->run_dir, sizeof out->run_dir) != 0) {
    rc = -EINVAL;
    out->run_dir[0] = '\0';
    if (error && error_len) {
      size_t used = strlen(error);
      if (used < error_len)
        snprintf(error + used, error_len - used, "%sCUDAW_RUN_DIR=%s: too long once %%n and %%u "
                 "are expanded, or its pid namespace cannot be read", used ? "; " : "", text);
    }
  }
  if (!out->run_dir[0] && ckpt_default_run_dir(out->run_dir, sizeof out->run_dir) != 0)
    out->run_dir[0] = '\0';
  if (VALUE("CUDAW_SCHED_SOCKET"))
    snprintf(out->sched_socket, sizeof out->sched_socket, "%s", text);
  if (VALUE("CUDAW_SCHED_SPILL_DIR"))
    snprintf(out->sched_spill_dir, sizeof out->sched_spill_dir, "%s", text);
  if (VALUE("CUDAW_SCHED_HOST_MEMORY")) {
    if (strlen(text) < sizeof out->sched_host_memory)
      snprintf(out->sched_host_memory, sizeof out->sched_host_memory, "%s", text);
  }
#undef VALUE
  if (!out->sched_socket[0] && out->run_dir[0] &&
      (size_t)snprintf(out->sched_socket, sizeof out->sched_socket, "%s/cudawd.sock",
                       out->run_dir) >= sizeof out->sched_socket)
    out->sched_socket[0] = '\0';
  return rc;
}
