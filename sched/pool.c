/* cudawd's host-memory pool: one memfd (hugetlb where the kernel has the huge pages), faulted in
 * by a thread of its own so that startup is not held up, and a first-fit allocator of 2 MiB
 * aligned ranges that cudawd lends to the programs it swaps out (see pool.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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
  const char *path = getenv("CUDAWD_MEMINFO");
  FILE *f = fopen(path && *path ? path : "/proc/meminfo", "re");
  if (!f) return 0;
  char line[128], name[64];
  unsigned long long kib;
  uint64_t result = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%63[^:]: %llu kB", name, &kib) == 2 && strcmp(name, key) == 0) {
      result = (uint64_t)kib << 10;
      break;
    }
  fclose(f);
  return result;
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

/* Workers fault the pool in, one FAULT_STEP at a time, taking the next step from a shared
 * counter: the kernel zeroes each page as it faults it, at a few GB/s a core, so one thread took
 * over a minute for a 63 GiB pool on the H100 machine (the first swaps came before it was
 * ready). */
struct populate_job {
  struct host_pool *pool;
  uint8_t *map;
  _Atomic uint64_t next;
};

#define POPULATE_THREADS 8

static void *populate_worker(void *arg)
{
  struct populate_job *job = arg;
  struct host_pool *pool = job->pool;
  bool touch = false;
  while (!atomic_load(&pool->stop)) {
    uint64_t at = atomic_fetch_add(&job->next, FAULT_STEP);
    if (at >= pool->size) break;
    size_t step = (size_t)(pool->size - at < FAULT_STEP ? pool->size - at : FAULT_STEP);
    if (touch || madvise(job->map + at, step, MADV_POPULATE_WRITE) != 0) {
      touch = true; /* an older kernel: write one byte per page */
      for (size_t i = 0; i < step; i += 4096) ((volatile uint8_t *)job->map + at)[i] = 0;
    }
    atomic_fetch_add(&pool->populated, step);
  }
  return NULL;
}

/* Fault every page of the pool in (the map is this thread's and its workers' own). */
static void *populate(void *arg)
{
  struct host_pool *pool = arg;
  uint8_t *map = mmap(NULL, (size_t)pool->size, PROT_READ | PROT_WRITE, MAP_SHARED, pool->fd, 0);
  if (map == MAP_FAILED) {
    fprintf(stderr, "cudawd: host-memory pool: cannot map it to fault it in: %s; the programs "
            "fault it in as they use it\n", strerror(errno));
    return NULL;
  }
  struct populate_job job = {.pool = pool, .map = map};
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int wanted = cores > POPULATE_THREADS ? POPULATE_THREADS : cores > 1 ? (int)cores : 1;
  pthread_t workers[POPULATE_THREADS];
  int started = 0;
  while (started + 1 < wanted &&
         pthread_create(&workers[started], NULL, populate_worker, &job) == 0)
    started++;
  populate_worker(&job);
  for (int i = 0; i < started; i++) pthread_join(workers[i], NULL);
  munmap(map, (size_t)pool->size); /* the pages stay in the file */
  if (!atomic_load(&pool->stop))
    fprintf(stderr, "cudawd: host-memory pool: %.2f GiB faulted in (%d threads)\n",
            (double)pool->size / (1u << 30), started + 1);
  return NULL;
}

/* A hugetlb file of `size`, or -errno: a mapping must get its huge pages reserved, which fails
 * at once when the kernel has too few (a fault would otherwise be a SIGBUS later). */
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
  pool->size = size;
  pool->thread_running = pthread_create(&pool->thread, NULL, populate, pool) == 0;
  if (!pool->thread_running)
    fprintf(stderr, "cudawd: host-memory pool: no thread to fault it in; the programs fault it "
            "in as they use it\n");
  return 0;
}

void pool_close(struct host_pool *pool)
{
  if (!pool->size) return;
  atomic_store(&pool->stop, true);
  if (pool->thread_running) pthread_join(pool->thread, NULL);
  close(pool->fd);
  pool->fd = -1;
  pool->size = 0;
}

/* The first gap of need bytes: its index among the loans (-1: none) and offset. */
static int find_gap(const struct host_pool *pool, uint64_t need, uint64_t *offset)
{
  uint64_t at = 0;
  for (int i = 0; i <= pool->count; i++) {
    uint64_t end = i < pool->count ? pool->loan[i].offset : pool->size;
    if (end >= at && end - at >= need) {
      *offset = at;
      return i;
    }
    if (i < pool->count) at = pool->loan[i].offset + pool->loan[i].length;
  }
  return -1;
}

bool pool_can_lend(const struct host_pool *pool, uint64_t bytes)
{
  uint64_t need = round_up(bytes), at;
  return pool->size && bytes && need >= bytes && pool->count < POOL_MAX_LOANS &&
         find_gap(pool, need, &at) >= 0;
}

int pool_lend(struct host_pool *pool, uint64_t bytes, struct pool_loan *out)
{
  if (!pool->size || !bytes || pool->count == POOL_MAX_LOANS) return -ENOSPC;
  uint64_t need = round_up(bytes);
  if (need < bytes) return -ENOSPC; /* wrapped */
  uint64_t at = 0;
  int i = find_gap(pool, need, &at);
  if (i < 0) return -ENOSPC;
  memmove(&pool->loan[i + 1], &pool->loan[i], (size_t)(pool->count - i) * sizeof pool->loan[0]);
  pool->loan[i] = (struct pool_loan){at, need};
  pool->count++;
  pool->lent += need;
  pool->loans_total++;
  *out = pool->loan[i];
  return 0;
}

void pool_return(struct host_pool *pool, uint64_t offset)
{
  for (int i = 0; i < pool->count; i++)
    if (pool->loan[i].offset == offset) {
      pool->lent -= pool->loan[i].length;
      memmove(&pool->loan[i], &pool->loan[i + 1],
              (size_t)(pool->count - i - 1) * sizeof pool->loan[0]);
      pool->count--;
      return;
    }
}

uint64_t pool_free_bytes(const struct host_pool *pool)
{
  return pool->size ? pool->size - pool->lent : 0;
}
