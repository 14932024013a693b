/* emu_work.c: device work still outstanding after its call returned. Everything else the emu does
 * completes before its call returns; a test's kernel may leave work behind that completes only
 * once a condition holds (a collective waiting for its peer process, as NCCL's kernels spin on
 * the device), and synchronisations wait for it as they wait for a GPU. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "emu_internal.h"

#define WORK_MAX 64

static struct work {
  int device;
  int (*done)(void *arg);
  void *arg;
} work[WORK_MAX];
static int work_count;
static pthread_mutex_t work_lock = PTHREAD_MUTEX_INITIALIZER;

EMU_EXPORT int cudaw_emu_defer(int (*done)(void *arg), void *arg) {
  if (!done) return -EINVAL;
  int device = emu_current_device();
  pthread_mutex_lock(&work_lock);
  int rc = work_count < WORK_MAX ? 0 : -ENOSPC;
  if (!rc) work[work_count++] = (struct work){device, done, arg};
  pthread_mutex_unlock(&work_lock);
  return rc;
}

/* Ask each piece of work on `device` whether it is done (under the lock: each completes once);
 * returns how many remain. */
static int poll_device(int device) {
  int left = 0;
  pthread_mutex_lock(&work_lock);
  for (int i = 0; i < work_count;) {
    if (work[i].device != device) {
      i++;
    } else if (work[i].done(work[i].arg)) {
      work[i] = work[--work_count];
    } else {
      left++;
      i++;
    }
  }
  pthread_mutex_unlock(&work_lock);
  return left;
}

bool emu_work_pending(int device) { return poll_device(device) > 0; }

void emu_work_wait(int device) {
  while (poll_device(device)) nanosleep(&(struct timespec){0, 50000}, NULL);
}
