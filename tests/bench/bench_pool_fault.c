/* Description: how fast this host gives cudawd's host-memory pool its pages (a memfd of plain
 * shared memory, or of huge pages where the administrator set them aside). cudawd faults its
 * pool in ahead of the images (sched/pool.c) with MADV_POPULATE_WRITE through a mapping of its
 * own; the programs then page-lock the same pages. The alternative measured here is fallocate on
 * the file, which gives the file its pages without mapping them; the programs' mappings then find
 * them in the page cache (shmem leaves a new page's zeroing to its first fault, so "map after"
 * pays that part: compare populate with fallocate and map after together). For each of 1, 2,
 * 4, ... THREADS threads, on a fresh file each time:
 *   populate   MADV_POPULATE_WRITE through a shared mapping (cudawd today)
 *   fallocate  fallocate(fd, 0, ...) on 64 MiB steps
 *   map after  MADV_POPULATE_WRITE through a new mapping of the fallocated file (what a program's
 *              page-locking finds)
 *   files      populate as above, each thread on a file of its own (GiB / threads each): whether
 *              one file's locks, not the cores, bound the fill
 * GB/s, and populate's time against fallocate's and map after's together at the same thread
 * count (above 1x: the file's pages come sooner by fallocate). CPU only: no GPU needed.
 * With thp, every mapping asks for transparent huge pages (MADV_HUGEPAGE, as cudawd and the
 * programs do): 2 MiB pages where shmem_enabled is advise; the kernel's ShmemHugePages after the
 * first fill says whether it gave any.
 *   usage: bench_pool_fault [GiB (4)] [THREADS (8)] [huge|thp]   huge: MFD_HUGETLB */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define POPULATE_STEP (8ull << 20)  /* as sched/pool.c */
#define FALLOCATE_STEP (64ull << 20)

static struct {
  int fd;
  uint8_t *map;
  uint64_t length, step;
  _Atomic uint64_t next;
  _Atomic int error;
  bool use_fallocate;
} job;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *worker(void *arg) {
  (void)arg;
  for (;;) {
    uint64_t at = atomic_fetch_add(&job.next, job.step);
    if (at >= job.length) return NULL;
    size_t n = (size_t)(job.length - at < job.step ? job.length - at : job.step);
    int rc = job.use_fallocate ? fallocate(job.fd, 0, (off_t)at, (off_t)n)
                               : madvise(job.map + at, n, MADV_POPULATE_WRITE);
    if (rc != 0) {
      atomic_store(&job.error, errno);
      return NULL;
    }
  }
}

/* Seconds for `threads` workers to cover the file one way; negative on error. */
static double run(int threads, bool use_fallocate, uint64_t step) {
  pthread_t t[64];
  job.use_fallocate = use_fallocate;
  job.step = step;
  atomic_store(&job.next, 0);
  atomic_store(&job.error, 0);
  double t0 = now();
  int started = 0;
  while (started < threads && pthread_create(&t[started], NULL, worker, NULL) == 0) started++;
  for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
  if (atomic_load(&job.error)) {
    fprintf(stderr, "bench_pool_fault: %s failed: %s\n", use_fallocate ? "fallocate" : "madvise",
            strerror(atomic_load(&job.error)));
    return -1;
  }
  return now() - t0;
}

static int open_file(uint64_t length, bool huge) {
  int fd = memfd_create("bench-pool", MFD_CLOEXEC | (huge ? MFD_HUGETLB : 0));
  if (fd < 0 || ftruncate(fd, (off_t)length) != 0) {
    fprintf(stderr, "bench_pool_fault: a %s file of %llu bytes: %s\n", huge ? "hugetlb" : "memfd",
            (unsigned long long)length, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

static bool thp; /* MADV_HUGEPAGE on every mapping */

static uint8_t *map_file(int fd, uint64_t length) {
  void *p = mmap(NULL, (size_t)length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return NULL;
  if (thp) madvise(p, (size_t)length, MADV_HUGEPAGE);
  return p;
}

/* One thread's own file: populated whole, then freed. */
struct own_file {
  uint64_t length;
  bool huge;
  int error;
};

static void *own_worker(void *arg) {
  struct own_file *f = arg;
  int fd = open_file(f->length, f->huge);
  uint8_t *map = fd >= 0 ? map_file(fd, f->length) : NULL;
  for (uint64_t at = 0; map && at < f->length && !f->error; at += POPULATE_STEP) {
    size_t n = (size_t)(f->length - at < POPULATE_STEP ? f->length - at : POPULATE_STEP);
    if (madvise(map + at, n, MADV_POPULATE_WRITE) != 0) f->error = errno;
  }
  if (fd < 0 || !map) f->error = errno ? errno : EIO;
  if (map) munmap(map, (size_t)f->length);
  if (fd >= 0) close(fd);
  return NULL;
}

/* Seconds for `threads` workers to fill files of their own, job.length in all; negative on error
 * (the files are freed inside the time: their munmap and close are short beside the fill). */
static double run_files(int threads, bool huge) {
  pthread_t t[64];
  struct own_file files[64];
  uint64_t each = job.length / (uint64_t)threads / POPULATE_STEP * POPULATE_STEP;
  double t0 = now();
  int started = 0;
  for (; started < threads; started++) {
    files[started] = (struct own_file){.length = each, .huge = huge};
    if (pthread_create(&t[started], NULL, own_worker, &files[started]) != 0) break;
  }
  int error = started < threads ? EAGAIN : 0;
  for (int i = 0; i < started; i++) {
    pthread_join(t[i], NULL);
    if (files[i].error) error = files[i].error;
  }
  if (error) {
    fprintf(stderr, "bench_pool_fault: files of their own: %s\n", strerror(error));
    return -1;
  }
  return (now() - t0) * (double)job.length / (double)(each * (uint64_t)started);
}

int main(int argc, char **argv) {
  uint64_t gib = argc > 1 ? strtoull(argv[1], NULL, 10) : 4;
  int max_threads = argc > 2 ? atoi(argv[2]) : 8;
  bool huge = argc > 3 && strcmp(argv[3], "huge") == 0;
  thp = argc > 3 && strcmp(argv[3], "thp") == 0;
  if (gib == 0 || max_threads < 1 || max_threads > 64 || (argc > 3 && !huge && !thp)) {
    fprintf(stderr, "usage: bench_pool_fault [GiB] [THREADS 1..64] [huge|thp]\n");
    return 2;
  }
  job.length = gib << 30;
  printf("pool pages: %llu GiB of %s, steps %llu MiB (populate) and %llu MiB (fallocate)\n",
         (unsigned long long)gib,
         huge ? "huge pages (MFD_HUGETLB)" : thp ? "shared memory, MADV_HUGEPAGE"
                                                 : "plain shared memory",
         (unsigned long long)(POPULATE_STEP >> 20), (unsigned long long)(FALLOCATE_STEP >> 20));
  printf("threads  populate GB/s  fallocate GB/s  map after GB/s  both GB/s  populate time / both"
         "  files GB/s\n");
  for (int threads = 1; threads <= max_threads; threads *= 2) {
    double secs[3] = {0, 0, 0};
    for (int way = 0; way < 2; way++) {
      job.fd = open_file(job.length, huge);
      if (job.fd < 0) return 1;
      job.map = map_file(job.fd, job.length);
      if (!job.map) {
        fprintf(stderr, "bench_pool_fault: mmap: %s\n", strerror(errno));
        return 1;
      }
      secs[way] = run(threads, way == 1, way == 1 ? FALLOCATE_STEP : POPULATE_STEP);
      uint64_t huge_bytes = threads == 1 && way == 0
                                ? ckpt_meminfo_at(NULL, "ShmemHugePages") : UINT64_MAX;
      if (huge_bytes != UINT64_MAX)
        printf("ShmemHugePages after the first fill: %llu MiB\n",
               (unsigned long long)(huge_bytes >> 20));
      if (way == 1 && secs[1] > 0) secs[2] = run(threads, false, POPULATE_STEP);
      munmap(job.map, (size_t)job.length);
      close(job.fd);
      if (secs[way] < 0 || secs[2] < 0) return 1;
    }
    double files = run_files(threads, huge);
    if (files < 0) return 1;
    double bytes = (double)job.length;
    printf("%7d  %13.2f  %14.2f  %14.2f  %9.2f  %19.2fx  %10.2f\n", threads, bytes / secs[0] / 1e9,
           bytes / secs[1] / 1e9, bytes / secs[2] / 1e9, bytes / (secs[1] + secs[2]) / 1e9,
           secs[0] / (secs[1] + secs[2]), bytes / files / 1e9);
    if (threads * 2 > max_threads && threads != max_threads) threads = max_threads / 2;
  }
  return 0;
}
