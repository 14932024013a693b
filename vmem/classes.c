/* Size classes for small allocations. Up to 64 KiB every multiple of 512 bytes is a class (plus
 * 256), so a small allocation costs exactly what cudaMalloc's 512-byte rounding costs; from 64 KiB
 * to 1 MiB classes are 1/64 of a power of two apart (at most 1.6% rounding). A class's slab is the
 * fewest granules whose unusable tail is at most 1/32 of the slab. */
#include "internal.h"

#define FINE_LIMIT (64u << 10)
#define CLASS_MAX (1u << 20)
#define MAX_SLAB_GRANULES 16u

static uint32_t class_sizes[VMEM_MAX_CLASSES];
static uint8_t class_granules[VMEM_MAX_CLASSES];
static unsigned classes;

static uint32_t next_class(uint32_t size) {
  if (size < 512) return 512;
  uint32_t step = 512;
  if (size >= FINE_LIMIT) step = (1u << (31 - __builtin_clz(size))) / 64;
  return size + step;
}

void vmem_classes_init(uint64_t granule) {
  classes = 0;
  for (uint32_t size = VMEM_MIN_ALIGN; size <= CLASS_MAX; size = next_class(size)) {
    unsigned k = (unsigned)((size + granule - 1) / granule);
    while (k < MAX_SLAB_GRANULES && (k * granule % size) * 32 > k * granule) k++;
    class_sizes[classes] = size;
    class_granules[classes] = (uint8_t)k;
    classes++;
  }
}

unsigned vmem_class_count(void) { return classes; }
uint64_t vmem_class_max(void) { return CLASS_MAX; }
uint32_t vmem_class_size(unsigned size_class) { return class_sizes[size_class]; }
unsigned vmem_class_granules(unsigned size_class) { return class_granules[size_class]; }

unsigned vmem_class_of(uint64_t size) {
  if (size <= FINE_LIMIT) return size <= 256 ? 0 : (unsigned)((size + 511) / 512);
  unsigned lo = (unsigned)(FINE_LIMIT / 512), hi = classes - 1;
  while (lo < hi) {
    unsigned mid = (lo + hi) / 2;
    if (class_sizes[mid] < size) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
