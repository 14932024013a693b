/* cudawd's disk tier (--spill-dir): when the host is short of memory for the swapped-out images,
 * the coldest one moves to disk. Coldest: a program idle on the GPU (it does not want its turn)
 * before one waiting for it, then the lowest priority, then the longest out. The program writes
 * the image itself, as its own user (SCHED_SPILL carries the directory, the program makes one of
 * its own under it), so cudawd never reads another user's memory. An image needed sooner than it
 * could be read back (the head of the queue, or one whose turn comes before that) stays in host
 * memory, and a spill the disk has no room for is not ordered. An image on disk whose program
 * wants its turn is read back into host memory while it waits (SCHED_UNSPILL), where the host
 * has room for it, so that its turn does not wait for the disk; else the resume on its turn
 * streams it from disk. A program that dies with an image cudawd had it write leaves nothing
 * behind: cudawd removes it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "ckpt.h"
#include "daemon.h"

/* Until a resume from disk has been seen, images are taken to read back at this rate: a single
 * NVMe drive's sequential read, the low end (what the disk tier is meant for). */
#define SPILL_DEFAULT_READ_RATE 2e9

int sched_spill_open(struct daemon *d)
{
  const char *dir = d->config.spill_dir;
  d->spill_fd = -1;
  if (!dir) return 0;
  struct stat st;
  struct statfs fs;
  if (dir[0] != '/') {
    fprintf(stderr, "cudawd: --spill-dir %s: expected an absolute path\n", dir);
    return -EINVAL;
  }
  int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    fprintf(stderr, "cudawd: --spill-dir %s: %s\n", dir, strerror(err));
    return -err;
  }
  if (fstat(fd, &st) != 0 || fstatfs(fd, &fs) != 0) {
    int err = errno;
    fprintf(stderr, "cudawd: --spill-dir %s: %s\n", dir, strerror(err));
    close(fd);
    return -err;
  }
  /* Memory-backed "disk" frees nothing: an image moved there still takes host memory. */
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) {
    fprintf(stderr, "cudawd: --spill-dir %s is on a memory-backed file system (tmpfs or ramfs): "
            "images moved there would still take host memory; give a directory on a disk\n",
            dir);
    close(fd);
    return -EINVAL;
  }
  /* The programs write into directories of their own under it, as their own users. */
  if (access(dir, W_OK | X_OK) != 0 && !(st.st_mode & S_IWOTH))
    fprintf(stderr, "cudawd: warning: --spill-dir %s may not be writable by the programs "
            "(mode %03o): their spills will fail and their images stay in host memory\n", dir,
            (unsigned)(st.st_mode & 0777));
  d->spill_fd = fd;
  fprintf(stderr, "cudawd: disk tier: images move to %s when host memory runs short\n", dir);
  return 0;
}

static double read_rate(const struct daemon *d)
{
  return d->disk_read_rate > 0 ? d->disk_read_rate : SPILL_DEFAULT_READ_RATE;
}

/* What the spill directory's file system has free for the programs (bytes) and what a spill must
 * leave free there (margin: 1/32 of it, at least 1 GiB, as on the host: logs, other users'
 * files). CUDAWD_TEST_DISK_FREE (bytes; for tests only, never documented as an option) stands
 * in for the free figure, so that a full disk can be tested without a tiny file system. False:
 * unknown (the spill is ordered; the program's write fails cleanly if the disk fills). */
static bool disk_room(const struct daemon *d, uint64_t *free_bytes, uint64_t *margin)
{
  struct statvfs fs;
  const char *fake = getenv("CUDAWD_TEST_DISK_FREE");
  bool known = fstatvfs(d->spill_fd, &fs) == 0;
  uint64_t size = known ? (uint64_t)fs.f_blocks * fs.f_frsize : 0;
  *free_bytes = known ? (uint64_t)fs.f_bavail * fs.f_frsize : 0;
  if (fake && *fake) { /* a disk of that much free space, its size unknown: the least margin */
    *free_bytes = strtoull(fake, NULL, 10);
    size = 0;
    known = true;
  }
  *margin = size / 32 > (1ull << 30) ? size / 32 : 1ull << 30;
  return known;
}

/* Seconds until p's turn at the earliest: the turns of the wanting programs ahead of it. A
 * program idle on the GPU does not want its turn: its return is not foreseen (-1). */
static double turn_in(const struct daemon *d, const struct program *p)
{
  if (!sched_wanting(p)) return -1;
  double seconds = 0;
  for (const struct program *q = d->programs; q; q = q->next)
    if (q != p && sched_wanting(q) && sched_before(q, p))
      seconds += d->config.quantum * (q->priority > 0 ? q->priority : 1);
  return seconds;
}

/* Seconds until p, idle on the GPU, is expected back: its idle phase's start plus the length its
 * last one (or its command's) had. -1 when not foreseen: it wants its turn already, no idle phase
 * of it is known, or it is overdue (then its return could be any moment or much later). */
static double back_in(const struct daemon *d, const struct program *p, double now)
{
  double expected = p->gpu_idle ? sched_idle_expected(d, p) : 0;
  if (expected <= 0) return -1;
  double left = p->gpu_idle_since + expected - now;
  return left > 0 ? left : -1;
}

/* Whether a is colder than b: idle on the GPU before waiting, lower priority, out longer. */
static bool colder(const struct program *a, const struct program *b)
{
  bool a_idle = !sched_wanting(a), b_idle = !sched_wanting(b);
  if (a_idle != b_idle) return a_idle;
  if (a->priority != b->priority) return a->priority < b->priority;
  return a->state_since < b->state_since;
}

bool sched_spill_coldest(struct daemon *d, const struct program *head, double now,
                         const char *why, bool idle_only)
{
  if (!d->config.spill_dir || d->spill_fd < 0 || d->transition || d->spilling) return false;
  struct program *best = NULL;
  const struct program *kept = NULL; /* the coldest one left in host memory: needed soon */
  const char *kept_why = "";
  const struct program *too_big = NULL; /* the coldest one the disk has no room for */
  uint64_t disk_free, disk_margin;
  bool disk_known = disk_room(d, &disk_free, &disk_margin);
  for (struct program *p = d->programs; p; p = p->next) {
    if (!p->joined || p->retired || p->leaving || p->state != SCHED_SWAPPED_OUT ||
        p->on_disk || p->pending_op || p->spill_skip_until > now || !sched_image_bytes(p) ||
        p == d->reading_back || (idle_only && sched_wanting(p)))
      continue;
    /* Read back ahead of its turn: not spilled again while it still wants it (no ping-pong). */
    if (p->read_back && sched_wanting(p)) continue;
    if (disk_known && sched_image_bytes(p) + disk_margin > disk_free) {
      if (!too_big || colder(p, too_big)) too_big = p;
      continue;
    }
    /* Needed before it could be read back: its turn comes sooner, or (idle on the GPU) its
     * idle phases say it is back before it could be written and read back, with a margin that
     * keeps it out of reach of the read-back ahead of a return (sched_spill_read_ahead). */
    double back = (double)sched_image_bytes(p) / read_rate(d), turn = turn_in(d, p), need = back;
    if (turn < 0) {
      turn = back_in(d, p, now);
      need = 2 * back + 2;
      /* Ahead of need, a return not foreseen (no idle phase known, or overdue) must have been
       * idle as long as the write and the read would take (ski rental): a job's first short
       * host phase is not sent to disk, only to be read back at once. */
      if (idle_only && turn < 0 && now - p->gpu_idle_since < need) continue;
    }
    /* Read back ahead of a return its idle phases foretold, and not back yet: kept as long as
     * writing and reading it again would take (ski rental). A return a little late is not
     * foreseen any more (back_in), and notebook_bench's notebook 4 was read back 0.4 s before
     * its foreseen return, spilled again 0.4 s later and back 8.4 s after: 32 s more of disk
     * and a wait of 58 s (H200 as an H100, session 30). */
    bool just_read = p->read_back && p->read_back_at > 0 && now - p->read_back_at < 2 * back + 2;
    if (p == head || just_read || (turn >= 0 && turn < need)) {
      if (!kept || colder(p, kept)) {
        kept = p;
        kept_why = p == head ? "its turn is next"
                   : just_read ? "read back for its return, not yet come"
                               : "its turn comes before it could be read back";
      }
      continue;
    }
    if (!best || colder(p, best)) best = p;
  }
  if (!best) {
    if (too_big && !kept && !d->disk_short_logged) {
      d->disk_short_logged = true;
      fprintf(stderr, "cudawd: not spilling pid %ld's image (%.2f GiB) to %s: %s; the disk there "
              "has %.2f GiB free and a spill leaves %.2f GiB of it free: images stay in host "
              "memory (said once until a spill fits again)\n", (long)too_big->pid,
              (double)sched_image_bytes(too_big) / (1u << 30), d->config.spill_dir, why,
              (double)disk_free / (1u << 30), (double)disk_margin / (1u << 30));
    }
    return false;
  }
  d->disk_short_logged = false;
  struct sched_msg order = {.version = SCHED_PROTO_VERSION, .type = SCHED_SPILL, .pid = best->pid};
  int rc = sched_send_fd(best, &order, d->spill_fd);
  if (rc) {
    fprintf(stderr, "cudawd: sending pid %ld its spill order failed: %s\n", (long)best->pid,
            strerror(-rc));
    best->spill_skip_until = now + d->config.quantum;
    return false;
  }
  char stays[96] = "";
  if (kept)
    snprintf(stays, sizeof stays, "; pid %ld stays in host memory (%s)", (long)kept->pid,
             kept_why);
  fprintf(stderr, "cudawd: spilling pid %ld's image (%.2f GiB) to %s: %s; it is the coldest "
          "swapped-out image (%s, priority %d, out for %.1f s)%s\n", (long)best->pid,
          (double)sched_image_bytes(best) / (1u << 30), d->config.spill_dir, why,
          sched_wanting(best) ? "waiting for its turn" : "idle on the GPU", best->priority,
          now - best->state_since, stays);
  best->pending_op = 3;
  best->spill_started = now;
  best->spill_ordered = true; /* its cudaw-<uid>-<pid> under the spill dir is ours to clean */
  d->spilling = best; /* beside the swaps; never resumed until it answers (pending_op) */
  return true;
}

void sched_spill_done(struct daemon *d, struct program *p, int status, uint64_t bytes,
                      double seconds)
{
  if (d->spilling == p) d->spilling = NULL;
  d->host_read_at = 0; /* memory was freed: read MemAvailable afresh */
  if (status != 0) {
    d->spill_failures++;
    p->spill_skip_until = sched_now() + 10 * d->config.quantum;
    bool full = status == -ENOSPC || status == -EDQUOT || status == -EFBIG;
    fprintf(stderr, "cudawd: spill of pid %ld failed (%s%s): its image stays in host memory\n",
            (long)p->pid, strerror(-status), full ? ": the disk is full" : "");
    return;
  }
  p->on_disk = true;
  p->disk_bytes = bytes;
  p->spills++;
  d->spills++;
  d->spilled_bytes += bytes;
  fprintf(stderr, "cudawd: pid %ld spilled: %.3f GiB to disk in %.3f s (%.2f GB/s)\n",
          (long)p->pid, (double)bytes / (1u << 30), seconds,
          seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0);
}

void sched_spill_rejoined(struct daemon *d, struct program *p, uint64_t bytes)
{
  p->on_disk = true;
  p->disk_bytes = bytes;
  /* An earlier cudawd's order put it in cudaw-<uid>-<pid> under this spill directory: ours to
   * clean up when the program ends, as if this cudawd had ordered it (a directory of the
   * program's uid, not a link; one a user named with cudaw-ctl spill is elsewhere). */
  char name[64];
  struct stat st;
  snprintf(name, sizeof name, "cudaw-%u-%ld", (unsigned)p->uid, (long)p->pid);
  if (d->spill_fd >= 0 && fstatat(d->spill_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISDIR(st.st_mode) && st.st_uid == p->uid)
    p->spill_ordered = true;
  fprintf(stderr, "cudawd: pid %ld re-joined with its image on disk (%.3f GiB)\n", (long)p->pid,
          (double)bytes / (1u << 30));
}

void sched_spill_resumed(struct daemon *d, struct program *p, int status, uint64_t bytes,
                         double seconds)
{
  if (status == 0) p->read_back = false; /* its turn came */
  if (!p->on_disk || status != 0) return;
  if (bytes >= (64ull << 20) && seconds > 0) d->disk_read_rate = (double)bytes / seconds;
  p->on_disk = false;
  p->disk_bytes = 0;
}

static uint64_t disk_image_bytes(const struct program *p)
{
  return p->disk_bytes ? p->disk_bytes : sched_image_bytes(p);
}

uint64_t sched_spill_reading(const struct daemon *d)
{
  return d->reading_back ? disk_image_bytes(d->reading_back) : 0;
}

double sched_spill_read_seconds(const struct daemon *d, const struct program *p)
{
  return p->on_disk ? (double)disk_image_bytes(p) / read_rate(d) : 0;
}

void sched_spill_read_ahead(struct daemon *d, double now)
{
  if (!d->config.spill_dir || d->spill_fd < 0) return;
  struct program *r = d->reading_back;
  if (r) { /* one at a time; one never answered (an older program) stops holding the others */
    if (d->config.swap_timeout > 0 && now - r->read_back_started >= d->config.swap_timeout) {
      fprintf(stderr, "cudawd: pid %ld did not answer its read-back within %.0f s: its resume "
              "will read its image from disk\n", (long)r->pid, d->config.swap_timeout);
      r->read_back_failed = true;
      d->reading_back = NULL;
      d->host_read_at = 0;
    }
    return;
  }
  /* Beside a swap that does not read the disk: a checkpoint (its image, unless it goes into
   * the pool, counts as taken already) or a resume from host memory (it frees memory). */
  const struct program *t = d->transition;
  uint64_t moving = 0;
  if (d->spilling || (t && t->pending_op == 2 && t->on_disk)) return;
  if (t && t->pending_op == 1 && !t->loan.length) moving = sched_image_bytes(t);
  /* The image on disk whose turn comes first among those that want one; else, of those idle on
   * the GPU, the one expected back first if that is sooner than its read would take (with half
   * of it again and a second to spare): a notebook's next cell then finds it in host memory. */
  struct program *next = NULL, *soon = NULL;
  double soon_in = 0;
  int ahead = 0;
  for (struct program *p = d->programs; p; p = p->next) {
    if (!p->joined || p->retired || p->leaving || p->state != SCHED_SWAPPED_OUT || !p->on_disk ||
        p->pending_op || p->read_back_failed)
      continue;
    if (sched_wanting(p)) {
      if (!next || sched_before(p, next)) next = p;
      continue;
    }
    double in = back_in(d, p, now);
    if (in >= 0 && in <= 1.5 * (double)disk_image_bytes(p) / read_rate(d) + 1 &&
        (!soon || in < soon_in)) {
      soon = p;
      soon_in = in;
    }
  }
  if (!next) next = soon;
  if (!next) return;
  /* A wanting program before it whose image waits in host memory comes back by a swap-out of a
   * resident one, whose image needs host room unless the pool takes it: the read-back leaves
   * room for the largest such image too. notebook_bench (H200 as an H100, session 30): a 24 GiB
   * read-back for notebook 3 left 26 GiB where notebook 2, first in line, needed a swap-out of
   * 28 GiB; notebook 2 waited 30 s more, for a spill the read beside it slowed to 0.91 GB/s. */
  const struct program *first_in_host = NULL;
  uint64_t keep = 0;
  for (const struct program *q = d->programs; q; q = q->next) {
    if (q == next || !q->joined || q->retired || q->leaving || !sched_wanting(q)) continue;
    ahead += sched_before(q, next);
    if (q->state == SCHED_SWAPPED_OUT && !q->on_disk && (next == soon || sched_before(q, next)))
      first_in_host = q;
  }
  for (const struct program *r = d->programs; first_in_host && r; r = r->next)
    if (r->joined && !r->retired && !r->leaving && r->state == SCHED_RUNNING &&
        sched_image_bytes(r) > keep && !sched_pool_would_lend(d, r))
      keep = sched_image_bytes(r);
  /* The host-room rule of a swap-out, and more: after it the host must stay above twice the
   * margin, where the disk tier would spill another image at once (a ping-pong). */
  uint64_t bytes = disk_image_bytes(next), margin = sched_host_margin(d);
  double gib = 1u << 30;
  uint64_t available = d->host_available > moving ? d->host_available - moving : 0;
  if (!d->host_total || bytes + 2 * margin + keep > available) {
    char room[128] = "";
    if (keep)
      snprintf(room, sizeof room, ", and room for a swap-out of %.2f GiB so that pid %ld, before "
               "it, can come back", (double)keep / gib, (long)first_in_host->pid);
    if (!next->read_back_refused)
      fprintf(stderr, "cudawd: not reading pid %ld's image (%.2f GiB) back from disk ahead of its "
              "turn: the host has %.2f GiB available and must keep twice %.2f GiB free%s; its "
              "resume streams it from disk\n", (long)next->pid, (double)bytes / gib,
              (double)available / gib, (double)margin / gib, room);
    next->read_back_refused = true;
    return;
  }
  next->read_back_refused = false;
  struct sched_msg order = {.version = SCHED_PROTO_VERSION, .type = SCHED_UNSPILL,
                            .pid = next->pid};
  int rc = sched_send(next, &order);
  if (rc) {
    fprintf(stderr, "cudawd: sending pid %ld its read-back order failed: %s\n", (long)next->pid,
            strerror(-rc));
    next->read_back_failed = true;
    return;
  }
  char before[64];
  if (next == soon)
    snprintf(before, sizeof before, "idle on the GPU, expected back in %.1f s", soon_in);
  else
    snprintf(before, sizeof before, "%d wanting programs before it", ahead);
  fprintf(stderr, "cudawd: reading pid %ld's image (%.2f GiB) back from disk ahead of its turn "
          "(%s; %.2f GiB of host memory available, about %.1f s at %.2f GB/s)\n",
          (long)next->pid, (double)bytes / gib, before, (double)available / gib,
          (double)bytes / read_rate(d), read_rate(d) / 1e9);
  next->read_back_started = now;
  d->reading_back = next;
  d->host_available = d->host_available > bytes ? d->host_available - bytes : 0;
}

void sched_spill_read_done(struct daemon *d, struct program *p, int status, uint64_t bytes,
                           double seconds)
{
  if (!p->read_back_started) {
    sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: pid %ld: a read-back it was not asked for: "
                    "ignored\n", (long)p->pid);
    return;
  }
  double took = sched_now() - p->read_back_started;
  p->read_back_started = 0;
  if (d->reading_back == p) d->reading_back = NULL;
  d->host_read_at = 0; /* MemAvailable moved: read it afresh */
  if (status != 0) {
    p->read_back_failed = true;
    fprintf(stderr, "cudawd: read-back of pid %ld failed (%s): its resume streams the image from "
            "disk\n", (long)p->pid, strerror(-status));
    return;
  }
  if (bytes >= (64ull << 20) && seconds > 0) d->disk_read_rate = (double)bytes / seconds;
  p->on_disk = false;
  p->disk_bytes = 0;
  p->read_back = true;
  p->read_back_at = sched_now();
  d->read_backs++;
  fprintf(stderr, "cudawd: pid %ld read back from disk ahead of its turn: %.3f GiB in %.3f s "
          "(%.2f GB/s; %.3f s since ordered); its resume copies from host memory\n",
          (long)p->pid, (double)bytes / (1u << 30), seconds,
          seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0, took);
}

/* Whether process pid has exited (gone, or a zombie). Its connection closes during its exit, a
 * moment before it is a zombie: a caller that finds it not yet exited asks again later
 * (sched_spill_check), never waits here (cudawd serves everyone from one thread). */
static bool exited(pid_t pid)
{
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "r");
  if (!f) return errno == ENOENT || errno == ESRCH;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')');
  if (!paren || paren[1] != ' ') return false;
  return paren[2] == 'Z' || paren[2] == 'X' || paren[2] == 'x';
}

/* A program gone with its image on disk that cudawd does not remove: the program's own files,
 * only it (its user) knows whether to keep them. */
static void say_left(const struct daemon *d, pid_t pid, uint64_t disk_bytes, const char *why)
{
  const char *dir = d->config.spill_dir;
  fprintf(stderr, "cudawd: pid %ld left with its image on disk (%.2f GiB, under %s)%s\n",
          (long)pid, (double)disk_bytes / (1u << 30),
          dir ? dir : "an earlier cudawd's spill directory", why);
}

/* Remove the image directory cudawd's order made for program pid, its process gone:
 * cudaw-<uid>-<pid> under --spill-dir, the program's uid's, not a link. */
static void clean_up(struct daemon *d, pid_t pid, uid_t uid, bool on_disk, uint64_t disk_bytes)
{
  const char *dir = d->config.spill_dir;
  char name[64];
  snprintf(name, sizeof name, "cudaw-%u-%ld", (unsigned)uid, (long)pid);
  int rc = ckpt_remove_image_at(d->spill_fd, name, uid);
  if (rc == 0) {
    fprintf(stderr, "cudawd: pid %ld died with %s: removed %s/%s\n", (long)pid,
            on_disk ? "its image on disk" : "its image files left on disk", dir, name);
    return;
  }
  if (rc != -ENOENT)
    fprintf(stderr, "cudawd: pid %ld died; cannot remove its image in %s/%s: %s\n", (long)pid,
            dir, name, strerror(-rc));
  if (on_disk) say_left(d, pid, disk_bytes, "");
}

/* Seconds a program gone with an image of cudawd's order may take to finish exiting before
 * its files are left as they are (one that lives on, closed for breaking the protocol, may yet
 * resume from them). Its exit can outlast the connection's close by more than 0.1 s on a busy
 * host (CI: an address space torn down after its sockets). */
#define LEFTOVER_WAIT 5.0

void sched_spill_forget(struct daemon *d, struct program *p)
{
  if (d->reading_back == p) d->reading_back = NULL;
  if (d->spilling == p) d->spilling = NULL;
  /* Only the directory its order made, never one a user named with cudaw-ctl spill; and never
   * while the program still runs (closed for breaking the protocol, it may resume from it). */
  bool ours = p->spill_ordered && d->spill_fd >= 0 && d->config.spill_dir;
  if (ours && exited(p->pid)) {
    clean_up(d, p->pid, p->uid, p->on_disk, p->disk_bytes);
  } else if (ours && d->leftover_count < (int)(sizeof d->leftovers / sizeof d->leftovers[0])) {
    d->leftovers[d->leftover_count++] = (struct spill_leftover){
        .pid = p->pid, .uid = p->uid, .on_disk = p->on_disk, .disk_bytes = p->disk_bytes,
        .until = sched_now() + LEFTOVER_WAIT};
  } else if (p->on_disk) {
    say_left(d, p->pid, p->disk_bytes, "");
  }
}

void sched_spill_check(struct daemon *d, double now)
{
  for (int i = 0; i < d->leftover_count;) {
    struct spill_leftover *l = &d->leftovers[i];
    bool gone = exited(l->pid);
    if (!gone && now < l->until) {
      i++;
      continue;
    }
    if (gone)
      clean_up(d, l->pid, l->uid, l->on_disk, l->disk_bytes);
    else if (l->on_disk)
      say_left(d, l->pid, l->disk_bytes, ": its process lives on");
    *l = d->leftovers[--d->leftover_count];
  }
  struct program *p = d->spilling;
  if (!p || !(d->config.swap_timeout > 0) || now - p->spill_started < d->config.swap_timeout)
    return;
  d->spilling = NULL; /* a late answer still lands (pending_op stays) */
  fprintf(stderr, "cudawd: pid %ld did not answer its spill within %.0f s: another may be "
          "ordered\n", (long)p->pid, d->config.swap_timeout);
}

void sched_spill_info(const struct daemon *d, struct sched_spill_info *out)
{
  memset(out, 0, sizeof *out);
  out->enabled = d->config.spill_dir && d->spill_fd >= 0;
  out->spills = d->spills;
  out->spill_failures = d->spill_failures;
  out->spilled_bytes = d->spilled_bytes;
  out->read_rate = d->disk_read_rate;
  if (d->config.spill_dir) snprintf(out->dir, sizeof out->dir, "%s", d->config.spill_dir);
  for (const struct program *p = d->programs; p; p = p->next)
    if (p->joined && p->on_disk) {
      out->on_disk++;
      out->disk_bytes += p->disk_bytes;
    }
}
