/* Description: CUDA graphs replayed after a checkpoint moved device memory under
 * CUDAW_VMEM=translate (issue 21), in an unmodified nvcc program (shared runtime) on the emulated
 * device. Graphs are built and instantiated before the checkpoint: kernel nodes added with
 * cudaGraphAddKernelNode and cudaGraphAddNode, one exec node overridden with
 * cudaGraphExecKernelNodeSetParams, memset and memcpy nodes, a stream capture, a graph with a
 * child graph node and a capture of a graph launch. After the resume (memory moved: the emulated
 * device never reuses an address, so every stale real address faults) the execs must run again
 * and write the right buffers, the graph instantiated again too, and the graph with a child node
 * and the capture of a graph launch, which cudaw cannot update, must be refused
 * (cudaErrorNotPermitted) with their reasons on stderr (the ctest regex). Modes:
 *   forced:   the move happens (status moved_bytes > 0);
 *   identity: CUDAW_EMU_ALLOC=lowest, nothing moves and everything runs, the refused ones too;
 *   gpu:      on a real GPU with CUDAW_TEST_MOVE=1: some memory must move (the knob), then as
 *             forced (a stale address there faults the context or writes elsewhere).
 * Exits 77 without a device. usage: e2e_graph_moved forced|identity|gpu */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "cudaw_emu.h"
#include "test.h"

#define CUDA_OK(call)                                                                    \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    CHECK(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorName(e_));                     \
  } while (0)

#define WORDS 64 /* written by each fill */

__host__ __device__ static unsigned value(unsigned seed, unsigned word)
{
  return seed * 2654435761u ^ (word * 977u + 1u);
}

/* Writes WORDS values at p. */
__global__ void fill(unsigned *p, unsigned seed)
{
  for (unsigned k = threadIdx.x; k < WORDS; k += blockDim.x) p[k] = value(seed, k);
}

/* The emulated device runs it on the host, checking every access as a GPU would fault. */
static int (*emu_access)(const struct cudaw_emu_launch *, const void *, size_t);
#define cudaw_emu_access emu_access

CUDAW_EMU_KERNEL(_Z4fillPjj) {
  unsigned *p = CUDAW_EMU_ARG(args, 0, unsigned *);
  unsigned seed = CUDAW_EMU_ARG(args, 1, unsigned);
  if (cudaw_emu_access(launch, p, WORDS * sizeof *p) != 0) return;
  for (unsigned k = 0; k < WORDS; k++) p[k] = value(seed, k);
}

/* One request line to this process's control socket; the reply line into reply. */
static void ask(const char *request, char *reply, size_t len)
{
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  const char *dir = getenv("CUDAW_RUN_DIR");
  CHECK(dir && *dir, "CUDAW_RUN_DIR must be set");
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s/%ld.sock", dir, (long)getpid());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0,
        "control socket %s: %s", addr.sun_path, strerror(errno));
  size_t n = strlen(request), used = 0;
  CHECK(send(fd, request, n, MSG_NOSIGNAL) == (ssize_t)n, "send %s", request);
  while (used + 1 < len) {
    ssize_t got = recv(fd, reply + used, len - 1 - used, 0);
    if (got <= 0) break;
    used += (size_t)got;
    if (memchr(reply, '\n', used)) break;
  }
  reply[used] = '\0';
  close(fd);
  CHECK(used > 0, "no reply to %s", request);
}

static unsigned long long json_u64(const char *reply, const char *key)
{
  char want[64];
  snprintf(want, sizeof want, "\"%s\":", key);
  const char *at = strstr(reply, want);
  CHECK(at != NULL, "status has no %s: %s", key, reply);
  return strtoull(at + strlen(want), NULL, 10);
}

/* Small (one arena), medium and large buffers: every kind of chunk moves. */
static const size_t sizes[] = {256, 4096, 100000, 3 << 20, 512, 16 << 20};
#define N ((int)(sizeof sizes / sizeof sizes[0]))
static unsigned *buffer[N];

static void clear_all(void)
{
  for (int i = 0; i < N; i++) CUDA_OK(cudaMemset(buffer[i], 0, WORDS * sizeof(unsigned)));
}

/* buffer[i] holds fill(seed), or zeros for seed 0. */
static void expect(int i, unsigned seed, const char *when)
{
  unsigned got[WORDS];
  CUDA_OK(cudaMemcpy(got, buffer[i], sizeof got, cudaMemcpyDeviceToHost));
  for (unsigned k = 0; k < WORDS; k++)
    CHECK(got[k] == (seed ? value(seed, k) : 0u), "%s: buffer %d word %u is %#x, expected %#x",
          when, i, k, got[k], seed ? value(seed, k) : 0u);
}

/* buffer[i]'s first WORDS words are all bytes `byte`. */
static void expect_bytes(int i, unsigned char byte, const char *when)
{
  unsigned char got[WORDS * sizeof(unsigned)];
  CUDA_OK(cudaMemcpy(got, buffer[i], sizeof got, cudaMemcpyDeviceToHost));
  for (size_t k = 0; k < sizeof got; k++)
    CHECK(got[k] == byte, "%s: buffer %d byte %zu is %#x, expected %#x", when, i, k, got[k], byte);
}

static struct cudaKernelNodeParams fill_node(void **args)
{
  struct cudaKernelNodeParams p;
  memset(&p, 0, sizeof p);
  p.func = (void *)fill;
  p.gridDim = dim3(1);
  p.blockDim = dim3(32);
  p.kernelParams = args;
  return p;
}

int main(int argc, char **argv)
{
  CHECK(argc == 2, "usage: %s forced|identity|gpu", argv[0]);
  int gpu = strcmp(argv[1], "gpu") == 0;
  int forced = gpu || strcmp(argv[1], "forced") == 0;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    printf("skipped: no device\n");
    return 77;
  }
  const char *real = getenv("CUDAW_REAL_CUDART");
  void *emu = real ? dlopen(real, RTLD_NOW | RTLD_NOLOAD) : NULL;
  CHECK(emu || gpu, "not on the emulated device (CUDAW_REAL_CUDART)");
  if (emu) {
    emu_access = (int (*)(const struct cudaw_emu_launch *, const void *, size_t))dlsym(
        emu, "cudaw_emu_access");
    int (*declare)(const char *, unsigned, const size_t *) = (int (*)(
        const char *, unsigned, const size_t *))dlsym(emu, "cudaw_emu_set_kernel_param_sizes");
    CHECK(emu_access && declare, "the emulated device's test hooks");
    const size_t param_sizes[] = {sizeof(unsigned *), sizeof(unsigned)};
    CHECK(declare("_Z4fillPjj", 2, param_sizes) == 0); /* the emu copies arguments by size */
  }
  for (int i = 0; i < N; i++) CUDA_OK(cudaMalloc(&buffer[i], sizes[i]));
  clear_all();

  /* graph: fill(buffer 0, 1) added as a kernel node, fill(buffer 1, 2) through cudaGraphAddNode;
   * its exec's first node then set to fill(buffer 2, 3). */
  unsigned seed1 = 1, seed2 = 2, seed3 = 3, seed4 = 4;
  void *args0[] = {&buffer[0], &seed1}, *args1[] = {&buffer[1], &seed2},
       *args2[] = {&buffer[2], &seed3}, *args3[] = {&buffer[3], &seed4};
  cudaGraph_t graph;
  cudaGraphNode_t first, second;
  CUDA_OK(cudaGraphCreate(&graph, 0));
  struct cudaKernelNodeParams p0 = fill_node(args0);
  CUDA_OK(cudaGraphAddKernelNode(&first, graph, NULL, 0, &p0));
  /* (its union has no default constructor in C++) */
  struct cudaGraphNodeParams *generic =
      (struct cudaGraphNodeParams *)calloc(1, sizeof(struct cudaGraphNodeParams));
  CHECK(generic != NULL);
  generic->type = cudaGraphNodeTypeKernel;
  generic->kernel.func = (void *)fill;
  generic->kernel.gridDim = dim3(1);
  generic->kernel.blockDim = dim3(32);
  generic->kernel.kernelParams = args1;
  CUDA_OK(cudaGraphAddNode(&second, graph, &first, NULL, 1, generic));
  free(generic);
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  struct cudaKernelNodeParams p2 = fill_node(args2);
  CUDA_OK(cudaGraphExecKernelNodeSetParams(exec, first, &p2));

  /* a graph with a child graph node: fill(buffer 3, 4) inside the child */
  cudaGraph_t child, parent;
  cudaGraphNode_t inner, outer;
  CUDA_OK(cudaGraphCreate(&child, 0));
  struct cudaKernelNodeParams p3 = fill_node(args3);
  CUDA_OK(cudaGraphAddKernelNode(&inner, child, NULL, 0, &p3));
  CUDA_OK(cudaGraphCreate(&parent, 0));
  CUDA_OK(cudaGraphAddChildGraphNode(&outer, parent, NULL, 0, child));
  cudaGraphExec_t parent_exec;
  CUDA_OK(cudaGraphInstantiate(&parent_exec, parent, 0));

  /* memset and memcpy nodes: buffer 3 set to 0x5a bytes, then copied to buffer 4 */
  cudaGraph_t copies;
  cudaGraphNode_t set_node, copy_node;
  CUDA_OK(cudaGraphCreate(&copies, 0));
  struct cudaMemsetParams set;
  memset(&set, 0, sizeof set);
  set.dst = buffer[3];
  set.value = 0x5a;
  set.elementSize = 1;
  set.width = WORDS * sizeof(unsigned);
  set.height = 1;
  CUDA_OK(cudaGraphAddMemsetNode(&set_node, copies, NULL, 0, &set));
  struct cudaMemcpy3DParms copy;
  memset(&copy, 0, sizeof copy);
  const size_t bytes = WORDS * sizeof(unsigned);
  copy.srcPtr = make_cudaPitchedPtr(buffer[3], bytes, bytes, 1);
  copy.dstPtr = make_cudaPitchedPtr(buffer[4], bytes, bytes, 1);
  copy.extent = make_cudaExtent(bytes, 1, 1);
  copy.kind = cudaMemcpyDeviceToDevice;
  CUDA_OK(cudaGraphAddMemcpyNode(&copy_node, copies, &set_node, 1, &copy));
  cudaGraphExec_t copies_exec;
  CUDA_OK(cudaGraphInstantiate(&copies_exec, copies, 0));
  CUDA_OK(cudaGraphLaunch(copies_exec, 0));
  CUDA_OK(cudaDeviceSynchronize());
  expect_bytes(3, 0x5a, "before: memset node");
  expect_bytes(4, 0x5a, "before: memcpy node");
  clear_all();

  /* a stream capture: fill(buffer 4, 5) and fill(buffer 5, 6), launched as nvcc launches */
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  fill<<<1, 32, 0, stream>>>(buffer[4], 5);
  fill<<<1, 32, 0, stream>>>(buffer[5], 6);
  cudaGraph_t capture;
  CUDA_OK(cudaStreamEndCapture(stream, &capture));
  cudaGraphExec_t capture_exec;
  CUDA_OK(cudaGraphInstantiate(&capture_exec, capture, 0));
  expect(4, 0, "before: the capture did not run yet");
  /* a capture of a graph launch (the child graph's exec): on a GPU a child graph node, on the
   * emulated device its kernels inline; cudaw saw no launch become a node either way */
  cudaGraphExec_t child_exec, nested_exec = NULL;
  cudaGraph_t nested = NULL;
  CUDA_OK(cudaGraphInstantiate(&child_exec, child, 0));
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaError_t nested_launch = cudaGraphLaunch(child_exec, stream);
  cudaError_t nested_end = cudaStreamEndCapture(stream, &nested);
  int have_nested = nested_launch == cudaSuccess;
  if (have_nested) {
    CUDA_OK(nested_end);
    CUDA_OK(cudaGraphInstantiate(&nested_exec, nested, 0));
  } else {
    /* The H100's driver (580) refuses it: StreamCaptureUnsupported, natively too. */
    CHECK(gpu && nested_launch == cudaErrorStreamCaptureUnsupported,
          "a graph launch inside a capture: %s", cudaGetErrorName(nested_launch));
    printf("this driver refuses a graph launch inside a capture (%s): that case is skipped\n",
           cudaGetErrorName(nested_launch));
    (void)cudaGetLastError();
    if (nested_end == cudaSuccess && nested) CUDA_OK(cudaGraphDestroy(nested));
    nested = NULL;
  }

  CUDA_OK(cudaGraphLaunch(exec, 0));
  CUDA_OK(cudaGraphLaunch(parent_exec, 0));
  CUDA_OK(cudaGraphLaunch(capture_exec, stream));
  CUDA_OK(cudaDeviceSynchronize());
  expect(0, 0, "before: the exec's first node was set to buffer 2");
  expect(4, 5, "before: the capture");
  expect(5, 6, "before: the capture");
  expect(1, 2, "before");
  expect(2, 3, "before");
  expect(3, 4, "before: the child graph");

  clear_all();
  char reply[8192];
  ask("checkpoint\n", reply, sizeof reply);
  CHECK(strstr(reply, "\"ok\":true") && strstr(reply, "\"state\":\"paused\""), "checkpoint: %s",
        reply);
  ask("resume\n", reply, sizeof reply);
  CHECK(strstr(reply, "\"ok\":true") && strstr(reply, "\"state\":\"running\""), "resume: %s", reply);
  ask("status\n", reply, sizeof reply);
  unsigned long long moved = json_u64(reply, "moved_bytes");
  unsigned long long chunks = json_u64(reply, "moved_chunks");
  if (gpu)
    CHECK(moved > 0 && chunks > 0, "CUDAW_TEST_MOVE=1 should have moved memory: %s", reply);
  else if (forced)
    CHECK(moved >= (19u << 20) && chunks >= 3, "every chunk should have moved: %s", reply);
  else
    CHECK(moved == 0 && chunks == 0, "nothing should have moved: %s", reply);

  /* the exec, as it was instantiated and set */
  CUDA_OK(cudaGraphLaunch(exec, 0));
  CUDA_OK(cudaDeviceSynchronize());
  expect(0, 0, "after: the exec still has its own first node");
  expect(1, 2, "after: the exec's generic node");
  expect(2, 3, "after: the exec's node set with cudaGraphExecKernelNodeSetParams");
  /* the graph, instantiated again: its own nodes */
  clear_all();
  cudaGraphExec_t again;
  CUDA_OK(cudaGraphInstantiate(&again, graph, 0));
  CUDA_OK(cudaGraphLaunch(again, 0));
  CUDA_OK(cudaDeviceSynchronize());
  expect(0, 1, "after: the graph instantiated again");
  expect(1, 2, "after: the graph instantiated again");
  expect(2, 0, "after: the graph instantiated again");
  cudaError_t e;
  /* the captured graph's exec */
  CUDA_OK(cudaGraphLaunch(capture_exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  expect(4, 5, "after: the capture");
  expect(5, 6, "after: the capture");
  /* the memset and memcpy nodes */
  clear_all();
  CUDA_OK(cudaGraphLaunch(copies_exec, 0));
  CUDA_OK(cudaDeviceSynchronize());
  expect_bytes(3, 0x5a, "after: memset node");
  expect_bytes(4, 0x5a, "after: memcpy node");
  clear_all();
  /* the captured graph launch: cudaw cannot update what it did not see */
  e = have_nested ? cudaGraphLaunch(nested_exec, stream) : cudaErrorNotPermitted;
  if (!have_nested) {
  } else if (forced) {
    CHECK(e == cudaErrorNotPermitted, "the capture of a graph launch after the move: %s, "
          "expected cudaErrorNotPermitted", cudaGetErrorName(e));
    (void)cudaGetLastError();
  } else {
    CUDA_OK(e);
    CUDA_OK(cudaStreamSynchronize(stream));
    expect(3, 4, "after: the capture of a graph launch (nothing moved)");
    CUDA_OK(cudaMemset(buffer[3], 0, WORDS * sizeof(unsigned)));
  }
  /* the child graph: cudaw does not update inside it */
  e = cudaGraphLaunch(parent_exec, 0);
  if (forced) {
    CHECK(e == cudaErrorNotPermitted, "the exec with a child graph node after the move: %s, "
          "expected cudaErrorNotPermitted", cudaGetErrorName(e));
    (void)cudaGetLastError();
    expect(3, 0, "after: the refused child graph wrote nothing");
  } else {
    CUDA_OK(e);
    CUDA_OK(cudaDeviceSynchronize());
    expect(3, 4, "after: the child graph (nothing moved)");
  }
  CUDA_OK(cudaGraphExecDestroy(again));
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphExecDestroy(parent_exec));
  CUDA_OK(cudaGraphExecDestroy(capture_exec));
  if (have_nested) CUDA_OK(cudaGraphExecDestroy(nested_exec));
  CUDA_OK(cudaGraphExecDestroy(child_exec));
  if (have_nested) CUDA_OK(cudaGraphDestroy(nested));
  CUDA_OK(cudaGraphExecDestroy(copies_exec));
  CUDA_OK(cudaGraphDestroy(copies));
  CUDA_OK(cudaGraphDestroy(capture));
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaGraphDestroy(parent));
  CUDA_OK(cudaGraphDestroy(child));
  for (int i = 0; i < N; i++) CUDA_OK(cudaFree(buffer[i]));
  if (forced)
    printf("ok: graphs updated after a forced move (%llu bytes in %llu chunks), the child graph "
           "refused\n", moved, chunks);
  else
    printf("ok: identity, every graph ran after the resume\n");
  return 0;
}
