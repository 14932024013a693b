/* cudawd lends ranges of its host-memory pool (pool.c) to the programs it swaps out: the pool's
 * descriptor goes to each program once, after its hello; a checkpoint order carries the range
 * for the image; the range comes back when the program's resume is done, when its checkpoint
 * fails, or when it leaves. Only programs of cudawd's own user get the pool: with --system the
 * images of one user must not be readable by another. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"

void sched_pool_offer(struct daemon *d, struct program *p)
{
  if (!d->pool.size || p->pool_sent || p->fd < 0) return;
  p->pool_sent = true;
  if (p->uid != geteuid()) {
    if (d->config.verbose)
      fprintf(stderr, "cudawd: pid %ld (uid %u): not given the host-memory pool (only uid %u's "
              "programs share it)\n", (long)p->pid, (unsigned)p->uid, (unsigned)geteuid());
    return;
  }
  struct sched_msg msg = {.version = SCHED_PROTO_VERSION, .type = SCHED_POOL, .pid = p->pid,
                          .value = d->pool.huge, .bytes = d->pool.size};
  struct iovec iov = {&msg, sizeof msg};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr hdr = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = sizeof control.buf};
  struct cmsghdr *cmsg = CMSG_FIRSTHDR(&hdr);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cmsg), &d->pool.fd, sizeof(int));
  if (sendmsg(p->fd, &hdr, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof msg)
    sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: pid %ld: sending the host-memory pool failed: "
                    "%s\n", (long)p->pid, strerror(errno));
}

/* A margin over the resident bytes: each image region starts on a page. */
static uint64_t image_estimate(const struct program *p)
{
  uint64_t bytes = 0;
  for (int s = 0; s < SCHED_MAX_DEVICES; s++) bytes += p->bytes[s];
  return bytes ? bytes + bytes / 64 + (16ull << 20) : 0;
}

bool sched_pool_would_lend(const struct daemon *d, const struct program *p)
{
  return d->pool.size && p->pool_mapped && !p->loan.length &&
         pool_can_lend(&d->pool, image_estimate(p));
}

void sched_pool_lend(struct daemon *d, struct program *p, struct sched_msg *msg)
{
  msg->bytes = msg->held = 0;
  if (!d->pool.size || !p->pool_mapped) return;
  if (p->loan.length) sched_pool_take_back(d, p, "a new checkpoint"); /* never two at once */
  uint64_t want = image_estimate(p);
  if (!want) return;
  if (pool_lend(&d->pool, want, &p->loan) != 0) {
    d->pool.fallbacks++;
    p->loan = (struct pool_loan){0};
    fprintf(stderr, "cudawd: pid %ld: no room in the host-memory pool for its %.3f GiB image "
            "(%.3f GiB free of %.3f GiB): it checkpoints into memory of its own\n", (long)p->pid,
            (double)want / (1u << 30), (double)pool_free_bytes(&d->pool) / (1u << 30),
            (double)d->pool.size / (1u << 30));
    return;
  }
  msg->held = p->loan.offset;
  msg->bytes = p->loan.length;
  if (d->config.verbose)
    fprintf(stderr, "cudawd: pid %ld: lent pool range %llu+%llu\n", (long)p->pid,
            (unsigned long long)p->loan.offset, (unsigned long long)p->loan.length);
}

void sched_pool_take_back(struct daemon *d, struct program *p, const char *why)
{
  if (!p->loan.length) return;
  pool_return(&d->pool, p->loan.offset);
  if (d->config.verbose)
    fprintf(stderr, "cudawd: pid %ld: pool range %llu+%llu back (%s)\n", (long)p->pid,
            (unsigned long long)p->loan.offset, (unsigned long long)p->loan.length, why);
  p->loan = (struct pool_loan){0};
}

void sched_pool_info(const struct daemon *d, struct sched_pool_info *out)
{
  memset(out, 0, sizeof *out);
  out->other_pools = d->pool_others.others;
  out->other_bytes = d->pool_others.size;
  const struct host_pool *pool = &d->pool;
  if (!pool->size) return;
  out->holder_pid = (int32_t)getpid();
  struct stat st; /* pages the kernel holds for the memfd, faulted in or written by a program */
  out->resident = fstat(pool->fd, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
  out->enabled = 1;
  out->huge_pages = pool->huge;
  out->loans = pool->count;
  out->size = pool->size;
  out->lent = pool->lent;
  out->free = pool_free_bytes(pool);
  out->populated = atomic_load(&((struct host_pool *)pool)->populated);
  out->loans_total = pool->loans_total;
  out->placed_bytes = pool->placed_bytes;
  out->fallbacks = pool->fallbacks;
}
