/* cudawd's host-memory pool: one memfd (hugetlb where the kernel has the huge pages), sized at
 * start and faulted in only up to the window that demand asks for (by a thread of its own, so
 * that the loop is not held up), given back to the kernel when the window shrinks; and a
 * first-fit allocator of 2 MiB aligned ranges inside the window that cudawd lends to the programs
 * it swaps out (see pool.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "pool.h"
#include "vmem.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 4U
#endif

#define FAULT_STEP (64ull << 20)

uint64_t host_meminfo(const char *key)
{
  uint64_t bytes = ckpt_meminfo_at(getenv("CUDAWD_MEMINFO"), key);
  return bytes == UINT64_MAX ? 0 : bytes;
}

static uint64_t round_up(uint64_t n) { return (n + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN; }

#define DEFAULT_KEEP_FREE (8ull << 30)

static uint64_t less(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

int pool_size_for_host(bool explicit_size, uint64_t requested,
                       const struct pool_ledger_view *others, uint64_t *out, char *why,
                       size_t why_len)
{
  uint64_t total = host_meminfo("MemTotal"), available = host_meminfo("MemAvailable");
  uint64_t room = less(available, others->unpopulated); /* what is truly left to fault in */
  const double gib = 1u << 30;
  if (!explicit_size) {
    uint64_t budget = less(total / 2, others->size), spare = less(room, DEFAULT_KEEP_FREE);
    *out = (budget < spare ? budget : spare) / POOL_ALIGN * POOL_ALIGN;
    return 0;
  }
  if (total && requested > total) {
    snprintf(why, why_len, "%.2f GiB is more than this machine's memory (%.2f GiB)",
             (double)requested / gib, (double)total / gib);
    return -E2BIG;
  }
  if (available && requested > room) {
    if (others->others)
      snprintf(why, why_len, "%.2f GiB cannot be faulted in: %.2f GiB of host memory is "
               "available, and %d other cudawd pool%s still to fault in %.2f GiB of it",
               (double)requested / gib, (double)available / gib, others->others,
               others->others == 1 ? " has" : "s have", (double)others->unpopulated / gib);
    else
      snprintf(why, why_len, "%.2f GiB cannot be faulted in: only %.2f GiB of host memory is "
               "available", (double)requested / gib, (double)available / gib);
    return -E2BIG;
  }
  *out = requested;
  return 0;
}

uint64_t pool_window_allowed(bool explicit_size, uint64_t size, uint64_t current,
                             uint64_t resident, uint64_t want,
                             const struct pool_ledger_view *others)
{
  uint64_t total = host_meminfo("MemTotal"), available = host_meminfo("MemAvailable");
  uint64_t budget = !total ? size : less(explicit_size ? total : total / 2, others->size);
  uint64_t room = less(available, others->unpopulated);
  if (!explicit_size) room = less(room, DEFAULT_KEEP_FREE);
  uint64_t allowed = want;
  if (allowed > size) allowed = size;
  if (allowed > budget) allowed = budget;
  if (available && allowed > resident + room) allowed = resident + room;
  allowed = allowed / POOL_ALIGN * POOL_ALIGN;
  return allowed > current ? allowed : current;
}

int pool_parse_size(const char *text, uint64_t *out)
{
  size_t n = strlen(text);
  if (!strcmp(text, "off") || !strcmp(text, "0")) {
    *out = 0;
    return 0;
  }
  if (n > 1 && text[n - 1] == '%') {
    char *end;
    double percent = strtod(text, &end);
    if (end != text + n - 1 || !(percent >= 0) || percent > 100) return -EINVAL;
    *out = (uint64_t)((double)host_meminfo("MemTotal") * percent / 100) / POOL_ALIGN * POOL_ALIGN;
    return 0;
  }
  return vmem_parse_size(text, 0, out) == 0 ? 0 : -EINVAL;
}

/* Workers fault a range of the pool in, one FAULT_STEP at a time, taking the next step from a
 * shared counter: the kernel zeroes each page as it faults it, at a few GB/s a core, so one
 * thread took over a minute for a 63 GiB pool on the H100 machine. */
struct fault_job {
  struct host_pool *pool;
  uint8_t *map;          /* [from, to) of the file, this job's own mapping */
  uint64_t from, to;
  _Atomic uint64_t next; /* offset from `from` */
};

#define POPULATE_THREADS 8

static void *fault_worker(void *arg)
{
  struct fault_job *job = arg;
  uint64_t length = job->to - job->from;
  while (!atomic_load(&job->pool->stop)) {
    uint64_t at = atomic_fetch_add(&job->next, FAULT_STEP);
    if (at >= length) break;
    size_t step = (size_t)(length - at < FAULT_STEP ? length - at : FAULT_STEP);
    /* No touching fallback: a page of a hugetlb file the kernel cannot give is a SIGBUS. */
    if (madvise(job->map + at, step, MADV_POPULATE_WRITE) != 0) break;
    atomic_fetch_add(&job->pool->populated, step);
  }
  return NULL;
}

/* The kernel's word on transparent huge pages for shared memory (the bracketed one of
 * /sys/kernel/mm/transparent_hugepage/shmem_enabled; CUDAWD_SHMEM_THP names another file in
 * tests), or "" when unknown. */
static void shmem_thp_setting(char *out, size_t len)
{
  const char *path = getenv("CUDAWD_SHMEM_THP");
  FILE *f = fopen(path && *path ? path : "/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
  char line[256] = "";
  if (f) {
    if (!fgets(line, sizeof line, f)) line[0] = '\0';
    fclose(f);
  }
  const char *open = strchr(line, '['), *close = open ? strchr(open, ']') : NULL;
  size_t n = open && close ? (size_t)(close - open - 1) : 0;
  if (n >= len) n = len - 1;
  memcpy(out, open ? open + 1 : "", n);
  out[n] = '\0';
}

const char *pool_pages_said(const struct host_pool *pool, char *buf, size_t len)
{
  if (pool->huge) return "huge pages";
  char thp[32];
  shmem_thp_setting(thp, sizeof thp);
  if (!strcmp(thp, "never") || !strcmp(thp, "deny"))
    snprintf(buf, len, "plain shared memory in 4 KiB pages (transparent_hugepage/shmem_enabled "
             "is %s; advise gives the pool 2 MiB pages, into which a swap-out not page-locked "
             "yet copies at the link's speed, not at 3-15 GB/s: docs/sharing.md)", thp);
  else if (thp[0])
    snprintf(buf, len, "shared memory in 2 MiB pages where the kernel has them "
             "(transparent_hugepage/shmem_enabled is %s)", thp);
  else
    snprintf(buf, len, "plain shared memory");
  return buf;
}

static void *fault_range(void *arg)
{
  struct fault_job *job = arg;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int wanted = cores > POPULATE_THREADS ? POPULATE_THREADS : cores > 1 ? (int)cores : 1;
  pthread_t workers[POPULATE_THREADS];
  int started = 0;
  while (started + 1 < wanted && pthread_create(&workers[started], NULL, fault_worker, job) == 0)
    started++;
  fault_worker(job);
  for (int i = 0; i < started; i++) pthread_join(workers[i], NULL);
  munmap(job->map, (size_t)(job->to - job->from)); /* the pages stay in the file */
  atomic_store(&job->pool->thread_done, true);
  return NULL;
}

/* Wait for the faulting thread (asked to stop first when stop is set). */
static void join_fault(struct host_pool *pool, bool stop)
{
  if (!pool->thread_running) return;
  if (stop) atomic_store(&pool->stop, true);
  pthread_join(pool->thread, NULL);
  pool->thread_running = false;
  atomic_store(&pool->stop, false);
  free(pool->job);
  pool->job = NULL;
}

/* Start faulting [from, to) in; the map also reserves a hugetlb file's huge pages for the range
 * (refused at once when the kernel has too few: a fault would be a SIGBUS later). */
static int start_fault(struct host_pool *pool, uint64_t from, uint64_t to)
{
  struct fault_job *job = calloc(1, sizeof *job);
  if (!job) return -ENOMEM;
  job->map = mmap(NULL, (size_t)(to - from), PROT_READ | PROT_WRITE, MAP_SHARED, pool->fd,
                  (off_t)from);
  if (job->map == MAP_FAILED) {
    int rc = -errno;
    free(job);
    return rc;
  }
  /* 2 MiB pages where shmem_enabled is advise (512 times fewer faults, and pages that the
   * programs page-lock whole); nothing where the kernel gives shared memory none. */
  if (!pool->huge) madvise(job->map, (size_t)(to - from), MADV_HUGEPAGE);
  job->pool = pool;
  job->from = from;
  job->to = to;
  pool->job = job;
  atomic_store(&pool->thread_done, false);
  pool->thread_running = pthread_create(&pool->thread, NULL, fault_range, job) == 0;
  if (!pool->thread_running) { /* the programs fault it in as they register it */
    munmap(job->map, (size_t)(to - from));
    free(job);
    pool->job = NULL;
  }
  return 0;
}

/* A hugetlb file of `size`, or -errno: huge pages are set aside by the administrator (they are
 * not in MemAvailable either way); a map reserves them for the file, which fails at once when the
 * kernel has too few (a fault would otherwise be a SIGBUS later). */
static int open_huge(uint64_t size)
{
  int fd = memfd_create("cudawd-pool", MFD_CLOEXEC | MFD_HUGETLB);
  if (fd < 0) return -errno;
  void *probe = MAP_FAILED;
  if (ftruncate(fd, (off_t)size) == 0)
    probe = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (probe == MAP_FAILED) {
    int rc = -errno;
    close(fd);
    return rc;
  }
  munmap(probe, (size_t)size); /* the reservation stays with the file */
  return fd;
}

int pool_open(struct host_pool *pool, uint64_t size, char *why, size_t why_len)
{
  memset(pool, 0, sizeof *pool);
  pool->fd = -1;
  size = round_up(size);
  if (!size) return 0;
  int fd = open_huge(size);
  pool->huge = fd >= 0;
  if (fd < 0) {
    fd = memfd_create("cudawd-pool", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
      int rc = -errno;
      snprintf(why, why_len, "cannot create a shared-memory file of %llu bytes: %s",
               (unsigned long long)size, strerror(-rc));
      if (fd >= 0) close(fd);
      return rc;
    }
  }
  pool->fd = fd;
  pool->size = size; /* sized, nothing faulted in: pool_set_window does as demand comes */
  return 0;
}

void pool_close(struct host_pool *pool)
{
  if (!pool->size) return;
  join_fault(pool, true);
  close(pool->fd);
  pool->fd = -1;
  pool->size = pool->window = 0;
}

void pool_tick(struct host_pool *pool)
{
  if (pool->thread_running && atomic_load(&pool->thread_done)) join_fault(pool, false);
}

int pool_set_window(struct host_pool *pool, uint64_t window)
{
  window = round_up(window);
  if (window > pool->size) window = pool->size;
  if (window == pool->window) return 0;
  if (window > pool->window) {
    /* One faulting job at a time, without waiting for it here (the loop would stall for
     * seconds): the last one stops after its step, and the new one covers what it had left (the
     * pages already there cost little to fault again). A hugetlb file must have the huge pages
     * for the range before anyone faults it in: start_fault's map reserves them. */
    uint64_t from = pool->thread_running && pool->job ? pool->job->from : pool->window;
    join_fault(pool, true);
    int rc = start_fault(pool, from, window);
    if (rc && pool->huge) return rc;
    pool->window = window;
    return 0;
  }
  join_fault(pool, true); /* no worker may fault a page in beyond the window after the punch */
  uint64_t resident_before = pool_resident(pool);
  if (fallocate(pool->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)window,
                (off_t)(pool->size - window)) != 0)
    return -errno;
  uint64_t resident = pool_resident(pool);
  pool->released += resident_before > resident ? resident_before - resident : 0;
  pool->window = window;
  atomic_store(&pool->populated, resident);
  return 0;
}

uint64_t pool_resident(const struct host_pool *pool)
{
  struct stat st; /* pages the kernel holds for the memfd, faulted in by anyone */
  return pool->size && fstat(pool->fd, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
}

/* The first gap of need bytes below limit: its index among the loans (-1: none) and offset. */
static int find_gap(const struct host_pool *pool, uint64_t need, uint64_t limit, uint64_t *offset)
{
  uint64_t at = 0;
  for (int i = 0; i <= pool->count; i++) {
    uint64_t end = i < pool->count ? pool->loan[i].offset : limit;
    if (end > limit) end = limit;
    if (end >= at && end - at >= need) {
      *offset = at;
      return i;
    }
    if (i < pool->count) at = pool->loan[i].offset + pool->loan[i].length;
  }
  return -1;
}

static uint64_t lend_limit(const struct host_pool *pool, uint64_t limit)
{
  return limit < pool->window ? limit : pool->window;
}

bool pool_can_lend(const struct host_pool *pool, uint64_t bytes, uint64_t limit)
{
  uint64_t need = round_up(bytes), at;
  return pool->size && bytes && need >= bytes && pool->count < POOL_MAX_LOANS &&
         find_gap(pool, need, lend_limit(pool, limit), &at) >= 0;
}

/* Record loan at index i (the loans stay sorted by offset). */
static void insert_loan(struct host_pool *pool, int i, struct pool_loan loan)
{
  memmove(&pool->loan[i + 1], &pool->loan[i], (size_t)(pool->count - i) * sizeof pool->loan[0]);
  pool->loan[i] = loan;
  pool->count++;
  pool->lent += loan.length;
}

/* Remove the loan at `offset`: its index, or -1 when there is none. */
static int remove_loan(struct host_pool *pool, uint64_t offset, struct pool_loan *removed)
{
  for (int i = 0; i < pool->count; i++)
    if (pool->loan[i].offset == offset) {
      *removed = pool->loan[i];
      pool->lent -= pool->loan[i].length;
      memmove(&pool->loan[i], &pool->loan[i + 1],
              (size_t)(pool->count - i - 1) * sizeof pool->loan[0]);
      pool->count--;
      return i;
    }
  return -1;
}

int pool_lend(struct host_pool *pool, uint64_t bytes, uint64_t limit, struct pool_loan *out)
{
  if (!pool->size || !bytes || pool->count == POOL_MAX_LOANS) return -ENOSPC;
  uint64_t need = round_up(bytes);
  if (need < bytes) return -ENOSPC; /* wrapped */
  uint64_t at = 0;
  int i = find_gap(pool, need, lend_limit(pool, limit), &at);
  if (i < 0) return -ENOSPC;
  insert_loan(pool, i, (struct pool_loan){at, need});
  pool->loans_total++;
  *out = pool->loan[i];
  return 0;
}

int pool_lend_over(struct host_pool *pool, uint64_t bytes, uint64_t limit, uint64_t over,
                   struct pool_loan *out)
{
  struct pool_loan old;
  if (pool_can_lend(pool, bytes, limit)) return -EEXIST; /* room without it: lend plainly */
  int was = remove_loan(pool, over, &old);
  if (was < 0) return -ENOENT;
  uint64_t need = round_up(bytes), at = 0, cap = lend_limit(pool, limit);
  int i = !bytes || need < bytes ? -1 : find_gap(pool, need, cap, &at);
  int rc = i < 0 ? -ENOSPC : 0;
  /* The first fit lies in the gap the old range leaves: it contains the old range whole. */
  if (rc == 0 && (at >= old.offset + old.length || at + need <= old.offset)) rc = -EEXIST;
  if (rc == 0) {
    /* Cover the old range to its end: its borrower reads all of it until done, and a range free
     * in the books could be lent or given back to the kernel meanwhile. */
    uint64_t gap_end = i < pool->count && pool->loan[i].offset < cap ? pool->loan[i].offset : cap;
    if (old.offset + old.length - at > need) need = old.offset + old.length - at;
    if (at + need > gap_end) rc = -ENOSPC;
  }
  if (rc) {
    insert_loan(pool, was, old); /* the loans are as they were without it */
    return rc;
  }
  insert_loan(pool, i, (struct pool_loan){at, need});
  pool->loans_total++;
  *out = pool->loan[i];
  return 0;
}

void pool_undo_over(struct host_pool *pool, uint64_t offset, struct pool_loan old)
{
  struct pool_loan removed;
  if (remove_loan(pool, offset, &removed) < 0) return;
  pool->loans_total--;
  int i = 0;
  while (i < pool->count && pool->loan[i].offset < old.offset) i++;
  insert_loan(pool, i, old);
}

void pool_return(struct host_pool *pool, uint64_t offset)
{
  struct pool_loan removed;
  remove_loan(pool, offset, &removed);
}

uint64_t pool_free_bytes(const struct host_pool *pool)
{
  return pool->size ? pool->size - pool->lent : 0;
}

uint64_t pool_loans_end(const struct host_pool *pool)
{
  return pool->count ? pool->loan[pool->count - 1].offset + pool->loan[pool->count - 1].length : 0;
}
