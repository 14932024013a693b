/* cudawd's policy: per device, hand out memory while it fits; when a program's allocation or a
 * swapped-out program does not fit, checkpoint resident programs whose turn is over (quantum x
 * priority, or min-run when they leave the GPU idle) until it does. A program swapped in keeps
 * its turn until then, so nothing thrashes; programs that fit together are never swapped. A
 * program that says it makes no CUDA call (SCHED_GPU_IDLE: host work, data loading) gives its turn
 * once it has been idle as long as its swap would take, and once out is not brought back before
 * it calls again. No checkpoint is ordered whose image the host has no room for.
 * Fair GPU time: each program's GPU time (running resident, not idle by its hint) over its
 * priority is its share clock. The wanting program with the least goes first, the preemptible
 * one with the most is swapped out first; clocks within 10 ms count as level (then
 * priority, then the longest waiting). So priority N gets N times the GPU time, and a program that
 * kept the GPU past its turn (its swap refused for host memory) waits until the others caught up.
 * A newcomer starts level with the least clock present; one idle and swapped out keeps at most
 * FAIR_LAG_TURNS turns of credit, so a long idle phase does not buy a long monopoly later.
 * The first wanting program that swaps could make room for is first in line: nobody behind it on
 * its devices is resumed, or has room made, until it is in (a large program among small ones
 * would otherwise wait for ever while they take turns in the memory freed for it). */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

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

/* The hex digits of the "GPU UUID:" line of a driver information file, lower case; false if it
 * has none. */
static bool read_uuid(const char *path, char out[33])
{
  FILE *f = fopen(path, "re");
  if (!f) return false;
  char line[256];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    const char *text = strstr(line, "GPU UUID:");
    if (!text) continue;
    int n = 0;
    for (text += 9; *text && n < 32; text++) {
      char c = (char)tolower((unsigned char)*text);
      if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) out[n++] = c;
      else if (c == 'g' || c == 'p' || c == 'u') n = 0; /* the "GPU-" prefix is not digits */
    }
    out[n] = '\0';
    found = n == 32;
  }
  fclose(f);
  return found;
}

/* Whether key names a GPU of this machine: one of the driver's GPU directories lists it, or there
 * is no such directory to ask (no NVIDIA driver: the emulated device, tests) or --gpu-list none.
 * Its directory's name (the PCI bus id) into bus ("" when not listed). */
static bool known_gpu(const struct daemon *d, const char *key, char bus[64])
{
  bus[0] = '\0';
  const char *dir = d->config.gpu_list;
  if (!dir || !strcmp(dir, "none")) return true;
  DIR *gpus = opendir(dir);
  if (!gpus) return errno == ENOENT;
  bool known = false;
  for (struct dirent *e; !known && (e = readdir(gpus));) {
    if (e->d_name[0] == '.') continue;
    char path[PATH_MAX], uuid[33];
    if ((size_t)snprintf(path, sizeof path, "%s/%s/information", dir, e->d_name) < sizeof path &&
        read_uuid(path, uuid))
      known = strncmp(uuid, key, 32) == 0;
    if (known && strlen(e->d_name) < 64) memcpy(bus, e->d_name, strlen(e->d_name) + 1);
  }
  closedir(gpus);
  return known;
}

/* Pinned copies reach this share of the link's payload rate (the H100's PCIe 5.0 x16: 55.3 of
 * 63.0 GB/s, session 25); a link slower than LINK_MIN (a virtual machine's emulated port) is
 * taken to say nothing. */
#define LINK_EFFICIENCY 0.85
#define LINK_MIN 4e9

/* One number from the file dir/bus/name (0: none). */
static double link_field(const char *dir, const char *bus, const char *name)
{
  char path[PATH_MAX];
  if ((size_t)snprintf(path, sizeof path, "%s/%s/%s", dir, bus, name) >= sizeof path) return 0;
  FILE *f = fopen(path, "re");
  double value = 0;
  if (f && fscanf(f, "%lf", &value) != 1) value = 0;
  if (f) fclose(f);
  return value > 0 && value < 1e6 ? value : 0;
}

/* What a swap over the GPU's PCIe link should run at, each way (bytes/s; 0: unknown): its speed
 * (GT/s) times its width, less the line code (8b/10b before 8 GT/s, 128b/130b from there on),
 * at LINK_EFFICIENCY. Said once per device. */
static double link_rate(const struct daemon *d, const char *bus, const char *key)
{
  if (!bus[0]) return 0;
  const char *dir = d->config.pci_devices ? d->config.pci_devices : "/sys/bus/pci/devices";
  double speed = link_field(dir, bus, "current_link_speed");
  double width = link_field(dir, bus, "current_link_width");
  double payload = speed * 1e9 * width / 8 * (speed >= 8 ? 128.0 / 130 : 0.8);
  if (payload < LINK_MIN) return 0;
  double rate = payload * LINK_EFFICIENCY;
  fprintf(stderr, "cudawd: device %.8s (%s): PCIe %.1f GT/s x%.0f: swaps priced at %.1f GB/s each "
          "way until one is measured\n", key, bus, speed, width, rate / 1e9);
  return rate;
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
  char bus[64];
  if (!known_gpu(d, key, bus)) return -ENODEV;
  int reuse = -1;
  for (int s = 0; s < SCHED_MAX_DEVICES; s++)
    if (d->device[s].used && strncmp(d->device[s].key, key, SCHED_KEY_LEN) == 0) {
      if (d->device[s].total == total) return s;
      if (slot_in_use(d, s)) return -EINVAL; /* one device, one size */
      reuse = s; /* whoever said the other size left: the slot is this one's now */
    }
  /* A never-used slot first, else one whose programs all left. */
  for (int s = 0; s < 2 * SCHED_MAX_DEVICES; s++) {
    struct device *dev = &d->device[s % SCHED_MAX_DEVICES];
    if (reuse >= 0 && s % SCHED_MAX_DEVICES != reuse) continue;
    if (reuse < 0 && dev->used && (s < SCHED_MAX_DEVICES || slot_in_use(d, s % SCHED_MAX_DEVICES)))
      continue;
    *dev = (struct device){0};
    dev->used = true;
    snprintf(dev->key, sizeof dev->key, "%.*s", SCHED_KEY_LEN - 1, key);
    dev->capacity = d->config.device_memory
                        ? d->config.device_memory
                        : (uint64_t)((double)total * d->config.device_fraction);
    dev->total = total;
    dev->link_rate = link_rate(d, bus, key);
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
  /* By the hint, not the CPU: a program blocked in a synchronisation uses no CPU yet the GPU. */
  if (p->state == SCHED_RUNNING && !p->gpu_idle) {
    p->gpu_seconds += dt;
    p->share_seconds += dt / (p->priority > 0 ? p->priority : 1);
  }
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
  if (cpu >= 0 && p->cpu_at > 0) {
    bool idle = (cpu - p->cpu_time) / (now - p->cpu_at) < d->config.idle_cpu;
    if (idle && !p->idle) p->idle_since = p->cpu_at;
    p->idle = idle;
  }
  p->cpu_time = cpu;
  p->cpu_at = now;
}


/* An idle program swapped out keeps at most this many turns of share behind the least clock of
 * those competing (a turn, quantum x priority, moves the share clock by one quantum). */
#define FAIR_LAG_TURNS 4

/* Newcomers start level with the least share clock of the others (GPU time before they came is
 * not owed to them); programs away (swapped out, idle) are kept within FAIR_LAG_TURNS of the
 * least clock of those competing (resident or wanting). */
static void level_shares(struct daemon *d)
{
  double least_all = -1, least_competing = -1;
  for (const struct program *p = d->programs; p; p = p->next) {
    if (!p->joined || p->borrower || !p->share_started) continue;
    if (least_all < 0 || p->share_seconds < least_all) least_all = p->share_seconds;
    bool competing = p->state != SCHED_SWAPPED_OUT || sched_wanting(p);
    if (competing && (least_competing < 0 || p->share_seconds < least_competing))
      least_competing = p->share_seconds;
  }
  for (struct program *p = d->programs; p; p = p->next) {
    if (!p->joined || p->borrower) continue;
    if (!p->share_started) {
      p->share_seconds = least_all > 0 ? least_all : 0;
      p->share_started = true;
    } else if (p->state == SCHED_SWAPPED_OUT && !sched_wanting(p) && least_competing >= 0) {
      double floor = least_competing - FAIR_LAG_TURNS * d->config.quantum;
      if (p->share_seconds < floor) p->share_seconds = floor;
    }
  }
}

void sched_account(struct daemon *d)
{
  double now = sched_now();
  for (struct program *p = d->programs; p; p = p->next)
    if (p->joined && !p->borrower) account_one(d, p, now); /* a borrower has no GPU time here */
  level_shares(d);
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
  if (state == SCHED_SWAPPING_OUT || state == SCHED_SWAPPED_OUT) p->ahead = false;
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

uint64_t sched_command_key(pid_t pid)
{
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/%ld/cmdline", (long)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  XXH3_state_t *state = XXH3_createState();
  uint64_t key = 0;
  size_t total = 0;
  ssize_t n = -1;
  if (state && XXH3_64bits_reset(state) == XXH_OK)
    while ((n = read(fd, buf, sizeof buf)) > 0 && XXH3_64bits_update(state, buf, (size_t)n) == XXH_OK)
      total += (size_t)n;
  bool whole = state && n == 0 && total; /* none: a kernel thread, a zombie */
  if (whole) key = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  close(fd);
  return whole && !key ? 1 : key; /* 0 means unread */
}

/* Where p's idle phase goes: the entry of its user and command, else an empty one, else the
 * oldest of the user with the most entries (one user's many commands never push another user's
 * out, as with the history of programs gone). */
static struct idle_kin *kin_slot(struct daemon *d, const struct program *p)
{
  for (int i = 0; i < SCHED_IDLE_KIN; i++)
    if (d->idle_kin[i].key == p->command_key && d->idle_kin[i].uid == p->uid) return &d->idle_kin[i];
  for (int i = 0; i < SCHED_IDLE_KIN; i++)
    if (!d->idle_kin[i].key) return &d->idle_kin[i];
  struct idle_kin *victim = &d->idle_kin[0];
  int most = 0;
  for (int i = 0; i < SCHED_IDLE_KIN; i++) {
    int rows = 0;
    for (int j = 0; j < SCHED_IDLE_KIN; j++) rows += d->idle_kin[j].uid == d->idle_kin[i].uid;
    if (rows > most || (rows == most && d->idle_kin[i].at < victim->at)) {
      victim = &d->idle_kin[i];
      most = rows;
    }
  }
  return victim;
}

/* Remember p's idle phase as its command's last. */
static void remember_idle(struct daemon *d, const struct program *p, double now)
{
  if (!p->command_key) return;
  *kin_slot(d, p) = (struct idle_kin){.uid = p->uid, .key = p->command_key,
                                      .seconds = p->last_idle, .at = now};
}

double sched_idle_expected(const struct daemon *d, const struct program *p)
{
  if (p->last_idle > 0 || !p->command_key) return p->last_idle;
  for (int i = 0; i < SCHED_IDLE_KIN; i++)
    if (d->idle_kin[i].key == p->command_key && d->idle_kin[i].uid == p->uid)
      return d->idle_kin[i].seconds;
  return 0;
}

void sched_idle_hint(struct daemon *d, struct program *p, bool idle)
{
  if (!p->joined || p->gpu_idle == idle) return;
  if (d->config.verbose)
    fprintf(stderr, "cudawd: pid %ld: %s (%s)\n", (long)p->pid,
            idle ? "idle on the GPU" : "calls the GPU again", sched_state_name(p->state));
  double now = sched_now();
  account_one(d, p, now); /* the time until now was spent as it was */
  if (!idle) {
    p->last_idle = now - p->gpu_idle_since;
    remember_idle(d, p, now);
    p->ahead = false;
  }
  p->gpu_idle = idle;
  if (idle) p->gpu_idle_since = now;
}

/* Until a swap of SCHED_RATE_MIN_BYTES has been seen, swaps are taken to run at these rates, [0] outside the
 * pool (a first checkpoint into fresh host pages, a resume from them: H100 figures of a 45 GiB
 * job) and [1] in it (tests/sched/pool_bench.sh, 40 GiB on the H100: 47.9 and 43.8 GB/s), or
 * at what the GPU's PCIe link allows (link_rate), the slowest of p's devices: in the pool at
 * that rate, outside it at the defaults if the link is not slower. On the H100 the link said
 * 53.6 GB/s, and the first idle phase of share_bench's host scenario waited 2.3 s at the
 * defaults before its swap-out (session 25), where 1.8 s prices the swap right; a slower link
 * (PCIe 3.0 x16: 13.4 GB/s) made the defaults 3x too cheap. */
static const double default_rate_out[2] = {6e9, 45e9}, default_rate_in[2] = {20e9, 40e9};

static double first_rate(const struct daemon *d, const struct program *p, int in_pool,
                         const double defaults[2])
{
  double link = 0;
  for (int s = 0; s < SCHED_MAX_DEVICES; s++)
    if (p->bytes[s] && d->device[s].link_rate > 0 && (!link || d->device[s].link_rate < link))
      link = d->device[s].link_rate;
  if (!link) return defaults[in_pool];
  return in_pool || link < defaults[in_pool] ? link : defaults[in_pool];
}

uint64_t sched_image_bytes(const struct program *p)
{
  uint64_t sum = 0;
  for (int s = 0; s < SCHED_MAX_DEVICES; s++) sum += p->bytes[s];
  return sum;
}

/* Whether p's image is (or would be) in the pool: a range lent, or one cudawd would lend now. */
static int pooled(const struct daemon *d, const struct program *p)
{
  return p->loan.length > 0 || sched_pool_would_lend(d, p);
}

static double swap_cost(const struct daemon *d, const struct program *p, int in_pool)
{
  double bytes = (double)sched_image_bytes(p);
  double out = d->rate_out[in_pool], in = d->rate_in[in_pool];
  return bytes / (out > 0 ? out : first_rate(d, p, in_pool, default_rate_out)) +
         bytes / (in > 0 ? in : first_rate(d, p, in_pool, default_rate_in)) +
         sched_spill_read_seconds(d, p);
}

double sched_swap_cost(const struct daemon *d, const struct program *p)
{
  return swap_cost(d, p, pooled(d, p));
}

/* The cost of swapping v out for head: where the pool has no room for v's image beside the
 * others but head's lies there, the swap is a handover (exchange.c), v's image going into the
 * pool over head's at the pool's rates. Costed at the private rates instead (6 GB/s until
 * measured), a 45 GiB program idle for 6.7 s was never swapped out for one waiting with its image
 * in the pool: it kept the GPU idle for the rest of its 30 s quantum (H100, share_bench host,
 * pool of 75% of RAM: 0.97x, GPU time 11.7 s against 20.4 and 23.1 s). */
double sched_preempt_cost(const struct daemon *d, const struct program *v,
                          const struct program *head)
{
  int in_pool = pooled(d, v) || (head && sched_pool_could_hand_over(d, v, head));
  return swap_cost(d, v, in_pool);
}

/* ---- host memory: a swapped-out program's image lives there ----------------------------------- */

/* MemAvailable and MemTotal (host_meminfo: CUDAWD_MEMINFO names another file in tests), at most
 * every 0.25 s. Unknown (0) when unreadable: then no checkpoint is held back for it. */
static void read_host_memory(struct daemon *d, double now)
{
  if (d->host_read_at > 0 && now - d->host_read_at < 0.25) return;
  d->host_read_at = now;
  uint64_t available = host_meminfo("MemAvailable"), total = host_meminfo("MemTotal");
  uint64_t reading = sched_spill_reading(d); /* may not be in MemAvailable yet */
  d->host_available = !total ? 0 : available > reading ? available - reading : 0;
  d->host_total = available ? total : 0;
}

/* What a checkpoint must leave available on the host: the programs' own host memory, page cache
 * the system needs. */
static uint64_t host_margin(const struct daemon *d)
{
  uint64_t share = d->host_total / 32;
  return share > (1ull << 30) ? share : 1ull << 30;
}

uint64_t sched_host_margin(const struct daemon *d) { return host_margin(d); }

/* Whether the host has room for v's image: a range of the pool cudawd would lend it, or memory
 * available. A host out of memory kills a program (the OOM killer), which sharing must never
 * do: such a checkpoint is not ordered, the waiting program waits on. */
static bool host_room(const struct daemon *d, const struct program *v)
{
  return sched_pool_would_lend(d, v) || !d->host_total ||
         sched_image_bytes(v) + host_margin(d) <= d->host_available;
}

/* The row of the exited history to drop for a new one: the oldest of the uid with the most rows,
 * so that one user's programs (or junk) never push another user's history out. */
static int history_victim(const struct daemon *d)
{
  int victim = 0, most = 0;
  for (int i = 0; i < d->exited_count; i++) {
    int rows = 0;
    for (int k = 0; k < d->exited_count; k++) rows += d->exited_uid[k] == d->exited_uid[i];
    if (rows > most) { /* the first row of a uid is its oldest */
      most = rows;
      victim = i;
    }
  }
  return victim;
}

void sched_forget(struct daemon *d, struct program *p)
{
  if (d->transition == p) d->transition = NULL;
  sched_exchange_gone(d, p);
  if (!p->joined) return;
  if (p->borrower) { /* never scheduled: no history row */
    p->joined = false;
    return;
  }
  sched_spill_forget(d, p);
  account_one(d, p, sched_now());
  if (!p->worked) { /* said hello and nothing else: no history worth a row */
    p->joined = false;
    return;
  }
  if (d->exited_count == SCHED_MAX_EXITED) {
    int v = history_victim(d), after = SCHED_MAX_EXITED - v - 1;
    memmove(d->exited + v, d->exited + v + 1, (size_t)after * sizeof d->exited[0]);
    memmove(d->exited_detail + v, d->exited_detail + v + 1,
            (size_t)after * sizeof d->exited_detail[0]);
    memmove(d->exited_grant_at + v, d->exited_grant_at + v + 1,
            (size_t)after * sizeof d->exited_grant_at[0]);
    memmove(d->exited_uid + v, d->exited_uid + v + 1, (size_t)after * sizeof d->exited_uid[0]);
    d->exited_count--;
  }
  int i = d->exited_count++;
  d->exited_uid[i] = p->uid;
  sched_program_info(p, &d->exited[i]);
  d->exited[i].state = SCHED_EXITED;
  d->exited_detail[i] = (struct sched_program_detail){.last_grant_bytes = p->last_grant_bytes,
                                                      .retries = p->retries,
                                                      .failed = p->failed};
  d->exited_grant_at[i] = p->last_grant_at;
  p->joined = false; /* its bytes no longer count anywhere */
}

#define CORRUPT_BACKOFF_MAX 300.0 /* seconds between resumes of an image found corrupt */
#define HOST_RETRY 5.0            /* seconds before a checkpoint refused for host memory again */

void sched_done(struct daemon *d, struct program *p, int op, int status, uint64_t bytes,
                double seconds)
{
  if (d->transition == p) d->transition = NULL;
  double now = sched_now();
  p->swap_seconds += seconds;
  /* A resume from disk runs at the disk's rate, not the host's (spill.c keeps that one). */
  /* Nor an exchange's: each side is paced by the other program. */
  if (status == 0 && bytes >= SCHED_RATE_MIN_BYTES && seconds > 0 && !(op == 2 && p->on_disk) &&
      !sched_exchange_member(d, p)) {
    /* The range lent for the image is taken back after this (cudawd.c), also after a resume.
     * A checkpoint that found its range page-locked in part staged the rest at a few GB/s: its
     * rate is not the pool's. Taken as the pool's, the first two swap-outs of three 45 GiB jobs
     * (8.4-9.7 GB/s) priced a swap at 6.6 s, more than their 6.4 s idle phases, and the third
     * job held the GPU idle through two of them (H200 as an H100, share_bench host: 1.10x). */
    int in_pool = p->loan.length > 0;
    if (op == 1 && !(in_pool && p->placed < bytes)) d->rate_out[in_pool] = (double)bytes / seconds;
    else if (op == 2) d->rate_in[in_pool] = (double)bytes / seconds;
  }
  if (status == 0)
    fprintf(stderr, "cudawd: pid %ld swapped %s: %.3f GiB in %.3f s (%.2f GB/s)\n", (long)p->pid,
            op == 1 ? "out" : p->on_disk ? "in from disk" : "in", (double)bytes / (1u << 30),
            seconds, seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0);
  if (op == 1 && status == 0) {
    p->swaps++;
    for (int s = 0; s < SCHED_MAX_DEVICES; s++)
      if (p->bytes[s]) d->device[s].swaps++;
    sched_set_state(d, p, SCHED_SWAPPED_OUT);
  } else if (op == 1 && p->leaving) {
    /* The order reached it as it exits: its memory goes with its connection. */
    fprintf(stderr, "cudawd: pid %ld is exiting: not swapped out (%s); its memory is counted "
            "until it leaves\n", (long)p->pid, strerror(-status));
    sched_set_state(d, p, SCHED_RUNNING);
  } else if (op == 1) {
    /* It did not reach its pause in time (or the checkpoint failed): try the next candidate.
     * One the host had no room for (ENOMEM: "host image needs ...", such as an image that would
     * have gone beside a pool window still being page-locked) may fit seconds later. */
    fprintf(stderr, "cudawd: checkpoint of pid %ld failed (%s): trying other programs first\n",
            (long)p->pid, strerror(-status));
    p->skip_until = now + (status == -ENOMEM ? HOST_RETRY : d->config.quantum);
    sched_set_state(d, p, p->wants ? SCHED_WAITING : SCHED_RUNNING);
  } else if (status == 0) {
    p->corrupt_resumes = 0;
    sched_set_state(d, p, SCHED_RUNNING);
  } else {
    /* A chunk that arrived wrong is copied again by the next try; an image whose bytes differ
     * from their checksums on the host does not heal. Tried every second, such a program's log
     * filled with the same failure (a notebook, H200 2026-11-28): after 3 in a row, the tries
     * back off (to 5 min at most) and cudawd says once what it means. */
    p->corrupt_resumes = status == -EBADMSG ? p->corrupt_resumes + 1 : 0;
    double wait = 1.0;
    for (int i = 3; i <= p->corrupt_resumes && wait < CORRUPT_BACKOFF_MAX; i++) wait *= 4;
    if (wait > CORRUPT_BACKOFF_MAX) wait = CORRUPT_BACKOFF_MAX;
    if (p->corrupt_resumes == 3)
      fprintf(stderr, "cudawd: pid %ld: its image failed its checksums at 3 resumes in a row: most "
              "likely corrupt on the host; the program stays paused (its log names the chunk); "
              "cudawd tries again less and less often (every 5 min at most); stop the program "
              "if its data cannot be recomputed\n", (long)p->pid);
    else if (p->corrupt_resumes < 3)
      fprintf(stderr, "cudawd: resume of pid %ld failed (%s): retrying later\n", (long)p->pid,
              strerror(-status));
    p->skip_until = now + wait;
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

/* What p lacks on `slot` with `more` bytes resident there besides (a program coming in): against
 * what cudawd may hand out, and against what the device really has once the memory outside its
 * books (contexts, other processes) is counted. Grants in flight count through the books (their
 * bytes are booked when granted). */
static uint64_t deficit_with(const struct daemon *d, const struct program *p, int slot,
                             uint64_t more)
{
  const struct device *dev = &d->device[slot];
  uint64_t need = sched_resident(d, slot) + more + extra(p, slot);
  uint64_t lack = need > dev->capacity ? need - dev->capacity : 0;
  uint64_t real = need + dev->outside;
  if (dev->total && real > dev->total && real - dev->total > lack) lack = real - dev->total;
  return lack;
}

static uint64_t deficit(const struct daemon *d, const struct program *p, int slot)
{
  return deficit_with(d, p, slot, 0);
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
    if (p != reporter && p->joined && is_resident(p->state))
      booked += p->in_flight[slot] ? p->before_grant[slot] : p->bytes[slot];
  dev->outside = used > booked ? used - booked : 0;
  dev->outside_at = sched_now();
}

void sched_joined_usage(struct daemon *d, int slot, uint64_t bytes)
{
  struct device *dev = &d->device[slot];
  dev->outside = dev->outside > bytes ? dev->outside - bytes : 0;
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

/* Share clocks closer than this are level: then priority and waiting time decide, as before. */
#define FAIR_LEVEL_SECONDS 0.01

/* -1, 0 or 1 as a's share clock is behind, level with or ahead of b's. */
static int share_order(const struct program *a, const struct program *b)
{
  double gap = a->share_seconds - b->share_seconds;
  return gap < -FAIR_LEVEL_SECONDS ? -1 : gap > FAIR_LEVEL_SECONDS ? 1 : 0;
}

/* Who goes first among those wanting memory: the least share clock, then higher priority, then
 * the longest waiting. */
bool sched_before(const struct program *a, const struct program *b)
{
  int order = share_order(a, b);
  if (order) return order < 0;
  if (a->priority != b->priority) return a->priority > b->priority;
  return a->wanting_since < b->wanting_since;
}

bool sched_wanting(const struct program *p)
{
  return p->joined && !p->borrower && !p->leaving &&
         ((p->state == SCHED_SWAPPED_OUT && (!p->gpu_idle || p->wants)) ||
          p->state == SCHED_WAITING || (p->state == SCHED_RUNNING && p->wants));
}

/* The first wanting program in the order of `sched_before`; with resumable_only, the first swapped-out
 * one that fits now and is not being skipped after a failed resume. */
static struct program *next_wanting(struct daemon *d, double now, bool resumable_only)
{
  struct program *best = NULL;
  for (struct program *p = d->programs; p; p = p->next) {
    if (!sched_wanting(p) || never_fits(d, p)) continue;
    if (resumable_only && (p->state != SCHED_SWAPPED_OUT || p->skip_until > now ||
                           p->pending_op == 3 || !fits(d, p))) /* in its spill */
      continue;
    if (!best || sched_before(p, best)) best = p;
  }
  return best;
}

/* Whether a and b use a device in common: what one holds or wants there is in the other's way. */
static bool share_device(const struct program *a, const struct program *b)
{
  for (int s = 0; s < SCHED_MAX_DEVICES; s++) {
    bool in_a = a->bytes[s] || (a->wants && a->want_slot == s);
    bool in_b = b->bytes[s] || (b->wants && b->want_slot == s);
    if (in_a && in_b) return true;
  }
  return false;
}

/* Whether swapping resident programs out could make room for p once their turns are over, with
 * `newcomer` (may be NULL) come in and staying: on every device it lacks room on, the others
 * resident there (not the newcomer) hold at least what it lacks. */
static bool room_later(const struct daemon *d, const struct program *p,
                       const struct program *newcomer)
{
  for (int s = 0; s < SCHED_MAX_DEVICES; s++) {
    if (!d->device[s].used) continue;
    uint64_t missing = deficit_with(d, p, s, newcomer ? extra(newcomer, s) : 0), held = 0;
    if (!missing) continue;
    for (const struct program *v = d->programs; v; v = v->next)
      if (v != p && v != newcomer && v->joined && is_resident(v->state)) held += v->bytes[s];
    if (held < missing) return false;
  }
  return true;
}

/* The program the others wait behind: the first wanting one (in the order of `sched_before`)
 * that fits, or that swapping resident programs out could make room for once their turns are
 * over. Memory freed for it must not go to one behind it on a device they share: programs small
 * enough to fit in part of it would take turns in it, their turns would never all end at once,
 * and a large program would wait for ever. NULL: none (the others go in their order, as each
 * can). */
static struct program *first_in_line(const struct daemon *d)
{
  struct program *first = NULL;
  for (struct program *p = d->programs; p; p = p->next)
    if (sched_wanting(p) && !never_fits(d, p) && p->pending_op != 3 && /* not in its spill */
        (fits(d, p) || room_later(d, p, NULL)) && (!first || sched_before(p, first)))
      first = p;
  return first;
}

/* Whether p must wait for `first` (first_in_line) before it may take memory: it may go ahead
 * only where first's room, once the turns of those resident now are over, would not need what
 * p takes (p's own turn would end after theirs). */
static bool behind(const struct daemon *d, const struct program *p, const struct program *first)
{
  return first && p != first && share_device(p, first) && !room_later(d, first, p);
}

static void grant(struct daemon *d, struct program *p)
{
  uint64_t before = p->bytes[p->want_slot];
  p->before_grant[p->want_slot] = before;
  p->last_grant_bytes = p->want_bytes > before ? p->want_bytes - before : 0;
  p->last_grant_at = sched_now();
  p->bytes[p->want_slot] = p->want_bytes;
  p->in_flight[p->want_slot] = true;
  p->wants = false;
  send_simple(p, SCHED_GRANT, 0);
  sched_set_state(d, p, SCHED_RUNNING);
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
      grant(d, p);
    } else if (p->state == SCHED_RUNNING) {
      sched_set_state(d, p, SCHED_WAITING);
    }
  }
}

/* May v be checkpointed to make room for `head`? Its turn must be over: quantum x priority, or,
 * idle (it said it makes no CUDA call, or it uses next to no CPU after min-run), once its
 * idleness has lasted as long as a swap out and back in would take: an idle phase shorter than
 * that is cheaper to sit out, and waiting that long never costs more than twice the better
 * choice (a PyTorch job building its model on the CPU for 3 s must not pay a 10 s swap of
 * 45 GiB). A program whose last idle phase (by the hint) outlasted its swap goes at once (before
 * its first, one of the same user and command stands for it). Waiting programs only when nothing else can give memory (they hold memory and want
 * more: without this two of them could wait for each other). With mind_host, only where the
 * host has room for its image. */
static bool may_preempt(const struct daemon *d, const struct program *v, const struct program *head,
                        double now, bool waiting_too, bool mind_host)
{
  if (v == head || !v->joined || v->borrower || v->leaving || v->skip_until > now) return false;
  if (v->state != SCHED_RUNNING && !(waiting_too && v->state == SCHED_WAITING)) return false;
  if (mind_host && !host_room(d, v)) return false;
  /* Brought back ahead of its call and idle since: the room was only lent to it. */
  if (v->ahead && v->state == SCHED_RUNNING && v->gpu_idle && !v->wants) return true;
  double turn = now - v->resident_since;
  int weight = v->priority > 0 ? v->priority : 1;
  if (v->state == SCHED_WAITING) return turn >= d->config.min_run;
  if (turn >= d->config.quantum * weight) return true;
  double cost = sched_preempt_cost(d, v, head);
  /* Its last idle phase outlasted a swap: this one is taken to be as long (a training job's
   * data loading, an evaluation), and it goes at once. Before its first one has ended, the
   * last of its user's same command counts (three copies of one job, a sweep run again). */
  if (v->gpu_idle && (now - v->gpu_idle_since >= cost || sched_idle_expected(d, v) >= cost)) return true;
  return v->idle && turn >= d->config.min_run && now - v->idle_since >= cost;
}

/* Whether checkpointing the programs that may be preempted covers head's deficit everywhere. */
static bool can_make_room(const struct daemon *d, const struct program *head, double now,
                          bool waiting_too, bool mind_host)
{
  for (int s = 0; s < SCHED_MAX_DEVICES; s++) {
    uint64_t missing = d->device[s].used ? deficit(d, head, s) : 0;
    if (!missing) continue;
    uint64_t freeable = 0;
    for (const struct program *v = d->programs; v; v = v->next)
      if (may_preempt(d, v, head, now, waiting_too, mind_host)) freeable += v->bytes[s];
    if (freeable < missing) return false;
  }
  return true;
}

static struct program *choose_victim(struct daemon *d, const struct program *head, double now,
                                     bool waiting_too, bool mind_host)
{
  struct program *best = NULL;
  for (struct program *v = d->programs; v; v = v->next) {
    if (!may_preempt(d, v, head, now, waiting_too, mind_host)) continue;
    bool helps = false;
    for (int s = 0; s < SCHED_MAX_DEVICES; s++)
      if (v->bytes[s] && d->device[s].used && deficit(d, head, s)) helps = true;
    if (!helps) continue;
    /* The most share clock first; level: lower priority, then the longest resident. */
    int order = best ? share_order(v, best) : 1;
    if (order > 0 || (order == 0 && (v->priority < best->priority ||
                                     (v->priority == best->priority &&
                                      v->resident_since < best->resident_since))))
      best = v;
  }
  return best;
}

/* Whether some resident program other than head still runs (not waiting) on head's devices. */
static bool others_running(const struct daemon *d, const struct program *head)
{
  for (const struct program *v = d->programs; v; v = v->next)
    if (v != head && v->joined && !v->borrower && v->state == SCHED_RUNNING) return true;
  return false;
}

/* The transition under way no longer holds up the others once it has taken swap_timeout: its
 * program keeps counting as resident until it answers (a late answer is still taken). A program
 * that never sent work (it only said hello, perhaps saying it was paused) has client_timeout to
 * answer, and is closed if it does not: a real program answers at once, a squatter would hold
 * every swap up for the whole swap timeout. */
static void check_transition(struct daemon *d, double now)
{
  struct program *p = d->transition;
  if (!p) return;
  double limit = d->config.swap_timeout;
  if (!p->worked && d->config.client_timeout > 0 &&
      (!(limit > 0) || d->config.client_timeout < limit))
    limit = d->config.client_timeout;
  if (!(limit > 0) || now - p->state_since < limit) return;
  d->transition = NULL;
  if (!p->worked) {
    p->close_reason = p->pending_op == 1 ? "never sent work and did not answer its checkpoint"
                                         : "never sent work and did not answer its resume";
    return;
  }
  fprintf(stderr, "cudawd: pid %ld did not answer its %s within %.0f s: scheduling the others\n",
          (long)p->pid, p->pending_op == 1 ? "checkpoint" : "resume", limit);
}

#define REJOIN_GRACE 1.5

/* Order p's resume: the one transition under way until it answers. */
static void start_resume(struct daemon *d, struct program *p)
{
  send_simple(p, SCHED_RESUME, 0);
  p->pending_op = 2;
  sched_set_state(d, p, SCHED_SWAPPING_IN);
  d->transition = p;
}

/* An estimate of the memory outside the books older than this may be stale (what it counted may
 * have left: programs that ran unshared and exited) and alone no longer blocks everything. */
#define OUTSIDE_STALE 2.0

/* Nothing can be done for the wanting programs (in `order`): if the first one fits in the
 * capacity and waits only for memory estimated outside the books long ago, let it try (grant or
 * resume). Its allocation fails if the memory is really taken, and the retry brings a fresh
 * figure; one try per OUTSIDE_STALE. Without this a stale estimate stops every grant for good. */
static void probe(struct daemon *d, struct program **order, int count, double now,
                  const struct program *first)
{
  for (int i = 0; i < count; i++) {
    struct program *p = order[i];
    if (behind(d, p, first)) continue; /* the memory it would try for is first's */
    bool only_outside = true;
    for (int s = 0; s < SCHED_MAX_DEVICES && only_outside; s++) {
      const struct device *dev = &d->device[s];
      if (!dev->used || !deficit(d, p, s)) continue;
      only_outside = sched_resident(d, s) + extra(p, s) <= dev->capacity &&
                     now - dev->outside_at >= OUTSIDE_STALE;
    }
    if (!only_outside || (p->state == SCHED_SWAPPED_OUT &&
                          (p->skip_until > now || now - d->started < REJOIN_GRACE)))
      continue;
    fprintf(stderr, "cudawd: pid %ld waits only for memory estimated outside the books a while "
            "ago: letting it try\n", (long)p->pid);
    for (int s = 0; s < SCHED_MAX_DEVICES; s++)
      if (d->device[s].used && deficit(d, p, s)) d->device[s].outside_at = now;
    if (p->state == SCHED_SWAPPED_OUT) {
      start_resume(d, p);
    } else if (p->wants) {
      grant(d, p);
    }
    return;
  }
}

static uint64_t available(const struct daemon *d, int slot);

/* The host lacks room for the victim's image beside head's: exchange them where the victim alone
 * covers head's deficit on one device (the spare is that device's free memory). Else why_not
 * says why not (empty: no victim). */
static bool exchange(struct daemon *d, struct program *head, double now, bool waiting_too,
                     char *why_not, size_t why_len)
{
  why_not[0] = '\0';
  struct program *v = choose_victim(d, head, now, waiting_too, false);
  if (!v || !d->host_total) return false;
  if (head->state != SCHED_SWAPPED_OUT) {
    snprintf(why_not, why_len, "pid %ld is not swapped out (it waits to allocate more)",
             (long)head->pid);
    return false;
  }
  int slot = -1;
  for (int s = 0; s < SCHED_MAX_DEVICES; s++) {
    if (!d->device[s].used || !(head->bytes[s] || v->bytes[s])) continue;
    if (slot >= 0 || deficit(d, head, s) > v->bytes[s]) {
      if (slot >= 0)
        snprintf(why_not, why_len, "pid %ld and pid %ld use more than one device", (long)v->pid,
                 (long)head->pid);
      else
        snprintf(why_not, why_len, "pid %ld's memory alone would not make room for pid %ld",
                 (long)v->pid, (long)head->pid);
      return false;
    }
    slot = s;
  }
  if (slot < 0) return false;
  uint64_t margin = host_margin(d);
  uint64_t room = d->host_available > margin ? d->host_available - margin : 0;
  return sched_exchange_order(d, v, head, room, available(d, slot), why_not, why_len);
}

/* No victim could be found for head while the host lacks room for an image: say once which
 * program cannot be swapped out (and why it is not exchanged: no_exchange, may be empty), and
 * show head waiting for host memory. */
static void note_host_short(struct daemon *d, struct program *head, double now, bool waiting_too,
                            const char *no_exchange)
{
  struct program *v = choose_victim(d, head, now, waiting_too, false);
  if (!v) return;
  d->host_blocked = v->pid;
  d->host_blocked_for = head->pid;
  if (v->host_refused) return;
  v->host_refused = true;
  fprintf(stderr, "cudawd: not swapping pid %ld out for pid %ld: its image (%.2f GiB) would "
          "leave the host short (%.2f GiB available, %.2f GiB kept free)%s%s; pid %ld waits\n",
          (long)v->pid, (long)head->pid, (double)sched_image_bytes(v) / (1u << 30),
          (double)d->host_available / (1u << 30), (double)host_margin(d) / (1u << 30),
          no_exchange[0] ? "; no exchange: " : "", no_exchange, (long)head->pid);
}

/* The resident program whose next swap-out the host could not take now (its image neither lent
 * a range of the pool nor within MemAvailable less the margin), the largest, while programs
 * rotate (one is swapped out); NULL if none. */
static const struct program *next_out_short(const struct daemon *d)
{
  if (!d->host_total) return NULL;
  bool rotating = false;
  const struct program *big = NULL;
  for (const struct program *p = d->programs; p; p = p->next) {
    if (!p->joined || p->retired || p->leaving || p->borrower) continue;
    if (p->state == SCHED_SWAPPED_OUT)
      rotating = true;
    else if (p->state == SCHED_RUNNING && sched_image_bytes(p) && !host_room(d, p) &&
             (!big || sched_image_bytes(p) > sched_image_bytes(big)))
      big = p;
  }
  return rotating ? big : NULL;
}

/* Whether the host is (or is about to be) short of memory for swapped-out images: a swap was
 * refused for host room (this step), or MemAvailable is under twice the margin, so that the
 * disk tier moves an image before the next swap would have to be refused and MemAvailable stays
 * above the margin meanwhile (the programs' own host memory grows too). Says why in `why`.
 * Else *ahead tells whether a resident program's next swap-out would be refused (next_out_short):
 * then an idle program's image may move first, so that the turn of the next one to want the GPU
 * does not wait for a spill (notebook_bench on the H100: two waits of 59-64 s, a spill of 20-24
 * GiB at ~1 GB/s ordered only once the swap was refused). */
static bool host_short(const struct daemon *d, char *why, size_t len, bool *ahead)
{
  double gib = 1u << 30;
  const struct program *big;
  *ahead = false;
  if (d->host_blocked)
    snprintf(why, len, "pid %ld cannot swap out for pid %ld (%.2f GiB available, %.2f GiB kept "
             "free)", (long)d->host_blocked, (long)d->host_blocked_for,
             (double)d->host_available / gib, (double)host_margin(d) / gib);
  else if (d->host_total && d->host_available < 2 * host_margin(d))
    snprintf(why, len, "host memory runs short (%.2f GiB available, under twice the %.2f GiB "
             "kept free)", (double)d->host_available / gib, (double)host_margin(d) / gib);
  else if ((big = next_out_short(d)) != NULL) {
    snprintf(why, len, "pid %ld's next swap-out (%.2f GiB) would leave the host short (%.2f GiB "
             "available, %.2f GiB kept free)", (long)big->pid,
             (double)sched_image_bytes(big) / gib, (double)d->host_available / gib,
             (double)host_margin(d) / gib);
    *ahead = true;
  } else
    return false;
  return true;
}

/* Nobody wants the device and it has room: bring back a swapped-out program that is idle, ahead
 * of its next call, so that the call finds its memory there (a job back from its host phase, a
 * notebook's next cell). The one expected back first goes: its idle phase's start plus the
 * length its last one (or its command's) had. Not an image on disk (reading it back is what the
 * disk tier weighs), nor one whose resume failed lately. It is marked `ahead`: until it calls the
 * GPU, whoever wants the room has it at once (may_preempt). */
static bool resume_ahead(struct daemon *d, double now)
{
  if (!d->config.resume_ahead || now - d->started < REJOIN_GRACE) return false;
  struct program *best = NULL;
  double best_back = 0;
  for (struct program *p = d->programs; p; p = p->next) {
    if (!p->joined || p->borrower || p->retired || p->leaving) continue;
    if (sched_wanting(p)) return false;
    if (p->state != SCHED_SWAPPED_OUT || !p->gpu_idle || p->on_disk || p->pending_op ||
        p->skip_until > now || !fits(d, p))
      continue;
    double back = p->gpu_idle_since + sched_idle_expected(d, p);
    if (!best || back < best_back) {
      best = p;
      best_back = back;
    }
  }
  if (!best) return false;
  if (d->config.verbose)
    fprintf(stderr, "cudawd: pid %ld: resumed ahead of its next call: the device has room and "
            "nobody waits\n", (long)best->pid);
  best->ahead = true;
  start_resume(d, best);
  return true;
}

/* A program that said it exits and is still here after --client-timeout (a bug, or one
 * keeping its turn so) is scheduled as any other again. */
static void expire_leaving(struct daemon *d, double now)
{
  for (struct program *p = d->programs; p; p = p->next) {
    if (!p->leaving || now - p->leaving_at < d->config.client_timeout) continue;
    p->leaving = false;
    sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: pid %ld said it exits %.0f s ago and is still "
                    "here: scheduled as any other\n", (long)p->pid, now - p->leaving_at);
  }
}

void sched_step(struct daemon *d)
{
  double now = sched_now();
  expire_leaving(d, now);
  check_transition(d, now);
  sched_spill_check(d, now);
  sched_exchange_check(d, now);
  /* What fits is granted even while a checkpoint or resume is under way: its program's memory
   * counts as resident until it answers, so nothing is granted twice; only the next swap waits. */
  grant_or_deny(d);
  if (d->exchange.active) return; /* an exchange holds the host's memory and both programs */
  if (d->transition) { /* one checkpoint or resume at a time; a read-back may run beside it */
    sched_spill_read_ahead(d, now);
    return;
  }
  read_host_memory(d, now);
  d->host_blocked = d->host_blocked_for = 0;

  /* A cudawd just started lets the programs of an earlier one re-join (they try every second)
   * before it resumes any: their memory is not in its books until then. */
  struct program *first = first_in_line(d);
  struct program *back = now - d->started >= REJOIN_GRACE ? next_wanting(d, now, true) : NULL;
  if (back && !behind(d, back, first)) {
    start_resume(d, back);
    return;
  }
  sched_spill_read_ahead(d, now); /* nothing resumes now: images on disk that wait may read */

  /* Make room for the first wanting program (in the order of `sched_before`) for which room can be
   * made: one that cannot be helped now (it needs nearly the whole device, and the memory
   * outside the books is in the way) must not hold up the others behind it. */
  struct program *order[SCHED_MAX_PROGRAMS];
  int count = 0;
  for (struct program *p = d->programs; p && count < SCHED_MAX_PROGRAMS; p = p->next)
    if (sched_wanting(p) && !never_fits(d, p) && p->pending_op != 3) order[count++] = p;
  struct program *victim = NULL;
  for (int tried = 0; tried < count && !victim; tried++) {
    int best = tried;
    for (int i = tried + 1; i < count; i++)
      if (sched_before(order[i], order[best])) best = i;
    struct program *head = order[best];
    order[best] = order[tried];
    order[tried] = head;
    if (behind(d, head, first)) continue; /* room made for it now would be taken from `first` */
    if (fits(d, head)) return; /* granted or resumed at the next step */
    bool waiting_too = !others_running(d, head);
    if (can_make_room(d, head, now, waiting_too, true))
      victim = choose_victim(d, head, now, waiting_too, true);
    else if (!d->host_blocked && can_make_room(d, head, now, waiting_too, false)) {
      char no_exchange[200];
      if (exchange(d, head, now, waiting_too, no_exchange, sizeof no_exchange)) return;
      note_host_short(d, head, now, waiting_too, no_exchange);
    }
  }
  if (!victim && !count && resume_ahead(d, now)) return;
  if (!victim) {
    char why[160];
    bool ahead;
    if (host_short(d, why, sizeof why, &ahead) &&
        sched_spill_coldest(d, count ? order[0] : NULL, now, why, ahead))
      return;
    probe(d, order, count, now, first);
    return;
  }
  d->host_blocked = d->host_blocked_for = 0;
  victim->host_refused = false;
  struct sched_msg checkpoint = {.version = SCHED_PROTO_VERSION, .type = SCHED_CHECKPOINT,
                                 .pid = victim->pid};
  sched_pool_lend(d, victim, &checkpoint); /* a range of the host-memory pool for its image */
  sched_send(victim, &checkpoint);
  victim->pending_op = 1;
  sched_set_state(d, victim, SCHED_SWAPPING_OUT);
  d->transition = victim;
}

/* What cudawd can still hand out on slot: the least of its capacity and what the device has once
 * the memory outside its books is counted. */
static uint64_t available(const struct daemon *d, int slot)
{
  const struct device *dev = &d->device[slot];
  uint64_t resident = sched_resident(d, slot);
  uint64_t left = dev->capacity > resident ? dev->capacity - resident : 0;
  uint64_t used = resident + dev->outside;
  if (dev->total && (used >= dev->total ? 0 : dev->total - used) < left)
    left = used >= dev->total ? 0 : dev->total - used;
  return left;
}

void sched_program_detail(const struct daemon *d, const struct program *p,
                          struct sched_program_detail *out)
{
  double now = sched_now();
  *out = (struct sched_program_detail){.last_grant_bytes = p->last_grant_bytes,
                                       .last_grant_ago = p->last_grant_at > 0
                                                             ? now - p->last_grant_at : -1,
                                       .retries = p->retries, .failed = p->failed};
  if (p->state == SCHED_SWAPPING_OUT) out->wait_reason = SCHED_WAIT_SWAPPING_OUT;
  else if (p->state == SCHED_SWAPPING_IN) out->wait_reason = SCHED_WAIT_SWAPPING_IN;
  if (out->wait_reason || !sched_wanting(p)) return;
  if (p->pending_op == 3) { /* its spill, beside the swaps: not in line until it answers */
    out->wait_reason = SCHED_WAIT_SPILLING;
    out->need_bytes = sched_image_bytes(p);
    return;
  }
  /* The device it waits on: its allocation's, or (swapped out) the first one it lacks room on. */
  int slot = p->wants ? p->want_slot : -1;
  for (int s = 0; slot < 0 && s < SCHED_MAX_DEVICES; s++)
    if (d->device[s].used && deficit(d, p, s)) slot = s;
  if (slot < 0) { /* it fits: it waits for the transition under way, or after a failed resume */
    for (int s = 0; slot < 0 && s < SCHED_MAX_DEVICES; s++)
      if (d->device[s].used && p->bytes[s]) slot = s;
    if (slot < 0) slot = 0;
  }
  const struct program *blocked = NULL;
  for (const struct program *q = d->programs; d->host_blocked_for == p->pid && q; q = q->next)
    if (q->joined && q->pid == d->host_blocked) blocked = q;
  if (blocked) {
    out->wait_reason = SCHED_WAIT_HOST_MEMORY;
    out->behind_pid = blocked->pid;
    out->need_bytes = sched_image_bytes(blocked);
    out->free_bytes = d->host_available;
    return;
  }
  out->wait_reason = SCHED_WAIT_MEMORY;
  out->need_bytes = extra(p, slot);
  out->free_bytes = d->device[slot].used ? available(d, slot) : 0;
  /* A checkpoint under way makes room (for it or for one ahead of it); a resume under way is
   * another program going first. */
  const struct program *ahead =
      d->transition && d->transition->state == SCHED_SWAPPING_IN ? d->transition : NULL;
  if (!ahead || ahead == p) {
    ahead = NULL;
    for (const struct program *q = d->programs; q; q = q->next)
      if (q != p && sched_wanting(q) && !never_fits(d, q) && q->pending_op != 3 &&
          sched_before(q, p) && (!ahead || sched_before(q, ahead)))
        ahead = q;
  }
  if (ahead) {
    out->wait_reason = SCHED_WAIT_QUEUED;
    out->behind_pid = ahead->pid;
  }
}
