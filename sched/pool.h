/* cudawd's host-memory pool (--host-memory): one shared-memory file, faulted in ahead of time as
 * far as demand asks (the window) and given back when unused, whose ranges cudawd lends to the
 * programs it swaps out so that their checkpoint images go into memory that is ready (no fresh
 * pages to fault and zero). Single-threaded like the rest of cudawd, except the faulting thread,
 * which only touches pages. */
#ifndef CUDAW_SCHED_POOL_H
#define CUDAW_SCHED_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "sched_proto.h"

#define POOL_ALIGN (2ull << 20) /* ranges start and end on 2 MiB (a huge page) */
#define POOL_MAX_LOANS (SCHED_MAX_PROGRAMS)

struct pool_loan {
  uint64_t offset, length;
};

struct fault_job;

struct host_pool {
  int fd;                 /* the memfd */
  uint64_t size;          /* the memfd's size, the most the pool grows to (0: there is no pool) */
  uint64_t window;        /* [0, window) is offered to the programs and faulted in; grown with
                           * demand, shrunk (and the rest given back to the kernel) when unused */
  bool huge;              /* MFD_HUGETLB: huge pages reserved for it */
  _Atomic uint64_t populated; /* faulted in by cudawd so far (progress; pool_resident: truth) */
  _Atomic bool stop;
  _Atomic bool thread_done;
  bool thread_running;
  pthread_t thread;
  struct fault_job *job;
  struct pool_loan loan[POOL_MAX_LOANS]; /* sorted by offset; count entries used */
  int count;
  uint64_t lent;
  uint64_t loans_total;   /* ranges lent since start */
  uint64_t placed_bytes;  /* image bytes the programs said they put in the pool */
  uint64_t fallbacks;     /* checkpoints ordered without a loan: the pool had no room */
  uint64_t released;      /* bytes given back to the kernel since start */
};

/* A field of /proc/meminfo in bytes ("MemTotal"), 0 when unknown. CUDAWD_MEMINFO names another
 * file (tests). */
uint64_t host_meminfo(const char *key);
/* --host-memory: "off"/"0" -> 0; a size (K/M/G/T); N% of MemTotal. 0 or -EINVAL. */
int pool_parse_size(const char *text, uint64_t *out);

/* The other cudawds' pools on this host, from the host-wide ledger (ledger.c). */
struct pool_ledger_view {
  int others;
  uint64_t size;         /* their pools in all */
  uint64_t unpopulated;  /* what they have yet to fault in (not yet out of MemAvailable) */
};

/* The pool's size on this host beside the others' pools. requested 0 (with explicit false): the
 * default, the least of 50% of MemTotal less the others' pools and MemAvailable - 8 GiB less
 * what they have yet to fault in, never below 0. An explicit size is refused (-E2BIG, the reason
 * in why) when it is more than MemTotal, or than MemAvailable less what the others have yet to
 * fault in: it could never be faulted in. 0 with *out. */
int pool_size_for_host(bool explicit_size, uint64_t requested,
                       const struct pool_ledger_view *others, uint64_t *out, char *why,
                       size_t why_len);

/* The window a pool of `size` may grow to, at most `want`, beside the others' claims: the
 * default (explicit false) keeps to 50% of MemTotal less their claims and leaves 8 GiB of
 * MemAvailable less what they have yet to fault in; an explicit --host-memory to MemTotal less
 * their claims and to what is available. `resident`: what this pool holds already (out of
 * MemAvailable). At least `current` (a window never shrinks here). */
uint64_t pool_window_allowed(bool explicit_size, uint64_t size, uint64_t current,
                             uint64_t resident, uint64_t want,
                             const struct pool_ledger_view *others);

/* ledger.c. Under the lock (at most wait_ms to get it), read the others' entries, choose,
 * claim. */
int ledger_lock(char *why, size_t why_len, int wait_ms);
void ledger_unlock(void);
/* The live cudawds' entries but ours (entries of dead ones are removed where we may); no entry
 * counts for more than total (MemTotal; 0: unknown). view->size: their claims (windows). */
void ledger_read(struct pool_ledger_view *view, uint64_t total);
/* Our entry, claiming `size`, none faulted in yet. 0 or -errno. */
int ledger_claim(uint64_t size);
/* Claim another window (a larger one under the lock), `populated` of it faulted in. */
void ledger_set_claim(uint64_t claim, uint64_t populated);
/* Keep our entry's faulted-in figure current (at most once a second): the pages the kernel holds
 * for the pool, which falls again when the pool gives memory back. */
void ledger_tick(const struct host_pool *pool);
/* Remove our entry (at exit). */
void ledger_release(void);

/* Create the pool of `size` bytes (rounded up to POOL_ALIGN): a hugetlb memfd where the kernel
 * has huge pages for it, else a plain one. Nothing is faulted in and the window is 0 until
 * pool_set_window. 0, or -errno with `why`. */
int pool_open(struct host_pool *pool, uint64_t size, char *why, size_t why_len);
/* What pages the pool gets, in words for cudawd's log: huge pages, or shared memory in the pages
 * the kernel's transparent_hugepage/shmem_enabled allows (and what would give it larger ones). */
const char *pool_pages_said(const struct host_pool *pool, char *buf, size_t len);
void pool_close(struct host_pool *pool);
/* Offer [0, window) (rounded up to POOL_ALIGN, at most the size). Growing starts faulting the new
 * part in, in the background (-errno, window unchanged: a hugetlb file got no huge pages for
 * it). Shrinking stops that and gives everything past the new window back to the kernel
 * (FALLOC_FL_PUNCH_HOLE): the caller makes sure no loan lies there. */
int pool_set_window(struct host_pool *pool, uint64_t window);
/* Once per loop: reap the faulting thread when it is done. */
void pool_tick(struct host_pool *pool);
/* Bytes of the pool the kernel holds pages for now (the memfd's blocks): whoever faulted them. */
uint64_t pool_resident(const struct host_pool *pool);

/* First fit: a range of at least `bytes` (rounded up to POOL_ALIGN) below the window and below
 * `limit` (what the borrower has mapped). 0 with *out, or -ENOSPC. */
int pool_lend(struct host_pool *pool, uint64_t bytes, uint64_t limit, struct pool_loan *out);
/* An exchange's handover: lend a range of at least `bytes` as pool_lend does, as if the range
 * lent at `over` were free, starting at or before it and covering it to its end; the loan at
 * `over` is gone then (its borrower still reads it: the caller paces the two). -ENOENT: no loan
 * at `over`; -EEXIST: a range not overlapping it was free (lend plainly); -ENOSPC. The loans
 * are unchanged on error. */
int pool_lend_over(struct host_pool *pool, uint64_t bytes, uint64_t limit, uint64_t over,
                   struct pool_loan *out);
/* Undo pool_lend_over: the range lent at `offset` goes, `old` is lent again. */
void pool_undo_over(struct host_pool *pool, uint64_t offset, struct pool_loan old);
/* Whether pool_lend(bytes, limit) would find a range now. */
bool pool_can_lend(const struct host_pool *pool, uint64_t bytes, uint64_t limit);
/* Take back the range lent at `offset` (no-op if none). */
void pool_return(struct host_pool *pool, uint64_t offset);
uint64_t pool_free_bytes(const struct host_pool *pool);
/* The end of the last range lent (0: none): the window never shrinks below it. */
uint64_t pool_loans_end(const struct host_pool *pool);

#endif
