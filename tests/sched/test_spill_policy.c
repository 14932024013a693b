/* Description: the disk tier's choice in cudawd's policy (sched/spill.c) without a daemon: when a
 * swap is refused because the host (a fake /proc/meminfo, CUDAWD_MEMINFO) has no room for the
 * image, the coldest swapped-out image is ordered to disk (SCHED_SPILL, with the spill directory
 * as a descriptor): one idle on the GPU before one waiting for its turn, then the lowest
 * priority, then the longest out. The head of the queue is never spilled, nor one whose turn
 * comes before its image could be read back at the disk rate seen; an image on disk is not
 * spilled again; a resume from disk does not count as a host-memory rate. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon.h"
#include "test.h"

static int sent_count;

int sched_send(struct program *p, const struct sched_msg *msg)
{
  (void)p;
  (void)msg;
  sent_count++;
  return 0;
}

#define MIB (1ull << 20)
static struct program programs[5];
static int peer_end[5]; /* the program's end of each connection */

static struct program *join(struct daemon *d, int index, enum sched_program_state state,
                            int priority, double out_for)
{
  struct program *p = &programs[index];
  memset(p, 0, sizeof *p);
  int pair[2];
  CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
  p->fd = pair[0];
  peer_end[index] = pair[1];
  p->pid = 300 + index;
  p->joined = p->worked = true;
  p->priority = priority;
  p->state = state;
  p->bytes[0] = 60 * MIB;
  double now = sched_now();
  p->accounted_at = now;
  p->state_since = p->wanting_since = now - out_for;
  p->resident_since = now - 100; /* a resident one's turn is over */
  p->next = d->programs;
  d->programs = p;
  return p;
}

/* The pid a spill order went to (with a directory descriptor), or 0 if none was sent. */
static pid_t spill_sent(int count)
{
  for (int i = 0; i < count; i++) {
    struct sched_msg msg;
    union {
      struct cmsghdr align;
      char buf[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = {&msg, sizeof msg};
    struct msghdr hdr = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                         .msg_controllen = sizeof control.buf};
    if (recvmsg(peer_end[i], &hdr, MSG_DONTWAIT) != (ssize_t)sizeof msg) continue;
    struct cmsghdr *c = CMSG_FIRSTHDR(&hdr);
    CHECK(msg.type == SCHED_SPILL, "message %u", msg.type);
    CHECK(c && c->cmsg_type == SCM_RIGHTS, "a spill order without its directory");
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    close(fd);
    return msg.pid;
  }
  return 0;
}

static void write_meminfo(const char *path, unsigned long long available_mib)
{
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fprintf(f, "MemTotal:       %llu kB\nMemAvailable:   %llu kB\n", 8ull << 20,
          available_mib << 10);
  fclose(f);
}

/* A fresh daemon: a 100 MiB device, resident r (60 MiB, its turn over) and the host with 1 GiB
 * kept free and 1.05 GiB available: r's image does not fit. */
static struct daemon *setup(const char *meminfo, const char *dir)
{
  static struct daemon d;
  memset(&d, 0, sizeof d);
  d.config = (struct sched_config){.quantum = 1, .min_run = 0.1, .idle_cpu = 0.02,
                                   .device_memory = 100 * MIB, .spill_dir = dir};
  d.spill_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  CHECK(d.spill_fd >= 0);
  d.pool.fd = -1;
  d.started = sched_now() - 10;
  write_meminfo(meminfo, 1075);
  CHECK(sched_device_slot(&d, "00112233445566778899aabbccddeeff", 16ull << 30) == 0);
  for (int i = 0; i < 5; i++)
    if (peer_end[i] > 0) {
      close(peer_end[i]);
      close(programs[i].fd);
      peer_end[i] = 0;
    }
  return &d;
}

/* Resident r, the head waiting, and two idle images (priority and seconds out each): the one
 * spilled must be program `expected` (2 or 3). */
static void two_idle(const char *meminfo, const char *dir, int priority2, double out2,
                     int priority3, double out3, int expected, const char *which)
{
  struct daemon *d = setup(meminfo, dir);
  join(d, 0, SCHED_RUNNING, 1, 0);
  join(d, 1, SCHED_SWAPPED_OUT, 1, 30);
  join(d, 2, SCHED_SWAPPED_OUT, priority2, out2)->gpu_idle = true;
  join(d, 3, SCHED_SWAPPED_OUT, priority3, out3)->gpu_idle = true;
  sched_step(d);
  pid_t pid = spill_sent(5);
  CHECK(pid == programs[expected].pid, "spilled %d, expected %s %d", pid, which,
        programs[expected].pid);
}

int main(void)
{
  char meminfo[] = "/tmp/cudaw-meminfo-XXXXXX", dir[] = "/tmp/cudaw-spill-XXXXXX";
  int fd = mkstemp(meminfo);
  CHECK(fd >= 0 && mkdtemp(dir) != NULL);
  close(fd);
  setenv("CUDAWD_MEMINFO", meminfo, 1);

  /* r resident; h swapped out and waiting (the head: it waits longest); a swapped out and idle
   * on the GPU, out for less time than h: a is spilled, h is not. */
  struct daemon *d = setup(meminfo, dir);
  join(d, 0, SCHED_RUNNING, 1, 0);
  struct program *h = join(d, 1, SCHED_SWAPPED_OUT, 1, 30);
  struct program *a = join(d, 2, SCHED_SWAPPED_OUT, 1, 5);
  a->gpu_idle = true;
  sched_step(d);
  CHECK(d->host_blocked == programs[0].pid, "the swap of r was not refused for host room");
  pid_t pid = spill_sent(5);
  CHECK(pid == a->pid, "spilled %d, expected the idle one %d (head %d)", pid, a->pid, h->pid);
  CHECK(d->transition == a && a->pending_op == 3);
  /* Done: on disk, host memory read afresh, not ordered again. */
  sched_spill_done(d, a, 0, 60 * MIB, 0.1);
  CHECK(a->on_disk && d->spills == 1 && !d->transition);
  sched_step(d);
  CHECK(spill_sent(5) == 0, "an image spilled twice, or the head spilled");
  struct sched_spill_info info;
  sched_spill_info(d, &info);
  CHECK(info.enabled && info.on_disk == 1 && info.disk_bytes == 60 * MIB && info.spills == 1);
  /* A resume from disk keeps the host rates as they were and records the disk's. */
  double rate_in = d->rate_in[0];
  sched_done(d, a, 2, 0, 600 * MIB, 0.3);
  sched_spill_resumed(d, a, 0, 600 * MIB, 0.3);
  CHECK(d->rate_in[0] == rate_in && !a->on_disk && d->disk_read_rate > 2e9);

  /* The head alone is swapped out: nothing is spilled. */
  d = setup(meminfo, dir);
  join(d, 0, SCHED_RUNNING, 1, 0);
  join(d, 1, SCHED_SWAPPED_OUT, 1, 30);
  sched_step(d);
  CHECK(d->host_blocked && spill_sent(5) == 0, "the head's image was spilled");

  /* Two idle images: the lower priority goes first, though out for less time; at the same
   * priority, the one out longest. */
  two_idle(meminfo, dir, 2, 40, 1, 5, 3, "the lowest priority");
  two_idle(meminfo, dir, 1, 20, 1, 3, 2, "the one out longest");

  /* A waiting image behind the head: its turn comes after one turn (1 s). At 1 MB/s its 60 MiB
   * would take a minute to read back: kept. At the default rate: spilled. */
  d = setup(meminfo, dir);
  join(d, 0, SCHED_RUNNING, 1, 0);
  join(d, 1, SCHED_SWAPPED_OUT, 1, 30);
  struct program *second = join(d, 2, SCHED_SWAPPED_OUT, 1, 10);
  d->disk_read_rate = 1e6;
  sched_step(d);
  CHECK(spill_sent(5) == 0, "an image needed before it could be read back was spilled");
  d->disk_read_rate = 0;
  sched_step(d);
  pid = spill_sent(5);
  CHECK(pid == second->pid, "spilled %d, expected %d", pid, second->pid);

  /* Without a spill directory, nothing moves to disk. */
  d = setup(meminfo, dir);
  d->config.spill_dir = NULL;
  join(d, 0, SCHED_RUNNING, 1, 0);
  join(d, 1, SCHED_SWAPPED_OUT, 1, 30);
  join(d, 2, SCHED_SWAPPED_OUT, 1, 5)->gpu_idle = true;
  sched_step(d);
  CHECK(spill_sent(5) == 0, "spilled without --spill-dir");

  unlink(meminfo);
  rmdir(dir);
  printf("ok\n");
  return 0;
}
