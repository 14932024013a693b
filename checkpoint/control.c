/* The control thread and its UNIX socket <run dir>/<pid>.sock. Protocol: one request line
 * ("status", "checkpoint" or "resume"), one reply line of JSON. A checkpoint may add, in this
 * order: "live" or "live=0" (copy while the program runs first, CUDAW_CKPT_LIVE's default),
 * "release=all" (the driver's process checkpoint takes the rest), "compress=zstd" and
 * "to=<absolute dir>" (the rest of the line: the image goes to disk). A group pause (ctl_group.c)
 * adds "hold [lease=MS]" (close the gate, no drain; reopened by itself after MS without a
 * command), "drain [wait=MS]" (while held: wait at most MS for the device), "unhold" and
 * "resume hold [lease=MS]" (restore, keep the gate closed). While paused, "spill
 * [compress=zstd] to=<absolute dir>" writes the host image to disk and frees it (the resume then
 * streams it from there) and "unspill" reads it back into host memory. Only the same uid or
 * root may talk to it (SO_PEERCRED). The thread also turns signal-pipe bytes into checkpoint requests.
 * Checkpoint, resume and hold replies are written by the transition thread when it is done. It
 * also hands suspend mode's SIGTSTP/SIGCONT events to suspend.c. Requests it does not know go to
 * the host's extra_request ("limit [gpu=PERCENT|off]": the GPU share). Beside the socket it keeps
 * <pid>.state, what status would say in short, for cudaw-ctl to show while the process is
 * stopped (SIGSTOP: Slurm's suspend) and cannot answer. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define REQUEST_MAX (4096 + 128) /* checkpoint with to=<path> */

static struct {
  int listen_fd;
  int signal_pipe[2];
  int wake_pipe[2];
  pthread_t thread;
  bool started;
  pid_t owner;
  char path[sizeof ((struct sockaddr_un *)0)->sun_path];
} ctl = {-1, {-1, -1}, {-1, -1}, 0, false, 0, ""};

static bool at_exit_registered;

const char *control_socket_path(void) { return ctl.path[0] ? ctl.path : NULL; }
int control_signal_fd(void) { return ctl.signal_pipe[1]; }

/* ---- JSON ---- */

static size_t json_string(char *buf, size_t len, const char *text) {
  size_t n = 0;
#define PUT(c) do { if (n + 1 < len) buf[n] = (c); n++; } while (0)
  PUT('"');
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
    if (*p == '"' || *p == '\\') {
      PUT('\\');
      PUT((char)*p);
    } else if (*p < 0x20) {
      char esc[8];
      snprintf(esc, sizeof esc, "\\u%04x", *p);
      for (char *e = esc; *e; e++) PUT(*e);
    } else {
      PUT((char)*p);
    }
  }
  PUT('"');
#undef PUT
  if (len) buf[n < len ? n : len - 1] = '\0';
  return n;
}

/* Appends with snprintf semantics; `used` saturates at len so later appends are no-ops. */
static void append(char *buf, size_t len, size_t *used, const char *format, ...)
    __attribute__((format(printf, 4, 5)));

static void append(char *buf, size_t len, size_t *used, const char *format, ...) {
  if (*used >= len) return;
  va_list args;
  va_start(args, format);
  int n = vsnprintf(buf + *used, len - *used, format, args);
  va_end(args);
  *used = n < 0 ? len : *used + (size_t)n > len ? len : *used + (size_t)n;
}

static void append_string(char *buf, size_t len, size_t *used, const char *key, const char *value) {
  char quoted[600];
  json_string(quoted, sizeof quoted, value);
  append(buf, len, used, ",\"%s\":%s", key, quoted);
}

static const char *error_kind(int error) {
  return error == -EALREADY || error == -EBUSY ? "wrong_state"
         : error == -EACCES || error == -EPERM ? "permission"
         : error == CKPT_ERROR_NOT_HELD        ? "not_held"
                                               : "failed";
}

int control_format_result(const struct ckpt_result *r, char *buf, size_t len) {
  size_t used = 0;
  double rate = r->copy_seconds > 0 ? (double)r->bytes / r->copy_seconds / 1e9 : 0.0;
  append(buf, len, &used, "{\"ok\":%s,\"op\":\"%s\",\"state\":\"%s\"", r->error ? "false" : "true",
         ckpt_op_name(r->op), ckpt_state_name(ckpt_state()));
  if (r->error) {
    append(buf, len, &used, ",\"error\":\"%s\",\"errno\":%d", error_kind(r->error), -r->error);
    append_string(buf, len, &used, "reason", r->reason);
  }
  append(buf, len, &used,
         ",\"bytes\":%" PRIu64 ",\"regions\":%" PRIu64 ",\"seconds\":%.6f,\"gbps\":%.3f,"
         "\"gate_ms\":%.3f,\"drain_ms\":%.3f,\"setup_ms\":%.3f,\"copy_seconds\":%.6f,"
         "\"memory_ms\":%.3f,\"shortfall\":%" PRIu64 ",\"threads\":%u,\"wait_ms\":%.3f,"
         "\"memcpy_ms\":%.3f,\"hash_ms\":%.3f,\"fault_ms\":%.3f,\"device_hash_ms\":%.3f,"
         "\"unchanged_bytes\":%" PRIu64 ",\"filled_bytes\":%" PRIu64
         ",\"issue_ms\":%.3f,\"image_ms\":%.3f,\"reserve_bytes\":%" PRIu64
         ",\"staged_bytes\":%" PRIu64 ",\"pool_bytes\":%" PRIu64
         ",\"released_early_bytes\":%" PRIu64,
         r->bytes, r->regions, r->total_seconds, rate, r->gate_seconds * 1e3,
         r->drain_seconds * 1e3, r->setup_seconds * 1e3, r->copy_seconds, r->memory_seconds * 1e3,
         r->shortfall, r->copy_threads, r->dma_wait_seconds * 1e3, r->host_copy_seconds * 1e3,
         r->hash_seconds * 1e3, r->fault_seconds * 1e3, r->device_hash_seconds * 1e3,
         r->unchanged_bytes, r->filled_bytes, r->issue_seconds * 1e3, r->image_seconds * 1e3,
         r->reserve_bytes, r->staged_bytes, r->pool_bytes, r->released_early_bytes);
  append(buf, len, &used, ",\"memory_beside\":%s,\"memory_wait_ms\":%.3f",
         r->memory_beside ? "true" : "false", r->memory_wait_seconds * 1e3);
  append(buf, len, &used, ",\"release_early_ms\":%.3f,\"release_tail_ms\":%.3f",
         r->release_early_seconds * 1e3, r->release_tail_seconds * 1e3);
  append(buf, len, &used,
         ",\"stall_ms\":%.3f,\"live\":%s,\"precopy_bytes\":%" PRIu64 ",\"precopy_seconds\":%.6f"
         ",\"recopy_bytes\":%" PRIu64,
         r->stall_seconds * 1e3, r->live ? "true" : "false", r->precopy_bytes, r->precopy_seconds,
         r->recopy_bytes);
  append(buf, len, &used,
         ",\"released_all\":%s,\"driver_seconds\":%.6f,\"disk_bytes\":%" PRIu64
         ",\"disk_stored\":%" PRIu64 ",\"disk_seconds\":%.6f,\"disk_gbps\":%.3f"
         ",\"disk_peak_bytes\":%" PRIu64 "}\n",
         r->driver_released ? "true" : "false", r->driver_seconds, r->disk_bytes, r->disk_stored,
         r->disk_seconds, r->disk_seconds > 0 ? (double)r->disk_bytes / r->disk_seconds / 1e9 : 0.0,
         r->disk_peak_bytes);
  return used < len ? 0 : -ENOSPC;
}

static void format_refusal(char *buf, size_t len, const char *kind, enum ckpt_op op, const char *why) {
  size_t used = 0;
  append(buf, len, &used, "{\"ok\":false");
  if (op) append(buf, len, &used, ",\"op\":\"%s\"", ckpt_op_name(op));
  append(buf, len, &used, ",\"state\":\"%s\",\"error\":\"%s\"", ckpt_state_name(ckpt_state()), kind);
  append_string(buf, len, &used, "reason", why);
  append(buf, len, &used, "}\n");
}

/* What cudaw's allocations hold on the devices now (the host's figures: vmem's), where that is
 * known: with the gate open or held nothing is released; while pausing, paused or resuming the
 * figure would count released memory as held (the image's bytes tell that part). */
static bool device_resident(uint64_t *bytes, uint64_t *regions) {
  enum ckpt_state_id state = ckpt_state();
  const struct ckpt_host_ops *ops = ckpt_rt.ops;
  return (state == CKPT_RUNNING || state == CKPT_HELD) && ops->device_bytes &&
         ops->device_bytes(ckpt_rt.ctx, bytes, regions) == 0;
}

static void format_status(char *buf, size_t len) {
  size_t used = 0;
  struct transition_paused paused;
  transition_paused_info(&paused);
  append(buf, len, &used,
         "{\"ok\":true,\"pid\":%ld,\"uid\":%u,\"state\":\"%s\",\"image_bytes\":%" PRIu64
         ",\"image_regions\":%" PRIu64 ",\"image_pinned_bytes\":%" PRIu64,
         (long)getpid(), (unsigned)geteuid(), ckpt_state_name(ckpt_state()),
         transition_image_bytes(), transition_image_regions(), transition_image_registered());
  /* Per device: the image's bytes that came from it, and what the process still holds there. */
  uint64_t image_bytes[64];
  int image_devices = transition_image_device_bytes(image_bytes, 64);
  append(buf, len, &used, ",\"image_device_bytes\":[");
  for (int d = 0; d < image_devices; d++)
    append(buf, len, &used, "%s%" PRIu64, d ? "," : "", image_bytes[d]);
  append(buf, len, &used, "]");
  append(buf, len, &used, ",\"held_bytes\":[");
  int devices = 0;
  const struct ckpt_host_ops *ops = ckpt_rt.ops;
  /* While the driver holds the process, a call into it would wait; it holds nothing. */
  if (!paused.driver_released && ops->mem_held && ops->device_count(ckpt_rt.ctx, &devices) == 0) {
    for (int d = 0; d < devices; d++) {
      uint64_t bytes = 0;
      if (ops->mem_held(ckpt_rt.ctx, d, &bytes) == 0)
        append(buf, len, &used, "%s%" PRIu64, d ? "," : "", bytes);
      else
        append(buf, len, &used, "%snull", d ? "," : "");
    }
  }
  append(buf, len, &used, "]");
  uint64_t resident = 0, regions = 0;
  if (device_resident(&resident, &regions))
    append(buf, len, &used, ",\"device_bytes\":%" PRIu64 ",\"device_regions\":%" PRIu64,
           resident, regions);
  uint64_t stays = 0;
  char why[160];
  if (!paused.driver_released && ops->memory_not_held &&
      ops->memory_not_held(ckpt_rt.ctx, &stays, why, sizeof why) == 1) {
    append(buf, len, &used, ",\"not_held_bytes\":%" PRIu64, stays);
    append_string(buf, len, &used, "not_held", why);
  }
  append(buf, len, &used, ",\"released_all\":%s,\"disk_bytes\":%" PRIu64 ",\"disk_stored\":%" PRIu64,
         paused.driver_released ? "true" : "false", paused.disk_bytes, paused.disk_stored);
  if (paused.dir[0]) append_string(buf, len, &used, "image_dir", paused.dir);
  struct reserve_info reserve;
  transition_reserve(&reserve);
  if (reserve.enabled)
    append(buf, len, &used, ",\"reserve_bytes\":%" PRIu64 ",\"reserve_used\":%" PRIu64
           ",\"reserve_target\":%" PRIu64 ",\"reserve_refused\":%s", reserve.bytes, reserve.used,
           reserve.target, reserve.refused ? "true" : "false");
  struct ckpt_other_memory other = transition_other_memory();
  append(buf, len, &used,
         ",\"managed_moved\":%" PRIu64 ",\"managed_moved_bytes\":%" PRIu64
         ",\"arrays_held\":%" PRIu64 ",\"array_held_bytes\":%" PRIu64
         ",\"kept_bytes\":%" PRIu64 ",\"ungated_functions\":%" PRIu64,
         other.managed_allocations, other.managed_bytes, other.arrays, other.array_bytes,
         other.kept_bytes, other.ungated_functions);
  struct ckpt_result last;
  if (state_last(&last)) {
    double rate = last.copy_seconds > 0 ? (double)last.bytes / last.copy_seconds / 1e9 : 0.0;
    append(buf, len, &used,
           ",\"last_op\":\"%s\",\"last_ok\":%s,\"last_bytes\":%" PRIu64
           ",\"last_seconds\":%.6f,\"last_gbps\":%.3f,\"last_gate_ms\":%.3f,"
           "\"last_copy_seconds\":%.6f,\"last_setup_ms\":%.3f",
           ckpt_op_name(last.op), last.error ? "false" : "true", last.bytes, last.total_seconds,
           rate, last.gate_seconds * 1e3, last.copy_seconds, last.setup_seconds * 1e3);
    append_string(buf, len, &used, "last_reason", last.reason);
    if (last.op == CKPT_OP_CHECKPOINT)
      append(buf, len, &used,
             ",\"last_stall_ms\":%.3f,\"last_live\":%s,\"last_precopy_bytes\":%" PRIu64
             ",\"last_recopy_bytes\":%" PRIu64,
             last.stall_seconds * 1e3, last.live ? "true" : "false", last.precopy_bytes,
             last.recopy_bytes);
  }
  if (ops->status_extra) {
    char extra[2048];
    if (ops->status_extra(ckpt_rt.ctx, extra, sizeof extra)) append(buf, len, &used, "%s", extra);
  }
  append(buf, len, &used, "}\n");
}

/* ---- what the process last said of itself ---- */

/* <pid>.state beside the socket (ckpt_state_path), rewritten by the control thread within
 * STATE_FILE_MS of a change: a process stopped by SIGSTOP (Slurm's suspend) cannot answer, and
 * cudaw-ctl then shows this with the time it became true. Cheap figures only (no NVML). */
#define STATE_FILE_MS 250

static struct {
  pthread_mutex_t lock; /* the control thread and the transition thread write it */
  char line[256]; /* the content last written, without "since" */
  char path[sizeof ((struct sockaddr_un *)0)->sun_path + 8];
} state_file = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* With the lock held; state_file.path is set once the socket is (open_socket). */
static void write_state_file(void) {
  if (!state_file.path[0]) return;
  char line[256];
  size_t used = 0;
  append(line, sizeof line, &used, "\"pid\":%ld,\"state\":\"%s\",\"image_bytes\":%" PRIu64
         ",\"image_regions\":%" PRIu64, (long)getpid(), ckpt_state_name(ckpt_state()),
         transition_image_bytes(), transition_image_regions());
  uint64_t resident = 0, regions = 0;
  if (device_resident(&resident, &regions))
    append(line, sizeof line, &used, ",\"device_bytes\":%" PRIu64 ",\"device_regions\":%" PRIu64,
           resident, regions);
  if (used >= sizeof line || strcmp(line, state_file.line) == 0) return;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  char temporary[sizeof state_file.path + 8];
  snprintf(temporary, sizeof temporary, "%s.new", state_file.path);
  int fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return;
  char text[320];
  int n = snprintf(text, sizeof text, "{%s,\"since\":%.3f}\n", line,
                   (double)now.tv_sec + now.tv_nsec / 1e9);
  bool written = write(fd, text, (size_t)n) == n;
  close(fd);
  if (written && rename(temporary, state_file.path) == 0) snprintf(state_file.line, sizeof
                                                                   state_file.line, "%s", line);
  else unlink(temporary);
}

static void keep_state_file(void) {
  pthread_mutex_lock(&state_file.lock);
  write_state_file();
  pthread_mutex_unlock(&state_file.lock);
}

void control_state_changed(void) { keep_state_file(); }

static void remove_state_file(void) {
  pthread_mutex_lock(&state_file.lock);
  if (state_file.path[0]) unlink(state_file.path);
  state_file.path[0] = state_file.line[0] = '\0';
  pthread_mutex_unlock(&state_file.lock);
}

/* ---- connections ---- */

static void reply(int fd, const char *line) {
  size_t n = strlen(line);
  while (n) {
    ssize_t sent = send(fd, line, n, MSG_NOSIGNAL);
    if (sent <= 0) {
      if (sent < 0 && errno == EINTR) continue;
      break; /* the controller went away; nothing to tell it */
    }
    line += sent;
    n -= (size_t)sent;
  }
}

static void reply_when_done(void *arg, const struct ckpt_result *result) {
  int fd = (int)(intptr_t)arg;
  char line[2048];
  control_format_result(result, line, sizeof line);
  reply(fd, line);
  close(fd);
}

/* Requests are read without blocking, many at a time: a client that connects and never finishes
 * its line (or sends megabytes) must not hold up other clients, signals or a pause. Each pending
 * connection has until REQUEST_SECONDS after its accept to send one line. */
#define PENDING_MAX 64
#define REQUEST_SECONDS 2.0

/* "checkpoint" with its optional words; the defaults come from the options. 0 or -EINVAL. */
static int parse_checkpoint(const char *line, struct transition_request *out) {
  static const char command[] = "checkpoint";
  *out = (struct transition_request){.release_all = ckpt_rt.options.release_all != 0,
                                     .live = ckpt_rt.options.live != 0};
  if (strncmp(line, command, sizeof command - 1) != 0) return -EINVAL;
  const char *p = line + sizeof command - 1;
  while (*p == ' ') {
    p++;
    if (strncmp(p, "live=0", 6) == 0 && (p[6] == ' ' || !p[6])) {
      out->live = false;
      p += 6;
    } else if (strncmp(p, "live", 4) == 0 && (p[4] == ' ' || !p[4])) {
      out->live = true;
      p += 4;
    } else if (strncmp(p, "release=all", 11) == 0 && (p[11] == ' ' || !p[11])) {
      out->release_all = true;
      p += 11;
    } else if (strncmp(p, "release=device", 14) == 0 && (p[14] == ' ' || !p[14])) {
      out->release_all = false;
      p += 14;
    } else if (strncmp(p, "compress=zstd", 13) == 0 && (p[13] == ' ' || !p[13])) {
      out->compress = true;
      p += 13;
    } else if (strncmp(p, "to=/", 4) == 0 && strlen(p + 3) < sizeof out->to_dir) {
      snprintf(out->to_dir, sizeof out->to_dir, "%s", p + 3);
      return 0;
    } else {
      return -EINVAL;
    }
  }
  return *p ? -EINVAL : 0;
}

/* "spill [compress=zstd] to=<absolute dir>" or "unspill": a paused program's image to disk and
 * back. 0 with *op and *out set, or -EINVAL. */
static int parse_spill(const char *line, enum ckpt_op *op, struct transition_request *out) {
  *out = (struct transition_request){0};
  if (strcmp(line, "unspill") == 0) {
    *op = CKPT_OP_UNSPILL;
    return 0;
  }
  if (strncmp(line, "spill ", 6) != 0) return -EINVAL;
  const char *p = line + 6;
  if (strncmp(p, "compress=zstd ", 14) == 0) {
    out->compress = true;
    p += 14;
  }
  if (strncmp(p, "to=/", 4) != 0 || strlen(p + 3) >= sizeof out->to_dir) return -EINVAL;
  snprintf(out->to_dir, sizeof out->to_dir, "%s", p + 3);
  *op = CKPT_OP_SPILL;
  return 0;
}

/* "<command>" alone or followed by " <key>=<ms>" (1 ms to 1 hour); *ms 0 when absent. */
static int parse_with_ms(const char *line, const char *command, const char *key, uint32_t *ms) {
  size_t n = strlen(command), k = strlen(key);
  *ms = 0;
  if (strncmp(line, command, n) != 0) return -EINVAL;
  if (!line[n]) return 0;
  if (line[n] != ' ' || strncmp(line + n + 1, key, k) != 0 || line[n + 1 + k] != '=')
    return -EINVAL;
  const char *digits = line + n + 2 + k;
  char *end;
  errno = 0;
  unsigned long value = strtoul(digits, &end, 10);
  if (errno || end == digits || *end || *digits == '-' || value < 1 || value > 3600000)
    return -EINVAL;
  *ms = (uint32_t)value;
  return 0;
}

/* The steps of a group pause, and resume; 0 with *op and *out set, or -EINVAL. */
static int parse_group_step(const char *line, enum ckpt_op *op, struct transition_request *out) {
  *out = (struct transition_request){0};
  if (strcmp(line, "resume") == 0) *op = CKPT_OP_RESUME;
  else if (parse_with_ms(line, "resume hold", "lease", &out->hold_ms) == 0) {
    *op = CKPT_OP_RESUME;
    out->hold_after = true;
  } else if (parse_with_ms(line, "hold", "lease", &out->hold_ms) == 0) *op = CKPT_OP_HOLD;
  else if (parse_with_ms(line, "drain", "wait", &out->hold_ms) == 0) *op = CKPT_OP_DRAIN;
  else if (strcmp(line, "unhold") == 0) *op = CKPT_OP_UNHOLD;
  else return -EINVAL;
  return 0;
}

struct pending {
  int fd;              /* -1: free slot */
  double deadline;
  size_t used;
  bool overlong;       /* more than REQUEST_MAX bytes before the newline: discarded */
  char line[REQUEST_MAX];
};

static struct pending pending[PENDING_MAX];

/* Answer one complete request (line without '\n'), or a refusal when read_rc says it was not one
 * line. Takes fd over (the transition thread replies to checkpoint and resume). */
static void serve(int fd, const char *request, int read_rc, double received) {
  struct timeval timeout = {2, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  char line[6144], why[160];
  struct ucred peer;
  socklen_t peer_len = sizeof peer;
  enum ckpt_op op = 0;
  struct transition_request checkpoint, step;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0) {
    format_refusal(line, sizeof line, "permission", 0, "cannot read the peer's credentials");
  } else if (peer.uid != geteuid() && peer.uid != 0) {
    snprintf(why, sizeof why, "refused: uid %u may not control pid %ld (owner uid %u, or root)",
             (unsigned)peer.uid, (long)getpid(), (unsigned)geteuid());
    ckpt_logf(CKPT_LOG_WARN, "control socket: pid %ld %s", (long)peer.pid, why);
    format_refusal(line, sizeof line, "permission", 0, why);
  } else if (read_rc == 0 && strcmp(request, "status") == 0) {
    format_status(line, sizeof line);
  } else if (read_rc == 0 && parse_checkpoint(request, &checkpoint) == 0) {
    op = CKPT_OP_CHECKPOINT;
  } else if (read_rc == 0 && parse_group_step(request, &op, &step) == 0) {
    checkpoint = step;
  } else if (read_rc == 0 && parse_spill(request, &op, &step) == 0) {
    checkpoint = step;
  } else if (read_rc == 0 && ckpt_rt.ops->extra_request &&
             ckpt_rt.ops->extra_request(ckpt_rt.ctx, request, line, sizeof line) == 0) {
    /* answered by the host (limit) */
  } else {
    format_refusal(line, sizeof line, "bad_request",
                   0, read_rc == -EMSGSIZE  ? "request line too long; expected status, checkpoint or resume"
                      : read_rc == -ETIMEDOUT ? "no complete request line within 2 s"
                                              : "expected one line: status, checkpoint [live|live=0] "
                                                "[release=all] [compress=zstd] [to=/absolute/dir], "
                                                "resume [hold [lease=MS]], hold [lease=MS], drain "
                                                "[wait=MS], unhold, spill [compress=zstd] "
                                                "to=/absolute/dir, unspill or limit "
                                                "[gpu=PERCENT|off]");
  }
  if (op) {
    const char *refusal = "";
    int rc = transition_submit_with(op, received, &checkpoint, reply_when_done,
                                    (void *)(intptr_t)fd, &refusal);
    if (rc == 0) return; /* the transition thread replies and closes fd */
    snprintf(why, sizeof why, "%s: %s", ckpt_op_name(op), refusal);
    format_refusal(line, sizeof line, error_kind(rc), op, why);
  }
  reply(fd, line);
  close(fd);
}

static void pending_finish(struct pending *p, int read_rc) {
  int fd = p->fd;
  p->fd = -1;
  serve(fd, p->line, read_rc, ckpt_now());
}

/* Read what has arrived on p; serve it once the line is complete, the peer closed or the line
 * overflowed (then the rest is read and dropped up to its newline, so that the refusal reaches
 * the client instead of a reset). */
static void pending_read(struct pending *p) {
  char scratch[4096];
  for (;;) {
    char *into = p->overlong ? scratch : p->line + p->used;
    size_t room = p->overlong ? sizeof scratch : sizeof p->line - 1 - p->used;
    ssize_t n = recv(p->fd, into, room, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) { /* closed or failed before a newline */
      p->line[p->used] = '\0';
      pending_finish(p, p->overlong ? -EMSGSIZE : p->used ? -EPROTO : -ENODATA);
      return;
    }
    char *newline = memchr(into, '\n', (size_t)n);
    if (p->overlong) {
      if (newline) {
        pending_finish(p, -EMSGSIZE);
        return;
      }
      continue;
    }
    p->used += (size_t)n;
    p->line[p->used] = '\0';
    if (newline) {
      size_t length = (size_t)(newline - p->line);
      if (length && p->line[length - 1] == '\r') length--;
      p->line[length] = '\0';
      pending_finish(p, memchr(p->line, '\0', length) ? -EPROTO : 0); /* a NUL inside: garbage */
      return;
    }
    if (p->used + 1 >= sizeof p->line) p->overlong = true;
  }
}

static void pending_accept(void) {
  int fd = accept4(ctl.listen_fd, NULL, NULL, SOCK_CLOEXEC);
  if (fd < 0) return;
  for (int i = 0; i < PENDING_MAX; i++) {
    if (pending[i].fd >= 0) continue;
    pending[i] = (struct pending){.fd = fd, .deadline = ckpt_now() + REQUEST_SECONDS};
    return;
  }
  close(fd); /* not reached: the listener is not polled while every slot is taken */
}

/* Serve connections whose time is up; returns the poll timeout (ms) to the next deadline. */
static int pending_expire(void) {
  double now = ckpt_now(), next = 0;
  for (int i = 0; i < PENDING_MAX; i++) {
    if (pending[i].fd < 0) continue;
    if (pending[i].deadline <= now) {
      pending_finish(&pending[i], -ETIMEDOUT);
      continue;
    }
    if (!next || pending[i].deadline < next) next = pending[i].deadline;
  }
  return next ? (int)((next - now) * 1000) + 1 : -1;
}

static void pending_close_all(void) {
  for (int i = 0; i < PENDING_MAX; i++) {
    if (pending[i].fd >= 0) close(pending[i].fd);
    pending[i].fd = -1;
  }
}

static void on_signal_bytes(void) {
  uint64_t stamps[16];
  ssize_t n;
  double requested_at = 0;
  while ((n = read(ctl.signal_pipe[0], stamps, sizeof stamps)) > 0)
    if (!requested_at) requested_at = (double)stamps[0] * 1e-9; /* the earliest one */
  if (!requested_at) return;
  ckpt_logf(CKPT_LOG_INFO, "checkpoint requested by signal");
  const char *why = "";
  transition_submit(CKPT_OP_CHECKPOINT, requested_at, NULL, NULL, &why); /* refusals are logged */
}

static void *run(void *unused) {
  (void)unused;
  for (int i = 0; i < PENDING_MAX; i++) pending[i].fd = -1;
  for (;;) {
    int timeout_ms = pending_expire();
    struct pollfd fds[4 + PENDING_MAX] = {{ctl.wake_pipe[0], POLLIN, 0},
                                          {ctl.signal_pipe[0], POLLIN, 0},
                                          {-1, POLLIN, 0},
                                          {suspend_event_fd(), POLLIN, 0}};
    int slot_of[4 + PENDING_MAX], count = 4, free_slots = 0;
    for (int i = 0; i < PENDING_MAX; i++) {
      if (pending[i].fd < 0) {
        free_slots++;
        continue;
      }
      slot_of[count] = i;
      fds[count++] = (struct pollfd){pending[i].fd, POLLIN, 0};
    }
    if (free_slots) fds[2].fd = ctl.listen_fd; /* full: new clients wait in the backlog */
    keep_state_file();
    if (timeout_ms < 0 || timeout_ms > STATE_FILE_MS) timeout_ms = STATE_FILE_MS;
    int rc = poll(fds, (nfds_t)count, timeout_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      ckpt_logf(CKPT_LOG_ERROR, "control thread: poll failed: %s", strerror(errno));
      break;
    }
    if (fds[0].revents) break;
    if (fds[1].revents) on_signal_bytes();
    if (fds[3].revents) suspend_on_events();
    for (int k = 4; k < count; k++)
      if (fds[k].revents) pending_read(&pending[slot_of[k]]);
    if (fds[2].fd >= 0 && (fds[2].revents & POLLIN)) pending_accept();
  }
  pending_close_all();
  return NULL;
}

/* ---- socket lifetime ---- */

static void remove_socket(void) {
  if (ctl.path[0] && ctl.owner == getpid()) { /* never a forked child's parent's */
    unlink(ctl.path);
    remove_state_file();
  }
  ctl.path[0] = '\0';
}

static int open_socket(void) {
  const char *dir = ckpt_rt.options.run_dir;
  char reason[200];
  if (!dir[0]) {
    ckpt_logf(CKPT_LOG_WARN, "no run dir for the control socket; use CUDAW_RUN_DIR");
    return -ENOENT;
  }
  int rc = ckpt_run_dir_prepare(dir, reason, sizeof reason);
  if (rc) {
    const char *chosen = getenv("CUDAW_RUN_DIR");
    ckpt_logf(CKPT_LOG_WARN, "control socket disabled: %s%s", reason,
              chosen && *chosen ? " (CUDAW_RUN_DIR)" : "");
    return rc;
  }
  int removed = ckpt_clean_stale(dir);
  if (removed) ckpt_logf(CKPT_LOG_INFO, "removed %d stale control sockets in %s", removed, dir);

  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if ((rc = ckpt_socket_path(dir, getpid(), addr.sun_path, sizeof addr.sun_path)) != 0) {
    ckpt_logf(CKPT_LOG_WARN, "control socket disabled: path in %s too long", dir);
    return rc;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  unlink(addr.sun_path); /* a previous process with our pid left it */
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || chmod(addr.sun_path, 0600) != 0 ||
      listen(fd, SOMAXCONN) != 0) {
    rc = -errno;
    const char *chosen = getenv("CUDAW_RUN_DIR");
    ckpt_logf(CKPT_LOG_WARN, "control socket %s disabled: %s%s", addr.sun_path, strerror(-rc),
              chosen && *chosen ? " (CUDAW_RUN_DIR)" : "");
    unlink(addr.sun_path);
    close(fd);
    return rc;
  }
  ctl.listen_fd = fd;
  ctl.owner = getpid();
  snprintf(ctl.path, sizeof ctl.path, "%s", addr.sun_path);
  pthread_mutex_lock(&state_file.lock);
  if (ckpt_state_path(ctl.path, state_file.path, sizeof state_file.path) != 0)
    state_file.path[0] = '\0';
  state_file.line[0] = '\0';
  pthread_mutex_unlock(&state_file.lock);
  if (!at_exit_registered && atexit(remove_socket) == 0) at_exit_registered = true;
  return 0;
}

static void close_pipe(int p[2]) {
  for (int i = 0; i < 2; i++)
    if (p[i] >= 0) close(p[i]);
  p[0] = p[1] = -1;
}

int control_start(void) {
  if (pipe2(ctl.signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -errno;
  if (pipe2(ctl.wake_pipe, O_CLOEXEC) != 0) {
    int rc = -errno;
    close_pipe(ctl.signal_pipe);
    return rc;
  }
  open_socket(); /* without it, signals and ckpt_request_* still work */
  int rc = pthread_create(&ctl.thread, NULL, run, NULL);
  if (rc) {
    control_stop();
    return -rc;
  }
  ctl.started = true;
  return 0;
}

void control_forget_after_fork(void) {
  /* The socket is the parent's: close our copy, never unlink it. */
  if (ctl.listen_fd >= 0) close(ctl.listen_fd);
  ctl.listen_fd = -1;
  ctl.path[0] = '\0';
  pthread_mutex_init(&state_file.lock, NULL); /* a parent thread may have held it at fork */
  state_file.path[0] = state_file.line[0] = '\0'; /* the parent's file */
  ctl.started = false;
  close_pipe(ctl.signal_pipe);
  close_pipe(ctl.wake_pipe);
}

void control_stop(void) {
  if (ctl.started) {
    char byte = 1;
    ssize_t n = write(ctl.wake_pipe[1], &byte, 1);
    (void)n;
    pthread_join(ctl.thread, NULL);
    ctl.started = false;
  }
  if (ctl.listen_fd >= 0) close(ctl.listen_fd);
  ctl.listen_fd = -1;
  remove_socket();
  close_pipe(ctl.signal_pipe);
  close_pipe(ctl.wake_pipe);
}
