/* Description: drives libcudaw-emu.so through dlopen (as cudaw's shim loads a runtime) and checks
 * the emulated device: allocation/copy/memset round trips, invalid frees and overruns, the quota,
 * never-reused addresses, use-after-free faults, VMM remapping, streams/events/callbacks, kernel
 * registration and launch, symbols, pointer attributes, error strings. argv[1]: the library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cudaw_emu.h"
#include "test.h"

static void *library;

static void *load(const char *name) {
  void *symbol = dlsym(library, name);
  if (!symbol) test_fail("%s is not exported", name);
  return symbol;
}

/* p_<name>: the emu's function, typed from the toolkit header's declaration. */
#define LOAD(name) __typeof__(&name) p_##name = (__typeof__(&name))load(#name)

/* nvcc's hidden registration ABI (crt/host_runtime.h). */
typedef void **(*register_fatbin_fn)(void *);
typedef void (*register_function_fn)(void **, const char *, char *, const char *, int, uint3 *,
                                     uint3 *, dim3 *, dim3 *, int *);
typedef void (*register_var_fn)(void **, char *, char *, const char *, int, size_t, int, int);
typedef unsigned (*push_fn)(dim3, dim3, size_t, struct CUstream_st *);
typedef cudaError_t (*pop_fn)(dim3 *, dim3 *, size_t *, void *);
typedef cudaError_t (*get_kernel_fn)(cudaKernel_t *, const void *);
typedef cudaError_t (*launch_kernel_fn)(cudaKernel_t, dim3, dim3, void **, size_t, cudaStream_t);

#define MIB ((size_t)1 << 20)

/* ---- host implementations of the test's kernels ---- */

/* scale(float *data, float factor, int n) */
CUDAW_EMU_KERNEL(_Z5scalePffi) {
  float *data = CUDAW_EMU_ARG(args, 0, float *);
  float factor = CUDAW_EMU_ARG(args, 1, float);
  int n = CUDAW_EMU_ARG(args, 2, int);
  CUDAW_EMU_FOR_EACH_THREAD(launch, block, thread) {
    int i = (int)(block.x * launch->block.x + thread.x);
    if (i < n) data[i] *= factor;
  }
}

static int registered_calls;
static void count_calls(const struct cudaw_emu_launch *launch, void **args) {
  (void)args;
  CHECK(!strcmp(launch->name, "counted"));
  registered_calls++;
}

static void scale_stub(void) {}
static void counted_stub(void) {}
static void missing_stub(void) {}

static int callbacks;
static void host_fn(void *data) { *(int *)data += 1; }
static void stream_callback(cudaStream_t stream, cudaError_t status, void *data) {
  (void)stream;
  CHECK_EQ(status, cudaSuccess);
  *(int *)data += 10;
}

static void test_device(void) {
  LOAD(cudaGetDeviceCount); LOAD(cudaGetDeviceProperties); LOAD(cudaDeviceGetAttribute);
  LOAD(cudaSetDevice); LOAD(cudaRuntimeGetVersion);
  int count = 0, value = 0;
  CHECK_EQ(p_cudaGetDeviceCount(&count), cudaSuccess);
  CHECK_EQ(count, 1);
  struct cudaDeviceProp prop;
  CHECK_EQ(p_cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  CHECK(!strcmp(prop.name, "cudaw emulated device"));
  CHECK_EQ(prop.totalGlobalMem, 64 * MIB); /* CUDAW_EMU_MEM=64M from ctest */
  CHECK_EQ(prop.major, 9);
  CHECK_EQ(prop.unifiedAddressing, 1);
  CHECK_EQ(p_cudaDeviceGetAttribute(&value, cudaDevAttrWarpSize, 0), cudaSuccess);
  CHECK_EQ(value, 32);
  CHECK_EQ(p_cudaDeviceGetAttribute(
               &value, (enum cudaDeviceAttr)CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
           cudaSuccess);
  CHECK_EQ(value, 1);
  CHECK_EQ(p_cudaSetDevice(1), cudaErrorInvalidDevice);
  CHECK_EQ(p_cudaRuntimeGetVersion(&value), cudaSuccess);
  CHECK_EQ(value, 13000);
}

static void test_memory(void) {
  LOAD(cudaMalloc); LOAD(cudaFree); LOAD(cudaMemcpy); LOAD(cudaMemset); LOAD(cudaMemcpy2D);
  LOAD(cudaMallocPitch); LOAD(cudaGetLastError); LOAD(cudaPeekAtLastError); LOAD(cudaMemGetInfo);
  LOAD(cudaDeviceGetLimit); LOAD(cudaDeviceSetLimit);
  void *p_cudaMemcpy_ptds_raw = load("cudaMemcpy_ptds");
  __typeof__(&cudaMemcpy) p_cudaMemcpy_ptds;
  memcpy(&p_cudaMemcpy_ptds, &p_cudaMemcpy_ptds_raw, sizeof p_cudaMemcpy_ptds);

  enum { N = 1 << 16 };
  static unsigned char host[N], back[N];
  for (int i = 0; i < N; i++) host[i] = (unsigned char)(i * 7 + 3);
  void *a = NULL, *b = NULL;
  CHECK_EQ(p_cudaMalloc(&a, N), cudaSuccess);
  CHECK_EQ(p_cudaMalloc(&b, N), cudaSuccess);
  CHECK(a && b && a != b);
  CHECK_EQ(p_cudaMemcpy(a, host, N, cudaMemcpyHostToDevice), cudaSuccess);
  CHECK_EQ(p_cudaMemcpy(b, a, N, cudaMemcpyDeviceToDevice), cudaSuccess);
  CHECK_EQ(p_cudaMemset((char *)b + 100, 0xab, 50), cudaSuccess);
  CHECK_EQ(p_cudaMemcpy_ptds(back, b, N, cudaMemcpyDefault), cudaSuccess);
  for (int i = 0; i < N; i++)
    CHECK_EQ(back[i], i >= 100 && i < 150 ? 0xab : host[i]);

  /* 2D: copy a 16x4 window out of the pitched allocation. */
  void *pitched;
  size_t pitch;
  CHECK_EQ(p_cudaMallocPitch(&pitched, &pitch, 100, 8), cudaSuccess);
  CHECK(pitch >= 100 && pitch % 256 == 0);
  CHECK_EQ(p_cudaMemcpy2D(pitched, pitch, host, 100, 100, 8, cudaMemcpyHostToDevice), cudaSuccess);
  unsigned char window[16 * 4];
  CHECK_EQ(p_cudaMemcpy2D(window, 16, (char *)pitched + pitch + 10, pitch, 16, 4,
                          cudaMemcpyDeviceToHost), cudaSuccess);
  for (int row = 0; row < 4; row++)
    for (int col = 0; col < 16; col++) CHECK_EQ(window[row * 16 + col], host[(row + 1) * 100 + 10 + col]);
  CHECK_EQ(p_cudaMemcpy2D(window, 16, pitched, 8, 16, 4, cudaMemcpyDeviceToHost),
           cudaErrorInvalidPitchValue);
  CHECK_EQ(p_cudaGetLastError(), cudaErrorInvalidPitchValue);

  /* Bad frees and ranges return cudaErrorInvalidValue; the error sticks until read. */
  CHECK_EQ(p_cudaFree(NULL), cudaSuccess);
  CHECK_EQ(p_cudaFree((char *)a + 16), cudaErrorInvalidValue);
  CHECK_EQ(p_cudaFree(host), cudaErrorInvalidValue);
  CHECK_EQ(p_cudaPeekAtLastError(), cudaErrorInvalidValue);
  CHECK_EQ(p_cudaGetLastError(), cudaErrorInvalidValue);
  CHECK_EQ(p_cudaGetLastError(), cudaSuccess);
  CHECK_EQ(p_cudaMemcpy(a, host, N + 1, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  CHECK_EQ(p_cudaMemcpy((char *)a + 1, host, N, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  CHECK_EQ(p_cudaMemset((char *)a - 1, 0, 2), cudaErrorInvalidValue);
  CHECK_EQ(p_cudaMemcpy(back, host, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  CHECK_EQ(p_cudaMemcpy(back, host, 16, cudaMemcpyHostToHost), cudaSuccess);
  CHECK_EQ(p_cudaFree(a), cudaSuccess);
  CHECK_EQ(p_cudaFree(a), cudaErrorInvalidValue); /* double free */
  CHECK_EQ(p_cudaMemcpy(back, a, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);

  /* A re-allocation of the same size gets a new address (nothing is reused until wrap). */
  void *again;
  CHECK_EQ(p_cudaMalloc(&again, N), cudaSuccess);
  CHECK(again != a);

  /* Use after free faults. */
  pid_t child = fork();
  if (child == 0) {
    signal(SIGSEGV, SIG_DFL);
    *(volatile char *)a = 1;
    _exit(0);
  }
  int status;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "freed device memory is still accessible");

  /* Quota: 64 MiB in all. */
  size_t free_bytes, total;
  CHECK_EQ(p_cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  CHECK_EQ(total, 64 * MIB);
  /* The context's stack reservation (1 KiB for each of 2048 resident threads) is in use. */
  CHECK(free_bytes <= total - 2 * MIB);
  void *big;
  CHECK_EQ(p_cudaMalloc(&big, 65 * MIB), cudaErrorMemoryAllocation);
  CHECK_EQ(p_cudaMalloc(&big, 40 * MIB), cudaSuccess);
  void *more;
  CHECK_EQ(p_cudaMalloc(&more, 30 * MIB), cudaErrorMemoryAllocation);
  CHECK_EQ(p_cudaFree(big), cudaSuccess);
  CHECK_EQ(p_cudaMalloc(&more, 30 * MIB), cudaSuccess);
  CHECK_EQ(p_cudaFree(more), cudaSuccess);
  CHECK_EQ(p_cudaFree(b), cudaSuccess);
  CHECK_EQ(p_cudaFree(again), cudaSuccess);
  CHECK_EQ(p_cudaFree(pitched), cudaSuccess);
  CHECK_EQ(p_cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  CHECK_EQ(free_bytes, total - 2 * MIB);

  /* The stack limit reserves device memory for every resident thread; 0 gives it all back. */
  size_t stack = 0;
  CHECK_EQ(p_cudaDeviceGetLimit(&stack, cudaLimitStackSize), cudaSuccess);
  CHECK_EQ(stack, 1024);
  CHECK_EQ(p_cudaDeviceSetLimit(cudaLimitStackSize, 0), cudaSuccess);
  CHECK_EQ(p_cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  CHECK_EQ(free_bytes, total);
  CHECK_EQ(p_cudaDeviceSetLimit(cudaLimitStackSize, 1u << 20), cudaErrorMemoryAllocation);
  CHECK_EQ(p_cudaDeviceSetLimit(cudaLimitStackSize, 1024), cudaSuccess);
  CHECK_EQ(p_cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  CHECK_EQ(free_bytes, total - 2 * MIB);
  p_cudaGetLastError();
}

static void *entry_point(const char *name) {
  LOAD(cudaGetDriverEntryPointByVersion);
  void *function = NULL;
  enum cudaDriverEntryPointQueryResult status;
  CHECK_EQ(p_cudaGetDriverEntryPointByVersion(name, &function, 13000, cudaEnableDefault, &status),
           cudaSuccess);
  if (status != cudaDriverEntryPointSuccess || !function) test_fail("no driver entry point %s", name);
  return function;
}

/* d_<name>: an emulated driver function, typed from cuda.h. */
#define DRIVER(name) __typeof__(&name) d_##name = (__typeof__(&name))entry_point(#name)

static void test_vmm(void) {
  DRIVER(cuMemGetAllocationGranularity); DRIVER(cuMemAddressReserve); DRIVER(cuMemCreate);
  DRIVER(cuMemMap); DRIVER(cuMemSetAccess); DRIVER(cuMemUnmap); DRIVER(cuMemRelease);
  DRIVER(cuMemAddressFree); DRIVER(cuMemcpyHtoD); DRIVER(cuMemcpyDtoH); DRIVER(cuMemsetD8);
  DRIVER(cuPointerGetAttribute); DRIVER(cuCtxGetCurrent);
  LOAD(cudaMemcpy);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* still exported; cudaw forwards it */
  LOAD(cudaGetDriverEntryPoint);
#pragma GCC diagnostic pop

  void *nothing = (void *)1;
  enum cudaDriverEntryPointQueryResult status;
  CHECK_EQ(p_cudaGetDriverEntryPoint("cuNoSuchFunction", &nothing, cudaEnableDefault, &status),
           cudaSuccess);
  CHECK(nothing == NULL && status == cudaDriverEntryPointSymbolNotFound);

  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
  size_t granularity = 0;
  CHECK_EQ(d_cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
           CUDA_SUCCESS);
  CHECK_EQ(granularity, 2 * MIB);
  CUdeviceptr base;
  CHECK_EQ(d_cuMemAddressReserve(&base, 8 * MIB, 0, 0, 0), CUDA_SUCCESS);
  CHECK_EQ(base % granularity, 0);
  CUmemGenericAllocationHandle first, second, third;
  CHECK_EQ(d_cuMemCreate(&first, 2 * MIB, &prop, 0), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemCreate(&second, 2 * MIB, &prop, 0), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemCreate(&third, MIB, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ(d_cuMemCreate(&third, 128 * MIB, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  CHECK_EQ(d_cuMemMap(base, 2 * MIB, 0, first, 0), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemMap(base + 2 * MIB, 2 * MIB, 0, second, 0), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemMap(base, 2 * MIB, 0, second, 0), CUDA_ERROR_INVALID_VALUE); /* overlap */
  static unsigned char data[4 * MIB], back[4 * MIB];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 13 + i / 4096);
  /* Mapped but not yet accessible: not device memory for copies. */
  CHECK_EQ(d_cuMemcpyHtoD(base, data, 16), CUDA_ERROR_INVALID_VALUE);
  CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CHECK_EQ(d_cuMemSetAccess(base, 4 * MIB, &access, 1), CUDA_SUCCESS);
  /* One copy across both mappings, through the runtime and the driver. */
  CHECK_EQ(p_cudaMemcpy((void *)(uintptr_t)base, data, 4 * MIB, cudaMemcpyHostToDevice), cudaSuccess);
  CHECK_EQ(d_cuMemcpyDtoH(back, base, 4 * MIB), CUDA_SUCCESS);
  CHECK(!memcmp(data, back, 4 * MIB));
  CHECK_EQ(d_cuMemcpyHtoD(base + 4 * MIB, data, 16), CUDA_ERROR_INVALID_VALUE); /* unmapped part */
  unsigned memory_type = 0;
  CHECK_EQ(d_cuPointerGetAttribute(&memory_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, base + 5),
           CUDA_SUCCESS);
  CHECK_EQ(memory_type, CU_MEMORYTYPE_DEVICE);
  CUcontext context = NULL;
  CHECK_EQ(d_cuCtxGetCurrent(&context), CUDA_SUCCESS);
  CHECK(context != NULL);

  /* Checkpoint-style: save, unmap, release, remap fresh memory at the same address, restore. */
  CHECK_EQ(d_cuMemcpyDtoH(back, base, 4 * MIB), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemUnmap(base, 2 * MIB), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemcpyDtoH(back, base, 16), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ(d_cuMemRelease(first), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemRelease(first), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ(d_cuMemCreate(&third, 2 * MIB, &prop, 0), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemMap(base, 2 * MIB, 0, third, 0), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemSetAccess(base, 2 * MIB, &access, 1), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemsetD8(base, 0, 2 * MIB), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemcpyHtoD(base, back, 2 * MIB), CUDA_SUCCESS);
  memset(back, 0, sizeof back);
  CHECK_EQ(d_cuMemcpyDtoH(back, base, 4 * MIB), CUDA_SUCCESS);
  CHECK(!memcmp(data, back, 4 * MIB));

  CHECK_EQ(d_cuMemAddressFree(base, 8 * MIB), CUDA_ERROR_INVALID_VALUE); /* still mapped */
  CHECK_EQ(d_cuMemUnmap(base, 4 * MIB), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemRelease(second), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemRelease(third), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemAddressFree(base, 8 * MIB), CUDA_SUCCESS);

  /* A reservation larger than the device region lives alongside it. */
  CUdeviceptr huge;
  CHECK_EQ(d_cuMemAddressReserve(&huge, (size_t)1 << 40, 0, 0, 0), CUDA_SUCCESS);
  CHECK_EQ(d_cuMemAddressFree(huge, (size_t)1 << 40), CUDA_SUCCESS);
}

static void test_streams(void) {
  LOAD(cudaStreamCreate); LOAD(cudaStreamDestroy); LOAD(cudaStreamSynchronize);
  LOAD(cudaEventCreate); LOAD(cudaEventRecord); LOAD(cudaEventSynchronize);
  LOAD(cudaEventElapsedTime); LOAD(cudaEventDestroy); LOAD(cudaLaunchHostFunc);
  LOAD(cudaStreamAddCallback); LOAD(cudaMemcpyAsync); LOAD(cudaMallocAsync); LOAD(cudaFreeAsync);
  LOAD(cudaStreamQuery); LOAD(cudaEventCreateWithFlags); LOAD(cudaGetLastError);
  cudaStream_t stream;
  cudaEvent_t start, stop, untimed;
  CHECK_EQ(p_cudaStreamCreate(&stream), cudaSuccess);
  CHECK_EQ(p_cudaEventCreate(&start), cudaSuccess);
  CHECK_EQ(p_cudaEventCreate(&stop), cudaSuccess);
  CHECK_EQ(p_cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
  CHECK_EQ(p_cudaEventRecord(start, stream), cudaSuccess);
  void *device;
  int value = 42, back = 0;
  CHECK_EQ(p_cudaMallocAsync(&device, sizeof value, stream), cudaSuccess);
  CHECK_EQ(p_cudaMemcpyAsync(device, &value, sizeof value, cudaMemcpyHostToDevice, stream), cudaSuccess);
  CHECK_EQ(p_cudaMemcpyAsync(&back, device, sizeof back, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  CHECK_EQ(p_cudaLaunchHostFunc(stream, host_fn, &callbacks), cudaSuccess);
  CHECK_EQ(p_cudaStreamAddCallback(stream, stream_callback, &callbacks, 0), cudaSuccess);
  CHECK_EQ(p_cudaEventRecord(stop, stream), cudaSuccess);
  CHECK_EQ(p_cudaStreamSynchronize(stream), cudaSuccess);
  CHECK_EQ(p_cudaEventSynchronize(stop), cudaSuccess);
  CHECK_EQ(back, 42);
  CHECK_EQ(callbacks, 11);
  float ms = -1;
  CHECK_EQ(p_cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
  CHECK(ms >= 0 && ms < 10000);
  CHECK_EQ(p_cudaEventRecord(untimed, stream), cudaSuccess);
  CHECK_EQ(p_cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  CHECK_EQ(p_cudaFreeAsync(device, stream), cudaSuccess);
  CHECK_EQ(p_cudaStreamQuery(stream), cudaSuccess);
  CHECK_EQ(p_cudaStreamQuery(cudaStreamPerThread), cudaSuccess);
  CHECK_EQ(p_cudaStreamDestroy(stream), cudaSuccess);
  CHECK_EQ(p_cudaStreamSynchronize(stream), cudaErrorInvalidResourceHandle);
  CHECK_EQ(p_cudaStreamDestroy(stream), cudaErrorInvalidResourceHandle);
  CHECK_EQ(p_cudaEventDestroy(start), cudaSuccess);
  CHECK_EQ(p_cudaEventDestroy(stop), cudaSuccess);
  CHECK_EQ(p_cudaEventDestroy(untimed), cudaSuccess);
  CHECK_EQ(p_cudaEventDestroy(untimed), cudaErrorInvalidResourceHandle);
  p_cudaGetLastError();
}

static void test_kernels_and_symbols(void) {
  register_fatbin_fn register_fatbin = (register_fatbin_fn)load("__cudaRegisterFatBinary");
  register_function_fn register_function = (register_function_fn)load("__cudaRegisterFunction");
  register_var_fn register_var = (register_var_fn)load("__cudaRegisterVar");
  push_fn push = (push_fn)load("__cudaPushCallConfiguration");
  pop_fn pop = (pop_fn)load("__cudaPopCallConfiguration");
  get_kernel_fn get_kernel = (get_kernel_fn)load("__cudaGetKernel");
  launch_kernel_fn launch_kernel = (launch_kernel_fn)load("__cudaLaunchKernel");
  void (*unregister)(void **) = (void (*)(void **))load("__cudaUnregisterFatBinary");
  __typeof__(&cudaw_emu_register_kernel) register_kernel =
      (__typeof__(&cudaw_emu_register_kernel))load("cudaw_emu_register_kernel");
  LOAD(cudaLaunchKernel); LOAD(cudaMalloc); LOAD(cudaMemcpy); LOAD(cudaFree);
  LOAD(cudaMemcpyToSymbol); LOAD(cudaMemcpyFromSymbol); LOAD(cudaGetSymbolAddress);
  LOAD(cudaGetSymbolSize); LOAD(cudaFuncGetAttributes); LOAD(cudaGetLastError);

  static struct { int magic, version; const void *data, *filename; } wrapper = {0x466243B1, 1, 0, 0};
  void **handle = register_fatbin(&wrapper);
  register_function(handle, (const char *)scale_stub, "_Z5scalePffi", "_Z5scalePffi", -1, 0, 0, 0, 0, 0);
  register_function(handle, (const char *)counted_stub, "counted", "counted", -1, 0, 0, 0, 0, 0);
  register_function(handle, (const char *)missing_stub, "_Z7missingv", "_Z7missingv", -1, 0, 0, 0, 0, 0);
  static int shadow[4] = {1, 2, 3, 4};
  register_var(handle, (char *)shadow, (char *)"table", "table", 0, sizeof shadow, 0, 0);
  CHECK_EQ(register_kernel("counted", count_calls), 0);

  enum { N = 1000 };
  float host[N];
  for (int i = 0; i < N; i++) host[i] = (float)i;
  float *data;
  CHECK_EQ(p_cudaMalloc((void **)&data, sizeof host), cudaSuccess);
  CHECK_EQ(p_cudaMemcpy(data, host, sizeof host, cudaMemcpyHostToDevice), cudaSuccess);
  float factor = 2.0f;
  int n = N;
  void *args[] = {&data, &factor, &n};
  /* The explicit API, then what nvcc 13's <<<...>>> stub does. */
  CHECK_EQ(p_cudaLaunchKernel((const void *)scale_stub, (dim3){4, 1, 1}, (dim3){256, 1, 1}, args, 0, 0),
           cudaSuccess);
  cudaKernel_t kernel = NULL;
  CHECK_EQ(get_kernel(&kernel, (const void *)scale_stub), cudaSuccess);
  CHECK_EQ(push((dim3){8, 1, 1}, (dim3){128, 1, 1}, 0, NULL), 0);
  dim3 grid, block;
  size_t shared;
  cudaStream_t stream = (cudaStream_t)1;
  CHECK_EQ(pop(&grid, &block, &shared, &stream), cudaSuccess);
  CHECK(grid.x == 8 && block.x == 128 && shared == 0 && stream == NULL);
  CHECK_EQ(launch_kernel(kernel, grid, block, args, shared, stream), cudaSuccess);
  CHECK_EQ(p_cudaMemcpy(host, data, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < N; i++) CHECK(host[i] == 4.0f * (float)i);
  CHECK_EQ(p_cudaLaunchKernel((const void *)counted_stub, (dim3){1, 1, 1}, (dim3){1, 1, 1}, NULL, 0, 0),
           cudaSuccess);
  CHECK_EQ(registered_calls, 1);
  CHECK_EQ(p_cudaLaunchKernel((const void *)missing_stub, (dim3){1, 1, 1}, (dim3){1, 1, 1}, NULL, 0, 0),
           cudaErrorInvalidDeviceFunction);
  CHECK_EQ(p_cudaLaunchKernel((const void *)test_device, (dim3){1, 1, 1}, (dim3){1, 1, 1}, NULL, 0, 0),
           cudaErrorInvalidDeviceFunction);
  CHECK_EQ(p_cudaLaunchKernel((const void *)scale_stub, (dim3){1, 1, 1}, (dim3){2048, 1, 1}, args, 0, 0),
           cudaErrorInvalidConfiguration);
  struct cudaFuncAttributes attributes;
  CHECK_EQ(p_cudaFuncGetAttributes(&attributes, (const void *)scale_stub), cudaSuccess);
  CHECK_EQ(attributes.maxThreadsPerBlock, 1024);

  /* __device__ int table[4] = {1, 2, 3, 4}; */
  int values[4] = {0};
  CHECK_EQ(p_cudaMemcpyFromSymbol(values, shadow, sizeof values, 0, cudaMemcpyDeviceToHost), cudaSuccess);
  CHECK(values[0] == 1 && values[3] == 4);
  int nine = 9;
  CHECK_EQ(p_cudaMemcpyToSymbol(shadow, &nine, sizeof nine, 2 * sizeof(int), cudaMemcpyHostToDevice),
           cudaSuccess);
  CHECK_EQ(p_cudaMemcpyToSymbol(shadow, &nine, sizeof nine, 4 * sizeof(int), cudaMemcpyHostToDevice),
           cudaErrorInvalidValue);
  CHECK_EQ(p_cudaMemcpyToSymbol(host, &nine, sizeof nine, 0, cudaMemcpyHostToDevice),
           cudaErrorInvalidSymbol);
  void *address;
  size_t size;
  CHECK_EQ(p_cudaGetSymbolAddress(&address, shadow), cudaSuccess);
  CHECK_EQ(p_cudaGetSymbolSize(&size, shadow), cudaSuccess);
  CHECK_EQ(size, sizeof shadow);
  CHECK_EQ(p_cudaMemcpy(values, address, sizeof values, cudaMemcpyDeviceToHost), cudaSuccess);
  CHECK(values[2] == 9 && values[1] == 2);
  CHECK_EQ(p_cudaFree(address), cudaErrorInvalidValue); /* symbols are not freeable */

  CHECK_EQ(p_cudaFree(data), cudaSuccess);
  unregister(handle);
  CHECK_EQ(p_cudaLaunchKernel((const void *)scale_stub, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args, 0, 0),
           cudaErrorInvalidDeviceFunction);
  p_cudaGetLastError();
}

static void test_host_and_attributes(void) {
  LOAD(cudaMallocHost); LOAD(cudaFreeHost); LOAD(cudaHostRegister); LOAD(cudaHostUnregister);
  LOAD(cudaHostGetDevicePointer); LOAD(cudaMallocManaged); LOAD(cudaPointerGetAttributes);
  LOAD(cudaMemPrefetchAsync); LOAD(cudaMalloc); LOAD(cudaFree); LOAD(cudaMemcpy);
  LOAD(cudaGetLastError);
  struct cudaPointerAttributes attributes;
  void *pinned, *managed, *device, *mapped;
  static char registered[8192], plain[64];
  CHECK_EQ(p_cudaMallocHost(&pinned, 4096), cudaSuccess);
  CHECK_EQ(p_cudaMallocManaged(&managed, 4096, cudaMemAttachGlobal), cudaSuccess);
  CHECK_EQ(p_cudaMalloc(&device, 4096), cudaSuccess);
  CHECK_EQ(p_cudaHostRegister(registered, sizeof registered, cudaHostRegisterDefault), cudaSuccess);
  CHECK_EQ(p_cudaHostRegister(registered + 8, 8, 0), cudaErrorHostMemoryAlreadyRegistered);

  CHECK_EQ(p_cudaPointerGetAttributes(&attributes, device), cudaSuccess);
  CHECK_EQ(attributes.type, cudaMemoryTypeDevice);
  CHECK(attributes.devicePointer == device && attributes.hostPointer == NULL);
  CHECK_EQ(p_cudaPointerGetAttributes(&attributes, (char *)managed + 10), cudaSuccess);
  CHECK_EQ(attributes.type, cudaMemoryTypeManaged);
  CHECK_EQ(p_cudaPointerGetAttributes(&attributes, pinned), cudaSuccess);
  CHECK_EQ(attributes.type, cudaMemoryTypeHost);
  CHECK_EQ(p_cudaPointerGetAttributes(&attributes, registered + 100), cudaSuccess);
  CHECK_EQ(attributes.type, cudaMemoryTypeHost);
  CHECK_EQ(p_cudaPointerGetAttributes(&attributes, plain), cudaSuccess);
  CHECK_EQ(attributes.type, cudaMemoryTypeUnregistered);

  /* Pinned and registered memory is device-accessible; managed memory is host-accessible. */
  CHECK_EQ(p_cudaHostGetDevicePointer(&mapped, registered, 0), cudaSuccess);
  CHECK(mapped == registered);
  CHECK_EQ(p_cudaHostGetDevicePointer(&mapped, plain, 0), cudaErrorInvalidValue);
  CHECK_EQ(p_cudaMemcpy(pinned, device, 64, cudaMemcpyDeviceToDevice), cudaSuccess);
  ((char *)managed)[0] = 5;
  CHECK_EQ(p_cudaMemcpy(plain, managed, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  CHECK_EQ(plain[0], 5);
  struct cudaMemLocation location = {.type = cudaMemLocationTypeDevice, .id = 0};
  CHECK_EQ(p_cudaMemPrefetchAsync(managed, 4096, location, 0, NULL), cudaSuccess);
  CHECK_EQ(p_cudaMemPrefetchAsync(device, 4096, location, 0, NULL), cudaErrorInvalidValue);

  CHECK_EQ(p_cudaHostUnregister(registered), cudaSuccess);
  CHECK_EQ(p_cudaHostUnregister(registered), cudaErrorHostMemoryNotRegistered);
  CHECK_EQ(p_cudaFreeHost(pinned), cudaSuccess);
  CHECK_EQ(p_cudaFreeHost(pinned), cudaErrorInvalidValue);
  CHECK_EQ(p_cudaFree(managed), cudaSuccess);
  CHECK_EQ(p_cudaFree(device), cudaSuccess);
  p_cudaGetLastError();
}

static void test_errors(void) {
  LOAD(cudaGetErrorString); LOAD(cudaGetErrorName);
  CHECK(!strcmp(p_cudaGetErrorString(cudaSuccess), "no error"));
  CHECK(!strcmp(p_cudaGetErrorString(cudaErrorInvalidValue), "invalid argument"));
  CHECK(!strcmp(p_cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation"));
  CHECK(!strcmp(p_cudaGetErrorName((cudaError_t)123456), "unrecognized error code"));
}

int main(int argc, char **argv) {
  if (argc < 2) test_fail("usage: emu_api /path/to/libcudaw-emu.so");
  library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!library) test_fail("dlopen %s: %s", argv[1], dlerror());
  int (*is_emulated)(void) = (int (*)(void))load("cudaw_emu_is_emulated");
  CHECK_EQ(is_emulated(), 1);
  test_device();
  test_memory();
  test_vmm();
  test_streams();
  test_kernels_and_symbols();
  test_host_and_attributes();
  test_errors();
  printf("emu_api: all checks passed\n");
  return 0;
}
