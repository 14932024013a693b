/* cudaw-ctl: list, inspect, checkpoint and resume cudaw processes through their control sockets.
 * It never loads CUDA. Exit codes tell apart what a script needs to know (see usage()). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"
#include "internal.h"

/* The scheduler's commands (sched/ctl_sched.c), linked in by sched/CMakeLists.txt. */
int sched_ctl_main(int count, const char *const *args, bool json) __attribute__((weak));

static bool json_output;

static void usage(FILE *out) {
  fprintf(out,
          "usage: cudaw-ctl [--json] list\n"
          "       cudaw-ctl [--json] status <pid>\n"
          "       cudaw-ctl [--json] checkpoint [--live] [--release-all] [--to DIR [--zstd]] <pid>\n"
          "                                        pause <pid>, save its GPU memory to host "
          "memory, release the GPU memory;\n"
          "                                        --live: copy it while <pid> runs, then pause and "
          "re-copy what changed;\n"
          "                                        --release-all: then the driver's process "
          "checkpoint takes the rest\n"
          "                                        (context, libraries' memory): 0 bytes left on "
          "the GPU;\n"
          "                                        --to DIR: write the image to DIR "
          "(manifest.json + chunk files,\n"
          "                                        --zstd compressed) and free its host memory\n"
          "       cudaw-ctl [--json] resume <pid>       recreate the GPU memory, restore it, "
          "continue <pid>\n"
          "                                        (an image on disk streams from its files, each "
          "chunk verified)\n"
          "       cudaw-ctl [--json] spill [--zstd] <pid> DIR\n"
          "                                        paused <pid>: write its image to DIR "
          "(manifest.json + chunk files)\n"
          "                                        and free its host memory; it stays paused\n"
          "       cudaw-ctl [--json] unspill <pid>      paused <pid>: read its image back from "
          "disk into host memory\n"
          "       cudaw-ctl [--json] checkpoint --group [flags as above] [--drain-ms N] "
          "[--attempts N]\n"
          "                 [--settle-ms N] [--lease-ms N] <pid> <pid>...\n"
          "                                        pause the ranks of one job together (NCCL "
          "collectives):\n"
          "                                        hold every gate, drain each device within "
          "--drain-ms (2000),\n"
          "                                        else let the ranks behind (or all) run "
          "--settle-ms (20), try again\n"
          "                                        (--attempts 10), then checkpoint all; "
          "--to DIR: DIR/<pid>\n"
          "       cudaw-ctl [--json] resume --group <pid> <pid>...\n"
          "                                        restore every rank, then reopen all gates "
          "together;\n"
          "                                        on failure every rank stays running "
          "(checkpoint) or paused\n"
          "       cudaw-ctl [--criu PATH] dump <pid> DIR [-- criu options]\n"
          "                                        checkpoint --release-all --to DIR/image, then "
          "criu dump of\n"
          "                                        the process tree into DIR/criu (the process "
          "ends)\n"
          "       cudaw-ctl [--criu PATH] restore DIR [-- criu options]\n"
          "                                        criu restore from DIR/criu, then resume (the "
          "driver's restore,\n"
          "                                        the image read back and verified)\n"
          "       cudaw-ctl [--json] limit <pid> [--gpu PERCENT|off]\n"
          "                                        the share of the GPU's time <pid> may use "
          "(1-100, 0 or off: no limit; its launches\n"
          "                                        are metered and held back; 100 meters only), "
          "live; without\n"
          "                                        --gpu: the share and the GPU time it used in the "
          "last second\n"
          "       cudaw-ctl [--json] sched              what cudawd shares: devices, programs\n"
          "       cudaw-ctl sched --stop [--force]      stop cudawd (its owner or root); refused\n"
          "                                        while programs are joined unless --force (they\n"
          "                                        run on unshared; swapped-out ones resume)\n"
          "       cudaw-ctl priority <pid> N            weight N (1-100) of a program under cudawd\n"
          "       cudaw-ctl --help | --version\n"
          "\n"
          "checkpoint and resume wait until the transition is done and print what it did.\n"
          "--json prints the process's reply (one JSON object per line) instead of text.\n"
          "\n"
          "exit codes: 0 ok, 1 failed, 2 usage, 3 no such process, 4 not a cudaw process\n"
          "            (no control socket), 5 permission denied, 6 wrong state (resume while\n"
          "            running, checkpoint while paused, spill while running or with the\n"
          "            image on disk already, another transition under way), 7 the\n"
          "            process's device memory is not cudaw's (vmem off or not started: a\n"
          "            checkpoint cannot release it), 78 an invalid CUDAW_* value\n"
          "\n"
          "the programs' environment (CUDAW_* options): see `cudaw options`\n");
}

/* ---- replies ---- */

/* The value of "key" in a flat one-line JSON object, unquoted; false if absent. */
bool ctl_json_get(const char *json, const char *key, char *out, size_t len) {
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char *p = strstr(json, pattern);
  if (!p || !len) return false;
  p += strlen(pattern);
  size_t n = 0;
  if (*p == '"') {
    for (p++; *p && *p != '"'; p++) {
      if (*p == '\\' && p[1]) p++;
      if (n + 1 < len) out[n++] = *p;
    }
  } else {
    for (; *p && *p != ',' && *p != '}'; p++)
      if (n + 1 < len) out[n++] = *p;
  }
  out[n] = '\0';
  return true;
}

static double json_number(const char *json, const char *key) {
  char value[64];
  return ctl_json_get(json, key, value, sizeof value) ? strtod(value, NULL) : 0.0;
}

/* The numbers of the flat array "key":[a,b,...] (null reads as -1); how many, at most max. */
static int json_numbers(const char *json, const char *key, double *out, int max) {
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\":[", key);
  const char *p = strstr(json, pattern);
  if (!p) return 0;
  p += strlen(pattern);
  int n = 0;
  while (*p && *p != ']' && n < max) {
    char *end;
    double value = strncmp(p, "null", 4) == 0 ? (end = (char *)p + 4, -1.0) : strtod(p, &end);
    if (end == p) break;
    out[n++] = value;
    p = *end == ',' ? end + 1 : end;
  }
  return n;
}

static bool json_true(const char *json, const char *key) {
  char value[8];
  return ctl_json_get(json, key, value, sizeof value) && strcmp(value, "true") == 0;
}

int ctl_exit_for_reply(const char *json) {
  if (json_true(json, "ok")) return EXIT_OK;
  char kind[32] = "";
  ctl_json_get(json, "error", kind, sizeof kind);
  if (strcmp(kind, "wrong_state") == 0) return EXIT_WRONG_STATE;
  if (strcmp(kind, "permission") == 0) return EXIT_PERMISSION;
  if (strcmp(kind, "not_held") == 0) return EXIT_NOT_HELD;
  return EXIT_FAILED;
}

/* ---- finding and talking to a process ---- */

static int try_socket(const char *dir, pid_t pid, char *path, size_t len, bool *denied) {
  if (ckpt_socket_path(dir, pid, path, len) != 0) return -ENAMETOOLONG;
  struct stat st;
  if (stat(path, &st) == 0) return S_ISSOCK(st.st_mode) ? 0 : -ENOTSOCK;
  if (errno == EACCES) *denied = true;
  return -errno;
}

/* CUDAW_RUN_DIR when set; else our own default dir, then the ones the target's owner would use. */
static int find_socket(pid_t pid, char *path, size_t len, bool *denied) {
  struct ckpt_options options;
  ckpt_options_from_env(&options, NULL, 0);
  int in_container = ckpt_namespaced_socket(pid, path, len); /* by host pid */
  if (in_container == 0 || in_container == -EACCES || in_container == -ESRCH) {
    *denied = in_container == -EACCES;
    return in_container;
  }
  if (getenv("CUDAW_RUN_DIR") && *getenv("CUDAW_RUN_DIR"))
    return try_socket(options.run_dir, pid, path, len, denied);
  if (options.run_dir[0] && try_socket(options.run_dir, pid, path, len, denied) == 0) return 0;
  char proc[32], dir[96];
  struct stat st;
  snprintf(proc, sizeof proc, "/proc/%ld", (long)pid);
  if (stat(proc, &st) != 0) return -ENOENT;
  const char *formats[] = {"/run/user/%u/cudaw", "/run/cudaw/%u", "/tmp/cudaw-%u"};
  for (size_t i = 0; i < 3; i++) {
    snprintf(dir, sizeof dir, formats[i], (unsigned)st.st_uid);
    if (try_socket(dir, pid, path, len, denied) == 0) return 0;
  }
  if (st.st_uid == 0 && try_socket("/run/cudaw", pid, path, len, denied) == 0) return 0;
  return -ENOENT;
}

/* Why a pid's control socket is out of reach: whose the process is. */
static void explain_owner(pid_t pid) {
  char proc[32];
  struct stat st;
  snprintf(proc, sizeof proc, "/proc/%ld", (long)pid);
  if (stat(proc, &st) != 0 || st.st_uid == geteuid() || geteuid() == 0) return;
  fprintf(stderr, "cudaw-ctl: pid %ld belongs to uid %u; only that user or root may control it "
          "(you are uid %u)\n", (long)pid, (unsigned)st.st_uid, (unsigned)geteuid());
}

/* ---- a process that cannot answer ---- */

#define ASK_STOPPED (-1) /* ask()'s answer for a stopped process: not an exit code */
#define STATUS_SECONDS 5.0 /* status waits no longer for a process that is not stopped */

/* The state letter of /proc/<pid>/stat ('R', 'S', 'T' stopped by a signal, 't' stopped by a
 * debugger...), 0 if unreadable. A stopped process's control thread is stopped too. */
static char process_state(pid_t pid) {
  char path[32], text[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  const char *paren = strrchr(text, ')'); /* the command name may hold spaces and ')' */
  return paren && paren[1] == ' ' ? paren[2] : 0;
}

/* Stopped, and still so 50 ms later: a traced process (strace) passes through 't' briefly at
 * every system call. */
static bool process_stopped(pid_t pid) {
  for (int look = 0; look < 2; look++) {
    char state = process_state(pid);
    if (state != 'T' && state != 't') return false;
    if (!look) nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
  }
  return true;
}

static const char *stopped_how(pid_t pid) {
  return process_state(pid) == 't' ? "stopped by a debugger (traced)"
                                   : "stopped by SIGSTOP (suspended)";
}

/* Read the reply line, giving up when pid is stopped meanwhile or after limit seconds (0: no
 * limit; a checkpoint may take minutes). EXIT_OK, ASK_STOPPED, or EXIT_FAILED (printed). */
static int read_reply(int fd, pid_t pid, char *reply, size_t len, double limit) {
  size_t used = 0;
  double start = ckpt_now();
  while (used + 1 < len) {
    struct pollfd readable = {fd, POLLIN, 0};
    int ready = poll(&readable, 1, 200);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      if (process_stopped(pid)) return ASK_STOPPED;
      if (limit > 0 && ckpt_now() - start > limit) {
        fprintf(stderr, "cudaw-ctl: pid %ld did not answer within %.0f s (not stopped: busy or "
                "hung)\n", (long)pid, limit);
        return EXIT_FAILED;
      }
      continue;
    }
    ssize_t got = recv(fd, reply + used, len - 1 - used, MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) break;
    used += (size_t)got;
    if (memchr(reply, '\n', used)) break;
  }
  reply[used] = '\0';
  return EXIT_OK;
}

/* Send `request` to pid and read the reply line into `reply`: an exit code, or ASK_STOPPED
 * (nothing printed) when pid is stopped, before or while it is asked. */
static int ask(pid_t pid, const char *request, char *reply, size_t len, double limit) {
  if (!ckpt_pid_alive(pid)) {
    fprintf(stderr, "cudaw-ctl: no such process: %ld\n", (long)pid);
    return EXIT_NO_PROCESS;
  }
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  bool denied = false;
  if (find_socket(pid, addr.sun_path, sizeof addr.sun_path, &denied) != 0) {
    if (denied) {
      fprintf(stderr, "cudaw-ctl: pid %ld: permission denied looking for its control socket\n",
              (long)pid);
      explain_owner(pid);
      return EXIT_PERMISSION;
    }
    fprintf(stderr, "cudaw-ctl: pid %ld is not a cudaw process (no control socket)\n", (long)pid);
    return EXIT_NOT_CUDAW;
  }
  if (process_stopped(pid)) return ASK_STOPPED; /* it would queue the request and never answer */
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    fprintf(stderr, "cudaw-ctl: socket: %s\n", strerror(errno));
    return EXIT_FAILED;
  }
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    int err = errno;
    close(fd);
    if (err == EACCES || err == EPERM) {
      fprintf(stderr, "cudaw-ctl: pid %ld: permission denied (%s)\n", (long)pid, addr.sun_path);
      explain_owner(pid);
      return EXIT_PERMISSION;
    }
    if (err == ECONNREFUSED) { /* nobody listens: left behind by an earlier process */
      unlink(addr.sun_path);
      fprintf(stderr, "cudaw-ctl: pid %ld is not a cudaw process (stale socket %s removed)\n",
              (long)pid, addr.sun_path);
      return EXIT_NOT_CUDAW;
    }
    fprintf(stderr, "cudaw-ctl: pid %ld: connect %s: %s\n", (long)pid, addr.sun_path, strerror(err));
    return EXIT_FAILED;
  }
  size_t n = strlen(request);
  if (send(fd, request, n, MSG_NOSIGNAL) != (ssize_t)n) {
    fprintf(stderr, "cudaw-ctl: pid %ld: send: %s\n", (long)pid, strerror(errno));
    close(fd);
    return EXIT_FAILED;
  }
  int code = read_reply(fd, pid, reply, len, limit);
  if (code != EXIT_OK) {
    close(fd);
    return code;
  }
  /* Wait until the process has closed its end too (it does right after the reply), so that a
   * CRIU dump that follows finds no half-open connection in it. */
  struct timeval timeout = {2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  char rest[64];
  while (recv(fd, rest, sizeof rest, 0) > 0) {
  }
  close(fd);
  char *end = strchr(reply, '\n');
  if (!end) {
    fprintf(stderr, "cudaw-ctl: pid %ld closed the connection without a reply\n", (long)pid);
    return EXIT_FAILED;
  }
  *end = '\0';
  return EXIT_OK;
}

int ctl_ask(pid_t pid, const char *request, char *reply, size_t len) {
  int code = ask(pid, request, reply, len, 0);
  if (code != ASK_STOPPED) return code;
  char what[32];
  snprintf(what, sizeof what, "%.*s", (int)strcspn(request, " \n"), request);
  fprintf(stderr, "cudaw-ctl: pid %ld is %s: it cannot %s until it is continued (SIGCONT, "
          "scontrol resume); a request already sent is served then\n", (long)pid,
          stopped_how(pid), what);
  return EXIT_WRONG_STATE;
}

/* "since" of pid's <pid>.state (what it last said of itself) as text, and the line itself; false
 * when there is none (cudaw from before this file, or no control socket). */
static bool last_known(pid_t pid, char *line, size_t len, char *since, size_t since_len) {
  struct sockaddr_un addr;
  char path[sizeof addr.sun_path + 8];
  bool denied = false;
  if (find_socket(pid, addr.sun_path, sizeof addr.sun_path, &denied) != 0 ||
      ckpt_state_path(addr.sun_path, path, sizeof path) != 0)
    return false;
  FILE *f = fopen(path, "re");
  if (!f) return false;
  bool read = fgets(line, (int)len, f) != NULL;
  fclose(f);
  if (!read) return false;
  line[strcspn(line, "\n")] = '\0';
  double when = json_number(line, "since");
  time_t seconds = (time_t)when;
  struct tm local;
  char clock[16] = "?";
  if (when > 0 && localtime_r(&seconds, &local)) strftime(clock, sizeof clock, "%H:%M:%S", &local);
  double now = (double)time(NULL);
  snprintf(since, since_len, "%s (%.0f s ago)", clock,
           now > when ? now - when : 0.0);
  return true;
}

/* One line on a stopped process: its stop, then what it last said of itself. */
static void print_stopped(pid_t pid, bool row) {
  char line[512], since[64], image[32], device[64] = "";
  bool known = last_known(pid, line, sizeof line, since, sizeof since);
  if (json_output) {
    printf("{\"ok\":true,\"pid\":%ld,\"state\":\"stopped\",\"stopped\":\"%s\"", (long)pid, process_state(pid) == 't' ? "traced" : "sigstop");
    if (known) printf(",\"last_known\":%s", line);
    printf("}%s", row ? "" : "\n");
    return;
  }
  if (row) printf("%-8ld %-9s %s", (long)pid, "stopped", stopped_how(pid));
  else printf("pid %ld: %s", (long)pid, stopped_how(pid));
  if (!known) {
    printf("; nothing known of its last state\n");
    return;
  }
  char state[16] = "?";
  ctl_json_get(line, "state", state, sizeof state);
  ckpt_format_bytes((uint64_t)json_number(line, "image_bytes"), image, sizeof image);
  if (strstr(line, "\"device_bytes\":")) {
    char bytes[32];
    ckpt_format_bytes((uint64_t)json_number(line, "device_bytes"), bytes, sizeof bytes);
    snprintf(device, sizeof device, ", device memory %s", bytes);
  }
  printf("; last known: %s since %s, host image %s%s\n", state, since, image, device);
}

/* ---- commands ---- */

void ctl_print_failure(pid_t pid, const char *reply) {
  char kind[32] = "", reason[512] = "", state[16] = "";
  ctl_json_get(reply, "error", kind, sizeof kind);
  ctl_json_get(reply, "reason", reason, sizeof reason);
  ctl_json_get(reply, "state", state, sizeof state);
  const char *what = strcmp(kind, "wrong_state") == 0  ? "wrong state"
                     : strcmp(kind, "permission") == 0 ? "permission denied"
                     : strcmp(kind, "not_held") == 0   ? "refused"
                                                       : "failed";
  fprintf(stderr, "cudaw-ctl: pid %ld: %s: %s%s%s\n", (long)pid, what, reason,
          state[0] ? "; now " : "", state);
}

static void print_status(pid_t pid, const char *reply) {
  char state[16] = "?", bytes[32], last_op[16] = "", last_reason[256] = "";
  ctl_json_get(reply, "state", state, sizeof state);
  ckpt_format_bytes((uint64_t)json_number(reply, "image_bytes"), bytes, sizeof bytes);
  printf("pid %ld: %s", (long)pid, state);
  if (strstr(reply, "\"device_bytes\":")) { /* sent while the memory is on the device */
    char device[32];
    ckpt_format_bytes((uint64_t)json_number(reply, "device_bytes"), device, sizeof device);
    printf("; device memory %s in %.0f regions", device, json_number(reply, "device_regions"));
  }
  double held[64];
  int held_devices = json_numbers(reply, "held_bytes", held, 64);
  uint64_t held_total = 0;
  for (int d = 0; d < held_devices; d++) held_total += held[d] > 0 ? (uint64_t)held[d] : 0;
  if (held_total) { /* NVML's figure (as nvidia-smi): the context and libraries' memory too */
    char all[32];
    ckpt_format_bytes(held_total, all, sizeof all);
    printf("; %s on the GPU in all (context included)", all);
  }
  printf("; host image %s in %.0f regions", bytes, json_number(reply, "image_regions"));
  double per_device[64];
  int devices = json_numbers(reply, "image_device_bytes", per_device, 64);
  if (devices > 1) { /* a program on several devices: what each of them gave */
    printf(" (");
    for (int d = 0; d < devices; d++) {
      char device_bytes[32];
      ckpt_format_bytes((uint64_t)per_device[d], device_bytes, sizeof device_bytes);
      printf("%sdevice %d: %s", d ? ", " : "", d, device_bytes);
    }
    printf(")");
  }
  if (json_number(reply, "managed_moved") > 0) {
    char moved[32];
    ckpt_format_bytes((uint64_t)json_number(reply, "managed_moved_bytes"), moved, sizeof moved);
    printf("; managed memory moved to host: %s in %.0f allocations", moved,
           json_number(reply, "managed_moved"));
  }
  if (json_number(reply, "moved_bytes") > 0) { /* translate: the last resume */
    char moved[32];
    ckpt_format_bytes((uint64_t)json_number(reply, "moved_bytes"), moved, sizeof moved);
    printf("; the last resume put %s in %.0f chunks at new device addresses (pointers to them "
           "kept in device memory are stale)", moved, json_number(reply, "moved_chunks"));
  }
  if (json_number(reply, "arrays_held") > 0) {
    char held[32];
    ckpt_format_bytes((uint64_t)json_number(reply, "array_held_bytes"), held, sizeof held);
    printf("; still on the device: %.0f CUDA arrays (%s)", json_number(reply, "arrays_held"), held);
  }
  if (json_true(reply, "released_all")) printf("; the driver holds the rest: nothing on the GPU");
  if (strstr(reply, "\"reserve_bytes\":")) { /* CUDAW_CKPT_RESERVE */
    char reserve[32], used[32];
    ckpt_format_bytes((uint64_t)json_number(reply, "reserve_bytes"), reserve, sizeof reserve);
    ckpt_format_bytes((uint64_t)json_number(reply, "reserve_used"), used, sizeof used);
    printf("; image reserve %s page-locked, %s used%s", reserve, used,
           json_true(reply, "reserve_refused") ? " (refused to grow: host-memory budget)" : "");
  }
  char dir[4096];
  if (ctl_json_get(reply, "image_dir", dir, sizeof dir)) {
    char on_disk[32];
    ckpt_format_bytes((uint64_t)json_number(reply, "disk_bytes"), on_disk, sizeof on_disk);
    printf("; image on disk: %s in %s", on_disk, dir);
  }
  if (json_number(reply, "kept_bytes") > 0) {
    char kept[32];
    ckpt_format_bytes((uint64_t)json_number(reply, "kept_bytes"), kept, sizeof kept);
    printf("; still on the device: %s cudaw cannot release (not virtualised or shared with "
           "another process)", kept);
  }
  char not_held[160];
  if (ctl_json_get(reply, "not_held", not_held, sizeof not_held)) {
    char stays[32];
    ckpt_format_bytes((uint64_t)json_number(reply, "not_held_bytes"), stays, sizeof stays);
    printf("; %s: %.0f bytes (%s) stay on the device, which a checkpoint cannot release",
           not_held, json_number(reply, "not_held_bytes"), stays);
  }
  if (json_number(reply, "ungated_functions") > 0)
    printf("; NOT fully held: %.0f driver functions run without cudaw's gate (named in the log)",
           json_number(reply, "ungated_functions"));
  if (strstr(reply, "\"gpu_share\":")) {
    char share[32] = "none";
    if (json_number(reply, "gpu_share") > 0)
      snprintf(share, sizeof share, "%.0f%%", json_number(reply, "gpu_share"));
    printf("; GPU share %s, GPU time %.1f%% of the last second (launches held back %.3f s)",
           share, 100.0 * json_number(reply, "gpu_busy_fraction"),
           json_number(reply, "gpu_held_seconds"));
  }
  if (ctl_json_get(reply, "last_op", last_op, sizeof last_op)) {
    char last_bytes[32];
    ckpt_format_bytes((uint64_t)json_number(reply, "last_bytes"), last_bytes, sizeof last_bytes);
    ctl_json_get(reply, "last_reason", last_reason, sizeof last_reason);
    if (json_true(reply, "last_ok"))
      printf("; last %s: %s in %.3f s (%.2f GB/s)", last_op, last_bytes,
             json_number(reply, "last_seconds"), json_number(reply, "last_gbps"));
    else
      printf("; last %s failed: %s", last_op, last_reason);
  }
  printf("\n");
}

void ctl_print_transition(pid_t pid, const char *reply) {
  char op[16] = "", state[16] = "", bytes[32];
  ctl_json_get(reply, "op", op, sizeof op);
  ctl_json_get(reply, "state", state, sizeof state);
  ckpt_format_bytes((uint64_t)json_number(reply, "bytes"), bytes, sizeof bytes);
  if (strcmp(op, "checkpoint") == 0)
    printf("pid %ld %s: saved %s of %.0f regions in %.3f s (copy %.3f s, %.2f GB/s; gate closed "
           "%.3f ms after the request, drain %.3f ms, release %.3f ms)\n",
           (long)pid, state, bytes, json_number(reply, "regions"), json_number(reply, "seconds"),
           json_number(reply, "copy_seconds"), json_number(reply, "gbps"),
           json_number(reply, "gate_ms"), json_number(reply, "drain_ms"),
           json_number(reply, "memory_ms"));
  if (strcmp(op, "checkpoint") == 0 && json_true(reply, "live")) {
    char pre[32], re[32];
    ckpt_format_bytes((uint64_t)json_number(reply, "precopy_bytes"), pre, sizeof pre);
    ckpt_format_bytes((uint64_t)json_number(reply, "recopy_bytes"), re, sizeof re);
    printf("  live: %s copied in %.3f s while running, %s re-copied in the pause; stall %.3f ms\n",
           pre, json_number(reply, "precopy_seconds"), re, json_number(reply, "stall_ms"));
  }
  if (strcmp(op, "spill") == 0 || strcmp(op, "unspill") == 0) {
    char stored[32];
    ckpt_format_bytes((uint64_t)json_number(reply, "disk_stored"), stored, sizeof stored);
    printf("pid %ld %s: image of %s in %.0f regions %s: %s in files in %.3f s (%.2f GB/s of "
           "image)\n", (long)pid, state, bytes, json_number(reply, "regions"),
           strcmp(op, "spill") == 0 ? "written to disk, its host memory freed"
                                    : "read and verified from disk into host memory",
           stored, json_number(reply, "disk_seconds"), json_number(reply, "disk_gbps"));
    return;
  }
  if (strcmp(op, "checkpoint") != 0 && json_true(reply, "memory_beside"))
    printf("pid %ld %s: restored and verified %s of %.0f regions in %.3f s (copy %.3f s, %.2f "
           "GB/s; memory re-created beside the copy: %.3f ms in the driver, the copy waited "
           "%.3f ms)\n",
           (long)pid, state, bytes, json_number(reply, "regions"), json_number(reply, "seconds"),
           json_number(reply, "copy_seconds"), json_number(reply, "gbps"),
           json_number(reply, "memory_ms"), json_number(reply, "memory_wait_ms"));
  else if (strcmp(op, "checkpoint") != 0)
    printf("pid %ld %s: restored and verified %s of %.0f regions in %.3f s (copy %.3f s, %.2f "
           "GB/s; recreate %.3f ms)\n",
           (long)pid, state, bytes, json_number(reply, "regions"), json_number(reply, "seconds"),
           json_number(reply, "copy_seconds"), json_number(reply, "gbps"),
           json_number(reply, "memory_ms"));
  if (json_number(reply, "disk_bytes") > 0) {
    char stored[32], peak[32];
    ckpt_format_bytes((uint64_t)json_number(reply, "disk_stored"), stored, sizeof stored);
    ckpt_format_bytes((uint64_t)json_number(reply, "disk_peak_bytes"), peak, sizeof peak);
    if (strcmp(op, "checkpoint") == 0)
      printf("  image written to disk: %s in files in %.3f s (%.2f GB/s of image)\n", stored,
             json_number(reply, "disk_seconds"), json_number(reply, "disk_gbps"));
    else
      printf("  image read and verified from disk, streamed to the device: %s in files in %.3f s "
             "(%.2f GB/s of image; host memory beyond the staging buffers: %s)\n", stored,
             json_number(reply, "disk_seconds"), json_number(reply, "disk_gbps"), peak);
  }
  if (json_number(reply, "driver_seconds") > 0)
    printf("  driver's process %s: %.3f s%s\n",
           strcmp(op, "checkpoint") == 0 ? "checkpoint" : "restore",
           json_number(reply, "driver_seconds"),
           json_true(reply, "released_all") ? "; nothing left on the GPU" : "");
}

static int command_pid(const char *command, pid_t pid) {
  char request[4300], reply[8192];
  snprintf(request, sizeof request, "%s\n", command);
  bool status = strcmp(command, "status") == 0;
  int code = status ? ask(pid, request, reply, sizeof reply, STATUS_SECONDS)
                    : ctl_ask(pid, request, reply, sizeof reply);
  if (code == ASK_STOPPED) {
    print_stopped(pid, false);
    return EXIT_OK;
  }
  if (code != EXIT_OK) return code;
  code = ctl_exit_for_reply(reply);
  if (json_output) printf("%s\n", reply);
  else if (code != EXIT_OK) ctl_print_failure(pid, reply);
  else if (status) print_status(pid, reply);
  else ctl_print_transition(pid, reply);
  /* A status that looks fine while cudaw holds none of the memory would be a false success. */
  if (code == EXIT_OK && strcmp(command, "status") == 0 && strstr(reply, "\"not_held\":"))
    code = EXIT_NOT_HELD;
  return code;
}

/* cudaw-ctl limit <pid> [--gpu PERCENT|off]: set (or show) the GPU share. */
static int command_limit(pid_t pid, const char *gpu) {
  char request[128], reply[8192];
  if (gpu) {
    char *end;
    long value = strtol(gpu, &end, 10);
    if (*end == '%') end++;
    bool off = strcmp(gpu, "off") == 0;
    if (!off && (end == gpu || *end || value < 0 || value > 100))
      return ctl_usage_error("limit: --gpu %s: expected a percentage from 1 to 100, or 0 or off "
                             "(no limit)", gpu);
    snprintf(request, sizeof request, "limit gpu=%ld\n", off ? 0L : value);
  } else {
    snprintf(request, sizeof request, "limit\n");
  }
  int code = ctl_ask(pid, request, reply, sizeof reply);
  if (code != EXIT_OK) return code;
  code = ctl_exit_for_reply(reply);
  if (json_output) printf("%s\n", reply);
  else if (code != EXIT_OK) ctl_print_failure(pid, reply);
  else {
    double share = json_number(reply, "gpu_share"), before = json_number(reply, "previous_gpu_share");
    if (!strstr(reply, "\"gpu_share\":")) share = 0;
    char now_text[16] = "none", before_text[16] = "none";
    if (share > 0) snprintf(now_text, sizeof now_text, "%.0f%%", share);
    if (before > 0) snprintf(before_text, sizeof before_text, "%.0f%%", before);
    if (gpu)
      printf("pid %ld: GPU share %s (was %s)\n", (long)pid, now_text, before_text);
    else if (share > 0)
      printf("pid %ld: GPU share %.0f%%; GPU time %.1f%% of the last second, %.3f s in all; "
             "launches held back %.3f s\n", (long)pid, share,
             100.0 * json_number(reply, "gpu_busy_fraction"), json_number(reply, "gpu_busy_seconds"),
             json_number(reply, "gpu_held_seconds"));
    else
      printf("pid %ld: no GPU share (not metered)\n", (long)pid);
  }
  return code;
}

static int compare_pids(const void *a, const void *b) {
  pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
  return (x > y) - (x < y);
}

static int command_list(void) {
  struct ckpt_options options;
  ckpt_options_from_env(&options, NULL, 0);
  const char *dir = options.run_dir;
  ckpt_clean_stale(dir);
  pid_t pids[1024];
  size_t count = 0;
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *entry;
    while ((entry = readdir(d)) && count < sizeof pids / sizeof pids[0]) {
      pid_t pid = ckpt_socket_name_pid(entry->d_name);
      if (pid) pids[count++] = pid;
    }
    closedir(d);
  } else if (errno == EACCES) {
    fprintf(stderr, "cudaw-ctl: %s: permission denied\n", dir);
    return EXIT_PERMISSION;
  }
  /* Programs in containers (docs/kubernetes.md), by host pid. */
  count += ckpt_container_pids(CKPT_CONTAINERS_DIR, pids + count, sizeof pids / sizeof pids[0] - count);
  qsort(pids, count, sizeof pids[0], compare_pids);
  if (json_output) printf("[");
  else printf("%-8s %-9s %s\n", "PID", "STATE", "DETAIL");
  bool first = true;
  for (size_t i = 0; i < count; i++) {
    char reply[4096];
    /* One that does not answer (stopped, hung) must not hold up the rows of the others. */
    int code = ask(pids[i], "status\n", reply, sizeof reply, STATUS_SECONDS);
    if (code == EXIT_NO_PROCESS || code == EXIT_NOT_CUDAW) continue; /* gone meanwhile */
    if (code == ASK_STOPPED) {
      if (json_output && !first) printf(",");
      print_stopped(pids[i], true);
    } else if (json_output) {
      if (code == EXIT_OK) printf("%s%s", first ? "" : ",", reply);
      else printf("%s{\"ok\":false,\"pid\":%ld,\"error\":\"%s\"}", first ? "" : ",", (long)pids[i],
                  code == EXIT_PERMISSION ? "permission" : "failed");
    } else if (code == EXIT_OK) {
      char state[16] = "?", bytes[32];
      ctl_json_get(reply, "state", state, sizeof state);
      ckpt_format_bytes((uint64_t)json_number(reply, "image_bytes"), bytes, sizeof bytes);
      printf("%-8ld %-9s image %s", (long)pids[i], state, bytes);
      if (strstr(reply, "\"device_bytes\":")) {
        ckpt_format_bytes((uint64_t)json_number(reply, "device_bytes"), bytes, sizeof bytes);
        printf(", device %s", bytes);
      }
      printf("\n");
    } else {
      printf("%-8ld %-9s %s\n", (long)pids[i], "?",
             code == EXIT_PERMISSION ? "permission denied" : "no answer");
    }
    first = false;
  }
  if (json_output) printf("]\n");
  return EXIT_OK;
}

static int parse_pid(const char *text, pid_t *pid) {
  char *end;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno || end == text || *end || value <= 0 || value > 0x7fffffff) return -EINVAL;
  *pid = (pid_t)value;
  return 0;
}

/* What `checkpoint` was asked to do beyond the default, and where CRIU is. */
static struct {
  bool release_all, compress, live;
  const char *to_dir;
  const char *gpu; /* limit --gpu */
  const char *criu;
  char **criu_args; /* after "--" */
  int criu_arg_count;
} flags;

/* DIR made absolute (the process may have another working directory); 0 or an exit code. */
static int absolute_dir(const char *dir, char *out, size_t len) {
  char cwd[PATH_MAX];
  int n;
  if (dir[0] == '/') n = snprintf(out, len, "%s", dir);
  else if (getcwd(cwd, sizeof cwd)) n = snprintf(out, len, "%.2047s/%.2047s", cwd, dir);
  else return EXIT_FAILED;
  if (n < 0 || strchr(out, '\n') || strlen(out) >= 4000) {
    return ctl_usage_error("%s: not a usable directory name", dir);
  }
  return EXIT_OK;
}

/* spill <pid> DIR: the paused program writes its image to DIR (made absolute). */
static int command_spill(pid_t pid, const char *to_dir) {
  char request[4300], dir[4096];
  int code = absolute_dir(to_dir, dir, sizeof dir);
  if (code) return code;
  snprintf(request, sizeof request, "spill%s to=%s", flags.compress ? " compress=zstd" : "", dir);
  return command_pid(request, pid);
}

static int command_checkpoint(pid_t pid, const char *to_dir) {
  char request[4300], dir[4096] = "";
  if (to_dir) {
    int code = absolute_dir(to_dir, dir, sizeof dir);
    if (code) return code;
  }
  snprintf(request, sizeof request, "checkpoint%s%s%s%s%s", flags.live ? " live" : "",
           flags.release_all ? " release=all" : "",
           flags.compress ? " compress=zstd" : "", dir[0] ? " to=" : "", dir);
  return command_pid(request, pid);
}

/* Run criu with `action` and the directory; 0 or an exit code. */
static int run_criu(const char *action, const char *criu_dir, pid_t pid, double *seconds) {
  const char *criu = flags.criu ? flags.criu : getenv("CUDAW_CRIU") ? getenv("CUDAW_CRIU") : "criu";
  char pid_text[16], log_name[32];
  snprintf(pid_text, sizeof pid_text, "%ld", (long)pid);
  snprintf(log_name, sizeof log_name, "%s.log", action);
  const char *argv[64];
  int n = 0;
  argv[n++] = criu;
  argv[n++] = action;
  argv[n++] = "-D";
  argv[n++] = criu_dir;
  argv[n++] = "-o";
  argv[n++] = log_name;
  argv[n++] = "-v4";
  argv[n++] = "--shell-job";
  if (strcmp(action, "dump") == 0) {
    argv[n++] = "-t";
    argv[n++] = pid_text;
  } else {
    argv[n++] = "-d"; /* detach: the restored process runs on after criu exits */
  }
  for (int i = 0; i < flags.criu_arg_count && n < 63; i++) argv[n++] = flags.criu_args[i];
  argv[n] = NULL;
  double t0 = ckpt_now();
  pid_t child = fork();
  if (child == 0) {
    execvp(criu, (char **)argv);
    fprintf(stderr, "cudaw-ctl: cannot run %s: %s (use --criu PATH or CUDAW_CRIU)\n", criu,
            strerror(errno));
    _exit(127);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) < 0) return EXIT_FAILED;
  *seconds = ckpt_now() - t0;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return EXIT_OK;
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 127)) {
    fprintf(stderr, "cudaw-ctl: criu %s failed (exit %d); the end of %s/%s:\n", action,
            WIFEXITED(status) ? WEXITSTATUS(status) : -1, criu_dir, log_name);
    char command[PATH_MAX + 64];
    snprintf(command, sizeof command, "grep -E 'Error|error|Warn' '%s/%s' | tail -8 >&2", criu_dir,
             log_name);
    if (system(command) != 0) fprintf(stderr, "  (no log)\n");
  }
  return EXIT_FAILED;
}

static int command_dump(pid_t pid, const char *dir_arg) {
  char dir[4096], image[4200], criu_dir[4200], pid_file[4200];
  int code = absolute_dir(dir_arg, dir, sizeof dir);
  if (code) return code;
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
    fprintf(stderr, "cudaw-ctl: %s: %s\n", dir, strerror(errno));
    return EXIT_FAILED;
  }
  snprintf(image, sizeof image, "%s/image", dir);
  snprintf(criu_dir, sizeof criu_dir, "%s/criu", dir);
  snprintf(pid_file, sizeof pid_file, "%s/pid", dir);
  if (mkdir(criu_dir, 0700) != 0 && errno != EEXIST) {
    fprintf(stderr, "cudaw-ctl: %s: %s\n", criu_dir, strerror(errno));
    return EXIT_FAILED;
  }
  /* CRIU runs as root; the process writes its GPU image itself, as its own user. DIR and its
   * criu/ stay root's (a user who could change them would have root restore what they wrote);
   * DIR/image is the process owner's, 0700, and DIR only lets it through (0711). */
  struct stat owner;
  char proc[32];
  snprintf(proc, sizeof proc, "/proc/%ld", (long)pid);
  if (geteuid() == 0 && stat(proc, &owner) == 0 && owner.st_uid != 0) {
    if ((mkdir(image, 0700) != 0 && errno != EEXIST) || chmod(dir, 0711) != 0 ||
        chown(image, owner.st_uid, owner.st_gid) != 0 || chmod(image, 0700) != 0) {
      fprintf(stderr, "cudaw-ctl: %s: cannot make it uid %u's: %s\n", image,
              (unsigned)owner.st_uid, strerror(errno));
      return EXIT_FAILED;
    }
  }
  flags.release_all = true;
  if ((code = command_checkpoint(pid, image)) != EXIT_OK) return code;
  int pid_fd = open(pid_file, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  FILE *f = pid_fd >= 0 ? fdopen(pid_fd, "w") : NULL;
  if (!f && pid_fd >= 0) close(pid_fd);
  if (!f || fprintf(f, "%ld\n", (long)pid) < 0 || fclose(f) != 0) {
    fprintf(stderr, "cudaw-ctl: %s: %s; pid %ld stays paused\n", pid_file, strerror(errno), (long)pid);
    return EXIT_FAILED;
  }
  double seconds = 0;
  if ((code = run_criu("dump", criu_dir, pid, &seconds)) != EXIT_OK) {
    fprintf(stderr, "cudaw-ctl: pid %ld stays paused (cudaw-ctl resume %ld continues it)\n",
            (long)pid, (long)pid);
    return code;
  }
  printf("pid %ld dumped by criu into %s in %.3f s; the process has ended\n", (long)pid, criu_dir,
         seconds);
  return EXIT_OK;
}

static int command_restore(const char *dir_arg) {
  char dir[4096], criu_dir[4200], pid_file[4200];
  int code = absolute_dir(dir_arg, dir, sizeof dir);
  if (code) return code;
  snprintf(criu_dir, sizeof criu_dir, "%s/criu", dir);
  snprintf(pid_file, sizeof pid_file, "%s/pid", dir);
  long value = 0;
  FILE *f = fopen(pid_file, "re");
  if (!f || fscanf(f, "%ld", &value) != 1 || value <= 0) {
    fprintf(stderr, "cudaw-ctl: %s: not a dump made by cudaw-ctl dump (%s)\n", dir,
            f ? "bad pid file" : strerror(errno));
    if (f) fclose(f);
    return EXIT_FAILED;
  }
  fclose(f);
  double seconds = 0;
  if ((code = run_criu("restore", criu_dir, (pid_t)value, &seconds)) != EXIT_OK) return code;
  printf("pid %ld restored by criu from %s in %.3f s\n", value, criu_dir, seconds);
  return command_pid("resume", (pid_t)value);
}

/* A number of milliseconds (or tries) for a group option: 1 to 3,600,000; 0 if malformed. */
static uint32_t parse_count(const char *text) {
  char *end;
  errno = 0;
  unsigned long value = strtoul(text, &end, 10);
  return errno || end == text || *end || *text == '-' || value > 3600000 ? 0 : (uint32_t)value;
}

/* cudaw-ctl [--json] checkpoint|resume --group [options] <pid>... (see usage()). */
static int group_main(int argc, char **argv) {
  struct ctl_group_options options = {.drain_ms = 2000, .settle_ms = 20, .lease_ms = 30000,
                                      .attempts = 10};
  const char *command = NULL;
  char words[64] = "", to_dir[4096];
  pid_t *pids = calloc((size_t)argc, sizeof *pids);
  int count = 0, code = EXIT_OK;
  if (!pids) return EXIT_FAILED;
  for (int i = 1; code == EXIT_OK && i < argc; i++) {
    const char *a = argv[i];
    uint32_t *number = !strcmp(a, "--drain-ms") ? &options.drain_ms
                       : !strcmp(a, "--settle-ms") ? &options.settle_ms
                       : !strcmp(a, "--lease-ms") ? &options.lease_ms : NULL;
    bool valued = number || !strcmp(a, "--attempts") || !strcmp(a, "--to");
    pid_t pid;
    if (valued && i + 1 >= argc) code = ctl_usage_error("%s needs a value", a);
    else if (!strcmp(a, "--group")) continue;
    else if (!strcmp(a, "--json")) options.json = true;
    else if (!strcmp(a, "--release-all")) strcat(words, " release=all");
    else if (!strcmp(a, "--zstd")) strcat(words, " compress=zstd");
    else if (number && (*number = parse_count(argv[++i])) == 0)
      code = ctl_usage_error("%s %s: expected a number of milliseconds from 1 to 3600000", a,
                             argv[i]);
    else if (number) continue;
    else if (!strcmp(a, "--attempts")) {
      options.attempts = (int)parse_count(argv[++i]);
      if (options.attempts < 1 || options.attempts > 1000)
        code = ctl_usage_error("--attempts %s: expected a number from 1 to 1000", argv[i]);
    } else if (!strcmp(a, "--to")) {
      code = absolute_dir(argv[++i], to_dir, sizeof to_dir);
      options.to_dir = to_dir;
    } else if (!command && (!strcmp(a, "checkpoint") || !strcmp(a, "resume"))) command = a;
    else if (!command)
      code = ctl_usage_error("--group: expected checkpoint or resume, not '%s'", a);
    else if (a[0] == '-') code = ctl_usage_error("%s --group: unknown option '%s'", command, a);
    else if (parse_pid(a, &pid) != 0)
      code = ctl_usage_error("%s --group: '%s' is not a pid", command, a);
    else {
      for (int k = 0; k < count && code == EXIT_OK; k++)
        if (pids[k] == pid) code = ctl_usage_error("pid %ld is given twice", (long)pid);
      pids[count++] = pid;
    }
  }
  bool checkpoint = command && !strcmp(command, "checkpoint");
  if (code != EXIT_OK) {
  } else if (!command) {
    code = ctl_usage_error("--group: expected checkpoint or resume");
  } else if (count == 0) {
    code = ctl_usage_error("%s --group: no pid given", command);
  } else if (count > CTL_GROUP_MAX) {
    code = ctl_usage_error("%s --group: %d pids; at most %d", command, count, CTL_GROUP_MAX);
  } else if (!checkpoint && (words[0] || options.to_dir)) {
    code = ctl_usage_error("resume --group takes no --release-all, --zstd or --to (they are "
                           "checkpoint's)");
  } else if (strlen(words) >= sizeof words - 16) {
    code = ctl_usage_error("checkpoint --group: a flag is given twice");
  } else {
    options.checkpoint_words = words;
    code = checkpoint ? ctl_group_checkpoint(pids, count, &options)
                      : ctl_group_resume(pids, count, &options);
  }
  free(pids);
  return code;
}

int ctl_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("cudaw-ctl: ", stderr);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\nTry 'cudaw-ctl --help'.\n", stderr);
  return EXIT_USAGE;
}

/* The pid argument of `command`: EXIT_OK, or a usage error naming what is wrong. */
static int pid_argument(const char *command, int count, const char *const *args, int wanted,
                        pid_t *pid) {
  if (count < 2) return ctl_usage_error("%s: no pid given", command);
  if (parse_pid(args[1], pid) != 0)
    return ctl_usage_error("%s: '%s' is not a pid", command, args[1]);
  if (count > wanted) return ctl_usage_error("%s: unexpected argument '%s'", command, args[wanted]);
  return EXIT_OK;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return EXIT_OK;
    }
    if (strcmp(argv[i], "--version") == 0) {
      printf("cudaw-ctl %s\n", CUDAW_VERSION);
      return EXIT_OK;
    }
    if (strcmp(argv[i], "--") == 0) break;
  }
  /* CUDAW_CRIU is checked where criu runs: `list` must not fail for want of it. */
  static const char *const read_here[] = {"CUDAW_STRICT", "CUDAW_RUN_DIR", "CUDAW_SCHED_SOCKET",
                                          NULL};
  int bad_options = ckpt_options_check_env("cudaw-ctl", read_here);
  if (bad_options) return bad_options;
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--group") == 0) return group_main(argc, argv);
  const char *args[8];
  int count = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    bool valued = !strcmp(a, "--gpu") || !strcmp(a, "--to") || !strcmp(a, "--criu");
    if (valued && i + 1 >= argc) return ctl_usage_error("%s needs a value", a);
    if (strcmp(a, "--json") == 0) {
      json_output = true;
    } else if (strcmp(a, "--release-all") == 0) {
      flags.release_all = true;
    } else if (strcmp(a, "--live") == 0) {
      flags.live = true;
    } else if (strcmp(a, "--zstd") == 0) {
      flags.compress = true;
    } else if (strcmp(a, "--gpu") == 0) {
      flags.gpu = argv[++i];
    } else if (strcmp(a, "--to") == 0 || strcmp(a, "--criu") == 0) {
      *(a[2] == 't' ? &flags.to_dir : &flags.criu) = argv[++i];
    } else if (strcmp(a, "--") == 0) {
      flags.criu_args = argv + i + 1;
      flags.criu_arg_count = argc - i - 1;
      break;
    } else if (a[0] == '-' && a[1] && strcmp(a, "--stop") && strcmp(a, "--force")) {
      return ctl_usage_error("unknown option '%s'", a); /* those two are sched's (ctl_sched.c) */
    } else if (count < (int)(sizeof args / sizeof args[0])) {
      args[count++] = a;
    } else {
      return ctl_usage_error("too many arguments ('%s')", a);
    }
  }
  if (count == 0) return ctl_usage_error("no command given");
  const char *command = args[0];
  static const char *const commands[] = {"list", "status", "checkpoint", "resume", "dump",
                                         "restore", "limit", "sched", "priority", "spill",
                                         "unspill"};
  bool known = false;
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    known = known || strcmp(command, commands[i]) == 0;
  if (!known) return ctl_usage_error("unknown command '%s'", command);
  /* Each flag belongs to some commands only: given to another, it is a mistake worth naming. */
  bool checkpoint = strcmp(command, "checkpoint") == 0, spill = strcmp(command, "spill") == 0;
  const char *misplaced = flags.live && !checkpoint               ? "--live"
                          : flags.compress && !checkpoint && !spill ? "--zstd"
                          : flags.to_dir && !checkpoint           ? "--to"
                          : flags.release_all && !checkpoint      ? "--release-all"
                          : flags.gpu && strcmp(command, "limit") ? "--gpu"
                          : flags.criu && strcmp(command, "dump") && strcmp(command, "restore")
                              ? "--criu"
                          : flags.criu_args && strcmp(command, "dump") && strcmp(command, "restore")
                              ? "--"
                              : NULL;
  if (misplaced) return ctl_usage_error("%s: %s does not apply to it", command, misplaced);
  if (flags.compress && !flags.to_dir && !spill)
    return ctl_usage_error("checkpoint: --zstd needs --to DIR (it compresses the image written "
                           "to disk)");
  if (strcmp(command, "list") == 0) {
    if (count > 1) return ctl_usage_error("list: unexpected argument '%s'", args[1]);
    return command_list();
  }
  if (strcmp(command, "sched") == 0 || strcmp(command, "priority") == 0) {
    if (!sched_ctl_main)
      return ctl_usage_error("%s: this cudaw-ctl was built without cudawd", command);
    return sched_ctl_main(count, args, json_output);
  }
  if (strcmp(command, "restore") == 0) {
    if (count < 2) return ctl_usage_error("restore: no directory given");
    if (count > 2) return ctl_usage_error("restore: unexpected argument '%s'", args[2]);
    return command_restore(args[1]);
  }
  pid_t pid;
  int code = pid_argument(command, count, args,
                          strcmp(command, "dump") == 0 || spill ? 3 : 2, &pid);
  if (code != EXIT_OK) return code;
  if (spill) {
    if (count < 3) return ctl_usage_error("spill: no directory given (cudaw-ctl spill <pid> DIR)");
    return command_spill(pid, args[2]);
  }
  if (strcmp(command, "limit") == 0) return command_limit(pid, flags.gpu);
  if (checkpoint) return command_checkpoint(pid, flags.to_dir);
  if (strcmp(command, "dump") == 0) {
    if (count < 3) return ctl_usage_error("dump: no directory given (cudaw-ctl dump <pid> DIR)");
    return command_dump(pid, args[2]);
  }
  return command_pid(command, pid); /* status, resume */
}
