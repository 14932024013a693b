// Description: the premise of re-creating memory at its old addresses with VMM (issue 21,
// vmem/home.c), checked on a real device without cudaw. cudaMalloc a few sizes (256 B, 3 MiB,
// 64 MiB, 1 GiB, and a 256 B block whose neighbour in the same granule stays allocated), fill
// each with a kernel, cudaFree them, then ask cuMemAddressReserve for the granule-aligned range
// that covers each old block, with the old aligned-down address as the hint. Prints, per block,
// whether the driver granted exactly that address; maps physical memory where it did (elsewhere
// too: mapping the address it chose shows the calls work) and writes and reads it back with
// kernels. Also reported: whether a cudaMalloc made while the ranges are reserved lands in one
// (it must not: vmem relies on it). The 256 B block with a live neighbour runs in a phase of its
// own. A refused hint is a finding, not a failure: it fails (exit 1) only on a CUDA error or data
// that does not read back; exit 77 without a GPU (or without VMM). Driver functions come through cudaGetDriverEntryPointByVersion,
// as vmem/prims_cuda.c gets them (libcuda is never linked).
#include <cuda.h>
#include <string.h>

#include "gpu_common.h"

#define ENTRY_POINT_VERSION 12000

typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*address_free_fn)(CUdeviceptr, size_t);
typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*set_access_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*granularity_fn)(size_t *, const CUmemAllocationProp *,
                                   CUmemAllocationGranularity_flags);

static struct {
  reserve_fn reserve;
  address_free_fn address_free;
  create_fn create;
  release_fn release;
  map_fn map;
  unmap_fn unmap;
  set_access_fn set_access;
  granularity_fn granularity;
} drv;

#define DRIVER(field, name)                                                                 \
  do {                                                                                      \
    void *fn_ = driver_entry(name, ENTRY_POINT_VERSION);                                    \
    memcpy(&drv.field, &fn_, sizeof fn_);                                                   \
  } while (0)

#define CU_CHECK(call)                                                                      \
  do {                                                                                      \
    CUresult r_ = (call);                                                                   \
    if (r_ != CUDA_SUCCESS) {                                                               \
      fprintf(stderr, "FAIL %s:%d: %s: CUresult %d\n", __FILE__, __LINE__, #call, (int)r_); \
      exit(1);                                                                              \
    }                                                                                       \
  } while (0)

__global__ void fill(unsigned *p, size_t words, unsigned seed)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = seed ^ (unsigned)(i * 2654435761u);
}

__global__ void check(const unsigned *p, size_t words, unsigned seed, unsigned long long *bad)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words;
       i += (size_t)gridDim.x * blockDim.x)
    if (p[i] != (seed ^ (unsigned)(i * 2654435761u))) atomicAdd(bad, 1ull);
}

/* Fill words at p with seed's pattern and count the words that read back otherwise. */
static unsigned long long write_read(void *p, size_t bytes, unsigned seed, unsigned long long *bad)
{
  size_t words = bytes / sizeof(unsigned);
  if (words == 0) return 0;
  CUDA_CHECK(cudaMemset(bad, 0, sizeof *bad));
  fill<<<256, 256>>>((unsigned *)p, words, seed);
  CUDA_CHECK(cudaGetLastError());
  check<<<256, 256>>>((const unsigned *)p, words, seed, bad);
  CUDA_CHECK(cudaGetLastError());
  unsigned long long count = 0;
  CUDA_CHECK(cudaMemcpy(&count, bad, sizeof count, cudaMemcpyDeviceToHost));
  return count;
}

struct block {
  const char *name;
  size_t size;
  void *old;                 /* where cudaMalloc put it */
  CUdeviceptr start, bytes;  /* the granule-aligned range over it */
  CUdeviceptr got;           /* where cuMemAddressReserve put the range (0: it failed) */
  CUresult reserve_result;
  CUmemGenericAllocationHandle handle;
  const char *mapped;        /* what the map and the kernels gave */
};

static void print_size(char *out, size_t len, size_t bytes)
{
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) snprintf(out, len, "%zu GiB", bytes >> 30);
  else if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) snprintf(out, len, "%zu MiB", bytes >> 20);
  else snprintf(out, len, "%zu B", bytes);
}

/* cudaMalloc the block, fill and check it, and note the granule-aligned range over it. */
static void allocate(struct block *b, unsigned seed, size_t granule, unsigned long long *bad)
{
  CUDA_CHECK(cudaMalloc(&b->old, b->size));
  if (write_read(b->old, b->size, seed, bad) != 0) {
    fprintf(stderr, "FAIL: %s at %p does not hold its pattern\n", b->name, b->old);
    exit(1);
  }
  uintptr_t old = (uintptr_t)b->old;
  b->start = old / granule * granule;
  b->bytes = (old + b->size + granule - 1) / granule * granule - b->start;
}

/* Reserve the block's range with its start as the hint; where the driver reserved it (at the
 * hint or elsewhere), map new physical memory there and write and read it with kernels. */
static void reserve_and_map(struct block *b, size_t granule, const CUmemAllocationProp *physical,
                            unsigned long long *bad)
{
  static unsigned seed = 0x2000u;
  b->got = 0;
  b->mapped = "-";
  b->reserve_result = drv.reserve(&b->got, b->bytes, granule, b->start, 0);
  if (b->reserve_result != CUDA_SUCCESS) {
    b->got = 0;
    return;
  }
  CU_CHECK(drv.create(&b->handle, b->bytes, physical, 0));
  CU_CHECK(drv.map(b->got, b->bytes, 0, b->handle, 0));
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = physical->location.id;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_CHECK(drv.set_access(b->got, b->bytes, &access, 1));
  unsigned long long wrong = write_read((void *)b->got, b->bytes, seed++, bad);
  CUDA_CHECK(cudaDeviceSynchronize());
  if (wrong) {
    fprintf(stderr, "FAIL: %llu words of the range mapped at %#llx read back wrong\n", wrong,
            (unsigned long long)b->got);
    exit(1);
  }
  b->mapped = "ok";
}

static void undo(struct block *b)
{
  if (!b->got) return;
  CU_CHECK(drv.unmap(b->got, b->bytes));
  CU_CHECK(drv.release(b->handle));
  CU_CHECK(drv.address_free(b->got, b->bytes));
}

int main()
{
  require_gpu();
  int device = 0, vmm = 0, driver = 0;
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaFree(0));
  CUDA_CHECK(cudaDeviceGetAttribute(
      &vmm, (enum cudaDeviceAttr)CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device));
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  if (!vmm) {
    printf("skipped: %s has no virtual memory management\n", prop.name);
    return 77;
  }
  DRIVER(reserve, "cuMemAddressReserve");
  DRIVER(address_free, "cuMemAddressFree");
  DRIVER(create, "cuMemCreate");
  DRIVER(release, "cuMemRelease");
  DRIVER(map, "cuMemMap");
  DRIVER(unmap, "cuMemUnmap");
  DRIVER(set_access, "cuMemSetAccess");
  DRIVER(granularity, "cuMemGetAllocationGranularity");
  CUmemAllocationProp physical;
  memset(&physical, 0, sizeof physical);
  physical.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  physical.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  physical.location.id = device;
  size_t granule = 0;
  CU_CHECK(drv.granularity(&granule, &physical, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  printf("vmm_hint: device %d %s, driver %d, VMM %d, granularity %zu bytes\n", device, prop.name,
         driver, vmm, granule);

  unsigned long long *bad; /* allocated first, so that it is not where the blocks were */
  CUDA_CHECK(cudaMalloc(&bad, sizeof *bad));

  struct block blocks[] = {
      {"256 B", 256},
      {"3 MiB", 3u << 20},
      {"64 MiB", 64u << 20},
      {"1 GiB", (size_t)1 << 30},
      {"256 B, neighbour live", 256}, /* its own phase, after the others are undone */
  };
  const int n = (int)(sizeof blocks / sizeof blocks[0]);

  /* Phase 1, as a resume asks: all freed, then every range in the old blocks' address order. */
  for (int i = 0; i < n - 1; i++) allocate(&blocks[i], 0x1000u + (unsigned)i, granule, bad);
  for (int i = 0; i < n - 1; i++) CUDA_CHECK(cudaFree(blocks[i].old));
  CUDA_CHECK(cudaDeviceSynchronize());
  int order[16];
  for (int i = 0; i < n - 1; i++) order[i] = i;
  for (int i = 1; i < n - 1; i++)
    for (int j = i; j > 0 && blocks[order[j]].start < blocks[order[j - 1]].start; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  for (int k = 0; k < n - 1; k++) reserve_and_map(&blocks[order[k]], granule, &physical, bad);
  /* While the ranges are reserved, the allocator must stay out of them. */
  void *probe;
  CUDA_CHECK(cudaMalloc(&probe, 3u << 20));
  int probe_inside = 0;
  for (int i = 0; i < n - 1; i++)
    if (blocks[i].got && (CUdeviceptr)(uintptr_t)probe - blocks[i].got < blocks[i].bytes)
      probe_inside = 1;
  CUDA_CHECK(cudaFree(probe));
  for (int i = 0; i < n - 1; i++) undo(&blocks[i]);

  /* Phase 2: a small block freed while another one allocated right after it lives (the
   * allocator packs small blocks into one granule, which is then not free). */
  struct block *last = &blocks[n - 1];
  allocate(last, 0x1000u + (unsigned)(n - 1), granule, bad);
  void *neighbour;
  CUDA_CHECK(cudaMalloc(&neighbour, 256));
  CUDA_CHECK(cudaFree(last->old));
  CUDA_CHECK(cudaDeviceSynchronize());
  reserve_and_map(last, granule, &physical, bad);
  undo(last);
  CUDA_CHECK(cudaFree(neighbour));
  int honoured = 0;
  for (int i = 0; i < n; i++) honoured += blocks[i].reserve_result == CUDA_SUCCESS &&
                                          blocks[i].got == blocks[i].start;

  printf("\n%-22s %-16s %-16s %-10s %-16s %-8s %s\n", "block", "old address", "range start",
         "range", "reserved at", "hint", "map+kernel rw");
  for (int i = 0; i < n; i++) {
    struct block *b = &blocks[i];
    char range[32], result[48];
    print_size(range, sizeof range, b->bytes);
    if (b->reserve_result != CUDA_SUCCESS)
      snprintf(result, sizeof result, "failed (CUresult %d)", (int)b->reserve_result);
    else
      snprintf(result, sizeof result, "%#llx", (unsigned long long)b->got);
    printf("%-22s %-16p %#-16llx %-10s %-16s %-8s %s\n", b->name, b->old,
           (unsigned long long)b->start, range, result,
           b->reserve_result != CUDA_SUCCESS ? "error" : b->got == b->start ? "honoured" : "moved",
           b->mapped);
  }
  printf("\nhints honoured: %d of %d\n", honoured, n);
  for (int i = 0; i < n - 1; i++) /* vmem merges such ranges into one; here they compete */
    for (int j = i + 1; j < n - 1; j++)
      if (blocks[i].start < blocks[j].start + blocks[j].bytes &&
          blocks[j].start < blocks[i].start + blocks[i].bytes)
        printf("note: the ranges of %s and %s overlap (one reservation cannot hold both)\n",
               blocks[i].name, blocks[j].name);
  printf("neighbour kept live in phase 2: %p, %s the freed block's range\n", neighbour,
         (CUdeviceptr)(uintptr_t)neighbour - last->start < last->bytes ? "inside" : "NOT inside");
  printf("cudaMalloc(3 MiB) while phase 1's ranges were reserved: %p, %s\n", probe,
         probe_inside ? "INSIDE a reserved range: the allocator does not respect reservations "
                        "(in-place re-creation is unsafe there)"
                      : "outside every reserved range");
  CUDA_CHECK(cudaFree(bad));
  printf("ok: the table above is the finding (refused hints do not fail this test)\n");
  return 0;
}
