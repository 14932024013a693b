/* cudawd's exchanges (docs/sharing.md): when the program at the head of the queue (B, swapped
 * out, its image in host memory) needs the device that A holds and the host has no room for A's
 * image beside B's, both get their orders at once with one shared page (a memfd): A's checkpoint
 * gives its memory back piece by piece while B's resume creates its own and frees its image, so
 * that the host never holds more than one image plus the window and the device never more than
 * A's memory plus the spare. The page alone paces them: cudawd's death changes nothing. */
#define _GNU_SOURCE
#include <errno.h>
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

static bool member(const struct daemon *d, const struct program *p)
{
  return d->exchange.active && (d->exchange.out == p || d->exchange.in == p);
}

bool sched_exchange_member(const struct daemon *d, const struct program *p)
{
  return member(d, p);
}

bool sched_exchange_order(struct daemon *d, struct program *out, struct program *in,
                          uint64_t host_room, uint64_t spare)
{
  if (d->exchange.active || !out->piece_bytes || !in->piece_bytes) return false;
  /* B's image must lie in private host memory, which its resume frees as it goes: one in the
   * pool or in its own reserve is only counted (their pages stay), one on disk is not in host
   * memory at all. */
  if (in->state != SCHED_SWAPPED_OUT || in->on_disk || in->loan.length ||
      in->reserve_image_bytes || in->pending_op || out->pending_op || out->loan.length)
    return false;
  uint64_t piece = out->piece_bytes > in->piece_bytes ? out->piece_bytes : in->piece_bytes;
  uint64_t window = piece * WINDOW_PIECES + CHUNK_SLACK;
  if (window > host_room) window = host_room;
  /* Progress needs a whole piece and a chunk ahead (docs/sharing.md), and A's image must fit
   * once B's is gone. */
  if (window < piece + CHUNK_SLACK || sched_image_bytes(out) > host_room + sched_image_bytes(in))
    return false;
  int fd = -1;
  int rc = exchange_page_create(out->pid, in->pid, window, spare, &fd);
  struct exchange_page *page = NULL;
  if (rc == 0) rc = exchange_page_map(fd, &page);
  if (rc) {
    fprintf(stderr, "cudawd: cannot create an exchange's page: %s; swapping the old way\n",
            strerror(-rc));
    if (fd >= 0) close(fd);
    return false;
  }
  struct sched_msg go_out = {.version = SCHED_PROTO_VERSION, .type = SCHED_EXCHANGE,
                             .pid = out->pid, .value = 1};
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
                                        .started = sched_now(),
                                        .out_bytes = sched_image_bytes(out),
                                        .in_bytes = sched_image_bytes(in)};
  fprintf(stderr, "cudawd: exchanging pid %ld (out, %.2f GiB) and pid %ld (in, %.2f GiB): the "
          "host has %.2f GiB to spare, not enough for both images; window %.0f MiB, spare "
          "%.0f MiB\n", (long)out->pid, (double)d->exchange.out_bytes / (1u << 30),
          (long)in->pid, (double)d->exchange.in_bytes / (1u << 30),
          (double)host_room / (1u << 30), (double)window / (1u << 20),
          (double)spare / (1u << 20));
  return true;
}

/* Both sides answered (or are gone): one line, the counts, the page unmapped. */
static void finish(struct daemon *d)
{
  struct exchange_state *x = &d->exchange;
  double seconds = sched_now() - x->started;
  uint64_t peak = atomic_load(&x->page->peak_ahead);
  uint64_t written = atomic_load(&x->page->written), consumed = atomic_load(&x->page->consumed);
  bool ok = x->out_status == 0 && x->in_status == 0;
  if (ok) {
    d->exchanges++;
    d->exchanged_out_bytes += written;
    d->exchanged_in_bytes += consumed;
  } else {
    d->exchange_failures++;
  }
  if (peak > d->exchange_peak_bytes) d->exchange_peak_bytes = peak;
  d->exchange_last_seconds = seconds;
  fprintf(stderr, "cudawd: exchange %s: pid %ld out %.3f GiB (%s), pid %ld in %.3f GiB (%s) in "
          "%.3f s; peak extra host memory %.1f MiB (window %.1f MiB)\n", ok ? "done" : "FAILED",
          (long)x->out_pid, (double)written / (1u << 30),
          x->out_status ? strerror(-x->out_status) : "swapped out", (long)x->in_pid,
          (double)consumed / (1u << 30), x->in_status ? strerror(-x->in_status) : "resumed",
          seconds, (double)peak / (1u << 20), (double)x->window / (1u << 20));
  exchange_page_unmap(x->page);
  *x = (struct exchange_state){0};
}

static void answered(struct daemon *d, const struct program *p, int status)
{
  struct exchange_state *x = &d->exchange;
  if (x->out == p) {
    x->out = NULL;
    x->out_status = status;
  } else {
    x->in = NULL;
    x->in_status = status;
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
