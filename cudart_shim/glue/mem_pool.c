/* Stream-ordered memory pools over vmem, so that a program's pool figures read as without cudaw.
 * Each pool the program allocates from (its real handle: the default, current or a created pool)
 * has books here: it reserves vmem memory in segments of SHIM_POOL_SEGMENT (a larger block: its
 * size in SHIM_POOL_LARGE_STEP steps) and places blocks (sizes rounded up to
 * SHIM_POOL_BLOCK_ALIGN) first fit in its oldest segment with room, as the driver's pools do; the
 * used figures and a block's address range count the bytes the program asked for, as the
 * driver's do (measured on the H100). A free lowers the used figure at once; the block goes back to its
 * segment once its stream passed the free (mem_async.c). Segments go back to vmem, whole and
 * newest first, at a synchronisation while the pool holds more than its release threshold, on
 * cudaMemPoolTrimTo, when a destroyed pool empties, and (every empty one of the device's pools)
 * when vmem runs out of memory for a new segment. The real pool stays empty apart from
 * allocations made during a stream capture, which it serves itself: the figures cudaw answers
 * are the real pool's plus these books. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "shim_generated.h"
#include "shim_vmem.h"
#include "vmem.h"

struct block {
  uint64_t offset, size;
  uint64_t asked; /* what the program asked for (size is that, rounded) */
  bool freed;     /* freed on a stream that has not passed the free yet */
};

struct pool_books;

struct segment {
  uintptr_t base;
  uint64_t size;
  uint64_t taken;        /* bytes of its blocks: a segment without room is skipped at once */
  struct block *blocks; /* sorted by offset */
  size_t count, capacity;
  struct pool_books *pool;
};

struct pool_books {
  void *handle;
  int device;
  bool destroyed;
  uint64_t threshold, reserved, reserved_high, used, used_high;
  struct segment **segments; /* oldest first */
  size_t count, capacity;
  struct pool_books *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool_books *pools;
static struct segment **by_base; /* every segment, sorted by base */
static size_t segment_count, segment_capacity;
static _Atomic size_t segments_published; /* segment_count, readable without the lock */

static int grow(void **array, size_t *capacity, size_t element)
{
  size_t more = *capacity ? *capacity * 2 : 16;
  void *bigger = realloc(*array, more * element);
  if (!bigger) return -ENOMEM;
  *array = bigger;
  *capacity = more;
  return 0;
}

/* The device whose default pool handle is, else the current device. */
static int device_of(void *handle)
{
  int count = 0, device = 0;
  if (SHIM_REAL(cudaGetDeviceCount)(&count) == cudaSuccess)
    for (int d = 0; d < count; d++) {
      cudaMemPool_t pool = NULL;
      if (SHIM_REAL(cudaDeviceGetDefaultMemPool)(&pool, d) == cudaSuccess && pool == handle)
        return d;
    }
  SHIM_REAL(cudaGetLastError)();
  shim_current_device(&device);
  return device;
}

/* The books of a live pool; created (with device, or found) when create. Called with lock. */
static struct pool_books *books_of(void *handle, int device, bool create)
{
  for (struct pool_books *p = pools; p; p = p->next)
    if (p->handle == handle && !p->destroyed) return p;
  if (!create) return NULL;
  struct pool_books *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->handle = handle;
  p->device = device;
  p->next = pools;
  pools = p;
  return p;
}

/* The segment holding address, or NULL. Called with lock. */
static struct segment *segment_at(uintptr_t address, size_t *index)
{
  size_t low = 0, high = segment_count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (by_base[mid]->base <= address) low = mid + 1;
    else high = mid;
  }
  if (low == 0) return NULL;
  struct segment *s = by_base[low - 1];
  if (address - s->base >= s->size) return NULL;
  if (index) *index = low - 1;
  return s;
}

/* The block starting at address in s, or NULL. */
static struct block *block_at(struct segment *s, uintptr_t address, size_t *index)
{
  uint64_t offset = address - s->base;
  size_t low = 0, high = s->count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (s->blocks[mid].offset < offset) low = mid + 1;
    else high = mid;
  }
  if (low == s->count || s->blocks[low].offset != offset) return NULL;
  if (index) *index = low;
  return &s->blocks[low];
}

static void note_highs(struct pool_books *p)
{
  if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
  if (p->used > p->used_high) p->used_high = p->used;
}

static uint64_t rounded(uint64_t size)
{
  return (size + SHIM_POOL_BLOCK_ALIGN - 1) & ~(uint64_t)(SHIM_POOL_BLOCK_ALIGN - 1);
}

/* First fit inside s: the offset of a gap of size bytes, or -1. */
static int64_t gap_in(const struct segment *s, uint64_t size)
{
  uint64_t at = 0;
  for (size_t i = 0; i < s->count; i++) {
    if (s->blocks[i].offset - at >= size) return (int64_t)at;
    at = s->blocks[i].offset + s->blocks[i].size;
  }
  return s->size - at >= size ? (int64_t)at : -1;
}

static int place(struct segment *s, uint64_t offset, uint64_t size, uint64_t asked)
{
  if (s->count == s->capacity && grow((void **)&s->blocks, &s->capacity, sizeof *s->blocks))
    return -ENOMEM;
  size_t i = s->count;
  while (i > 0 && s->blocks[i - 1].offset > offset) {
    s->blocks[i] = s->blocks[i - 1];
    i--;
  }
  s->blocks[i] = (struct block){offset, size, asked, false};
  s->count++;
  s->taken += size;
  s->pool->used += asked;
  note_highs(s->pool);
  return 0;
}

/* Give segment i of p back to vmem. Called with lock. */
static void release_segment(struct pool_books *p, size_t i)
{
  struct segment *s = p->segments[i];
  size_t at;
  if (segment_at(s->base, &at) == s) {
    memmove(&by_base[at], &by_base[at + 1], (segment_count - at - 1) * sizeof *by_base);
    segment_count--;
    atomic_store_explicit(&segments_published, segment_count, memory_order_release);
  }
  int rc = vmem_free((void *)s->base, NULL);
  if (rc != 0) shim_warn("memory pool: giving a segment at %p back failed (%d)", (void *)s->base, rc);
  p->reserved -= s->size;
  memmove(&p->segments[i], &p->segments[i + 1], (p->count - i - 1) * sizeof *p->segments);
  p->count--;
  free(s->blocks);
  free(s);
}

/* Empty segments back to vmem, newest first, until at most keep bytes are reserved. */
static void release_down_to(struct pool_books *p, uint64_t keep)
{
  for (size_t i = p->count; i-- > 0 && p->reserved > keep;)
    if (p->segments[i]->count == 0) release_segment(p, i);
}

static void drop_if_dead(struct pool_books *p)
{
  if (!p->destroyed) return;
  release_down_to(p, 0);
  if (p->count) return;
  struct pool_books **link = &pools;
  while (*link != p) link = &(*link)->next;
  *link = p->next;
  free(p->segments);
  free(p);
}

/* Place size bytes in p's segments (first fit, oldest first). Called with lock. */
static int place_first_fit(struct pool_books *p, uint64_t size, uint64_t asked, void **ptr)
{
  for (size_t i = 0; i < p->count; i++) {
    if (p->segments[i]->size - p->segments[i]->taken < size) continue;
    int64_t offset = gap_in(p->segments[i], size);
    if (offset < 0) continue;
    int rc = place(p->segments[i], (uint64_t)offset, size, asked);
    if (rc == 0) *ptr = (void *)(p->segments[i]->base + (uint64_t)offset);
    return rc;
  }
  return -ENOSPC;
}

static int adopt_segment(struct pool_books *p, uintptr_t base, uint64_t size,
                         struct segment **out)
{
  struct segment *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  *s = (struct segment){.base = base, .size = size, .pool = p};
  if ((p->count == p->capacity && grow((void **)&p->segments, &p->capacity, sizeof *p->segments)) ||
      (segment_count == segment_capacity &&
       grow((void **)&by_base, &segment_capacity, sizeof *by_base))) {
    free(s);
    return -ENOMEM;
  }
  p->segments[p->count++] = s;
  size_t at = segment_count;
  while (at > 0 && by_base[at - 1]->base > base) {
    by_base[at] = by_base[at - 1];
    at--;
  }
  by_base[at] = s;
  segment_count++;
  atomic_store_explicit(&segments_published, segment_count, memory_order_release);
  p->reserved += size;
  note_highs(p);
  *out = s;
  return 0;
}

cudaError_t shim_pool_alloc(void *handle, uint64_t size, void **ptr)
{
  uint64_t want = rounded(size);
  if (want < size) return cudaErrorMemoryAllocation;
  pthread_mutex_lock(&lock);
  struct pool_books *p = books_of(handle, 0, false);
  int rc = p ? place_first_fit(p, want, size, ptr) : -ENOSPC;
  pthread_mutex_unlock(&lock);
  if (rc != -ENOSPC) return shim_error_from_errno(rc);

  int device = p ? p->device : device_of(handle);
  uint64_t step = SHIM_POOL_LARGE_STEP;
  uint64_t bytes = want <= SHIM_POOL_SEGMENT ? SHIM_POOL_SEGMENT : (want + step - 1) & ~(step - 1);
  if (bytes < want) return cudaErrorMemoryAllocation;
  void *base = NULL;
  cudaError_t result = shim_vmem_alloc_on(device, &base, bytes);
  if (result == cudaErrorMemoryAllocation) {
    /* Out of memory: blocks whose frees are still on their way come back (the driver reuses them
     * behind a dependency on the free; we wait for it), else the device's pools give their empty
     * segments back, and the allocation is tried once more. */
    SHIM_REAL(cudaGetLastError)();
    shim_vmem_reap_frees(1);
    pthread_mutex_lock(&lock);
    p = books_of(handle, 0, false);
    rc = p ? place_first_fit(p, want, size, ptr) : -ENOSPC;
    if (rc == -ENOSPC)
      for (struct pool_books *q = pools; q; q = q->next)
        if (q->device == device) release_down_to(q, 0);
    pthread_mutex_unlock(&lock);
    if (rc != -ENOSPC) return shim_error_from_errno(rc);
    result = shim_vmem_alloc_on(device, &base, bytes);
  }
  if (result != cudaSuccess) return result;
  pthread_mutex_lock(&lock);
  struct segment *s = NULL;
  p = books_of(handle, device, true);
  rc = p ? adopt_segment(p, (uintptr_t)base, bytes, &s) : -ENOMEM;
  if (rc == 0) rc = place(s, 0, want, size);
  if (rc == 0) *ptr = base;
  else if (s) release_down_to(p, p->threshold);
  pthread_mutex_unlock(&lock);
  if (!s) vmem_free(base, NULL);
  return shim_error_from_errno(rc);
}

int shim_pool_owns(const void *ptr)
{
  if (atomic_load_explicit(&segments_published, memory_order_acquire) == 0) return 0;
  pthread_mutex_lock(&lock);
  int owns = segment_at((uintptr_t)ptr, NULL) != NULL;
  pthread_mutex_unlock(&lock);
  return owns;
}

int shim_pool_free_begin(const void *ptr, uint64_t *size, void **handle)
{
  pthread_mutex_lock(&lock);
  int rc = -EINVAL;
  struct segment *s = segment_at((uintptr_t)ptr, NULL);
  struct block *b = s ? block_at(s, (uintptr_t)ptr, NULL) : NULL;
  if (b && !b->freed) {
    b->freed = true;
    s->pool->used -= b->asked;
    *size = b->size;
    *handle = s->pool->handle;
    rc = 0;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

void shim_pool_free_done(const void *ptr)
{
  pthread_mutex_lock(&lock);
  size_t index;
  struct segment *s = segment_at((uintptr_t)ptr, NULL);
  struct block *b = s ? block_at(s, (uintptr_t)ptr, &index) : NULL;
  if (b && b->freed) {
    s->taken -= b->size;
    memmove(b, b + 1, (s->count - index - 1) * sizeof *b);
    s->count--;
    drop_if_dead(s->pool);
  }
  pthread_mutex_unlock(&lock);
}

int shim_pool_reuse(const void *ptr, uint64_t asked)
{
  pthread_mutex_lock(&lock);
  struct segment *s = segment_at((uintptr_t)ptr, NULL);
  struct block *b = s ? block_at(s, (uintptr_t)ptr, NULL) : NULL;
  int rc = -EINVAL;
  if (b && b->freed && !s->pool->destroyed) {
    b->freed = false;
    b->asked = asked;
    s->pool->used += asked;
    note_highs(s->pool);
    rc = 0;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

int shim_pool_holds_memory(void)
{
  return atomic_load_explicit(&segments_published, memory_order_acquire) != 0;
}

int shim_pool_block_range(const void *ptr, uintptr_t *base, uint64_t *size)
{
  pthread_mutex_lock(&lock);
  int rc = -ENOENT;
  struct segment *s = segment_at((uintptr_t)ptr, NULL);
  uint64_t offset = s ? (uintptr_t)ptr - s->base : 0;
  for (size_t i = 0; s && i < s->count && rc; i++) {
    struct block *b = &s->blocks[i];
    if (offset >= b->offset && offset - b->offset < b->size && !b->freed) {
      *base = s->base + b->offset;
      *size = b->asked;
      rc = 0;
    }
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

void shim_pool_synchronized(int device)
{
  if (!shim_pool_holds_memory()) return;
  shim_vmem_reap_frees(0); /* frees the synchronisation completed give their blocks back */
  pthread_mutex_lock(&lock);
  for (struct pool_books *p = pools; p; p = p->next)
    if (p->device == device && p->reserved > p->threshold) release_down_to(p, p->threshold);
  pthread_mutex_unlock(&lock);
}

void shim_pool_trim(void *handle, uint64_t keep)
{
  shim_vmem_reap_frees(0);
  pthread_mutex_lock(&lock);
  struct pool_books *p = books_of(handle, 0, false);
  if (p) release_down_to(p, keep);
  pthread_mutex_unlock(&lock);
}

void shim_pool_destroyed(void *handle)
{
  shim_vmem_reap_frees(0);
  pthread_mutex_lock(&lock);
  struct pool_books *p = books_of(handle, 0, false);
  if (p) {
    p->destroyed = true;
    drop_if_dead(p);
  }
  pthread_mutex_unlock(&lock);
}

void shim_pool_figures(void *handle, struct shim_pool_figures *out)
{
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&lock);
  struct pool_books *p = books_of(handle, 0, false);
  if (p) {
    out->reserved = p->reserved;
    out->reserved_high = p->reserved_high;
    out->used = p->used;
    out->used_high = p->used_high;
  }
  pthread_mutex_unlock(&lock);
}

void shim_pool_set(void *handle, enum shim_pool_setting setting, uint64_t value)
{
  pthread_mutex_lock(&lock);
  struct pool_books *p = books_of(handle, device_of(handle), setting == SHIM_POOL_THRESHOLD);
  if (p) switch (setting) {
    case SHIM_POOL_THRESHOLD: p->threshold = value; break;
    case SHIM_POOL_RESET_RESERVED_HIGH: p->reserved_high = p->reserved; break;
    case SHIM_POOL_RESET_USED_HIGH: p->used_high = p->used; break;
    }
  pthread_mutex_unlock(&lock);
}

void shim_pool_forget(void)
{
  pthread_mutex_lock(&lock);
  while (pools) {
    struct pool_books *p = pools;
    pools = p->next;
    for (size_t i = 0; i < p->count; i++) {
      free(p->segments[i]->blocks);
      free(p->segments[i]);
    }
    free(p->segments);
    free(p);
  }
  segment_count = 0;
  atomic_store_explicit(&segments_published, 0, memory_order_release);
  pthread_mutex_unlock(&lock);
}
