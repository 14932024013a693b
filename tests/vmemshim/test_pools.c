/* Description: stream-ordered memory pools read as without cudaw (issue 21). The same program
 * runs natively on the emulated device and under cudaw (pools_compare.sh diffs the two
 * transcripts): it allocates and frees on two streams from the default pool and a created one,
 * synchronises, reads every pool attribute and cudaMemGetInfo, raises the release threshold,
 * trims, resets the high marks, switches the device's current pool and destroys a pool that
 * still has a block; then the same through the driver's calls (cuMemAllocAsync, cuMemPool*,
 * cuStreamSynchronize, cuMemGetAddressRange). It also checks the figures the H100's driver (580)
 * gave for this very program natively (32 MiB segments, used bytes and address ranges as asked,
 * segments with a live block kept), so that it fails by itself when pools do not behave. Also builds with nvcc for a GPU (same transcript
 * with and without cudaw there; the absolute checks are then skipped: the driver's steps are its
 * own). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "test.h"

#define MIB ((unsigned long long)1 << 20)

static int absolute = 1; /* check the emulated device's model figures */
static size_t free_at_start;

#define OK(call)                                                                               \
  do {                                                                                         \
    cudaError_t e_ = (call);                                                                   \
    if (e_ != cudaSuccess) test_fail("%s: %s (%d)", #call, cudaGetErrorName(e_), (int)e_);    \
  } while (0)

struct figures {
  unsigned long long reserved, reserved_high, used, used_high, threshold;
};

static struct figures read_pool(cudaMemPool_t pool)
{
  struct figures f;
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &f.reserved));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &f.reserved_high));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &f.used));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &f.used_high));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &f.threshold));
  return f;
}

static size_t free_now(void)
{
  size_t f, t;
  OK(cudaMemGetInfo(&f, &t));
  return f;
}

/* One transcript line: the pool's figures and how much less memory is free than at the start. */
static struct figures show(const char *step, const char *name, cudaMemPool_t pool)
{
  struct figures f = read_pool(pool);
  long long taken = (long long)free_at_start - (long long)free_now();
  int reuse[3];
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseFollowEventDependencies, &reuse[0]));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &reuse[1]));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &reuse[2]));
  printf("%-16s %-7s reserved %9llu high %9llu used %9llu high %9llu threshold %9llu "
         "reuse %d%d%d taken %lld\n",
         step, name, f.reserved, f.reserved_high, f.used, f.used_high, f.threshold, reuse[0],
         reuse[1], reuse[2], taken);
  return f;
}

static void expect(const struct figures *f, unsigned long long reserved, unsigned long long used)
{
  if (!absolute) return;
  CHECK(f->reserved == reserved, "reserved %llu, expected %llu", f->reserved, reserved);
  CHECK(f->used == used, "used %llu, expected %llu", f->used, used);
}

/* A driver function, as the runtime hands it out (cudaw's own under cudaw). */
static void *driver(const char *name)
{
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found;
  OK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || !fn) test_fail("no driver function %s", name);
  return fn;
}

#define DRIVER(name) ((__typeof__(&name))driver(#name))
#define CU_OK(call)                                                                            \
  do {                                                                                         \
    CUresult r_ = (call);                                                                      \
    if (r_ != CUDA_SUCCESS) test_fail("%s: %d", #call, (int)r_);                              \
  } while (0)

/* The same through the driver's calls, on the default pool (its release threshold is 64 MiB and
 * it holds one 32 MiB segment). */
static void driver_calls(cudaMemPool_t pool, cudaStream_t stream)
{
  CUmemoryPool dpool = NULL;
  CU_OK(DRIVER(cuDeviceGetDefaultMemPool)(&dpool, 0));
  CHECK((void *)dpool == (void *)pool, "the driver's default pool is not the runtime's");
  CUdeviceptr p = 0;
  CU_OK(DRIVER(cuMemAllocAsync)(&p, 3 * MIB - 100, (CUstream)stream));
  CUdeviceptr base = 0;
  size_t size = 0;
  CU_OK(DRIVER(cuMemGetAddressRange)(&base, &size, p + 4096));
  printf("%-16s base %s size %zu\n", "address range", base == p ? "=" : "!=", size);
  CHECK(base == p, "cuMemGetAddressRange did not answer the block's start");
  cuuint64_t used = 0, reserved = 0, runtime_used = 0;
  CU_OK(DRIVER(cuMemPoolGetAttribute)(dpool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
  CU_OK(DRIVER(cuMemPoolGetAttribute)(dpool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  OK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &runtime_used));
  printf("%-16s reserved %9llu used %9llu\n", "driver alloc", (unsigned long long)reserved,
         (unsigned long long)used);
  CHECK(used == runtime_used, "driver and runtime disagree: used %llu and %llu",
        (unsigned long long)used, (unsigned long long)runtime_used);
  if (absolute) CHECK(reserved == 32 * MIB && size == 3 * MIB - 100, "reserved %llu, block %zu",
                      (unsigned long long)reserved, size);
  CU_OK(DRIVER(cuMemFreeAsync)(p, (CUstream)stream));
  CU_OK(DRIVER(cuStreamSynchronize)((CUstream)stream));
  struct figures f = show("driver kept", "default", pool);
  expect(&f, 32 * MIB, 100000);
  CU_OK(DRIVER(cuMemPoolTrimTo)(dpool, 0));
  cuuint64_t zero = 0;
  CU_OK(DRIVER(cuMemPoolSetAttribute)(dpool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
  f = show("driver trimmed", "default", pool);
  expect(&f, 32 * MIB, 100000);
  CHECK(!absolute || f.reserved_high == 32 * MIB, "the driver did not reset the high mark");
}

static void expect_taken(long long bytes)
{
  if (!absolute) return;
  long long taken = (long long)free_at_start - (long long)free_now();
  CHECK(taken == bytes, "cudaMemGetInfo: %lld bytes taken, expected %lld", taken, bytes);
}

int main(int argc, char **argv)
{
  if (argc > 1 && strcmp(argv[1], "--relative") == 0) absolute = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) test_skip("no GPU");
  OK(cudaSetDevice(0));
  OK(cudaFree(0));
  cudaStream_t s1, s2;
  OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaMemPool_t pool, current;
  OK(cudaDeviceGetDefaultMemPool(&pool, 0));
  OK(cudaDeviceGetMemPool(&current, 0));
  CHECK(pool == current, "the current pool is not the default pool at start");
  free_at_start = free_now();
  struct figures f = show("start", "default", pool);
  expect(&f, 0, 0);

  /* All three share the first 32 MiB segment; used counts the bytes asked for. */
  void *a, *b, *c;
  OK(cudaMallocAsync(&a, 1000, s1));
  OK(cudaMallocAsync(&b, 3 * MIB, s1));
  OK(cudaMallocAsync(&c, 100000, s2));
  f = show("allocated", "default", pool);
  expect(&f, 32 * MIB, 1000 + 3 * MIB + 100000);
  expect_taken(32 * MIB);

  /* Freed blocks stay reserved until a synchronisation. */
  OK(cudaFreeAsync(b, s1));
  OK(cudaFreeAsync(a, s1));
  f = show("freed", "default", pool);
  expect(&f, 32 * MIB, 100000);
  expect_taken(32 * MIB);
  OK(cudaStreamSynchronize(s1));
  f = show("synced s1", "default", pool); /* the segment keeps c: it stays */
  expect(&f, 32 * MIB, 100000);
  CHECK(!absolute || f.reserved_high == 32 * MIB, "reserved high %llu", f.reserved_high);
  expect_taken(32 * MIB);

  /* Above a release threshold, a pool keeps what it reserved. */
  unsigned long long threshold = 64 * MIB;
  OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  void *d, *e;
  OK(cudaMallocAsync(&d, 5 * MIB, s2));
  OK(cudaMallocAsync(&e, 200, s2)); /* fits the first segment */
  show("allocated 5M", "default", pool);
  OK(cudaFreeAsync(d, s2));
  OK(cudaFreeAsync(e, s2));
  OK(cudaStreamSynchronize(s2));
  f = show("kept", "default", pool);
  expect(&f, 32 * MIB, 100000);
  expect_taken(32 * MIB);

  /* The same block size again on the same stream: it comes from the pool. */
  OK(cudaMallocAsync(&d, 5 * MIB, s2));
  f = show("again 5M", "default", pool);
  expect(&f, 32 * MIB, 100000 + 5 * MIB);
  OK(cudaFreeAsync(d, s2));
  OK(cudaDeviceSynchronize());

  /* Trimming gives back everything no live block needs, down to what is asked. */
  OK(cudaMemPoolTrimTo(pool, 4 * MIB));
  f = show("trimmed to 4M", "default", pool);
  expect(&f, 32 * MIB, 100000);
  OK(cudaMemPoolTrimTo(pool, 0));
  f = show("trimmed to 0", "default", pool);
  expect(&f, 32 * MIB, 100000);
  expect_taken(32 * MIB);

  /* High marks reset to the current figures; only 0 may be written. */
  unsigned long long zero = 0, five = 5;
  OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
  OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  cudaError_t refused = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &five);
  printf("set used high 5: %s\n", cudaGetErrorName(refused));
  CHECK(refused == cudaErrorInvalidValue, "a non-zero high mark was accepted");
  cudaGetLastError();
  refused = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &zero);
  printf("set reserved current: %s\n", cudaGetErrorName(refused));
  CHECK(refused == cudaErrorInvalidValue, "the reserved figure was writable");
  cudaGetLastError();
  int off = 0;
  OK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &off));
  f = show("highs reset", "default", pool);
  CHECK(!absolute || (f.reserved_high == 32 * MIB && f.used_high == 100000), "highs not reset");

  /* A created pool, then made the device's current pool: cudaMallocAsync takes from it. */
  struct cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t made;
  OK(cudaMemPoolCreate(&made, &props));
  void *g, *h, *k;
  OK(cudaMallocFromPoolAsync(&g, MIB, made, s2));
  show("from created", "created", made);
  f = show("from created", "default", pool);
  expect(&f, 32 * MIB, 100000);
  OK(cudaDeviceSetMemPool(0, made));
  OK(cudaDeviceGetMemPool(&current, 0));
  CHECK(current == made, "cudaDeviceSetMemPool did not take");
  OK(cudaMallocAsync(&h, 4096, s1));
  OK(cudaMallocAsync(&k, 3 * MIB, s1));
  f = show("current created", "created", made);
  expect(&f, 32 * MIB, MIB + 4096 + 3 * MIB);
  expect_taken(64 * MIB);
  OK(cudaFreeAsync(g, s2));
  OK(cudaFreeAsync(h, s1));
  OK(cudaStreamSynchronize(s2));
  f = show("created synced", "created", made);
  expect(&f, 32 * MIB, 3 * MIB);

  /* Destroyed with a block still allocated: the memory goes when the block is freed. */
  OK(cudaMemPoolDestroy(made));
  OK(cudaDeviceGetMemPool(&current, 0));
  CHECK(current == pool, "destroying the current pool did not restore the default pool");
  printf("%-16s taken %lld\n", "destroyed", (long long)free_at_start - (long long)free_now());
  OK(cudaFreeAsync(k, s1));
  OK(cudaStreamSynchronize(s1));
  printf("%-16s taken %lld\n", "destroyed freed", (long long)free_at_start - (long long)free_now());
  expect_taken(32 * MIB);

  driver_calls(pool, s1);

  /* Back to a threshold of 0: everything goes at the next synchronisation. */
  OK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &zero));
  OK(cudaFreeAsync(c, s2));
  show("freed last", "default", pool);
  OK(cudaDeviceSynchronize());
  f = show("end", "default", pool);
  expect(&f, 0, 0);
  expect_taken(0);
  OK(cudaStreamDestroy(s1));
  OK(cudaStreamDestroy(s2));
  printf("ok\n");
  return 0;
}
