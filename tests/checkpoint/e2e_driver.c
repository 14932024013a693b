/* Description: a program that reaches the GPU only through the driver API, the way a static CUDA
 * runtime (nvcc's default, CuPy, cuBLAS) does: dlopen("libcuda.so.1"), dlsym cuGetProcAddress_v2,
 * then every function from it. Run under `cudaw run` on the emulated device, it must get cudaw's
 * wrappers (not the emulated driver's functions), its cuMemAlloc memory must be virtual (vmem
 * answers cuMemGetAddressRange for a packed allocation exactly), memory the program maps itself
 * (cuMemCreate/cuMemMap, as XLA and PyTorch's expandable segments do) must be named by handles of
 * cudaw's, a checkpoint must hold its driver calls (progress stops), move both kinds of memory into
 * the image and give them back to the device, and resume must restore every byte at the same
 * addresses, after which the program's handles still unmap and release. A function of a driver
 * newer than cudaw (the emu's cuEmuNewerFunction) is handed out as it is, and status must then
 * say that the pause does not hold everything (ungated_functions).
 * With a cubin (driver_kernels.cu), after the resume it loads it with cuModuleLoadData and launches
 * its kernels with cuLaunchKernel on its virtual memory: the emulated device runs the host
 * implementations below on whatever addresses arrive, so an untranslated virtual pointer (under
 * CUDAW_VMEM=translate) faults and a wrong layout gives wrong numbers. The same kernel obtained
 * behind cudaw's back (from the emulated device directly, as a static runtime may load its
 * fatbins) must be translated from the driver's own parameter layout (cuFuncGetParamInfo). A
 * driver graph with that kernel as a node and one captured from a stream, built before the
 * checkpoint, must run again after the resume with the right results: under translate cudaw
 * updates their nodes after the move.
 * usage: ckpt_e2e_driver <cudaw-ctl> <cudaw's libcudart> [<cubin> | --expect-bypass]
 * --expect-bypass (with CUDAW_DRIVER=0): dlopen must NOT answer with cudaw. */
#define _GNU_SOURCE
#include <cuda.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>

#include "cudaw_emu.h"
#include "e2e_common.h"

struct span {
  float *data;
  int n;
};

CUDAW_EMU_KERNEL(_Z4axpyfPKfPfi)
{
  (void)launch;
  float a = CUDAW_EMU_ARG(args, 0, float);
  const float *x = CUDAW_EMU_ARG(args, 1, const float *);
  float *y = CUDAW_EMU_ARG(args, 2, float *);
  for (int i = 0, n = CUDAW_EMU_ARG(args, 3, int); i < n; i++) y[i] = a * x[i] + y[i];
}

CUDAW_EMU_KERNEL(scale_span)
{
  (void)launch;
  struct span s = CUDAW_EMU_ARG(args, 0, struct span);
  float k = CUDAW_EMU_ARG(args, 1, float);
  for (int i = 0; i < s.n; i++) s.data[i] *= k;
}

static struct {
  CUresult (*init)(unsigned);
  CUresult (*retain)(CUcontext *, CUdevice);
  CUresult (*set_current)(CUcontext);
  CUresult (*alloc)(CUdeviceptr *, size_t);
  CUresult (*free_)(CUdeviceptr);
  CUresult (*htod)(CUdeviceptr, const void *, size_t);
  CUresult (*dtoh)(void *, CUdeviceptr, size_t);
  CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr);
  CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*address_free)(CUdeviceptr, size_t);
  CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                     unsigned long long);
  CUresult (*release)(CUmemGenericAllocationHandle);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
  CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
  CUresult (*load)(CUmodule *, const void *);
  CUresult (*function)(CUfunction *, CUmodule, const char *);
  CUresult (*unload)(CUmodule);
  CUresult (*copy2d)(const CUDA_MEMCPY2D *);
  CUresult (*copy_batch)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *,
                         size_t *, size_t, CUstream);
  CUresult (*copy_batch_3d)(size_t, CUDA_MEMCPY3D_BATCH_OP *, unsigned long long, CUstream);
  CUresult (*graph_create)(CUgraph *, unsigned);
  CUresult (*graph_add_kernel)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                               const CUDA_KERNEL_NODE_PARAMS *);
  CUresult (*graph_add_node)(CUgraphNode *, CUgraph, const CUgraphNode *, const CUgraphEdgeData *,
                             size_t, CUgraphNodeParams *);
  CUresult (*graph_add_memcpy)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                               const CUDA_MEMCPY3D *, CUcontext);
  CUresult (*graph_add_memset)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
                               const CUDA_MEMSET_NODE_PARAMS *, CUcontext);
  CUresult (*graph_instantiate)(CUgraphExec *, CUgraph, unsigned long long);
  CUresult (*graph_launch)(CUgraphExec, CUstream);
  CUresult (*graph_destroy)(CUgraph);
  CUresult (*exec_destroy)(CUgraphExec);
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void **, void **);
  CUresult (*stream_create)(CUstream *, unsigned);
  CUresult (*stream_destroy)(CUstream);
  CUresult (*begin_capture)(CUstream, CUstreamCaptureMode);
  CUresult (*end_capture)(CUstream, CUgraph *);
} cu;

static char cudaw_real_path[4096];

/* The file that defines code address p, resolved. */
static int defined_by_cudaw(const void *p)
{
  Dl_info info;
  char path[4096];
  if (!p || !dladdr(p, &info) || !info.dli_fname || !realpath(info.dli_fname, path)) return 0;
  return strcmp(path, cudaw_real_path) == 0;
}

static void get(CUresult (*proc)(const char *, void **, int, cuuint64_t,
                                 CUdriverProcAddressQueryResult *),
                const char *name, void *slot)
{
  void *fn = NULL;
  CUdriverProcAddressQueryResult status;
  CHECK(proc(name, &fn, 12000, 0, &status) == CUDA_SUCCESS && fn, "cuGetProcAddress(%s)", name);
  CHECK(defined_by_cudaw(fn), "cuGetProcAddress(%s) gave %p, not cudaw's wrapper", name, fn);
  memcpy(slot, &fn, sizeof fn);
}

#define CU_OK(call) CHECK((call) == CUDA_SUCCESS, "%s failed", #call)

static CUdeviceptr counter_buffer;
static atomic_long progress;
static atomic_int stop;

/* Driver calls in a loop: each writes the next counter value to the device. */
static void *worker(void *context)
{
  CU_OK(cu.set_current((CUcontext)context));
  for (long i = 1; !atomic_load(&stop); i++) {
    CU_OK(cu.htod(counter_buffer, &i, sizeof i));
    atomic_store(&progress, i);
  }
  return NULL;
}

static uint64_t field(const char *reply, const char *name)
{
  char key[64];
  snprintf(key, sizeof key, "\"%s\":", name);
  const char *at = strstr(reply, key);
  CHECK(at, "no %s in %s", name, reply);
  return strtoull(at + strlen(key), NULL, 10);
}

/* A driver graph: two axpy nodes over x and y (N floats), one added with cuGraphAddKernelNode and
 * one with the generic cuGraphAddNode, then a memcpy node (y to w) and two memset nodes (the
 * halves of z: cuGraphAddMemsetNode and the generic API), and a graph captured from a stream on
 * which axpy is launched twice with cuLaunchKernel; both built and run once before the
 * checkpoint. */
enum { GRAPH_N = 512 };
static struct {
  CUmodule module;
  CUgraph graph, captured;
  CUgraphExec exec, captured_exec;
  CUstream stream;
  CUdeviceptr x, y, w, z;
  float a;
  int n;
  float host_x[GRAPH_N], host_y[GRAPH_N];
} g;

static void *read_file(const char *path, size_t *size);

static void graph_build(const char *cubin, CUcontext ctx)
{
  size_t size;
  void *image = read_file(cubin, &size);
  CU_OK(cu.load(&g.module, image));
  free(image);
  CUfunction axpy;
  CU_OK(cu.function(&axpy, g.module, "_Z4axpyfPKfPfi"));
  int (*declare)(const char *, unsigned, const size_t *) =
      (__typeof__(declare))e2e_emu_symbol("cudaw_emu_set_kernel_param_sizes");
  const size_t sizes[] = {sizeof(float), sizeof(CUdeviceptr), sizeof(CUdeviceptr), sizeof(int)};
  CHECK(declare("_Z4axpyfPKfPfi", 4, sizes) == 0); /* the emu copies node arguments by size */
  for (int i = 0; i < GRAPH_N; i++) g.host_x[i] = (float)i, g.host_y[i] = 1.0f;
  CU_OK(cu.alloc(&g.x, sizeof g.host_x));
  CU_OK(cu.alloc(&g.y, sizeof g.host_y));
  CU_OK(cu.htod(g.x, g.host_x, sizeof g.host_x));
  CU_OK(cu.htod(g.y, g.host_y, sizeof g.host_y));
  g.a = 2.0f;
  g.n = GRAPH_N;
  void *args[] = {&g.a, &g.x, &g.y, &g.n};
  CUDA_KERNEL_NODE_PARAMS node = {.func = axpy, .gridDimX = 2, .gridDimY = 1, .gridDimZ = 1,
                                  .blockDimX = 256, .blockDimY = 1, .blockDimZ = 1,
                                  .kernelParams = args};
  CU_OK(cu.graph_create(&g.graph, 0));
  CUgraphNode added, generic;
  CU_OK(cu.graph_add_kernel(&added, g.graph, NULL, 0, &node));
  CUgraphNodeParams second = {.type = CU_GRAPH_NODE_TYPE_KERNEL};
  memcpy(&second.kernel, &node, sizeof node);
  CU_OK(cu.graph_add_node(&generic, g.graph, &added, NULL, 1, &second));
  CU_OK(cu.alloc(&g.w, sizeof g.host_y));
  CU_OK(cu.alloc(&g.z, GRAPH_N));
  CUDA_MEMCPY3D snap = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = g.y,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = g.w,
                        .WidthInBytes = sizeof g.host_y, .Height = 1, .Depth = 1};
  CUgraphNode copied, set, generic_set;
  CU_OK(cu.graph_add_memcpy(&copied, g.graph, &generic, 1, &snap, ctx));
  CUDA_MEMSET_NODE_PARAMS fill = {.dst = g.z, .value = 0x5a, .elementSize = 1,
                                  .width = GRAPH_N / 2, .height = 1};
  CU_OK(cu.graph_add_memset(&set, g.graph, &copied, 1, &fill, ctx));
  CUgraphNodeParams fill_generic = {.type = CU_GRAPH_NODE_TYPE_MEMSET};
  fill_generic.memset = (CUDA_MEMSET_NODE_PARAMS_v2){.dst = g.z + GRAPH_N / 2, .value = 0xa5,
                                                     .elementSize = 1, .width = GRAPH_N / 2,
                                                     .height = 1, .ctx = ctx};
  CU_OK(cu.graph_add_node(&generic_set, g.graph, &set, NULL, 1, &fill_generic));
  CU_OK(cu.graph_instantiate(&g.exec, g.graph, 0));
  CU_OK(cu.graph_launch(g.exec, NULL));
  CU_OK(cu.stream_create(&g.stream, 0));
  CU_OK(cu.begin_capture(g.stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  for (int i = 0; i < 2; i++) CU_OK(cu.launch(axpy, 2, 1, 1, 256, 1, 1, 0, g.stream, args, NULL));
  CU_OK(cu.end_capture(g.stream, &g.captured));
  CU_OK(cu.graph_instantiate(&g.captured_exec, g.captured, 0));
  CU_OK(cu.graph_launch(g.captured_exec, g.stream));
}

/* y after `runs` launches of the graphs (each adds two axpy); w holds y as the explicit graph
 * left it (the captured one ran after it), z its memset halves. */
static void graph_expect(int runs)
{
  float back[GRAPH_N], snap[GRAPH_N];
  unsigned char filled[GRAPH_N];
  CU_OK(cu.dtoh(back, g.y, sizeof back));
  CU_OK(cu.dtoh(snap, g.w, sizeof snap));
  CU_OK(cu.dtoh(filled, g.z, sizeof filled));
  for (int i = 0; i < GRAPH_N; i++) {
    CHECK(back[i] == g.host_y[i] + (float)runs * 4.0f * g.host_x[i], /* two axpy a run */
          "graph result y[%d] = %g after %d runs", i, (double)back[i], runs);
    CHECK(snap[i] == g.host_y[i] + (float)(runs - 1) * 4.0f * g.host_x[i],
          "memcpy node: w[%d] = %g after %d runs", i, (double)snap[i], runs);
    CHECK(filled[i] == (i < GRAPH_N / 2 ? 0x5a : 0xa5), "memset node: z[%d] = %#x", i,
          filled[i]);
  }
}

/* What the memcpy and memset nodes wrote, wiped: the next run must write it again. */
static void graph_wipe(void)
{
  static const unsigned char zeros[GRAPH_N * sizeof(float)];
  CU_OK(cu.htod(g.w, zeros, GRAPH_N * sizeof(float)));
  CU_OK(cu.htod(g.z, zeros, GRAPH_N));
}

/* After the resume: under remap the addresses are the same; under translate the resume moved
 * the memory (the emulated device never reuses an address) and cudaw must have updated both
 * nodes of the exec from the arguments it kept (a stale address faults on the emulated device).
 * Either way the graph runs again and adds its share. */
static void graph_after_resume(void)
{
  const char *policy = getenv("CUDAW_VMEM");
  CUresult relaunch = cu.graph_launch(g.exec, NULL);
  CHECK(relaunch == CUDA_SUCCESS, "the graph did not run after the resume: %d", relaunch);
  relaunch = cu.graph_launch(g.captured_exec, g.stream);
  CHECK(relaunch == CUDA_SUCCESS, "the captured graph did not run after the resume: %d", relaunch);
  graph_expect(4);
  if (policy && strcmp(policy, "translate") == 0)
    printf("driver graphs (explicit and captured; kernel, memcpy and memset nodes): updated after "
           "the move and ran again\n");
  else
    printf("driver graph: ran again after the resume\n");
  CU_OK(cu.exec_destroy(g.exec));
  CU_OK(cu.graph_destroy(g.graph));
  CU_OK(cu.exec_destroy(g.captured_exec));
  CU_OK(cu.graph_destroy(g.captured));
  CU_OK(cu.stream_destroy(g.stream));
  CU_OK(cu.free_(g.x));
  CU_OK(cu.free_(g.y));
  CU_OK(cu.free_(g.w));
  CU_OK(cu.free_(g.z));
  CU_OK(cu.unload(g.module));
}

/* A rectangle to device memory and back with cuMemcpy2D: the device address sits inside the
 * structure, which cudaw must translate under translate. */
static void copy_2d(CUdeviceptr device)
{
  enum { W = 100, H = 7, PITCH = 512 };
  unsigned char out[W * H], back[W * H];
  for (int i = 0; i < W * H; i++) out[i] = (unsigned char)(i * 7 + 3);
  CUDA_MEMCPY2D up = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = out, .srcPitch = W,
                      .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = device,
                      .dstPitch = PITCH, .WidthInBytes = W, .Height = H};
  CU_OK(cu.copy2d(&up));
  CUDA_MEMCPY2D down = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = device,
                        .srcPitch = PITCH, .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = back,
                        .dstPitch = W, .WidthInBytes = W, .Height = H};
  CU_OK(cu.copy2d(&down));
  CHECK(memcmp(out, back, sizeof out) == 0, "cuMemcpy2D round trip differs");
}

/* Batched copies from a to b (after a resume that moved both: the addresses sit in arrays and
 * structures, which cudaw must translate under translate): a's first 4096 bytes with
 * cuMemcpyBatchAsync, its next 4096 with cuMemcpy3DBatchAsync, each checked in b. */
static void copy_batches(CUdeviceptr a, CUdeviceptr b, const unsigned char *a_pattern)
{
  unsigned char back[4096];
  CUdeviceptr dsts[1] = {b}, srcs[1] = {a};
  size_t sizes[1] = {sizeof back}, index = 0;
  CUmemcpyAttributes attrs = {.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM};
  CU_OK(cu.copy_batch(dsts, srcs, sizes, 1, &attrs, &index, 1, NULL));
  CU_OK(cu.dtoh(back, b, sizeof back));
  CHECK(memcmp(back, a_pattern, sizeof back) == 0, "cuMemcpyBatchAsync copied the wrong bytes");
  CUDA_MEMCPY3D_BATCH_OP op = {.extent = {sizeof back, 1, 1},
                               .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM};
  op.src.type = op.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  op.src.op.ptr.ptr = a + sizeof back;
  op.dst.op.ptr.ptr = b;
  CU_OK(cu.copy_batch_3d(1, &op, 0, NULL));
  CU_OK(cu.dtoh(back, b, sizeof back));
  CHECK(memcmp(back, a_pattern + sizeof back, sizeof back) == 0,
        "cuMemcpy3DBatchAsync copied the wrong bytes");
}

static void *read_file(const char *path, size_t *size)
{
  FILE *f = fopen(path, "rb");
  CHECK(f, "cannot open %s", path);
  CHECK(fseek(f, 0, SEEK_END) == 0);
  long n = ftell(f);
  CHECK(n > 0 && fseek(f, 0, SEEK_SET) == 0);
  void *data = malloc((size_t)n);
  CHECK(data && fread(data, 1, (size_t)n, f) == (size_t)n, "reading %s", path);
  fclose(f);
  *size = (size_t)n;
  return data;
}

/* Kernels of a cubin loaded and launched through the driver, on virtual memory. */
static void launch_from_cubin(const char *path)
{
  size_t size;
  void *image = read_file(path, &size);
  CUmodule module;
  CU_OK(cu.load(&module, image));
  memset(image, 0, size); /* cudaw must have kept its own copy for the layouts */
  free(image);
  CUfunction axpy, scale;
  CU_OK(cu.function(&axpy, module, "_Z4axpyfPKfPfi"));
  CU_OK(cu.function(&scale, module, "scale_span"));
  enum { N = 1000 };
  float x[N], y[N], back[N];
  for (int i = 0; i < N; i++) x[i] = (float)i, y[i] = (float)(2 * i + 1);
  CUdeviceptr dx, dy;
  CU_OK(cu.alloc(&dx, sizeof x));
  CU_OK(cu.alloc(&dy, sizeof y));
  CU_OK(cu.htod(dx, x, sizeof x));
  CU_OK(cu.htod(dy, y, sizeof y));
  float a = 3.0f, k = 0.5f;
  int n = N;
  void *axpy_args[] = {&a, &dx, &dy, &n};
  CU_OK(cu.launch(axpy, 4, 1, 1, 256, 1, 1, 0, NULL, axpy_args, NULL));
  struct span s = {(float *)(uintptr_t)dy, N};
  void *scale_args[] = {&s, &k};
  CU_OK(cu.launch(scale, 4, 1, 1, 256, 1, 1, 0, NULL, scale_args, NULL));
  CU_OK(cu.dtoh(back, dy, sizeof back));
  for (int i = 0; i < N; i++)
    CHECK(back[i] == (3.0f * x[i] + y[i]) * 0.5f, "y[%d] = %g after the launches", i,
          (double)back[i]);

  /* The same kernel from a library cudaw never saw loaded. */
  cudaError_t (*load)(cudaLibrary_t *, const void *, enum cudaJitOption *, void **, unsigned,
                      enum cudaLibraryOption *, void **, unsigned) =
      (__typeof__(load))e2e_emu_symbol("cudaLibraryLoadData");
  cudaError_t (*kernel_of)(cudaKernel_t *, cudaLibrary_t, const char *) =
      (__typeof__(kernel_of))e2e_emu_symbol("cudaLibraryGetKernel");
  int (*declare)(const char *, unsigned, const size_t *) =
      (__typeof__(declare))e2e_emu_symbol("cudaw_emu_set_kernel_param_sizes");
  cudaLibrary_t hidden;
  cudaKernel_t hidden_axpy;
  CHECK(load(&hidden, "not an image the emu reads", NULL, NULL, 0, NULL, NULL, 0) == cudaSuccess);
  CHECK(kernel_of(&hidden_axpy, hidden, "_Z4axpyfPKfPfi") == cudaSuccess);
  const size_t sizes[] = {sizeof(float), sizeof(CUdeviceptr), sizeof(CUdeviceptr), sizeof(int)};
  CHECK(declare("_Z4axpyfPKfPfi", 4, sizes) == 0);
  CU_OK(cu.htod(dy, y, sizeof y));
  CU_OK(cu.launch((CUfunction)hidden_axpy, 4, 1, 1, 256, 1, 1, 0, NULL, axpy_args, NULL));
  CU_OK(cu.dtoh(back, dy, sizeof back));
  for (int i = 0; i < N; i++)
    CHECK(back[i] == 3.0f * x[i] + y[i], "y[%d] = %g after the launch of a kernel cudaw never "
          "saw loaded", i, (double)back[i]);
  CU_OK(cu.free_(dx));
  CU_OK(cu.free_(dy));
  CU_OK(cu.unload(module));
  printf("cubin %s: axpy and scale_span launched through cuLaunchKernel, results right; a "
         "kernel loaded behind cudaw's back too\n", path);
}

int main(int argc, char **argv)
{
  CHECK(argc >= 3, "usage: ckpt_e2e_driver <cudaw-ctl> <cudaw libcudart> [--expect-bypass]");
  CHECK(realpath(argv[2], cudaw_real_path), "realpath %s", argv[2]);
  int expect_bypass = argc > 3 && strcmp(argv[3], "--expect-bypass") == 0;
  const char *cubin = argc > 3 && !expect_bypass ? argv[3] : NULL;

  /* Asking whether the driver is loaded must not load it (nothing has opened it yet). */
  CHECK(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) == NULL,
        "dlopen(libcuda.so.1, RTLD_NOLOAD) answered before anything loaded the driver");
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  CHECK(!driver || dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) == driver,
        "dlopen(libcuda.so.1, RTLD_NOLOAD) after the driver loaded is not the same handle");
  void *proc = driver ? dlsym(driver, "cuGetProcAddress_v2") : NULL;
  if (expect_bypass) {
    CHECK(!defined_by_cudaw(proc), "CUDAW_DRIVER=0, yet dlopen(libcuda.so.1) answered with cudaw");
    printf("driver layer off: dlopen(libcuda.so.1) = %p, not cudaw\n", driver);
    return 0;
  }
  CHECK(driver, "dlopen(libcuda.so.1): %s", dlerror());
  CHECK(defined_by_cudaw(proc), "dlsym(libcuda.so.1, cuGetProcAddress_v2) is not cudaw's");
  CUresult (*get_proc)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
  memcpy(&get_proc, &proc, sizeof proc);
  get(get_proc, "cuInit", &cu.init);
  get(get_proc, "cuDevicePrimaryCtxRetain", &cu.retain);
  get(get_proc, "cuCtxSetCurrent", &cu.set_current);
  get(get_proc, "cuMemAlloc", &cu.alloc);
  get(get_proc, "cuMemFree", &cu.free_);
  get(get_proc, "cuMemcpyHtoD", &cu.htod);
  get(get_proc, "cuMemcpyDtoH", &cu.dtoh);
  get(get_proc, "cuMemGetAddressRange", &cu.range);
  get(get_proc, "cuMemAddressReserve", &cu.reserve);
  get(get_proc, "cuMemAddressFree", &cu.address_free);
  get(get_proc, "cuMemCreate", &cu.create);
  get(get_proc, "cuMemRelease", &cu.release);
  get(get_proc, "cuMemMap", &cu.map);
  get(get_proc, "cuMemUnmap", &cu.unmap);
  get(get_proc, "cuMemSetAccess", &cu.set_access);
  get(get_proc, "cuMemGetAllocationGranularity", &cu.granularity);
  get(get_proc, "cuModuleLoadData", &cu.load);
  get(get_proc, "cuModuleGetFunction", &cu.function);
  get(get_proc, "cuModuleUnload", &cu.unload);
  get(get_proc, "cuLaunchKernel", &cu.launch);
  get(get_proc, "cuMemcpy2D", &cu.copy2d);
  get(get_proc, "cuMemcpyBatchAsync", &cu.copy_batch);
  get(get_proc, "cuMemcpy3DBatchAsync", &cu.copy_batch_3d);
  get(get_proc, "cuGraphCreate", &cu.graph_create);
  get(get_proc, "cuGraphAddKernelNode", &cu.graph_add_kernel);
  get(get_proc, "cuGraphAddNode", &cu.graph_add_node);
  get(get_proc, "cuGraphAddMemcpyNode", &cu.graph_add_memcpy);
  get(get_proc, "cuGraphAddMemsetNode", &cu.graph_add_memset);
  get(get_proc, "cuGraphInstantiateWithFlags", &cu.graph_instantiate);
  get(get_proc, "cuGraphLaunch", &cu.graph_launch);
  get(get_proc, "cuGraphDestroy", &cu.graph_destroy);
  get(get_proc, "cuGraphExecDestroy", &cu.exec_destroy);
  get(get_proc, "cuStreamCreate", &cu.stream_create);
  get(get_proc, "cuStreamDestroy", &cu.stream_destroy);
  get(get_proc, "cuStreamBeginCapture", &cu.begin_capture);
  get(get_proc, "cuStreamEndCapture", &cu.end_capture);

  /* A function cudaw does not know: the driver's own, counted as not held. */
  void *newer = NULL;
  CUdriverProcAddressQueryResult found;
  CU_OK(get_proc("cuEmuNewerFunction", &newer, 12000, 0, &found));
  CHECK(newer && !defined_by_cudaw(newer), "an unknown driver function was not handed out as is");
  int answer = 0;
  CU_OK(((CUresult(*)(int *))newer)(&answer));
  CHECK(answer == 42);

  CU_OK(cu.init(0));
  CUcontext context;
  CU_OK(cu.retain(&context, 0));
  CU_OK(cu.set_current(context));

  /* Three allocations: one large, two small ones that vmem packs into a shared chunk. */
  const size_t sizes[3] = {8u << 20, 4096, (1u << 20) + 3};
  CUdeviceptr buffers[3];
  unsigned char *patterns[3];
  for (int i = 0; i < 3; i++) {
    CU_OK(cu.alloc(&buffers[i], sizes[i]));
    patterns[i] = malloc(sizes[i]);
    CHECK(patterns[i]);
    for (size_t j = 0; j < sizes[i]; j++) patterns[i][j] = (unsigned char)(j * 131 + i * 7 + 1);
    CU_OK(cu.htod(buffers[i], patterns[i], sizes[i]));
  }
  CUdeviceptr base;
  size_t size;
  CU_OK(cu.range(&base, &size, buffers[1] + 100));
  CHECK(base == buffers[1] && size == sizes[1],
        "cuMemGetAddressRange of a packed allocation: %#llx + %zu, expected %#llx + %zu "
        "(vmem did not allocate it)", (unsigned long long)base, size,
        (unsigned long long)buffers[1], sizes[1]);
  CU_OK(cu.alloc(&counter_buffer, sizeof(long)));

  /* The program's own mappings: two physical allocations in one reserved range; the second is
   * released at once, so that only its mapping holds it (as PyTorch's expandable segments do). */
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
  size_t granule;
  CU_OK(cu.granularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  size_t first = 2 * granule, second = granule, mapped = first + second;
  CUdeviceptr range_base;
  CU_OK(cu.reserve(&range_base, 2 * mapped, 0, 0, 0));
  CUmemGenericAllocationHandle handle_a, handle_b;
  CU_OK(cu.create(&handle_a, first, &prop, 0));
  CU_OK(cu.create(&handle_b, second, &prop, 0));
  CHECK(handle_a > 65536 && handle_b > 65536, "handles %llu, %llu are the driver's, not cudaw's",
        (unsigned long long)handle_a, (unsigned long long)handle_b);
  CU_OK(cu.map(range_base, first, 0, handle_a, 0));
  CU_OK(cu.map(range_base + first, second, 0, handle_b, 0));
  CU_OK(cu.release(handle_b));
  CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CU_OK(cu.set_access(range_base, mapped, &access, 1));
  unsigned char *vmm_pattern = malloc(mapped);
  CHECK(vmm_pattern);
  for (size_t j = 0; j < mapped; j++) vmm_pattern[j] = (unsigned char)(j * 29 + 5);
  CU_OK(cu.htod(range_base, vmm_pattern, mapped));

  if (cubin) {
    graph_build(cubin, context);
    graph_expect(2);
    graph_wipe();
  }

  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, worker, context) == 0);
  while (atomic_load(&progress) < 100) e2e_sleep_us(100);

  size_t free_before, free_paused, total;
  e2e_emu_mem_info(&free_before, &total);
  char reply[4096];
  e2e_ask("checkpoint", reply, sizeof reply);
  CHECK(e2e_reply_ok(reply), "checkpoint: %s", reply);
  CHECK(e2e_wait_state("paused", 10), "not paused");
  e2e_ask("status", reply, sizeof reply);
  uint64_t image = field(reply, "image_bytes");
  CHECK(field(reply, "ungated_functions") == 1, "status does not count the driver function "
        "cudaw does not hold: %s", reply);
  char said[4096];
  CHECK(e2e_run_ctl(argv[1], "status", (long)getpid(), said, sizeof said) == 0 &&
            strstr(said, "NOT fully held"), "cudaw-ctl status does not say the pause is partial: %s",
        said);
  CHECK(image >= sizes[0] + sizes[1] + sizes[2] + mapped, "image holds %" PRIu64 " bytes: "
        "driver allocations or the program's mappings were not checkpointed (%s)", image, reply);
  e2e_emu_mem_info(&free_paused, &total);
  CHECK(free_paused >= free_before + sizes[0] + mapped, "the device got %zu bytes back, not the "
        "%zu of the large allocation and the mappings", free_paused - free_before,
        sizes[0] + mapped);
  long held = atomic_load(&progress);
  e2e_sleep_us(200000);
  CHECK(atomic_load(&progress) <= held + 1, "driver calls went on while paused: %ld -> %ld",
        held, atomic_load(&progress));

  e2e_ask("resume", reply, sizeof reply);
  CHECK(e2e_reply_ok(reply), "resume: %s", reply);
  CHECK(e2e_wait_state("running", 10), "not running again");
  long resumed = atomic_load(&progress);
  double deadline = e2e_now() + 10;
  while (atomic_load(&progress) < resumed + 100 && e2e_now() < deadline) e2e_sleep_us(100);
  CHECK(atomic_load(&progress) >= resumed + 100, "no progress after resume");
  atomic_store(&stop, 1);
  pthread_join(thread, NULL);

  long last = 0;
  CU_OK(cu.dtoh(&last, counter_buffer, sizeof last));
  CHECK(last == atomic_load(&progress), "counter %ld, expected %ld", last, atomic_load(&progress));
  for (int i = 0; i < 3; i++) {
    unsigned char *back = malloc(sizes[i]);
    CHECK(back);
    CU_OK(cu.dtoh(back, buffers[i], sizes[i]));
    CHECK(memcmp(back, patterns[i], sizes[i]) == 0, "buffer %d differs after resume", i);
    free(back);
  }
  copy_batches(buffers[0], buffers[1], patterns[0]);
  for (int i = 0; i < 3; i++) {
    free(patterns[i]);
    CU_OK(cu.free_(buffers[i]));
  }
  CU_OK(cu.free_(counter_buffer));
  CUdeviceptr rectangle;
  CU_OK(cu.alloc(&rectangle, 4096));
  copy_2d(rectangle);
  CU_OK(cu.free_(rectangle));
  unsigned char *vmm_back = malloc(mapped);
  CHECK(vmm_back);
  CU_OK(cu.dtoh(vmm_back, range_base, mapped));
  CHECK(memcmp(vmm_back, vmm_pattern, mapped) == 0, "the program's mapped memory differs");
  CU_OK(cu.unmap(range_base, mapped));
  CU_OK(cu.release(handle_a));
  CHECK(cu.release(handle_b) != CUDA_SUCCESS, "a handle released twice was accepted");
  CU_OK(cu.address_free(range_base, 2 * mapped));
  free(vmm_back);
  free(vmm_pattern);
  if (cubin) {
    graph_after_resume();
    launch_from_cubin(cubin);
  }
  printf("driver layer: %" PRIu64 " bytes checkpointed, %zu bytes given back while paused, "
         "%ld calls held at %ld\n", image, free_paused - free_before, held, held);
  return 0;
}
