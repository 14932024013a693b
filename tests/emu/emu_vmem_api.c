/* emu_vmem_api.c: the emulated entry points cudaw's vmem glue needs beyond the basics: 3D copies
 * and memsets between linear buffers, batched copies, CUDA arrays (host buffers behind an opaque
 * handle), stream capture (its status only), and held streams (events recorded on a
 * held stream stay incomplete), so stream-ordered frees can be tested. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

/* Per-thread-stream names, declared here because this file is compiled without
 * CUDA_API_PER_THREAD_DEFAULT_STREAM. */
cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p);
cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p, cudaStream_t stream);
cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr ptr, int value, struct cudaExtent extent);
cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr ptr, int value, struct cudaExtent extent,
                                   cudaStream_t stream);
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *status);

/* ---- held streams ---- */

#define MAX_HELD 16
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t held[MAX_HELD];

bool emu_stream_held(cudaStream_t stream) {
  pthread_mutex_lock(&held_lock);
  bool found = false;
  for (int i = 0; i < MAX_HELD && !found; i++) found = held[i] == stream && stream;
  pthread_mutex_unlock(&held_lock);
  return found;
}

void emu_stream_release(cudaStream_t stream) {
  pthread_mutex_lock(&held_lock);
  for (int i = 0; i < MAX_HELD; i++)
    if (held[i] == stream) held[i] = NULL;
  pthread_mutex_unlock(&held_lock);
}

EMU_EXPORT int cudaw_emu_hold_stream(cudaStream_t stream, int hold) {
  if (!stream) return -EINVAL;
  /* A hold is keyed by the handle: it may be ended after its stream was destroyed (the events
   * recorded there stay incomplete until then). */
  if (!hold) {
    emu_stream_release(stream);
    return 0;
  }
  if (emu_stream_check(stream)) return -EINVAL;
  if (emu_stream_held(stream)) return 0;
  pthread_mutex_lock(&held_lock);
  int err = -EINVAL;
  for (int i = 0; i < MAX_HELD && err; i++)
    if (!held[i]) {
      held[i] = stream;
      err = 0;
    }
  pthread_mutex_unlock(&held_lock);
  return err;
}

/* ---- stream capture: only its status (nothing captured runs or lands in the graph) ---- */

#define MAX_CAPTURING 16
static cudaStream_t capturing[MAX_CAPTURING]; /* under held_lock */
static cudaGraph_t capture_graph[MAX_CAPTURING];    /* the graph each capture builds */
static cudaGraphNode_t capture_last[MAX_CAPTURING]; /* its last node: the next one's dependency */
static unsigned long long capture_id[MAX_CAPTURING], captures_begun;
static atomic_ulong capture_queries;

/* How many times the capture status was asked (runtime and driver): cudaw asks only while a
 * capture may be open. */
EMU_EXPORT unsigned long cudaw_emu_capture_queries(void) { return atomic_load(&capture_queries); }

bool emu_stream_capturing(cudaStream_t stream) {
  pthread_mutex_lock(&held_lock);
  bool found = false;
  for (int i = 0; i < MAX_CAPTURING && !found; i++) found = capturing[i] == stream && stream;
  pthread_mutex_unlock(&held_lock);
  return found;
}

cudaError_t emu_begin_capture(cudaStream_t stream) {
  emu_init();
  if (!stream || stream == cudaStreamLegacy) return emu_result(cudaErrorStreamCaptureUnsupported);
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  if (emu_stream_capturing(stream)) return emu_result(cudaErrorIllegalState);
  cudaGraph_t graph;
  cudaError_t err = cudaGraphCreate(&graph, 0);
  if (err) return err;
  err = cudaErrorMemoryAllocation;
  pthread_mutex_lock(&held_lock);
  for (int i = 0; i < MAX_CAPTURING && err; i++)
    if (!capturing[i]) {
      capturing[i] = stream;
      capture_graph[i] = graph;
      capture_last[i] = NULL;
      capture_id[i] = ++captures_begun;
      err = cudaSuccess;
    }
  pthread_mutex_unlock(&held_lock);
  if (err) cudaGraphDestroy(graph);
  return emu_result(err);
}

cudaError_t emu_end_capture(cudaStream_t stream, cudaGraph_t *graph) {
  emu_init();
  if (!graph) return emu_result(cudaErrorInvalidValue);
  if (!emu_stream_capturing(stream)) return emu_result(cudaErrorIllegalState);
  pthread_mutex_lock(&held_lock);
  for (int i = 0; i < MAX_CAPTURING; i++)
    if (capturing[i] == stream) {
      capturing[i] = NULL;
      *graph = capture_graph[i];
    }
  pthread_mutex_unlock(&held_lock);
  return cudaSuccess;
}

/* A kernel launched on a capturing stream becomes a node of its graph (emu_graph.c). */
cudaError_t emu_capture_launch(cudaStream_t stream, const void *func, dim3 grid, dim3 block,
                               void **args, size_t shared_mem) {
  cudaGraph_t graph = NULL;
  pthread_mutex_lock(&held_lock);
  for (int i = 0; i < MAX_CAPTURING; i++)
    if (capturing[i] == stream && stream) graph = capture_graph[i];
  pthread_mutex_unlock(&held_lock);
  if (!graph) return emu_result(cudaErrorStreamCaptureInvalidated);
  cudaGraphNode_t node;
  cudaError_t err = emu_graph_add_kernel(&node, graph, func, grid, block, shared_mem, args);
  if (err) return err;
  pthread_mutex_lock(&held_lock);
  for (int i = 0; i < MAX_CAPTURING; i++)
    if (capturing[i] == stream && capture_graph[i] == graph) capture_last[i] = node;
  pthread_mutex_unlock(&held_lock);
  return cudaSuccess;
}

/* The capture's graph and its last node as the dependency set (none before the first node). */
EMU_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                                enum cudaStreamCaptureStatus *status,
                                                unsigned long long *id, cudaGraph_t *graph,
                                                const cudaGraphNode_t **dependencies,
                                                const cudaGraphEdgeData **edges, size_t *count) {
  emu_init();
  if (!status) return emu_result(cudaErrorInvalidValue);
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  *status = cudaStreamCaptureStatusNone;
  pthread_mutex_lock(&held_lock);
  for (int i = 0; i < MAX_CAPTURING; i++) {
    if (capturing[i] != stream || !stream) continue;
    *status = cudaStreamCaptureStatusActive;
    if (id) *id = capture_id[i];
    if (graph) *graph = capture_graph[i];
    if (dependencies) *dependencies = capture_last[i] ? &capture_last[i] : NULL;
    if (edges) *edges = NULL;
    if (count) *count = capture_last[i] ? 1 : 0;
  }
  pthread_mutex_unlock(&held_lock);
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream,
                                              enum cudaStreamCaptureMode mode) {
  (void)mode;
  return emu_begin_capture(stream);
}

EMU_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
  return emu_end_capture(stream, graph);
}

cudaError_t emu_is_capturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status) {
  emu_init();
  atomic_fetch_add(&capture_queries, 1);
  if (!status) return emu_result(cudaErrorInvalidValue);
  if (emu_stream_check(stream)) return emu_result(cudaErrorInvalidResourceHandle);
  *status = emu_stream_capturing(stream) ? cudaStreamCaptureStatusActive
                                         : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                             enum cudaStreamCaptureStatus *status) {
  return emu_is_capturing(stream, status);
}

EMU_EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream,
                                                  enum cudaStreamCaptureStatus *status) {
  return emu_is_capturing(stream ? stream : cudaStreamPerThread, status);
}

/* ---- 3D copies and memsets (linear memory only) ---- */

static char *at(struct cudaPitchedPtr p, struct cudaPos pos, size_t z) {
  return (char *)p.ptr + ((pos.z + z) * p.ysize + pos.y) * p.pitch + pos.x;
}

static cudaError_t copy3d(const struct cudaMemcpy3DParms *p, cudaStream_t stream) {
  emu_init();
  if (!p) return emu_result(cudaErrorInvalidValue);
  if (p->srcArray || p->dstArray) return emu_result(cudaErrorNotSupported);
  if (p->extent.depth > 1 && (!p->srcPtr.ysize || !p->dstPtr.ysize))
    return emu_result(cudaErrorInvalidValue);
  for (size_t z = 0; z < p->extent.depth; z++) {
    cudaError_t err = emu_memcpy2d(at(p->dstPtr, p->dstPos, z), p->dstPtr.pitch,
                                   at(p->srcPtr, p->srcPos, z), p->srcPtr.pitch, p->extent.width,
                                   p->extent.height, p->kind, stream);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p) { return copy3d(p, NULL); }
EMU_EXPORT cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p) {
  return copy3d(p, cudaStreamPerThread);
}
EMU_EXPORT cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t stream) {
  return copy3d(p, stream);
}
EMU_EXPORT cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p,
                                              cudaStream_t stream) {
  return copy3d(p, stream ? stream : cudaStreamPerThread);
}

static cudaError_t set3d(struct cudaPitchedPtr p, int value, struct cudaExtent e,
                         cudaStream_t stream) {
  emu_init();
  if (e.depth > 1 && !p.ysize) return emu_result(cudaErrorInvalidValue);
  for (size_t z = 0; z < e.depth; z++) {
    cudaError_t err = emu_memset2d((char *)p.ptr + z * p.ysize * p.pitch, p.pitch, value, e.width,
                                   e.height, stream);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaMemset3D(struct cudaPitchedPtr p, int value, struct cudaExtent e) {
  return set3d(p, value, e, NULL);
}
EMU_EXPORT cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr p, int value, struct cudaExtent e) {
  return set3d(p, value, e, cudaStreamPerThread);
}
EMU_EXPORT cudaError_t cudaMemset3DAsync(struct cudaPitchedPtr p, int value, struct cudaExtent e,
                                         cudaStream_t stream) {
  return set3d(p, value, e, stream);
}
EMU_EXPORT cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr p, int value,
                                              struct cudaExtent e, cudaStream_t stream) {
  return set3d(p, value, e, stream ? stream : cudaStreamPerThread);
}

EMU_EXPORT cudaError_t cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs,
                                            const size_t *sizes, size_t count,
                                            struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
                                            size_t numAttrs, cudaStream_t stream) {
  emu_init();
  (void)attrs;
  (void)attrsIdxs;
  if (!dsts || !srcs || !sizes || !count || !numAttrs) return emu_result(cudaErrorInvalidValue);
  for (size_t i = 0; i < count; i++) {
    cudaError_t err = emu_memcpy2d(dsts[i], sizes[i], srcs[i], sizes[i], sizes[i], 1,
                                   cudaMemcpyDefault, stream);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

/* ---- CUDA arrays: a host buffer behind a handle ---- */

#define ARRAY_MAGIC 0x41525259u

struct emu_array {
  unsigned magic;
  struct cudaChannelFormatDesc desc;
  struct cudaExtent extent;
  void *data;
};

static cudaError_t make_array(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                              struct cudaExtent extent) {
  emu_init();
  if (!array || !desc || !extent.width) return emu_result(cudaErrorInvalidValue);
  size_t element = (size_t)(desc->x + desc->y + desc->z + desc->w) / 8;
  size_t bytes = extent.width * (extent.height ? extent.height : 1) *
                 (extent.depth ? extent.depth : 1) * (element ? element : 1);
  struct emu_array *a = calloc(1, sizeof *a);
  void *data = calloc(1, bytes);
  if (!a || !data) {
    free(a);
    free(data);
    return emu_result(cudaErrorMemoryAllocation);
  }
  *a = (struct emu_array){ARRAY_MAGIC, *desc, extent, data};
  *array = (cudaArray_t)a;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                       size_t width, size_t height, unsigned int flags) {
  (void)flags;
  return make_array(array, desc, (struct cudaExtent){width, height, 0});
}

EMU_EXPORT cudaError_t cudaMalloc3DArray(cudaArray_t *array,
                                         const struct cudaChannelFormatDesc *desc,
                                         struct cudaExtent extent, unsigned int flags) {
  (void)flags;
  return make_array(array, desc, extent);
}

EMU_EXPORT cudaError_t cudaFreeArray(cudaArray_t array) {
  emu_init();
  if (!array) return cudaSuccess;
  struct emu_array *a = (struct emu_array *)array;
  if (a->magic != ARRAY_MAGIC) return emu_result(cudaErrorInvalidValue);
  a->magic = 0;
  free(a->data);
  free(a);
  return cudaSuccess;
}
