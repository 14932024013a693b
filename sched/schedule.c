/* cudawd's policy: per device, hand out memory while it fits; when a program's allocation or a
 * swapped-out program does not fit, checkpoint resident programs whose turn is over (quantum x
 * priority, or min-run when they leave the GPU idle) until it does. A program swapped in keeps
 * its turn until then, so nothing thrashes; programs that fit together are never swapped. A
 * program that says it makes no CUDA call (SCHED_GPU_IDLE: host work, data loading) gives its turn
 * at once, and once out is not brought back before it calls again. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"

double sched_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A device description must be a UUID's 32 hex digits (NUL-terminated) and a plausible size. */
static bool valid_description(const char *key, uint64_t total)
{
  for (int i = 0; i < 32; i++)
    if (!((key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f'))) return false;
  return key[32] == '\0' && total > 0 && total <= ((uint64_t)1 << 50);
}

/* Whether a joined program uses device slot s (a slot nobody uses can be given to another). */
static bool slot_in_use(const struct daemon *d, int s)
{
  for (const struct program *p = d->programs; p; p = p->next)
    for (int o = 0; p->joined && o < SCHED_MAX_DEVICES; o++)
      if (p->slot[o] == s) return true;
  return false;
}

int sched_device_slot(struct daemon *d, const char *key, uint64_t total)
{
  if (!valid_description(key, total)) return -EINVAL;
  for (int s = 0; s < SCHED_MAX_DEVICES; s++)
    if (d->device[s].used && strncmp(d->device[s].key, key, SCHED_KEY_LEN) == 0)
      return d->device[s].total == total ? s : -EINVAL; /* one device, one size */
  /* A never-used slot first, else one whose programs all left. */
  for (int s = 0; s < 2 * SCHED_MAX_DEVICES; s++) {
    struct device *dev = &d->device[s % SCHED_MAX_DEVICES];
    if (dev->used && (s < SCHED_MAX_DEVICES || slot_in_use(d, s % SCHED_MAX_DEVICES))) continue;
    *dev = (struct device){0};
    dev->used = true;
    snprintf(dev->key, sizeof dev->key, "%.*s", SCHED_KEY_LEN - 1, key);
    dev->capacity = d->config.device_memory
                        ? d->config.device_memory
                        : (uint64_t)((double)total * d->config.device_fraction);
    dev->total = total;
    return s % SCHED_MAX_DEVICES;
  }
  return -ENOSPC;
}

static bool is_resident(enum sched_program_state state)
{
  return state != SCHED_SWAPPED_OUT;
}

uint64_t sched_resident(const struct daemon *d, int slot)
{
  uint64_t sum = 0;
  for (const struct program *p = d->programs; p; p = p->next)
    if (p->joined && is_resident(p->state)) sum += p->bytes[slot];
  return sum;
}

static void note_resident(struct daemon *d)
{
  for (int s = 0; s < SCHED_MAX_DEVICES; s++) {
    uint64_t resident = sched_resident(d, s);
    if (d->device[s].used && resident > d->device[s].max_resident)
      d->device[s].max_resident = resident;
  }
}

/* utime + stime of pid in seconds; -1 if unreadable. Field 2 (comm) may hold spaces. */
static double cpu_seconds(pid_t pid)
{
  char path[64], text[1024];
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  const char *p = strrchr(text, ')');
  unsigned long utime = 0, stime = 0;
  if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
                   &stime) != 2)
    return -1;
  return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

static void account_one(struct daemon *d, struct program *p, double now)
{
  double dt = now - p->accounted_at;
  p->accounted_at = now;
  if (p->state == SCHED_RUNNING) p->gpu_seconds += dt;
  else if (p->state == SCHED_WAITING || p->state == SCHED_SWAPPED_OUT) p->wait_seconds += dt;
  /* Idle: under idle_cpu of one core over the last half second or more (a program that feeds
   * the GPU launches and synchronises, which costs CPU time). */
  if (p->state != SCHED_RUNNING) {
    p->idle = false;
    p->cpu_at = 0;
    return;
  }
  if (now - p->cpu_at < 0.5) return;
  double cpu = cpu_seconds(p->pid);
  if (cpu >= 0 && p->cpu_at > 0) p->idle = (cpu - p->cpu_time) / (now - p->cpu_at) < d->config.idle_cpu;
  p->cpu_time = cpu;
  p->cpu_at = now;
}

void sched_account(struct daemon *d)
{
  double now = sched_now();
  for (struct program *p = d->programs; p; p = p->next)
    if (p->joined) account_one(d, p, now);
}

void sched_set_state(struct daemon *d, struct program *p, enum sched_program_state state)
{
  double now = sched_now();
  account_one(d, p, now);
  if (d->config.verbose && state != p->state)
    fprintf(stderr, "cudawd: pid %ld: %s -> %s (resident %llu)\n", (long)p->pid,
            sched_state_name(p->state), sched_state_name(state),
            (unsigned long long)sched_resident(d, 0));
  if (state == SCHED_SWAPPED_OUT || (state == SCHED_WAITING && p->state == SCHED_RUNNING))
    p->wanting_since = now;
  /* A turn starts when the program can run: swapped in, or its waiting allocation granted. */
  if (state == SCHED_RUNNING && (p->state == SCHED_SWAPPING_IN || p->state == SCHED_WAITING))
    p->resident_since = now;
  p->state = state;
  p->state_since = now;
  note_resident(d);
}

static void send_simple(struct program *p, enum sched_msg_type type, int status)
{
  struct sched_msg msg = {.version = SCHED_PROTO_VERSION, .type = type, .pid = p->pid,
                          .status = status};
  sched_send(p, &msg);
}

void sched_idle_hint(struct daemon *d, struct program *p, bool idle)
{
  if (!p->joined || p->gpu_idle == idle) return;
  if (d->config.verbose)
    fprintf(stderr, "cudawd: pid %ld: %s (%s)\n", (long)p->pid,
            idle ? "idle on the GPU" : "calls the GPU again", sched_state_name(p->state));
  p->gpu_idle = idle;
}

void sched_forget(struct daemon *d, struct program *p)
{
  if (d->transition == p) d->transition = NULL;
  if (!p->joined) return;
  account_one(d, p, sched_now());
  if (d->exited_count == SCHED_MAX_EXITED) {
    memmove(d->exited, d->exited + 1, sizeof d->exited - sizeof d->exited[0]);
    d->exited_count--;
  }
  sched_program_info(p, &d->exited[d->exited_count]);
  d->exited[d->exited_count++].state = SCHED_EXITED;
  p->joined = false; /* its bytes no longer count anywhere */
}

void sched_done(struct daemon *d, struct program *p, int op, int status, uint64_t bytes,
                double seconds)
{
  if (d->transition == p) d->transition = NULL;
  double now = sched_now();
  p->swap_seconds += seconds;
  if (status == 0)
    fprintf(stderr, "cudawd: pid %ld swapped %s: %.3f GiB in %.3f s (%.2f GB/s)\n", (long)p->pid,
            op == 1 ? "out" : "in", (double)bytes / (1u << 30), seconds,
            seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0);
  if (op == 1 && status == 0) {
    p->swaps++;
    for (int s = 0; s < SCHED_MAX_DEVICES; s++)
      if (p->bytes[s]) d->device[s].swaps++;
    sched_set_state(d, p, SCHED_SWAPPED_OUT);
  } else if (op == 1) {
    /* It did not reach its pause in time (or the checkpoint failed): try the next candidate. */
    fprintf(stderr, "cudawd: checkpoint of pid %ld failed (%s): trying other programs first\n",
            (long)p->pid, strerror(-status));
    p->skip_until = now + d->config.quantum;
    sched_set_state(d, p, p->wants ? SCHED_WAITING : SCHED_RUNNING);
  } else if (status == 0) {
    sched_set_state(d, p, SCHED_RUNNING);
  } else {
    fprintf(stderr, "cudawd: resume of pid %ld failed (%s): retrying later\n", (long)p->pid,
            strerror(-status));
    p->skip_until = now + 1.0;
    p->state = SCHED_SWAPPED_OUT; /* still waiting for its turn: keeps its wanting_since */
  }
}

/* Bytes p needs on top of what is resident on `slot` to run: all of its memory if swapped out,
 * what its waiting allocation adds if resident. */
static uint64_t extra(const struct program *p, int slot)
{
  uint64_t mine = p->bytes[slot];
  if (p->wants && p->want_slot == slot && p->want_bytes > mine) mine = p->want_bytes;
  return p->state == SCHED_SWAPPED_OUT ? mine : mine - p->bytes[slot];
}

/* What p lacks on `slot`: against what cudawd may hand out, and against what the device really
 * has once the memory outside its books (contexts, other processes) is counted. Grants in flight
 * count through the books (their bytes are booked when granted). */
static uint64_t deficit(const struct daemon *d, const struct program *p, int slot)
{
  const struct device *dev = &d->device[slot];
  uint64_t need = sched_resident(d, slot) + extra(p, slot);
  uint64_t lack = need > dev->capacity ? need - dev->capacity : 0;
  uint64_t real = need + dev->outside;
  if (dev->total && real > dev->total && real - dev->total > lack) lack = real - dev->total;
  return lack;
}

void sched_observe_free(struct daemon *d, const struct program *reporter, int slot, uint64_t held,
                        uint64_t device_free)
{
  struct device *dev = &d->device[slot];
  if (!dev->total || device_free > dev->total) return;
  /* Used on the device, less what the books say is allocated there (grants in flight are booked
   * but not allocated yet, so they do not count as allocated). */
  uint64_t used = dev->total - device_free, booked = held;
  for (const struct program *p = d->programs; p; p = p->next)
    if (p != reporter && p->joined && is_resident(p->state) && !p->in_flight[slot])
      booked += p->bytes[slot];
  dev->outside = used > booked ? used - booked : 0;
}

static bool fits(const struct daemon *d, const struct program *p)
{
  for (int s = 0; s < SCHED_MAX_DEVICES; s++)
    if (d->device[s].used && deficit(d, p, s)) return false;
  return true;
}

static bool never_fits(const struct daemon *d, const struct program *p)
{
  return p->wants && p->want_bytes > d->device[p->want_slot].capacity;
}

/* Who goes first among those wanting memory: higher priority, then the longest waiting. */
static bool before(const struct program *a, const struct program *b)
{
  if (a->priority != b->priority) return a->priority > b->priority;
  return a->wanting_since < b->wanting_since;
}

static bool wanting(const struct program *p)
{
  return p->joined && ((p->state == SCHED_SWAPPED_OUT && (!p->gpu_idle || p->wants)) ||
                       p->state == SCHED_WAITING || (p->state == SCHED_RUNNING && p->wants));
}

/* The first wanting program in the order of `before`; with resumable_only, the first swapped-out
 * one that fits now and is not being skipped after a failed resume. */
static struct program *next_wanting(struct daemon *d, double now, bool resumable_only)
{
  struct program *best = NULL;
  for (struct program *p = d->programs; p; p = p->next) {
    if (!wanting(p) || never_fits(d, p)) continue;
    if (resumable_only && (p->state != SCHED_SWAPPED_OUT || p->skip_until > now || !fits(d, p)))
      continue;
    if (!best || before(p, best)) best = p;
  }
  return best;
}

static void grant_or_deny(struct daemon *d)
{
  for (struct program *p = d->programs; p; p = p->next) {
    if (!p->joined || !p->wants || (p->state != SCHED_RUNNING && p->state != SCHED_WAITING))
      continue;
    if (never_fits(d, p)) {
      p->wants = false;
      send_simple(p, SCHED_GRANT, -ENOMEM);
      sched_set_state(d, p, SCHED_RUNNING);
    } else if (fits(d, p)) {
      p->bytes[p->want_slot] = p->want_bytes;
      p->in_flight[p->want_slot] = true;
      p->wants = false;
      send_simple(p, SCHED_GRANT, 0);
      sched_set_state(d, p, SCHED_RUNNING);
    } else if (p->state == SCHED_RUNNING) {
      sched_set_state(d, p, SCHED_WAITING);
    }
  }
}

/* May v be checkpointed to make room for `head`? Its turn must be over: quantum x priority, or
 * min-run if it leaves the GPU idle. Waiting programs only when nothing else can give memory
 * (they hold memory and want more: without this two of them could wait for each other). */
static bool may_preempt(const struct daemon *d, const struct program *v, const struct program *head,
                        double now, bool waiting_too)
{
  if (v == head || !v->joined || v->skip_until > now) return false;
  if (v->state != SCHED_RUNNING && !(waiting_too && v->state == SCHED_WAITING)) return false;
  double turn = now - v->resident_since;
  int weight = v->priority > 0 ? v->priority : 1;
  if (v->state == SCHED_WAITING) return turn >= d->config.min_run;
  return turn >= d->config.quantum * weight || v->gpu_idle ||
         (v->idle && turn >= d->config.min_run);
}

/* Whether checkpointing the programs that may be preempted covers head's deficit everywhere. */
static bool can_make_room(const struct daemon *d, const struct program *head, double now,
                          bool waiting_too)
{
  for (int s = 0; s < SCHED_MAX_DEVICES; s++) {
    uint64_t missing = d->device[s].used ? deficit(d, head, s) : 0;
    if (!missing) continue;
    uint64_t freeable = 0;
    for (const struct program *v = d->programs; v; v = v->next)
      if (may_preempt(d, v, head, now, waiting_too)) freeable += v->bytes[s];
    if (freeable < missing) return false;
  }
  return true;
}

static struct program *choose_victim(struct daemon *d, const struct program *head, double now,
                                     bool waiting_too)
{
  struct program *best = NULL;
  for (struct program *v = d->programs; v; v = v->next) {
    if (!may_preempt(d, v, head, now, waiting_too)) continue;
    bool helps = false;
    for (int s = 0; s < SCHED_MAX_DEVICES; s++)
      if (v->bytes[s] && d->device[s].used && deficit(d, head, s)) helps = true;
    if (!helps) continue;
    if (!best || v->priority < best->priority ||
        (v->priority == best->priority && v->resident_since < best->resident_since))
      best = v;
  }
  return best;
}

/* Whether some resident program other than head still runs (not waiting) on head's devices. */
static bool others_running(const struct daemon *d, const struct program *head)
{
  for (const struct program *v = d->programs; v; v = v->next)
    if (v != head && v->joined && v->state == SCHED_RUNNING) return true;
  return false;
}

void sched_step(struct daemon *d)
{
  if (d->transition) return; /* one checkpoint or resume at a time */
  double now = sched_now();
  grant_or_deny(d);

  struct program *back = next_wanting(d, now, true);
  if (back) {
    send_simple(back, SCHED_RESUME, 0);
    sched_set_state(d, back, SCHED_SWAPPING_IN);
    d->transition = back;
    return;
  }

  struct program *head = next_wanting(d, now, false);
  if (!head || fits(d, head)) return;
  bool waiting_too = !others_running(d, head);
  if (!can_make_room(d, head, now, waiting_too)) return;
  struct program *victim = choose_victim(d, head, now, waiting_too);
  if (!victim) return;
  send_simple(victim, SCHED_CHECKPOINT, 0);
  sched_set_state(d, victim, SCHED_SWAPPING_OUT);
  d->transition = victim;
}
