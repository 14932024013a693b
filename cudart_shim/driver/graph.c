/* Graphs built through the driver (XLA's command buffers, a static runtime's graphs): kernel
 * nodes get translated arguments like launches, and their arguments are kept as the program gave
 * them, so that once a checkpoint moved device memory under CUDAW_VMEM=translate each node is
 * translated again and set in place; what cudaw cannot update is refused, not run with stale
 * addresses. The bookkeeping is the runtime's (glue/kparam_graphs.c); under remap every mark is a
 * no-op. Listed in gen/api.d/driver.conf. */
#include "shim_driver.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shim_gpu_share.h"
#include "shim_vmem.h"

#define ENTER(name)                                            \
  shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_##name); \
  if (!real) return shim_drv_missing_counted(SHIM_DRV_##name)
#define REAL(name) ((__typeof__(&name))real)

/* A node's kernel: its function, or the library kernel it names. */
static CUfunction node_function(const CUDA_KERNEL_NODE_PARAMS *p)
{
  return p->func ? p->func : (CUfunction)p->kern;
}

/* *copy = *p with translated arguments; release frame afterwards. */
static CUresult prepare_node(const CUDA_KERNEL_NODE_PARAMS *p, CUDA_KERNEL_NODE_PARAMS *copy,
                             struct shim_kparam_frame *frame)
{
  *copy = *p;
  CUresult result = shim_drv_prepare(node_function(p), p->kernelParams,
                                     p->kernelParams ? NULL : p->extra, frame);
  copy->kernelParams = frame->args;
  copy->extra = p->kernelParams ? p->extra : frame->extra;
  return result;
}

/* After a move: the node's kept arguments translated again and set (glue/kparam_graphs.c). */
static int update_kernel_node(const void *owner, bool exec, const void *node,
                              const struct shim_kparam_blob *blob)
{
  CUDA_KERNEL_NODE_PARAMS params, copy;
  memcpy(&params, blob->data, sizeof params);
  params.kernelParams = blob->args;
  params.extra = NULL;
  struct shim_kparam_frame frame;
  CUresult result = prepare_node(&params, &copy, &frame);
  if (result == CUDA_SUCCESS) {
    __typeof__(&cuGraphExecKernelNodeSetParams_v2) set_exec =
        SHIM_DRV_REAL(cuGraphExecKernelNodeSetParams_v2);
    __typeof__(&cuGraphKernelNodeSetParams_v2) set = SHIM_DRV_REAL(cuGraphKernelNodeSetParams_v2);
    if (exec ? !set_exec : !set) result = CUDA_ERROR_NOT_FOUND;
    else if (exec) result = set_exec((CUgraphExec)owner, (CUgraphNode)node, &copy);
    else result = set((CUgraphNode)node, &copy);
  }
  shim_kparam_frame_release(&frame);
  if (result != CUDA_SUCCESS) shim_debug("kparam: driver node update: error %d", (int)result);
  return result == CUDA_SUCCESS ? 0 : result == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

/* node of owner (a graph, or an exec) was set from p: keep its arguments for an update. */
static void keep_node(const void *owner, bool exec, CUgraphNode node,
                      const CUDA_KERNEL_NODE_PARAMS *p)
{
  if (!owner || !node || !shim_translate_end) return;
  if (!p->kernelParams && p->extra) {
    shim_kparam_graph_opaque(owner, "a kernel node's arguments were given in the `extra` form, "
                                    "which cudaw does not keep");
    return;
  }
  struct shim_kparam_blob *blob;
  if (shim_kparam_args_keep(node_function(p), SHIM_KPARAM_HANDLE, p->kernelParams, sizeof *p,
                            &blob)) {
    shim_kparam_graph_opaque(owner, "cudaw ran out of memory keeping a node's arguments");
    return;
  }
  if (blob) memcpy(blob->data, p, sizeof *p);
  shim_kparam_node_keep(owner, exec, node, update_kernel_node, blob);
}

SHIM_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
                                             const CUgraphNode *dependencies,
                                             size_t numDependencies,
                                             const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
  ENTER(cuGraphAddKernelNode_v2);
  CUresult result;
  if (!nodeParams || !shim_kparam_active()) {
    result = REAL(cuGraphAddKernelNode_v2)(phGraphNode, hGraph, dependencies, numDependencies,
                                           nodeParams);
  } else {
    CUDA_KERNEL_NODE_PARAMS copy;
    struct shim_kparam_frame frame;
    result = prepare_node(nodeParams, &copy, &frame);
    if (result == CUDA_SUCCESS)
      result = REAL(cuGraphAddKernelNode_v2)(phGraphNode, hGraph, dependencies, numDependencies,
                                             &copy);
    shim_kparam_frame_release(&frame);
    if (result == CUDA_SUCCESS) {
      shim_kparam_graph_mark(hGraph);
      if (phGraphNode) {
        shim_kparam_node_mark(*phGraphNode, hGraph);
        keep_node(hGraph, false, *phGraphNode, nodeParams);
      }
    }
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
  ENTER(cuGraphKernelNodeSetParams_v2);
  CUresult result;
  if (!nodeParams || !shim_kparam_active()) {
    result = REAL(cuGraphKernelNodeSetParams_v2)(hNode, nodeParams);
  } else {
    CUDA_KERNEL_NODE_PARAMS copy;
    struct shim_kparam_frame frame;
    result = prepare_node(nodeParams, &copy, &frame);
    if (result == CUDA_SUCCESS) result = REAL(cuGraphKernelNodeSetParams_v2)(hNode, &copy);
    shim_kparam_frame_release(&frame);
    const void *graph = shim_kparam_node_graph(hNode);
    if (result == CUDA_SUCCESS && graph) {
      shim_kparam_graph_mark(graph);
      keep_node(graph, false, hNode, nodeParams);
    }
  }
  shim_gate_leave();
  return result;
}

/* The exec was marked when instantiated from a marked graph, or is marked now: its node holds
 * translated addresses from here on. */
SHIM_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                       const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
  ENTER(cuGraphExecKernelNodeSetParams_v2);
  CUresult result;
  if (!nodeParams || !shim_kparam_active()) {
    result = REAL(cuGraphExecKernelNodeSetParams_v2)(hGraphExec, hNode, nodeParams);
  } else {
    CUDA_KERNEL_NODE_PARAMS copy;
    struct shim_kparam_frame frame;
    result = prepare_node(nodeParams, &copy, &frame);
    if (result == CUDA_SUCCESS)
      result = REAL(cuGraphExecKernelNodeSetParams_v2)(hGraphExec, hNode, &copy);
    shim_kparam_frame_release(&frame);
    if (result == CUDA_SUCCESS) keep_node(hGraphExec, true, hNode, nodeParams);
  }
  shim_gate_leave();
  return result;
}

/* ---- generic nodes (cuGraphAddNode & co.): kernel nodes as above, memcpy and memset nodes as
 * graph_copy.c's, others unchanged ---- */

static int kernel_node(const CUgraphNodeParams *p)
{
  return p && p->type == CU_GRAPH_NODE_TYPE_KERNEL && shim_kparam_active();
}

/* *copy = *p with the kernel's arguments translated (CUDA_KERNEL_NODE_PARAMS_v3 has the layout
 * of _v2). Release frame afterwards. */
static CUresult prepare_generic(const CUgraphNodeParams *p, CUgraphNodeParams *copy,
                                struct shim_kparam_frame *frame)
{
  *copy = *p;
  CUDA_KERNEL_NODE_PARAMS kernel, translated;
  _Static_assert(sizeof kernel == sizeof p->kernel, "kernel node parameters v2 and v3 differ");
  memcpy(&kernel, &p->kernel, sizeof kernel);
  CUresult result = prepare_node(&kernel, &translated, frame);
  memcpy(&copy->kernel, &translated, sizeof translated);
  return result;
}

/* A node of another kind was added or set through the generic API: a child graph node holds
 * whatever the child holds, out of cudaw's reach, and a conditional node's bodies are graphs cudaw
 * does not follow into the parent. */
static void other_node_added(const void *graph, const CUgraphNodeParams *p)
{
  if (!graph || !p || !shim_translate_end) return;
  if (p->type == CU_GRAPH_NODE_TYPE_GRAPH) {
    shim_kparam_graph_inherit(graph, p->graph.graph,
                              "it has a child graph node, inside which cudaw does not update");
  } else if (p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
    shim_kparam_graph_mark(graph);
    shim_kparam_graph_opaque(graph, "it has a conditional node, whose bodies cudaw does not "
                                    "update");
  }
}

/* owner_expr and node_expr: evaluated after a successful call (NULL owner: unknown). */
#define GENERIC_NODE(name, params, args, owner_expr, node_expr, exec)                    \
  SHIM_EXPORT CUresult name params                                                       \
  {                                                                                      \
    ENTER(name);                                                                         \
    CUresult result;                                                                     \
    if (!kernel_node(nodeParams)) {                                                      \
      CUgraphNodeParams copy, *original = nodeParams;                                    \
      if (shim_drv_copy_node_in(original, &copy)) nodeParams = &copy;                    \
      result = REAL(name) args;                                                          \
      nodeParams = original;                                                             \
      const void *owner = result == CUDA_SUCCESS ? (owner_expr) : NULL;                  \
      if (owner && !(exec)) other_node_added(owner, nodeParams);                         \
      if (owner) shim_drv_copy_node_keep(owner, exec, (node_expr), nodeParams);          \
    } else {                                                                             \
      CUgraphNodeParams copy, *original = nodeParams;                                    \
      struct shim_kparam_frame frame;                                                       \
      result = prepare_generic(original, &copy, &frame);                                 \
      nodeParams = &copy;                                                                \
      if (result == CUDA_SUCCESS) result = REAL(name) args;                              \
      nodeParams = original;                                                             \
      shim_kparam_frame_release(&frame);                                                    \
      const void *owner = result == CUDA_SUCCESS ? (owner_expr) : NULL;                  \
      if (owner) {                                                                       \
        CUDA_KERNEL_NODE_PARAMS kernel;                                                  \
        memcpy(&kernel, &original->kernel, sizeof kernel);                               \
        shim_kparam_graph_mark(owner);                                                   \
        keep_node(owner, exec, (node_expr), &kernel);                                    \
      }                                                                                  \
    }                                                                                    \
    shim_gate_leave();                                                                   \
    return result;                                                                       \
  }

GENERIC_NODE(cuGraphAddNode_v2,
             (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
              const CUgraphEdgeData *dependencyData, size_t numDependencies,
              CUgraphNodeParams *nodeParams),
             (phGraphNode, hGraph, dependencies, dependencyData, numDependencies, nodeParams),
             (phGraphNode ? (shim_kparam_node_mark(*phGraphNode, hGraph), (const void *)hGraph)
                          : NULL),
             *phGraphNode, false)
GENERIC_NODE(cuGraphAddNode,
             (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
              size_t numDependencies, CUgraphNodeParams *nodeParams),
             (phGraphNode, hGraph, dependencies, numDependencies, nodeParams),
             (phGraphNode ? (shim_kparam_node_mark(*phGraphNode, hGraph), (const void *)hGraph)
                          : NULL),
             *phGraphNode, false)
GENERIC_NODE(cuGraphNodeSetParams, (CUgraphNode hNode, CUgraphNodeParams *nodeParams),
             (hNode, nodeParams), shim_kparam_node_graph(hNode), hNode, false)
GENERIC_NODE(cuGraphExecNodeSetParams,
             (CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams *nodeParams),
             (hGraphExec, hNode, nodeParams), (const void *)hGraphExec, hNode, true)

/* ---- after a move: updated, or refused when cudaw cannot update ---- */

static CUresult stale(void)
{
  return CUDA_ERROR_NOT_PERMITTED; /* glue/kparam_graphs.c has logged why */
}

#define INSTANTIATE(name, params, ...)                                                   \
  SHIM_EXPORT CUresult name params                                                       \
  {                                                                                      \
    ENTER(name);                                                                         \
    CUresult result;                                                                     \
    if (shim_kparam_graph_stale(hGraph)) {                                               \
      result = stale();                                                                  \
    } else {                                                                             \
      result = REAL(name)(phGraphExec, hGraph, __VA_ARGS__);                             \
      if (result == CUDA_SUCCESS && phGraphExec) shim_kparam_exec_mark(*phGraphExec, hGraph); \
    }                                                                                    \
    shim_gate_leave();                                                                   \
    return result;                                                                       \
  }

INSTANTIATE(cuGraphInstantiateWithFlags,
            (CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags), flags)
INSTANTIATE(cuGraphInstantiateWithParams,
            (CUgraphExec *phGraphExec, CUgraph hGraph,
             CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams), instantiateParams)
INSTANTIATE(cuGraphInstantiateWithParams_ptsz,
            (CUgraphExec *phGraphExec, CUgraph hGraph,
             CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams), instantiateParams)

/* A graph launch is metered like a kernel launch when the program has a GPU share. */
#define GRAPH_LAUNCH(name, per_thread)                                                   \
  SHIM_EXPORT CUresult name(CUgraphExec hGraphExec, CUstream hStream)                    \
  {                                                                                      \
    ENTER(name);                                                                         \
    struct shim_gpu_ticket ticket = {-1, 0};                                             \
    if (SHIM_UNLIKELY(atomic_load_explicit(&shim_gpu_metered, memory_order_relaxed)))    \
      shim_gpu_before(hStream, per_thread, &ticket);                                     \
    CUresult result = shim_kparam_exec_stale(hGraphExec) ? stale()                       \
                                                         : REAL(name)(hGraphExec, hStream); \
    shim_gpu_after(&ticket);                                                             \
    shim_gate_leave();                                                                   \
    return result;                                                                       \
  }

GRAPH_LAUNCH(cuGraphLaunch, 0)
GRAPH_LAUNCH(cuGraphLaunch_ptsz, 1)

/* Whether hStream is being captured (active or invalidated), for the count of open captures
 * (runtime/stream.c); is_capturing: the driver's query of the end call's variant. */
static int capturing(__typeof__(&cuStreamIsCapturing) is_capturing, CUstream hStream)
{
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return is_capturing && is_capturing(hStream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void shim_drv_captured_launch(CUstream stream, const CUDA_KERNEL_NODE_PARAMS *p)
{
  if (!stream || stream == CU_STREAM_LEGACY) return; /* the legacy stream cannot be captured */
  __typeof__(&cuStreamGetCaptureInfo_v3) info = SHIM_DRV_REAL(cuStreamGetCaptureInfo_v3);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph graph = NULL;
  const CUgraphNode *last = NULL;
  size_t count = 0;
  if (!info || info(stream, &status, NULL, &graph, &last, NULL, &count) != CUDA_SUCCESS ||
      status != CU_STREAM_CAPTURE_STATUS_ACTIVE || !graph)
    return; /* not capturing; an unknown capture is caught when it ends (count) */
  shim_kparam_graph_mark(graph);
  shim_kparam_capture_seen(graph);
  /* Right after a launch, the capture's dependency set is the launch's own node. */
  if (count != 1 || !last || !last[0]) {
    shim_kparam_graph_opaque(graph, "a captured launch's node could not be identified");
    return;
  }
  keep_node(graph, false, last[0], p);
}

/* The end of a capture under translate: the graph can be updated after a move only if cudaw saw
 * every kernel node become one (shim_drv_captured_launch, or the runtime's launches) and it holds
 * no node cudaw does not look into. */
static void captured(CUgraph graph)
{
  if (!shim_translate_end) return;
  shim_kparam_graph_mark(graph);
  __typeof__(&cuGraphGetNodes) get_nodes = SHIM_DRV_REAL(cuGraphGetNodes);
  __typeof__(&cuGraphNodeGetType) get_type = SHIM_DRV_REAL(cuGraphNodeGetType);
  size_t count = 0, kernels = 0;
  CUgraphNode *nodes = NULL;
  const char *reason = NULL;
  if (!get_nodes || !get_type || get_nodes(graph, NULL, &count) != CUDA_SUCCESS)
    reason = "it was captured from a stream, and the driver did not list its nodes";
  else if (count && !(nodes = malloc(count * sizeof *nodes)))
    reason = "cudaw ran out of memory checking its nodes";
  else if (count && get_nodes(graph, nodes, &count) != CUDA_SUCCESS)
    reason = "it was captured from a stream, and the driver did not list its nodes";
  for (size_t i = 0; !reason && i < count; i++) {
    CUgraphNodeType type;
    if (get_type(nodes[i], &type) != CUDA_SUCCESS)
      reason = "it was captured from a stream, and the driver did not tell a node's type";
    else if (type == CU_GRAPH_NODE_TYPE_KERNEL)
      kernels++;
    else if (type == CU_GRAPH_NODE_TYPE_GRAPH)
      reason = "it has a child graph node (a graph launched during the capture), inside which "
               "cudaw does not update";
    else if (type == CU_GRAPH_NODE_TYPE_CONDITIONAL)
      reason = "it has a conditional node, whose bodies cudaw does not update";
    else if (type == CU_GRAPH_NODE_TYPE_MEMCPY || type == CU_GRAPH_NODE_TYPE_MEMSET)
      reason = "it captured a copy or memset, whose node cudaw does not update";
  }
  free(nodes);
  if (!reason && kernels != shim_kparam_capture_count(graph))
    reason = "it captured kernel launches that cudaw did not see become nodes";
  if (reason) shim_kparam_graph_opaque(graph, reason);
}

#define END_CAPTURE(name, is_capturing)                                                  \
  SHIM_EXPORT CUresult name(CUstream hStream, CUgraph *phGraph)                          \
  {                                                                                      \
    ENTER(name);                                                                         \
    int was_capturing = capturing(SHIM_DRV_REAL(is_capturing), hStream);                 \
    CUresult result = REAL(name)(hStream, phGraph);                                      \
    if (was_capturing)                                                                   \
      shim_capture_end(1, capturing(SHIM_DRV_REAL(is_capturing), hStream),               \
                       result == CUDA_SUCCESS ||                                         \
                           result == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);             \
    if (result == CUDA_SUCCESS && phGraph) captured(*phGraph);                           \
    shim_gate_leave();                                                                   \
    return result;                                                                       \
  }

END_CAPTURE(cuStreamEndCapture, cuStreamIsCapturing)
END_CAPTURE(cuStreamEndCapture_ptsz, cuStreamIsCapturing_ptsz)

SHIM_EXPORT CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
  ENTER(cuGraphClone);
  CUresult result = REAL(cuGraphClone)(phGraphClone, originalGraph);
  if (result == CUDA_SUCCESS && phGraphClone)
    shim_kparam_graph_inherit(*phGraphClone, originalGraph,
                              "it is a clone (cuGraphClone), whose nodes cudaw does not follow");
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                              const CUgraphNode *dependencies,
                                              size_t numDependencies, CUgraph childGraph)
{
  ENTER(cuGraphAddChildGraphNode);
  CUresult result = REAL(cuGraphAddChildGraphNode)(phGraphNode, hGraph, dependencies,
                                                   numDependencies, childGraph);
  if (result == CUDA_SUCCESS) shim_kparam_graph_inherit(hGraph, childGraph,
                              "it has a child graph node, inside which cudaw does not update");
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
                                          CUgraphExecUpdateResultInfo *resultInfo)
{
  ENTER(cuGraphExecUpdate_v2);
  CUresult result;
  if (shim_kparam_graph_stale(hGraph)) {
    result = stale();
  } else {
    result = REAL(cuGraphExecUpdate_v2)(hGraphExec, hGraph, resultInfo);
    if (result == CUDA_SUCCESS) shim_kparam_exec_updated(hGraphExec, hGraph);
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
  ENTER(cuGraphDestroy);
  shim_kparam_graph_forget(hGraph);
  CUresult result = REAL(cuGraphDestroy)(hGraph);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuGraphDestroyNode(CUgraphNode hNode)
{
  ENTER(cuGraphDestroyNode);
  CUresult result = REAL(cuGraphDestroyNode)(hNode);
  if (result == CUDA_SUCCESS) shim_kparam_node_destroyed(hNode);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
  ENTER(cuGraphExecDestroy);
  shim_kparam_graph_forget(hGraphExec);
  CUresult result = REAL(cuGraphExecDestroy)(hGraphExec);
  shim_gate_leave();
  return result;
}
