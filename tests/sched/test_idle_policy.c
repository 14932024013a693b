/* Description: the idle hint in cudawd's policy (sched/schedule.c, SCHED_GPU_IDLE) without
 * sockets: a program that says it makes no CUDA call is swapped out for a waiting one before its
 * turn and before min-run are over; once out it is not brought back while idle, even when it
 * fits and the other's turn is over; when it calls again it is (the other is swapped out).
 * Then the cost of a swap: a large idle program is swapped out only once it has been idle as long
 * as its swap out and back in takes at the rates seen, and not at all while the host (a fake
 * /proc/meminfo, CUDAWD_MEMINFO) has no room for its image, which the waiting program's wait
 * reason says; and a program whose last idle phase outlasted its swap goes at once. The rates
 * are kept apart for images in the pool and elsewhere; a swap that would be a handover into the
 * pool is costed at the pool's rates; a handover that fails for the window the program mapped
 * sends it the whole window, and a program that grows a window in place is sent each larger
 * one; a program whose side of an exchange failed is tried again after 5 s, not a quantum.
 * Before its own first idle phase has ended, a program is judged by the last one of its user's
 * same command; a handover's time sets what a swap in the pool costs. With the device free and
 * nobody waiting, an idle swapped-out program is resumed ahead of its call, and gives the room
 * up at once until it calls. A resume that keeps finding the image corrupt backs off. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon.h"
#include "exchange_page.h"
#include "test.h"

static pid_t sent_pid;
static uint32_t sent_type;
static int sent_count;

int sched_send(struct program *p, const struct sched_msg *msg)
{
  sent_pid = p->pid;
  sent_type = msg->type;
  sent_count++;
  return 0;
}

/* The one message sent by a step (type 0 if none). */
static uint32_t step(struct daemon *d, pid_t *pid)
{
  sent_count = 0;
  sent_type = 0;
  sched_step(d);
  CHECK(sent_count <= 1, "%d messages sent at once", sent_count);
  *pid = sent_pid;
  return sent_type;
}

static struct program programs[4];

static struct program *join(struct daemon *d, int index, int slot, uint64_t bytes)
{
  struct program *p = &programs[index];
  memset(p, 0, sizeof *p);
  p->pid = 200 + index;
  p->joined = true;
  p->worked = true;
  p->priority = 1;
  p->state = SCHED_RUNNING;
  p->bytes[slot] = bytes;
  p->state_since = p->accounted_at = p->resident_since = p->wanting_since = sched_now();
  p->next = d->programs;
  d->programs = p;
  return p;
}

static void write_meminfo(const char *path, unsigned long long available_gib)
{
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fprintf(f, "MemTotal:       %llu kB\nMemFree:        1024 kB\nMemAvailable:   %llu kB\n",
          128ull << 20, available_gib << 20);
  fclose(f);
}

/* A daemon with one device of `bytes` and a 300 s quantum: the device's slot. */
static int one_device(struct daemon *d, uint64_t bytes)
{
  d->config = (struct sched_config){.quantum = 300, .min_run = 1, .idle_cpu = 0.02,
                                    .device_memory = bytes};
  return sched_device_slot(d, "00112233445566778899aabbccddeeff", bytes);
}

/* cudawd reads this host's memory from a fake /proc/meminfo at path (a mkstemp template). */
static void fake_meminfo(char *path, unsigned long long available_gib)
{
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  write_meminfo(path, available_gib);
  setenv("CUDAWD_MEMINFO", path, 1);
}

/* A 60 GiB program on an 80 GiB device, one waiting for 40 GiB, swaps seen at 4 GB/s out and in:
 * a's swap costs 2 x 60 GiB / 4 GB/s = 32.2 s. */
static void cost_and_host(void)
{
  static struct daemon d;
  const uint64_t gib = 1ull << 30;
  d.config = (struct sched_config){.quantum = 300, .min_run = 1, .idle_cpu = 0.02,
                                   .device_memory = 80 * gib};
  d.programs = NULL;
  char meminfo[] = "/tmp/cudaw-meminfo-XXXXXX";
  fake_meminfo(meminfo, 100);
  int dev = sched_device_slot(&d, "00112233445566778899aabbccddeeff", 80 * gib);
  CHECK(dev == 0);
  struct program *a = join(&d, 2, dev, 60 * gib), *w = join(&d, 3, dev, 0);
  sched_done(&d, a, 1, 0, 4 * gib, 4 * gib / 4e9); /* a rate seen (a's state is put back) */
  sched_done(&d, a, 2, 0, 4 * gib, 4 * gib / 4e9);
  a->state = SCHED_RUNNING;
  a->resident_since = sched_now();
  double cost = sched_swap_cost(&d, a);
  CHECK(cost > 32.1 && cost < 32.3, "cost %.3f s", cost);
  w->wants = true;
  w->want_slot = dev;
  w->want_bytes = 40 * gib;
  pid_t pid = 0;
  sched_idle_hint(&d, a, true);
  CHECK_EQ(step(&d, &pid), 0); /* idle, but for less than its swap would take */
  a->gpu_idle_since = sched_now() - cost + 2;
  CHECK_EQ(step(&d, &pid), 0);
  a->gpu_idle_since = sched_now() - cost - 0.1;
  /* Idle long enough, but the host has 40 GiB available, 4 GiB of which it keeps: no room for a
   * 60 GiB image. */
  write_meminfo(meminfo, 40);
  d.host_read_at = 0;
  CHECK_EQ(step(&d, &pid), 0);
  struct sched_program_detail why;
  sched_program_detail(&d, w, &why);
  CHECK(why.wait_reason == SCHED_WAIT_HOST_MEMORY && why.behind_pid == a->pid &&
            why.need_bytes == 60 * gib && why.free_bytes == 40 * gib,
        "wait %d behind %d need %llu free %llu", why.wait_reason, why.behind_pid,
        (unsigned long long)why.need_bytes, (unsigned long long)why.free_bytes);
  CHECK(strcmp(sched_wait_name(why.wait_reason), "host_memory") == 0);
  /* Not even when its turn is over. */
  a->resident_since = sched_now() - 1000;
  d.host_read_at = 0;
  CHECK_EQ(step(&d, &pid), 0);
  /* The host has room again (64 GiB + 4 GiB kept free): swapped out. */
  write_meminfo(meminfo, 65);
  d.host_read_at = 0;
  CHECK(step(&d, &pid) == SCHED_CHECKPOINT && pid == a->pid, "checkpoint to %d", pid);
  /* CPU idle (under idle_cpu) counts the same way: not before the swap's cost. */
  sched_done(&d, a, 1, 0, 60 * gib, 15.0);
  CHECK(step(&d, &pid) == SCHED_GRANT && pid == w->pid);
  sched_idle_hint(&d, a, false);
  w->idle = true;
  w->idle_since = sched_now() - 1;
  w->resident_since = sched_now() - 10;
  CHECK_EQ(step(&d, &pid), 0);
  w->idle_since = sched_now() - sched_swap_cost(&d, w) - 0.1;
  CHECK(step(&d, &pid) == SCHED_CHECKPOINT && pid == w->pid, "checkpoint to %d", pid);
  /* A program whose last idle phase outlasted its swap goes at once when it is idle again. */
  sched_done(&d, w, 1, 0, 40 * gib, 10.0);
  CHECK(step(&d, &pid) == SCHED_RESUME && pid == a->pid, "resume of %d", pid);
  sched_done(&d, a, 2, 0, 60 * gib, 15.0);
  a->resident_since = sched_now() - 10;
  cost = sched_swap_cost(&d, a);
  sched_idle_hint(&d, a, true);
  a->gpu_idle_since = sched_now() - 2; /* a short idle phase: not learnt from */
  sched_idle_hint(&d, a, false);
  w->wants = true;
  w->want_bytes = 40 * gib;
  sched_idle_hint(&d, a, true);
  CHECK_EQ(step(&d, &pid), 0);
  sched_idle_hint(&d, a, false);
  sched_idle_hint(&d, a, true); /* a long idle phase: remembered */
  a->gpu_idle_since = sched_now() - cost - 1;
  sched_idle_hint(&d, a, false);
  sched_idle_hint(&d, a, true);
  CHECK(step(&d, &pid) == SCHED_CHECKPOINT && pid == a->pid, "checkpoint to %d", pid);
  unsetenv("CUDAWD_MEMINFO");
  unlink(meminfo);
}

static bool near(double x, double want) { return x > want * 0.999 && x < want * 1.001; }

/* The rates are kept apart for images in cudawd's pool and elsewhere: a pooled swap seen does not
 * make a swap outside the pool look cheap, nor a slow one outside it a pooled one dear. */
static void pool_rates(void)
{
  static struct daemon d;
  const double gib = (double)(1ull << 30);
  d.config = (struct sched_config){.quantum = 300, .min_run = 1, .idle_cpu = 0.02,
                                   .device_memory = 80ull << 30};
  int dev = sched_device_slot(&d, "00112233445566778899aabbccddeeff", 80ull << 30);
  CHECK(dev == 0);
  struct program *a = join(&d, 2, dev, 40ull << 30);
  const double plain = 40 * gib / 6e9 + 40 * gib / 20e9, in_pool = 40 * gib / 45e9 + 40 * gib / 40e9;
  CHECK(near(sched_swap_cost(&d, a), plain), "default %.3f s", sched_swap_cost(&d, a));
  a->loan.length = 41ull << 30; /* its image has (or will have) a range of the pool */
  CHECK(near(sched_swap_cost(&d, a), in_pool), "pooled default %.3f s", sched_swap_cost(&d, a));
  a->placed = 40ull << 30; /* straight into its range, page-locked whole */
  sched_done(&d, a, 1, 0, 40ull << 30, 40 * gib / 50e9);
  sched_done(&d, a, 2, 0, 40ull << 30, 40 * gib / 50e9);
  CHECK(near(sched_swap_cost(&d, a), 2 * 40 * gib / 50e9), "pooled %.3f s", sched_swap_cost(&d, a));
  a->loan.length = 0;
  CHECK(near(sched_swap_cost(&d, a), plain), "after a pooled swap %.3f s", sched_swap_cost(&d, a));
  sched_done(&d, a, 1, 0, 40ull << 30, 40 * gib / 5e9);
  CHECK(near(sched_swap_cost(&d, a), 40 * gib / 5e9 + 40 * gib / 20e9), "plain %.3f s",
        sched_swap_cost(&d, a));
  a->loan.length = 41ull << 30;
  CHECK(near(sched_swap_cost(&d, a), 2 * 40 * gib / 50e9), "pooled again %.3f s",
        sched_swap_cost(&d, a));
  /* The pool has no room for a's image (its window is 0), but w's image lies in it: swapping a
   * out for w is a handover, a's image going over w's, at the pool's rates. For anyone else, or
   * where a handover cannot be, a's swap goes to memory of its own. */
  struct program *w = join(&d, 3, dev, 0);
  a->loan.length = 0;
  a->pool_acked = 50ull << 30;
  d.pool.size = 100ull << 30;
  d.pool.window = 0;
  w->loan.length = 41ull << 30;
  a->handover = w->handover = true;
  const double out_plain = 40 * gib / 5e9 + 40 * gib / 20e9;
  CHECK(near(sched_swap_cost(&d, a), out_plain), "no room %.3f s", sched_swap_cost(&d, a));
  CHECK(near(sched_preempt_cost(&d, a, NULL), out_plain), "for nobody %.3f s",
        sched_preempt_cost(&d, a, NULL));
  CHECK(near(sched_preempt_cost(&d, a, w), 2 * 40 * gib / 50e9), "handover %.3f s",
        sched_preempt_cost(&d, a, w));
  w->handover = false; /* a program too old to pace a handover */
  CHECK(near(sched_preempt_cost(&d, a, w), out_plain), "no handover %.3f s",
        sched_preempt_cost(&d, a, w));
  w->handover = true;
  w->loan.length = 0; /* w's image is not in the pool */
  CHECK(near(sched_preempt_cost(&d, a, w), out_plain), "w not pooled %.3f s",
        sched_preempt_cost(&d, a, w));
  d.pool.size = 0;
}

/* A handover needs out's image to fit in the window out has mapped. The first program maps a
 * window for its own image only; when the incoming image's range lies past it, the handover
 * fails, and out is sent the whole window so that the next one can go there. */
static void handover_window(void)
{
  static struct daemon d;
  const uint64_t gib = 1ull << 30;
  char why[256] = "";
  CHECK(pool_open(&d.pool, 200 * gib, why, sizeof why) == 0, "pool_open: %s", why);
  d.pool.window = 200 * gib; /* in the books only: no page is touched */
  int dev = sched_device_slot(&d, "00112233445566778899aabbccddeeff", 80 * gib);
  struct program *out = join(&d, 0, dev, 40 * gib), *in = join(&d, 1, dev, 40 * gib);
  struct program *c = join(&d, 2, dev, 40 * gib);
  int pair[2];
  CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair) == 0);
  out->fd = pair[0];
  out->uid = geteuid();
  out->pool_sent = true;
  out->pool_window = out->pool_acked = 45 * gib; /* its own image's window */
  in->pool_acked = c->pool_acked = 200 * gib;
  out->handover = in->handover = true;
  CHECK_EQ(pool_lend(&d.pool, 41 * gib, 200 * gib, &c->loan), 0); /* c's image at 0 */
  CHECK_EQ(pool_lend(&d.pool, 41 * gib, 200 * gib, &in->loan), 0); /* in's past out's window */
  CHECK(in->loan.offset >= 41 * gib);
  struct pool_loan range;
  CHECK_EQ(sched_pool_handover(&d, out, in, &range), -ENOSPC);
  CHECK(out->pool_cramped, "a handover that failed for out's window did not ask for the window");
  CHECK_EQ(out->loan.length, 0);
  CHECK_EQ(in->loan.length, 41 * gib); /* nothing changed */
  sched_pool_offer(&d, out);
  CHECK_EQ(out->pool_window, 200 * gib);
  /* A program that grows a window in place (SCHED_POOL_GROWS) is sent each larger one at once;
   * an older one keeps the window it has page-locked while its image fits there. */
  sched_pool_mapped(&d, out, true, 200 * gib, false);
  out->pool_cramped = false;
  d.pool.window = 300 * gib;
  sched_pool_offer(&d, out);
  CHECK_EQ(out->pool_window, 200 * gib);
  sched_pool_mapped(&d, out, true, 200 * gib, true);
  sched_pool_offer(&d, out);
  CHECK_EQ(out->pool_window, 300 * gib);
  close(pair[0]);
  close(pair[1]);
  pool_close(&d.pool);
}

/* A program whose side of an exchange failed may be swapped out again after a few seconds, not
 * a quantum (a plain checkpoint that failed still waits a quantum). */
static void exchange_retry(void)
{
  static struct daemon d;
  d.config = (struct sched_config){.quantum = 30, .min_run = 1, .idle_cpu = 0.02,
                                   .device_memory = 100};
  int dev = sched_device_slot(&d, "00112233445566778899aabbccddeeff", 1000);
  struct program *out = join(&d, 0, dev, 40), *in = join(&d, 1, dev, 40);
  int fd = -1;
  struct exchange_page *page = NULL;
  CHECK_EQ(exchange_page_create(out->pid, in->pid, 1 << 20, 1 << 20, &fd), 0);
  CHECK_EQ(exchange_page_map(fd, &page), 0);
  close(fd);
  d.exchange = (struct exchange_state){.active = true, .out = out, .in = in,
                                       .out_pid = out->pid, .in_pid = in->pid, .page = page,
                                       .started = sched_now()};
  out->state = SCHED_SWAPPING_OUT;
  out->pending_op = 1;
  in->state = SCHED_SWAPPING_IN;
  in->pending_op = 2;
  double now = sched_now();
  sched_done(&d, out, 1, -ETIMEDOUT, 0, 0.01); /* a side that did not reach its pause */
  CHECK(out->skip_until >= now + 29, "a failed checkpoint waits a quantum");
  sched_exchange_done(&d, out, -ETIMEDOUT);
  CHECK(out->skip_until > now + 4 && out->skip_until < now + 6, "skipped for %.1f s",
        out->skip_until - now);
  sched_done(&d, in, 2, -EPIPE, 0, 0.01);
  sched_exchange_done(&d, in, -EPIPE);
  CHECK(!d.exchange.active, "the exchange is over");
}

/* Before its own first idle phase has ended, a program is judged by the last one of a program of
 * the same user and command (three copies of one job): it goes at once if that one outlasted its
 * swap. Another command, or another user, learns nothing from it; its own phase, once seen,
 * takes over. */
static void idle_kin(void)
{
  static struct daemon d;
  const uint64_t gib = 1ull << 30;
  int dev = one_device(&d, 80 * gib);
  struct program *a = join(&d, 0, dev, 30 * gib), *b = join(&d, 1, dev, 30 * gib);
  struct program *w = join(&d, 2, dev, 0);
  char meminfo[] = "/tmp/cudaw-meminfo-XXXXXX";
  fake_meminfo(meminfo, 100); /* room for b's image, whatever this host has */
  a->command_key = b->command_key = 0x1234;
  a->uid = b->uid = 1000;
  double cost = sched_preempt_cost(&d, b, w);
  CHECK(cost > 1, "cost %.3f s", cost);
  /* a's idle phase outlasted a swap of b (same size, same command): remembered. */
  sched_idle_hint(&d, a, true);
  a->gpu_idle_since = sched_now() - cost - 1;
  sched_idle_hint(&d, a, false);
  w->wants = true;
  w->want_slot = dev;
  w->want_bytes = 30 * gib;
  pid_t pid = 0;
  /* b as another user's, then another command's: its first idle phase waits out its cost. */
  b->uid = 1001;
  sched_idle_hint(&d, b, true);
  CHECK_EQ(step(&d, &pid), 0);
  b->uid = 1000;
  b->command_key = 0x5678;
  CHECK_EQ(step(&d, &pid), 0);
  b->command_key = 0;
  CHECK_EQ(step(&d, &pid), 0);
  /* The same user and command: it goes at once. */
  b->command_key = 0x1234;
  CHECK(step(&d, &pid) == SCHED_CHECKPOINT && pid == b->pid, "checkpoint to %d", pid);
  sched_done(&d, b, 1, 0, 30 * gib, 0.6);
  CHECK(step(&d, &pid) == SCHED_GRANT && pid == w->pid);
  /* Its own short phase, once ended, takes over from a's. */
  sched_idle_hint(&d, b, false);
  sched_done(&d, w, 1, 0, 0, 0.1);
  CHECK(b->last_idle < 1, "b's own phase %.3f s", b->last_idle);
  /* The remembered phases are bounded: SCHED_IDLE_KIN commands, the oldest of the user with the
   * most replaced, so that one user's many commands never push another user's out. */
  struct program *other = join(&d, 3, dev, 0);
  other->command_key = 0x7777;
  other->uid = 2000;
  sched_idle_hint(&d, other, true);
  sched_idle_hint(&d, other, false);
  d.programs = other->next;
  for (int i = 0; i < SCHED_IDLE_KIN + 3; i++) {
    struct program *k = join(&d, 3, dev, 0);
    k->command_key = 0x9000 + (uint64_t)i;
    k->uid = 1000;
    sched_idle_hint(&d, k, true);
    sched_idle_hint(&d, k, false);
    d.programs = k->next;
  }
  int flood = 0, others = 0, newest = 0;
  for (int i = 0; i < SCHED_IDLE_KIN; i++) {
    flood += d.idle_kin[i].uid == 1000;
    others += d.idle_kin[i].uid == 2000 && d.idle_kin[i].key == 0x7777;
    newest += d.idle_kin[i].key == 0x9000 + SCHED_IDLE_KIN + 2;
  }
  CHECK(flood == SCHED_IDLE_KIN - 1 && others == 1 && newest == 1,
        "uid 1000 holds %d entries, uid 2000's kept %d, the newest %d", flood, others, newest);
  /* A command line is read from /proc: the same one twice, another for another command, none
   * for no process. */
  uint64_t mine = sched_command_key(getpid());
  CHECK(mine != 0 && mine == sched_command_key(getpid()));
  CHECK(sched_command_key(getppid()) != mine, "the parent's command has this one's key");
  CHECK_EQ(sched_command_key(-1), 0);
  unsetenv("CUDAWD_MEMINFO");
  unlink(meminfo);
}

/* A handover's time is what a swap in the pool costs: both images moving at once. A first plain
 * swap into pages not yet faulted in no longer costs every later one (on the H100 it made an
 * idle program's swap look 2-3x dearer for the rest of a run of handovers). */
static void handover_rate(void)
{
  static struct daemon d;
  const uint64_t gib = 1ull << 30;
  int dev = one_device(&d, 80 * gib);
  struct program *out = join(&d, 0, dev, 40 * gib), *in = join(&d, 1, dev, 40 * gib);
  out->loan.length = in->loan.length = 41 * gib;
  out->placed = 40 * gib; /* straight into its range: a swap staged in part sets no rate */
  sched_done(&d, out, 1, 0, 40 * gib, 40.0 * gib / 15e9); /* a cold first swap: 15 GB/s out */
  sched_done(&d, out, 2, 0, 40 * gib, 40.0 * gib / 40e9);
  double cold = sched_swap_cost(&d, out);
  CHECK(near(cold, 40.0 * gib / 15e9 + 40.0 * gib / 40e9), "cold %.3f s", cold);
  int fd = -1;
  struct exchange_page *page = NULL;
  CHECK_EQ(exchange_page_create(out->pid, in->pid, 1 << 20, 1 << 20, &fd), 0);
  CHECK_EQ(exchange_page_map(fd, &page), 0);
  close(fd);
  atomic_store(&page->written, 40 * gib);
  atomic_store(&page->consumed, 40 * gib);
  d.exchange = (struct exchange_state){.active = true, .out = out, .in = in, .handover = true,
                                       .out_pid = out->pid, .in_pid = in->pid, .page = page,
                                       .started = sched_now() - 1.6};
  out->pending_op = 1;
  in->pending_op = 2;
  sched_done(&d, out, 1, 0, 40 * gib, 1.6);
  sched_exchange_done(&d, out, 0);
  sched_done(&d, in, 2, 0, 40 * gib, 1.6);
  sched_exchange_done(&d, in, 0);
  CHECK(!d.exchange.active, "the exchange is over");
  double now_cost = sched_swap_cost(&d, out);
  CHECK(now_cost > 1.55 && now_cost < 1.75, "after a 1.6 s handover a swap costs %.3f s", now_cost);
  /* A swap outside the pool keeps its own rates. */
  out->loan.length = 0;
  CHECK(near(sched_swap_cost(&d, out), 40.0 * gib / 6e9 + 40.0 * gib / 20e9), "plain %.3f s",
        sched_swap_cost(&d, out));
}

/* Resume ahead: the device free and nobody waiting, the swapped-out idle program expected back
 * first is resumed before it calls; until it calls, one that wants the room has it at once
 * (before min-run); one that called is judged as any other. Not where it does not fit, nor
 * with --no-resume-ahead. */
/* A program's answer as cudawd takes it (a swap at 10 GB/s), and no answer owed any more. */
static void done(struct daemon *d, struct program *p, int op, uint64_t bytes)
{
  sched_done(d, p, op, 0, bytes, (double)bytes / 10e9);
  p->pending_op = 0;
}

static void resume_ahead(void)
{
  static struct daemon d;
  const uint64_t gib = 1ull << 30; /* sizes whose swaps cost seconds at the default rates */
  d.config = (struct sched_config){.quantum = 30, .min_run = 5, .idle_cpu = 0.02,
                                   .device_memory = 100 * gib, .resume_ahead = true};
  d.programs = NULL;
  char meminfo[] = "/tmp/cudaw-meminfo-XXXXXX";
  fake_meminfo(meminfo, 100); /* room on the host for either image */
  d.started = sched_now() - 60; /* past the grace for programs of an earlier cudawd */
  int dev = sched_device_slot(&d, "00112233445566778899aabbccddeeff", 100 * gib);
  CHECK(dev == 0);
  pid_t pid = 0;
  double now = sched_now();
  struct program *a = join(&d, 0, dev, 80 * gib), *b = join(&d, 1, dev, 70 * gib);
  a->state = b->state = SCHED_SWAPPED_OUT;
  a->gpu_idle = b->gpu_idle = true;
  /* Both idle: b's phases are short (back 3 s after its start, 8 s ago), a's long (60 s from
   * 10 s ago): b is expected back first. */
  a->gpu_idle_since = now - 10;
  a->last_idle = 60;
  b->gpu_idle_since = now - 8;
  b->last_idle = 3;
  d.config.resume_ahead = false;
  CHECK_EQ(step(&d, &pid), 0); /* --no-resume-ahead: both stay out */
  d.config.resume_ahead = true;
  CHECK(step(&d, &pid) == SCHED_RESUME && pid == b->pid, "resumed %d ahead, not b", pid);
  CHECK(b->ahead, "b marked as resumed ahead");
  done(&d, b, 2, 70 * gib);
  CHECK_EQ(b->state, SCHED_RUNNING);
  CHECK_EQ(step(&d, &pid), 0); /* a does not fit beside b */
  CHECK_EQ(a->state, SCHED_SWAPPED_OUT);
  /* a calls: b, resumed ahead and still idle, goes at once (its turn began now, min-run 5 s). */
  sched_idle_hint(&d, a, false);
  CHECK(step(&d, &pid) == SCHED_CHECKPOINT && pid == b->pid, "checkpoint to %d", pid);
  CHECK(!b->ahead, "swapped out: no longer ahead");
  done(&d, b, 1, 70 * gib);
  CHECK(step(&d, &pid) == SCHED_RESUME && pid == a->pid);
  done(&d, a, 2, 80 * gib);
  CHECK(!a->ahead, "a came back for its call, not ahead");
  /* a idle again, b swapped out and idle: b does not fit beside a, nothing moves. */
  sched_idle_hint(&d, a, true);
  CHECK_EQ(step(&d, &pid), 0);
  /* a exits: b is brought back ahead; then b calls the GPU and is no longer ahead, so a new
   * program's wait does not take its room before min-run. */
  a->joined = false;
  a->state = SCHED_SWAPPED_OUT;
  a->bytes[dev] = 0;
  a->gpu_idle = false;
  CHECK(step(&d, &pid) == SCHED_RESUME && pid == b->pid);
  done(&d, b, 2, 70 * gib);
  b->gpu_idle_since = sched_now(); /* a short idle phase: its history does not send it out */
  sched_idle_hint(&d, b, false);
  CHECK(!b->ahead, "b called: no longer ahead");
  sched_idle_hint(&d, b, true);
  struct program *w = join(&d, 2, dev, 0);
  w->state = SCHED_WAITING;
  w->wants = true;
  w->want_slot = dev;
  w->want_bytes = 50 * gib;
  CHECK_EQ(step(&d, &pid), 0); /* b idle 0 s, its turn 0 s: it keeps the device */
  CHECK_EQ(b->state, SCHED_RUNNING);
  unlink(meminfo);
}

/* A resume that finds the image corrupt (-EBADMSG) is tried again after 1 s twice, then less
 * and less often (4, 16, 64 s ...); another failure, or a success, starts the count again. A
 * checkpoint the host had no room for is tried again after 5 s, not a quantum. */
static void corrupt_backoff(void)
{
  static struct daemon d;
  d.config = (struct sched_config){.quantum = 30, .min_run = 1, .idle_cpu = 0.02,
                                   .device_memory = 100};
  d.programs = NULL;
  d.started = sched_now() - 60;
  int dev = sched_device_slot(&d, "00112233445566778899aabbccddeeff", 1000);
  CHECK(dev == 0);
  struct program *a = join(&d, 0, dev, 80);
  a->state = SCHED_SWAPPED_OUT;
  const double waits[] = {1, 1, 4, 16, 64};
  for (int i = 0; i < 5; i++) {
    a->skip_until = 0;
    pid_t pid = 0;
    CHECK(step(&d, &pid) == SCHED_RESUME && pid == a->pid, "try %d: resumed %d", i, pid);
    double before = sched_now();
    sched_done(&d, a, 2, -EBADMSG, 0, 0.1);
    a->pending_op = 0;
    double wait = a->skip_until - before;
    CHECK(wait >= waits[i] - 0.05 && wait <= waits[i] + 0.5, "try %d: next in %.2f s, not %.0f",
          i, wait, waits[i]);
    CHECK_EQ(a->state, SCHED_SWAPPED_OUT);
  }
  sched_done(&d, a, 2, -EIO, 0, 0.1); /* another failure: counted from the start */
  CHECK_EQ(a->corrupt_resumes, 0);
  CHECK(a->skip_until - sched_now() < 1.1, "a failure of another kind backs off from 1 s again");
  /* A checkpoint refused for host memory is tried again after 5 s; one that missed its pause
   * after a quantum (30 s). */
  a->state = SCHED_SWAPPING_OUT;
  sched_done(&d, a, 1, -ENOMEM, 0, 0.1);
  double wait = a->skip_until - sched_now();
  CHECK(wait > 4.5 && wait <= 5.0, "host refusal: next try in %.2f s", wait);
  a->state = SCHED_SWAPPING_OUT;
  sched_done(&d, a, 1, -ETIMEDOUT, 0, 0.1);
  wait = a->skip_until - sched_now();
  CHECK(wait > 29.5 && wait <= 30.0, "missed pause: next try in %.2f s", wait);
}

int main(void)
{
  static struct daemon d;
  d.config = (struct sched_config){.quantum = 30, .min_run = 5, .idle_cpu = 0.02,
                                   .device_memory = 100};
  int dev = sched_device_slot(&d, "00112233445566778899aabbccddeeff", 1000);
  CHECK(dev == 0);
  pid_t pid = 0;
  struct program *a = join(&d, 0, dev, 80), *w = join(&d, 1, dev, 0);
  w->wants = true;
  w->want_slot = dev;
  w->want_bytes = 50;
  /* a's turn has just begun: w waits. */
  CHECK_EQ(step(&d, &pid), 0);
  CHECK_EQ(w->state, SCHED_WAITING);
  /* a says it is idle: swapped out at once, w granted. */
  sched_idle_hint(&d, a, true);
  CHECK(step(&d, &pid) == SCHED_CHECKPOINT && pid == a->pid, "checkpoint to %d", pid);
  sched_done(&d, a, 1, 0, 80, 0.1);
  CHECK(step(&d, &pid) == SCHED_GRANT && pid == w->pid);
  /* w's turn is over, but a is idle: it stays out. */
  w->resident_since = sched_now() - 100;
  CHECK_EQ(step(&d, &pid), 0);
  CHECK_EQ(a->state, SCHED_SWAPPED_OUT);
  /* a calls again: w (turn over) is swapped out and a comes back. */
  sched_idle_hint(&d, a, false);
  CHECK(step(&d, &pid) == SCHED_CHECKPOINT && pid == w->pid, "checkpoint to %d", pid);
  sched_done(&d, w, 1, 0, 50, 0.1);
  CHECK(step(&d, &pid) == SCHED_RESUME && pid == a->pid);
  sched_done(&d, a, 2, 0, 80, 0.1);
  CHECK_EQ(a->state, SCHED_RUNNING);
  /* Swapped out and idle, but an allocation of its waits: it is wanted back. */
  w->gpu_idle = true;
  w->wants = true;
  w->want_bytes = 60;
  a->resident_since = sched_now() - 100;
  CHECK(step(&d, &pid) == SCHED_CHECKPOINT && pid == a->pid, "checkpoint to %d", pid);
  cost_and_host();
  pool_rates();
  handover_window();
  exchange_retry();
  idle_kin();
  handover_rate();
  resume_ahead();
  corrupt_backoff();
  printf("ok\n");
  return 0;
}
