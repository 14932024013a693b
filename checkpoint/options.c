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

#define DEFAULT_PAUSE_TIMEOUT_MS 10000u
#define DEFAULT_STAGING_BYTES (4ull << 20)
#define MAX_DEFAULT_THREADS 16u

/* The copy threads: one per online CPU, at most 16. The program's own threads wait at the gate
 * while they run, and the host side of the copies (hashing, copying between staging and the
 * image, first-touch page faults) needs many cores to keep up with the DMA. */
static uint32_t default_threads(void) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 1) cpus = 1;
  return cpus > (long)MAX_DEFAULT_THREADS ? MAX_DEFAULT_THREADS : (uint32_t)cpus;
}

static const struct ckpt_option_info table[] = {
    {"CUDAW_PAUSE_TIMEOUT", "10000",
     "ms to wait for API calls in flight when pausing; then the checkpoint is abandoned"},
    {"CUDAW_SIGNAL", "USR1", "signal that requests a checkpoint: USR1, USR2 or none"},
    {"CUDAW_RUN_DIR", "$XDG_RUNTIME_DIR/cudaw, /run/cudaw (root), /tmp/cudaw-<uid>",
     "absolute directory of the control sockets <pid>.sock, writable by its owner only; %n: "
     "the pid namespace's inode, %u: the uid (containers)"},
    {"CUDAW_SCHED_SOCKET", "<run dir>/cudawd.sock",
     "the cudawd socket to join (CUDAW_SHARE=1) and that cudaw-ctl sched asks; a node's system "
     "cudawd (cudawd --system): /run/cudaw/cudawd.sock"},
    {"CUDAW_SCHED_HOST_MEMORY", "min(50% of RAM, available - 8G)",
     "cudawd's host-memory pool when --host-memory is not given (also a cudawd that cudaw run "
     "--share starts): a size, N% of RAM, or off"},
    {"CUDAW_CKPT_STREAMS", "2 x threads",
     "copies in flight per device, and pinned staging buffers in all (shared by the devices)"},
    {"CUDAW_CKPT_STAGING", "4M", "size of one pinned staging buffer (= one checksummed chunk)"},
    {"CUDAW_CKPT_THREADS", "online CPUs, at most 16",
     "host threads copying between staging buffers and the image"},
    {"CUDAW_CKPT_KEEP_IMAGE", "0", "1: keep the host image after a resume for the next checkpoint"},
    {"CUDAW_CKPT_RELEASE", "device",
     "what a checkpoint releases by default (signal, cudaw-ctl): device (cudaw's memory) or all "
     "(the driver's process checkpoint then takes the context and the rest: 0 bytes left on the "
     "GPU)"},
    {"CUDAW_CKPT_DRIVER_TOOL", "<lib>/../bin/cudaw-ckpt-driver, then PATH",
     "the helper that runs the driver's process checkpoint for release all"},
    {"CUDAW_CKPT_REGISTER", "1",
     "1: page-lock the image while paused, so resume and kept-image checkpoints skip staging"},
    {"CUDAW_CKPT_PIN_EARLY", "1",
     "1: pin the staging buffers in the background once the program has device memory"},
    {"CUDAW_CKPT_FILL", "copy",
     "copy: copy into fresh image pages the kernel zeroed first (huge pages); kernel: the kernel "
     "fills them from staging (userfaultfd, 4 KiB pages), skipping the zeroing"},
    {"CUDAW_SUSPEND", "off",
     "release: SIGTSTP checkpoints the program and releases its device memory, SIGCONT restores "
     "it (a Slurm job's suspend: SIGTSTP, about 2 s, SIGSTOP; resume: SIGCONT)"},
    {"CUDAW_SUSPEND_START_WAIT", "5",
     "with CUDAW_SUSPEND=release: for this many seconds after the program starts, an allocation "
     "that does not fit waits for a job Slurm is suspending to release its memory (gang "
     "scheduling: more than SchedulerTimeSlice + 2)"},
    {"CUDAW_CKPT_RESERVE", "off",
     "auto or a size (8G): keep page-locked host memory for the image, grown in the background "
     "as device memory grows, so that a checkpoint copies straight into it"},
    {"CUDAW_CKPT_RESERVE_BUDGET", "50%",
     "the share of the host's available memory (MemAvailable) the reserve may take; past it the "
     "reserve stops growing, says so once, and checkpoints copy the old way"},
    {"CUDAW_CKPT_LIVE", "0",
     "1: a checkpoint by signal is live: device memory is copied while the program runs, then "
     "the pause re-copies only the chunks whose checksum changed (cudaw-ctl checkpoint --live)"},
    {"CUDAW_CKPT_PREFAULT", "0",
     "1: fault fresh image pages in while their DMA runs (slower; shows the fault cost apart)"},
};

const struct ckpt_option_info *ckpt_option_table(size_t *count) {
  *count = sizeof table / sizeof table[0];
  return table;
}

/* "123", "64K", "32M", "2G" -> bytes. */
static int parse_size(const char *text, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno || end == text) return -EINVAL;
  unsigned shift = 0;
  switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
  }
  if (*end == 'i' || *end == 'B') end++;
  if (*end == 'B') end++;
  if (*end || value == 0 || value > (UINT64_MAX >> shift)) return -EINVAL;
  *out = (uint64_t)value << shift;
  return 0;
}

static int parse_count(const char *text, uint64_t max, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno || end == text || *end || value > max) return -EINVAL;
  *out = value;
  return 0;
}

/* Appends "NAME=value is not valid; using the default" to error (several may be wrong). */
static int reject(const char *name, const char *value, char *error, size_t len) {
  if (error && len) {
    size_t used = strlen(error);
    if (used < len)
      snprintf(error + used, len - used, "%s%s=%.40s%s is not valid; using the default",
               used ? "; " : "", name, value, strlen(value) > 40 ? "..." : "");
  }
  return -EINVAL;
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
  if (error && error_len) error[0] = '\0';

  if ((text = getenv("CUDAW_PAUSE_TIMEOUT")) && *text) {
    if (parse_count(text, 24ull * 3600 * 1000, &value) == 0) out->pause_timeout_ms = (uint32_t)value;
    else rc = reject("CUDAW_PAUSE_TIMEOUT", text, error, error_len);
  }
  if ((text = getenv("CUDAW_SIGNAL")) && *text) {
    const char *name = strncasecmp(text, "SIG", 3) == 0 ? text + 3 : text;
    if (strcasecmp(name, "USR1") == 0) out->signal_number = SIGUSR1;
    else if (strcasecmp(name, "USR2") == 0) out->signal_number = SIGUSR2;
    else if (strcasecmp(name, "none") == 0 || strcmp(name, "0") == 0) out->signal_number = 0;
    else rc = reject("CUDAW_SIGNAL", text, error, error_len);
  }
  if ((text = getenv("CUDAW_CKPT_STREAMS")) && *text) {
    if (parse_count(text, 64, &value) == 0 && value > 0) out->streams = (uint32_t)value;
    else rc = reject("CUDAW_CKPT_STREAMS", text, error, error_len);
  }
  if ((text = getenv("CUDAW_CKPT_STAGING")) && *text) {
    if (parse_size(text, &value) == 0 && value >= 4096 && value <= (4ull << 30))
      out->staging_bytes = value;
    else rc = reject("CUDAW_CKPT_STAGING", text, error, error_len);
  }
  if ((text = getenv("CUDAW_CKPT_THREADS")) && *text) {
    if (parse_count(text, 64, &value) == 0 && value > 0) out->threads = (uint32_t)value;
    else rc = reject("CUDAW_CKPT_THREADS", text, error, error_len);
  }
  if ((text = getenv("CUDAW_CKPT_KEEP_IMAGE")) && *text) {
    if (strcmp(text, "0") == 0 || strcmp(text, "1") == 0) out->keep_image = text[0] == '1';
    else rc = reject("CUDAW_CKPT_KEEP_IMAGE", text, error, error_len);
  }
  if ((text = getenv("CUDAW_CKPT_RELEASE")) && *text) {
    if (strcmp(text, "device") == 0 || strcmp(text, "all") == 0) out->release_all = text[0] == 'a';
    else rc = reject("CUDAW_CKPT_RELEASE", text, error, error_len);
  }
  if ((text = getenv("CUDAW_CKPT_DRIVER_TOOL")) && *text) {
    if (strlen(text) < sizeof out->driver_tool)
      snprintf(out->driver_tool, sizeof out->driver_tool, "%s", text);
    else rc = reject("CUDAW_CKPT_DRIVER_TOOL", "(too long)", error, error_len);
  }
  out->register_image = 1;
  out->pin_early = 1;
  if ((text = getenv("CUDAW_CKPT_PIN_EARLY")) && *text) {
    if (strcmp(text, "0") == 0 || strcmp(text, "1") == 0) out->pin_early = text[0] == '1';
    else rc = reject("CUDAW_CKPT_PIN_EARLY", text, error, error_len);
  }
  if ((text = getenv("CUDAW_CKPT_REGISTER")) && *text) {
    if (strcmp(text, "0") == 0 || strcmp(text, "1") == 0) out->register_image = text[0] == '1';
    else rc = reject("CUDAW_CKPT_REGISTER", text, error, error_len);
  }
  if ((text = getenv("CUDAW_CKPT_PREFAULT")) && *text) {
    if (strcmp(text, "0") == 0 || strcmp(text, "1") == 0) out->prefault = text[0] == '1';
    else rc = reject("CUDAW_CKPT_PREFAULT", text, error, error_len);
  }
  out->fill_kernel = 0;
  if ((text = getenv("CUDAW_CKPT_FILL")) && *text) {
    if (strcmp(text, "kernel") == 0 || strcmp(text, "copy") == 0) out->fill_kernel = text[0] == 'k';
    else rc = reject("CUDAW_CKPT_FILL", text, error, error_len);
  }
  if ((text = getenv("CUDAW_CKPT_LIVE")) && *text) {
    if (strcmp(text, "0") == 0 || strcmp(text, "1") == 0) out->live = text[0] == '1';
    else rc = reject("CUDAW_CKPT_LIVE", text, error, error_len);
  }
  out->suspend_start_wait_s = 5;
  if ((text = getenv("CUDAW_SUSPEND_START_WAIT")) && *text) {
    if (parse_count(text, 3600, &value) == 0) out->suspend_start_wait_s = (uint32_t)value;
    else rc = reject("CUDAW_SUSPEND_START_WAIT", text, error, error_len);
  }
  if ((text = getenv("CUDAW_SUSPEND")) && *text) {
    if (strcmp(text, "release") == 0 || strcmp(text, "off") == 0) out->suspend_release = text[0] == 'r';
    else rc = reject("CUDAW_SUSPEND", text, error, error_len);
  }
  out->reserve_budget_pct = 50;
  out->reserve_piece = 256ull << 20; /* a stop waits for one piece's page-locking at most */
  if ((text = getenv("CUDAW_CKPT_RESERVE")) && *text) {
    if (strcmp(text, "auto") == 0) out->reserve_auto = 1;
    else if (strcmp(text, "off") == 0 || strcmp(text, "0") == 0) out->reserve_bytes = 0;
    else if (parse_size(text, &value) == 0) out->reserve_bytes = value;
    else rc = reject("CUDAW_CKPT_RESERVE", text, error, error_len);
  }
  if ((text = getenv("CUDAW_CKPT_RESERVE_BUDGET")) && *text) {
    char percent[16];
    snprintf(percent, sizeof percent, "%s", text);
    size_t n = strlen(percent);
    if (n && percent[n - 1] == '%') percent[n - 1] = '\0';
    if (parse_count(percent, 100, &value) == 0 && value > 0) out->reserve_budget_pct = (uint32_t)value;
    else rc = reject("CUDAW_CKPT_RESERVE_BUDGET", text, error, error_len);
  }
  if (out->streams == 0) out->streams = 2 * out->threads;
  if ((text = getenv("CUDAW_RUN_DIR")) && *text) {
    if (text[0] != '/') rc = reject("CUDAW_RUN_DIR", text, error, error_len); /* must be absolute */
    else if (ckpt_run_dir_expand(text, out->run_dir, sizeof out->run_dir) != 0) /* %n: containers */
      rc = reject("CUDAW_RUN_DIR", "(too long, or its %n cannot be read)", error, error_len);
  }
  if (!out->run_dir[0] && ckpt_default_run_dir(out->run_dir, sizeof out->run_dir) != 0)
    out->run_dir[0] = '\0';
  if ((text = getenv("CUDAW_SCHED_SOCKET")) && *text) {
    if (text[0] != '/' || strlen(text) >= sizeof out->sched_socket)
      rc = reject("CUDAW_SCHED_SOCKET", text, error, error_len);
    else snprintf(out->sched_socket, sizeof out->sched_socket, "%s", text);
  }
  if ((text = getenv("CUDAW_SCHED_HOST_MEMORY")) && *text) {
    if (strlen(text) < sizeof out->sched_host_memory)
      snprintf(out->sched_host_memory, sizeof out->sched_host_memory, "%s", text);
    else rc = reject("CUDAW_SCHED_HOST_MEMORY", text, error, error_len);
  }
  if (!out->sched_socket[0] && out->run_dir[0] &&
      (size_t)snprintf(out->sched_socket, sizeof out->sched_socket, "%s/cudawd.sock",
                       out->run_dir) >= sizeof out->sched_socket)
    out->sched_socket[0] = '\0';
  return rc;
}
