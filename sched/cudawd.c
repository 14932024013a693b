/* cudawd: the per-machine scheduler that lets programs under cudaw (CUDAW_SHARE=1) share GPUs
 * whose memory they do not fit in together, by checkpointing some of them in turns. This file is
 * the daemon's shell: options, the socket <run dir>/cudawd.sock, connections and messages; the
 * policy is in schedule.c, the reports in report.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ckpt.h"
#include "daemon.h"
#include "vmem.h"

static volatile sig_atomic_t stopping;

static void on_stop(int signo)
{
  (void)signo;
  stopping = 1;
}

static void usage(FILE *out)
{
  fprintf(out,
          "usage: cudawd [--system] [--quantum SEC] [--min-run SEC] [--device-memory SIZE]\n"
          "              [--swap-timeout SEC] [--gpu-list DIR|none] [--metrics-file PATH]\n"
          "              [--host-memory SIZE|N%%|off] [--pool-release SEC] [--idle-exit SEC]\n"
          "              [--max-per-user N] [--spill-dir DIR]\n"
          "              [--client-timeout SEC] [--log-max SIZE] [--no-resume-ahead]\n"
          "              [--verbose]\n"
          "       cudawd --help | --version\n"
          "\n"
          "Schedules the programs run with `cudaw run --share` (CUDAW_SHARE=1) on this machine's\n"
          "GPUs: an allocation that does not fit waits while programs whose turn is over are\n"
          "checkpointed to host memory; they come back when memory frees or their turn comes.\n"
          "When the host cannot hold the image of the program going out beside that of the one\n"
          "coming in, cudawd exchanges them piece by piece through a bounded window (both under\n"
          "remap with pieces, CUDAW_VMEM_PIECE; the incoming image in private host memory).\n"
          "Listens on CUDAW_SCHED_SOCKET (default <run dir>/%s; same user or root only).\n"
          "\n"
          "  --system             the node's cudawd, shared by every user (run as root; default\n"
          "                       socket /run/cudaw/%s, mode 0666 in a 0755 directory): any\n"
          "                       user's program may join; each may change only its own user's\n"
          "                       programs; only cudawd swaps programs of several users\n"
          "  --quantum SEC        length of a turn, times the program's priority (default 30)\n"
          "  --min-run SEC        a program idle on the GPU keeps its turn this long (default 1)\n"
          "  --device-memory SIZE memory to hand out per device: bytes, K/M/G/T or N%% of the\n"
          "                       device (default 90%%: the rest is contexts and libraries)\n"
          "  --swap-timeout SEC   a checkpoint or resume not answered by then stops holding up\n"
          "                       the others (default 600)\n"
          "  --gpu-list DIR|none  a device key must be the UUID of a GPU listed there, when the\n"
          "                       directory exists (default /proc/driver/nvidia/gpus)\n"
          "  --host-memory SIZE|N%%|off\n"
          "                       the most host memory kept ready (faulted in ahead of the\n"
          "                       swaps, huge pages where the kernel has them) for the images of\n"
          "                       the programs it swaps out; only what their images need is\n"
          "                       faulted in (default: the least of 50%% of RAM less the other\n"
          "                       cudawds' pools on this host and available memory less 8 GiB;\n"
          "                       a size the host cannot hold is refused)\n"
          "  --pool-release SEC   give the pool's memory back to the kernel once it has been\n"
          "                       more than the programs need for this long (default 60)\n"
          "  --idle-exit SEC      exit after this long without a program or connection, freeing\n"
          "                       the pool and the socket (default 600; 0: never, the default\n"
          "                       with --system);\n"
          "                       `cudaw-ctl sched --stop` stops it at once\n"
          "  --spill-dir DIR      the disk tier: when host memory runs short, the coldest\n"
          "                       swapped-out image moves to a directory of its program's own\n"
          "                       under DIR (written by the program, as its user) and streams\n"
          "                       back to the device on its turn; DIR must be on a disk, not\n"
          "                       tmpfs (default: CUDAW_SCHED_SPILL_DIR, else none: images\n"
          "                       stay in host memory)\n"
          "  --metrics-file PATH  write the figures in Prometheus text format, every 2 s\n"
          "  --max-per-user N     --system: programs one user (not root) may have joined at\n"
          "                       once, and twice as many connections (default %d)\n"
          "  --client-timeout SEC a connection silent this long (never joined, or joined and\n"
          "                       never sent work) is closed when its room is needed; an order\n"
          "                       to a program that never sent work times out after it\n"
          "                       (default 10)\n"
          "  --log-max SIZE       rotate the log file (to <log>.1) past this size (default 16M;\n"
          "                       0: never); repeated lines any client can cause are summed up\n"
          "  --no-resume-ahead    bring a swapped-out program that is idle back only when it\n"
          "                       calls the GPU (default: also ahead of that, when the device\n"
          "                       has room for it and no program waits)\n"
          "  --verbose            log every message and decision\n",
          SCHED_SOCKET_NAME, SCHED_SOCKET_NAME, SCHED_DEFAULT_PER_USER);
}

static int parse_seconds(const char *text, double *out)
{
  char *end;
  errno = 0;
  double value = strtod(text, &end);
  if (errno || end == text || *end || !(value > 0) || value > 86400) return -EINVAL;
  *out = value;
  return 0;
}

/* A delay that may be 0 (--idle-exit 0: never; --pool-release 0: at once). */
static int parse_delay(const char *text, double *out)
{
  if (!strcmp(text, "0")) {
    *out = 0;
    return 0;
  }
  return parse_seconds(text, out);
}

static int parse_device_memory(const char *text, struct sched_config *config)
{
  size_t n = strlen(text);
  if (n > 1 && text[n - 1] == '%') {
    char *end;
    double percent = strtod(text, &end);
    if (end != text + n - 1 || !(percent > 0) || percent > 100) return -EINVAL;
    config->device_fraction = percent / 100;
    config->device_memory = 0;
    return 0;
  }
  return vmem_parse_size(text, 0, &config->device_memory) == 0 && config->device_memory
             ? 0 : -EINVAL;
}

static int parse_args(int argc, char **argv, struct sched_config *config)
{
  *config = (struct sched_config){.quantum = 30, .min_run = 1, .idle_cpu = 0.02,
                                  .device_fraction = 0.9, .swap_timeout = 600,
                                  .gpu_list = "/proc/driver/nvidia/gpus",
                                  .max_per_user = SCHED_DEFAULT_PER_USER, .client_timeout = 10,
                                  .log_max = 16ull << 20, .pool_release = 60,
                                  .idle_exit = -1 /* the default: 600, 0 with --system */,
                                  .resume_ahead = true};
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0;
    if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(arg, "--version")) {
      printf("cudawd %s\n", CUDAW_VERSION);
      exit(0);
    } else if (!strcmp(arg, "--verbose") || !strcmp(arg, "-v")) {
      config->verbose = true;
      continue;
    } else if (!strcmp(arg, "--system")) {
      config->system = true;
      continue;
    } else if (!strcmp(arg, "--no-resume-ahead")) {
      config->resume_ahead = false;
      continue;
    } else if (strcmp(arg, "--quantum") && strcmp(arg, "--min-run") &&
               strcmp(arg, "--device-memory") && strcmp(arg, "--swap-timeout") &&
               strcmp(arg, "--gpu-list") && strcmp(arg, "--host-memory") &&
               strcmp(arg, "--metrics-file") && strcmp(arg, "--max-per-user") &&
               strcmp(arg, "--client-timeout") && strcmp(arg, "--log-max") &&
               strcmp(arg, "--pool-release") && strcmp(arg, "--idle-exit") &&
               strcmp(arg, "--spill-dir")) {
      fprintf(stderr, "cudawd: unknown %s '%s'\n", arg[0] == '-' ? "option" : "argument", arg);
      return -EINVAL;
    } else if (!value) {
      fprintf(stderr, "cudawd: %s needs a value\n", arg);
      return -EINVAL;
    } else if (!strcmp(arg, "--quantum")) {
      rc = parse_seconds(value, &config->quantum);
    } else if (!strcmp(arg, "--min-run")) {
      rc = parse_seconds(value, &config->min_run);
    } else if (!strcmp(arg, "--device-memory")) {
      rc = parse_device_memory(value, config);
    } else if (!strcmp(arg, "--swap-timeout")) {
      rc = parse_seconds(value, &config->swap_timeout);
    } else if (!strcmp(arg, "--spill-dir")) {
      config->spill_dir = value; /* checked and opened by sched_spill_open */
    } else if (!strcmp(arg, "--gpu-list")) {
      config->gpu_list = value;
    } else if (!strcmp(arg, "--host-memory")) {
      rc = pool_parse_size(value, &config->host_memory);
      config->host_memory_set = true;
    } else if (!strcmp(arg, "--metrics-file")) {
      config->metrics_file = value;
    } else if (!strcmp(arg, "--max-per-user")) {
      char *end;
      long n = strtol(value, &end, 10);
      rc = end != value && !*end && n >= 1 && n <= SCHED_MAX_PROGRAMS ? 0 : -EINVAL;
      config->max_per_user = (int)n;
    } else if (!strcmp(arg, "--pool-release")) {
      rc = parse_delay(value, &config->pool_release);
    } else if (!strcmp(arg, "--idle-exit")) {
      rc = parse_delay(value, &config->idle_exit);
    } else if (!strcmp(arg, "--client-timeout")) {
      rc = parse_seconds(value, &config->client_timeout);
    } else if (!strcmp(arg, "--log-max")) {
      config->log_max = 0;
      if (strcmp(value, "0") != 0 &&
          (vmem_parse_size(value, 0, &config->log_max) != 0 || config->log_max < 65536))
        rc = -EINVAL;
    }
    if (rc) {
      fprintf(stderr, "cudawd: %s %s: expected %s\n", arg, value,
              !strcmp(arg, "--device-memory") ? "a size such as 40G, 512M or 90%"
              : !strcmp(arg, "--host-memory") ? "a size such as 64G, N% of RAM, or off"
              : !strcmp(arg, "--max-per-user") ? "a number of programs from 1 to 64"
              : !strcmp(arg, "--log-max") ? "a size of at least 64K, or 0 (never rotate)"
              : !strcmp(arg, "--pool-release") || !strcmp(arg, "--idle-exit")
                  ? "a number of seconds, or 0"
                  : "a number of seconds");
      return rc;
    }
    i++;
  }
  if (config->idle_exit < 0) config->idle_exit = config->system ? 0 : 600;
  return 0;
}

/* ---- the socket --------------------------------------------------------------------------- */

/* A system cudawd's directory: root's, 0755 (every user reaches the socket; nobody else may
 * plant names in it). Made so if it is root's and only its mode is narrower. */
static int system_dir_prepare(const char *dir)
{
  struct stat st;
  if (lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 &&
      (st.st_mode & 0777) != 0755 && !(st.st_mode & (S_IWGRP | S_IWOTH)) && chmod(dir, 0755) != 0)
    return -errno;
  return 0;
}

/* Listen on path (<dir>/cudawd.sock); -EADDRINUSE if a cudawd already answers there. */
static int open_listener(const char *path, bool system)
{
  char dir[sizeof ((struct sockaddr_un *)0)->sun_path], reason[200] = "";
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (!slash || slash == dir) {
    fprintf(stderr, "cudawd: %s: the socket must be in a directory of its own\n", path);
    return -EINVAL;
  }
  *slash = '\0';
  int rc = ckpt_run_dir_prepare(dir, reason, sizeof reason);
  if (!rc && system) rc = system_dir_prepare(dir);
  if (rc) {
    fprintf(stderr, "cudawd: %s\n", reason[0] ? reason : strerror(-rc));
    return rc;
  }
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof addr.sun_path) return -ENAMETOOLONG;
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  /* One cudawd per run dir: the lock is held for the daemon's life (two started at once would
   * otherwise unlink each other's socket). */
  char lock_path[sizeof addr.sun_path + 8];
  snprintf(lock_path, sizeof lock_path, "%s.lock", addr.sun_path);
  int lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) return -errno;
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    close(lock_fd);
    return errno == EWOULDBLOCK ? -EADDRINUSE : -errno;
  }
  /* Non-blocking: the loop takes every connection waiting, then goes on. */
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -errno;
  unlink(addr.sun_path); /* we hold the lock: a socket here was left by a cudawd that died */
  /* A system cudawd's socket: anyone may connect; what each peer may do is checked per
   * connection and per message (SO_PEERCRED). */
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
      chmod(addr.sun_path, system ? 0666 : 0600) != 0 || listen(fd, 64) != 0) {
    rc = -errno;
    close(fd);
    return rc;
  }
  return fd;
}

int sched_send(struct program *p, const struct sched_msg *msg)
{
  if (p->fd < 0) return -EPIPE;
  return send(p->fd, msg, sizeof *msg, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof *msg
             ? 0 : -errno;
}

/* Who may connect: the same user or root; with --system, anyone (each message is then checked
 * against the peer's uid). */
static bool peer_allowed(const struct daemon *d, int fd, pid_t *pid, uid_t *uid)
{
  struct ucred peer;
  socklen_t len = sizeof peer;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) return false;
  *pid = peer.pid;
  *uid = peer.uid;
  return d->config.system || peer.uid == geteuid() || peer.uid == 0;
}

/* Take the connections waiting (a few per step, so that a flood cannot starve the others). */
static void accept_some(struct daemon *d, int listen_fd)
{
  for (int i = 0; i < 32; i++) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    pid_t pid = 0;
    uid_t uid = (uid_t)-1;
    bool allowed = peer_allowed(d, fd, &pid, &uid);
    sched_peer_admit(d, fd, pid, uid, allowed);
  }
}

static struct program *find_pid(struct daemon *d, pid_t pid)
{
  for (struct program *p = d->programs; p; p = p->next)
    if (p->joined && !p->retired && !p->borrower && p->pid == pid) return p;
  return NULL;
}

/* The device index of the program's ordinal, or -1 when the program never described it. */
static int slot_of(const struct program *p, int ordinal)
{
  return ordinal >= 0 && ordinal < SCHED_MAX_DEVICES ? p->slot[ordinal] : -1;
}

/* A size a peer says it holds on slot must be at most what the device has. */
static bool plausible_size(const struct daemon *d, int slot, uint64_t bytes)
{
  return bytes <= d->device[slot].total;
}

/* Handle one message; false to close the connection (the peer broke the protocol). A program's
 * messages count only after its hello, and a result only when it was asked for: a buggy or
 * hostile peer can change nothing but its own standing. */
static bool on_message(struct daemon *d, struct program *p, const struct sched_msg *msg)
{
  double now = sched_now();
  int slot = slot_of(p, msg->device);
  if (d->config.verbose)
    fprintf(stderr, "cudawd: pid %ld: message %u device %d bytes %llu held %llu status %d value %d\n",
            (long)p->pid, msg->type, msg->device, (unsigned long long)msg->bytes,
            (unsigned long long)msg->held, msg->status, msg->value);
  bool program_message = msg->type == SCHED_DEVICE || msg->type == SCHED_ALLOC ||
                         msg->type == SCHED_USAGE || msg->type == SCHED_DONE ||
                         msg->type == SCHED_FAILED || msg->type == SCHED_POOL_MAPPED ||
                         msg->type == SCHED_BORROW;
  if (program_message && !p->joined) {
    sched_peer_count(d, p, true);
    sched_log_noisy(SCHED_NOISE_PROTOCOL, "cudawd: pid %ld: message %u before its hello: "
                    "closing\n", (long)p->pid, msg->type);
    return false;
  }
  sched_peer_count(d, p, false);
  p->last_message = now;
  /* Work: what a program under cudaw sends once it uses a device or answers an order. A peer
   * that only said hello may be a squatter: it is closed first when room is needed. */
  if (program_message && msg->type != SCHED_POOL_MAPPED) p->worked = true;
  if (msg->type == SCHED_GPU_IDLE && p->joined) p->worked = true;
  /* A borrower is never scheduled: what a sharing program says about its devices, memory and
   * transitions means nothing from it (and SCHED_BORROW nothing from a sharing program). */
  bool scheduling = program_message && msg->type != SCHED_POOL_MAPPED && msg->type != SCHED_BORROW;
  if (p->joined && (p->borrower ? scheduling || msg->type == SCHED_GPU_IDLE ||
                                      msg->type == SCHED_CAN_EXCHANGE ||
                                      msg->type == SCHED_ON_DISK
                                : msg->type == SCHED_BORROW)) {
    sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: pid %ld: message %u is not for %s: ignored\n",
                    (long)p->pid, msg->type, p->borrower ? "a borrower" : "a sharing program");
    return true;
  }
  switch (msg->type) {
  case SCHED_HELLO:
    if (p->joined || msg->value < 0 || msg->value > SCHED_HELLO_BORROWER) {
      sched_peer_count(d, p, true);
      sched_log_noisy(SCHED_NOISE_PROTOCOL, "cudawd: pid %ld: %s hello: closing\n",
                      (long)p->pid, p->joined ? "a second" : "a malformed");
      return false;
    }
    if (!sched_peer_join(d, p)) return false;
    p->joined = true;
    if (msg->value == SCHED_HELLO_BORROWER) return sched_pool_borrower_join(d, p);
    p->command_key = sched_command_key(p->pid);
    p->state = msg->value ? SCHED_SWAPPED_OUT : SCHED_RUNNING;
    p->state_since = p->accounted_at = p->resident_since = p->wanting_since = now;
    sched_log_noisy(SCHED_NOISE_JOINED, "cudawd: pid %ld (uid %u) joined%s\n", (long)p->pid,
                    (unsigned)p->uid, msg->value ? " (paused)" : "");
    sched_pool_offer(d, p);
    break;
  case SCHED_CAN_EXCHANGE:
    if (p->joined) p->piece_bytes = msg->bytes;
    if (p->joined) p->handover = msg->value == SCHED_EXCHANGE_HANDOVER;
    break;
  case SCHED_ON_DISK:
    /* Only right after a hello saying it is paused, before anything was asked of it. */
    if (!p->joined || p->state != SCHED_SWAPPED_OUT || p->pending_op || p->on_disk) {
      sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: pid %ld: says its image is on disk out of "
                      "turn: ignored\n", (long)p->pid);
      break;
    }
    sched_spill_rejoined(d, p, msg->bytes);
    break;
  case SCHED_POOL_MAPPED:
    /* Only an answer to the pool it was sent counts: nobody else is lent a range. */
    if (!p->joined || !p->pool_sent || !d->pool.size || p->uid != geteuid()) {
      sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: pid %ld: says it mapped a pool it was not "
                      "given: ignored\n", (long)p->pid);
      break;
    }
    sched_pool_mapped(d, p, msg->value == 1, msg->bytes, msg->held == SCHED_POOL_GROWS);
    sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: pid %ld %s the host-memory pool (%llu bytes)\n",
                    (long)p->pid, msg->value == 1 ? "mapped" : "could not map",
                    (unsigned long long)msg->bytes);
    break;
  case SCHED_DEVICE: {
    if (msg->device < 0 || msg->device >= SCHED_MAX_DEVICES) break;
    int got = sched_device_slot(d, msg->key, msg->bytes);
    if (got < 0) {
      char key[SCHED_KEY_LEN + 1];
      const char *why = got == -ENODEV ? "not the UUID of a GPU of this machine"
                        : got == -ENOSPC ? "every device slot is in use"
                                         : "not a UUID's hex digits, or another size than its "
                                           "other users say";
      sched_log_noisy_as(SCHED_NOISE_IGNORED, why, "cudawd: pid %ld: device %d (%s, %llu bytes) "
                         "not scheduled: %s\n", (long)p->pid, msg->device,
                         sched_key_printable(msg->key, key), (unsigned long long)msg->bytes, why);
    }
    p->slot[msg->device] = got;
    break;
  }
  case SCHED_ALLOC:
    if (slot < 0 || !plausible_size(d, slot, msg->held)) {
      struct sched_msg answer = {.version = SCHED_PROTO_VERSION, .type = SCHED_GRANT,
                                 .status = slot < 0 ? -ENODEV : -EINVAL};
      sched_send(p, &answer); /* not ours to schedule: the program says it runs unscheduled */
      break;
    }
    p->bytes[slot] = msg->held;
    p->in_flight[slot] = false;
    p->usage_seen[slot] = true;
    if (msg->value & SCHED_ALLOC_FREE_KNOWN)
      sched_observe_free(d, p, slot, msg->held, msg->device_free);
    if (msg->value & SCHED_ALLOC_FAILED) {
      p->retries++;
      fprintf(stderr, "cudawd: pid %ld: a granted allocation failed on the device (%llu MiB "
              "outside cudawd's books): making room\n", (long)p->pid,
              (unsigned long long)(d->device[slot].outside >> 20));
    }
    if (!p->wants) p->wanting_since = now;
    p->wants = true;
    p->want_slot = slot;
    p->want_bytes = msg->bytes; /* more than the device has: refused as never fitting */
    break;
  case SCHED_USAGE:
    if (slot >= 0 && plausible_size(d, slot, msg->bytes)) {
      if (!p->usage_seen[slot] && p->state == SCHED_RUNNING)
        sched_joined_usage(d, slot, msg->bytes);
      p->usage_seen[slot] = true;
      p->bytes[slot] = msg->bytes;
      p->in_flight[slot] = false;
    } else if (slot >= 0) {
      sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: pid %ld: says it holds %llu bytes on a "
                      "device of %llu: ignored\n", (long)p->pid, (unsigned long long)msg->bytes,
                      (unsigned long long)d->device[slot].total);
    }
    break;
  case SCHED_DONE:
    if (msg->value == 4) { /* a read-back ahead of the turn: no pending_op (a resume may follow) */
      sched_spill_read_done(d, p, msg->status > 0 ? -EINVAL : msg->status, msg->bytes,
                            msg->seconds >= 0 && msg->seconds < 1e9 ? msg->seconds : 0);
      break;
    }
    if (msg->value != p->pending_op || !p->pending_op) {
      sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: pid %ld: a result (%d) it was not asked "
                      "for: ignored\n", (long)p->pid, msg->value);
      break;
    }
    p->pending_op = 0;
    if (msg->value == 3) { /* a spill: it stays swapped out, its image on disk or not */
      if (msg->status == 0) sched_pool_take_back(d, p, "its image went to disk");
      sched_spill_done(d, p, msg->status > 0 ? -EINVAL : msg->status, msg->bytes,
                       msg->seconds >= 0 && msg->seconds < 1e9 ? msg->seconds : 0);
      break;
    }
    if (msg->value == 1 && msg->status == 0) p->reserve_image_bytes = msg->device_free;
    if (msg->value == 1) p->placed = msg->status == 0 ? msg->held : 0;
    if (msg->value == 1 && msg->status == 0 && p->loan.length)
      d->pool.placed_bytes += msg->held < p->loan.length ? msg->held : p->loan.length;
    /* The range holds the image until the resume is done; a failed checkpoint, or one that put
     * nothing into the range (too small, past the window it mapped), left nothing in it; nor
     * does an empty image (a program that freed its memory as it exits, ordered out meanwhile). */
    if (msg->value == 1 && msg->status != 0)
      sched_pool_take_back(d, p, "its checkpoint failed");
    else if (msg->value == 1 && msg->held == 0)
      sched_pool_take_back(d, p, msg->bytes ? "its image went elsewhere" : "its image is empty");
    sched_done(d, p, msg->value, msg->status > 0 ? -EINVAL : msg->status, msg->bytes,
               msg->seconds >= 0 && msg->seconds < 1e9 ? msg->seconds : 0);
    sched_exchange_done(d, p, msg->status > 0 ? -EINVAL : msg->status);
    if (msg->value == 2 && msg->status == 0) /* after sched_done: its rate is the pool's */
      sched_pool_take_back(d, p, "resumed");
    if (msg->value == 2) /* after sched_done, which keeps a disk read out of the host's rates */
      sched_spill_resumed(d, p, msg->status, msg->bytes,
                          msg->seconds >= 0 && msg->seconds < 1e9 ? msg->seconds : 0);
    break;
  case SCHED_BORROW:
    sched_pool_borrow(d, p, msg->bytes, msg->value == 1);
    break;
  case SCHED_FAILED:
    p->failed++;
    sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: pid %ld: an allocation of %llu bytes on device "
                    "%d FAILED: the error (%s) went back to the program\n", (long)p->pid,
                    (unsigned long long)msg->bytes, msg->device,
                    strerror(msg->status < 0 && msg->status > -4096 ? -msg->status : EIO));
    break;
  case SCHED_GPU_IDLE:
    sched_idle_hint(d, p, msg->value != 0);
    break;
  case SCHED_LEAVING: /* said once; a repeat does not extend its grace */
    if (p->joined && !p->borrower && !p->leaving_at) {
      p->leaving = true;
      p->leaving_at = now;
      if (d->config.verbose)
        fprintf(stderr, "cudawd: pid %ld is exiting: no more orders for it\n", (long)p->pid);
    }
    break;
  case SCHED_STATUS: {
    struct sched_snapshot *snapshot = calloc(1, sizeof *snapshot);
    if (!snapshot) break;
    sched_account(d);
    sched_fill_snapshot(d, snapshot);
    /* Never wait on a peer: one that asks and does not read is dropped. */
    bool sent = send(p->fd, snapshot, sizeof *snapshot, MSG_NOSIGNAL | MSG_DONTWAIT) ==
                (ssize_t)sizeof *snapshot;
    if (!sent)
      sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: status reply to pid %ld: %s\n",
                      (long)p->pid, strerror(errno));
    free(snapshot);
    return sent;
  }
  case SCHED_PRIORITY: {
    struct program *target = find_pid(d, msg->pid);
    struct sched_msg answer = {.version = SCHED_PROTO_VERSION, .type = SCHED_REPLY,
                               .pid = msg->pid, .status = target ? 0 : -ESRCH};
    /* A user changes only their own programs (a system cudawd serves several); root all. */
    if (target && p->uid != 0 && p->uid != target->uid) {
      answer.status = -EPERM;
      sched_log_noisy(SCHED_NOISE_REFUSED, "cudawd: refused uid %u (pid %ld) the priority of "
                      "pid %ld (uid %u)\n", (unsigned)p->uid, (long)p->pid, (long)target->pid,
                      (unsigned)target->uid);
    } else if (target && msg->value >= 1 && msg->value <= 100) {
      target->priority = msg->value;
    } else if (target) {
      answer.status = -EINVAL;
    }
    sched_send(p, &answer);
    break;
  }
  case SCHED_STOP: {
    /* Its owner or root only (a system cudawd serves every user: root only). Not while programs
     * are joined unless forced: they would run unshared from then on. */
    /* Borrowers do not count: without cudawd they use their own reserves. */
    int scheduled = 0;
    for (const struct program *q = d->programs; q; q = q->next)
      scheduled += q->joined && !q->retired && !q->borrower;
    struct sched_msg answer = {.version = SCHED_PROTO_VERSION, .type = SCHED_REPLY,
                               .value = scheduled};
    if (p->uid != geteuid() && p->uid != 0) answer.status = -EPERM;
    else if (scheduled > 0 && msg->value != 1) answer.status = -EBUSY;
    sched_send(p, &answer);
    if (answer.status) { /* any user of a system cudawd may ask: rate-limited */
      sched_log_noisy(SCHED_NOISE_REFUSED, "cudawd: uid %u (pid %ld) asked it to stop: refused, "
                      "%s\n", (unsigned)p->uid, (long)p->pid, answer.status == -EPERM
                      ? "not its owner or root" : "programs are joined (no --force)");
      break;
    }
    fprintf(stderr, "cudawd: uid %u (pid %ld) asked it to stop%s: stopping\n", (unsigned)p->uid,
            (long)p->pid, msg->value == 1 ? " (--force)" : "");
    stopping = 1;
    break;
  }
  default:
    sched_peer_count(d, p, true);
    sched_log_noisy(SCHED_NOISE_PROTOCOL, "cudawd: pid %ld sent an unknown message type %u: "
                    "ignored\n", (long)p->pid, msg->type);
  }
  return true;
}

/* Read one message; false when the connection is over. */
static bool receive(struct daemon *d, struct program *p)
{
  if (p->retired) return true; /* closed at the end of this step */
  struct sched_msg msg;
  ssize_t n = recv(p->fd, &msg, sizeof msg, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
  if (n <= 0) return false;
  if (n != (ssize_t)sizeof msg || msg.version != SCHED_PROTO_VERSION) {
    sched_peer_count(d, p, true);
    sched_log_noisy(SCHED_NOISE_PROTOCOL, "cudawd: pid %ld: malformed message (%zd bytes, "
                    "version %u): closing\n", (long)p->pid, n, n >= 4 ? msg.version : 0);
    return false;
  }
  msg.key[SCHED_KEY_LEN - 1] = '\0';
  return on_message(d, p, &msg);
}

static void serve(struct daemon *d, int listen_fd)
{
  static struct pollfd fds[SCHED_MAX_CONNECTIONS + 1];
  static struct program *owners[SCHED_MAX_CONNECTIONS + 1];
  double metrics_at = 0, ledger_read_at = 0;
  while (!stopping) {
    nfds_t n = 0;
    fds[n++] = (struct pollfd){listen_fd, POLLIN, 0};
    for (struct program *p = d->programs; p && n < SCHED_MAX_CONNECTIONS + 1; p = p->next) {
      if (p->retired) continue;
      owners[n] = p;
      fds[n++] = (struct pollfd){p->fd, POLLIN, 0};
    }
    int rc = poll(fds, n, 50);
    if (rc < 0 && errno != EINTR) {
      fprintf(stderr, "cudawd: poll: %s\n", strerror(errno));
      return;
    }
    /* A connection that ends is only marked here (its pointer may still be in owners[]); the
     * sweep below closes it. */
    for (nfds_t i = 1; rc > 0 && i < n; i++)
      if (fds[i].revents && !receive(d, owners[i]) && !owners[i]->close_reason)
        owners[i]->close_reason = "";
    sched_peer_sweep(d);
    if (rc > 0 && (fds[0].revents & POLLIN)) accept_some(d, listen_fd);
    sched_account(d);
    sched_step(d);
    sched_peer_sweep(d);
    sched_log_tick();
    sched_pool_follow(d);
    ledger_tick(&d->pool);
    double now = sched_now();
    /* Any connection restarts the count, not only a program's: `cudaw run --share` checks that
     * cudawd answers before it starts a program that may take a while to join (PyTorch imports
     * for seconds), and must not find it gone when it does. */
    if (d->joined > 0 || d->connections > 0) {
      d->idle_since = 0;
    } else if (!d->idle_since) {
      d->idle_since = now;
    } else if (d->config.idle_exit > 0 && now - d->idle_since >= d->config.idle_exit) {
      fprintf(stderr, "cudawd: no program for %.0f s (--idle-exit): stopping\n",
              now - d->idle_since);
      return;
    }
    if (now - ledger_read_at >= 5.0) {
      ledger_read_at = now;
      ledger_read(&d->pool_others, host_meminfo("MemTotal"));
    }
    if (d->config.metrics_file && now - metrics_at >= 2.0) {
      metrics_at = now;
      if (sched_write_metrics(d, d->config.metrics_file) != 0)
        fprintf(stderr, "cudawd: cannot write %s: %s\n", d->config.metrics_file, strerror(errno));
    }
  }
}

/* Enough descriptors for every connection cudawd admits (SCHED_MAX_CONNECTIONS). */
static void raise_file_limit(void)
{
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= SCHED_MAX_CONNECTIONS + 64)
    return;
  limit.rlim_cur = limit.rlim_max < SCHED_MAX_CONNECTIONS + 64 ? limit.rlim_max
                                                                : SCHED_MAX_CONNECTIONS + 64;
  setrlimit(RLIMIT_NOFILE, &limit);
}

/* The host-memory pool, sized beside the other cudawds' pools on this host (the ledger). */
static void open_pool(struct daemon *d)
{
  if (!d->config.host_memory && d->config.host_memory_set) {
    fprintf(stderr, "cudawd: no host-memory pool (--host-memory off)\n");
    return;
  }
  char why[256] = "";
  struct pool_ledger_view others;
  if (ledger_lock(why, sizeof why, 2000) != 0) {
    fprintf(stderr, "cudawd: no host-memory pool: %s; swaps use the programs' own memory\n", why);
    return;
  }
  ledger_read(&others, host_meminfo("MemTotal"));
  uint64_t size = 0;
  if (pool_size_for_host(d->config.host_memory_set, d->config.host_memory, &others, &size, why,
                         sizeof why) != 0) {
    fprintf(stderr, "cudawd: no host-memory pool: --host-memory %s beside the other cudawds' "
            "pools; swaps use the programs' own memory\n", why);
  } else if (!size) {
    fprintf(stderr, "cudawd: no host-memory pool: the host's budget for them (50%% of RAM, and "
            "8 GiB kept available) is taken%s\n", others.others ? " by other cudawds' pools" : "");
  } else if (pool_open(&d->pool, size, why, sizeof why) != 0) {
    fprintf(stderr, "cudawd: no host-memory pool: %s; swaps use the programs' own memory\n", why);
  } else {
    if (ledger_claim(0) != 0) /* the window, 0 until programs need it */
      fprintf(stderr, "cudawd: the host-wide pool ledger has no entry for this pool: %s\n",
              strerror(errno));
    char pages[320];
    fprintf(stderr, "cudawd: host-memory pool of up to %.2f GiB (%s), faulted in as the "
            "programs' images need it%s%s\n", (double)d->pool.size / (1u << 30),
            pool_pages_said(&d->pool, pages, sizeof pages),
            d->config.system ? "; lent only to root's programs (--system)" : "",
            others.others ? "; beside other cudawds' pools" : "");
  }
  ledger_unlock();
}

int main(int argc, char **argv)
{
  static struct daemon d;
  if (parse_args(argc, argv, &d.config) != 0) {
    fprintf(stderr, "Try 'cudawd --help'.\n");
    return 2;
  }
  static const char *const read_here[] = {"CUDAW_STRICT", "CUDAW_RUN_DIR", "CUDAW_SCHED_SOCKET",
                                          "CUDAW_SCHED_HOST_MEMORY", "CUDAW_SCHED_SPILL_DIR",
                                          NULL};
  int bad_options = ckpt_options_check_env("cudawd", read_here);
  if (bad_options) return bad_options;
  struct ckpt_options options;
  ckpt_options_from_env(&options, NULL, 0); /* invalid values were named just above */
  if (!d.config.host_memory_set && options.sched_host_memory[0]) {
    if (pool_parse_size(options.sched_host_memory, &d.config.host_memory) != 0) {
      fprintf(stderr, "cudawd: CUDAW_SCHED_HOST_MEMORY=%s: expected a size such as 64G, N%% of "
              "RAM, or off\n", options.sched_host_memory);
      return 2;
    }
    d.config.host_memory_set = true;
  }
  if (!d.config.spill_dir && options.sched_spill_dir[0])
    d.config.spill_dir = options.sched_spill_dir; /* `options` lives as long as main */
  /* A size this machine could never hold is a mistake to say at once, not a pool to fall back
   * from later. */
  char why[256];
  struct pool_ledger_view nobody = {0};
  uint64_t size;
  if (d.config.host_memory_set && d.config.host_memory &&
      pool_size_for_host(true, d.config.host_memory, &nobody, &size, why, sizeof why) != 0) {
    fprintf(stderr, "cudawd: --host-memory: %s\n", why);
    return 2;
  }
  if (d.config.system && geteuid() != 0) {
    fprintf(stderr, "cudawd: --system: the node's cudawd runs as root (uid %u here); a user's "
            "own cudawd needs no --system\n", (unsigned)geteuid());
    return 2;
  }
  if (sched_spill_open(&d) != 0) return 2;
  const char *path = options.sched_socket;
  const char *socket_env = getenv("CUDAW_SCHED_SOCKET"), *dir_env = getenv("CUDAW_RUN_DIR");
  if (d.config.system && !(socket_env && *socket_env) && !(dir_env && *dir_env))
    path = "/run/cudaw/" SCHED_SOCKET_NAME; /* not root's own $XDG_RUNTIME_DIR */
  if (!path[0]) {
    fprintf(stderr, "cudawd: run dir %s too long for a socket path\n", options.run_dir);
    return 1;
  }
  int listen_fd = open_listener(path, d.config.system);
  if (listen_fd == -EADDRINUSE) {
    fprintf(stderr, "cudawd: another cudawd already answers on %s\n", path);
    return 1;
  }
  if (listen_fd < 0) {
    fprintf(stderr, "cudawd: cannot listen on %s: %s\n", path, strerror(-listen_fd));
    return 1;
  }
  struct sigaction stop = {.sa_handler = on_stop};
  sigaction(SIGTERM, &stop, NULL);
  sigaction(SIGINT, &stop, NULL);
  signal(SIGPIPE, SIG_IGN);
  raise_file_limit();
  sched_log_set_cap(d.config.log_max);
  d.pool.fd = -1;
  open_pool(&d);
  d.started = sched_now();
  char idle[96] = "never exits by itself (--idle-exit 0)";
  if (d.config.idle_exit > 0)
    snprintf(idle, sizeof idle, "exits after %.0f s without a program (--idle-exit)",
             d.config.idle_exit);
  fprintf(stderr, "cudawd: pid %ld listening on %s (quantum %.1f s%s); %s; `cudaw-ctl sched "
          "--stop` stops it\n", (long)getpid(), path, d.config.quantum,
          d.config.system ? ", system: every user of the node" : "", idle);
  serve(&d, listen_fd);
  unlink(path);
  close(listen_fd);
  pool_close(&d.pool);
  ledger_release();
  fprintf(stderr, "cudawd: pid %ld stopped: socket %s removed, host-memory pool freed\n",
          (long)getpid(), path);
  return 0;
}
