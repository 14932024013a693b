/* emu_shared.c: CUDAW_EMU_SHARED=1 makes the emulated device one GPU shared by every process of
 * the user (=all: of every user, for the multi-user tests), as a real one is: a POSIX
 * shared-memory ledger per device (and CUDAW_EMU_SHARED_KEY) holds what each process has
 * charged, and a charge fails when the sum would pass the device's memory. A process killed with -9 leaves its share behind: it is reclaimed once its pid is seen
 * dead (or reused: the start time differs, or a zombie). A robust mutex survives a holder's death. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "emu_internal.h"

#define LEDGER_MAGIC 0x43574d53u /* "CWMS", written last by the creator */
#define LEDGER_SLOTS 256

struct ledger_slot {
  int32_t pid;            /* 0: free */
  uint64_t start_time;    /* /proc/<pid>/stat field 22, so that a reused pid is not taken for it */
  uint64_t bytes;
};

struct ledger {
  _Atomic uint32_t magic;
  pthread_mutex_t mutex;  /* process-shared, robust */
  struct ledger_slot slot[LEDGER_SLOTS];
};

static struct ledger *ledgers[EMU_MAX_DEVICES];
static int my_slot[EMU_MAX_DEVICES] = {-1, -1, -1, -1, -1, -1, -1, -1};
static pid_t my_pid;
static uint64_t my_start_time;

bool emu_shared_active(void) { return ledgers[0] != NULL; }

/* A process's start time and whether it still runs (not a zombie); false when it is gone. */
static bool process_alive(pid_t pid, uint64_t *start_time) {
  char path[64], text[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  char *p = strrchr(text, ')'); /* the command name may hold spaces and parentheses */
  if (!p || p[1] != ' ') return false;
  char state = p[2];
  if (state == 'Z' || state == 'X') return false;
  p += 2;
  for (int field = 3; field < 22 && p; field++) { /* field 3 is the state */
    p = strchr(p, ' ');
    if (p) p++;
  }
  *start_time = p ? strtoull(p, NULL, 10) : 0;
  return true;
}

static void lock_ledger(struct ledger *l) {
  if (pthread_mutex_lock(&l->mutex) == EOWNERDEAD) pthread_mutex_consistent(&l->mutex);
}

/* Frees the slots of processes that are gone. Called with the ledger locked. */
static void reclaim_dead(struct ledger *l) {
  for (int i = 0; i < LEDGER_SLOTS; i++) {
    struct ledger_slot *s = &l->slot[i];
    if (!s->pid || s->pid == my_pid) continue;
    uint64_t start = 0;
    if (!process_alive(s->pid, &start) || start != s->start_time) *s = (struct ledger_slot){0};
  }
}

static uint64_t sum_used(const struct ledger *l) {
  uint64_t sum = 0;
  for (int i = 0; i < LEDGER_SLOTS; i++) sum += l->slot[i].pid ? l->slot[i].bytes : 0;
  return sum;
}

/* Opens (or creates) the ledger of one device; NULL with a message on failure. */
static struct ledger *open_ledger(const char *key, int device, bool all_users) {
  char name[128];
  if (all_users) snprintf(name, sizeof name, "/cudaw-emu-all-%s-%d", key, device);
  else snprintf(name, sizeof name, "/cudaw-emu-%u-%s-%d", (unsigned)geteuid(), key, device);
  bool created = true;
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  /* "all": one GPU for every user of the machine (a test double; the umask would narrow it) */
  if (fd >= 0 && all_users && fchmod(fd, 0666) != 0) {
    close(fd);
    shm_unlink(name);
    fd = -1;
  }
  if (fd < 0 && errno == EEXIST) {
    created = false;
    fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
  }
  if (fd < 0) {
    fprintf(stderr, "cudaw-emu: cannot open the shared ledger %s: %s\n", name, strerror(errno));
    return NULL;
  }
  if (created && ftruncate(fd, sizeof(struct ledger)) != 0) {
    close(fd);
    return NULL;
  }
  /* Another process created it: wait (at most 2 s) until it has its size and is initialised. */
  struct stat st;
  for (int tries = 0; !created && (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(struct ledger));
       tries++) {
    if (tries == 2000) {
      close(fd);
      fprintf(stderr, "cudaw-emu: the shared ledger %s is never initialised\n", name);
      return NULL;
    }
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  struct ledger *l = mmap(NULL, sizeof *l, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (l == MAP_FAILED) return NULL;
  if (created) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&l->mutex, &attr);
    pthread_mutexattr_destroy(&attr);
    atomic_store(&l->magic, LEDGER_MAGIC);
  }
  for (int tries = 0; atomic_load(&l->magic) != LEDGER_MAGIC; tries++) {
    if (tries == 2000) {
      munmap(l, sizeof *l);
      return NULL;
    }
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  return l;
}

int emu_shared_init(int devices) {
  const char *on = getenv("CUDAW_EMU_SHARED");
  if (!on || (strcmp(on, "1") != 0 && strcmp(on, "all") != 0)) return 0;
  bool all_users = strcmp(on, "all") == 0;
  const char *key = getenv("CUDAW_EMU_SHARED_KEY");
  if (!key || !*key) key = "default";
  for (const char *c = key; *c; c++)
    if (*c == '/' || (size_t)(c - key) > 64) {
      fprintf(stderr, "cudaw-emu: CUDAW_EMU_SHARED_KEY must be a short name without '/'\n");
      return -EINVAL;
    }
  my_pid = getpid();
  process_alive(my_pid, &my_start_time);
  for (int d = 0; d < devices; d++)
    if (!(ledgers[d] = open_ledger(key, d, all_users))) {
      for (int e = 0; e < d; e++) munmap(ledgers[e], sizeof *ledgers[e]), ledgers[e] = NULL;
      return -EIO;
    }
  return 0;
}

/* This process's slot in l (taking a free one); -ENOSPC when all are taken. Locked. */
static int own_slot(struct ledger *l, int device) {
  if (my_pid != getpid()) { /* a forked child charges nothing of its parent's */
    my_pid = getpid();
    process_alive(my_pid, &my_start_time);
    for (int d = 0; d < EMU_MAX_DEVICES; d++) my_slot[d] = -1;
  }
  if (my_slot[device] >= 0) return my_slot[device];
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < LEDGER_SLOTS; i++)
      if (!l->slot[i].pid) {
        l->slot[i] = (struct ledger_slot){my_pid, my_start_time, 0};
        return my_slot[device] = i;
      }
    reclaim_dead(l);
  }
  return -ENOSPC;
}

int emu_shared_charge(int device, long long delta, size_t capacity) {
  struct ledger *l = ledgers[device];
  lock_ledger(l);
  int err = 0, i = own_slot(l, device);
  if (i < 0) {
    err = -ENOMEM;
  } else if (delta > 0) {
    uint64_t used = sum_used(l);
    if (used + (uint64_t)delta > capacity) { /* before saying no, forget the dead */
      reclaim_dead(l);
      used = sum_used(l);
    }
    if (used + (uint64_t)delta > capacity) err = -ENOMEM;
    else l->slot[i].bytes += (uint64_t)delta;
  } else {
    uint64_t give = (uint64_t)-delta;
    l->slot[i].bytes -= give < l->slot[i].bytes ? give : l->slot[i].bytes;
  }
  pthread_mutex_unlock(&l->mutex);
  return err;
}

size_t emu_shared_used(int device) {
  struct ledger *l = ledgers[device];
  lock_ledger(l);
  reclaim_dead(l);
  uint64_t used = sum_used(l);
  pthread_mutex_unlock(&l->mutex);
  return (size_t)used;
}
