/* CUDAW_CHECK support: a bounded history of recent frees and range validation, so that a bad
 * pointer can be reported as an overflow or a use after free naming where it was freed. */
#include <errno.h>

#include "internal.h"

void vmem_history_record(uintptr_t base, uint64_t size, const void *where) {
  struct vmem_space *s = &vmem_space;
  if (!s->check) return;
  s->history[s->history_count % s->history_capacity] = (struct freed_record){base, size, where};
  s->history_count++;
}

/* Newest free whose range contains p. */
static const struct freed_record *history_find(uintptr_t p) {
  struct vmem_space *s = &vmem_space;
  if (!s->check) return NULL;
  uint64_t kept = s->history_count < s->history_capacity ? s->history_count : s->history_capacity;
  for (uint64_t i = 1; i <= kept; i++) {
    const struct freed_record *r = &s->history[(s->history_count - i) % s->history_capacity];
    if (p - r->base < r->size) return r;
  }
  return NULL;
}

static int check_locked(uintptr_t p, uint64_t size, struct vmem_check_report *report) {
  struct chunk *c;
  uintptr_t base;
  uint64_t alloc_size;
  *report = (struct vmem_check_report){.kind = VMEM_CHECK_OUTSIDE};
  if (!vmem_in_range((const void *)p) && !vmem_owner(p)) return -EFAULT;
  if (vmem_find_allocation(p, &c, &base, &alloc_size)) {
    report->base = (void *)base;
    report->size = alloc_size;
    if (size > alloc_size - (p - base)) report->kind = VMEM_CHECK_OVERFLOW;
    else if (!c->resident) report->kind = VMEM_CHECK_RELEASED;
    else report->kind = VMEM_CHECK_OK;
    return report->kind == VMEM_CHECK_OK ? 0 : -EFAULT;
  }
  const struct freed_record *r = history_find(p);
  if (r) {
    report->kind = VMEM_CHECK_FREED;
    report->base = (void *)r->base;
    report->size = r->size;
    report->freed_where = r->where;
  } else {
    report->kind = VMEM_CHECK_UNALLOCATED;
  }
  return -EFAULT;
}

int vmem_check_range(const void *p, uint64_t size, struct vmem_check_report *report) {
  struct vmem_space *s = &vmem_space;
  if (!report) return -EINVAL;
  pthread_mutex_lock(&s->lock);
  int rc;
  if (s->initialized) {
    rc = check_locked((uintptr_t)p, size, report);
  } else {
    *report = (struct vmem_check_report){.kind = VMEM_CHECK_OUTSIDE};
    rc = -EFAULT;
  }
  pthread_mutex_unlock(&s->lock);
  return rc;
}
