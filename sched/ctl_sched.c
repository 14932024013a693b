/* cudaw-ctl's scheduler commands: `sched` prints what cudawd holds per device and per program
 * (text, or one JSON object with --json), `priority <pid> N` sets a program's weight. They talk
 * to CUDAW_SCHED_SOCKET (default <run dir>/cudawd.sock); checkpoint/ctl.c dispatches to
 * sched_ctl_main. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ckpt.h"
#include "sched_ctl.h"
#include "sched_proto.h"

enum { EXIT_OK = 0, EXIT_FAILED = 1, EXIT_USAGE = 2, EXIT_NO_PROCESS = 3, EXIT_NO_DAEMON = 4,
       EXIT_PERMISSION = 5 };

static int connect_daemon(void)
{
  struct ckpt_options options;
  ckpt_options_from_env(&options, NULL, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", options.sched_socket);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  struct timeval timeout = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
    int rc = -errno;
    close(fd);
    fprintf(stderr, "cudaw-ctl: no cudawd answers on %s: %s\n", addr.sun_path, strerror(-rc));
    return rc;
  }
  return fd;
}

static int exit_for(int rc)
{
  return rc == -EACCES || rc == -EPERM ? EXIT_PERMISSION : EXIT_NO_DAEMON;
}

/* Ask cudawd; the answer must be reply_len bytes, or at least min_len (an older cudawd's shorter
 * snapshot: the rest stays zero). */
static int ask(int type, pid_t pid, int value, void *reply, size_t reply_len, size_t min_len)
{
  int fd = connect_daemon();
  if (fd < 0) return exit_for(fd);
  struct sched_msg msg = {.version = SCHED_PROTO_VERSION, .type = (uint32_t)type, .pid = pid,
                          .value = value};
  ssize_t n = send(fd, &msg, sizeof msg, MSG_NOSIGNAL);
  if (n == (ssize_t)sizeof msg) n = recv(fd, reply, reply_len, 0);
  close(fd);
  const struct sched_msg *answer = reply;
  if (n == (ssize_t)sizeof(struct sched_msg) && answer->type == SCHED_REPLY &&
      answer->status == -EACCES) {
    fprintf(stderr, "cudaw-ctl: cudawd refused: it belongs to another user\n");
    return EXIT_PERMISSION;
  }
  if (n < (ssize_t)min_len || n > (ssize_t)reply_len || answer->version != SCHED_PROTO_VERSION) {
    fprintf(stderr, "cudaw-ctl: cudawd gave no valid answer (%zd bytes)\n", n);
    return EXIT_FAILED;
  }
  return EXIT_OK;
}

/* Why a program waits, in words (plain ASCII, fit for JSON as it is). */
static const char *wait_text(const struct sched_program_detail *w, char *out, size_t size)
{
  char need[32], free_bytes[32];
  ckpt_format_bytes(w->need_bytes, need, sizeof need);
  ckpt_format_bytes(w->free_bytes, free_bytes, sizeof free_bytes);
  switch (w->wait_reason) {
  case SCHED_WAIT_MEMORY:
    snprintf(out, size, "waiting for memory: %s needed, %s free", need, free_bytes);
    break;
  case SCHED_WAIT_QUEUED:
    snprintf(out, size, "queued behind pid %d (%s needed, %s free)", w->behind_pid, need,
             free_bytes);
    break;
  case SCHED_WAIT_SWAPPING_OUT: snprintf(out, size, "swapping out"); break;
  case SCHED_WAIT_SWAPPING_IN: snprintf(out, size, "swapping in"); break;
  case SCHED_WAIT_HOST_MEMORY:
    snprintf(out, size, "waiting for host memory to swap pid %d out (its image %s, host %s "
             "available)", w->behind_pid, need, free_bytes);
    break;
  case SCHED_WAIT_SPILLING:
    snprintf(out, size, "its image (%s) is being written to disk; its resume reads it back", need);
    break;
  default: snprintf(out, size, "-"); break;
  }
  return out;
}

/* "72.00 MiB 3.2 s ago", or "-" before the first grant. */
static const char *grant_text(const struct sched_program_detail *w, char *out, size_t size)
{
  char bytes[32];
  ckpt_format_bytes(w->last_grant_bytes, bytes, sizeof bytes);
  if (w->last_grant_ago < 0) snprintf(out, size, "-");
  else snprintf(out, size, "%s %.1f s ago", bytes, w->last_grant_ago);
  return out;
}

static void print_json(const struct sched_snapshot *s)
{
  printf("{\"quantum\":%.3f,\"uptime\":%.3f,\"devices\":[", s->quantum, s->uptime);
  for (int i = 0; i < s->devices; i++) {
    const struct sched_device_info *d = &s->device[i];
    char key[SCHED_KEY_LEN + 1];
    printf("%s{\"device\":%d,\"key\":\"%s\",\"capacity\":%" PRIu64 ",\"resident_bytes\":%" PRIu64
           ",\"max_resident_bytes\":%" PRIu64 ",\"swaps\":%" PRIu64 ",\"programs\":%d"
           ",\"users\":%d}",
           i ? "," : "", i, sched_key_printable(d->key, key), d->capacity, d->resident, d->max_resident, d->swaps,
           d->programs, d->users);
  }
  printf("],\"programs\":[");
  for (int i = 0; i < s->programs; i++) {
    const struct sched_program_info *p = &s->program[i];
    const struct sched_program_detail *w = &s->detail[i];
    char why[160];
    printf("%s{\"pid\":%d,\"state\":\"%s\",\"priority\":%d,\"bytes\":%" PRIu64
           ",\"devices\":%d,\"gpu_seconds\":%.3f,\"swaps\":%" PRIu64
           ",\"swap_seconds\":%.3f,\"wait_seconds\":%.3f",
           i ? "," : "", p->pid, sched_state_name(p->state), p->priority, p->bytes,
           p->device_mask, p->gpu_seconds, p->swaps, p->swap_seconds, p->wait_seconds);
    printf(",\"wait\":{\"reason\":\"%s\",\"text\":\"%s\",\"behind_pid\":%d,\"needed_bytes\":%" PRIu64
           ",\"free_bytes\":%" PRIu64 "},\"last_grant\":{\"bytes\":%" PRIu64
           ",\"seconds_ago\":%.3f},\"alloc_retries\":%" PRIu64 ",\"failed_allocations\":%" PRIu64,
           sched_wait_name(w->wait_reason), wait_text(w, why, sizeof why), w->behind_pid,
           w->need_bytes, w->free_bytes, w->last_grant_bytes, w->last_grant_ago, w->retries,
           w->failed);
    const struct sched_program_disk *k = &s->disk[i];
    printf(",\"image_on_disk\":%s,\"disk_bytes\":%" PRIu64 ",\"spills\":%" PRIu64 "}",
           k->on_disk ? "true" : "false", k->bytes, k->spills);
  }
  const struct sched_pool_info *pool = &s->pool;
  printf("],\"host_pool\":{\"enabled\":%s,\"huge_pages\":%s,\"size\":%" PRIu64
         ",\"lent\":%" PRIu64 ",\"free\":%" PRIu64 ",\"populated\":%" PRIu64
         ",\"loans\":%d,\"loans_total\":%" PRIu64 ",\"placed_bytes\":%" PRIu64
         ",\"fallbacks\":%" PRIu64 ",\"holder_pid\":%d,\"resident\":%" PRIu64
         ",\"other_pools\":%d,\"other_pools_bytes\":%" PRIu64 "}",
         pool->enabled ? "true" : "false", pool->huge_pages ? "true" : "false", pool->size,
         pool->lent, pool->free, pool->populated, pool->loans, pool->loans_total,
         pool->placed_bytes, pool->fallbacks, pool->holder_pid, pool->resident,
         pool->other_pools, pool->other_bytes);
  printf(",\"host_pool_window\":%" PRIu64 ",\"host_pool_released\":%" PRIu64
         ",\"pool_release\":%.3f,\"idle_exit\":%.3f,\"idle_for\":%.3f", s->pool_window,
         s->pool_released, s->pool_release, s->idle_exit, s->idle_for);
  const struct sched_spill_info *spill = &s->spill;
  json_t *dir = json_string(spill->dir); /* a path may hold anything JSON must escape */
  char *dir_text = dir ? json_dumps(dir, JSON_ENCODE_ANY) : NULL;
  printf(",\"disk_tier\":{\"enabled\":%s,\"dir\":%s,\"on_disk\":%d,\"disk_bytes\":%" PRIu64
         ",\"spills\":%" PRIu64 ",\"spill_failures\":%" PRIu64 ",\"spilled_bytes\":%" PRIu64
         ",\"read_rate\":%.0f}", spill->enabled ? "true" : "false", dir_text ? dir_text : "null",
         spill->on_disk, spill->disk_bytes, spill->spills, spill->spill_failures,
         spill->spilled_bytes, spill->read_rate);
  free(dir_text);
  json_decref(dir);
  const struct sched_exchange_info *x = &s->exchange;
  printf(",\"exchanges\":{\"done\":%" PRIu64 ",\"failed\":%" PRIu64 ",\"out_bytes\":%" PRIu64
         ",\"in_bytes\":%" PRIu64 ",\"peak_extra_bytes\":%" PRIu64 ",\"last_seconds\":%.3f"
         ",\"active\":%s}", x->exchanges, x->failures, x->out_bytes, x->in_bytes,
         x->peak_extra_bytes, x->last_seconds, x->active ? "true" : "false");
  printf(",\"borrowers\":[");
  for (int i = 0; i < s->borrowers && i < SCHED_MAX_PROGRAMS; i++) {
    const struct sched_borrower_info *w = &s->borrower[i];
    printf("%s{\"pid\":%d,\"uid\":%u,\"image_bytes\":%" PRIu64 ",\"lent\":%" PRIu64
           ",\"loan_offset\":%" PRIu64 "}", i ? "," : "", w->pid, w->uid, w->bytes, w->lent,
           w->loan_offset);
  }
  printf("]");
  printf(",\"users\":[");
  for (int i = 0; i < s->uids && i < SCHED_MAX_UIDS; i++) {
    const struct sched_uid_info *u = &s->uid[i];
    printf("%s{\"uid\":%u,\"connections\":%d,\"programs\":%d,\"connections_total\":%" PRIu64
           ",\"refused\":%" PRIu64 ",\"closed\":%" PRIu64 ",\"protocol_errors\":%" PRIu64
           ",\"messages\":%" PRIu64 "}",
           i ? "," : "", u->uid, u->connections, u->programs, u->connections_total, u->refused,
           u->closed, u->protocol_errors, u->messages);
  }
  printf("]}\n");
}

static void print_text(const struct sched_snapshot *s)
{
  char a[32], b[32], c[32];
  printf("cudawd: up %.0f s, quantum %.1f s", s->uptime, s->quantum);
  if (s->idle_exit > 0 && s->idle_for > 0)
    printf("; no program for %.0f s, exits after %.0f (--idle-exit)", s->idle_for, s->idle_exit);
  else if (s->idle_exit > 0)
    printf("; exits after %.0f s without a program (--idle-exit)", s->idle_exit);
  printf("\n");
  printf("%-6s %-34s %12s %12s %12s %6s\n", "DEVICE", "KEY", "CAPACITY", "RESIDENT", "MAX",
         "SWAPS");
  for (int i = 0; i < s->devices; i++) {
    const struct sched_device_info *d = &s->device[i];
    ckpt_format_bytes(d->capacity, a, sizeof a);
    ckpt_format_bytes(d->resident, b, sizeof b);
    ckpt_format_bytes(d->max_resident, c, sizeof c);
    char key[SCHED_KEY_LEN + 1];
    printf("%-6d %-34s %12s %12s %12s %6" PRIu64 "\n", i, sched_key_printable(d->key, key), a, b,
           c, d->swaps);
  }
  const struct sched_pool_info *pool = &s->pool;
  if (pool->enabled) {
    char d[32];
    ckpt_format_bytes(pool->size, a, sizeof a);
    ckpt_format_bytes(pool->lent, b, sizeof b);
    ckpt_format_bytes(pool->free, c, sizeof c);
    ckpt_format_bytes(pool->placed_bytes, d, sizeof d);
    char e[32], f[32];
    ckpt_format_bytes(s->pool_window, e, sizeof e);
    ckpt_format_bytes(s->pool_released, f, sizeof f);
    printf("host pool: up to %s, %s offered (what the images need), %s lent (%d ranges), %s "
           "free, huge pages %s%s; %s of images placed, %" PRIu64 " swaps without room; %s given "
           "back after %.0f s unused\n", a, e, b, pool->loans, c, pool->huge_pages ? "yes" : "no",
           pool->resident < s->pool_window ? ", faulting in" : "", d, pool->fallbacks, f,
           s->pool_release);
    /* The pool is a memfd cudawd does not keep mapped: ps and top show none of it. */
    ckpt_format_bytes(pool->resident, a, sizeof a);
    if (pool->holder_pid)
      printf("           held by cudawd pid %d as shared memory (memfd cudawd-pool, Shmem in "
             "/proc/meminfo, not in its RSS): %s resident\n", pool->holder_pid, a);
  } else {
    printf("host pool: none\n");
  }
  if (pool->other_pools) {
    ckpt_format_bytes(pool->other_bytes, a, sizeof a);
    printf("other cudawds' pools on this host: %d, %s in all\n", pool->other_pools, a);
  }
  const struct sched_spill_info *spill = &s->spill;
  if (spill->enabled) {
    ckpt_format_bytes(spill->disk_bytes, a, sizeof a);
    ckpt_format_bytes(spill->spilled_bytes, b, sizeof b);
    printf("disk tier: %s; %d image%s on disk (%s), %" PRIu64 " spills (%s) since start, %" PRIu64
           " failed", spill->dir, spill->on_disk, spill->on_disk == 1 ? "" : "s", a, spill->spills,
           b, spill->spill_failures);
    if (spill->read_rate > 0) printf(", last read back at %.2f GB/s", spill->read_rate / 1e9);
    printf("\n");
  } else {
    printf("disk tier: none (cudawd --spill-dir)\n");
  }
  const struct sched_exchange_info *x = &s->exchange;
  ckpt_format_bytes(x->out_bytes, a, sizeof a);
  ckpt_format_bytes(x->in_bytes, b, sizeof b);
  printf("exchanges: %" PRIu64 " (%s out, %s in), %" PRIu64 " failed%s", x->exchanges, a, b,
         x->failures, x->active ? ", one under way" : "");
  if (x->exchanges || x->failures) {
    ckpt_format_bytes(x->peak_extra_bytes, a, sizeof a);
    printf("; peak extra host memory %s, the last took %.3f s", a, x->last_seconds);
  }
  printf("\n");
  if (s->uids > 0) {
    printf("%-8s %6s %8s %12s %8s %8s %9s %10s\n", "UID", "CONNS", "PROGRAMS", "CONNS_TOTAL",
           "REFUSED", "CLOSED", "PROTOCOL", "MESSAGES");
    for (int i = 0; i < s->uids && i < SCHED_MAX_UIDS; i++) {
      const struct sched_uid_info *u = &s->uid[i];
      printf("%-8u %6d %8d %12" PRIu64 " %8" PRIu64 " %8" PRIu64 " %9" PRIu64 " %10" PRIu64 "\n",
             u->uid, u->connections, u->programs, u->connections_total, u->refused, u->closed,
             u->protocol_errors, u->messages);
    }
  }
  printf("%-8s %-12s %4s %12s %10s %6s %10s %10s %7s %6s %6s  %-24s %s\n", "PID", "STATE",
         "PRIO", "BYTES", "GPU_S", "SWAPS", "SWAP_S", "WAIT_S", "RETRIES", "FAILED", "SPILLS",
         "LAST GRANT", "WHY");
  for (int i = 0; i < s->programs; i++) {
    const struct sched_program_info *p = &s->program[i];
    const struct sched_program_detail *w = &s->detail[i];
    char why[160], grant[64];
    ckpt_format_bytes(p->bytes, a, sizeof a);
    const struct sched_program_disk *k = &s->disk[i];
    printf("%-8d %-12s %4d %12s %10.1f %6" PRIu64 " %10.2f %10.1f %7" PRIu64 " %6" PRIu64
           " %6" PRIu64 "  %-24s %s%s%s\n", p->pid, sched_state_name(p->state), p->priority, a,
           p->gpu_seconds, p->swaps, p->swap_seconds, p->wait_seconds, w->retries, w->failed,
           k->spills, grant_text(w, grant, sizeof grant), wait_text(w, why, sizeof why),
           k->on_disk ? "; image on disk under " : "", k->on_disk ? spill->dir : "");
  }
  /* Programs not under sharing that borrow the pool for their checkpoint images: never
   * scheduled, so apart from the table above. */
  if (s->borrowers > 0)
    printf("%-8s %-8s %12s %12s  %s\n", "BORROWER", "UID", "IMAGE", "LENT", "POOL RANGE");
  for (int i = 0; i < s->borrowers && i < SCHED_MAX_PROGRAMS; i++) {
    const struct sched_borrower_info *w = &s->borrower[i];
    ckpt_format_bytes(w->bytes, a, sizeof a);
    ckpt_format_bytes(w->lent, b, sizeof b);
    char range[64] = "- (none lent)";
    if (w->lent) snprintf(range, sizeof range, "%" PRIu64 "+%" PRIu64, w->loan_offset, w->lent);
    printf("%-8d %-8u %12s %12s  %s\n", w->pid, w->uid, a, b, range);
  }
}

/* sched --stop [--force]: ask cudawd to stop. */
static int stop_main(int count, const char *const *args, bool json)
{
  bool stop = false, force = false;
  for (int i = 1; i < count; i++) {
    if (!strcmp(args[i], "--stop")) stop = true;
    else if (!strcmp(args[i], "--force")) force = true;
    else return ctl_usage_error("sched: unexpected argument '%s'", args[i]);
  }
  if (!stop) return ctl_usage_error("sched: --force goes with --stop (cudaw-ctl sched --stop "
                                    "--force)");
  struct sched_msg reply;
  int code = ask(SCHED_STOP, 0, force, &reply, sizeof reply, sizeof reply);
  if (code != EXIT_OK) return code;
  if (reply.type != SCHED_REPLY) {
    fprintf(stderr, "cudaw-ctl: sched --stop: this cudawd does not know --stop (an older one); "
            "stop it with kill\n");
    return EXIT_FAILED;
  }
  if (reply.status == -EPERM) {
    fprintf(stderr, "cudaw-ctl: sched --stop: refused by cudawd: only its owner or root may stop "
                    "it\n");
    return EXIT_PERMISSION;
  }
  if (reply.status == -EBUSY) {
    fprintf(stderr, "cudaw-ctl: sched --stop: refused: %d program%s joined (cudaw-ctl sched lists "
            "them); --force stops it anyway: they run on unshared\n", reply.value,
            reply.value == 1 ? " is" : "s are");
    return EXIT_FAILED;
  }
  if (reply.status) {
    fprintf(stderr, "cudaw-ctl: sched --stop: %s\n", strerror(-reply.status));
    return EXIT_FAILED;
  }
  if (json) printf("{\"ok\":true,\"stopped\":true,\"programs\":%d}\n", reply.value);
  else printf("cudawd stopping%s\n", reply.value ? " (programs joined: they run on unshared)" : "");
  return EXIT_OK;
}

int sched_ctl_main(int count, const char *const *args, bool json)
{
  if (count == 1 && strcmp(args[0], "sched") == 0) {
    struct sched_snapshot *snapshot = calloc(1, sizeof *snapshot);
    if (!snapshot) return EXIT_FAILED;
    int code = ask(SCHED_STATUS, 0, 0, snapshot, sizeof *snapshot,
                   offsetof(struct sched_snapshot, detail));
    if (code == EXIT_OK) json ? print_json(snapshot) : print_text(snapshot);
    free(snapshot);
    return code;
  }
  if (strcmp(args[0], "sched") == 0) return stop_main(count, args, json);
  char *end;
  if (count < 2) return ctl_usage_error("priority: no pid given (cudaw-ctl priority <pid> N)");
  long pid = strtol(args[1], &end, 10);
  if (*end || end == args[1] || pid <= 0 || pid > 0x7fffffff)
    return ctl_usage_error("priority: '%s' is not a pid", args[1]);
  if (count < 3)
    return ctl_usage_error("priority: no weight given (cudaw-ctl priority <pid> N, N 1-100)");
  if (count > 3) return ctl_usage_error("priority: unexpected argument '%s'", args[3]);
  long value = strtol(args[2], &end, 10);
  if (*end || end == args[2] || value < 1 || value > 100)
    return ctl_usage_error("priority: '%s': expected a weight from 1 to 100", args[2]);
  struct sched_msg reply;
  int code = ask(SCHED_PRIORITY, (pid_t)pid, (int)value, &reply, sizeof reply, sizeof reply);
  if (code != EXIT_OK) return code;
  if (reply.status == -ESRCH) {
    fprintf(stderr, "cudaw-ctl: pid %ld does not share a GPU through cudawd\n", pid);
    return EXIT_NO_PROCESS;
  }
  if (reply.status == -EPERM) {
    fprintf(stderr, "cudaw-ctl: priority: refused by cudawd: pid %ld belongs to another user "
                    "(only its owner or root may change it)\n", pid);
    return EXIT_PERMISSION;
  }
  if (reply.status) {
    fprintf(stderr, "cudaw-ctl: priority: %s\n", strerror(-reply.status));
    return EXIT_FAILED;
  }
  if (json) printf("{\"ok\":true,\"pid\":%ld,\"priority\":%ld}\n", pid, value);
  else printf("pid %ld: priority %ld\n", pid, value);
  return EXIT_OK;
}
