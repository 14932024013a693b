/* An exchange copy's pace: how far a save may write its image or a resume create device memory,
 * from a limit the other program's progress raises, and the range operations that give memory
 * back or create it as the copy goes (engine.c's save_releasing and restore_creating). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "internal.h"

struct exchange_run {
  const struct ckpt_host_ops *ops;
  void *ctx;
  struct engine_pace pace;
  bool save;
  pthread_mutex_t lock; /* admissions in order; the counters below */
  uint64_t moved;       /* save: image bytes admitted; resume: device bytes created */
  uint64_t given;       /* save: device bytes released; resume: image bytes consumed */
};

struct exchange_run *exchange_run_new(const struct ckpt_host_ops *ops, void *ctx,
                                      const struct engine_pace *pace, bool save) {
  struct exchange_run *run = calloc(1, sizeof *run);
  if (!run) return NULL;
  *run = (struct exchange_run){.ops = ops, .ctx = ctx, .pace = *pace, .save = save};
  pthread_mutex_init(&run->lock, NULL);
  return run;
}

void exchange_run_free(struct exchange_run *run) {
  if (!run) return;
  pthread_mutex_destroy(&run->lock);
  free(run);
}

static uint64_t limit(const struct exchange_run *run, bool *final) {
  *final = false;
  return run->pace.limit ? run->pace.limit(run->pace.arg, final) : UINT64_MAX;
}

static void report(struct exchange_run *run, uint64_t given) {
  if (run->pace.progress) run->pace.progress(run->pace.arg, given);
}

int exchange_admit(struct exchange_run *run, uint64_t vaddr, uint64_t n, uint64_t pool_at) {
  pthread_mutex_lock(&run->lock);
  bool final;
  uint64_t need = n, allowed = limit(run, &final);
  /* A handover: the chunk's place in the pool must be one the other program no longer needs. */
  int rc = run->save && run->pace.place ? run->pace.place(run->pace.arg, pool_at, n) : 0;
  if (rc == 0 && !run->save) rc = run->ops->range_missing(run->ctx, vaddr, n, &need);
  if (rc == 0 && allowed != UINT64_MAX && (run->moved + need > allowed || run->moved + need < need))
    rc = final ? -EPIPE : -EAGAIN; /* the other side failed: its part stays where it is */
  uint64_t created = 0;
  if (rc == 0 && !run->save && need) rc = run->ops->recreate_range(run->ctx, vaddr, n, &created);
  if (rc == 0) run->moved += run->save ? n : created;
  if (rc == 0 && run->pace.moved) run->pace.moved(run->pace.arg, run->moved);
  pthread_mutex_unlock(&run->lock);
  return rc;
}

int exchange_release(struct exchange_run *run, uint64_t vaddr, uint64_t n) {
  uint64_t released = 0;
  pthread_mutex_lock(&run->lock);
  int rc = run->ops->release_range(run->ctx, vaddr, n, &released);
  run->given += released;
  uint64_t given = run->given;
  pthread_mutex_unlock(&run->lock);
  if (released) report(run, given);
  return rc;
}

void exchange_consumed(struct exchange_run *run, uint8_t *data, uint64_t n, bool free_pages,
                       uint64_t pool_from) {
  if (free_pages) { /* the whole pages inside; the chunk's neighbours may share the ends */
    uintptr_t page = 4096, start = ((uintptr_t)data + page - 1) & ~(page - 1);
    uintptr_t end = ((uintptr_t)data + n) & ~(page - 1);
    if (end > start) madvise((void *)start, end - start, MADV_DONTNEED);
  }
  pthread_mutex_lock(&run->lock);
  run->given += n;
  uint64_t given = run->given;
  pthread_mutex_unlock(&run->lock);
  /* Before the count: a reader of both never sees the count ahead of what is free in the pool. */
  if (run->pace.needed) run->pace.needed(run->pace.arg, pool_from);
  report(run, given);
}

void exchange_totals(struct exchange_run *run, uint64_t *moved, uint64_t *given) {
  pthread_mutex_lock(&run->lock);
  *moved = run->moved;
  *given = run->given;
  pthread_mutex_unlock(&run->lock);
}
