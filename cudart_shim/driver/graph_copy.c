/* Memcpy and memset nodes of graphs built through the driver (a static runtime's
 * cudaGraphAddMemcpyNode arrives as cuGraphAddMemcpyNode; XLA's command buffers): their device
 * addresses sit inside a structure. Under CUDAW_VMEM=translate the node gets them translated in a
 * copy, and keeps the program's own parameters (glue/kparam_graphs.c), so that after a checkpoint
 * moved memory it is translated again and set in place, as kernel nodes are (graph.c). Under
 * remap everything passes untouched. Listed in gen/api.d/driver.conf. */
#include "shim_driver.h"

#include <errno.h>
#include <string.h>

#define ENTER(name)                                            \
  shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_##name); \
  if (!real) return shim_drv_missing_counted(SHIM_DRV_##name)
#define REAL(name) ((__typeof__(&name))real)

/* What a node keeps: its kind, the context the node was given, the program's parameters. */
enum node_kind { NODE_COPY, NODE_SET };
struct node_fields {
  enum node_kind kind;
  CUcontext ctx;
  union {
    CUDA_MEMCPY3D copy;
    CUDA_MEMSET_NODE_PARAMS set;
  } u;
};

static void translate_set(CUDA_MEMSET_NODE_PARAMS *p) { p->dst = shim_translate_address(p->dst); }

/* After a move: the kept parameters translated again and set (glue/kparam_graphs.c). */
static int update_node(const void *owner, bool exec, const void *node,
                       const struct shim_kparam_blob *blob)
{
  struct node_fields f;
  memcpy(&f, blob->data, sizeof f);
  CUgraphExec e = (CUgraphExec)owner;
  CUgraphNode n = (CUgraphNode)node;
  CUresult result = CUDA_ERROR_NOT_FOUND;
  if (f.kind == NODE_COPY) {
    SHIM_DRV_TRANSLATE_SIDES(f.u.copy);
    __typeof__(&cuGraphExecMemcpyNodeSetParams) set_exec =
        SHIM_DRV_REAL(cuGraphExecMemcpyNodeSetParams);
    __typeof__(&cuGraphMemcpyNodeSetParams) set = SHIM_DRV_REAL(cuGraphMemcpyNodeSetParams);
    if (exec && set_exec) result = set_exec(e, n, &f.u.copy, f.ctx);
    else if (!exec && set) result = set(n, &f.u.copy);
  } else {
    translate_set(&f.u.set);
    __typeof__(&cuGraphExecMemsetNodeSetParams) set_exec =
        SHIM_DRV_REAL(cuGraphExecMemsetNodeSetParams);
    __typeof__(&cuGraphMemsetNodeSetParams) set = SHIM_DRV_REAL(cuGraphMemsetNodeSetParams);
    if (exec && set_exec) result = set_exec(e, n, &f.u.set, f.ctx);
    else if (!exec && set) result = set(n, &f.u.set);
  }
  if (result != CUDA_SUCCESS) shim_debug("kparam: driver copy node update: error %d", (int)result);
  return result == CUDA_SUCCESS ? 0 : result == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

/* node of owner (a graph, or an exec when exec) was set from params (the program's): keep it. */
static void keep_node(const void *owner, bool exec, CUgraphNode node, enum node_kind kind,
                      const void *params, CUcontext ctx)
{
  if (!owner || !node || !params || !shim_translate_end) return;
  struct node_fields f;
  memset(&f, 0, sizeof f);
  f.kind = kind;
  f.ctx = ctx;
  if (kind == NODE_COPY) memcpy(&f.u.copy, params, sizeof f.u.copy);
  else memcpy(&f.u.set, params, sizeof f.u.set);
  shim_kparam_node_keep_fields(owner, exec, node, update_node, &f, sizeof f);
}

/* One wrapper: a copy of the structure with translated addresses under translate. */
#define NODE_WRAPPER(name, type, kind, translate, params, args, owner, node, exec, ctx)     \
  SHIM_EXPORT CUresult name params                                                       \
  {                                                                                      \
    ENTER(name);                                                                         \
    CUresult result;                                                                     \
    const type *program = nodeParams;                                                    \
    if (program && shim_translate_end) {                                                 \
      type copy = *program;                                                              \
      translate(copy);                                                                   \
      nodeParams = &copy;                                                                \
      result = REAL(name) args;                                                          \
      nodeParams = program;                                                              \
    } else {                                                                             \
      result = REAL(name) args;                                                          \
    }                                                                                    \
    if (result == CUDA_SUCCESS) keep_node((owner), (exec), (node), (kind), program, (ctx)); \
    shim_gate_leave();                                                                   \
    return result;                                                                       \
  }
#define COPY_SIDES(c) SHIM_DRV_TRANSLATE_SIDES(c)
#define SET_DST(c) translate_set(&(c))

NODE_WRAPPER(cuGraphAddMemcpyNode, CUDA_MEMCPY3D, NODE_COPY, COPY_SIDES,
             (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
              size_t numDependencies, const CUDA_MEMCPY3D *nodeParams, CUcontext ctx),
             (phGraphNode, hGraph, dependencies, numDependencies, nodeParams, ctx), hGraph,
             phGraphNode ? *phGraphNode : NULL, false, ctx)
NODE_WRAPPER(cuGraphMemcpyNodeSetParams, CUDA_MEMCPY3D, NODE_COPY, COPY_SIDES,
             (CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams), (hNode, nodeParams),
             shim_kparam_node_graph(hNode), hNode, false, NULL)
NODE_WRAPPER(cuGraphExecMemcpyNodeSetParams, CUDA_MEMCPY3D, NODE_COPY, COPY_SIDES,
             (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams,
              CUcontext ctx),
             (hGraphExec, hNode, nodeParams, ctx), hGraphExec, hNode, true, ctx)
NODE_WRAPPER(cuGraphAddMemsetNode, CUDA_MEMSET_NODE_PARAMS, NODE_SET, SET_DST,
             (CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
              size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *nodeParams, CUcontext ctx),
             (phGraphNode, hGraph, dependencies, numDependencies, nodeParams, ctx), hGraph,
             phGraphNode ? *phGraphNode : NULL, false, ctx)
NODE_WRAPPER(cuGraphMemsetNodeSetParams, CUDA_MEMSET_NODE_PARAMS, NODE_SET, SET_DST,
             (CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *nodeParams), (hNode, nodeParams),
             shim_kparam_node_graph(hNode), hNode, false, NULL)
NODE_WRAPPER(cuGraphExecMemsetNodeSetParams, CUDA_MEMSET_NODE_PARAMS, NODE_SET, SET_DST,
             (CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *nodeParams,
              CUcontext ctx),
             (hGraphExec, hNode, nodeParams, ctx), hGraphExec, hNode, true, ctx)

/* ---- the generic API's memcpy and memset nodes (graph.c's cuGraphAddNode & co.) ---- */

bool shim_drv_copy_node_in(const CUgraphNodeParams *p, CUgraphNodeParams *copy)
{
  if (!p || !shim_translate_end ||
      (p->type != CU_GRAPH_NODE_TYPE_MEMCPY && p->type != CU_GRAPH_NODE_TYPE_MEMSET))
    return false;
  *copy = *p;
  if (p->type == CU_GRAPH_NODE_TYPE_MEMCPY) SHIM_DRV_TRANSLATE_SIDES(copy->memcpy.copyParams);
  else copy->memset.dst = shim_translate_address(copy->memset.dst);
  return true;
}

void shim_drv_copy_node_keep(const void *owner, bool exec, CUgraphNode node,
                             const CUgraphNodeParams *p)
{
  if (!p || !shim_translate_end) return;
  if (p->type == CU_GRAPH_NODE_TYPE_MEMCPY) {
    keep_node(owner, exec, node, NODE_COPY, &p->memcpy.copyParams, p->memcpy.copyCtx);
  } else if (p->type == CU_GRAPH_NODE_TYPE_MEMSET) {
    const CUDA_MEMSET_NODE_PARAMS_v2 *m = &p->memset;
    CUDA_MEMSET_NODE_PARAMS set = {.dst = m->dst, .pitch = m->pitch, .value = m->value,
                                   .elementSize = m->elementSize, .width = m->width,
                                   .height = m->height};
    keep_node(owner, exec, node, NODE_SET, &set, m->ctx);
  }
}
