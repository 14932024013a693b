/* Chunks placed outside the reserved range (identity placement under translate): a chunk whose
 * real range is free in vmem's table takes its real address as its virtual one, so that device
 * pointers kept in device memory stay right until a resume moves it. The per-granule tables cover
 * only the range and real addresses need not be granule-aligned, so these chunks are kept in one
 * array sorted by address. vmem_translate reads it only while one of them does not translate to
 * itself (released, being freed, moved), counted in vmem_fast.outside_irregular. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Index of the first outside chunk whose vaddr is > p. */
static uint64_t after(uintptr_t p)
{
  struct vmem_space *s = &vmem_space;
  uint64_t lo = 0, hi = s->outside_count;
  while (lo < hi) {
    uint64_t mid = (lo + hi) / 2;
    if (s->outside[mid]->vaddr <= p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The outside chunk (hidden or not) whose extent contains p. */
static struct chunk *containing(uintptr_t p)
{
  uint64_t i = after(p);
  if (i == 0) return NULL;
  struct chunk *c = vmem_space.outside[i - 1];
  return p - c->vaddr < c->backed ? c : NULL;
}

static uint64_t irregular(uint64_t entry) { return entry != 1; }

bool vmem_outside_free(uintptr_t start, uint64_t bytes)
{
  struct vmem_space *s = &vmem_space;
  uintptr_t end = start + bytes;
  if (bytes == 0 || end < start) return false;
  if (start < s->base + s->size && end > s->base) return false;
  uint64_t i = after(end - 1); /* chunks before i start below end; the last one ends highest */
  return i == 0 || s->outside[i - 1]->vaddr + s->outside[i - 1]->backed <= start;
}

int vmem_outside_insert(struct chunk *c)
{
  struct vmem_space *s = &vmem_space;
  int rc = 0;
  pthread_mutex_lock(&s->outside_lock);
  if (s->outside_count == s->outside_capacity) {
    uint64_t capacity = s->outside_capacity ? s->outside_capacity * 2 : 64;
    struct chunk **grown = realloc(s->outside, capacity * sizeof *grown);
    if (grown) {
      s->outside = grown;
      s->outside_capacity = capacity;
    } else {
      rc = -ENOMEM;
    }
  }
  if (rc == 0) {
    uint64_t i = after(c->vaddr);
    memmove(&s->outside[i + 1], &s->outside[i], (s->outside_count - i) * sizeof *s->outside);
    s->outside[i] = c;
    s->outside_count++;
    c->outside = true;
    uintptr_t low = atomic_load_explicit(&vmem_fast.outside_low, memory_order_relaxed);
    uintptr_t high = atomic_load_explicit(&vmem_fast.outside_high, memory_order_relaxed);
    if (s->outside_count == 1 || c->vaddr < low)
      atomic_store_explicit(&vmem_fast.outside_low, c->vaddr, memory_order_release);
    if (s->outside_count == 1 || c->vaddr + c->backed > high)
      atomic_store_explicit(&vmem_fast.outside_high, c->vaddr + c->backed, memory_order_release);
    atomic_store_explicit(&vmem_fast.outside_count, s->outside_count, memory_order_release);
    atomic_fetch_add_explicit(&vmem_fast.outside_irregular, irregular(c->entry),
                              memory_order_release);
  }
  pthread_mutex_unlock(&s->outside_lock);
  return rc;
}

void vmem_outside_remove(struct chunk *c)
{
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->outside_lock);
  uint64_t i = after(c->vaddr);
  if (i > 0 && s->outside[i - 1] == c) {
    memmove(&s->outside[i - 1], &s->outside[i], (s->outside_count - i) * sizeof *s->outside);
    s->outside_count--;
    atomic_store_explicit(&vmem_fast.outside_count, s->outside_count, memory_order_release);
    atomic_fetch_sub_explicit(&vmem_fast.outside_irregular, irregular(c->entry),
                              memory_order_release);
  }
  c->outside = false;
  pthread_mutex_unlock(&s->outside_lock);
}

/* Writers hold vmem's lock, so an unchanged value needs no outside_lock. */
void vmem_outside_set_entry(struct chunk *c, uint64_t entry)
{
  struct vmem_space *s = &vmem_space;
  if (c->entry == entry) return;
  pthread_mutex_lock(&s->outside_lock);
  uint64_t was = irregular(c->entry), now = irregular(entry);
  c->entry = entry;
  if (now > was) atomic_fetch_add_explicit(&vmem_fast.outside_irregular, 1, memory_order_release);
  if (now < was) atomic_fetch_sub_explicit(&vmem_fast.outside_irregular, 1, memory_order_release);
  pthread_mutex_unlock(&s->outside_lock);
}

void vmem_outside_hide(struct chunk *c, bool hidden)
{
  if (c->hidden == hidden) return;
  pthread_mutex_lock(&vmem_space.outside_lock);
  c->hidden = hidden;
  pthread_mutex_unlock(&vmem_space.outside_lock);
}

struct chunk *vmem_outside_find(uintptr_t p)
{
  struct chunk *c = containing(p);
  return c && !c->hidden ? c : NULL;
}

int vmem_outside_walk(uintptr_t lo, uintptr_t hi, int (*cb)(struct chunk *c, void *arg),
                      void *arg)
{
  struct vmem_space *s = &vmem_space;
  uintptr_t next = lo;
  for (;;) {
    uint64_t i = next ? after(next - 1) : 0; /* the first at or after next */
    while (i < s->outside_count && s->outside[i]->hidden) i++;
    if (i == s->outside_count || s->outside[i]->vaddr >= hi) return 0;
    struct chunk *c = s->outside[i];
    next = c->vaddr + 1;
    int rc = cb(c, arg);
    if (rc) return rc;
  }
}

void vmem_outside_fini(void)
{
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->outside_lock);
  free(s->outside);
  s->outside = NULL;
  s->outside_count = s->outside_capacity = 0;
  atomic_store_explicit(&vmem_fast.outside_count, 0, memory_order_release);
  atomic_store_explicit(&vmem_fast.outside_irregular, 0, memory_order_release);
  pthread_mutex_unlock(&s->outside_lock);
}

void *vmem_translate_outside(const void *p)
{
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->outside_lock);
  void *real = (void *)p;
  struct chunk *c = containing((uintptr_t)p);
  if (c) real = c->entry ? (void *)((uintptr_t)p + (uintptr_t)(c->entry - 1)) : NULL;
  pthread_mutex_unlock(&s->outside_lock);
  return real;
}

int vmem_owns(const void *p)
{
  if (vmem_in_range(p)) return 1;
  if (atomic_load_explicit(&vmem_fast.outside_count, memory_order_acquire) == 0) return 0;
  uintptr_t u = (uintptr_t)p; /* bounds only grow while chunks exist: a quick no first */
  if (u < atomic_load_explicit(&vmem_fast.outside_low, memory_order_acquire) ||
      u >= atomic_load_explicit(&vmem_fast.outside_high, memory_order_acquire))
    return 0;
  struct vmem_space *s = &vmem_space;
  pthread_mutex_lock(&s->outside_lock);
  int owned = vmem_outside_find((uintptr_t)p) != NULL;
  pthread_mutex_unlock(&s->outside_lock);
  return owned;
}
