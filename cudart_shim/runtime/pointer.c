/* Hand-written overrides for API functions whose device pointers sit inside structures (3D copy
 * and memset parameters, batched copies, graph memcpy/memset nodes) or whose answer depends on
 * what a virtual pointer is (cudaPointerGetAttributes, cudaIpcGetMemHandle). Each checks a
 * virtual pointer's range where the call says how far it reaches, translates a copy of the
 * structure and calls the real runtime; the caller's structures are never modified. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shim_generated.h"
#include "shim_kparam.h"
#include "shim_vmem.h"
#include "vmem.h"

/* Not declared in C mode without CUDA_API_PER_THREAD_DEFAULT_STREAM. */
cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
                                 enum cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemcpy3D_ptds(const struct cudaMemcpy3DParms *p);
cudaError_t cudaMemcpy3DAsync_ptsz(const struct cudaMemcpy3DParms *p, cudaStream_t stream);
cudaError_t cudaMemcpy3DPeer_ptds(const struct cudaMemcpy3DPeerParms *p);
cudaError_t cudaMemcpy3DPeerAsync_ptsz(const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream);
cudaError_t cudaMemset3D_ptds(struct cudaPitchedPtr pitchedDevPtr, int value,
                              struct cudaExtent extent);
cudaError_t cudaMemset3DAsync_ptsz(struct cudaPitchedPtr pitchedDevPtr, int value,
                                   struct cudaExtent extent, cudaStream_t stream);
cudaError_t cudaMemcpyBatchAsync_ptsz(void *const *dsts, const void *const *srcs,
                                      const size_t *sizes, size_t count,
                                      struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
                                      size_t numAttrs, cudaStream_t stream);
cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, struct cudaMemcpy3DBatchOp *opList,
                                        unsigned long long flags, cudaStream_t stream);

/* Check and translate one pointer argument reaching bytes (ranged) from p. */
static int pointer_in(enum shim_fn_id id, void **p, uint64_t bytes, int ranged)
{
  if (!*p || !vmem_owns(*p)) return 0;
  if ((ranged || shim_vmem_check_all) && shim_vmem_check_arg(id, *p, bytes, ranged)) return -EFAULT;
  *p = (void *)shim_translate_in(*p);
  return 0;
}

/* A pitched operand of a 3D copy or memset: the box extent at pos. byte_width: extent.width is
 * in bytes (no array on either side), so the reach is known and checked. */
static int pitched_in(enum shim_fn_id id, struct cudaPitchedPtr *pp, struct cudaPos pos,
                      struct cudaExtent extent, int byte_width)
{
  if (!pp->ptr || !vmem_owns(pp->ptr)) return 0;
  if (byte_width && extent.width && extent.height && extent.depth) {
    uint64_t begin = ((uint64_t)pos.z * pp->ysize + pos.y) * pp->pitch + pos.x;
    uint64_t span = ((uint64_t)(extent.depth - 1) * pp->ysize + (extent.height - 1)) * pp->pitch +
                    extent.width;
    if (shim_vmem_check_arg(id, (char *)pp->ptr + begin, span, 1)) return -EFAULT;
  } else if (shim_vmem_check_all && shim_vmem_check_arg(id, pp->ptr, 0, 0)) {
    return -EFAULT;
  }
  pp->ptr = (void *)shim_translate_in(pp->ptr);
  return 0;
}

static int copy3d_in(enum shim_fn_id id, struct cudaMemcpy3DParms *p)
{
  int bytes = !p->srcArray && !p->dstArray;
  if (pitched_in(id, &p->srcPtr, p->srcPos, p->extent, bytes)) return -EFAULT;
  return pitched_in(id, &p->dstPtr, p->dstPos, p->extent, bytes);
}

static int peer3d_in(enum shim_fn_id id, struct cudaMemcpy3DPeerParms *p)
{
  int bytes = !p->srcArray && !p->dstArray;
  if (pitched_in(id, &p->srcPtr, p->srcPos, p->extent, bytes)) return -EFAULT;
  return pitched_in(id, &p->dstPtr, p->dstPos, p->extent, bytes);
}

static int memset_in(enum shim_fn_id id, struct cudaMemsetParams *p)
{
  uint64_t width = (uint64_t)p->width * p->elementSize;
  return pointer_in(id, &p->dst, shim_extent_2d(p->height > 1 ? p->pitch : width, width,
                                                p->height), 1);
}

#define ENTER(name)                                                                            \
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_##name);                                         \
  if (!real) return shim_missing(SHIM_FN_##name);                                              \
  cudaError_t result
#define REAL(name) ((__typeof__(&name))real)
#define LEAVE()                                                                                \
  shim_gate_leave();                                                                           \
  return result
#define FAIL_INVALID() (result = shim_set_last_error(cudaErrorInvalidValue))

/* ---- plain copies: another device's memory (shim_vmem_copy_across) ---- */

#define COPY(name, async, stream_value, ...)                                                   \
  SHIM_EXPORT cudaError_t name(void *dst, const void *src, size_t count,                       \
                               enum cudaMemcpyKind kind __VA_OPT__(, ) __VA_ARGS__)            \
  {                                                                                            \
    ENTER(name);                                                                               \
    if (pointer_in(SHIM_FN_##name, &dst, count, 1) != 0 ||                                     \
        pointer_in(SHIM_FN_##name, (void **)&src, count, 1) != 0) {                            \
      FAIL_INVALID();                                                                          \
      LEAVE();                                                                                 \
    }                                                                                          \
    if (SHIM_UNLIKELY(shim_vmem_multi_device()) &&                                             \
        shim_vmem_copy_across(dst, src, count, kind, stream_value, async, &result)) {          \
      LEAVE();                                                                                 \
    }                                                                                          \
    result = REAL(name)(dst, src, count, kind STREAM_ARG(__VA_ARGS__));                        \
    LEAVE();                                                                                   \
  }
#define STREAM_ARG(...) __VA_OPT__(, stream)

COPY(cudaMemcpy, 0, NULL)
COPY(cudaMemcpy_ptds, 0, NULL)
COPY(cudaMemcpyAsync, 1, stream, cudaStream_t stream)
COPY(cudaMemcpyAsync_ptsz, 1, stream, cudaStream_t stream)

/* ---- 3D copies and memsets ---- */

#define COPY3D(name, params_type, translate, ...)                                              \
  SHIM_EXPORT cudaError_t name(const struct params_type *p __VA_OPT__(, ) __VA_ARGS__)         \
  {                                                                                            \
    ENTER(name);                                                                               \
    struct params_type copy;                                                                   \
    if (!p) {                                                                                  \
      result = REAL(name)(p STREAM_ARG(__VA_ARGS__));                                          \
    } else {                                                                                   \
      copy = *p;                                                                               \
      if (translate(SHIM_FN_##name, &copy)) FAIL_INVALID();                                    \
      else result = REAL(name)(&copy STREAM_ARG(__VA_ARGS__));                                 \
    }                                                                                          \
    LEAVE();                                                                                   \
  }

COPY3D(cudaMemcpy3D, cudaMemcpy3DParms, copy3d_in)
COPY3D(cudaMemcpy3D_ptds, cudaMemcpy3DParms, copy3d_in)
COPY3D(cudaMemcpy3DAsync, cudaMemcpy3DParms, copy3d_in, cudaStream_t stream)
COPY3D(cudaMemcpy3DAsync_ptsz, cudaMemcpy3DParms, copy3d_in, cudaStream_t stream)
COPY3D(cudaMemcpy3DPeer, cudaMemcpy3DPeerParms, peer3d_in)
COPY3D(cudaMemcpy3DPeer_ptds, cudaMemcpy3DPeerParms, peer3d_in)
COPY3D(cudaMemcpy3DPeerAsync, cudaMemcpy3DPeerParms, peer3d_in, cudaStream_t stream)
COPY3D(cudaMemcpy3DPeerAsync_ptsz, cudaMemcpy3DPeerParms, peer3d_in, cudaStream_t stream)

#define MEMSET3D(name, ...)                                                                    \
  SHIM_EXPORT cudaError_t name(struct cudaPitchedPtr pitchedDevPtr, int value,                 \
                               struct cudaExtent extent __VA_OPT__(, ) __VA_ARGS__)            \
  {                                                                                            \
    ENTER(name);                                                                               \
    if (pitched_in(SHIM_FN_##name, &pitchedDevPtr, (struct cudaPos){0, 0, 0}, extent, 1))          \
      FAIL_INVALID();                                                                          \
    else                                                                                       \
      result = REAL(name)(pitchedDevPtr, value, extent STREAM_ARG(__VA_ARGS__));               \
    LEAVE();                                                                                   \
  }

MEMSET3D(cudaMemset3D)
MEMSET3D(cudaMemset3D_ptds)
MEMSET3D(cudaMemset3DAsync, cudaStream_t stream)
MEMSET3D(cudaMemset3DAsync_ptsz, cudaStream_t stream)

/* ---- batched copies: arrays of pointers, translated into copies ---- */

static cudaError_t batch(enum shim_fn_id id, shim_real_fn real, void *const *dsts,
                         const void *const *srcs, const size_t *sizes, size_t count,
                         struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
                         cudaStream_t stream)
{
  __typeof__(&cudaMemcpyBatchAsync) call = (__typeof__(&cudaMemcpyBatchAsync))real;
  int virtual_seen = 0;
  for (size_t i = 0; dsts && srcs && sizes && i < count && !virtual_seen; i++)
    virtual_seen = vmem_owns(dsts[i]) || vmem_owns(srcs[i]);
  if (!virtual_seen) return call(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream);
  void **d = malloc(count * sizeof *d);
  const void **s = malloc(count * sizeof *s);
  cudaError_t result = cudaErrorMemoryAllocation;
  if (!d || !s) goto out;
  result = cudaErrorInvalidValue;
  for (size_t i = 0; i < count; i++) {
    d[i] = dsts[i];
    s[i] = srcs[i];
    if (pointer_in(id, &d[i], sizes[i], 1) || pointer_in(id, (void **)&s[i], sizes[i], 1))
      goto out;
  }
  result = call(d, s, sizes, count, attrs, attrsIdxs, numAttrs, stream);
out:
  free(d);
  free(s);
  return result == cudaSuccess ? result : shim_set_last_error(result);
}

SHIM_EXPORT cudaError_t cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs,
                                             const size_t *sizes, size_t count,
                                             struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
                                             size_t numAttrs, cudaStream_t stream)
{
  ENTER(cudaMemcpyBatchAsync);
  result = batch(SHIM_FN_cudaMemcpyBatchAsync, real, dsts, srcs, sizes, count, attrs, attrsIdxs,
                 numAttrs, stream);
  LEAVE();
}

SHIM_EXPORT cudaError_t cudaMemcpyBatchAsync_ptsz(void *const *dsts, const void *const *srcs,
                                                  const size_t *sizes, size_t count,
                                                  struct cudaMemcpyAttributes *attrs,
                                                  size_t *attrsIdxs, size_t numAttrs,
                                                  cudaStream_t stream)
{
  ENTER(cudaMemcpyBatchAsync_ptsz);
  result = batch(SHIM_FN_cudaMemcpyBatchAsync_ptsz, real, dsts, srcs, sizes, count, attrs,
                 attrsIdxs, numAttrs, stream);
  LEAVE();
}

/* 3D batches: operands' widths are in elements, so only translation (and CUDAW_CHECK). */
static cudaError_t batch3d(enum shim_fn_id id, shim_real_fn real, size_t numOps,
                           struct cudaMemcpy3DBatchOp *ops, unsigned long long flags,
                           cudaStream_t stream)
{
  __typeof__(&cudaMemcpy3DBatchAsync) call = (__typeof__(&cudaMemcpy3DBatchAsync))real;
  if (!ops || !numOps) return call(numOps, ops, flags, stream);
  struct cudaMemcpy3DBatchOp *copy = malloc(numOps * sizeof *copy);
  if (!copy) return shim_set_last_error(cudaErrorMemoryAllocation);
  memcpy(copy, ops, numOps * sizeof *copy);
  cudaError_t result = cudaSuccess;
  for (size_t i = 0; i < numOps && result == cudaSuccess; i++) {
    struct cudaMemcpy3DOperand *side[2] = {&copy[i].src, &copy[i].dst};
    for (int k = 0; k < 2; k++)
      if (side[k]->type == cudaMemcpyOperandTypePointer &&
          pointer_in(id, &side[k]->op.ptr.ptr, 0, 0))
        result = shim_set_last_error(cudaErrorInvalidValue);
  }
  if (result == cudaSuccess) result = call(numOps, copy, flags, stream);
  free(copy);
  return result;
}

SHIM_EXPORT cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, struct cudaMemcpy3DBatchOp *opList,
                                               unsigned long long flags, cudaStream_t stream)
{
  ENTER(cudaMemcpy3DBatchAsync);
  result = batch3d(SHIM_FN_cudaMemcpy3DBatchAsync, real, numOps, opList, flags, stream);
  LEAVE();
}

SHIM_EXPORT cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps,
                                                    struct cudaMemcpy3DBatchOp *opList,
                                                    unsigned long long flags, cudaStream_t stream)
{
  ENTER(cudaMemcpy3DBatchAsync_ptsz);
  result = batch3d(SHIM_FN_cudaMemcpy3DBatchAsync_ptsz, real, numOps, opList, flags, stream);
  LEAVE();
}

/* ---- graph memcpy and memset nodes: the node keeps the real address (see docs/vmem.md) ----
 * Under translate each node also keeps the parameters the program gave (glue/kparam_graphs.c),
 * so that after a checkpoint moved memory it is translated again and set in place. */

enum node_kind { NODE_COPY, NODE_SET };
struct node_fields {
  enum node_kind kind;
  union {
    struct cudaMemcpy3DParms copy;
    struct cudaMemsetParams set;
  } u;
};

static int update_node(const void *owner, bool exec, const void *node,
                       const struct shim_kparam_blob *blob)
{
  struct node_fields f;
  memcpy(&f, blob->data, sizeof f);
  cudaGraphNode_t n = (cudaGraphNode_t)node;
  cudaGraphExec_t e = (cudaGraphExec_t)owner;
  cudaError_t result;
  if (f.kind == NODE_COPY) {
    if (copy3d_in(SHIM_FN_cudaGraphExecMemcpyNodeSetParams, &f.u.copy)) return -EFAULT;
    result = exec ? SHIM_REAL(cudaGraphExecMemcpyNodeSetParams)(e, n, &f.u.copy)
                  : SHIM_REAL(cudaGraphMemcpyNodeSetParams)(n, &f.u.copy);
  } else {
    if (memset_in(SHIM_FN_cudaGraphExecMemsetNodeSetParams, &f.u.set)) return -EFAULT;
    result = exec ? SHIM_REAL(cudaGraphExecMemsetNodeSetParams)(e, n, &f.u.set)
                  : SHIM_REAL(cudaGraphMemsetNodeSetParams)(n, &f.u.set);
  }
  return result == cudaSuccess ? 0 : -EIO;
}

/* node of owner (a graph, or an exec when exec) was set from *params (the program's): keep it.
 * owner NULL: a node cudaw did not add, whose graph it does not know. */
static void keep_node(const void *owner, bool exec, cudaGraphNode_t node, enum node_kind kind,
                      const void *params)
{
  if (!owner || !node || !params || !shim_translate_end) return;
  struct node_fields f;
  memset(&f, 0, sizeof f);
  f.kind = kind;
  if (kind == NODE_COPY) memcpy(&f.u.copy, params, sizeof f.u.copy);
  else memcpy(&f.u.set, params, sizeof f.u.set);
  shim_kparam_node_keep_fields(owner, exec, node, update_node, &f, sizeof f);
}

SHIM_EXPORT cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t *pDependencies,
                                               size_t numDependencies,
                                               const struct cudaMemcpy3DParms *pCopyParams)
{
  ENTER(cudaGraphAddMemcpyNode);
  struct cudaMemcpy3DParms copy;
  if (pCopyParams && (copy = *pCopyParams, copy3d_in(SHIM_FN_cudaGraphAddMemcpyNode, &copy)))
    FAIL_INVALID();
  else
    result = REAL(cudaGraphAddMemcpyNode)(pGraphNode, graph, pDependencies, numDependencies,
                                          pCopyParams ? &copy : NULL);
  if (result == cudaSuccess && pGraphNode)
    keep_node(graph, false, *pGraphNode, NODE_COPY, pCopyParams);
  LEAVE();
}

SHIM_EXPORT cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node,
                                                     const struct cudaMemcpy3DParms *pNodeParams)
{
  ENTER(cudaGraphMemcpyNodeSetParams);
  struct cudaMemcpy3DParms copy;
  if (pNodeParams && (copy = *pNodeParams, copy3d_in(SHIM_FN_cudaGraphMemcpyNodeSetParams, &copy)))
    FAIL_INVALID();
  else
    result = REAL(cudaGraphMemcpyNodeSetParams)(node, pNodeParams ? &copy : NULL);
  if (result == cudaSuccess)
    keep_node(shim_kparam_node_graph(node), false, node, NODE_COPY, pNodeParams);
  LEAVE();
}

SHIM_EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t hGraphExec,
                                                         cudaGraphNode_t node,
                                                         const struct cudaMemcpy3DParms *pNodeParams)
{
  ENTER(cudaGraphExecMemcpyNodeSetParams);
  struct cudaMemcpy3DParms copy;
  if (pNodeParams &&
      (copy = *pNodeParams, copy3d_in(SHIM_FN_cudaGraphExecMemcpyNodeSetParams, &copy)))
    FAIL_INVALID();
  else
    result = REAL(cudaGraphExecMemcpyNodeSetParams)(hGraphExec, node, pNodeParams ? &copy : NULL);
  if (result == cudaSuccess) keep_node(hGraphExec, true, node, NODE_COPY, pNodeParams);
  LEAVE();
}

SHIM_EXPORT cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                               const cudaGraphNode_t *pDependencies,
                                               size_t numDependencies,
                                               const struct cudaMemsetParams *pMemsetParams)
{
  ENTER(cudaGraphAddMemsetNode);
  struct cudaMemsetParams copy;
  if (pMemsetParams && (copy = *pMemsetParams, memset_in(SHIM_FN_cudaGraphAddMemsetNode, &copy)))
    FAIL_INVALID();
  else
    result = REAL(cudaGraphAddMemsetNode)(pGraphNode, graph, pDependencies, numDependencies,
                                          pMemsetParams ? &copy : NULL);
  if (result == cudaSuccess && pGraphNode)
    keep_node(graph, false, *pGraphNode, NODE_SET, pMemsetParams);
  LEAVE();
}

SHIM_EXPORT cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node,
                                                     const struct cudaMemsetParams *pNodeParams)
{
  ENTER(cudaGraphMemsetNodeSetParams);
  struct cudaMemsetParams copy;
  if (pNodeParams && (copy = *pNodeParams, memset_in(SHIM_FN_cudaGraphMemsetNodeSetParams, &copy)))
    FAIL_INVALID();
  else
    result = REAL(cudaGraphMemsetNodeSetParams)(node, pNodeParams ? &copy : NULL);
  if (result == cudaSuccess)
    keep_node(shim_kparam_node_graph(node), false, node, NODE_SET, pNodeParams);
  LEAVE();
}

SHIM_EXPORT cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec,
                                                         cudaGraphNode_t node,
                                                         const struct cudaMemsetParams *pNodeParams)
{
  ENTER(cudaGraphExecMemsetNodeSetParams);
  struct cudaMemsetParams copy;
  if (pNodeParams &&
      (copy = *pNodeParams, memset_in(SHIM_FN_cudaGraphExecMemsetNodeSetParams, &copy)))
    FAIL_INVALID();
  else
    result = REAL(cudaGraphExecMemsetNodeSetParams)(hGraphExec, node, pNodeParams ? &copy : NULL);
  if (result == cudaSuccess) keep_node(hGraphExec, true, node, NODE_SET, pNodeParams);
  LEAVE();
}

/* Generic node parameters (cudaGraphAddNode and friends, in runtime/graph.c): memcpy and memset
 * nodes are translated in a copy; every other kind goes through untouched. */
int shim_vmem_node_params_in(enum shim_fn_id id, struct cudaGraphNodeParams *in,
                             struct cudaGraphNodeParams *copy, struct cudaGraphNodeParams **use)
{
  *use = in;
  if (!in || (in->type != cudaGraphNodeTypeMemcpy && in->type != cudaGraphNodeTypeMemset))
    return 0;
  *copy = *in;
  *use = copy;
  if (in->type == cudaGraphNodeTypeMemcpy) return copy3d_in(id, &copy->memcpy.copyParams);
  struct cudaMemsetParams m = {copy->memset.dst, copy->memset.pitch, copy->memset.value,
                               copy->memset.elementSize, copy->memset.width, copy->memset.height};
  int rc = memset_in(id, &m);
  copy->memset.dst = m.dst;
  return rc;
}

/* ---- what a pointer is ---- */

SHIM_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                                 const void *ptr)
{
  ENTER(cudaPointerGetAttributes);
  struct vmem_info info;
  if (!attributes || !vmem_owns(ptr)) {
    result = REAL(cudaPointerGetAttributes)(attributes, ptr);
  } else {
    /* What the runtime says of a cudaMalloc pointer, and of an address nothing owns. */
    memset(attributes, 0, sizeof *attributes);
    if (vmem_lookup(ptr, &info) == 0) {
      attributes->type = cudaMemoryTypeDevice;
      attributes->device = info.device;
      attributes->devicePointer = (void *)ptr;
    } else {
      attributes->type = cudaMemoryTypeUnregistered;
      attributes->device = cudaInvalidDeviceId;
    }
    result = cudaSuccess;
  }
  LEAVE();
}

SHIM_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
  ENTER(cudaIpcGetMemHandle);
  if (devPtr && vmem_owns(devPtr)) {
    /* Remap: the memory is VMM memory, which legacy IPC cannot export. Translate: small blocks
     * share one device allocation, so the other process would open the wrong base. */
    shim_warn("cudaIpcGetMemHandle(%p): cudaw virtual memory cannot be shared through CUDA IPC; "
              "run with CUDAW_VMEM=off to share device memory between processes", devPtr);
    result = shim_set_last_error(cudaErrorNotSupported);
  } else {
    result = REAL(cudaIpcGetMemHandle)(handle, devPtr);
  }
  LEAVE();
}
