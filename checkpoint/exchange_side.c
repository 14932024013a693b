/* One program's side of an exchange: its copy's pace from the shared page (exchange_page.h).
 * The program going out writes its image only up to what the other consumed plus the window;
 * the one coming in creates device memory only up to what the other released plus the spare.
 * A side whose peer died or finished goes on without a limit: a dead process's memory goes back
 * to the kernel and the driver, and a finished one's is where it will stay. A side whose peer
 * failed stops: the peer's memory stays the peer's. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "exchange_page.h"
#include "internal.h"

int exchange_page_create(pid_t out_pid, pid_t in_pid, uint64_t window, uint64_t spare, int *fd) {
  int memfd = memfd_create("cudaw-exchange", MFD_CLOEXEC);
  if (memfd < 0) return -errno;
  void *p = ftruncate(memfd, 4096) == 0
                ? mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0)
                : MAP_FAILED;
  if (p == MAP_FAILED) {
    int rc = -errno;
    close(memfd);
    return rc;
  }
  struct exchange_page *page = p;
  *page = (struct exchange_page){.magic = EXCHANGE_PAGE_MAGIC, .version = EXCHANGE_PAGE_VERSION,
                                 .out_pid = out_pid, .in_pid = in_pid,
                                 .window = window, .spare = spare};
  munmap(page, 4096);
  *fd = memfd;
  return 0;
}

int exchange_page_map(int fd, struct exchange_page **out) {
  struct stat st;
  if (fstat(fd, &st) != 0) return -errno;
  if (st.st_size < 4096) return -EINVAL;
  void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return -errno;
  struct exchange_page *page = p;
  if (page->magic != EXCHANGE_PAGE_MAGIC || page->version != EXCHANGE_PAGE_VERSION) {
    munmap(p, 4096);
    return -EINVAL;
  }
  *out = page;
  return 0;
}

void exchange_page_unmap(struct exchange_page *page) {
  if (page) munmap(page, 4096);
}

/* Whether the peer's process still lives (a pidfd turns readable when the process exits, zombie
 * or not; kill(pid, 0) where pidfds are missing). */
static bool peer_alive(const struct exchange_side *side) {
  const struct exchange_page *page = side->page;
  if (side->peer_pidfd >= 0) {
    struct pollfd p = {.fd = side->peer_pidfd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
  }
  pid_t peer = side->out ? page->in_pid : page->out_pid;
  return kill(peer, 0) == 0 || errno == EPERM;
}

/* Whether the peer still runs its copy: not finished, and its process alive. */
static bool peer_going(const struct exchange_side *side) {
  const struct exchange_page *page = side->page;
  if (atomic_load(side->out ? &page->in_done : &page->out_done)) return false;
  return peer_alive(side);
}

/* A handover's place for A's chunk: below what B still needs, or past B's range. B finished
 * (failed midway: the rest of its image stays where it is, needed for its next resume) is no
 * licence to write there, only B's death is; a chunk that would have to go there fails the
 * checkpoint (it stays paused with what its image holds), as does one outside the pool (a
 * range too small for the image), which would make the image private memory beside B's in the
 * pool. A chunk in a part of the range not page-locked yet is staged there. */
static int side_place(void *arg, uint64_t pool_at, uint64_t n) {
  struct exchange_side *side = arg;
  const struct exchange_page *page = side->page;
  if (!page->handover) return 0;
  if (pool_at == UINT64_MAX || pool_at + n < pool_at) return -ENOSPC;
  if (pool_at >= page->in_end || pool_at + n <= atomic_load(&page->needed_from)) return 0;
  if (!peer_alive(side)) return 0; /* its pool pages are no one's now */
  if (atomic_load(&page->in_done)) return -ENOSPC;
  return -EAGAIN;
}

static void side_needed(void *arg, uint64_t pool_from) {
  struct exchange_side *side = arg;
  struct exchange_page *page = side->page;
  uint64_t now = atomic_load(&page->needed_from); /* only grows: a late caller's value is older */
  while (pool_from > now && !atomic_compare_exchange_weak(&page->needed_from, &now, pool_from)) {
  }
}

static uint64_t side_limit(void *arg, bool *final) {
  struct exchange_side *side = arg;
  if (side->delay_ns) { /* tests: a copy slow enough to be interrupted midway */
    struct timespec pause = {(time_t)(side->delay_ns / 1000000000u), (long)(side->delay_ns % 1000000000u)};
    nanosleep(&pause, NULL);
  }
  const struct exchange_page *page = side->page;
  if (!peer_alive(side)) return UINT64_MAX;
  if (atomic_load(side->out ? &page->in_done : &page->out_done)) {
    if (!atomic_load(side->out ? &page->in_failed : &page->out_failed)) return UINT64_MAX;
    *final = true; /* stop at the next step: nothing the peer holds will come free */
    return 0;
  }
  uint64_t base = side->out ? atomic_load(&page->consumed) : atomic_load(&page->released);
  uint64_t ahead = side->out ? page->window : page->spare;
  return base + ahead < base ? UINT64_MAX : base + ahead;
}

static void side_progress(void *arg, uint64_t bytes) {
  struct exchange_side *side = arg;
  atomic_store(side->out ? &side->page->released : &side->page->consumed, bytes);
}

static void side_moved(void *arg, uint64_t bytes) {
  struct exchange_side *side = arg;
  struct exchange_page *page = side->page;
  atomic_store(side->out ? &page->written : &page->created, bytes);
  if (!side->out || page->handover) return; /* a handover's image goes into pool memory */
  uint64_t consumed = atomic_load(&page->consumed);
  uint64_t ahead = bytes > consumed ? bytes - consumed : 0, peak = atomic_load(&page->peak_ahead);
  while (ahead > peak && !atomic_compare_exchange_weak(&page->peak_ahead, &peak, ahead)) {
  }
}

int exchange_side_open(struct exchange_side *side, struct exchange_page *page, bool out) {
  pid_t self = getpid(), me = out ? page->out_pid : page->in_pid;
  if (me != self) return -EPERM; /* the orders were meant for another program */
  *side = (struct exchange_side){.page = page, .out = out, .peer_pidfd = -1};
  /* -1 where pidfds are missing or the peer is gone already: kill() answers then */
  side->peer_pidfd = (int)syscall(SYS_pidfd_open, out ? page->in_pid : page->out_pid, 0);
  if (side->peer_pidfd < 0) side->peer_pidfd = -1;
  return 0;
}

void exchange_side_pace(struct exchange_side *side, struct engine_pace *pace) {
  *pace = (struct engine_pace){side_limit, side_progress, side, side_moved,
                               side->out ? side_place : NULL, side->out ? NULL : side_needed};
}

void exchange_side_close(struct exchange_side *side, bool failed) {
  if (!side->page) return;
  if (failed) atomic_store(side->out ? &side->page->out_failed : &side->page->in_failed, 1);
  atomic_store(side->out ? &side->page->out_done : &side->page->in_done, 1);
}

void exchange_side_refuse(struct exchange_page *page, bool out) {
  if ((out ? page->out_pid : page->in_pid) != getpid()) return; /* not ours to end */
  atomic_store(out ? &page->out_failed : &page->in_failed, 1);
  atomic_store(out ? &page->out_done : &page->in_done, 1);
}

int exchange_side_wait_peer(struct exchange_side *side, int timeout_ms) {
  for (int waited = 0; side->page && peer_going(side); waited++) {
    if (waited >= timeout_ms) return -ETIMEDOUT;
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
  }
  if (side->peer_pidfd >= 0) close(side->peer_pidfd);
  side->peer_pidfd = -1;
  return 0;
}
