/* emu_memory.c: the emulated devices' memory. Device memory lives in one large PROT_NONE host
 * region so device pointers are recognisable (one unified address space for every device, as with
 * UVA); allocations are handed out bump-pointer style and never reused until the region wraps
 * (or, with CUDAW_EMU_ALLOC=lowest, in the lowest gap, as a deterministic allocator would);
 * freed memory is PROT_NONE again so use-after-free faults. Each allocation, physical handle and
 * mapping knows its device; each device has its own quota. Also page-locked/registered host ranges
 * and VMM (memfd-backed physical memory, per-device access). One mutex. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emu_internal.h"

#define REGION_MIN_BYTES ((size_t)64 << 30)
#define PAGE ((size_t)4096)

/* Sorted (by base, the first member of every element) vector of non-overlapping ranges. */
struct sorted_vector {
  unsigned char *items;
  size_t count, capacity, element_size;
};

struct space {
  uintptr_t base;
  size_t size;    /* usable bytes (the reservation size for EMU_SPACE_RESERVED) */
  size_t span;    /* address space taken, including the guard page */
  size_t charged; /* bytes counted against the quota */
  enum emu_space_kind kind;
  bool external; /* a VMM reservation mmapped outside the region */
  int device;
};

struct mapping {
  uintptr_t base;
  size_t size;
  uint64_t handle;
  unsigned access; /* devices that may touch it (bit per device); host-accessible when non-zero */
  int device;      /* the physical memory's */
};

struct host_range {
  uintptr_t base;
  size_t size;
  bool owned; /* from emu_host_alloc (munmap on free), else registered */
};

struct physical {
  int fd; /* -1 once released */
  size_t size;
  int device;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t region_base, region_end, cursor;
static size_t quota_bytes, used_bytes[EMU_MAX_DEVICES];
static int used_fd = -1, device_count = 1;

/* CUDAW_EMU_USED_FILE: what nvidia-smi is for a GPU, for another process to read: one line with
 * the bytes in use on each device, rewritten whenever they change. Called with lock held. */
static void publish_used_locked(void) {
  if (used_fd < 0) return;
  char line[EMU_MAX_DEVICES * 24 + 2];
  size_t n = 0;
  for (int d = 0; d < device_count && n < sizeof line; d++)
    n += (size_t)snprintf(line + n, sizeof line - n, "%s%zu", d ? " " : "", used_bytes[d]);
  if (n + 1 < sizeof line) line[n++] = '\n';
  if (pwrite(used_fd, line, n, 0) == (ssize_t)n) {
    int rc = ftruncate(used_fd, (off_t)n); /* a reader may see the old tail for a moment */
    (void)rc;
  }
}

void emu_memory_publish_to(int fd) {
  pthread_mutex_lock(&lock);
  used_fd = fd;
  publish_used_locked();
  pthread_mutex_unlock(&lock);
}
static struct sorted_vector spaces = {.element_size = sizeof(struct space)};
static struct sorted_vector mappings = {.element_size = sizeof(struct mapping)};
static struct sorted_vector hosts = {.element_size = sizeof(struct host_range)};
static struct physical *physicals;
static size_t physical_count, physical_capacity;

/* Charges size bytes to device: against this process's quota, or with CUDAW_EMU_SHARED=1 against
 * the one capacity every process shares (emu_shared.c). -ENOMEM when it does not fit. Locked. */
static int charge_locked(int device, size_t size) {
  if (emu_shared_active()) {
    int err = emu_shared_charge(device, (long long)size, quota_bytes);
    if (err == 0) used_bytes[device] += size;
    if (err == 0) publish_used_locked();
    return err;
  }
  if (size > quota_bytes - used_bytes[device]) return -ENOMEM;
  used_bytes[device] += size;
  publish_used_locked();
  return 0;
}

static void uncharge_locked(int device, size_t size) {
  if (emu_shared_active()) emu_shared_charge(device, -(long long)size, quota_bytes);
  used_bytes[device] -= size;
  publish_used_locked();
}

static uintptr_t align_up(uintptr_t value, size_t alignment) {
  return (value + alignment - 1) & ~(uintptr_t)(alignment - 1);
}

static void *item(const struct sorted_vector *v, size_t index) {
  return v->items + index * v->element_size;
}

static uintptr_t item_base(const struct sorted_vector *v, size_t index) {
  uintptr_t base;
  memcpy(&base, item(v, index), sizeof base);
  return base;
}

/* Index of the last item whose base <= address, or -1. */
static long find_at_or_before(const struct sorted_vector *v, uintptr_t address) {
  size_t low = 0, high = v->count;
  while (low < high) {
    size_t middle = low + (high - low) / 2;
    if (item_base(v, middle) <= address) low = middle + 1;
    else high = middle;
  }
  return (long)low - 1;
}

static int insert_sorted(struct sorted_vector *v, const void *element) {
  if (v->count == v->capacity) {
    size_t capacity = v->capacity ? v->capacity * 2 : 64;
    unsigned char *items = realloc(v->items, capacity * v->element_size);
    if (!items) return -ENOMEM;
    v->items = items;
    v->capacity = capacity;
  }
  uintptr_t base;
  memcpy(&base, element, sizeof base);
  size_t index = (size_t)(find_at_or_before(v, base) + 1);
  memmove(item(v, index + 1), item(v, index), (v->count - index) * v->element_size);
  memcpy(item(v, index), element, v->element_size);
  v->count++;
  return 0;
}

static void remove_at(struct sorted_vector *v, size_t index) {
  memmove(item(v, index), item(v, index + 1), (v->count - index - 1) * v->element_size);
  v->count--;
}

static struct space *space_at(size_t index) { return item(&spaces, index); }
static struct mapping *mapping_at(size_t index) { return item(&mappings, index); }

/* Turns [base, base+size) back into inaccessible, unbacked address space. */
static void make_inaccessible(uintptr_t base, size_t size) {
  mmap((void *)base, size, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
       -1, 0);
}

static bool place_lowest;

int emu_memory_init(size_t quota, int devices, bool lowest) {
  place_lowest = lowest;
  size_t all = quota * (size_t)devices;
  size_t region = all > REGION_MIN_BYTES / 4 ? align_up(all * 4, PAGE) : REGION_MIN_BYTES;
  void *base = mmap(NULL, region, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return -errno;
  /* Device addresses start 2 MiB-aligned, like the real ones. */
  region_base = align_up((uintptr_t)base, EMU_VMM_GRANULARITY);
  region_end = (uintptr_t)base + region;
  cursor = region_base;
  quota_bytes = quota;
  device_count = devices;
  return 0;
}

/* First address >= from (aligned) where span bytes fit below limit between existing spaces. */
static bool find_gap(uintptr_t from, uintptr_t limit, size_t span, size_t alignment,
                     uintptr_t *out) {
  uintptr_t at = align_up(from, alignment);
  long index = find_at_or_before(&spaces, at);
  if (index >= 0) {
    struct space *s = space_at((size_t)index);
    if (s->base + s->span > at) at = align_up(s->base + s->span, alignment);
  }
  for (size_t next = (size_t)(index + 1); next < spaces.count; next++) {
    struct space *s = space_at(next);
    if (at >= limit || limit - at < span) return false;
    if (at + span <= s->base) break;
    if (s->base + s->span > at) at = align_up(s->base + s->span, alignment);
  }
  if (at >= limit || limit - at < span) return false;
  *out = at;
  return true;
}

/* Places span bytes in the region at or after the cursor, wrapping around once. */
static int place(size_t span, size_t alignment, uintptr_t *out) {
  if (span > region_end - region_base) return -ENOMEM;
  if (!find_gap(place_lowest ? region_base : cursor, region_end, span, alignment, out) &&
      !find_gap(region_base, region_end, span, alignment, out))
    return -ENOMEM;
  cursor = *out + span;
  return 0;
}

int emu_memory_alloc(size_t size, enum emu_space_kind kind, void **out) {
  if (size == 0 || size > ((size_t)1 << 46)) return size ? -ENOMEM : -EINVAL;
  size_t rounded = align_up(size, PAGE);
  int device = emu_current_device();
  pthread_mutex_lock(&lock);
  int err = -ENOMEM;
  uintptr_t base;
  if ((err = charge_locked(device, rounded)) != 0) goto out;
  /* One guard page after each allocation makes small overruns fault in host kernels too. */
  if ((err = place(rounded + PAGE, rounded >= EMU_VMM_GRANULARITY ? EMU_VMM_GRANULARITY : PAGE,
                   &base)) != 0)
    goto out;
  if (mmap((void *)base, rounded, PROT_READ | PROT_WRITE,
           MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
    err = -ENOMEM;
    goto uncharge;
  }
  struct space s = {.base = base, .size = size, .span = rounded + PAGE, .charged = rounded,
                    .kind = kind, .device = device};
  if ((err = insert_sorted(&spaces, &s)) != 0) {
    make_inaccessible(base, rounded);
    goto uncharge;
  }
  *out = (void *)base;
  goto out;
uncharge:
  uncharge_locked(device, rounded);
out:
  pthread_mutex_unlock(&lock);
  return err;
}

int emu_memory_free(void *ptr, unsigned kind_mask) {
  pthread_mutex_lock(&lock);
  int err = -EINVAL;
  long index = find_at_or_before(&spaces, (uintptr_t)ptr);
  if (index >= 0) {
    struct space *s = space_at((size_t)index);
    if (s->base == (uintptr_t)ptr && s->kind != EMU_SPACE_RESERVED &&
        (kind_mask & EMU_KIND_BIT(s->kind))) {
      make_inaccessible(s->base, s->charged);
      uncharge_locked(s->device, s->charged);
      remove_at(&spaces, (size_t)index);
      err = 0;
    }
  }
  pthread_mutex_unlock(&lock);
  return err;
}

/* Valid device memory containing address; for VMM, the run of adjacent accessible mappings. */
static int lookup_locked(uintptr_t address, struct emu_range *out) {
  long index = find_at_or_before(&spaces, address);
  if (index < 0) return -ENOENT;
  struct space *s = space_at((size_t)index);
  if (address - s->base >= s->size) return -ENOENT;
  if (s->kind != EMU_SPACE_RESERVED) {
    *out = (struct emu_range){s->base, s->size, s->kind, false, s->device, 0};
    return 0;
  }
  long first = find_at_or_before(&mappings, address);
  if (first < 0) return -ENOENT;
  struct mapping *m = mapping_at((size_t)first);
  if (address - m->base >= m->size || !m->access) return -ENOENT;
  /* A run of adjacent mappings of one device with the same access reads as one range. */
  uintptr_t start = m->base, end = m->base + m->size;
  for (long i = first - 1; i >= 0; i--) {
    struct mapping *prev = mapping_at((size_t)i);
    if (prev->base + prev->size != start || prev->access != m->access ||
        prev->device != m->device || prev->base < s->base)
      break;
    start = prev->base;
  }
  for (size_t i = (size_t)first + 1; i < mappings.count; i++) {
    struct mapping *next = mapping_at(i);
    if (next->base != end || next->access != m->access || next->device != m->device ||
        end >= s->base + s->size)
      break;
    end += next->size;
  }
  *out = (struct emu_range){start, end - start, EMU_SPACE_RESERVED, true, m->device, m->access};
  return 0;
}

int emu_memory_lookup(const void *ptr, struct emu_range *out) {
  pthread_mutex_lock(&lock);
  int err = lookup_locked((uintptr_t)ptr, out);
  pthread_mutex_unlock(&lock);
  return err;
}

/* Whether address belongs to the device address space (the region or a VMM reservation). */
static bool is_device_address(uintptr_t address) {
  if (address >= region_base && address < region_end) return true;
  long index = find_at_or_before(&spaces, address);
  return index >= 0 && address - space_at((size_t)index)->base < space_at((size_t)index)->size;
}

static bool range_inside(uintptr_t base, size_t size, uintptr_t start, size_t extent) {
  return start >= base && start - base <= size && extent <= size - (start - base);
}

static int host_lookup_locked(uintptr_t address, uintptr_t *base, size_t *size) {
  long index = find_at_or_before(&hosts, address);
  if (index < 0) return -ENOENT;
  struct host_range *h = item(&hosts, (size_t)index);
  if (address - h->base >= h->size) return -ENOENT;
  *base = h->base;
  *size = h->size;
  return 0;
}

/* Whether a copy run by `device` reaches the memory of range (see emu_memory_copy2d): 0, -EFAULT
 * when the device that touches it has no access, -EINVAL for VMM memory of another device that a
 * plain copy cannot stage (as the real driver answers). */
static int copy_reaches(const struct emu_range *range, int device, bool peer_copy) {
  if (!range->mapped) return 0; /* cudaMalloc memory: the runtime stages where it must */
  if (range->access & (1u << device)) return 0;
  if (range->device == device || emu_peer_enabled(device, range->device)) return -EFAULT;
  if (!peer_copy) return -EINVAL;
  return range->access & (1u << range->device) ? 0 : -EFAULT;
}

/* Checks one side of a copy run by device: extent bytes from ptr. */
static int check_side(const void *ptr, size_t extent, enum emu_side side, int device,
                      bool peer_copy) {
  if (extent == 0) return 0;
  if (!ptr) return -EINVAL;
  uintptr_t address = (uintptr_t)ptr;
  struct emu_range range;
  if (lookup_locked(address, &range) == 0) {
    if (!range_inside(range.base, range.size, address, extent)) return -EINVAL;
    return copy_reaches(&range, device, peer_copy);
  }
  if (is_device_address(address)) return -EINVAL; /* freed, never allocated, or unmapped */
  if (side != EMU_SIDE_DEVICE) return 0;
  /* Page-locked and registered host memory is device-accessible (unified addressing). */
  uintptr_t base;
  size_t size;
  if (host_lookup_locked(address, &base, &size) == 0 && range_inside(base, size, address, extent))
    return 0;
  return -EINVAL;
}

static size_t extent_2d(size_t pitch, size_t width, size_t height) {
  return height == 0 || width == 0 ? 0 : (height - 1) * pitch + width;
}

int emu_memory_copy2d(void *dst, size_t dpitch, enum emu_side dst_side, const void *src,
                      size_t spitch, enum emu_side src_side, size_t width, size_t height) {
  pthread_mutex_lock(&lock);
  int device = emu_current_device();
  int err = check_side(dst, extent_2d(dpitch, width, height), dst_side, device, false);
  if (!err) err = check_side(src, extent_2d(spitch, width, height), src_side, device, false);
  if (!err && width && height) {
    /* memcpy unless the ranges overlap: a sanitizer's memmove is a byte loop (memcpy its libc's),
     * which made every test's copies through the emulated device several times slower there. */
    uintptr_t to = (uintptr_t)dst, from = (uintptr_t)src;
    bool apart = to + extent_2d(dpitch, width, height) <= from ||
                 from + extent_2d(spitch, width, height) <= to;
    for (size_t row = 0; row < height; row++) {
      char *row_dst = (char *)dst + row * dpitch;
      const char *row_src = (const char *)src + row * spitch;
      if (apart) memcpy(row_dst, row_src, width);
      else memmove(row_dst, row_src, width);
    }
  }
  pthread_mutex_unlock(&lock);
  return err;
}

int emu_memory_copy_peer(int device, void *dst, const void *src, size_t count) {
  pthread_mutex_lock(&lock);
  int err = check_side(dst, count, EMU_SIDE_DEVICE, device, true);
  if (!err) err = check_side(src, count, EMU_SIDE_DEVICE, device, true);
  if (!err && count) memmove(dst, src, count);
  pthread_mutex_unlock(&lock);
  return err;
}

int emu_memory_set2d(void *dst, size_t pitch, int value, size_t width, size_t height) {
  int device = emu_current_device();
  pthread_mutex_lock(&lock);
  int err = check_side(dst, extent_2d(pitch, width, height), EMU_SIDE_DEVICE, device, false);
  if (!err && width && height) {
    for (size_t row = 0; row < height; row++) memset((char *)dst + row * pitch, value, width);
  }
  pthread_mutex_unlock(&lock);
  return err;
}

int emu_memory_check(const void *ptr, size_t size, unsigned kind_mask) {
  pthread_mutex_lock(&lock);
  struct emu_range range;
  int err = -EINVAL;
  if (lookup_locked((uintptr_t)ptr, &range) == 0 && (kind_mask & EMU_KIND_BIT(range.kind)) &&
      range_inside(range.base, range.size, (uintptr_t)ptr, size))
    err = 0;
  pthread_mutex_unlock(&lock);
  return err;
}

int emu_memory_kernel_access(int device, const void *ptr, size_t size) {
  pthread_mutex_lock(&lock);
  struct emu_range range;
  int err = -EFAULT;
  if (lookup_locked((uintptr_t)ptr, &range) == 0 &&
      range_inside(range.base, range.size, (uintptr_t)ptr, size)) {
    if (range.mapped)
      err = range.access & (1u << device) ? 0 : -EFAULT;
    else if (range.kind != EMU_SPACE_DEVICE || range.device == device ||
             emu_peer_enabled(device, range.device))
      err = 0;
  }
  pthread_mutex_unlock(&lock);
  return err;
}

void emu_memory_info(int device, size_t *used, size_t *quota) {
  pthread_mutex_lock(&lock);
  *used = emu_shared_active() ? emu_shared_used(device) : used_bytes[device];
  *quota = quota_bytes;
  pthread_mutex_unlock(&lock);
}

int emu_memory_charge(int device, long long delta) {
  pthread_mutex_lock(&lock);
  int err = 0;
  if (delta > 0) err = charge_locked(device, (size_t)delta);
  else uncharge_locked(device, (size_t)-delta);
  pthread_mutex_unlock(&lock);
  return err;
}

void emu_memory_reset(int device) {
  pthread_mutex_lock(&lock);
  for (size_t i = spaces.count; i-- > 0;) {
    struct space *s = space_at(i);
    if ((s->kind == EMU_SPACE_DEVICE || s->kind == EMU_SPACE_MANAGED) && s->device == device) {
      make_inaccessible(s->base, s->charged);
      uncharge_locked(device, s->charged);
      remove_at(&spaces, i);
    }
  }
  pthread_mutex_unlock(&lock);
}

/* ---- page-locked and registered host memory ---- */

static bool host_overlaps(uintptr_t base, size_t size) {
  long index = find_at_or_before(&hosts, base + size - 1);
  if (index < 0) return false;
  struct host_range *h = item(&hosts, (size_t)index);
  return h->base + h->size > base;
}

int emu_host_alloc(size_t size, unsigned flags, void **out) {
  (void)flags;
  size_t rounded = align_up(size ? size : 1, PAGE);
  void *p = mmap(NULL, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -ENOMEM;
  struct host_range h = {(uintptr_t)p, rounded, true};
  pthread_mutex_lock(&lock);
  int err = insert_sorted(&hosts, &h);
  pthread_mutex_unlock(&lock);
  if (err) {
    munmap(p, rounded);
    return err;
  }
  *out = p;
  return 0;
}

/* Removes the host range starting at ptr with the given ownership; its size or 0. */
static size_t host_remove(void *ptr, bool owned) {
  size_t size = 0;
  pthread_mutex_lock(&lock);
  long index = find_at_or_before(&hosts, (uintptr_t)ptr);
  if (index >= 0) {
    struct host_range *h = item(&hosts, (size_t)index);
    if (h->base == (uintptr_t)ptr && h->owned == owned) {
      size = h->size;
      remove_at(&hosts, (size_t)index);
    }
  }
  pthread_mutex_unlock(&lock);
  return size;
}

int emu_host_free(void *ptr) {
  size_t size = host_remove(ptr, true);
  if (!size) return -EINVAL;
  munmap(ptr, size);
  return 0;
}

int emu_host_register(void *ptr, size_t size, unsigned flags) {
  (void)flags;
  if (!ptr || !size) return -EINVAL;
  pthread_mutex_lock(&lock);
  int err = -EEXIST;
  if (!host_overlaps((uintptr_t)ptr, size) && !is_device_address((uintptr_t)ptr)) {
    struct host_range h = {(uintptr_t)ptr, size, false};
    err = insert_sorted(&hosts, &h);
  }
  pthread_mutex_unlock(&lock);
  return err;
}

int emu_host_unregister(void *ptr) { return host_remove(ptr, false) ? 0 : -ENOENT; }

int emu_host_lookup(const void *ptr, uintptr_t *base, size_t *size) {
  pthread_mutex_lock(&lock);
  int err = host_lookup_locked((uintptr_t)ptr, base, size);
  pthread_mutex_unlock(&lock);
  return err;
}

/* ---- VMM: reservations are spaces, physical memory is a memfd, mappings map it ---- */

/* The reservation that holds all of [address, address+size), or NULL. */
static struct space *reservation_of(uintptr_t address, size_t size) {
  long index = find_at_or_before(&spaces, address);
  if (index < 0) return NULL;
  struct space *s = space_at((size_t)index);
  if (s->kind != EMU_SPACE_RESERVED || !range_inside(s->base, s->size, address, size)) return NULL;
  return s;
}

int emu_vmm_reserve(size_t size, size_t alignment, uintptr_t hint, uintptr_t *out) {
  if (alignment == 0) alignment = EMU_VMM_GRANULARITY;
  if (!size || size % EMU_VMM_GRANULARITY || (alignment & (alignment - 1))) return -EINVAL;
  if (alignment < EMU_VMM_GRANULARITY) alignment = EMU_VMM_GRANULARITY;
  pthread_mutex_lock(&lock);
  struct space s = {.size = size, .span = size, .kind = EMU_SPACE_RESERVED};
  uintptr_t at;
  int err = 0;
  if (hint && hint % alignment == 0 && find_gap(hint, region_end, size, alignment, &at) &&
      at == hint && hint >= region_base) {
    s.base = at;
  } else if (place(size, alignment, &at) == 0) {
    s.base = at;
  } else {
    /* Too big for the region: reserve alongside it. */
    size_t total = size + alignment;
    void *p = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      err = -ENOMEM;
      goto out;
    }
    at = align_up((uintptr_t)p, alignment);
    if (at > (uintptr_t)p) munmap(p, at - (uintptr_t)p);
    if ((uintptr_t)p + total > at + size) munmap((void *)(at + size), (uintptr_t)p + total - at - size);
    s.base = at;
    s.external = true;
  }
  if ((err = insert_sorted(&spaces, &s)) != 0) goto out;
  *out = s.base;
out:
  pthread_mutex_unlock(&lock);
  return err;
}

int emu_vmm_free(uintptr_t address, size_t size) {
  pthread_mutex_lock(&lock);
  int err = -EINVAL;
  struct space *s = reservation_of(address, size);
  long index = find_at_or_before(&spaces, address);
  long mapped = find_at_or_before(&mappings, address + size - 1);
  bool has_mappings = mapped >= 0 && mapping_at((size_t)mapped)->base +
                                             mapping_at((size_t)mapped)->size > address;
  if (s && s->base == address && s->size == size && !has_mappings) {
    if (s->external) munmap((void *)s->base, s->size);
    remove_at(&spaces, (size_t)index);
    err = 0;
  }
  pthread_mutex_unlock(&lock);
  return err;
}

int emu_vmm_create(int device, size_t size, uint64_t *handle) {
  if (!size || size % EMU_VMM_GRANULARITY) return -EINVAL;
  pthread_mutex_lock(&lock);
  int err = -ENOMEM, fd = -1;
  if (charge_locked(device, size) != 0) goto out;
  if (physical_count == physical_capacity) {
    size_t capacity = physical_capacity ? physical_capacity * 2 : 64;
    struct physical *grown = realloc(physicals, capacity * sizeof *grown);
    if (!grown) goto uncharge;
    physicals = grown;
    physical_capacity = capacity;
  }
  fd = memfd_create("cudaw-emu-physical", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
    if (fd >= 0) close(fd);
    goto uncharge;
  }
  physicals[physical_count] = (struct physical){fd, size, device};
  *handle = ++physical_count; /* handles are never reused */
  err = 0;
  goto out;
uncharge:
  uncharge_locked(device, size);
out:
  pthread_mutex_unlock(&lock);
  return err;
}

static struct physical *physical_of(uint64_t handle) {
  if (handle == 0 || handle > physical_count || physicals[handle - 1].fd < 0) return NULL;
  return &physicals[handle - 1];
}

int emu_vmm_release(uint64_t handle) {
  pthread_mutex_lock(&lock);
  struct physical *p = physical_of(handle);
  if (p) {
    close(p->fd); /* live mappings keep the pages until unmapped, as on the real device */
    p->fd = -1;
    uncharge_locked(p->device, p->size);
  }
  pthread_mutex_unlock(&lock);
  return p ? 0 : -EINVAL;
}

/* Indexes [first, last) of the mappings overlapping [address, address+size). */
static void mappings_overlapping(uintptr_t address, size_t size, size_t *first, size_t *last) {
  long index = find_at_or_before(&mappings, address);
  size_t i = index < 0 ? 0 : (size_t)index;
  if (i < mappings.count && mapping_at(i)->base + mapping_at(i)->size <= address) i++;
  *first = i;
  while (i < mappings.count && mapping_at(i)->base < address + size) i++;
  *last = i;
}

/* Whether whole mappings [first, last) exactly tile [address, address+size). */
static bool mappings_tile(uintptr_t address, size_t size, size_t first, size_t last) {
  uintptr_t at = address;
  for (size_t i = first; i < last; i++) {
    if (mapping_at(i)->base != at) return false;
    at += mapping_at(i)->size;
  }
  return first < last && at == address + size;
}

int emu_vmm_map(uintptr_t address, size_t size, size_t offset, uint64_t handle) {
  if (!size || size % EMU_VMM_GRANULARITY || offset % EMU_VMM_GRANULARITY ||
      address % EMU_VMM_GRANULARITY)
    return -EINVAL;
  pthread_mutex_lock(&lock);
  int err = -EINVAL;
  struct physical *p = physical_of(handle);
  size_t first, last;
  mappings_overlapping(address, size, &first, &last);
  if (!p || offset > p->size || size > p->size - offset || !reservation_of(address, size) ||
      first != last)
    goto out;
  if (mmap((void *)address, size, PROT_NONE, MAP_FIXED | MAP_SHARED, p->fd, (off_t)offset) ==
      MAP_FAILED) {
    err = -errno;
    goto out;
  }
  struct mapping m = {address, size, handle, 0, p->device};
  if ((err = insert_sorted(&mappings, &m)) != 0) make_inaccessible(address, size);
out:
  pthread_mutex_unlock(&lock);
  return err;
}

int emu_vmm_set_access(uintptr_t address, size_t size, unsigned changed, unsigned readable) {
  pthread_mutex_lock(&lock);
  int err = -EINVAL;
  size_t first, last;
  mappings_overlapping(address, size, &first, &last);
  if (size && mappings_tile(address, size, first, last)) {
    err = 0;
    /* The host sees a mapping while any device may: kernels run on the host. */
    for (size_t i = first; i < last && !err; i++) {
      struct mapping *m = mapping_at(i);
      unsigned access = (m->access & ~changed) | (readable & changed);
      if (mprotect((void *)m->base, m->size, access ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
        err = -errno;
      else
        m->access = access;
    }
  }
  pthread_mutex_unlock(&lock);
  return err;
}

/* ---- reads in flight: asynchronous copies out of VMM mappings ---- */

/* The emu copies at once, but a GPU's DMA reads when the stream gets to it, and a mapping unmapped
 * under it faults the context. So a copy out of a VMM mapping on a created stream counts as in
 * flight until its stream (or an event recorded after it, or the device) is synchronised, and an
 * unmap of it meanwhile is a device fault: said on stderr, and every later synchronisation fails
 * with cudaErrorIllegalAddress, as a lost context's would. */
#define READS_MAX 256

static struct read_in_flight {
  const void *stream;
  uintptr_t base;
  size_t size;
  uint64_t sequence;
} reads[READS_MAX];
static size_t read_count;
static uint64_t read_sequence;
static bool device_faulted;

void emu_memory_note_read(const void *stream, const void *src, size_t size) {
  pthread_mutex_lock(&lock);
  struct emu_range range;
  if (size && lookup_locked((uintptr_t)src, &range) == 0 && range.mapped) {
    if (read_count == READS_MAX) memmove(reads, reads + 1, --read_count * sizeof *reads);
    reads[read_count++] = (struct read_in_flight){stream, (uintptr_t)src, size, ++read_sequence};
  }
  pthread_mutex_unlock(&lock);
}

uint64_t emu_memory_read_mark(void) {
  pthread_mutex_lock(&lock);
  uint64_t mark = read_sequence;
  pthread_mutex_unlock(&lock);
  return mark;
}

int emu_memory_reads_done(const void *stream, bool every_stream, uint64_t upto) {
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < read_count;) {
    if ((every_stream || reads[i].stream == stream) && reads[i].sequence <= upto)
      reads[i] = reads[--read_count];
    else
      i++;
  }
  int err = device_faulted ? -EFAULT : 0;
  pthread_mutex_unlock(&lock);
  return err;
}

/* Called with the lock held, before [address, address+size) is unmapped. */
static void fault_reads_in_flight(uintptr_t address, size_t size) {
  for (size_t i = 0; i < read_count;) {
    if (reads[i].base < address + size && reads[i].base + reads[i].size > address) {
      fprintf(stderr, "cudaw-emu: device fault: %#lx..%#lx unmapped while an asynchronous copy "
                      "still read it (a GPU's context would be lost)\n",
              (unsigned long)address, (unsigned long)(address + size));
      device_faulted = true;
      reads[i] = reads[--read_count];
    } else {
      i++;
    }
  }
}

int emu_vmm_unmap(uintptr_t address, size_t size) {
  pthread_mutex_lock(&lock);
  int err = -EINVAL;
  size_t first, last;
  mappings_overlapping(address, size, &first, &last);
  if (size && mappings_tile(address, size, first, last)) {
    fault_reads_in_flight(address, size);
    make_inaccessible(address, size);
    for (size_t i = last; i-- > first;) remove_at(&mappings, i);
    err = 0;
  }
  pthread_mutex_unlock(&lock);
  return err;
}
