/* cudawd lends ranges of its host-memory pool (pool.c) to the programs it swaps out: the pool's
 * descriptor goes to each program with the window it may map (again when that window no longer
 * serves it); a checkpoint order carries the range for the image; the range comes back when the
 * program's resume is done, when its checkpoint fails, or when it leaves. The window follows
 * demand: it grows ahead of the swaps as programs join and grow, and shrinks (memory given back
 * to the kernel) once it has been larger than needed for --pool-release seconds. Only programs
 * of cudawd's own user get the pool: with --system the images of one user must not be readable
 * by another. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon.h"

/* Send the pool's descriptor with the window to p: it maps [0, window) and registers it, the
 * last window replacing the one before. Until it says it mapped this one, it is lent nothing past
 * it (what it had past it may be given back to the kernel under it). */
static void send_window(struct daemon *d, struct program *p)
{
  p->pool_sent = true;
  if (p->uid != geteuid()) {
    if (d->config.verbose)
      fprintf(stderr, "cudawd: pid %ld (uid %u): not given the host-memory pool (only uid %u's "
              "programs share it)\n", (long)p->pid, (unsigned)p->uid, (unsigned)geteuid());
    return;
  }
  p->pool_window = d->pool.window;
  p->pool_cramped = false;
  if (p->pool_acked > d->pool.window) p->pool_acked = d->pool.window;
  struct sched_msg msg = {.version = SCHED_PROTO_VERSION, .type = SCHED_POOL, .pid = p->pid,
                          .value = d->pool.huge, .bytes = d->pool.window};
  int rc = sched_send_fd(p, &msg, d->pool.fd);
  if (rc)
    sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: pid %ld: sending the host-memory pool failed: "
                    "%s\n", (long)p->pid, strerror(-rc));
}

int sched_send_fd(struct program *p, const struct sched_msg *msg, int fd)
{
  struct iovec iov = {(void *)msg, sizeof *msg};
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
  memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  return sendmsg(p->fd, &hdr, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof *msg ? 0 : -errno;
}

static bool pool_peer(const struct program *p)
{
  return p->joined && !p->retired && p->fd >= 0;
}

/* A margin over the resident bytes (a borrower's: what it said its image takes): each image
 * region starts on a page. */
static uint64_t image_estimate(const struct program *p)
{
  uint64_t bytes = p->borrower ? p->borrow_bytes : 0;
  for (int s = 0; s < SCHED_MAX_DEVICES; s++) bytes += p->bytes[s];
  return bytes ? bytes + bytes / 64 + (16ull << 20) : 0;
}

/* Whether p must be sent the current window: it has none, its window shrank under it, its own
 * image no longer fits in it, or a checkpoint of it found no room in it that the whole window
 * had, or when it grows a window in place (a larger one costs it only the new part). Else it
 * keeps the window it has page-locked: an older program registers each window whole, from the
 * start, so a new one would leave it nothing page-locked for a while, and its first swap-out
 * comes exactly when a new program makes the window grow. */
static bool needs_window(const struct daemon *d, const struct program *p)
{
  uint64_t own = (image_estimate(p) + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
  return !p->pool_window || p->pool_window > d->pool.window ||
         (p->pool_window < d->pool.window &&
          (p->pool_window < own || p->pool_cramped || p->pool_grows));
}

void sched_pool_offer(struct daemon *d, struct program *p)
{
  if (!d->pool.size || !d->pool.window || !pool_peer(p)) return;
  if (p->uid != geteuid() ? !p->pool_sent : needs_window(d, p)) send_window(d, p);
}

void sched_pool_mapped(struct daemon *d, struct program *p, bool mapped, uint64_t bytes,
                       bool grows)
{
  p->pool_grows = mapped && grows;
  /* 0: a program that does not say which window; it answers the one sent last. */
  if (!bytes) bytes = p->pool_window;
  if (mapped && bytes == p->pool_window && bytes <= d->pool.window) p->pool_acked = bytes;
}

bool sched_pool_would_lend(const struct daemon *d, const struct program *p)
{
  return d->pool.size && p->pool_acked && !p->loan.length &&
         pool_can_lend(&d->pool, image_estimate(p), p->pool_acked);
}

void sched_pool_lend(struct daemon *d, struct program *p, struct sched_msg *msg)
{
  msg->bytes = msg->held = 0;
  if (!d->pool.size || !p->pool_acked) return;
  if (p->loan.length) sched_pool_take_back(d, p, "a new checkpoint"); /* never two at once */
  uint64_t want = image_estimate(p);
  if (!want) return;
  if (pool_lend(&d->pool, want, p->pool_acked, &p->loan) != 0) {
    d->pool.fallbacks++;
    p->pool_cramped = pool_can_lend(&d->pool, want, d->pool.window); /* next time: the whole */
    p->loan = (struct pool_loan){0};
    fprintf(stderr, "cudawd: pid %ld: no room in the host-memory pool for its %.3f GiB image "
            "(%.3f GiB lent of %.3f GiB offered, %.3f GiB mapped by it; %.3f GiB at most): it "
            "checkpoints into memory of its own\n", (long)p->pid, (double)want / (1u << 30),
            (double)d->pool.lent / (1u << 30), (double)d->pool.window / (1u << 30),
            (double)p->pool_acked / (1u << 30), (double)d->pool.size / (1u << 30));
    return;
  }
  msg->held = p->loan.offset;
  msg->bytes = p->loan.length;
  if (d->config.verbose)
    fprintf(stderr, "cudawd: pid %ld: lent pool range %llu+%llu\n", (long)p->pid,
            (unsigned long long)p->loan.offset, (unsigned long long)p->loan.length);
}

/* The program p's range goes to when taken back: its heir, while that one's image may still
 * lie in it (swapped out or coming in, with no range of its own). */
static struct program *heir_of(struct daemon *d, struct program *p)
{
  for (struct program *q = d->programs; p->loan_heir && q; q = q->next)
    if (q != p && q->pid == p->loan_heir && q->joined && !q->loan.length &&
        (q->state == SCHED_SWAPPED_OUT || q->state == SCHED_SWAPPING_IN))
      return q;
  return NULL;
}

void sched_pool_take_back(struct daemon *d, struct program *p, const char *why)
{
  if (!p->loan.length) return;
  struct program *heir = heir_of(d, p);
  p->loan_heir = 0;
  if (heir) {
    heir->loan = p->loan;
    p->loan = (struct pool_loan){0};
    fprintf(stderr, "cudawd: pid %ld: pool range %llu+%llu goes to pid %ld (%s), whose image "
            "still lies in it\n", (long)p->pid, (unsigned long long)heir->loan.offset,
            (unsigned long long)heir->loan.length, (long)heir->pid, why);
    return;
  }
  pool_return(&d->pool, p->loan.offset);
  if (d->config.verbose)
    fprintf(stderr, "cudawd: pid %ld: pool range %llu+%llu back (%s)\n", (long)p->pid,
            (unsigned long long)p->loan.offset, (unsigned long long)p->loan.length, why);
  p->loan = (struct pool_loan){0};
}

int sched_pool_handover(struct daemon *d, struct program *out, struct program *in,
                        struct pool_loan *range)
{
  if (!d->pool.size || !out->pool_acked || out->loan.length || !in->loan.length) return -ENOENT;
  int rc = pool_lend_over(&d->pool, image_estimate(out), out->pool_acked, in->loan.offset, range);
  /* out mapped an older, smaller window (the first program's covers its own image only), and in's
   * range lies past it: send out the whole window, or every handover to in's range fails the
   * same way (H100, share_bench host: a 45 GiB program kept the GPU idle for 20 s). */
  if (rc == -ENOSPC && out->pool_acked < d->pool.window) out->pool_cramped = true;
  if (rc) return rc;
  out->loan = *range;
  out->loan_heir = in->pid;
  in->loan = (struct pool_loan){0};
  return 0;
}

bool sched_pool_could_hand_over(const struct daemon *d, const struct program *out,
                                const struct program *in)
{
  return d->pool.size && out->pool_acked && !out->loan.length && in->loan.length &&
         out->handover && in->handover && image_estimate(out) <= out->pool_acked;
}

void sched_pool_handover_undo(struct daemon *d, struct program *out, struct program *in,
                              struct pool_loan in_loan)
{
  pool_undo_over(&d->pool, out->loan.offset, in_loan);
  out->loan = (struct pool_loan){0};
  out->loan_heir = 0;
  in->loan = in_loan;
}

/* What the pool is for now: the images of this user's programs (a program alone too, so that
 * its first swap-out, when a second one comes, finds its range page-locked), and the ranges
 * lent. Rounded up to an eighth of itself (at most 1 GiB, at least 2 MiB). A program that holds a
 * window keeps 2 MiB of it at least: a window of 0 cannot be sent, and a smaller one makes it
 * let go of the rest. */
static uint64_t pool_target(const struct daemon *d)
{
  uint64_t images = 0;
  bool holders = false;
  for (const struct program *p = d->programs; p; p = p->next) {
    if (!pool_peer(p) || p->uid != geteuid()) continue;
    images += image_estimate(p);
    holders |= p->pool_window > 0;
  }
  uint64_t want = images, lent = pool_loans_end(&d->pool);
  if (want < lent) want = lent;
  if (!want && holders) want = POOL_ALIGN;
  uint64_t step = want / 8 < (1ull << 30) ? want / 8 : (1ull << 30);
  step = step < POOL_ALIGN ? POOL_ALIGN : step / POOL_ALIGN * POOL_ALIGN;
  want = (want + step - 1) / step * step;
  return want < d->pool.size ? want : d->pool.size;
}

static void offer_all(struct daemon *d)
{
  for (struct program *p = d->programs; p; p = p->next) sched_pool_offer(d, p);
}

/* Grow or shrink the window towards what the programs need (see sched_pool_follow). */
static void follow_demand(struct daemon *d)
{
  struct host_pool *pool = &d->pool;
  uint64_t target = pool_target(d), old = pool->window;
  double now = sched_now(), gib = 1u << 30;
  if (target > old) {
    /* A program registers each window it is sent whole, from the start (checkpoint/reserve.c):
     * the window at least doubles, so that a program growing allocation by allocation (PyTorch's
     * caching allocator) makes every program page-lock the pool again a few times, not at each.
     * What it overshoots is given back after --pool-release like any window larger than
     * needed. */
    d->pool_shrink_since = 0;
    if (target < old * 2) target = old * 2 < pool->size ? old * 2 : pool->size;
    /* Beside the other cudawds' windows, under the ledger's lock (not waited for: the next
     * step tries again), the claim written before anything is faulted in. */
    char why[256];
    if (ledger_lock(why, sizeof why, 0) != 0) return;
    struct pool_ledger_view others;
    ledger_read(&others, host_meminfo("MemTotal"));
    uint64_t wanted = target;
    target = pool_window_allowed(d->config.host_memory_set, pool->size, old, pool_resident(pool),
                                 target, &others);
    int rc = target > old ? pool_set_window(pool, target) : 0;
    if (!rc && target > old) ledger_set_claim(pool->window, pool_resident(pool));
    ledger_unlock();
    if (target < wanted && !d->pool_short_said) {
      d->pool_short_said = true;
      fprintf(stderr, "cudawd: host-memory pool: %.2f GiB offered, not the %.2f GiB the images "
              "need: the host's budget for pools (%s) is taken%s\n", (double)target / gib,
              (double)wanted / gib, d->config.host_memory_set ? "RAM, and what is available"
              : "50%% of RAM, and 8 GiB kept available",
              others.others ? " with other cudawds' pools" : "");
    } else if (target >= wanted) {
      d->pool_short_said = false;
    }
    if (rc) {
      sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: host-memory pool: cannot grow it to %.2f GiB: "
                      "%s\n", (double)target / gib, strerror(-rc));
      return;
    }
    if (target == old) return;
    if (d->config.verbose)
      fprintf(stderr, "cudawd: host-memory pool: %.2f GiB offered (was %.2f), faulting it in in "
              "the background\n", (double)pool->window / gib, (double)old / gib);
    return;
  }
  if (target == old) {
    d->pool_shrink_since = 0;
    return;
  }
  if (!d->pool_shrink_since) d->pool_shrink_since = now;
  if (now - d->pool_shrink_since < d->config.pool_release) return;
  uint64_t released = pool->released;
  int rc = pool_set_window(pool, target);
  d->pool_shrink_since = 0; /* a failure is tried again after the same delay */
  if (!rc) ledger_set_claim(pool->window, pool_resident(pool));
  if (rc) {
    fprintf(stderr, "cudawd: host-memory pool: cannot give %.2f GiB back to the kernel: %s\n",
            (double)(old - target) / gib, strerror(-rc));
    return;
  }
  fprintf(stderr, "cudawd: host-memory pool: unused for %.0f s: %.2f GiB offered (was %.2f), "
          "%.2f GiB given back to the kernel\n", d->config.pool_release,
          (double)pool->window / gib, (double)old / gib,
          (double)(pool->released - released) / gib);
}

/* ---- borrowers: programs not under sharing with a standing loan ---------------------------- */

bool sched_pool_borrower_join(struct daemon *d, struct program *p)
{
  p->borrower = true;
  p->state = SCHED_RUNNING;
  bool pool = d->pool.size && p->uid == geteuid();
  struct sched_msg answer = {.version = SCHED_PROTO_VERSION, .type = SCHED_REPLY, .pid = p->pid,
                             .status = pool ? 0 : -EOPNOTSUPP};
  sched_send(p, &answer);
  if (!pool) {
    sched_log_noisy(SCHED_NOISE_REFUSED, "cudawd: pid %ld (uid %u) asked to borrow the "
                    "host-memory pool: %s\n", (long)p->pid, (unsigned)p->uid, d->pool.size
                    ? "it is lent only to this cudawd's own user's programs" : "there is none");
    return false;
  }
  p->loan_wanted = true;
  sched_log_noisy(SCHED_NOISE_JOINED, "cudawd: pid %ld (uid %u) borrows the host-memory pool\n",
                  (long)p->pid, (unsigned)p->uid);
  sched_pool_offer(d, p);
  return true;
}

static void send_loan(struct program *p, int status)
{
  struct sched_msg msg = {.version = SCHED_PROTO_VERSION, .type = SCHED_LOAN, .pid = p->pid,
                          .status = status, .held = p->loan.offset, .bytes = p->loan.length};
  sched_send(p, &msg);
}

void sched_pool_borrow(struct daemon *d, struct program *p, uint64_t bytes, bool give_back)
{
  /* Its word, like a sharing program's usage: an image larger than the pool never fits anyway,
   * and no figure may make the window's arithmetic wrap. */
  p->borrow_bytes = bytes < d->pool.size ? bytes : d->pool.size;
  if (give_back && p->loan.length) {
    sched_pool_take_back(d, p, "its image outgrew it");
    p->loan_wanted = true;
    p->loan_refused = false;
  }
}

/* A standing loan for each borrower that wants one, once it mapped a window and holds memory:
 * first fit below what it mapped. A pool without room says so once per want; the borrower's
 * own reserve then takes its images until a loan comes (the window may grow meanwhile). */
static void lend_standing(struct daemon *d)
{
  for (struct program *p = d->programs; p; p = p->next) {
    if (!p->borrower || !pool_peer(p) || !p->loan_wanted || !p->pool_acked || !p->borrow_bytes)
      continue;
    uint64_t want = image_estimate(p);
    if (pool_lend(&d->pool, want, p->pool_acked, &p->loan) == 0) {
      p->loan_wanted = p->loan_refused = false;
      send_loan(p, 0);
      if (d->config.verbose)
        fprintf(stderr, "cudawd: pid %ld (borrower): lent pool range %llu+%llu\n", (long)p->pid,
                (unsigned long long)p->loan.offset, (unsigned long long)p->loan.length);
      continue;
    }
    p->loan = (struct pool_loan){0};
    /* Room in a window it has not mapped yet (sent again where needs_window says so), or a
     * window still growing towards the images: the loan comes then, no refusal meanwhile. */
    if (pool_can_lend(&d->pool, want, d->pool.window)) {
      p->pool_cramped = true;
      continue;
    }
    if (pool_target(d) > d->pool.window && !d->pool_short_said) continue;
    if (p->loan_refused) continue;
    p->loan_refused = true;
    send_loan(p, -ENOSPC);
    sched_log_noisy(SCHED_NOISE_IGNORED, "cudawd: pid %ld (borrower): no room in the "
                    "host-memory pool for its %.3f GiB image (%.3f GiB lent of %.3f GiB offered, "
                    "%.3f GiB mapped by it): it uses its own reserve\n", (long)p->pid,
                    (double)want / (1u << 30), (double)d->pool.lent / (1u << 30),
                    (double)d->pool.window / (1u << 30), (double)p->pool_acked / (1u << 30));
  }
}

void sched_pool_borrowers(const struct daemon *d, struct sched_snapshot *out)
{
  for (const struct program *p = d->programs; p && out->borrowers < SCHED_MAX_PROGRAMS;
       p = p->next)
    if (p->borrower && p->joined && !p->retired)
      out->borrower[out->borrowers++] = (struct sched_borrower_info){
          .pid = p->pid, .uid = p->uid, .bytes = p->borrow_bytes, .loan_offset = p->loan.offset,
          .lent = p->loan.length};
}

/* Unpinning runs at about this rate in the driver (bench_exit_pinned on the H100: 94 GiB in
 * 1.8-2.1 s), and a program's idle phase must be expected to outlast it, so that the page-locking
 * is given back while the program makes no CUDA call, and not churned in a program's short pauses
 * (a PyTorch job's start, whose first swap-out may come as a second job arrives). */
#define UNPIN_RATE 50e9
#define ALONE_MIN_IDLE 1.0

/* Whether p's idle phase now is, or is expected to be, long enough to give back its pool's
 * page-locking inside it. */
static bool idle_long_enough(const struct daemon *d, const struct program *p)
{
  double needed = (double)p->pool_acked / UNPIN_RATE;
  if (needed < ALONE_MIN_IDLE) needed = ALONE_MIN_IDLE;
  double expected = sched_idle_expected(d, p), so_far = sched_now() - p->gpu_idle_since;
  return (expected > so_far ? expected : so_far) >= needed;
}

/* The one program scheduled (others only leaving, or borrowers, which page-lock their own
 * ranges), once idle on the GPU for a phase that outlasts the unpinning: no swap needs its
 * page-locking of the pool, and at its exit the driver unpins all of it first (94 GiB: 2 s on
 * the H100, the end of every shared run). It is told to give it back in the background; it
 * stays so while alone, computing again or not, and is told to page-lock again once another
 * program joins. */
static void tell_alone(struct daemon *d)
{
  int scheduled = 0;
  for (const struct program *p = d->programs; p; p = p->next)
    scheduled += pool_peer(p) && !p->borrower && !p->leaving;
  for (struct program *p = d->programs; p; p = p->next) {
    /* One leaving is told nothing more: page-locking again would only delay its exit. */
    if (!pool_peer(p) || p->borrower || p->leaving || !p->pool_acked || p->uid != geteuid())
      continue;
    bool alone = scheduled == 1 && (p->pool_alone || (p->gpu_idle && p->state == SCHED_RUNNING &&
                                                      idle_long_enough(d, p)));
    if (alone == p->pool_alone) continue;
    struct sched_msg msg = {.version = SCHED_PROTO_VERSION, .type = SCHED_POOL_ALONE,
                            .pid = p->pid, .value = alone};
    if (sched_send(p, &msg) != 0) continue;
    p->pool_alone = alone;
    if (d->config.verbose)
      fprintf(stderr, "cudawd: pid %ld %s\n", (long)p->pid, alone ? "is the only program "
              "scheduled and idle: it gives back its page-locking of the pool" : "is no longer "
              "alone: it page-locks the pool again");
  }
}

void sched_pool_follow(struct daemon *d)
{
  if (!d->pool.size) return;
  pool_tick(&d->pool);
  follow_demand(d);
  offer_all(d); /* the programs whose window no longer serves them (needs_window) */
  lend_standing(d);
  tell_alone(d);
}

void sched_pool_info(const struct daemon *d, struct sched_pool_info *out)
{
  memset(out, 0, sizeof *out);
  out->other_pools = d->pool_others.others;
  out->other_bytes = d->pool_others.size;
  const struct host_pool *pool = &d->pool;
  if (!pool->size) return;
  out->holder_pid = (int32_t)getpid();
  out->resident = pool_resident(pool);
  out->enabled = 1;
  out->huge_pages = pool->huge;
  out->loans = pool->count;
  out->size = pool->size;
  out->lent = pool->lent;
  out->free = pool_free_bytes(pool);
  out->populated = out->resident;
  out->loans_total = pool->loans_total;
  out->placed_bytes = pool->placed_bytes;
  out->fallbacks = pool->fallbacks;
}
