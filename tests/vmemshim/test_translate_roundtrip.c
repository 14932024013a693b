/* Description: release/re-create round trip under the translate policy on the emulated device:
 * vmem over the real-runtime primitives (vmem_prims_cuda on the emu library), contents copied out
 * of every chunk, all device memory released and re-created, contents copied back: every virtual
 * address keeps every byte. With CUDAW_EMU_ALLOC=lowest (the device hands freed addresses out
 * again) every chunk comes back at its old real address, moved_bytes is 0 and a pointer table kept
 * in device memory still leads to its data; by default (the emu never reuses an address: a forced
 * move) every chunk moves, moved_bytes counts all of them and the stored pointers are dead. With
 * the argument in_place (config.in_place) the emulated driver's cuMemAddressReserve grants the
 * old addresses, so nothing moves although the allocator never reuses one, and every byte comes
 * back in reserved, mapped ranges (vmem/home.c). */
#include <dlfcn.h>

#include "prims.h"
#include "test.h"
#include "vmem.h"

#include <cuda_runtime_api.h>
#include <string.h>

static void *emu;
static cudaError_t (*emu_memcpy)(void *, const void *, size_t, enum cudaMemcpyKind);

static void *resolve(const char *name) { return dlsym(emu, name); }

#define MAX_CHUNKS 64
struct snapshot {
  int count;
  uintptr_t vaddr[MAX_CHUNKS];
  uint64_t size[MAX_CHUNKS], real[MAX_CHUNKS];
  unsigned char *data[MAX_CHUNKS];
};

static int record(const struct vmem_chunk *chunk, void *ctx)
{
  struct snapshot *s = ctx;
  if (s->count == MAX_CHUNKS) return -1;
  int i = s->count++;
  s->vaddr[i] = chunk->vaddr;
  s->size[i] = chunk->size;
  s->real[i] = chunk->real;
  return chunk->state == VMEM_RESIDENT ? 0 : -2;
}

static void copy_out(struct snapshot *s)
{
  for (int i = 0; i < s->count; i++) {
    s->data[i] = malloc(s->size[i]);
    CHECK(s->data[i]);
    CHECK_EQ(emu_memcpy(s->data[i], (void *)s->real[i], s->size[i], cudaMemcpyDeviceToHost), 0);
  }
}

int main(int argc, char **argv)
{
  if (argc < 2) test_fail("usage: %s <libcudaw-emu.so> [in_place]", argv[0]);
  int in_place = argc > 2 && strcmp(argv[2], "in_place") == 0;
  emu = dlopen(argv[1], RTLD_NOW);
  if (!emu) test_fail("dlopen %s: %s", argv[1], dlerror());
  emu_memcpy = (cudaError_t (*)(void *, const void *, size_t, enum cudaMemcpyKind))resolve("cudaMemcpy");
  CHECK(emu_memcpy);

  const struct vmem_prims *prims;
  void *ctx;
  CHECK_EQ(vmem_prims_cuda(resolve, &prims, &ctx), 0);
  struct vmem_config config = {.policy = VMEM_TRANSLATE, .va_size = (uint64_t)8 << 30,
                               .in_place = in_place};
  CHECK_EQ(vmem_init(&config, prims, ctx), 0);
  CHECK_EQ(vmem_policy(), VMEM_TRANSLATE);

  /* Small (packed), medium and large allocations, each filled with its own pattern. */
  static const uint64_t sizes[] = {64, 256, 1000, 4096, 65536, 300000, 3 << 20, 9 << 20};
  enum { N = sizeof sizes / sizeof sizes[0] };
  void *v[N];
  unsigned char *expect[N];
  for (int i = 0; i < N; i++) {
    CHECK_EQ(vmem_alloc(0, sizes[i], 0, &v[i]), 0);
    expect[i] = malloc(sizes[i]);
    for (uint64_t k = 0; k < sizes[i]; k++) expect[i][k] = (unsigned char)(i * 37 + k * 13 + (k >> 9));
    void *real = vmem_translate(v[i]);
    CHECK(real && real != v[i], "translate gave %p for %p", real, v[i]);
    CHECK_EQ(emu_memcpy(real, expect[i], sizes[i], cudaMemcpyHostToDevice), 0);
  }

  /* A pointer table in device memory, as a library keeps one: v[0] holds the device address of
   * v[7] (what a kernel given the translated argument would store). */
  const char *alloc = getenv("CUDAW_EMU_ALLOC");
  int identity = (alloc && strcmp(alloc, "lowest") == 0) || in_place;
  uint64_t stored = (uintptr_t)vmem_translate(v[7]);
  CHECK_EQ(emu_memcpy(vmem_translate(v[0]), &stored, sizeof stored, cudaMemcpyHostToDevice), 0);
  memcpy(expect[0], &stored, sizeof stored); /* for the final comparison */

  struct snapshot before = {0}, after = {0};
  CHECK_EQ(vmem_for_each(record, &before), 0);
  CHECK(before.count >= 3, "%d chunks", before.count);
  copy_out(&before);

  CHECK_EQ(vmem_release_all(), 0);
  for (int i = 0; i < N; i++) CHECK(vmem_translate(v[i]) == NULL, "released %p still translates", v[i]);
  uint64_t shortfall = 1;
  CHECK_EQ(vmem_recreate_all(&shortfall), 0);
  CHECK_EQ(after.count, 0);
  CHECK_EQ(vmem_for_each(record, &after), 0);
  CHECK_EQ(after.count, before.count);
  uint64_t moved_expected = 0;
  for (int i = 0; i < before.count; i++) {
    CHECK_EQ(after.vaddr[i], before.vaddr[i]);
    if (identity)
      CHECK(after.real[i] == before.real[i], "chunk %#lx moved", (unsigned long)before.vaddr[i]);
    else
      CHECK(after.real[i] != before.real[i], "chunk %#lx kept its real address",
            (unsigned long)before.vaddr[i]);
    moved_expected += identity ? 0 : before.size[i];
    CHECK_EQ(emu_memcpy((void *)after.real[i], before.data[i], before.size[i],
                        cudaMemcpyHostToDevice), 0);
  }
  struct vmem_stats stats;
  CHECK_EQ(vmem_get_stats(-1, &stats), 0);
  CHECK_EQ(stats.moved_bytes, moved_expected);
  CHECK_EQ(stats.moved_chunks, identity ? 0 : (uint64_t)before.count);
  CHECK_EQ(stats.in_place_mapped_bytes, in_place ? stats.held_bytes : 0);
  CHECK(!in_place || stats.home_bytes >= stats.held_bytes, "reserved %llu bytes",
        (unsigned long long)stats.home_bytes);

  /* The device follows the stored pointer: the data in the identity case, a dead address (the
   * emulated device refuses it, as a GPU faults) after the move. */
  uint64_t table;
  CHECK_EQ(emu_memcpy(&table, vmem_translate(v[0]), sizeof table, cudaMemcpyDeviceToHost), 0);
  CHECK_EQ(table, stored);
  unsigned char first[16];
  cudaError_t followed = emu_memcpy(first, (void *)(uintptr_t)table, sizeof first,
                                    cudaMemcpyDeviceToHost);
  if (identity) {
    CHECK_EQ(followed, cudaSuccess);
    CHECK(memcmp(first, expect[7], sizeof first) == 0, "the stored pointer leads to v[7]'s data");
  } else {
    CHECK(followed != cudaSuccess, "a pointer to moved memory still reached memory");
  }

  /* Every byte of every allocation, read through its (new) translation. */
  for (int i = 0; i < N; i++) {
    void *real = vmem_translate(v[i]);
    CHECK(real != NULL);
    unsigned char *got = malloc(sizes[i]);
    CHECK_EQ(emu_memcpy(got, real, sizes[i], cudaMemcpyDeviceToHost), 0);
    CHECK(memcmp(got, expect[i], sizes[i]) == 0, "allocation %d (%lu bytes) changed", i,
          (unsigned long)sizes[i]);
    struct vmem_info info;
    CHECK_EQ(vmem_lookup((char *)v[i] + sizes[i] - 1, &info), 0);
    CHECK(info.base == v[i] && info.real == (uint64_t)(uintptr_t)real);
    free(got);
    free(expect[i]);
    CHECK_EQ(vmem_free(v[i], NULL), 0);
  }
  for (int i = 0; i < before.count; i++) free(before.data[i]);
  vmem_fini();
  printf("ok: %s, moved_bytes %llu in %llu chunks\n",
         in_place ? "in place" : identity ? "identity" : "forced move",
         (unsigned long long)stats.moved_bytes, (unsigned long long)stats.moved_chunks);
  return 0;
}
