/* Description: every allocation API under cudaw: device memory from cudaMalloc, cudaMallocPitch,
 * cudaMalloc3D, cudaMallocAsync and cudaMallocFromPoolAsync is virtual (packed by vmem, unknown to
 * the emulated device under translate, or its real address with identity placement) and holds
 * data; managed, pinned, registered memory and
 * arrays pass through; cudaPointerGetAttributes answers for virtual pointers like the runtime. */
#include "vmemshim.h"

/* What the emulated device itself says about p (bypassing cudaw). */
static enum cudaMemoryType emu_type(const void *p)
{
  cudaError_t (*attrs)(struct cudaPointerAttributes *, const void *) =
      (cudaError_t (*)(struct cudaPointerAttributes *, const void *))emu_symbol(
          "cudaPointerGetAttributes");
  struct cudaPointerAttributes a;
  if (attrs(&a, p) != cudaSuccess) test_fail("emu cudaPointerGetAttributes failed");
  return a.type;
}

static void expect_device(const void *p, const char *what)
{
  struct cudaPointerAttributes a;
  memset(&a, 0x5a, sizeof a);
  CUDA_OK(cudaPointerGetAttributes(&a, p));
  if (a.type != cudaMemoryTypeDevice) test_fail("%s %p: type %d, expected device", what, p, a.type);
  CHECK_EQ(a.device, 0);
  CHECK(a.devicePointer == p, "%s: devicePointer %p, expected %p", what, a.devicePointer, p);
  CHECK(a.hostPointer == NULL);
  /* Under translate the virtual address means nothing to the device runtime, unless it is the
   * real one (identity placement). */
  if (identity_expected())
    CHECK(emu_type(p) == cudaMemoryTypeDevice, "%s: %p is not at its real address", what, p);
  else if (translate_policy())
    CHECK(emu_type(p) == cudaMemoryTypeUnregistered, "%s: %p is not virtual", what, p);
}

/* Round trip size bytes through device memory at p. */
static void round_trip(void *p, size_t size, unsigned seed)
{
  unsigned char *in = malloc(size), *out = malloc(size);
  fill(in, size, seed);
  memset(out, 0, size);
  CUDA_OK(cudaMemcpy(p, in, size, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(out, p, size, cudaMemcpyDeviceToHost));
  CHECK(memcmp(in, out, size) == 0, "data lost at %p", p);
  free(in);
  free(out);
}

int main(void)
{
  int count = 0;
  CUDA_OK(cudaGetDeviceCount(&count));
  CHECK(count > 0);

  /* cudaMalloc: small allocations are packed by vmem (the emu leaves a page and a guard page
   * between its own allocations). */
  void *a = NULL, *b = NULL, *zero = (void *)1;
  CUDA_OK(cudaMalloc(&a, 256));
  CUDA_OK(cudaMalloc(&b, 256));
  CUDA_OK(cudaMalloc(&zero, 0));
  CHECK(zero == NULL);
  CHECK(((uintptr_t)a & 255) == 0 && ((uintptr_t)b & 255) == 0);
  uintptr_t gap = a < b ? (uintptr_t)b - (uintptr_t)a : (uintptr_t)a - (uintptr_t)b;
  if (vmem_expected()) CHECK(gap < 4096, "cudaMalloc not packed (gap %lu): vmem not used", (unsigned long)gap);
  expect_device(a, "cudaMalloc");
  expect_device((char *)a + 100, "cudaMalloc interior");
  round_trip(a, 256, 1);
  round_trip(b, 256, 2);

  /* cudaMallocPitch: pitch rounded like the runtime (512). */
  void *pitched = NULL;
  size_t pitch = 0;
  CUDA_OK(cudaMallocPitch(&pitched, &pitch, 1000, 7));
  CHECK_EQ(pitch, 1024);
  expect_device(pitched, "cudaMallocPitch");
  round_trip(pitched, pitch * 7, 3);

  /* cudaMalloc3D */
  struct cudaPitchedPtr p3;
  CUDA_OK(cudaMalloc3D(&p3, (struct cudaExtent){100, 5, 3}));
  CHECK_EQ(p3.pitch, 512);
  CHECK_EQ(p3.xsize, 100);
  CHECK_EQ(p3.ysize, 5);
  expect_device(p3.ptr, "cudaMalloc3D");
  round_trip(p3.ptr, 512 * 5 * 3, 4);

  /* Stream-ordered allocation, on a created stream, the legacy stream and from the pool. */
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  void *async = NULL, *legacy = NULL, *pooled = NULL;
  CUDA_OK(cudaMallocAsync(&async, 5000, s));
  CUDA_OK(cudaMallocAsync(&legacy, 64, 0));
  cudaMemPool_t pool;
  CUDA_OK(cudaDeviceGetDefaultMemPool(&pool, 0));
  CUDA_OK(cudaMallocFromPoolAsync(&pooled, 3 << 20, pool, s));
  expect_device(async, "cudaMallocAsync");
  expect_device(legacy, "cudaMallocAsync(legacy)");
  expect_device(pooled, "cudaMallocFromPoolAsync");
  round_trip(async, 5000, 5);
  round_trip(pooled, 3 << 20, 6);
  CUDA_OK(cudaFreeAsync(async, s));
  CUDA_OK(cudaFreeAsync(legacy, 0));
  CUDA_OK(cudaFreeAsync(pooled, s));
  CUDA_OK(cudaStreamSynchronize(s));

  /* Managed memory passes through: a real (emulated) managed pointer, usable on the host. */
  int *managed = NULL;
  CUDA_OK(cudaMallocManaged((void **)&managed, 4096, cudaMemAttachGlobal));
  managed[1000] = 42;
  struct cudaPointerAttributes attrs;
  CUDA_OK(cudaPointerGetAttributes(&attrs, managed));
  CHECK_EQ(attrs.type, cudaMemoryTypeManaged);
  CHECK_EQ(emu_type(managed), cudaMemoryTypeManaged);
  CUDA_OK(cudaFree(managed));

  /* Page-locked and registered host memory pass through. */
  void *pinned = NULL, *host_alloc = NULL;
  CUDA_OK(cudaMallocHost(&pinned, 8192));
  CUDA_OK(cudaHostAlloc(&host_alloc, 100, cudaHostAllocMapped));
  CUDA_OK(cudaPointerGetAttributes(&attrs, pinned));
  CHECK_EQ(attrs.type, cudaMemoryTypeHost);
  memset(pinned, 7, 8192);
  CUDA_OK(cudaMemcpy(a, pinned, 256, cudaMemcpyHostToDevice));
  CUDA_OK(cudaFreeHost(pinned));
  CUDA_OK(cudaFreeHost(host_alloc));
  static char registered[16384] __attribute__((aligned(4096)));
  CUDA_OK(cudaHostRegister(registered, sizeof registered, cudaHostRegisterDefault));
  void *mapped = NULL;
  CUDA_OK(cudaHostGetDevicePointer(&mapped, registered, 0));
  CHECK(mapped == registered);
  CUDA_OK(cudaHostUnregister(registered));

  /* Arrays pass through. */
  struct cudaChannelFormatDesc desc = {32, 0, 0, 0, cudaChannelFormatKindFloat};
  cudaArray_t array2d, array3d;
  CUDA_OK(cudaMallocArray(&array2d, &desc, 64, 16, 0));
  CUDA_OK(cudaMalloc3DArray(&array3d, &desc, (struct cudaExtent){8, 8, 8}, 0));
  CUDA_OK(cudaFreeArray(array2d));
  CUDA_OK(cudaFreeArray(array3d));

  /* A freed virtual pointer reads as memory nothing owns, as the runtime says of such addresses. */
  CUDA_OK(cudaFree(b));
  if (vmem_expected()) {
    CUDA_OK(cudaPointerGetAttributes(&attrs, b));
    CHECK_EQ(attrs.type, cudaMemoryTypeUnregistered);
    CHECK(attrs.devicePointer == NULL);
  }

  CUDA_OK(cudaFree(a));
  CUDA_OK(cudaFree(pitched));
  CUDA_OK(cudaFree(p3.ptr));
  CUDA_OK(cudaStreamDestroy(s));
  CHECK_EQ(cudaGetLastError(), cudaSuccess);
  printf("ok\n");
  return 0;
}
