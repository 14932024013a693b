/* The host-wide ledger of cudawd pools: each cudawd with a pool keeps one small file,
 * <dir>/cudawd-pool.<pid> ("<claim> <populated>\n", its own, 0644), in a sticky directory that
 * every user can write (/dev/shm; CUDAWD_LEDGER names another, for tests). The claim is the
 * pool's window, what it may fault in; a cudawd grows it under the ledger's lock, after reading
 * the others' entries: several cudawds on one host (one per user or run dir) then never take
 * more than the host's budget together, even when they grow at once and before any of them has
 * faulted the growth in (MemAvailable does not show a pool that is not faulted in yet), and an
 * idle cudawd, whose window is 0, takes none of it. The faulted-in figure is the kernel's (the
 * memfd's blocks): it grows with demand and falls when a pool gives memory back.
 * An entry counts only while its cudawd lives: the pid exists, is named cudawd and belongs to the
 * file's owner. A user can make other cudawds choose smaller pools by planting entries for
 * processes of their own named cudawd; never larger ones. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"

static struct {
  int lock_fd;          /* held between ledger_lock and ledger_unlock */
  int entry_fd;         /* our entry, -1: none */
  char entry[512];
  uint64_t claim;       /* what our entry claims: the pool's window */
  uint64_t written_populated;
  double written_at;
} ledger = {.lock_fd = -1, .entry_fd = -1};

static const char *ledger_dir(void)
{
  const char *dir = getenv("CUDAWD_LEDGER");
  return dir && *dir ? dir : "/dev/shm";
}

static double now_seconds(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int ledger_lock(char *why, size_t why_len, int wait_ms)
{
  char path[512];
  snprintf(path, sizeof path, "%s/cudawd-pool.lock", ledger_dir());
  /* Anyone's cudawd takes the same lock: made 0666 by whoever comes first. A lock file that no
   * one can open, or a lock held longer than LOCK_WAIT_MS, leaves this cudawd without a pool
   * rather than sizing one blind. */
  mode_t old = umask(0);
  int fd = open(path, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
  umask(old);
  if (fd < 0) {
    snprintf(why, why_len, "the host-wide pool ledger %s cannot be opened: %s", path,
             strerror(errno));
    return -errno;
  }
  for (int waited = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; waited += 20) {
    if (errno != EWOULDBLOCK || waited >= wait_ms) {
      snprintf(why, why_len, "the host-wide pool ledger %s is locked by another process for "
               "over %d ms", path, wait_ms);
      close(fd);
      return -EWOULDBLOCK;
    }
    struct timespec pause = {0, 20 * 1000000};
    nanosleep(&pause, NULL);
  }
  ledger.lock_fd = fd;
  return 0;
}

void ledger_unlock(void)
{
  if (ledger.lock_fd >= 0) close(ledger.lock_fd);
  ledger.lock_fd = -1;
}

/* Whether pid is a live cudawd of uid. */
static bool live_cudawd(pid_t pid, uid_t uid)
{
  char path[64], comm[32] = "";
  snprintf(path, sizeof path, "/proc/%ld", (long)pid);
  struct stat st;
  if (stat(path, &st) != 0 || st.st_uid != uid) return false;
  snprintf(path, sizeof path, "/proc/%ld/comm", (long)pid);
  FILE *f = fopen(path, "re");
  if (!f) return false;
  bool named = fgets(comm, sizeof comm, f) && strncmp(comm, "cudawd", 6) == 0;
  fclose(f);
  return named;
}

void ledger_read(struct pool_ledger_view *view, uint64_t total)
{
  memset(view, 0, sizeof *view);
  DIR *dir = opendir(ledger_dir());
  if (!dir) return;
  for (struct dirent *e; (e = readdir(dir));) {
    long pid;
    char tail;
    if (sscanf(e->d_name, "cudawd-pool.%ld%c", &pid, &tail) != 1 || pid <= 0 ||
        pid == (long)getpid())
      continue;
    int fd = openat(dirfd(dir), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st;
    char text[64] = "";
    ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, text, sizeof text - 1) : -1;
    close(fd);
    if (!live_cudawd((pid_t)pid, st.st_uid)) {
      unlinkat(dirfd(dir), e->d_name, 0); /* its cudawd is gone (works for its owner or root) */
      continue;
    }
    unsigned long long size, populated;
    if (n <= 0 || sscanf(text, "%llu %llu", &size, &populated) != 2) continue;
    if (total && size > total) size = total; /* no entry counts for more than the host has */
    if (populated > size) populated = size;
    view->others++;
    view->size += size;
    view->unpopulated += size - populated;
  }
  closedir(dir);
}

static void write_entry(uint64_t size, uint64_t populated)
{
  char text[64];
  int n = snprintf(text, sizeof text, "%llu %llu\n", (unsigned long long)size,
                   (unsigned long long)populated);
  /* A shorter line than the last: cut the rest. A failed write leaves the last figure, which
   * only overstates what we have yet to fault in. */
  if (pwrite(ledger.entry_fd, text, (size_t)n, 0) != n || ftruncate(ledger.entry_fd, n) != 0)
    return;
  ledger.written_populated = populated;
  ledger.written_at = now_seconds();
}

int ledger_claim(uint64_t size)
{
  ledger.claim = size;
  snprintf(ledger.entry, sizeof ledger.entry, "%s/cudawd-pool.%ld", ledger_dir(), (long)getpid());
  unlink(ledger.entry); /* a file of a dead cudawd that had our pid (fails if not ours) */
  int fd = open(ledger.entry, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return -errno;
  fchmod(fd, 0644);
  ledger.entry_fd = fd;
  write_entry(size, 0);
  return 0;
}

void ledger_tick(const struct host_pool *pool)
{
  if (ledger.entry_fd < 0 || !pool->size) return;
  if (now_seconds() - ledger.written_at < 1.0) return;
  uint64_t populated = pool_resident(pool);
  if (populated == ledger.written_populated) return;
  write_entry(ledger.claim, populated);
}

void ledger_set_claim(uint64_t claim, uint64_t populated)
{
  ledger.claim = claim;
  if (ledger.entry_fd >= 0) write_entry(claim, populated);
}

void ledger_release(void)
{
  if (ledger.entry_fd < 0) return;
  close(ledger.entry_fd);
  unlink(ledger.entry);
  ledger.entry_fd = -1;
}
