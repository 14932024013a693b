/* cudawd's exchanges (docs/sharing.md): when the program at the head of the queue (B, swapped
 * out, its image in host memory) needs the device that A holds and the host has no room for A's
 * image beside B's, both get their orders at once with one shared page (a memfd): A's checkpoint
 * gives its memory back piece by piece while B's resume creates its own and frees its image, so
 * that the host never holds more than one image plus the window and the device never more than
 * A's memory plus the spare. With B's image in the pool (a handover) A's image goes into a
 * range lent over B's, written only where B is done. The page alone paces them: cudawd's death
 * changes nothing. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon.h"
#include "exchange_page.h"

/* The window: how far A's image may run ahead of what B consumed. A few pieces, so that A's
 * copies and B's overlap; never more than the host has to spare. */
#define WINDOW_PIECES 4
/* Beyond a piece, the window must hold a chunk in flight (CUDAW_CKPT_STAGING, 4 MiB by default:
 * 16 MiB leaves room for a few, or for a larger staging buffer). */
#define CHUNK_SLACK (16ull << 20)

/* Seconds before a program whose side of an exchange failed may be swapped out again. */
#define EXCHANGE_RETRY 5.0

static bool member(const struct daemon *d, const struct program *p)
{
  return d->exchange.active && (d->exchange.out == p || d->exchange.in == p);
}

bool sched_exchange_member(const struct daemon *d, const struct program *p)
{
  return member(d, p);
}

/* An exchange whose incoming image lies in the pool (a handover): out is lent a range over in's
 * (pool_lend_over), and out's image goes there only where in is done. Progress needs the
 * free pool bytes ahead of in's range (out's run-ahead) and the device's spare together to
 * hold the window a private exchange would have: out's pieces go back only once written. */
static bool handover_ready(struct daemon *d, struct program *out, struct program *in,
                           uint64_t piece, uint64_t spare, struct pool_loan *in_loan,
                           uint64_t *run_ahead, char *why_not, size_t why_len)
{
  double mib = 1u << 20;
  *in_loan = in->loan;
  struct pool_loan range;
  if (!out->handover || !in->handover) {
    snprintf(why_not, why_len, "pid %ld's image lies in the pool and pid %ld cannot take a "
             "range over it (an older cudaw)", (long)in->pid,
             (long)(!out->handover ? out->pid : in->pid));
    return false;
  }
  if (sched_pool_handover(d, out, in, &range) != 0) {
    snprintf(why_not, why_len, "pid %ld's image (%.0f MiB) does not fit in the pool over pid "
             "%ld's range (%.0f MiB) and the free pool space next to it", (long)out->pid,
             (double)sched_image_bytes(out) / mib, (long)in->pid, (double)in_loan->length / mib);
    return false;
  }
  *run_ahead = in_loan->offset - range.offset;
  if (*run_ahead + spare >= piece * WINDOW_PIECES + CHUNK_SLACK) return true;
  sched_pool_handover_undo(d, out, in, *in_loan);
  snprintf(why_not, why_len, "the free pool space ahead of pid %ld's range (%.0f MiB) and the "
           "device's spare (%.0f MiB) hold less than the window", (long)in->pid,
           (double)*run_ahead / mib, (double)spare / mib);
  return false;
}

bool sched_exchange_order(struct daemon *d, struct program *out, struct program *in,
                          uint64_t host_room, uint64_t spare, char *why_not, size_t why_len)
{
  double mib = 1u << 20;
  snprintf(why_not, why_len, "pid %ld or pid %ld is busy", (long)out->pid, (long)in->pid);
  if (d->exchange.active) return false;
  if (!out->piece_bytes || !in->piece_bytes) {
    snprintf(why_not, why_len, "pid %ld's memory cannot move piece by piece (an exchange needs "
             "CUDAW_VMEM=remap and a cudaw that exchanges)",
             (long)(!out->piece_bytes ? out->pid : in->pid));
    return false;
  }
  /* B's image must lie in private host memory, which its resume frees as it goes, or in the
   * pool, where A's image takes its place (a handover); one in its own reserve is only counted
   * (its pages stay), one on disk is not in host memory at all. */
  if (in->on_disk || in->reserve_image_bytes) {
    snprintf(why_not, why_len, "pid %ld's image is %s", (long)in->pid,
             in->on_disk ? "on disk" : "in its own reserve, whose pages stay");
    return false;
  }
  if (in->state != SCHED_SWAPPED_OUT || in->pending_op || out->pending_op || out->loan.length ||
      out->leaving || in->leaving)
    return false;
  uint64_t piece = out->piece_bytes > in->piece_bytes ? out->piece_bytes : in->piece_bytes;
  bool handover = in->loan.length > 0;
  struct pool_loan in_loan = {0};
  uint64_t window, run_ahead = 0;
  if (handover) {
    /* The pool's pages are page-locked by every program that maps them: none goes back to the
     * kernel during an exchange, so A's image must go where B's was, never beside it. */
    if (!handover_ready(d, out, in, piece, spare, &in_loan, &run_ahead, why_not, why_len))
      return false;
    window = UINT64_MAX; /* no bound in bytes: the place of each chunk is (exchange_page.h) */
  } else {
    window = piece * WINDOW_PIECES + CHUNK_SLACK;
    if (window > host_room) window = host_room;
    /* Progress needs a whole piece and a chunk ahead (docs/sharing.md), and A's image must fit
     * once B's is gone. */
    if (window < piece + CHUNK_SLACK) {
      snprintf(why_not, why_len, "the host has %.0f MiB to spare, less than a piece and a chunk "
               "(%.0f MiB)", (double)host_room / mib, (double)(piece + CHUNK_SLACK) / mib);
      return false;
    }
    /* Each side moves whole pieces: A gives a piece back only once all of it is written, and B
     * makes one only where the spare and what A gave back hold all of it. Where the window and
     * the spare together hold less than a piece of each and a chunk, A can wait for B to consume
     * while B waits for A's piece: both would wait for ever. */
    if (window + spare < 2 * piece + CHUNK_SLACK) {
      snprintf(why_not, why_len, "the window (%.0f MiB) and the device's spare (%.0f MiB) hold "
               "less than a piece of each program and a chunk (%.0f MiB)", (double)window / mib,
               (double)spare / mib, (double)(2 * piece + CHUNK_SLACK) / mib);
      return false;
    }
    if (sched_image_bytes(out) > host_room + sched_image_bytes(in)) {
      snprintf(why_not, why_len, "pid %ld's image (%.0f MiB) would not fit even once pid %ld's "
               "is gone", (long)out->pid, (double)sched_image_bytes(out) / mib, (long)in->pid);
      return false;
    }
  }
  int fd = -1;
  int rc = exchange_page_create(out->pid, in->pid, window, spare, &fd);
  struct exchange_page *page = NULL;
  if (rc == 0) rc = exchange_page_map(fd, &page);
  if (rc) {
    fprintf(stderr, "cudawd: cannot create an exchange's page: %s; swapping the old way\n",
            strerror(-rc));
    if (fd >= 0) close(fd);
    if (handover) sched_pool_handover_undo(d, out, in, in_loan);
    return false;
  }
  if (handover) { /* before the orders: the page is all the programs go by */
    page->handover = 1;
    page->in_from = in_loan.offset;
    page->in_end = in_loan.offset + in_loan.length;
    atomic_store(&page->needed_from, in_loan.offset);
  }
  struct sched_msg go_out = {.version = SCHED_PROTO_VERSION, .type = SCHED_EXCHANGE,
                             .pid = out->pid, .value = 1, .held = out->loan.offset,
                             .bytes = out->loan.length};
  struct sched_msg come_in = {.version = SCHED_PROTO_VERSION, .type = SCHED_EXCHANGE,
                              .pid = in->pid, .value = 2};
  /* B first: if A cannot be told, B's side is ended on the page, so that B goes on alone (its
   * creations then fail cleanly where the device is full, and it stays paused with its data). */
  int sent_in = sched_send_fd(in, &come_in, fd);
  int sent_out = sent_in == 0 ? sched_send_fd(out, &go_out, fd) : -EIO;
  close(fd); /* the programs hold it now; cudawd keeps its mapping for the figures */
  if (sent_in || sent_out) {
    fprintf(stderr, "cudawd: sending the exchange of pid %ld and pid %ld failed: %s\n",
            (long)out->pid, (long)in->pid, strerror(-(sent_in ? sent_in : sent_out)));
    if (handover) sched_pool_handover_undo(d, out, in, in_loan); /* A writes nothing there */
    if (sent_in == 0) {
      atomic_store(&page->out_done, 1);
      in->pending_op = 2;
      sched_set_state(d, in, SCHED_SWAPPING_IN);
      d->transition = in; /* its answer is a resume's */
    }
    exchange_page_unmap(page);
    return sent_in == 0;
  }
  out->pending_op = 1;
  in->pending_op = 2;
  out->host_refused = false;
  sched_set_state(d, out, SCHED_SWAPPING_OUT);
  sched_set_state(d, in, SCHED_SWAPPING_IN);
  d->exchange = (struct exchange_state){.active = true, .out = out, .in = in,
                                        .out_pid = out->pid, .in_pid = in->pid,
                                        .page = page, .window = window, .spare = spare,
                                        .handover = handover, .run_ahead = run_ahead,
                                        .started = sched_now(),
                                        .out_bytes = sched_image_bytes(out),
                                        .in_bytes = sched_image_bytes(in)};
  if (handover)
    fprintf(stderr, "cudawd: exchanging pid %ld (out, %.2f GiB) and pid %ld (in, %.2f GiB): the "
            "host has %.2f GiB to spare, not enough for both images; handover in the host-memory "
            "pool: pid %ld's image goes into range %llu+%llu over pid %ld's (%.0f MiB ahead of "
            "it), spare %.0f MiB\n", (long)out->pid, (double)d->exchange.out_bytes / (1u << 30),
            (long)in->pid, (double)d->exchange.in_bytes / (1u << 30),
            (double)host_room / (1u << 30), (long)out->pid,
            (unsigned long long)out->loan.offset, (unsigned long long)out->loan.length,
            (long)in->pid, (double)run_ahead / (1u << 20), (double)spare / (1u << 20));
  else
    fprintf(stderr, "cudawd: exchanging pid %ld (out, %.2f GiB) and pid %ld (in, %.2f GiB): the "
            "host has %.2f GiB to spare, not enough for both images; window %.0f MiB, spare "
            "%.0f MiB\n", (long)out->pid, (double)d->exchange.out_bytes / (1u << 30),
            (long)in->pid, (double)d->exchange.in_bytes / (1u << 30),
            (double)host_room / (1u << 30), (double)window / (1u << 20),
            (double)spare / (1u << 20));
  return true;
}

/* How one side ended, for the exchange's line. */
static const char *side_outcome(int status, bool left, const char *success)
{
  if (!status) return success;
  return left ? "exiting: its order came as it went" : strerror(-status);
}

/* Both sides answered (or are gone): one line, the counts, the page unmapped. */
static void finish(struct daemon *d)
{
  struct exchange_state *x = &d->exchange;
  double seconds = sched_now() - x->started;
  uint64_t peak = atomic_load(&x->page->peak_ahead);
  uint64_t written = atomic_load(&x->page->written), consumed = atomic_load(&x->page->consumed);
  /* A side whose program exits (it said so before answering, or left without a word after
   * saying so) did not fail: the order reached it as it went. Nor did the other side if it then
   * stopped (the page said the exiting side moved nothing; its resume is tried again). Neither
   * is an exchange. */
  bool cut_short = (x->out_status && x->out_left) || (x->in_status && x->in_left);
  bool ok = cut_short || (x->out_status == 0 && x->in_status == 0);
  if (ok && !cut_short) {
    d->exchanges++;
    d->exchanged_out_bytes += written;
    d->exchanged_in_bytes += consumed;
  } else if (!ok) {
    d->exchange_failures++;
  }
  if (peak > d->exchange_peak_bytes) d->exchange_peak_bytes = peak;
  d->exchange_last_seconds = seconds;
  /* A handover is how an idle program's swap in the pool now runs: its time, both images moving
   * at once, is what such a swap costs (schedule.c, swap_cost). Until one is seen, a swap in the
   * pool is costed at the last plain one's rates, which a first swap into pages not yet faulted
   * in made 2-3x too dear on the H100 for the rest of a run of handovers. */
  if (ok && !cut_short && x->handover && written + consumed >= SCHED_RATE_MIN_BYTES &&
      seconds > 0)
    d->rate_out[1] = d->rate_in[1] = (double)(written + consumed) / seconds;
  char window[64];
  if (x->handover) /* A's image went into pool pages B was done with: no extra host memory */
    snprintf(window, sizeof window, "handover in the host-memory pool");
  else
    snprintf(window, sizeof window, "window %.1f MiB", (double)x->window / (1u << 20));
  fprintf(stderr, "cudawd: exchange %s: pid %ld out %.3f GiB (%s), pid %ld in %.3f GiB (%s) in "
          "%.3f s; peak extra host memory %.1f MiB (%s)\n",
          !ok ? "FAILED" : cut_short ? "cut short" : "done", (long)x->out_pid,
          (double)written / (1u << 30), side_outcome(x->out_status, x->out_left, "swapped out"),
          (long)x->in_pid, (double)consumed / (1u << 30),
          side_outcome(x->in_status, x->in_left, "resumed"), seconds, (double)peak / (1u << 20),
          window);
  exchange_page_unmap(x->page);
  *x = (struct exchange_state){0};
}

static void answered(struct daemon *d, const struct program *p, int status)
{
  struct exchange_state *x = &d->exchange;
  /* B resumed: nothing of its image is left in A's range. */
  if (x->handover && x->in == p && status == 0)
    for (struct program *q = d->programs; q; q = q->next)
      if (q->loan_heir == p->pid) q->loan_heir = 0;
  if (x->out == p) {
    /* sched_done skipped a side whose checkpoint failed for a quantum; an exchange's failure
     * says little about the next one (a window not page-locked yet, the other side's failure),
     * and for a quantum the program would keep the GPU through its idle phases (H100,
     * share_bench host: 20 s). It may be tried again after EXCHANGE_RETRY. */
    if (status && status != -ESRCH) x->out->skip_until = sched_now() + EXCHANGE_RETRY;
    x->out = NULL;
    x->out_status = status;
    x->out_left = p->leaving;
  } else {
    x->in = NULL;
    x->in_status = status;
    x->in_left = p->leaving;
  }
  if (!x->out && !x->in) finish(d);
}

void sched_exchange_done(struct daemon *d, const struct program *p, int status)
{
  if (member(d, p)) answered(d, p, status);
}

void sched_exchange_gone(struct daemon *d, const struct program *p)
{
  if (member(d, p)) answered(d, p, -ESRCH);
}

void sched_exchange_check(struct daemon *d, double now)
{
  struct exchange_state *x = &d->exchange;
  double limit = d->config.swap_timeout;
  if (!x->active || !(limit > 0) || now - x->started < limit) return;
  /* The programs go on by the page alone; a late answer still lands (pending_op stays). */
  fprintf(stderr, "cudawd: the exchange of pid %ld and pid %ld took over %.0f s: scheduling the "
          "others\n", (long)x->out_pid, (long)x->in_pid, limit);
  if (x->out) answered(d, x->out, -ETIMEDOUT);
  if (x->active && x->in) answered(d, x->in, -ETIMEDOUT);
}

void sched_exchange_info(const struct daemon *d, struct sched_exchange_info *out)
{
  *out = (struct sched_exchange_info){.exchanges = d->exchanges,
                                      .failures = d->exchange_failures,
                                      .out_bytes = d->exchanged_out_bytes,
                                      .in_bytes = d->exchanged_in_bytes,
                                      .peak_extra_bytes = d->exchange_peak_bytes,
                                      .last_seconds = d->exchange_last_seconds,
                                      .active = d->exchange.active};
}
