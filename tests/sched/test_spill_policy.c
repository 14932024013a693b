/* Description: the disk tier's choice in cudawd's policy (sched/spill.c) without a daemon: when a
 * swap is refused because the host (a fake /proc/meminfo, CUDAWD_MEMINFO) has no room for the
 * image, the coldest swapped-out image is ordered to disk (SCHED_SPILL, with the spill directory
 * as a descriptor): one idle on the GPU before one waiting for its turn, then the lowest
 * priority, then the longest out. The head of the queue is never spilled, nor one whose turn
 * comes before its image could be read back at the disk rate seen; an image on disk is not
 * spilled again; a resume from disk does not count as a host-memory rate. An image read back
 * ahead of its turn is not spilled again while it wants it, nor, idle, sooner than a write and
 * a read of it would take after its read-back; a disk without room gets no spill
 * (CUDAWD_TEST_DISK_FREE); read-back ahead goes to the wanting image on disk whose turn comes
 * first, one at a time, only where the host keeps twice its margin (and, while one before it
 * waits in host memory, room for the largest resident image's swap-out); the swap cost counts the
 * disk read. Ahead of need: an idle image moves to disk when a resident program's next swap-out
 * would not fit on the host, unless its idle phases say it is back before it could be written
 * and read back, or (none known) it has been idle for less than that; an idle image on disk
 * expected back within its read time is read back first. A spill runs beside the swaps (not as
 * the transition), its program never resumed before it answers; the image of a program gone
 * while its process still exits is removed once it has exited, kept if it lives on. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon.h"
#include "test.h"

static int sent_count;
static struct sched_msg last_sent; /* the last message sched_send had to send */

int sched_send(struct program *p, const struct sched_msg *msg)
{
  (void)p;
  last_sent = *msg;
  sent_count++;
  return 0;
}

/* The pid a read-back order (SCHED_UNSPILL) went to since the last call, or 0. */
static pid_t unspill_sent(void)
{
  pid_t pid = last_sent.type == SCHED_UNSPILL ? last_sent.pid : 0;
  memset(&last_sent, 0, sizeof last_sent);
  return pid;
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

/* A fresh daemon whose host has 4 GiB available of 8 GiB (1 GiB kept free), and programs 0-2
 * swapped out (out[i] seconds each), their 60 MiB images on disk. */
static struct daemon *three_on_disk(const char *meminfo, const char *dir, const double out[3])
{
  struct daemon *d = setup(meminfo, dir);
  d->host_total = 8ull << 30;
  d->host_available = 4ull << 30;
  for (int i = 0; i < 3; i++) {
    join(d, i, SCHED_SWAPPED_OUT, 1, out[i]);
    programs[i].on_disk = true;
    programs[i].disk_bytes = 60 * MIB;
  }
  return d;
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
  CHECK(d->spilling == a && !d->transition && a->pending_op == 3,
        "a spill is not the one transition: it runs beside the swaps");
  /* Beside the spill: the host has room again (another program exited): r is swapped out for h
   * at once; a, wanting its turn now, is not resumed before it answers; no second spill. */
  write_meminfo(meminfo, 4096);
  d->host_read_at = 0;
  memset(&last_sent, 0, sizeof last_sent);
  a->gpu_idle = false;
  a->wanting_since = sched_now() - 100; /* first in line once it answers */
  sched_step(d);
  CHECK(last_sent.type == SCHED_CHECKPOINT && last_sent.pid == programs[0].pid,
        "no swap beside a spill (sent %u to %d)", last_sent.type, last_sent.pid);
  CHECK(d->transition == &programs[0] && a->state == SCHED_SWAPPED_OUT && spill_sent(5) == 0);
  /* What the report says: a waits for its spill; h is not queued behind it. */
  struct sched_program_detail why;
  sched_program_detail(d, a, &why);
  CHECK(why.wait_reason == SCHED_WAIT_SPILLING && why.need_bytes == 60 * MIB &&
            strcmp(sched_wait_name(why.wait_reason), "spilling") == 0,
        "a program in its spill waits for %s", sched_wait_name(why.wait_reason));
  sched_program_detail(d, h, &why);
  CHECK(why.wait_reason != SCHED_WAIT_QUEUED || why.behind_pid != a->pid,
        "the head reported queued behind a program in its spill");
  sched_done(d, &programs[0], 1, 0, 60 * MIB, 0.01);
  memset(&last_sent, 0, sizeof last_sent);
  sched_step(d);
  CHECK(last_sent.type != SCHED_RESUME || last_sent.pid != a->pid, "resumed in its spill");
  if (d->transition && d->transition != a) sched_done(d, d->transition, 2, 0, 60 * MIB, 0.01);
  write_meminfo(meminfo, 1075);
  d->host_read_at = 0;
  a->gpu_idle = true;
  /* Done: on disk, host memory read afresh, not ordered again. */
  sched_spill_done(d, a, 0, 60 * MIB, 0.1);
  CHECK(a->on_disk && d->spills == 1 && !d->spilling);
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

  /* A program in its spill that wants its turn, alone, with the device free: not resumed
   * before it answers (its image is half on disk). */
  d = setup(meminfo, dir);
  struct program *lone = join(d, 0, SCHED_SWAPPED_OUT, 1, 30);
  lone->pending_op = 3;
  d->spilling = lone;
  memset(&last_sent, 0, sizeof last_sent);
  sched_step(d);
  CHECK(last_sent.type == 0 && !d->transition, "resumed in its spill (sent %u)", last_sent.type);

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

  /* An image read back ahead of its turn is not spilled again while it wants its turn (no
   * ping-pong), though it is the only candidate; once idle on the GPU, it may be. */
  d = setup(meminfo, dir);
  join(d, 0, SCHED_RUNNING, 1, 0);
  join(d, 1, SCHED_SWAPPED_OUT, 1, 30);
  struct program *back = join(d, 2, SCHED_SWAPPED_OUT, 1, 5);
  back->read_back = true;
  sched_step(d);
  CHECK(spill_sent(5) == 0, "an image read back ahead of its turn was spilled again");
  back->gpu_idle = true;
  /* Idle on the GPU, just read back for a return its idle phases foretold (now a little
   * late): kept as long as writing and reading it again would take (2 x 60 MiB at 100 MB/s +
   * 2 s: 3.3 s). */
  d->disk_read_rate = 100e6;
  back->read_back_at = sched_now() - 1;
  sched_step(d);
  CHECK(spill_sent(5) == 0, "an image read back 1 s ago for its return was spilled again");
  back->read_back_at = sched_now() - 5;
  sched_step(d);
  CHECK(spill_sent(5) == back->pid, "an image read back, idle again, was not spilled");

  /* The disk has no room (CUDAWD_TEST_DISK_FREE, 1 MiB free): the spill is not ordered. */
  d = setup(meminfo, dir);
  join(d, 0, SCHED_RUNNING, 1, 0);
  join(d, 1, SCHED_SWAPPED_OUT, 1, 30);
  join(d, 2, SCHED_SWAPPED_OUT, 1, 5)->gpu_idle = true;
  setenv("CUDAWD_TEST_DISK_FREE", "1048576", 1);
  sched_step(d);
  CHECK(spill_sent(5) == 0 && d->disk_short_logged, "spilled to a disk without room");
  setenv("CUDAWD_TEST_DISK_FREE", "10737418240", 1);
  d->host_read_at = 0;
  sched_step(d);
  CHECK(spill_sent(5) == programs[2].pid && !d->disk_short_logged,
        "not spilled to a disk with 10 GiB free");
  unsetenv("CUDAWD_TEST_DISK_FREE");

  /* Read-back ahead: two wanting images on disk, the host with 4 GiB available (8 GiB, 1 GiB
   * kept free): the one whose turn comes first is read back, one at a time; an image on disk
   * idle on the GPU is not; none when the host would fall under twice the margin. The swap cost
   * of an image on disk counts its read. */
  d = three_on_disk(meminfo, dir, (const double[3]){5, 30, 60});
  struct program *later = &programs[0], *first = &programs[1], *idle = &programs[2];
  idle->gpu_idle = true;
  double cost_on_disk = sched_swap_cost(d, first);
  first->on_disk = false;
  double cost = sched_swap_cost(d, first);
  first->on_disk = true;
  CHECK(cost_on_disk - cost > 60 * MIB / 2.1e9 && cost_on_disk - cost < 60 * MIB / 1.9e9,
        "the swap cost of an image on disk (%.4f s) does not count its read (%.4f s without)",
        cost_on_disk, cost);
  unspill_sent();
  sched_spill_read_ahead(d, sched_now());
  CHECK_EQ(unspill_sent(), first->pid);
  CHECK(d->reading_back == first && sched_spill_reading(d) == 60 * MIB);
  sched_spill_read_ahead(d, sched_now());
  CHECK(unspill_sent() == 0, "a second read-back while one is under way");
  sched_spill_read_done(d, first, 0, 60 * MIB, 0.05);
  CHECK(!first->on_disk && first->read_back && !d->reading_back && d->read_backs == 1);
  d->host_available = (2048 + 30) * MIB; /* 60 MiB more would leave under 2 GiB */
  sched_spill_read_ahead(d, sched_now());
  CHECK(unspill_sent() == 0 && later->read_back_refused, "read back with no room left");
  d->host_available = 4ull << 30;
  sched_spill_read_ahead(d, sched_now());
  CHECK_EQ(unspill_sent(), later->pid);
  sched_spill_read_done(d, later, -EIO, 0, 0);
  CHECK(later->on_disk && later->read_back_failed && !d->reading_back);
  sched_spill_read_ahead(d, sched_now());
  CHECK(unspill_sent() == 0, "the idle image, or a failed one again, was read back");
  /* Beside a spill (the disk is busy): none; beside a checkpoint whose image takes the room:
   * none; beside one that leaves room: read back. */
  later->read_back_failed = false;
  struct program *going = join(d, 3, SCHED_SWAPPING_OUT, 1, 0);
  going->pending_op = 3;
  d->spilling = going;
  sched_spill_read_ahead(d, sched_now());
  CHECK(unspill_sent() == 0, "read back beside a spill");
  d->spilling = NULL;
  d->transition = going;
  going->pending_op = 1;
  going->bytes[0] = 2ull << 30;
  sched_spill_read_ahead(d, sched_now());
  CHECK(unspill_sent() == 0, "read back beside a checkpoint that takes the host's room");
  going->bytes[0] = 60 * MIB;
  sched_spill_read_ahead(d, sched_now());
  CHECK_EQ(unspill_sent(), later->pid);
  d->transition = NULL;

  /* The first in line waits with its image in host memory: its swap needs host room for the
   * resident program's image (3 GiB), which the read-back for the next one (60 MiB, beside 4 GiB
   * available and 2 GiB kept) would take: none. With a resident image of 1 GiB: read back. */
  {
    struct daemon *k = three_on_disk(meminfo, dir, (const double[3]){5, 30, 60});
    struct program *in_host = &programs[2], *after = &programs[1];
    in_host->on_disk = false;
    struct program *resident = join(k, 3, SCHED_RUNNING, 1, 0);
    resident->bytes[0] = 3ull << 30;
    unspill_sent();
    sched_spill_read_ahead(k, sched_now());
    CHECK(unspill_sent() == 0 && after->read_back_refused && !k->reading_back,
          "read back for pid %d while pid %d, before it, needs the host room for a swap-out",
          after->pid, in_host->pid);
    resident->bytes[0] = 1ull << 30;
    sched_spill_read_ahead(k, sched_now());
    CHECK_EQ(unspill_sent(), after->pid);
    sched_spill_read_done(k, after, 0, 60 * MIB, 0.05);
    close(peer_end[3]);
    close(programs[3].fd);
    peer_end[3] = 0;
  }

  /* Ahead of the next swap-out: nobody waits, but resident r's image would not fit on the host,
   * so the image of a program idle on the GPU moves to disk before a turn waits for it. One
   * expected back (its last idle phase: 10 s, idle for 5 s) sooner than it could be written and
   * read back (60 MiB at 10 MB/s: 2 x 6.3 s + 2) stays; at the default rate it goes. A host with
   * room for r's image spills nothing. */
  d = setup(meminfo, dir);
  write_meminfo(meminfo, 2200); /* above twice the 1 GiB margin: not short by that rule */
  join(d, 0, SCHED_RUNNING, 1, 0)->bytes[0] = 1536 * MIB; /* + 1 GiB kept free > 2200 MiB */
  struct program *dozing = join(d, 1, SCHED_SWAPPED_OUT, 1, 5);
  dozing->gpu_idle = true;
  dozing->gpu_idle_since = sched_now() - 5;
  dozing->last_idle = 10;
  d->disk_read_rate = 1e7;
  sched_step(d);
  CHECK(!d->host_blocked && spill_sent(5) == 0,
        "an idle image expected back before it could be read back was spilled ahead");
  d->disk_read_rate = 0;
  sched_step(d);
  CHECK_EQ(spill_sent(5), dozing->pid);
  /* With no idle phase known, only one idle as long as its write and read would take (60 MiB at
   * the default rate: 2.06 s) moves ahead of need: idle for 1 s stays, for 3 s goes. */
  d = setup(meminfo, dir);
  write_meminfo(meminfo, 2200);
  join(d, 0, SCHED_RUNNING, 1, 0)->bytes[0] = 1536 * MIB;
  struct program *fresh = join(d, 1, SCHED_SWAPPED_OUT, 1, 5);
  fresh->gpu_idle = true;
  fresh->gpu_idle_since = sched_now() - 1;
  sched_step(d);
  CHECK(spill_sent(5) == 0, "an image idle for 1 s, its return not foreseen, spilled ahead");
  fresh->gpu_idle_since = sched_now() - 3;
  sched_step(d);
  CHECK_EQ(spill_sent(5), fresh->pid);
  d = setup(meminfo, dir);
  write_meminfo(meminfo, 4096);
  join(d, 0, SCHED_RUNNING, 1, 0)->bytes[0] = 1536 * MIB;
  join(d, 1, SCHED_SWAPPED_OUT, 1, 5)->gpu_idle = true;
  sched_step(d);
  CHECK(spill_sent(5) == 0, "spilled ahead with room on the host for the next swap-out");
  /* Only idle images move ahead of need: r resident (its turn not over), a waiting image, the
   * host as short as above: nothing moves until r's swap-out is refused. */
  d = setup(meminfo, dir);
  write_meminfo(meminfo, 2200);
  struct program *r = join(d, 0, SCHED_RUNNING, 1, 0);
  r->bytes[0] = 1536 * MIB;
  r->resident_since = sched_now();
  join(d, 1, SCHED_SWAPPED_OUT, 1, 5);
  sched_step(d);
  CHECK(!d->host_blocked && spill_sent(5) == 0, "a waiting image was spilled ahead of need");
  write_meminfo(meminfo, 1075);

  /* Read back ahead of an expected return: an image on disk idle on the GPU, expected back in
   * 1 s (within 1.5 x its read + 1 s) is read back; one expected in 50 s, or overdue, is not. */
  d = three_on_disk(meminfo, dir, (const double[3]){30, 30, 30});
  struct program *early = &programs[0], *late = &programs[1], *overdue = &programs[2];
  double t = sched_now();
  for (int i = 0; i < 3; i++) {
    programs[i].gpu_idle = true;
    programs[i].last_idle = 60;
  }
  early->gpu_idle_since = t - 59;
  late->gpu_idle_since = t - 10;
  overdue->gpu_idle_since = t - 70;
  unspill_sent();
  sched_spill_read_ahead(d, t);
  CHECK_EQ(unspill_sent(), early->pid);
  sched_spill_read_done(d, early, 0, 60 * MIB, 0.05);
  sched_spill_read_ahead(d, t);
  CHECK(unspill_sent() == 0, "an image expected back in 50 s, or overdue, was read back");
  /* The image read back is not spilled again while it is expected back soon. */
  CHECK(!early->on_disk && !sched_spill_coldest(d, NULL, t, "a test", false),
        "an image read back ahead of its return was spilled again");

  /* A program gone (its connection closed) while its process still exits: its image directory
   * stays until the process has exited, then goes (the next step); one whose process lives on
   * past the wait keeps its files. */
  d = setup(meminfo, dir);
  pid_t kids[2];
  char images[2][700];
  for (int i = 0; i < 2; i++) {
    kids[i] = fork();
    CHECK(kids[i] >= 0);
    if (kids[i] == 0) { /* gone with this test, whatever happens to it */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      alarm(60);
      pause();
      _exit(0);
    }
    struct program *gone = join(d, i, SCHED_SWAPPED_OUT, 1, 30);
    gone->pid = kids[i];
    gone->uid = getuid();
    gone->spill_ordered = gone->on_disk = true;
    gone->disk_bytes = 60 * MIB;
    snprintf(images[i], sizeof images[i], "%s/cudaw-%u-%ld", dir, (unsigned)getuid(),
             (long)kids[i]);
    CHECK(mkdir(images[i], 0700) == 0, "%s: %s", images[i], strerror(errno));
    sched_forget(d, gone);
  }
  CHECK(access(images[0], F_OK) == 0 && access(images[1], F_OK) == 0 && d->leftover_count == 2,
        "an image removed while its process still ran");
  kill(kids[0], SIGKILL);
  CHECK(waitpid(kids[0], NULL, 0) == kids[0]);
  sched_spill_check(d, sched_now());
  CHECK(access(images[0], F_OK) != 0 && access(images[1], F_OK) == 0 && d->leftover_count == 1,
        "the image of a program whose process exited was not removed, or the other's was");
  sched_spill_check(d, sched_now() + 10);
  CHECK(access(images[1], F_OK) == 0 && d->leftover_count == 0,
        "the files of a program that lives on were removed, or it is still waited for");
  kill(kids[1], SIGKILL);
  waitpid(kids[1], NULL, 0);
  rmdir(images[1]);

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
