/* cudawd's disk tier (--spill-dir): when the host is short of memory for the swapped-out images,
 * the coldest one moves to disk. Coldest: a program idle on the GPU (it does not want its turn)
 * before one waiting for it, then the lowest priority, then the longest out. The program writes
 * the image itself, as its own user (SCHED_SPILL carries the directory, the program makes one of
 * its own under it), so cudawd never reads another user's memory; the resume it is sent on its
 * turn streams the image back from disk. An image needed sooner than it could be read back (the
 * head of the queue, or one whose turn comes before that) stays in host memory. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

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

/* Whether a is colder than b: idle on the GPU before waiting, lower priority, out longer. */
static bool colder(const struct program *a, const struct program *b)
{
  bool a_idle = !sched_wanting(a), b_idle = !sched_wanting(b);
  if (a_idle != b_idle) return a_idle;
  if (a->priority != b->priority) return a->priority < b->priority;
  return a->state_since < b->state_since;
}

bool sched_spill_coldest(struct daemon *d, const struct program *head, double now,
                         const char *why)
{
  if (!d->config.spill_dir || d->spill_fd < 0 || d->transition) return false;
  struct program *best = NULL;
  const struct program *kept = NULL; /* the coldest one left in host memory: needed soon */
  bool kept_head = false;
  for (struct program *p = d->programs; p; p = p->next) {
    if (!p->joined || p->retired || p->state != SCHED_SWAPPED_OUT || p->on_disk ||
        p->pending_op || p->spill_skip_until > now || !sched_image_bytes(p))
      continue;
    double back = (double)sched_image_bytes(p) / read_rate(d), turn = turn_in(d, p);
    if (p == head || (turn >= 0 && turn < back)) {
      if (!kept || colder(p, kept)) {
        kept = p;
        kept_head = p == head;
      }
      continue;
    }
    if (!best || colder(p, best)) best = p;
  }
  if (!best) return false;
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
             kept_head ? "its turn is next" : "its turn comes before it could be read back");
  fprintf(stderr, "cudawd: spilling pid %ld's image (%.2f GiB) to %s: %s; it is the coldest "
          "swapped-out image (%s, priority %d, out for %.1f s)%s\n", (long)best->pid,
          (double)sched_image_bytes(best) / (1u << 30), d->config.spill_dir, why,
          sched_wanting(best) ? "waiting for its turn" : "idle on the GPU", best->priority,
          now - best->state_since, stays);
  best->pending_op = 3;
  best->spill_started = now;
  d->transition = best;
  return true;
}

void sched_spill_done(struct daemon *d, struct program *p, int status, uint64_t bytes,
                      double seconds)
{
  if (d->transition == p) d->transition = NULL;
  d->host_read_at = 0; /* memory was freed: read MemAvailable afresh */
  if (status != 0) {
    d->spill_failures++;
    p->spill_skip_until = sched_now() + 10 * d->config.quantum;
    fprintf(stderr, "cudawd: spill of pid %ld failed (%s): its image stays in host memory\n",
            (long)p->pid, strerror(-status));
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
  (void)d;
  p->on_disk = true;
  p->disk_bytes = bytes;
  fprintf(stderr, "cudawd: pid %ld re-joined with its image on disk (%.3f GiB)\n", (long)p->pid,
          (double)bytes / (1u << 30));
}

void sched_spill_resumed(struct daemon *d, struct program *p, int status, uint64_t bytes,
                         double seconds)
{
  if (!p->on_disk || status != 0) return;
  if (bytes >= (64ull << 20) && seconds > 0) d->disk_read_rate = (double)bytes / seconds;
  p->on_disk = false;
  p->disk_bytes = 0;
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
