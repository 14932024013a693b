/* Small allocations share arenas: one granule of device memory carved into 512-byte units, first
 * fit over a bitmap. 512 bytes is cudaMalloc's own rounding, so packed small allocations cost what
 * they cost natively, plus the unused tail of the last arena. Per unit the arena keeps the first
 * unit of the allocation covering it (interior-pointer lookup in O(1)) and, for first units, the
 * requested size. */
#include <errno.h>
#include <stdlib.h>

#include "internal.h"

int vmem_arena_init(struct chunk *c)
{
  c->is_arena = true;
  c->units = (uint32_t)(c->va_bytes / VMEM_UNIT);
  c->free_units = c->units;
  c->used_bits = calloc((c->units + 63) / 64, sizeof(uint64_t));
  c->first_unit = calloc(c->units, sizeof(uint32_t));
  c->unit_bytes = calloc(c->units, sizeof(uint32_t));
  return c->used_bits && c->first_unit && c->unit_bytes ? 0 : -ENOMEM;
}

void vmem_arena_fini(struct chunk *c)
{
  free(c->used_bits);
  free(c->first_unit);
  free(c->unit_bytes);
}

static bool unit_used(const struct chunk *c, uint32_t unit)
{
  return c->used_bits[unit / 64] >> (unit % 64) & 1;
}

/* Bits of word w that stand for units past the end read as used. */
static uint64_t used_word(const struct chunk *c, uint32_t w)
{
  uint64_t bits = c->used_bits[w];
  uint32_t end = c->units - w * 64;
  if (end < 64) bits |= ~0ull << end;
  return bits;
}

/* First run of n free units; -1 if none. Whole free or whole used words are skipped at once. */
static int64_t find_run(const struct chunk *c, uint32_t n)
{
  uint32_t words = (c->units + 63) / 64;
  uint64_t run_start = 0, run = 0;
  for (uint32_t w = 0; w < words; w++) {
    uint64_t used = used_word(c, w);
    if (used == ~0ull) {
      run = 0;
      continue;
    }
    uint32_t bit = 0;
    while (bit < 64) {
      uint64_t rest = used >> bit;
      uint32_t free_bits = rest ? (uint32_t)__builtin_ctzll(rest) : 64 - bit;
      if (free_bits) {
        if (run == 0) run_start = (uint64_t)w * 64 + bit;
        run += free_bits;
        if (run >= n) return (int64_t)run_start;
        bit += free_bits;
        if (bit >= 64) break;
        rest = used >> bit;
      }
      uint64_t ones = ~rest;
      uint32_t used_bits = ones ? (uint32_t)__builtin_ctzll(ones) : 64 - bit;
      if (used_bits > 64 - bit) used_bits = 64 - bit;
      bit += used_bits;
      run = 0;
    }
  }
  return -1;
}

static void mark(struct chunk *c, uint32_t first, uint32_t n, bool used)
{
  for (uint32_t u = first; u < first + n; u++) {
    if (used) c->used_bits[u / 64] |= 1ull << (u % 64);
    else c->used_bits[u / 64] &= ~(1ull << (u % 64));
    c->first_unit[u] = used ? first : 0;
  }
}

uint32_t vmem_arena_units(uint64_t size)
{
  return (uint32_t)((size + VMEM_UNIT - 1) / VMEM_UNIT);
}

int vmem_arena_take(struct chunk *c, uint64_t size, uintptr_t *vptr)
{
  uint32_t n = vmem_arena_units(size);
  if (n > c->free_units) return -ENOSPC;
  if (c->no_run_of && n >= c->no_run_of) return -ENOSPC;
  int64_t first = find_run(c, n);
  if (first < 0) {
    c->no_run_of = n;
    return -ENOSPC;
  }
  mark(c, (uint32_t)first, n, true);
  c->unit_bytes[first] = (uint32_t)size;
  c->free_units -= n;
  *vptr = c->vaddr + (uint64_t)first * VMEM_UNIT;
  return 0;
}

bool vmem_arena_find(const struct chunk *c, uint64_t offset, uint64_t *start, uint64_t *size)
{
  uint64_t unit = offset / VMEM_UNIT;
  if (unit >= c->units || !unit_used(c, (uint32_t)unit)) return false;
  uint32_t first = c->first_unit[unit];
  uint64_t begin = (uint64_t)first * VMEM_UNIT;
  if (offset - begin >= c->unit_bytes[first]) return false;
  *start = begin;
  *size = c->unit_bytes[first];
  return true;
}

void vmem_arena_give(struct chunk *c, uint64_t offset)
{
  uint32_t first = (uint32_t)(offset / VMEM_UNIT);
  uint32_t n = vmem_arena_units(c->unit_bytes[first]);
  mark(c, first, n, false);
  c->unit_bytes[first] = 0;
  c->free_units += n;
  c->no_run_of = 0;
}
