/* Description: one program on two devices under cudaw (the emulated device with
 * CUDAW_EMU_DEVICES=2, CUDAW_MEM_LIMIT=96M), under both vmem policies:
 *   placement: allocations land on the device current for the calling thread, also with four
 *              threads switching devices all the time (cudaGetDevice per thread, pointer
 *              attributes, each emulated device's own used memory);
 *   quota:     CUDAW_MEM_LIMIT holds per device (an allocation that fits device 0's share but not
 *              device 1's succeeds on 0, fails on 1), cudaMemGetInfo answers for the current one;
 *   peer:      cudaDeviceEnablePeerAccess / Disable and their errors, and the driver's
 *              cuCtxEnablePeerAccess / Disable (as a static runtime calls them); under remap a kernel on
 *              device 1 reads device 0's memory only while peer access is enabled (the emulated
 *              device, like the driver, lets a device touch VMM memory only where cuMemSetAccess
 *              granted it: cudaw must grant device 1 every chunk of device 0, existing and later
 *              ones, and revoke on disable); cudaMemcpyPeer(Async) with and without peer access;
 *   checkpoint: a checkpoint (control socket, then SIGUSR1) gives back both devices' memory (each
 *              emulated device's used memory drops to 0), status and cudaw-ctl show per-device
 *              image bytes, the resume (cudaw-ctl) brings every chunk back on its own device with
 *              every byte, and peer access still works afterwards.
 * usage: e2e_multi <cudaw-ctl> */
#include "e2e_common.h"

#include <cuda.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "cudaw_emu.h"

#define MIB ((size_t)1 << 20)

/* nvcc's registration ABI (crt/host_runtime.h), exported by cudaw as by the real runtime. */
extern void **__cudaRegisterFatBinary(void *fatbin_wrapper);
extern void __cudaRegisterFatBinaryEnd(void **handle);
extern void __cudaRegisterFunction(void **handle, const char *host_fun, char *device_fun,
                                   const char *device_name, int thread_limit, uint3 *tid,
                                   uint3 *bid, dim3 *block_dim, dim3 *grid_dim, int *warp_size);

static const char *ctl;
static int remap;

/* ---- the emulated device, past cudaw ---- */

/* Bytes in use on `device` as the emulated device counts them (what another process would see). */
static size_t emu_used(int device)
{
  cudaError_t (*get)(int *) = (cudaError_t(*)(int *))e2e_emu_symbol("cudaGetDevice");
  cudaError_t (*set)(int) = (cudaError_t(*)(int))e2e_emu_symbol("cudaSetDevice");
  int previous;
  CHECK(get(&previous) == cudaSuccess && set(device) == cudaSuccess);
  size_t free_bytes, total;
  e2e_emu_mem_info(&free_bytes, &total);
  CHECK(set(previous) == cudaSuccess);
  return total - free_bytes;
}

/* ---- a kernel that sums weighted bytes, checking the device's access like a GPU ---- */

static int (*emu_access)(const struct cudaw_emu_launch *, const void *, size_t);

static void sum_kernel(const struct cudaw_emu_launch *launch, void **args)
{
  const unsigned char *p = CUDAW_EMU_ARG(args, 0, const unsigned char *);
  size_t n = CUDAW_EMU_ARG(args, 1, size_t);
  uint64_t *out = CUDAW_EMU_ARG(args, 2, uint64_t *);
  if (emu_access(launch, p, n) || emu_access(launch, out, sizeof *out)) return;
  uint64_t sum = 0;
  for (size_t i = 0; i < n; i++) sum += (uint64_t)p[i] * (i % 7 + 1);
  *out = sum;
}

static void sum_stub(void) {}

static void register_kernel(void)
{
  int (*register_impl)(const char *, cudaw_emu_kernel_fn) =
      (int (*)(const char *, cudaw_emu_kernel_fn))e2e_emu_symbol("cudaw_emu_register_kernel");
  emu_access = (int (*)(const struct cudaw_emu_launch *, const void *, size_t))e2e_emu_symbol(
      "cudaw_emu_access");
  CHECK(register_impl("_Z3sumPKhmPm", sum_kernel) == 0);
  static struct { int magic, version; const void *data, *filename; } wrapper = {0x466243B1, 1, 0, 0};
  void **handle = __cudaRegisterFatBinary(&wrapper);
  __cudaRegisterFunction(handle, (const char *)sum_stub, (char *)"_Z3sumPKhmPm", "_Z3sumPKhmPm",
                         -1, 0, 0, 0, 0, 0);
  __cudaRegisterFatBinaryEnd(handle);
}

static uint64_t host_sum(int buffer, size_t n)
{
  uint64_t sum = 0;
  for (size_t i = 0; i < n; i++) sum += (uint64_t)e2e_pattern(buffer, i) * (i % 7 + 1);
  return sum;
}

/* ---- buffers with known contents, each on its device ---- */

struct buffer {
  int device;
  unsigned char *p;
  size_t size;
};

enum { A0, S0, B1, S1, OUT0, OUT1, BUFFERS }; /* OUTn: where kernels on device n write */
static struct buffer buffers[BUFFERS] = {
    [A0] = {0, NULL, 16 * MIB + 17}, [S0] = {0, NULL, 4096},  [B1] = {1, NULL, 24 * MIB},
    [S1] = {1, NULL, 1000},          [OUT0] = {0, NULL, 512}, [OUT1] = {1, NULL, 512},
};

static void fill(int index)
{
  struct buffer *b = &buffers[index];
  unsigned char *host = malloc(b->size);
  CHECK(host);
  for (size_t i = 0; i < b->size; i++) host[i] = e2e_pattern(index, i);
  CUDA_OK(cudaSetDevice(b->device));
  CUDA_OK(cudaMemcpy(b->p, host, b->size, cudaMemcpyHostToDevice));
  free(host);
}

static void check_buffer(int index, const char *when)
{
  struct buffer *b = &buffers[index];
  struct cudaPointerAttributes attributes;
  CUDA_OK(cudaPointerGetAttributes(&attributes, b->p));
  CHECK(attributes.type == cudaMemoryTypeDevice && attributes.device == b->device,
        "%s: buffer %d is on device %d (type %d), expected %d", when, index, attributes.device,
        (int)attributes.type, b->device);
  unsigned char *host = malloc(b->size);
  CHECK(host);
  CUDA_OK(cudaSetDevice(b->device));
  CUDA_OK(cudaMemcpy(host, b->p, b->size, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < b->size; i++)
    if (host[i] != e2e_pattern(index, i))
      test_fail("%s: buffer %d (device %d) byte %zu is %#x, expected %#x", when, index, b->device,
                i, host[i], e2e_pattern(index, i));
  free(host);
}

static void check_all(const char *when)
{
  for (int i = 0; i < BUFFERS; i++)
    if (i != OUT0 && i != OUT1) check_buffer(i, when);
}

/* Run the sum kernel on `device` over n bytes of buffer `index`; its result or the error. */
static cudaError_t kernel_sum(int device, int index, size_t n, uint64_t *sum)
{
  CUDA_OK(cudaSetDevice(device));
  const unsigned char *p = buffers[index].p;
  uint64_t *out = (uint64_t *)buffers[device ? OUT1 : OUT0].p;
  void *args[] = {&p, &n, &out};
  cudaError_t e = cudaLaunchKernel((const void *)sum_stub, (dim3){1, 1, 1}, (dim3){1, 1, 1}, args,
                                   0, 0);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return e;
  }
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(sum, out, sizeof *sum, cudaMemcpyDeviceToHost));
  return cudaSuccess;
}

static void expect_kernel(int device, int index, int works, const char *when)
{
  size_t n = buffers[index].size;
  uint64_t sum = 0;
  cudaError_t e = kernel_sum(device, index, n, &sum);
  if (works)
    CHECK(e == cudaSuccess && sum == host_sum(index, n),
          "%s: kernel on device %d over buffer %d: %s, sum %llu (expected %llu)", when, device,
          index, cudaGetErrorName(e), (unsigned long long)sum,
          (unsigned long long)host_sum(index, n));
  else
    CHECK(e == cudaErrorIllegalAddress,
          "%s: kernel on device %d over buffer %d of device %d: %s, expected "
          "cudaErrorIllegalAddress", when, device, index, buffers[index].device,
          cudaGetErrorName(e));
}

/* ---- placement from several threads ---- */

static void *switcher(void *arg)
{
  int index = (int)(intptr_t)arg;
  uint64_t random = 0x9e3779b97f4a7c15ull * (uint64_t)(index + 1);
  unsigned char *host = malloc(MIB);
  CHECK(host);
  for (int round = 0; round < 150; round++) {
    int device = (round + index) % 2;
    CUDA_OK(cudaSetDevice(device));
    size_t size = 4096 + e2e_random(&random) % MIB;
    unsigned char *p;
    CUDA_OK(cudaMalloc((void **)&p, size));
    int current = -1;
    CUDA_OK(cudaGetDevice(&current));
    CHECK(current == device, "thread %d: current device %d, expected %d", index, current, device);
    struct cudaPointerAttributes attributes;
    CUDA_OK(cudaPointerGetAttributes(&attributes, p));
    CHECK(attributes.device == device, "thread %d: allocation on device %d, expected %d", index,
          attributes.device, device);
    CUDA_OK(cudaMemset(p, round & 0xff, size));
    CUDA_OK(cudaMemcpy(host, p + size - 64, 64, cudaMemcpyDeviceToHost));
    for (int i = 0; i < 64; i++) CHECK(host[i] == (round & 0xff));
    CUDA_OK(cudaFree(p));
  }
  free(host);
  return NULL;
}

static void test_placement(void)
{
  size_t used0 = emu_used(0), used1 = emu_used(1);
  for (int i = 0; i < BUFFERS; i++) {
    CUDA_OK(cudaSetDevice(buffers[i].device));
    CUDA_OK(cudaMalloc((void **)&buffers[i].p, buffers[i].size));
    if (i != OUT0 && i != OUT1) fill(i);
  }
  CHECK(emu_used(0) >= used0 + 16 * MIB && emu_used(1) >= used1 + 24 * MIB,
        "device memory used: device 0 %zu -> %zu, device 1 %zu -> %zu", used0, emu_used(0), used1,
        emu_used(1));
  check_all("after allocation");
  pthread_t threads[4];
  for (int i = 0; i < 4; i++)
    CHECK(pthread_create(&threads[i], NULL, switcher, (void *)(intptr_t)i) == 0);
  for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
  check_all("after the threads");
}

/* ---- quota and cudaMemGetInfo per device ---- */

static void test_quota(void)
{
  size_t free0, total0, free1, total1;
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaMemGetInfo(&free0, &total0));
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaMemGetInfo(&free1, &total1));
  CHECK(total0 == 96 * MIB && total1 == 96 * MIB, "totals %zu, %zu: expected the 96 MiB limit",
        total0, total1);
  /* Device 0 holds ~18 MiB (16 MiB + 17 in granules, an arena), device 1 ~26 MiB. */
  CHECK(free0 <= total0 - 16 * MIB && free0 >= total0 - 24 * MIB, "device 0 free %zu", free0);
  CHECK(free1 <= total1 - 24 * MIB && free1 >= total1 - 32 * MIB, "device 1 free %zu", free1);
  /* 64 MiB fits device 0's share, not device 1's; one limit for both would refuse it twice. */
  void *p = NULL;
  CUDA_OK(cudaSetDevice(1));
  cudaError_t e = cudaMalloc(&p, 72 * MIB);
  CHECK(e == cudaErrorMemoryAllocation, "72 MiB more on device 1: %s", cudaGetErrorName(e));
  cudaGetLastError();
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaMalloc(&p, 72 * MIB));
  size_t free_now, total;
  CUDA_OK(cudaMemGetInfo(&free_now, &total));
  CHECK(free_now + 72 * MIB <= free0, "device 0 free %zu after 72 MiB more (was %zu)", free_now,
        free0);
  CUDA_OK(cudaFree(p));
}

/* ---- peer access ---- */

/* cudaMemcpyPeer of part of A0 (device 0) to device 1, cudaMemcpyPeerAsync back to device 0,
 * and the bytes checked. With peer access the copies run device to device (device 1 reads A0
 * directly: only where cudaw opened A0 to it); without, they are staged. */
static void peer_copies(const char *when)
{
  unsigned char *scratch1, *scratch0, host[3000];
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaMalloc((void **)&scratch1, sizeof host));
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaMalloc((void **)&scratch0, sizeof host));
  CUDA_OK(cudaMemcpyPeer(scratch1, 1, buffers[A0].p + 100, 0, sizeof host));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  CUDA_OK(cudaMemcpyPeerAsync(scratch0, 0, scratch1, 1, sizeof host, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaMemcpy(host, scratch0, sizeof host, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < sizeof host; i++)
    CHECK(host[i] == e2e_pattern(A0, i + 100), "%s: peer copies: byte %zu is %#x", when, i, host[i]);
  /* Plain copies of the other device's memory, as programs write them with cudaMalloc memory:
   * device 1 current, device 0's memory to the host (synchronous and on a stream of device 1),
   * and host to device 0's memory. */
  CUDA_OK(cudaSetDevice(1));
  memset(host, 0, sizeof host);
  CUDA_OK(cudaMemcpy(host, buffers[A0].p + 200, sizeof host, cudaMemcpyDefault));
  for (size_t i = 0; i < sizeof host; i++)
    CHECK(host[i] == e2e_pattern(A0, i + 200), "%s: copy of device 0's memory with device 1 "
          "current: byte %zu is %#x", when, i, host[i]);
  CUDA_OK(cudaStreamCreate(&stream));
  memset(host, 0, sizeof host);
  CUDA_OK(cudaMemcpyAsync(host, buffers[A0].p + 300, sizeof host, cudaMemcpyDeviceToHost, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  for (size_t i = 0; i < sizeof host; i++)
    CHECK(host[i] == e2e_pattern(A0, i + 300), "%s: copy of device 0's memory on a stream of "
          "device 1: byte %zu is %#x", when, i, host[i]);
  CUDA_OK(cudaMemcpyAsync(scratch0, host, sizeof host, cudaMemcpyHostToDevice, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaStreamDestroy(stream));
  unsigned char back[sizeof host];
  CUDA_OK(cudaMemcpy(back, scratch0, sizeof back, cudaMemcpyDeviceToHost));
  CHECK(memcmp(back, host, sizeof back) == 0, "%s: host to device 0's memory with device 1 current",
        when);
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaFree(scratch0));
  CUDA_OK(cudaFree(scratch1));
}

/* The same through the driver's calls on primary contexts (cudaw's wrappers, found as a program
 * linked against libcuda finds them). */
static void driver_peer_access(void)
{
  CUresult (*retain)(CUcontext *, CUdevice) =
      (CUresult(*)(CUcontext *, CUdevice))dlsym(RTLD_DEFAULT, "cuDevicePrimaryCtxRetain");
  CUresult (*set_current)(CUcontext) = (CUresult(*)(CUcontext))dlsym(RTLD_DEFAULT, "cuCtxSetCurrent");
  CUresult (*enable)(CUcontext, unsigned) =
      (CUresult(*)(CUcontext, unsigned))dlsym(RTLD_DEFAULT, "cuCtxEnablePeerAccess");
  CUresult (*disable)(CUcontext) = (CUresult(*)(CUcontext))dlsym(RTLD_DEFAULT, "cuCtxDisablePeerAccess");
  CHECK(retain && set_current && enable && disable, "cudaw exports the driver's peer calls");
  CUcontext context0, context1;
  CHECK(retain(&context0, 0) == CUDA_SUCCESS && retain(&context1, 1) == CUDA_SUCCESS);
  CHECK(set_current(context1) == CUDA_SUCCESS);
  CUresult r = enable(context0, 0);
  CHECK(r == CUDA_SUCCESS, "cuCtxEnablePeerAccess: %d", (int)r);
  r = enable(context0, 0);
  CHECK(r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "cuCtxEnablePeerAccess twice: %d", (int)r);
  if (remap) expect_kernel(1, A0, 1, "peer access enabled through the driver");
  peer_copies("peer access enabled through the driver");
  CHECK(set_current(context1) == CUDA_SUCCESS);
  CHECK(disable(context0) == CUDA_SUCCESS);
  if (remap) expect_kernel(1, A0, 0, "peer access disabled through the driver");
}

static void test_peer(void)
{
  int can = 0;
  CUDA_OK(cudaDeviceCanAccessPeer(&can, 1, 0));
  CHECK(can == 1);
  peer_copies("without peer access");
  if (remap) expect_kernel(1, A0, 0, "before peer access");
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaDeviceEnablePeerAccess(0, 0));
  cudaError_t e = cudaDeviceEnablePeerAccess(0, 0);
  CHECK(e == cudaErrorPeerAccessAlreadyEnabled, "enabling twice: %s", cudaGetErrorName(e));
  cudaGetLastError();
  e = cudaDeviceEnablePeerAccess(1, 0);
  CHECK(e == cudaErrorInvalidDevice, "enabling access to itself: %s", cudaGetErrorName(e));
  cudaGetLastError();
  peer_copies("with peer access");
  if (remap) {
    expect_kernel(1, A0, 1, "peer access enabled, existing chunk");
    expect_kernel(1, S0, 1, "peer access enabled, existing arena");
  }
  /* A chunk of device 0 made after the enable is open to device 1 too. */
  unsigned char *later;
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaMalloc((void **)&later, 6 * MIB));
  CUDA_OK(cudaMemcpy(later, buffers[B1].p, 6 * MIB, cudaMemcpyDefault));
  if (remap) {
    struct buffer saved = buffers[B1];
    buffers[B1] = (struct buffer){0, later, 6 * MIB}; /* same pattern as B1's first 6 MiB */
    expect_kernel(1, B1, 1, "peer access enabled, later chunk");
    buffers[B1] = saved;
  }
  CUDA_OK(cudaFree(later));
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaDeviceDisablePeerAccess(0));
  e = cudaDeviceDisablePeerAccess(0);
  CHECK(e == cudaErrorPeerAccessNotEnabled, "disabling twice: %s", cudaGetErrorName(e));
  cudaGetLastError();
  if (remap) expect_kernel(1, A0, 0, "after disabling peer access");
  peer_copies("after disabling peer access");
  driver_peer_access();
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaDeviceEnablePeerAccess(0, 0)); /* on for the checkpoint */
}

/* ---- checkpoint and resume ---- */

static void expect_paused_and_released(const char *how, size_t held0, size_t held1)
{
  CHECK(e2e_wait_state("paused", 10), "%s: not paused", how);
  CHECK(emu_used(0) == 0 && emu_used(1) == 0,
        "%s: device memory still in use while paused: device 0 %zu, device 1 %zu bytes", how,
        emu_used(0), emu_used(1));
  char reply[4096];
  e2e_ask("status", reply, sizeof reply);
  const char *image = strstr(reply, "\"image_device_bytes\":[");
  CHECK(image, "status has no per-device figures: %s", reply);
  unsigned long long bytes0 = 0, bytes1 = 0;
  /* The image holds what vmem backed; the device counts that rounded to its pages, and the
   * context's stack reservation (1 KiB for each of the emu's 2048 resident threads), which
   * goes while paused too but is no part of the image. */
  held0 -= 2 * MIB;
  held1 -= 2 * MIB;
  /* Under translate each chunk is mapped in whole 2 MiB granules (its home, vmem/home.c). */
  unsigned long long slack = remap ? 64 * 1024 : 4 * MIB;
  CHECK(sscanf(image, "\"image_device_bytes\":[%llu,%llu]", &bytes0, &bytes1) == 2 &&
            bytes0 <= held0 && bytes0 + slack >= held0 && bytes0 > 16 * MIB &&
            bytes1 <= held1 && bytes1 + slack >= held1 && bytes1 > 24 * MIB,
        "%s: image per device %llu, %llu; the devices held %zu, %zu: %s", how, bytes0, bytes1,
        held0, held1, reply);
  char out[4096];
  CHECK(e2e_run_ctl(ctl, "status", (long)getpid(), out, sizeof out) == 0 &&
            strstr(out, "device 0: ") && strstr(out, ", device 1: "),
        "cudaw-ctl status: %s", out);
}

static void resume_and_check(const char *how, size_t held0, size_t held1)
{
  char out[4096];
  int code = e2e_run_ctl(ctl, "resume", (long)getpid(), out, sizeof out);
  CHECK(code == 0, "%s: cudaw-ctl resume: exit %d: %s", how, code, out);
  /* Under translate a resume maps memory at the old addresses in whole 2 MiB granules (vmem's
   * homes), where cudaMalloc had charged pages: a little more, the same at every resume. */
  static size_t resumed0, resumed1;
  size_t slack = remap ? 0 : 4 * MIB;
  CHECK(emu_used(0) >= held0 && emu_used(0) <= held0 + slack && emu_used(1) >= held1 &&
            emu_used(1) <= held1 + slack && (!resumed0 || emu_used(0) == resumed0) &&
            (!resumed1 || emu_used(1) == resumed1),
        "%s: after resume device 0 holds %zu (was %zu), device 1 %zu (was %zu)", how, emu_used(0),
        held0, emu_used(1), held1);
  resumed0 = emu_used(0);
  resumed1 = emu_used(1);
  check_all(how);
  if (remap) {
    expect_kernel(1, A0, 1, how);
    expect_kernel(0, A0, 1, how);
    expect_kernel(1, B1, 1, how);
  }
  peer_copies(how);
}

/* Under translate cudaw keeps the memory of freed chunks for reuse (vmem/backing.c); an
 * allocation that cannot fit makes it give that back, so that what the devices hold afterwards
 * is the program's own memory, which the checkpoint must account for. */
static void drop_kept_memory(void)
{
  int current;
  CUDA_OK(cudaGetDevice(&current));
  for (int device = 0; device < 2; device++) {
    void *p;
    CUDA_OK(cudaSetDevice(device));
    CHECK(cudaMalloc(&p, 255 * MIB) == cudaErrorMemoryAllocation, "255 MiB fit on device %d",
          device);
    cudaGetLastError();
  }
  CUDA_OK(cudaSetDevice(current));
}

static void test_checkpoint(void)
{
  drop_kept_memory();
  size_t held0 = emu_used(0), held1 = emu_used(1);
  char reply[4096];
  e2e_ask("checkpoint", reply, sizeof reply);
  CHECK(e2e_reply_ok(reply), "checkpoint: %s", reply);
  expect_paused_and_released("control socket", held0, held1);
  resume_and_check("resumed after the control socket's checkpoint", held0, held1);

  CHECK(kill(getpid(), SIGUSR1) == 0);
  expect_paused_and_released("SIGUSR1", held0, held1);
  resume_and_check("resumed after SIGUSR1", held0, held1);
}

int main(int argc, char **argv)
{
  CHECK(argc >= 2, "usage: e2e_multi <cudaw-ctl>");
  ctl = argv[1];
  const char *policy = getenv("CUDAW_VMEM");
  remap = policy && strcmp(policy, "remap") == 0;
  int count = 0;
  CUDA_OK(cudaGetDeviceCount(&count));
  if (count < 2) test_skip("fewer than 2 devices (set CUDAW_EMU_DEVICES=2)");
  register_kernel();
  test_placement();
  test_quota();
  test_peer();
  test_checkpoint();
  for (int i = 0; i < BUFFERS; i++) CUDA_OK(cudaFree(buffers[i].p));
  printf("e2e_multi (%s): two devices placed, limited, peered, checkpointed and resumed\n",
         remap ? "remap" : "translate");
  return 0;
}
