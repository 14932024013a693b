/* Hand-written graph overrides: kernel nodes get translated arguments like launches (the real
 * runtime copies them when the node is added or set). Each such node's arguments are kept as the
 * program gave them, so that after a checkpoint moved device memory the node is translated again
 * and set in place (glue/kparam_graphs.c); what cudaw cannot update is refused, not run with
 * stale real addresses. Listed in gen/api.d/kparam.conf. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shim_generated.h"
#include "shim_gpu_share.h"
#include "shim_graph.h"
#include "shim_kparam.h"
#include "shim_vmem.h"

cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                cudaGraphInstantiateParams *instantiateParams);
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph);

static cudaError_t refused(int rc)
{
  return shim_set_last_error(rc == -EFAULT ? cudaErrorInvalidValue : cudaErrorMemoryAllocation);
}

/* Translate a kernel node's parameters into *copy (fields from the caller's, args from frame).
 * Returns 0 or -errno. */
static int prepare_node(const struct cudaKernelNodeParams *params,
                        struct cudaKernelNodeParams *copy, struct shim_kparam_frame *frame)
{
  *copy = *params;
  int rc = shim_kparam_prepare(params->func, SHIM_KPARAM_HOST_FUN_OR_HANDLE, params->kernelParams,
                               params->kernelParams ? NULL : params->extra, frame);
  copy->kernelParams = frame->args;
  copy->extra = params->kernelParams ? params->extra : frame->extra;
  return rc;
}

static int prepare_node_v2(const struct cudaGraphNodeParams *params,
                           struct cudaGraphNodeParams *copy, struct shim_kparam_frame *frame)
{
  *copy = *params;
  const struct cudaKernelNodeParamsV2 *kernel = &params->kernel;
  int rc = shim_kparam_prepare(kernel->func, SHIM_KPARAM_HOST_FUN_OR_HANDLE, kernel->kernelParams,
                               kernel->kernelParams ? NULL : kernel->extra, frame);
  copy->kernel.kernelParams = frame->args;
  copy->kernel.extra = kernel->kernelParams ? kernel->extra : frame->extra;
  return rc;
}

static bool kernel_node(const struct cudaGraphNodeParams *params)
{
  return params && params->type == cudaGraphNodeTypeKernel && shim_kparam_active();
}

/* After a move: the node's kept arguments translated again and set (kparam_graphs.c). */
static int update_kernel_node(const void *owner, bool exec, const void *node,
                              const struct shim_kparam_blob *blob)
{
  struct cudaKernelNodeParams params, copy;
  memcpy(&params, blob->data, sizeof params);
  params.kernelParams = blob->args;
  params.extra = NULL;
  struct shim_kparam_frame frame;
  int rc = prepare_node(&params, &copy, &frame);
  cudaError_t result = cudaErrorInvalidValue;
  if (rc == 0)
    result = exec ? SHIM_REAL(cudaGraphExecKernelNodeSetParams)((cudaGraphExec_t)owner,
                                                                 (cudaGraphNode_t)node, &copy)
                  : SHIM_REAL(cudaGraphKernelNodeSetParams)((cudaGraphNode_t)node, &copy);
  shim_kparam_frame_release(&frame);
  if (rc) return rc;
  if (result != cudaSuccess) shim_debug("kparam: node update: error %d", (int)result);
  return result == cudaSuccess ? 0 : -EIO;
}

/* node of owner (a graph, or an exec) was set from params: keep its arguments for an update.
 * func names the kernel for its layout; node_func is what the node is set with again. */
static void keep_kernel_node_as(const void *owner, bool exec, cudaGraphNode_t node,
                                const void *func, const void *node_func, dim3 grid, dim3 block,
                                unsigned shared, void **args, void **extra)
{
  if (!owner || !node || !shim_translate_end) return;
  if (!args && extra) {
    shim_kparam_graph_opaque(owner, "a kernel node's arguments were given in the `extra` form, "
                                    "which cudaw does not keep");
    return;
  }
  struct shim_kparam_blob *blob;
  struct cudaKernelNodeParams fields = {.func = (void *)node_func, .gridDim = grid,
                                        .blockDim = block, .sharedMemBytes = shared};
  if (shim_kparam_args_keep(func, SHIM_KPARAM_HOST_FUN_OR_HANDLE, args, sizeof fields, &blob)) {
    shim_kparam_graph_opaque(owner, "cudaw ran out of memory keeping a node's arguments");
    return;
  }
  if (blob) memcpy(blob->data, &fields, sizeof fields);
  shim_kparam_node_keep(owner, exec, node, update_kernel_node, blob);
}

static void keep_kernel_node(const void *owner, bool exec, cudaGraphNode_t node, const void *func,
                             dim3 grid, dim3 block, unsigned shared, void **args, void **extra)
{
  keep_kernel_node_as(owner, exec, node, func, func, grid, block, shared, args, extra);
}

static void keep_v1(const void *owner, bool exec, cudaGraphNode_t node,
                    const struct cudaKernelNodeParams *p)
{
  keep_kernel_node(owner, exec, node, p->func, p->gridDim, p->blockDim, p->sharedMemBytes,
                   p->kernelParams, p->extra);
}

static void keep_v2(const void *owner, bool exec, cudaGraphNode_t node,
                    const struct cudaGraphNodeParams *params)
{
  const struct cudaKernelNodeParamsV2 *p = &params->kernel;
  keep_kernel_node(owner, exec, node, p->func, p->gridDim, p->blockDim, p->sharedMemBytes,
                   p->kernelParams, p->extra);
}

/* After a move: a memcpy or memset node given through the generic API, translated again from the
 * program's parameters and set. */
static int update_generic_node(const void *owner, bool exec, const void *node,
                               const struct shim_kparam_blob *blob)
{
  struct cudaGraphNodeParams params, copy, *use;
  memcpy(&params, blob->data, sizeof params);
  if (shim_vmem_node_params_in(SHIM_FN_cudaGraphExecNodeSetParams, &params, &copy, &use))
    return -EFAULT;
  cudaError_t result =
      exec ? SHIM_REAL(cudaGraphExecNodeSetParams)((cudaGraphExec_t)owner, (cudaGraphNode_t)node,
                                                   use)
           : SHIM_REAL(cudaGraphNodeSetParams)((cudaGraphNode_t)node, use);
  return result == cudaSuccess ? 0 : -EIO;
}

/* A memcpy or memset node of owner, translated (use is not the caller's params): keep them. */
static void keep_generic(const void *owner, bool exec, cudaGraphNode_t node,
                         const struct cudaGraphNodeParams *params,
                         const struct cudaGraphNodeParams *use)
{
  if (!owner || !node || use == params || !shim_translate_end) return;
  struct shim_kparam_blob *blob = shim_kparam_blob_new(sizeof *params);
  if (!blob) {
    shim_kparam_graph_opaque(owner, "cudaw ran out of memory keeping a node's parameters");
    return;
  }
  memcpy(blob->data, params, sizeof *params);
  if (!exec) shim_kparam_graph_mark(owner);
  shim_kparam_node_keep(owner, exec, node, update_generic_node, blob);
}

/* A node of another kind was added through the generic API: a child graph node holds whatever the
 * child holds, out of cudaw's reach, and a conditional node's bodies are graphs cudaw does not
 * follow into the parent. */
static void other_node_added(const void *graph, const struct cudaGraphNodeParams *p)
{
  if (!graph || !p || !shim_translate_end) return;
  if (p->type == cudaGraphNodeTypeGraph) {
    shim_kparam_graph_inherit(graph, p->graph.graph,
                              "it has a child graph node, inside which cudaw does not update");
  } else if (p->type == cudaGraphNodeTypeConditional) {
    shim_kparam_graph_mark(graph);
    shim_kparam_graph_opaque(graph, "it has a conditional node, whose bodies cudaw does not "
                                    "update");
  }
}

SHIM_EXPORT cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t *pDependencies,
                                               size_t numDependencies,
                                               const struct cudaKernelNodeParams *pNodeParams)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGraphAddKernelNode);
  if (!real) return shim_missing(SHIM_FN_cudaGraphAddKernelNode);
  __typeof__(&cudaGraphAddKernelNode) forward = (__typeof__(&cudaGraphAddKernelNode))real;
  cudaError_t result;
  if (SHIM_LIKELY(!pNodeParams || !shim_kparam_active())) {
    result = forward(pGraphNode, graph, pDependencies, numDependencies, pNodeParams);
  } else {
    struct shim_kparam_frame frame;
    struct cudaKernelNodeParams copy;
    int rc = prepare_node(pNodeParams, &copy, &frame);
    result = rc ? refused(rc) : forward(pGraphNode, graph, pDependencies, numDependencies, &copy);
    shim_kparam_frame_release(&frame);
    if (result == cudaSuccess) {
      shim_kparam_graph_mark(graph);
      shim_kparam_node_mark(*pGraphNode, graph);
      keep_v1(graph, false, *pGraphNode, pNodeParams);
    }
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node,
                                                     const struct cudaKernelNodeParams *pNodeParams)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGraphKernelNodeSetParams);
  if (!real) return shim_missing(SHIM_FN_cudaGraphKernelNodeSetParams);
  __typeof__(&cudaGraphKernelNodeSetParams) forward =
      (__typeof__(&cudaGraphKernelNodeSetParams))real;
  cudaError_t result;
  if (SHIM_LIKELY(!pNodeParams || !shim_kparam_active())) {
    result = forward(node, pNodeParams);
  } else {
    struct shim_kparam_frame frame;
    struct cudaKernelNodeParams copy;
    int rc = prepare_node(pNodeParams, &copy, &frame);
    result = rc ? refused(rc) : forward(node, &copy);
    shim_kparam_frame_release(&frame);
    if (result == cudaSuccess) {
      const void *graph = shim_kparam_node_graph(node);
      shim_kparam_graph_mark(graph);
      keep_v1(graph, false, node, pNodeParams);
    }
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaGraphExecKernelNodeSetParams(
    cudaGraphExec_t hGraphExec, cudaGraphNode_t node, const struct cudaKernelNodeParams *pNodeParams)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGraphExecKernelNodeSetParams);
  if (!real) return shim_missing(SHIM_FN_cudaGraphExecKernelNodeSetParams);
  __typeof__(&cudaGraphExecKernelNodeSetParams) forward =
      (__typeof__(&cudaGraphExecKernelNodeSetParams))real;
  cudaError_t result;
  if (SHIM_LIKELY(!pNodeParams || !shim_kparam_active())) {
    result = forward(hGraphExec, node, pNodeParams);
  } else {
    struct shim_kparam_frame frame;
    struct cudaKernelNodeParams copy;
    int rc = prepare_node(pNodeParams, &copy, &frame);
    result = rc ? refused(rc) : forward(hGraphExec, node, &copy);
    shim_kparam_frame_release(&frame);
    if (result == cudaSuccess) keep_v1(hGraphExec, true, node, pNodeParams);
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                         const cudaGraphNode_t *pDependencies,
                                         const cudaGraphEdgeData *dependencyData,
                                         size_t numDependencies,
                                         struct cudaGraphNodeParams *nodeParams)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGraphAddNode);
  if (!real) return shim_missing(SHIM_FN_cudaGraphAddNode);
  __typeof__(&cudaGraphAddNode) forward = (__typeof__(&cudaGraphAddNode))real;
  cudaError_t result;
  if (SHIM_LIKELY(!kernel_node(nodeParams))) {
    /* memcpy/memset nodes translated in a copy (vmem); other types (memory allocation nodes
     * write their address back) go through as is. */
    struct cudaGraphNodeParams copy, *use;
    if (shim_vmem_node_params_in(SHIM_FN_cudaGraphAddNode, nodeParams, &copy, &use))
      result = shim_set_last_error(cudaErrorInvalidValue);
    else
      result = forward(pGraphNode, graph, pDependencies, dependencyData, numDependencies, use);
    if (result == cudaSuccess && pGraphNode) {
      if (use != nodeParams) shim_kparam_node_mark(*pGraphNode, graph);
      keep_generic(graph, false, *pGraphNode, nodeParams, use);
      other_node_added(graph, nodeParams);
    }
  } else {
    struct shim_kparam_frame frame;
    struct cudaGraphNodeParams copy;
    int rc = prepare_node_v2(nodeParams, &copy, &frame);
    result = rc ? refused(rc)
                : forward(pGraphNode, graph, pDependencies, dependencyData, numDependencies, &copy);
    shim_kparam_frame_release(&frame);
    if (result == cudaSuccess) {
      shim_kparam_graph_mark(graph);
      shim_kparam_node_mark(*pGraphNode, graph);
      keep_v2(graph, false, *pGraphNode, nodeParams);
    }
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node,
                                               struct cudaGraphNodeParams *nodeParams)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGraphNodeSetParams);
  if (!real) return shim_missing(SHIM_FN_cudaGraphNodeSetParams);
  __typeof__(&cudaGraphNodeSetParams) forward = (__typeof__(&cudaGraphNodeSetParams))real;
  cudaError_t result;
  if (SHIM_LIKELY(!kernel_node(nodeParams))) {
    struct cudaGraphNodeParams copy, *use;
    if (shim_vmem_node_params_in(SHIM_FN_cudaGraphNodeSetParams, nodeParams, &copy, &use))
      result = shim_set_last_error(cudaErrorInvalidValue);
    else
      result = forward(node, use);
    if (result == cudaSuccess)
      keep_generic(shim_kparam_node_graph(node), false, node, nodeParams, use);
  } else {
    struct shim_kparam_frame frame;
    struct cudaGraphNodeParams copy;
    int rc = prepare_node_v2(nodeParams, &copy, &frame);
    result = rc ? refused(rc) : forward(node, &copy);
    shim_kparam_frame_release(&frame);
    if (result == cudaSuccess) {
      const void *graph = shim_kparam_node_graph(node);
      shim_kparam_graph_mark(graph);
      keep_v2(graph, false, node, nodeParams);
    }
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t graphExec, cudaGraphNode_t node,
                                                   struct cudaGraphNodeParams *nodeParams)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGraphExecNodeSetParams);
  if (!real) return shim_missing(SHIM_FN_cudaGraphExecNodeSetParams);
  __typeof__(&cudaGraphExecNodeSetParams) forward = (__typeof__(&cudaGraphExecNodeSetParams))real;
  cudaError_t result;
  if (SHIM_LIKELY(!kernel_node(nodeParams))) {
    struct cudaGraphNodeParams copy, *use;
    if (shim_vmem_node_params_in(SHIM_FN_cudaGraphExecNodeSetParams, nodeParams, &copy, &use))
      result = shim_set_last_error(cudaErrorInvalidValue);
    else
      result = forward(graphExec, node, use);
    if (result == cudaSuccess) keep_generic(graphExec, true, node, nodeParams, use);
  } else {
    struct shim_kparam_frame frame;
    struct cudaGraphNodeParams copy;
    int rc = prepare_node_v2(nodeParams, &copy, &frame);
    result = rc ? refused(rc) : forward(graphExec, node, &copy);
    shim_kparam_frame_release(&frame);
    if (result == cudaSuccess) keep_v2(graphExec, true, node, nodeParams);
  }
  shim_gate_leave();
  return result;
}

/* ---- after a move: updated, or refused when cudaw cannot update ---- */

static cudaError_t stale_refused(void)
{
  return shim_set_last_error(cudaErrorNotPermitted);
}

#define INSTANTIATE(name, ...)                                                                  \
  {                                                                                            \
    shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_##name);                                       \
    if (!real) return shim_missing(SHIM_FN_##name);                                            \
    cudaError_t result;                                                                        \
    if (shim_kparam_graph_stale(graph)) {                                                      \
      result = stale_refused();                                                                \
    } else {                                                                                   \
      result = ((__typeof__(&name))real)(pGraphExec, graph, __VA_ARGS__);                      \
      if (result == cudaSuccess) shim_kparam_exec_mark(*pGraphExec, graph);                    \
    }                                                                                          \
    shim_gate_leave();                                                                         \
    return result;                                                                             \
  }

SHIM_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                             unsigned long long flags)
INSTANTIATE(cudaGraphInstantiate, flags)

SHIM_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec,
                                                      cudaGraph_t graph, unsigned long long flags)
INSTANTIATE(cudaGraphInstantiateWithFlags, flags)

SHIM_EXPORT cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *pGraphExec,
                                                       cudaGraph_t graph,
                                                       cudaGraphInstantiateParams *instantiateParams)
INSTANTIATE(cudaGraphInstantiateWithParams, instantiateParams)

SHIM_EXPORT cudaError_t cudaGraphInstantiateWithParams_ptsz(
    cudaGraphExec_t *pGraphExec, cudaGraph_t graph, cudaGraphInstantiateParams *instantiateParams)
INSTANTIATE(cudaGraphInstantiateWithParams_ptsz, instantiateParams)

/* A graph launch is metered like a kernel launch when the program has a GPU share. */
#define GRAPH_LAUNCH(name, per_thread)                                                          \
  SHIM_EXPORT cudaError_t name(cudaGraphExec_t graphExec, cudaStream_t stream)                  \
  {                                                                                            \
    shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_##name);                                       \
    if (!real) return shim_missing(SHIM_FN_##name);                                            \
    struct shim_gpu_ticket ticket = {-1, 0};                                                   \
    if (SHIM_UNLIKELY(atomic_load_explicit(&shim_gpu_metered, memory_order_relaxed)))          \
      shim_gpu_before(stream, per_thread, &ticket);                                            \
    cudaError_t result = shim_kparam_exec_stale(graphExec)                                     \
                             ? stale_refused()                                                 \
                             : ((__typeof__(&name))real)(graphExec, stream);                   \
    shim_gpu_after(&ticket);                                                                   \
    shim_gate_leave();                                                                         \
    return result;                                                                             \
  }

GRAPH_LAUNCH(cudaGraphLaunch, 0)
GRAPH_LAUNCH(cudaGraphLaunch_ptsz, 1)

/* Whether stream is being captured (active or invalidated), for the count of open captures
 * (runtime/stream.c). */
static int capturing(cudaStream_t stream)
{
  enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return SHIM_REAL(cudaStreamIsCapturing) &&
         SHIM_REAL(cudaStreamIsCapturing)(stream, &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

void shim_graph_captured_launch(cudaStream_t stream, const void *func, dim3 grid, dim3 block,
                                size_t shared_mem, void **args)
{
  if (!stream || stream == cudaStreamLegacy) return; /* the legacy stream cannot be captured */
  enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = NULL;
  const cudaGraphNode_t *last = NULL;
  size_t count = 0;
  if (!SHIM_REAL(cudaStreamGetCaptureInfo) ||
      SHIM_REAL(cudaStreamGetCaptureInfo)(stream, &status, NULL, &graph, &last, NULL, &count) !=
          cudaSuccess ||
      status != cudaStreamCaptureStatusActive || !graph)
    return; /* not capturing; an unknown capture is caught when it ends (count) */
  shim_kparam_graph_mark(graph);
  shim_kparam_capture_seen(graph);
  /* Right after a launch, the capture's dependency set is the launch's own node. */
  if (count != 1 || !last || !last[0]) {
    shim_kparam_graph_opaque(graph, "a captured launch's node could not be identified");
    return;
  }
  /* The node is set again with the function the runtime says it runs (a launch may name its
   * kernel by a handle); the layout comes from what the launch named. */
  struct cudaKernelNodeParams actual;
  const void *node_func = func;
  if (SHIM_REAL(cudaGraphKernelNodeGetParams) &&
      SHIM_REAL(cudaGraphKernelNodeGetParams)(last[0], &actual) == cudaSuccess && actual.func)
    node_func = actual.func;
  keep_kernel_node_as(graph, false, last[0], func, node_func, grid, block, (unsigned)shared_mem,
                      args, NULL);
}

/* The end of a capture under translate: the kernels launched in it were translated on their way
 * in and recorded per node as they became nodes. The graph can be updated after a move only if
 * cudaw saw every kernel node and it holds no node cudaw does not look into. */
static void captured(cudaGraph_t graph)
{
  if (!shim_translate_end) return;
  shim_kparam_graph_mark(graph);
  size_t count = 0, kernels = 0;
  cudaGraphNode_t *nodes = NULL;
  const char *reason = NULL;
  if (!SHIM_REAL(cudaGraphGetNodes) || !SHIM_REAL(cudaGraphNodeGetType) ||
      SHIM_REAL(cudaGraphGetNodes)(graph, NULL, &count) != cudaSuccess)
    reason = "it was captured from a stream, and the runtime did not list its nodes";
  else if (count && !(nodes = malloc(count * sizeof *nodes)))
    reason = "cudaw ran out of memory checking its nodes";
  else if (count && SHIM_REAL(cudaGraphGetNodes)(graph, nodes, &count) != cudaSuccess)
    reason = "it was captured from a stream, and the runtime did not list its nodes";
  for (size_t i = 0; !reason && i < count; i++) {
    enum cudaGraphNodeType type;
    if (SHIM_REAL(cudaGraphNodeGetType)(nodes[i], &type) != cudaSuccess)
      reason = "it was captured from a stream, and the runtime did not tell a node's type";
    else if (type == cudaGraphNodeTypeKernel)
      kernels++;
    else if (type == cudaGraphNodeTypeGraph)
      reason = "it has a child graph node (a graph launched during the capture), inside which "
               "cudaw does not update";
    else if (type == cudaGraphNodeTypeConditional)
      reason = "it has a conditional node, whose bodies cudaw does not update";
    else if (type == cudaGraphNodeTypeMemcpy || type == cudaGraphNodeTypeMemset)
      reason = "it captured a copy or memset, whose node cudaw does not update";
  }
  free(nodes);
  if (!reason && kernels != shim_kparam_capture_count(graph))
    reason = "it captured kernel launches that cudaw did not see become nodes (launched through "
             "the driver API or by a library with its own runtime)";
  if (reason) shim_kparam_graph_opaque(graph, reason);
}

/* In a _ptsz call, stream 0
 * is the calling thread's default stream. */
#define END_CAPTURE(name, query_stream)                                                         \
  SHIM_EXPORT cudaError_t name(cudaStream_t stream, cudaGraph_t *pGraph)                       \
  {                                                                                            \
    shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_##name);                                       \
    if (!real) return shim_missing(SHIM_FN_##name);                                            \
    int was_capturing = capturing(query_stream);                                               \
    cudaError_t result = ((__typeof__(&name))real)(stream, pGraph);                            \
    if (was_capturing)                                                                         \
      shim_capture_end(1, capturing(query_stream),                                             \
                       result == cudaSuccess || result == cudaErrorStreamCaptureInvalidated);  \
    if (result == cudaSuccess && pGraph) captured(*pGraph);                                    \
    shim_gate_leave();                                                                         \
    return result;                                                                             \
  }

END_CAPTURE(cudaStreamEndCapture, stream)
END_CAPTURE(cudaStreamEndCapture_ptsz, stream ? stream : cudaStreamPerThread)

SHIM_EXPORT cudaError_t cudaGraphClone(cudaGraph_t *pGraphClone, cudaGraph_t originalGraph)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGraphClone);
  if (!real) return shim_missing(SHIM_FN_cudaGraphClone);
  cudaError_t result = ((__typeof__(&cudaGraphClone))real)(pGraphClone, originalGraph);
  if (result == cudaSuccess) shim_kparam_graph_inherit(*pGraphClone, originalGraph,
                               "it is a clone (cudaGraphClone), whose nodes cudaw does not follow");
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                                   const cudaGraphNode_t *pDependencies,
                                                   size_t numDependencies, cudaGraph_t childGraph)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGraphAddChildGraphNode);
  if (!real) return shim_missing(SHIM_FN_cudaGraphAddChildGraphNode);
  cudaError_t result = ((__typeof__(&cudaGraphAddChildGraphNode))real)(
      pGraphNode, graph, pDependencies, numDependencies, childGraph);
  if (result == cudaSuccess) shim_kparam_graph_inherit(graph, childGraph,
                               "it has a child graph node, inside which cudaw does not update");
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
                                            cudaGraphExecUpdateResultInfo *resultInfo)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGraphExecUpdate);
  if (!real) return shim_missing(SHIM_FN_cudaGraphExecUpdate);
  cudaError_t result;
  if (shim_kparam_graph_stale(hGraph)) {
    result = stale_refused();
  } else {
    result = ((__typeof__(&cudaGraphExecUpdate))real)(hGraphExec, hGraph, resultInfo);
    if (result == cudaSuccess) shim_kparam_exec_updated(hGraphExec, hGraph);
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGraphDestroy);
  if (!real) return shim_missing(SHIM_FN_cudaGraphDestroy);
  shim_kparam_graph_forget(graph);
  cudaError_t result = ((__typeof__(&cudaGraphDestroy))real)(graph);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGraphDestroyNode);
  if (!real) return shim_missing(SHIM_FN_cudaGraphDestroyNode);
  cudaError_t result = ((__typeof__(&cudaGraphDestroyNode))real)(node);
  if (result == cudaSuccess) shim_kparam_node_destroyed(node);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGraphExecDestroy);
  if (!real) return shim_missing(SHIM_FN_cudaGraphExecDestroy);
  shim_kparam_graph_forget(graphExec);
  cudaError_t result = ((__typeof__(&cudaGraphExecDestroy))real)(graphExec);
  shim_gate_leave();
  return result;
}
