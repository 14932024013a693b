/* Description: release/re-create round trip under the translate policy on the emulated device:
 * vmem over the real-runtime primitives (vmem_prims_cuda on the emu library), contents copied out
 * of every chunk, all device memory released and re-created at different real addresses (the emu
 * never reuses an address), contents copied back: every virtual address keeps every byte. */
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
  if (argc < 2) test_fail("usage: %s <libcudaw-emu.so>", argv[0]);
  emu = dlopen(argv[1], RTLD_NOW);
  if (!emu) test_fail("dlopen %s: %s", argv[1], dlerror());
  emu_memcpy = (cudaError_t (*)(void *, const void *, size_t, enum cudaMemcpyKind))resolve("cudaMemcpy");
  CHECK(emu_memcpy);

  const struct vmem_prims *prims;
  void *ctx;
  CHECK_EQ(vmem_prims_cuda(resolve, &prims, &ctx), 0);
  struct vmem_config config = {.policy = VMEM_TRANSLATE, .va_size = (uint64_t)8 << 30};
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
  for (int i = 0; i < before.count; i++) {
    CHECK_EQ(after.vaddr[i], before.vaddr[i]);
    CHECK(after.real[i] != before.real[i], "chunk %#lx kept its real address",
          (unsigned long)before.vaddr[i]);
    CHECK_EQ(emu_memcpy((void *)after.real[i], before.data[i], before.size[i],
                        cudaMemcpyHostToDevice), 0);
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
  printf("ok\n");
  return 0;
}
