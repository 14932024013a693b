/* emu_pool.c: stream-ordered memory pools as the driver keeps them, so that a program's pool
 * figures can be compared with and without cudaw. Each device has a default pool and a current
 * pool (cudaDeviceSetMemPool); created pools live until destroyed and their last block is freed.
 * A pool reserves device memory in segments of EMU_POOL_SEGMENT (a larger block: its size in
 * EMU_POOL_LARGE_STEP steps) and places blocks (sizes rounded up to EMU_POOL_BLOCK_ALIGN) first
 * fit in the oldest segment with room; used bytes and a block's address range are the sizes
 * asked for (as on the H100, driver 580). A free
 * gives the block back to its pool at once (work is synchronous here); reserved memory goes back
 * to the device only at a synchronisation (stream, event or device) while the pool holds more
 * than its release threshold (default 0), or by cudaMemPoolTrimTo: whole empty segments, newest
 * first, until the pool is at or below the threshold; and every empty segment of the device's
 * pools when a new segment does not fit. The model is ours; the H100 check
 * (tests/gpu) says where the real driver differs. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

#define POOL_MAGIC 0x504f4f4cu

struct block {
  size_t offset, size;
  size_t asked; /* what the program asked for (size is that, rounded) */
};

struct segment {
  char *base;
  size_t size;
  struct block *blocks; /* sorted by offset */
  size_t count, capacity;
};

struct emu_pool {
  unsigned magic;
  int device;
  bool is_default, destroyed;
  unsigned long long threshold, reserved, reserved_high, used, used_high;
  int reuse[3]; /* follow event dependencies, opportunistic, internal dependencies */
  struct segment *segments;
  size_t count, capacity;
  struct emu_pool *next; /* the list of every pool */
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct emu_pool default_pools[EMU_MAX_DEVICES];
static struct emu_pool *current_pools[EMU_MAX_DEVICES];
static struct emu_pool *all_pools;
static bool pools_ready;

static void init_pool(struct emu_pool *p, int device, bool is_default) {
  *p = (struct emu_pool){.magic = POOL_MAGIC, .device = device, .is_default = is_default,
                         .reuse = {1, 1, 1}};
  p->next = all_pools;
  all_pools = p;
}

/* Called with pool_lock held. */
static void ready_locked(void) {
  if (pools_ready) return;
  for (int d = 0; d < EMU_MAX_DEVICES; d++) {
    init_pool(&default_pools[d], d, true);
    current_pools[d] = &default_pools[d];
  }
  pools_ready = true;
}

/* A live pool behind handle, or NULL. Called with pool_lock held. */
static struct emu_pool *pool_of(cudaMemPool_t handle) {
  ready_locked();
  for (struct emu_pool *p = all_pools; p; p = p->next)
    if ((cudaMemPool_t)p == handle && !p->destroyed) return p;
  return NULL;
}

static void note_highs(struct emu_pool *p) {
  if (p->reserved > p->reserved_high) p->reserved_high = p->reserved;
  if (p->used > p->used_high) p->used_high = p->used;
}

/* First fit inside s: the offset of a gap of size bytes, or -1. */
static long long gap_in(const struct segment *s, size_t size) {
  size_t at = 0;
  for (size_t i = 0; i < s->count; i++) {
    if (s->blocks[i].offset - at >= size) return (long long)at;
    at = s->blocks[i].offset + s->blocks[i].size;
  }
  return s->size - at >= size ? (long long)at : -1;
}

static int insert_block(struct segment *s, size_t offset, size_t size, size_t asked) {
  if (s->count == s->capacity) {
    size_t capacity = s->capacity ? s->capacity * 2 : 8;
    struct block *grown = realloc(s->blocks, capacity * sizeof *grown);
    if (!grown) return -ENOMEM;
    s->blocks = grown;
    s->capacity = capacity;
  }
  size_t i = s->count;
  while (i > 0 && s->blocks[i - 1].offset > offset) {
    s->blocks[i] = s->blocks[i - 1];
    i--;
  }
  s->blocks[i] = (struct block){offset, size, asked};
  s->count++;
  return 0;
}

static int add_segment(struct emu_pool *p, size_t size) {
  if (p->count == p->capacity) {
    size_t capacity = p->capacity ? p->capacity * 2 : 8;
    struct segment *grown = realloc(p->segments, capacity * sizeof *grown);
    if (!grown) return -ENOMEM;
    p->segments = grown;
    p->capacity = capacity;
  }
  int previous = emu_current_device();
  emu_set_current_device(p->device); /* the segment is the pool's device's memory */
  void *base = NULL;
  int err = emu_memory_alloc(size, EMU_SPACE_DEVICE, &base);
  emu_set_current_device(previous);
  if (err) return err;
  p->segments[p->count++] = (struct segment){.base = base, .size = size};
  p->reserved += size;
  return 0;
}

static void remove_segment(struct emu_pool *p, size_t index) {
  struct segment *s = &p->segments[index];
  emu_memory_free(s->base, EMU_KIND_BIT(EMU_SPACE_DEVICE));
  p->reserved -= s->size;
  free(s->blocks);
  memmove(s, s + 1, (p->count - index - 1) * sizeof *s);
  p->count--;
}

/* Give empty segments back, newest first, until at most keep bytes are reserved. */
static void release_down_to(struct emu_pool *p, unsigned long long keep) {
  for (size_t i = p->count; i-- > 0 && p->reserved > keep;)
    if (p->segments[i].count == 0) remove_segment(p, i);
}

static void drop_if_dead(struct emu_pool *p) {
  if (!p->destroyed) return;
  release_down_to(p, 0);
  /* The record stays on the list (handles are compared, never reused); its segments are gone. */
  if (p->count == 0) {
    free(p->segments);
    p->segments = NULL;
    p->capacity = 0;
  }
}

static int pool_alloc_locked(struct emu_pool *p, size_t size, void **ptr) {
  size_t rounded = (size + EMU_POOL_BLOCK_ALIGN - 1) & ~(size_t)(EMU_POOL_BLOCK_ALIGN - 1);
  if (rounded < size) return -ENOMEM;
  size_t index = p->count;
  long long offset = -1;
  for (size_t i = 0; i < p->count && offset < 0; i++)
    if ((offset = gap_in(&p->segments[i], rounded)) >= 0) index = i;
  if (offset < 0) {
    size_t step = EMU_POOL_LARGE_STEP;
    size_t segment = rounded <= EMU_POOL_SEGMENT ? EMU_POOL_SEGMENT
                                                 : (rounded + step - 1) & ~(step - 1);
    if (segment < rounded) return -ENOMEM;
    int err = add_segment(p, segment);
    if (err == -ENOMEM) {
      /* Out of memory: the device's pools give their empty segments back, then once more. */
      for (struct emu_pool *q = all_pools; q; q = q->next)
        if (q->device == p->device) release_down_to(q, 0);
      err = add_segment(p, segment);
    }
    if (err) return err;
    index = p->count - 1;
    offset = 0;
  }
  struct segment *s = &p->segments[index];
  int err = insert_block(s, (size_t)offset, rounded, size);
  if (err) {
    release_down_to(p, p->threshold);
    return err;
  }
  p->used += size;
  note_highs(p);
  *ptr = s->base + offset;
  return 0;
}

cudaError_t emu_pool_alloc(void **ptr, size_t size, cudaMemPool_t handle, cudaStream_t stream) {
  emu_init();
  if (!ptr) return emu_result(cudaErrorInvalidValue);
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  if (size == 0) {
    *ptr = NULL;
    return cudaSuccess;
  }
  pthread_mutex_lock(&pool_lock);
  ready_locked();
  struct emu_pool *p = handle ? pool_of(handle) : current_pools[emu_current_device()];
  int err = p ? pool_alloc_locked(p, size, ptr) : -EINVAL;
  pthread_mutex_unlock(&pool_lock);
  return emu_result(emu_error_from_errno(err));
}

int emu_pool_free(void *ptr) {
  pthread_mutex_lock(&pool_lock);
  ready_locked();
  int err = -ENOENT;
  for (struct emu_pool *p = all_pools; p && err; p = p->next)
    for (size_t i = 0; i < p->count && err; i++) {
      struct segment *s = &p->segments[i];
      if ((char *)ptr < s->base || (char *)ptr >= s->base + s->size) continue;
      size_t offset = (size_t)((char *)ptr - s->base);
      err = -EINVAL; /* inside a segment but no block's start: an interior pointer or a double free */
      for (size_t b = 0; b < s->count; b++)
        if (s->blocks[b].offset == offset) {
          p->used -= s->blocks[b].asked;
          memmove(&s->blocks[b], &s->blocks[b + 1], (s->count - b - 1) * sizeof *s->blocks);
          s->count--;
          err = 0;
          drop_if_dead(p);
          break;
        }
    }
  pthread_mutex_unlock(&pool_lock);
  return err;
}

int emu_pool_block_range(const void *ptr, uintptr_t *base, size_t *size) {
  pthread_mutex_lock(&pool_lock);
  ready_locked();
  int err = -ENOENT;
  for (struct emu_pool *p = all_pools; p && err; p = p->next)
    for (size_t i = 0; i < p->count && err; i++) {
      struct segment *s = &p->segments[i];
      if ((char *)ptr < s->base || (char *)ptr >= s->base + s->size) continue;
      size_t offset = (size_t)((char *)ptr - s->base);
      for (size_t b = 0; b < s->count && err; b++)
        if (offset >= s->blocks[b].offset && offset - s->blocks[b].offset < s->blocks[b].size) {
          *base = (uintptr_t)s->base + s->blocks[b].offset;
          *size = s->blocks[b].asked;
          err = 0;
        }
    }
  pthread_mutex_unlock(&pool_lock);
  return err;
}

void emu_pool_synchronized(int device) {
  pthread_mutex_lock(&pool_lock);
  ready_locked();
  for (struct emu_pool *p = all_pools; p; p = p->next)
    if (p->device == device && p->reserved > p->threshold) release_down_to(p, p->threshold);
  pthread_mutex_unlock(&pool_lock);
}

void emu_pool_reset(int device) {
  pthread_mutex_lock(&pool_lock);
  ready_locked();
  /* emu_memory_reset freed the segments' memory; the books follow. */
  for (struct emu_pool *p = all_pools; p; p = p->next) {
    if (p->device != device) continue;
    for (size_t i = 0; i < p->count; i++) free(p->segments[i].blocks);
    free(p->segments);
    p->segments = NULL;
    p->count = p->capacity = 0;
    p->reserved = p->reserved_high = p->used = p->used_high = 0;
    if (!p->is_default) p->destroyed = true;
    else p->threshold = 0;
  }
  current_pools[device] = &default_pools[device];
  pthread_mutex_unlock(&pool_lock);
}

/* ---- the runtime's pool calls ---- */

static cudaError_t check_device(int device) {
  return device < 0 || device >= emu_device_count() ? cudaErrorInvalidDevice : cudaSuccess;
}

EMU_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device) {
  emu_init();
  if (!pool) return emu_result(cudaErrorInvalidValue);
  if (check_device(device)) return emu_result(cudaErrorInvalidDevice);
  pthread_mutex_lock(&pool_lock);
  ready_locked();
  *pool = (cudaMemPool_t)&default_pools[device];
  pthread_mutex_unlock(&pool_lock);
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *pool, int device) {
  emu_init();
  if (!pool) return emu_result(cudaErrorInvalidValue);
  if (check_device(device)) return emu_result(cudaErrorInvalidDevice);
  pthread_mutex_lock(&pool_lock);
  ready_locked();
  *pool = (cudaMemPool_t)current_pools[device];
  pthread_mutex_unlock(&pool_lock);
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t handle) {
  emu_init();
  if (check_device(device)) return emu_result(cudaErrorInvalidDevice);
  pthread_mutex_lock(&pool_lock);
  struct emu_pool *p = pool_of(handle);
  cudaError_t err = !p || p->device != device ? cudaErrorInvalidValue : cudaSuccess;
  if (!err) current_pools[device] = p;
  pthread_mutex_unlock(&pool_lock);
  return emu_result(err);
}

EMU_EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const struct cudaMemPoolProps *props) {
  emu_init();
  if (!pool || !props || props->allocType != cudaMemAllocationTypePinned ||
      props->location.type != cudaMemLocationTypeDevice || check_device(props->location.id))
    return emu_result(cudaErrorInvalidValue);
  struct emu_pool *p = malloc(sizeof *p);
  if (!p) return emu_result(cudaErrorMemoryAllocation);
  pthread_mutex_lock(&pool_lock);
  ready_locked();
  init_pool(p, props->location.id, false);
  *pool = (cudaMemPool_t)p;
  pthread_mutex_unlock(&pool_lock);
  return cudaSuccess;
}

/* Blocks still allocated keep the pool's memory until freed, as with the real driver. */
EMU_EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t handle) {
  emu_init();
  pthread_mutex_lock(&pool_lock);
  struct emu_pool *p = pool_of(handle);
  cudaError_t err = !p || p->is_default ? cudaErrorInvalidValue : cudaSuccess;
  if (!err) {
    p->destroyed = true;
    if (current_pools[p->device] == p) current_pools[p->device] = &default_pools[p->device];
    drop_if_dead(p);
  }
  pthread_mutex_unlock(&pool_lock);
  return emu_result(err);
}

EMU_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t handle, size_t keep) {
  emu_init();
  pthread_mutex_lock(&pool_lock);
  struct emu_pool *p = pool_of(handle);
  if (p) release_down_to(p, keep);
  pthread_mutex_unlock(&pool_lock);
  return emu_result(p ? cudaSuccess : cudaErrorInvalidValue);
}

static int *reuse_flag(struct emu_pool *p, enum cudaMemPoolAttr attr) {
  switch (attr) {
  case cudaMemPoolReuseFollowEventDependencies: return &p->reuse[0];
  case cudaMemPoolReuseAllowOpportunistic: return &p->reuse[1];
  case cudaMemPoolReuseAllowInternalDependencies: return &p->reuse[2];
  default: return NULL;
  }
}

EMU_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t handle, enum cudaMemPoolAttr attr,
                                               void *value) {
  emu_init();
  if (!value) return emu_result(cudaErrorInvalidValue);
  pthread_mutex_lock(&pool_lock);
  struct emu_pool *p = pool_of(handle);
  cudaError_t err = p ? cudaSuccess : cudaErrorInvalidValue;
  unsigned long long *out = value;
  if (!err) switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: *out = p->threshold; break;
    case cudaMemPoolAttrReservedMemCurrent: *out = p->reserved; break;
    case cudaMemPoolAttrReservedMemHigh: *out = p->reserved_high; break;
    case cudaMemPoolAttrUsedMemCurrent: *out = p->used; break;
    case cudaMemPoolAttrUsedMemHigh: *out = p->used_high; break;
    default: {
      int *flag = reuse_flag(p, attr);
      if (flag) *(int *)value = *flag;
      else err = cudaErrorInvalidValue;
    }
    }
  pthread_mutex_unlock(&pool_lock);
  return emu_result(err);
}

/* The high marks can only be reset (to the current value, by writing 0); the current figures are
 * read-only. */
EMU_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t handle, enum cudaMemPoolAttr attr,
                                               void *value) {
  emu_init();
  if (!value) return emu_result(cudaErrorInvalidValue);
  pthread_mutex_lock(&pool_lock);
  struct emu_pool *p = pool_of(handle);
  cudaError_t err = p ? cudaSuccess : cudaErrorInvalidValue;
  /* The figures and the threshold are 64-bit; the reuse flags are ints. */
  bool wide = attr == cudaMemPoolAttrReleaseThreshold || attr == cudaMemPoolAttrReservedMemHigh ||
              attr == cudaMemPoolAttrUsedMemHigh || attr == cudaMemPoolAttrReservedMemCurrent ||
              attr == cudaMemPoolAttrUsedMemCurrent;
  unsigned long long in = err || !wide ? 0 : *(unsigned long long *)value;
  if (!err) switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: p->threshold = in; break;
    case cudaMemPoolAttrReservedMemHigh:
      if (in) err = cudaErrorInvalidValue;
      else p->reserved_high = p->reserved;
      break;
    case cudaMemPoolAttrUsedMemHigh:
      if (in) err = cudaErrorInvalidValue;
      else p->used_high = p->used;
      break;
    default: {
      int *flag = reuse_flag(p, attr);
      if (flag) *flag = *(int *)value != 0;
      else err = cudaErrorInvalidValue;
    }
    }
  pthread_mutex_unlock(&pool_lock);
  return emu_result(err);
}

EMU_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool,
                                               cudaStream_t stream) {
  if (!pool) return emu_result(cudaErrorInvalidValue);
  return emu_pool_alloc(ptr, size, pool, stream);
}

cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t pool,
                                         cudaStream_t stream);
EMU_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t pool,
                                                    cudaStream_t stream) {
  return cudaMallocFromPoolAsync(ptr, size, pool, stream ? stream : cudaStreamPerThread);
}
