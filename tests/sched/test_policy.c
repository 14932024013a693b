/* Description: cudawd's policy (sched/schedule.c) without sockets: one schedule per device (a
 * program waiting on device 0 swaps out only programs holding memory there), programs that fit
 * together are granted at once, a program larger than the capacity is refused, a program swapped
 * in keeps its turn (no thrashing) and is swapped out once it has passed, priorities order the
 * victims, and a program that leaves frees its share at once; device keys are checked (a UUID's
 * hex digits, one size while used, the driver's GPU list); what the snapshot says of a waiting
 * program; a checkpoint never answered stops holding up the others after swap_timeout; one that
 * no victim can help does not hold up the next; a stale estimate of the memory outside the books
 * does not block for good; the first in line keeps the memory freed for it, and a program out of
 * its way is resumed beside it; a checkpoint staged in part leaves the pool's rate be; a GPU's
 * PCIe link prices swaps until one is measured (an emulated port's does not). The
 * messages cudawd would send are recorded by the sched_send below. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon.h"
#include "test.h"

struct sent_msg {
  pid_t pid;
  uint32_t type;
  int status;
};
static struct sent_msg sent[64];
static int sent_count;

int sched_send(struct program *p, const struct sched_msg *msg)
{
  if (sent_count < 64) sent[sent_count++] = (struct sent_msg){p->pid, msg->type, msg->status};
  return 0;
}

/* The one message sent since the last call (type 0 if none; fails if several). */
static uint32_t last_sent(pid_t *pid, int *status)
{
  CHECK(sent_count <= 1, "%d messages sent at once", sent_count);
  uint32_t type = sent_count ? sent[0].type : 0;
  if (sent_count) {
    *pid = sent[0].pid;
    *status = sent[0].status;
  }
  sent_count = 0;
  return type;
}

static struct program programs[8];

static struct program *join(struct daemon *d, int index, int slot, uint64_t bytes)
{
  struct program *p = &programs[index];
  memset(p, 0, sizeof *p);
  p->pid = 100 + index;
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

static void want(struct program *p, int slot, uint64_t bytes)
{
  p->wants = true;
  p->want_slot = slot;
  p->want_bytes = bytes;
  p->wanting_since = sched_now();
}

/* First in line on one device of d (configured as `config`): a swapped-out program of `first`
 * bytes with the least GPU time, one of `resident` bytes whose turn has just begun, and a
 * swapped-out one of `behind` bytes, returned (programs index, index + 1, index + 2). */
static struct program *line_up(struct daemon *d, const struct sched_config *config, int index,
                               uint64_t first, uint64_t resident, uint64_t behind)
{
  d->config = *config;
  int slot = sched_device_slot(d, "00112233445566778899aabbccddeeff", 1000);
  struct program *f = join(d, index, slot, first), *r = join(d, index + 1, slot, resident);
  struct program *b = join(d, index + 2, slot, behind);
  f->state = b->state = SCHED_SWAPPED_OUT;
  r->share_seconds = b->share_seconds = 1;
  return b;
}

/* A GPU's PCIe link prices its swaps until one is measured: PCIe 5.0 x16 at 53.6 GB/s each way
 * in the pool and outside it the slower defaults; PCIe 3.0 x16 (13.4 GB/s) below the default
 * for a resume from private memory; an emulated port (2.5 GT/s x1) and a device without a link
 * file at the defaults. */
static void test_link_rates(void)
{
  char gpus[] = "/tmp/cudaw-gpus-XXXXXX", pci[] = "/tmp/cudaw-pci-XXXXXX", path[160];
  CHECK(mkdtemp(gpus) != NULL && mkdtemp(pci) != NULL);
  const char *bus[] = {"0000:01:00.0", "0000:02:00.0", "0000:03:00.0", "0000:04:00.0"};
  const char *speed[] = {"32.0 GT/s PCIe", "8.0 GT/s PCIe", "2.5 GT/s PCIe", NULL};
  const char *width[] = {"16", "16", "1", NULL};
  for (int i = 0; i < 4; i++) {
    snprintf(path, sizeof path, "%s/%s", gpus, bus[i]);
    CHECK(mkdir(path, 0700) == 0);
    snprintf(path, sizeof path, "%s/%s/information", gpus, bus[i]);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fprintf(f, "GPU UUID: \t GPU-%08x-0000-0000-0000-000000000000\n", i + 1);
    fclose(f);
    snprintf(path, sizeof path, "%s/%s", pci, bus[i]);
    CHECK(mkdir(path, 0700) == 0);
    for (int k = 0; speed[i] && k < 2; k++) {
      snprintf(path, sizeof path, "%s/%s/%s", pci, bus[i],
               k ? "current_link_width" : "current_link_speed");
      f = fopen(path, "w");
      CHECK(f != NULL);
      fprintf(f, "%s\n", k ? width[i] : speed[i]);
      fclose(f);
    }
  }
  static struct daemon d;
  d.config.quantum = 10;
  d.config.device_fraction = 1;
  d.config.gpu_list = gpus;
  d.config.pci_devices = pci;
  const double gib = (double)(1ull << 30);
  double expect[4][2] = {{45 * gib / 6e9 + 45 * gib / 20e9, 2 * 45 * gib / 53.58e9},
                         {45 * gib / 6e9 + 45 * gib / 13.39e9, 2 * 45 * gib / 13.39e9},
                         {45 * gib / 6e9 + 45 * gib / 20e9, 45 * gib / 45e9 + 45 * gib / 40e9},
                         {45 * gib / 6e9 + 45 * gib / 20e9, 45 * gib / 45e9 + 45 * gib / 40e9}};
  for (int i = 0; i < 4; i++) {
    char key[33];
    snprintf(key, sizeof key, "%08x000000000000000000000000", i + 1);
    int slot = sched_device_slot(&d, key, 1ull << 36);
    CHECK(slot >= 0, "device %s: %d", bus[i], slot);
    struct program *p = join(&d, i, slot, 45ull << 30);
    for (int pooled = 0; pooled < 2; pooled++) {
      p->loan.length = pooled ? 46ull << 30 : 0;
      double cost = sched_swap_cost(&d, p);
      CHECK(cost > expect[i][pooled] * 0.995 && cost < expect[i][pooled] * 1.005,
            "%s, %s: a 45 GiB swap priced at %.2f s, expected %.2f s", speed[i] ? speed[i] : "no "
            "link", pooled ? "in the pool" : "outside it", cost, expect[i][pooled]);
    }
    d.programs = NULL;
  }
  snprintf(path, sizeof path, "rm -rf '%s' '%s'", gpus, pci);
  CHECK(system(path) == 0);
  printf("link rates: PCIe 5.0 x16 prices a 45 GiB swap in the pool at %.2f s (defaults %.2f s)\n",
         expect[0][1], expect[3][1]);
}

int main(void)
{
  static struct daemon d;
  d.config = (struct sched_config){.quantum = 1, .min_run = 0.1, .idle_cpu = 0.02,
                                   .device_memory = 100};
  static const char zero[] = "00112233445566778899aabbccddeeff";
  static const char one[] = "ffeeddccbbaa99887766554433221100";
  int dev0 = sched_device_slot(&d, zero, 1000);
  int dev1 = sched_device_slot(&d, one, 1000);
  CHECK(dev0 == 0 && dev1 == 1 && sched_device_slot(&d, one, 1000) == 1);
  /* What a client says of its device is checked: a UUID's hex digits, one size per device. */
  CHECK_EQ(sched_device_slot(&d, "device-two", 1000), -EINVAL);
  CHECK_EQ(sched_device_slot(&d, "00112233445566778899AABBCCDDEEFF", 1000), -EINVAL);
  CHECK_EQ(sched_device_slot(&d, "\x1b[2J0011223344556677889900aabbcc", 1000), -EINVAL);
  CHECK_EQ(sched_device_slot(&d, "0123456789abcdef0123456789abcdef", 0), -EINVAL);
  CHECK_EQ(sched_device_slot(&d, one, (uint64_t)1 << 51), -EINVAL);
  /* One size per device while a program uses it; a junk size is replaced once its sayer left. */
  struct program user = {.joined = true, .slot = {dev1, -1, -1, -1, -1, -1, -1, -1}};
  d.programs = &user;
  CHECK_EQ(sched_device_slot(&d, one, 2000), -EINVAL);
  d.programs = NULL;
  CHECK_EQ(sched_device_slot(&d, one, 2000), dev1);
  CHECK_EQ(d.device[dev1].total, 2000);
  CHECK_EQ(sched_device_slot(&d, one, 1000), dev1);
  CHECK_EQ(d.device[dev1].total, 1000);
  /* With the driver's GPU list (a fake one here), only its UUIDs are devices of this machine. */
  char dir[] = "/tmp/cudaw-gpus-XXXXXX", path[128];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(path, sizeof path, "%s/0000:01:00.0", dir);
  CHECK(mkdir(path, 0700) == 0);
  snprintf(path, sizeof path, "%s/0000:01:00.0/information", dir);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fprintf(f, "Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-FFEEDDCC-bbaa-9988-7766-554433221100\n");
  fclose(f);
  d.config.gpu_list = dir;
  CHECK_EQ(sched_device_slot(&d, one, 1000), dev1);
  CHECK_EQ(sched_device_slot(&d, "0123456789abcdef0123456789abcdef", 1000), -ENODEV);
  snprintf(path, sizeof path, "%s/nothing-here", dir);
  d.config.gpu_list = path; /* no driver directory: any well-formed key */
  CHECK(sched_device_slot(&d, "0123456789abcdef0123456789abcdef", 1000) >= 0);
  d.config.gpu_list = NULL;
  snprintf(path, sizeof path, "rm -rf '%s'", dir);
  CHECK(system(path) == 0);
  /* Slots nobody uses are given back: 20 junk-free but distinct devices fit in 8 slots. */
  char key[33];
  for (int i = 0; i < 20; i++) {
    snprintf(key, sizeof key, "%032x", 0x1000 + i);
    CHECK(sched_device_slot(&d, key, 1000) >= 0, "device %d got no slot", i);
  }
  for (int s = 0; s < SCHED_MAX_DEVICES; s++) d.device[s] = (struct device){0};
  dev0 = sched_device_slot(&d, zero, 1000);
  dev1 = sched_device_slot(&d, one, 1000);
  CHECK(dev0 == 0 && dev1 == 1);
  CHECK_EQ(d.device[dev0].capacity, 100);
  pid_t pid = 0;
  int status = 0;
  double past = sched_now() - 10;

  struct program *a = join(&d, 0, dev0, 80), *b = join(&d, 1, dev1, 80);
  a->resident_since = b->resident_since = past; /* both have had their turn */
  /* Fits beside b on device 1: granted at once, nobody swapped. */
  struct program *c = join(&d, 2, dev1, 0);
  want(c, dev1, 20);
  sched_step(&d);
  CHECK(last_sent(&pid, &status) == SCHED_GRANT && pid == c->pid && status == 0);
  CHECK_EQ(sched_resident(&d, dev1), 100);
  /* Larger than the capacity alone: refused, as without cudaw. */
  want(c, dev1, 101);
  sched_step(&d);
  CHECK(last_sent(&pid, &status) == SCHED_GRANT && pid == c->pid && status == -ENOMEM);

  /* w waits on device 0: only a (on device 0) is swapped out, never b or c (device 1). */
  struct program *w = join(&d, 3, dev0, 0);
  w->resident_since = past; /* it waited long: its turn starts at the grant, not at its start */
  want(w, dev0, 50);
  sched_step(&d);
  CHECK(last_sent(&pid, &status) == SCHED_CHECKPOINT && pid == a->pid, "checkpoint sent to %d",
        pid);
  CHECK_EQ(w->state, SCHED_WAITING);
  sched_step(&d); /* one transition at a time */
  CHECK_EQ(last_sent(&pid, &status), 0);
  sched_done(&d, a, 1, 0, 80, 0.5);
  CHECK_EQ(a->state, SCHED_SWAPPED_OUT);
  CHECK(d.device[dev0].swaps == 1 && d.device[dev1].swaps == 0);
  sched_step(&d);
  CHECK(last_sent(&pid, &status) == SCHED_GRANT && pid == w->pid && status == 0);
  CHECK_EQ(sched_resident(&d, dev0), 50);

  /* a wants back in, but w's turn has just begun: no thrashing. */
  sched_step(&d);
  CHECK_EQ(last_sent(&pid, &status), 0);
  w->resident_since = past; /* its turn is over */
  sched_step(&d);
  CHECK(last_sent(&pid, &status) == SCHED_CHECKPOINT && pid == w->pid);
  sched_done(&d, w, 1, 0, 50, 0.1);
  sched_step(&d);
  CHECK(last_sent(&pid, &status) == SCHED_RESUME && pid == a->pid);
  sched_done(&d, a, 2, 0, 80, 0.2);
  CHECK_EQ(a->state, SCHED_RUNNING);

  /* A pause that times out: skipped, the next candidate (lower priority first) is tried. */
  struct program *x = join(&d, 4, dev0, 10), *y = join(&d, 5, dev0, 0);
  x->resident_since = a->resident_since = past;
  a->priority = 2;
  a->resident_since = sched_now() - 3; /* past its quantum x 2 as well */
  x->share_seconds = a->share_seconds; /* level GPU time: the lower priority goes first */
  want(y, dev0, 30); /* needs a or w... w is swapped out; 80 + 10 + 30 > 100 */
  sched_step(&d);
  CHECK(last_sent(&pid, &status) == SCHED_CHECKPOINT && pid == x->pid, "victim %d, want x", pid);
  sched_done(&d, x, 1, -ETIMEDOUT, 0, 0.3);
  CHECK_EQ(x->state, SCHED_RUNNING);
  sched_step(&d);
  CHECK(last_sent(&pid, &status) == SCHED_CHECKPOINT && pid == a->pid, "next victim %d", pid);

  /* A program that leaves mid-checkpoint frees its share at once. */
  sched_forget(&d, a);
  CHECK(d.transition == NULL);
  CHECK_EQ(sched_resident(&d, dev0), 10);
  struct sched_snapshot snapshot;
  sched_fill_snapshot(&d, &snapshot);
  CHECK_EQ(snapshot.devices, 2);
  bool exited = false;
  for (int i = 0; i < snapshot.programs; i++)
    exited |= snapshot.program[i].pid == a->pid && snapshot.program[i].state == SCHED_EXITED;
  CHECK(exited, "the program that left is not listed as exited");

  /* What the snapshot says of a waiting program, and a checkpoint never answered: after
   * swap_timeout it no longer holds up the others; its late answer is still taken. */
  static struct daemon e;
  e.config = (struct sched_config){.quantum = 1, .min_run = 0.1, .idle_cpu = 0.02,
                                   .device_memory = 100, .swap_timeout = 5};
  int ds = sched_device_slot(&e, zero, 1000);
  struct program *r = join(&e, 6, ds, 80), *q = join(&e, 7, ds, 0);
  r->resident_since = past;
  want(q, ds, 50);
  sched_step(&e);
  CHECK(last_sent(&pid, &status) == SCHED_CHECKPOINT && pid == r->pid);
  struct sched_program_detail info;
  sched_program_detail(&e, q, &info);
  CHECK(info.wait_reason == SCHED_WAIT_MEMORY && info.need_bytes == 50 && info.free_bytes == 20,
        "wait %d need %llu free %llu", info.wait_reason, (unsigned long long)info.need_bytes,
        (unsigned long long)info.free_bytes);
  sched_program_detail(&e, r, &info);
  CHECK_EQ(info.wait_reason, SCHED_WAIT_SWAPPING_OUT);
  r->state_since = sched_now() - 6; /* no answer for 6 s */
  sched_step(&e);
  CHECK(e.transition == NULL && last_sent(&pid, &status) == 0);
  sched_done(&e, r, 1, 0, 80, 6.0); /* the late answer */
  CHECK_EQ(r->state, SCHED_SWAPPED_OUT);
  sched_step(&e);
  CHECK(last_sent(&pid, &status) == SCHED_GRANT && pid == q->pid && status == 0);
  sched_program_detail(&e, q, &info);
  CHECK(info.wait_reason == SCHED_WAIT_NONE && info.last_grant_bytes == 50 && info.last_grant_ago >= 0);
  sched_program_detail(&e, r, &info); /* swapped out, 80 does not fit beside q's 50 */
  CHECK(info.wait_reason == SCHED_WAIT_MEMORY && info.need_bytes == 80 && info.free_bytes == 50);

  /* One that no victim can help (the memory outside the books is in the way) does not hold up
   * the program behind it, for which room can be made. */
  static struct daemon hol;
  hol.config = (struct sched_config){.quantum = 1, .min_run = 0.1, .idle_cpu = 0.02,
                                   .device_memory = 100};
  int fs = sched_device_slot(&hol, one, 120); /* capacity 100 of 120 */
  hol.device[fs].outside = 30;
  struct program *g = join(&hol, 3, fs, 40), *big = join(&hol, 4, fs, 95), *h = join(&hol, 5, fs, 0);
  g->resident_since = past;
  big->state = SCHED_SWAPPED_OUT;
  big->wanting_since = past; /* first in line */
  want(h, fs, 60);
  sched_step(&hol);
  CHECK(last_sent(&pid, &status) == SCHED_CHECKPOINT && pid == g->pid,
        "the program that cannot be helped held up the next one (sent %d to %d)", (int)status, pid);

  /* A stale estimate of the memory outside the books (what it counted left) does not block a
   * lone waiting program for good: while fresh it waits, once stale it may try. */
  static struct daemon stale;
  stale.config = hol.config;
  int ss = sched_device_slot(&stale, one, 120);
  stale.device[ss].outside = 50;
  stale.device[ss].outside_at = sched_now();
  struct program *lone = join(&stale, 0, ss, 40);
  want(lone, ss, 100);
  sched_step(&stale);
  CHECK_EQ(last_sent(&pid, &status), 0);
  CHECK_EQ(lone->state, SCHED_WAITING);
  stale.device[ss].outside_at = sched_now() - 3;
  sched_step(&stale);
  CHECK(last_sent(&pid, &status) == SCHED_GRANT && pid == lone->pid && status == 0,
        "a stale estimate still blocks the lone program");

  /* The history of programs that left is kept per uid (issue 31): 40 of uid 65534 after one of
   * root cannot push root's row out, and those that only said hello leave no row. */
  static struct daemon hist;
  hist.config = hol.config;
  static struct program gone[41];
  gone[40] = (struct program){.pid = 4242, .uid = 0, .joined = true, .worked = true};
  sched_forget(&hist, &gone[40]);
  for (int i = 0; i < 40; i++) {
    gone[i] = (struct program){.pid = 5000 + i, .uid = 65534, .joined = true,
                               .worked = i % 2 == 0};
    sched_forget(&hist, &gone[i]);
  }
  sched_fill_snapshot(&hist, &snapshot);
  bool root_kept = false, hello_only_listed = false;
  for (int i = 0; i < snapshot.programs; i++) {
    root_kept |= snapshot.program[i].pid == 4242;
    hello_only_listed |= snapshot.program[i].pid >= 5000 && snapshot.program[i].pid % 2 == 1;
  }
  CHECK_EQ(snapshot.programs, SCHED_MAX_EXITED);
  CHECK(root_kept, "uid 65534's rows pushed root's program out of the history");
  CHECK(!hello_only_listed, "programs that never sent work are in the history");

  /* First in line (issue 30): the memory swaps free for the program with the least GPU time is
   * not handed to one behind it that fits in part of it (the small ones would take turns and the
   * large one wait for ever), unless the first still fits beside it once the turns are over. */
  static struct daemon line;
  line.config = hol.config;
  int ls = sched_device_slot(&line, zero, 1000);
  struct program *large = join(&line, 0, ls, 90), *s1 = join(&line, 1, ls, 40);
  struct program *s2 = join(&line, 2, ls, 40), *s3 = join(&line, 3, ls, 40);
  large->state = s3->state = SCHED_SWAPPED_OUT;
  s1->share_seconds = s2->share_seconds = s3->share_seconds = 1; /* large: 0, first */
  s1->resident_since = past; /* s1's turn is over, s2's has just begun */
  sched_step(&line);
  CHECK_EQ(last_sent(&pid, &status), 0); /* before: s1 out, then s3 in */
  s2->resident_since = past;
  sched_step(&line);
  CHECK(last_sent(&pid, &status) == SCHED_CHECKPOINT && (pid == s1->pid || pid == s2->pid));
  struct program *out = pid == s1->pid ? s1 : s2, *other = out == s1 ? s2 : s1;
  sched_done(&line, out, 1, 0, 40, 0.1);
  sched_step(&line); /* out and s3 fit beside the other, the large one does not yet */
  CHECK(last_sent(&pid, &status) == SCHED_CHECKPOINT && pid == other->pid,
        "room for the large one was taken (sent %d to %d)", (int)status, pid);
  sched_done(&line, other, 1, 0, 40, 0.1);
  sched_step(&line);
  CHECK(last_sent(&pid, &status) == SCHED_RESUME && pid == large->pid, "resumed %d", pid);
  sched_done(&line, large, 2, 0, 90, 0.2);
  /* Behind the first and in its way, though it fits now: held back (also by the probe for
   * memory outside the books, which lets a waiting program try when nothing else can go). */
  static struct daemon held;
  line_up(&held, &hol.config, 0, 90, 40, 40);
  sched_step(&held);
  CHECK(last_sent(&pid, &status) == 0, "the program in the first one's way was let in (sent %d "
        "to %d)", (int)status, pid);
  /* Behind the first but out of its way: resumed beside it. The large one (60 now) waits for
   * the resident one's turn; t (10) fits beside it, and the large one still fits beside t once
   * the resident one is out. */
  static struct daemon side;
  struct program *t = line_up(&side, &hol.config, 4, 60, 50, 10);
  sched_step(&side);
  CHECK(last_sent(&pid, &status) == SCHED_RESUME && pid == t->pid,
        "a program out of the first one's way was held back (sent %d to %d)", (int)status, pid);

  /* The pool's swap rate comes from checkpoints that went straight into their range: one that
   * found its range page-locked in part (the rest staged, slowly) leaves it as it was. */
  static struct daemon rates;
  rates.config = hol.config;
  int rs = sched_device_slot(&rates, zero, 1000);
  const uint64_t gib = 1ull << 30;
  struct program *staged = join(&rates, 0, rs, gib);
  staged->loan.length = 2 * gib;
  staged->placed = gib / 4;
  sched_done(&rates, staged, 1, 0, gib, 0.5);
  CHECK(rates.rate_out[1] == 0, "a checkpoint staged in part set the pool's rate to %.2f GB/s",
        rates.rate_out[1] / 1e9);
  struct program *ready = join(&rates, 1, rs, gib);
  ready->loan.length = 2 * gib;
  ready->placed = gib;
  sched_done(&rates, ready, 1, 0, gib, 0.05);
  CHECK(rates.rate_out[1] > 21e9 && rates.rate_out[1] < 22e9, "the pool's rate: %.2f GB/s",
        rates.rate_out[1] / 1e9);
  test_link_rates();
  printf("ok\n");
  return 0;
}
