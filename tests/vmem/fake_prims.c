/* Host-memory implementation of vmem's primitives. Plain device memory is carved from a large
 * PROT_NONE region per device with a bump pointer that never goes back, so a re-allocation always
 * gets a new real address (unless reuse_freed: then the lowest freed block of the same size comes
 * back first); physical memory is a memfd mapped over vmem's reservation. As on a GPU, plain
 * memory and reservations never overlap: dev_malloc skips reserved ranges, and a hint is honoured
 * only where no live block lies. */
#define _GNU_SOURCE
#include "fake_prims.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HEAP_BYTES (1ull << 40)
#define PAGE 4096u
#define BLOCK_MAGIC 0x666b6d656d626c6bull
#define MAX_RESERVATIONS 1024
#define MAX_FREED 4096

struct block_header {
  uint64_t magic, size, mapped;
  int device;
};

struct phys {
  int fd, device;
  uint64_t size;
};

struct reservation {
  uint64_t addr, size;
  int occupied;
};

struct fake {
  struct fake_config config;
  uint64_t device_bytes[4], used[4];
  char *heap[4];
  uint64_t bump[4];
  struct freed_block { uint64_t offset, mapped; } freed[4][MAX_FREED]; /* reuse_freed only */
  uint32_t freed_count[4];
  struct phys *phys;
  uint64_t phys_count, phys_capacity;
  struct reservation reservations[MAX_RESERVATIONS];
  struct live_block { uint64_t start, end; } *live; /* dev_malloc blocks, headers included */
  uint64_t live_count, live_capacity;
  uint64_t calls[FAKE_OPS], fail_at[FAKE_OPS], fail_more[FAKE_OPS];
};

static const int anon = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

/* Count the call; -ENOMEM when an injected failure is due. */
static int enter(struct fake *f, enum fake_op op) {
  int rc = 0;
  f->calls[op]++;
  f->calls[FAKE_ANY]++;
  if (f->fail_at[op] && f->calls[op] == f->fail_at[op]) {
    rc = -ENOMEM;
    f->fail_at[op] = f->fail_more[op] ? f->fail_at[op] + 1 : 0;
    if (f->fail_more[op]) f->fail_more[op]--;
  }
  if (f->fail_at[FAKE_ANY] && f->calls[FAKE_ANY] == f->fail_at[FAKE_ANY])
    rc = -ENOMEM, f->fail_at[FAKE_ANY] = 0;
  return rc;
}

static int device_count(void *ctx, int *count) {
  *count = ((struct fake *)ctx)->config.devices;
  return 0;
}

static int mem_info(void *ctx, int device, uint64_t *free_bytes, uint64_t *total) {
  struct fake *f = ctx;
  int rc = enter(f, FAKE_MEM_INFO);
  if (rc) return -EIO;
  if (device < 0 || device >= f->config.devices) return -EINVAL;
  *total = f->device_bytes[device];
  *free_bytes = f->used[device] < *total ? *total - f->used[device] : 0;
  return 0;
}

static int vmm_supported(void *ctx, int device) {
  (void)device;
  return ((struct fake *)ctx)->config.vmm ? 1 : 0;
}

static int granularity(void *ctx, int device, uint64_t *bytes) {
  (void)device;
  struct fake *f = ctx;
  if (!f->config.vmm) return -ENOSYS;
  *bytes = f->config.granule;
  return 0;
}

static uint64_t host_range(uint64_t size, uint64_t align, int keep) {
  char *p = mmap(NULL, size + align, PROT_NONE, anon, -1, 0);
  if (p == MAP_FAILED) return 0;
  uint64_t aligned = ((uint64_t)(uintptr_t)p + align - 1) / align * align;
  munmap(p, size + align);
  if (keep && mmap((void *)(uintptr_t)aligned, size, PROT_NONE, anon | MAP_FIXED_NOREPLACE, -1,
                   0) == MAP_FAILED)
    return 0;
  return aligned;
}

static bool overlaps(uint64_t a, uint64_t a_end, uint64_t b, uint64_t b_end) {
  return a < b_end && b < a_end;
}

/* The reservation overlapping [start, end), or NULL. */
static const struct reservation *reserved_in(const struct fake *f, uint64_t start, uint64_t end) {
  for (int i = 0; i < MAX_RESERVATIONS; i++) {
    const struct reservation *r = &f->reservations[i];
    if (r->size && overlaps(start, end, r->addr, r->addr + r->size)) return r;
  }
  return NULL;
}

static bool range_free(const struct fake *f, uint64_t start, uint64_t size) {
  if (reserved_in(f, start, start + size)) return false;
  for (uint64_t i = 0; i < f->live_count; i++)
    if (overlaps(start, start + size, f->live[i].start, f->live[i].end)) return false;
  return true;
}

static int va_reserve(void *ctx, uint64_t size, uint64_t align, uint64_t hint, uint64_t *addr) {
  struct fake *f = ctx;
  int rc = enter(f, FAKE_VA_RESERVE);
  if (rc) return rc;
  if (!f->config.vmm) return -ENOSYS;
  struct reservation *r = NULL;
  for (int i = 0; i < MAX_RESERVATIONS && !r; i++)
    if (f->reservations[i].size == 0) r = &f->reservations[i];
  if (!r) return -ENOMEM;
  uint64_t a = 0;
  int occupied = 0;
  if (f->config.hint == FAKE_HINT_FAIL && hint) return -ENOMEM;
  if (f->config.hint == FAKE_HINT_HONOR && hint && hint % align == 0 && range_free(f, hint, size))
    a = hint;
  else if (f->config.hint == FAKE_HINT_MOVE_OCCUPIED) a = host_range(size, align, occupied = 1);
  else a = host_range(size, align, 0);
  if (!a) return -ENOMEM;
  *r = (struct reservation){a, size, occupied};
  *addr = a;
  return 0;
}

static int va_free(void *ctx, uint64_t addr, uint64_t size) {
  struct fake *f = ctx;
  for (int i = 0; i < MAX_RESERVATIONS; i++) {
    struct reservation *r = &f->reservations[i];
    if (r->size && r->addr == addr && r->size == size) {
      if (r->occupied) munmap((void *)(uintptr_t)addr, size);
      r->size = 0;
      return 0;
    }
  }
  return -EINVAL;
}

static int phys_create(void *ctx, int device, uint64_t size, uint64_t *handle) {
  struct fake *f = ctx;
  int rc = enter(f, FAKE_PHYS_CREATE);
  if (rc) return rc;
  if (size % f->config.granule || device < 0 || device >= f->config.devices) return -EINVAL;
  if (f->used[device] + size > f->device_bytes[device]) return -ENOMEM;
  if (f->phys_count == f->phys_capacity) {
    uint64_t capacity = f->phys_capacity ? f->phys_capacity * 2 : 64;
    struct phys *grown = realloc(f->phys, capacity * sizeof(*grown));
    if (!grown) return -ENOMEM;
    f->phys = grown;
    f->phys_capacity = capacity;
  }
  int fd = memfd_create("fake-phys", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
    if (fd >= 0) close(fd);
    return -ENOMEM;
  }
  uint64_t h = 0;
  while (h < f->phys_count && f->phys[h].fd >= 0) h++;
  if (h == f->phys_count) f->phys_count++;
  f->phys[h] = (struct phys){fd, device, size};
  f->used[device] += size;
  *handle = h + 1;
  return 0;
}

static struct phys *phys_of(struct fake *f, uint64_t handle) {
  if (handle == 0 || handle > f->phys_count || f->phys[handle - 1].fd < 0) return NULL;
  return &f->phys[handle - 1];
}

static int phys_release(void *ctx, uint64_t handle) {
  struct fake *f = ctx;
  enter(f, FAKE_PHYS_RELEASE);
  struct phys *p = phys_of(f, handle);
  if (!p) return -EINVAL;
  close(p->fd);
  f->used[p->device] -= p->size;
  p->fd = -1;
  return 0;
}

static int map(void *ctx, uint64_t addr, uint64_t size, uint64_t handle) {
  struct fake *f = ctx;
  int rc = enter(f, FAKE_MAP);
  if (rc) return rc;
  struct phys *p = phys_of(f, handle);
  if (!p || p->size != size || addr % f->config.granule) return -EINVAL;
  void *m = mmap((void *)(uintptr_t)addr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd, 0);
  return m == MAP_FAILED ? -EINVAL : 0;
}

static int unmap(void *ctx, uint64_t addr, uint64_t size) {
  struct fake *f = ctx;
  int rc = enter(f, FAKE_UNMAP);
  if (rc) return -EIO;
  /* back to a PROT_NONE placeholder, as the reservation was before map */
  void *m = mmap((void *)(uintptr_t)addr, size, PROT_NONE, anon | MAP_FIXED, -1, 0);
  return m == MAP_FAILED ? -EINVAL : 0;
}

static int set_access(void *ctx, uint64_t addr, uint64_t size, int device) {
  struct fake *f = ctx;
  (void)device;
  int rc = enter(f, FAKE_SET_ACCESS);
  if (rc) return rc;
  return mprotect((void *)(uintptr_t)addr, size, PROT_READ | PROT_WRITE) ? -EINVAL : 0;
}

/* The host keeps its access (tests read "device" memory directly); only the call is counted. */
static int revoke_access(void *ctx, uint64_t addr, uint64_t size, int device) {
  (void)addr, (void)size, (void)device;
  return enter(ctx, FAKE_SET_ACCESS);
}

static int dev_malloc(void *ctx, int device, uint64_t size, uint64_t *real) {
  struct fake *f = ctx;
  int rc = enter(f, FAKE_DEV_MALLOC);
  if (rc) return rc;
  if (device < 0 || device >= f->config.devices || size == 0) return -EINVAL;
  if (f->used[device] + size > f->device_bytes[device]) return -ENOMEM;
  uint64_t mapped = PAGE + (size + PAGE - 1) / PAGE * PAGE;
  uint64_t heap = (uint64_t)(uintptr_t)f->heap[device];
  if (f->live_count == f->live_capacity) {
    uint64_t capacity = f->live_capacity ? f->live_capacity * 2 : 64;
    struct live_block *grown = realloc(f->live, capacity * sizeof *grown);
    if (!grown) return -ENOMEM;
    f->live = grown;
    f->live_capacity = capacity;
  }
  int reuse = -1;
  for (uint32_t i = 0; i < f->freed_count[device]; i++) {
    uint64_t at = heap + f->freed[device][i].offset;
    if (f->freed[device][i].mapped == mapped && !reserved_in(f, at, at + mapped) &&
        (reuse < 0 || f->freed[device][i].offset < f->freed[device][reuse].offset))
      reuse = (int)i;
  }
  if (reuse < 0) { /* past any reservation in the way, as a driver never hands reserved space out */
    const struct reservation *r;
    while ((r = reserved_in(f, heap + f->bump[device], heap + f->bump[device] + mapped)))
      f->bump[device] = (r->addr + r->size - heap + PAGE - 1) / PAGE * PAGE;
  }
  uint64_t offset = reuse >= 0 ? f->freed[device][reuse].offset : f->bump[device];
  if (reuse < 0 && f->bump[device] + mapped > HEAP_BYTES) return -ENOMEM;
  char *block = f->heap[device] + offset;
  if (mprotect(block, mapped, PROT_READ | PROT_WRITE)) return -ENOMEM;
  if (reuse >= 0) f->freed[device][reuse] = f->freed[device][--f->freed_count[device]];
  else f->bump[device] += mapped;
  f->live[f->live_count++] = (struct live_block){heap + offset, heap + offset + mapped};
  *(struct block_header *)block = (struct block_header){BLOCK_MAGIC, size, mapped, device};
  f->used[device] += size;
  *real = (uint64_t)(uintptr_t)(block + PAGE);
  return 0;
}

static int dev_free(void *ctx, int device, uint64_t real) {
  struct fake *f = ctx;
  enter(f, FAKE_DEV_FREE);
  if (device < 0 || device >= f->config.devices) return -EINVAL;
  char *block = (char *)(uintptr_t)real - PAGE;
  if (block < f->heap[device] || block >= f->heap[device] + f->bump[device]) return -EINVAL;
  struct block_header *h = (struct block_header *)block;
  if (h->magic != BLOCK_MAGIC || h->device != device) return -EINVAL;
  f->used[device] -= h->size;
  uint64_t mapped = h->mapped;
  for (uint64_t i = 0; i < f->live_count; i++)
    if (f->live[i].start == (uint64_t)(uintptr_t)block) {
      f->live[i] = f->live[--f->live_count];
      break;
    }
  h->magic = 0;
  madvise(block, mapped, MADV_DONTNEED);
  mprotect(block, mapped, PROT_NONE);
  if (f->config.reuse_freed && f->freed_count[device] < MAX_FREED)
    f->freed[device][f->freed_count[device]++] =
        (struct freed_block){(uint64_t)(block - f->heap[device]), mapped};
  return 0;
}

static const struct vmem_prims ops = {
    .device_count = device_count, .mem_info = mem_info,   .vmm_supported = vmm_supported,
    .granularity = granularity,   .va_reserve = va_reserve, .va_free = va_free,
    .phys_create = phys_create,   .phys_release = phys_release, .map = map,
    .unmap = unmap,               .set_access = set_access, .dev_malloc = dev_malloc,
    .dev_free = dev_free,         .revoke_access = revoke_access,
};

const struct vmem_prims *fake_prims(void) { return &ops; }

struct fake *fake_create(const struct fake_config *config) {
  if (config->devices < 1 || config->devices > 4) return NULL;
  struct fake *f = calloc(1, sizeof(*f));
  if (!f) return NULL;
  f->config = *config;
  if (!f->config.granule) f->config.granule = 2ull << 20;
  for (int d = 0; d < config->devices; d++) {
    f->device_bytes[d] = config->device_bytes;
    f->heap[d] = mmap(NULL, HEAP_BYTES, PROT_NONE, anon, -1, 0);
    if (f->heap[d] == MAP_FAILED) {
      f->heap[d] = NULL;
      fake_destroy(f);
      return NULL;
    }
  }
  return f;
}

void fake_destroy(struct fake *f) {
  if (!f) return;
  for (int d = 0; d < 4; d++)
    if (f->heap[d]) munmap(f->heap[d], HEAP_BYTES);
  for (uint64_t i = 0; i < f->phys_count; i++)
    if (f->phys[i].fd >= 0) close(f->phys[i].fd);
  for (int i = 0; i < MAX_RESERVATIONS; i++)
    if (f->reservations[i].size && f->reservations[i].occupied)
      munmap((void *)(uintptr_t)f->reservations[i].addr, f->reservations[i].size);
  free(f->phys);
  free(f->live);
  free(f);
}

void fake_fail(struct fake *f, enum fake_op op, uint64_t nth) {
  f->fail_at[op] = nth ? f->calls[op] + nth : 0;
  f->fail_more[op] = 0;
}
void fake_fail_run(struct fake *f, enum fake_op op, uint64_t nth, uint64_t count) {
  fake_fail(f, op, nth);
  f->fail_more[op] = count ? count - 1 : 0;
}
uint64_t fake_calls(const struct fake *f, enum fake_op op) { return f->calls[op]; }
uint64_t fake_used(const struct fake *f, int device) { return f->used[device]; }
void fake_set_device_bytes(struct fake *f, int device, uint64_t bytes) {
  f->device_bytes[device] = bytes;
}

int fake_reservations(const struct fake *f) {
  int n = 0;
  for (int i = 0; i < MAX_RESERVATIONS; i++) n += f->reservations[i].size != 0;
  return n;
}

int fake_reserved(const struct fake *f, uint64_t addr, uint64_t size) {
  for (int i = 0; i < MAX_RESERVATIONS; i++) {
    const struct reservation *r = &f->reservations[i];
    if (r->size && addr >= r->addr && addr - r->addr <= r->size && size <= r->size - (addr - r->addr))
      return 1;
  }
  return 0;
}
