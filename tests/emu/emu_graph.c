/* emu_graph.c: CUDA graphs reduced to what graph tests need: graphs of kernel nodes (added with
 * cudaGraphAddKernelNode or cudaGraphAddNode, or recorded by a stream capture), memset nodes (byte
 * values) and memcpy nodes (one row of linear memory), set, instantiated (a snapshot), updated per
 * node and launched in insertion order, synchronously; a child graph node is a copy of the child's
 * nodes. Like the real runtime, a node copies its arguments when added or set; the sizes come from
 * cudaw_emu_set_kernel_param_sizes. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_internal.h"

struct param_sizes {
  char *name;
  unsigned count;
  size_t *sizes;
};

enum node_type { NODE_KERNEL, NODE_MEMSET, NODE_MEMCPY };

struct node {
  struct node *next;     /* in its graph or exec, insertion order */
  enum node_type type;
  struct cudaMemsetParams set;   /* NODE_MEMSET: byte values only */
  struct cudaMemcpy3DParms copy; /* NODE_MEMCPY: linear memory, one row */
  const struct node *origin; /* exec nodes: the graph node they were instantiated from */
  const void *func;
  dim3 grid, block;
  size_t shared_mem;
  unsigned count;
  void **argv;           /* into storage */
  unsigned char *storage;
};

struct graph {
  struct node *first, **tail;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct param_sizes *sizes_table;
static size_t sizes_count;

EMU_EXPORT int cudaw_emu_set_kernel_param_sizes(const char *mangled, unsigned count,
                                                const size_t *sizes) {
  if (!mangled || (count && !sizes)) return -EINVAL;
  struct param_sizes entry = {strdup(mangled), count, malloc((count + 1) * sizeof(size_t))};
  if (!entry.name || !entry.sizes) {
    free(entry.name);
    free(entry.sizes);
    return -ENOMEM;
  }
  if (count) memcpy(entry.sizes, sizes, count * sizeof(size_t));
  pthread_mutex_lock(&lock);
  struct param_sizes *grown = realloc(sizes_table, (sizes_count + 1) * sizeof *grown);
  if (grown) {
    sizes_table = grown;
    sizes_table[sizes_count++] = entry;
  }
  pthread_mutex_unlock(&lock);
  if (grown) return 0;
  free(entry.name);
  free(entry.sizes);
  return -ENOMEM;
}

int emu_kernel_param_info(const void *func, size_t index, size_t *offset, size_t *size) {
  const char *name;
  if (!func || emu_kernel_name(func, &name)) return -ENOENT;
  int rc = -ENOENT;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < sizes_count; i++) {
    if (strcmp(sizes_table[i].name, name)) continue;
    if (index >= sizes_table[i].count) break;
    size_t at = 0;
    for (size_t j = 0; j <= index; j++) {
      size_t s = sizes_table[i].sizes[j], align = s >= 8 ? 8 : s >= 4 ? 4 : s >= 2 ? 2 : 1;
      at = (at + align - 1) & ~(align - 1);
      if (j == index) *offset = at, *size = s;
      at += s;
    }
    rc = 0;
    break;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

/* Copies the launch into node (replacing its arguments). */
static cudaError_t node_set(struct node *node, const void *func, dim3 grid, dim3 block,
                            size_t shared_mem, void **args, void **extra) {
  const char *name;
  if (!func || emu_kernel_name(func, &name)) return cudaErrorInvalidDeviceFunction;
  if (extra || (!args && !extra)) {
    /* The extra form needs the packed layout; the emu only knows sizes. */
    fprintf(stderr, "cudaw-emu: graph kernel node for %s: only kernelParams is supported\n",
            name);
    return cudaErrorNotSupported;
  }
  const struct param_sizes *p = NULL;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < sizes_count && !p; i++)
    if (!strcmp(sizes_table[i].name, name)) p = &sizes_table[i];
  size_t total = 0;
  unsigned count = p ? p->count : 0;
  size_t offsets[256];
  for (unsigned i = 0; p && i < count && i < 256; i++) {
    offsets[i] = total;
    total += (p->sizes[i] + 15) & ~(size_t)15;
  }
  unsigned char *storage = p ? malloc(total + 1) : NULL;
  void **argv = p ? calloc(count + 1, sizeof *argv) : NULL;
  for (unsigned i = 0; storage && argv && i < count && i < 256; i++) {
    argv[i] = storage + offsets[i];
    memcpy(argv[i], args[i], p->sizes[i]);
  }
  pthread_mutex_unlock(&lock);
  if (!p) {
    fprintf(stderr, "cudaw-emu: graph kernel node for %s: declare its parameter sizes with "
            "cudaw_emu_set_kernel_param_sizes\n", name);
    return cudaErrorNotSupported;
  }
  if (!storage || !argv || count > 256) {
    free(storage);
    free(argv);
    return cudaErrorMemoryAllocation;
  }
  free(node->storage);
  free(node->argv);
  node->func = func;
  node->grid = grid;
  node->block = block;
  node->shared_mem = shared_mem;
  node->count = count;
  node->argv = argv;
  node->storage = storage;
  return cudaSuccess;
}

static cudaError_t node_copy(struct node *to, const struct node *from) {
  memset(to, 0, sizeof *to);
  to->origin = from;
  to->type = from->type;
  to->set = from->set;
  to->copy = from->copy;
  if (from->type != NODE_KERNEL) return cudaSuccess;
  to->grid = to->block = (dim3){1, 1, 1};
  return node_set(to, from->func, from->grid, from->block, from->shared_mem, from->argv, NULL);
}

static cudaError_t check_memset(const struct cudaMemsetParams *p) {
  if (!p || !p->dst) return cudaErrorInvalidValue;
  return p->elementSize == 1 ? cudaSuccess : cudaErrorNotSupported;
}

static cudaError_t check_memcpy(const struct cudaMemcpy3DParms *p) {
  if (!p || !p->dstPtr.ptr || !p->srcPtr.ptr) return cudaErrorInvalidValue;
  if (p->srcArray || p->dstArray || p->extent.height > 1 || p->extent.depth > 1)
    return cudaErrorNotSupported;
  return cudaSuccess;
}

/* A memset or memcpy node appended to graph. */
static cudaError_t add_other(cudaGraphNode_t *out, cudaGraph_t graph, enum node_type type,
                             const struct cudaMemsetParams *set,
                             const struct cudaMemcpy3DParms *copy) {
  if (!out || !graph) return emu_result(cudaErrorInvalidValue);
  cudaError_t err = type == NODE_MEMSET ? check_memset(set) : check_memcpy(copy);
  if (err) return emu_result(err);
  struct node *n = calloc(1, sizeof *n);
  if (!n) return emu_result(cudaErrorMemoryAllocation);
  n->type = type;
  if (set) n->set = *set;
  if (copy) n->copy = *copy;
  struct graph *g = (struct graph *)graph;
  *g->tail = n;
  g->tail = &n->next;
  *out = (cudaGraphNode_t)n;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                              const cudaGraphNode_t *deps, size_t dep_count,
                                              const struct cudaMemsetParams *p) {
  (void)deps, (void)dep_count;
  return add_other(node, graph, NODE_MEMSET, p, NULL);
}

EMU_EXPORT cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                              const cudaGraphNode_t *deps, size_t dep_count,
                                              const struct cudaMemcpy3DParms *p) {
  (void)deps, (void)dep_count;
  return add_other(node, graph, NODE_MEMCPY, NULL, p);
}

static void graph_free(struct graph *g) {
  for (struct node *n = g->first, *next; n; n = next) {
    next = n->next;
    free(n->storage);
    free(n->argv);
    free(n);
  }
  free(g);
}

EMU_EXPORT cudaError_t cudaGraphCreate(cudaGraph_t *graph, unsigned flags) {
  emu_init();
  if (!graph || flags) return emu_result(cudaErrorInvalidValue);
  struct graph *g = calloc(1, sizeof *g);
  if (!g) return emu_result(cudaErrorMemoryAllocation);
  g->tail = &g->first;
  *graph = (cudaGraph_t)g;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (!graph) return emu_result(cudaErrorInvalidValue);
  graph_free((struct graph *)graph);
  return cudaSuccess;
}

static cudaError_t add_kernel(cudaGraphNode_t *out, cudaGraph_t graph, const void *func,
                              dim3 grid, dim3 block, size_t shared_mem, void **args,
                              void **extra) {
  if (!out || !graph) return emu_result(cudaErrorInvalidValue);
  struct node *n = calloc(1, sizeof *n);
  if (!n) return emu_result(cudaErrorMemoryAllocation);
  cudaError_t err = node_set(n, func, grid, block, shared_mem, args, extra);
  if (err) {
    free(n);
    return emu_result(err);
  }
  struct graph *g = (struct graph *)graph;
  *g->tail = n;
  g->tail = &n->next;
  *out = (cudaGraphNode_t)n;
  return cudaSuccess;
}

cudaError_t emu_graph_add_kernel(cudaGraphNode_t *node, cudaGraph_t graph, const void *func,
                                 dim3 grid, dim3 block, size_t shared_mem, void **args) {
  return add_kernel(node, graph, func, grid, block, shared_mem, args, NULL);
}

/* Every node in insertion order. */
EMU_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes,
                                         size_t *count) {
  if (!graph || !count) return emu_result(cudaErrorInvalidValue);
  size_t n = 0;
  for (struct node *at = ((struct graph *)graph)->first; at; at = at->next, n++)
    if (nodes && n < *count) nodes[n] = (cudaGraphNode_t)at;
  *count = n;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *type) {
  if (!node || !type) return emu_result(cudaErrorInvalidValue);
  enum node_type t = ((struct node *)node)->type;
  *type = t == NODE_MEMSET   ? cudaGraphNodeTypeMemset
          : t == NODE_MEMCPY ? cudaGraphNodeTypeMemcpy
                             : cudaGraphNodeTypeKernel;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                              const cudaGraphNode_t *deps, size_t dep_count,
                                              const struct cudaKernelNodeParams *p) {
  (void)deps, (void)dep_count;
  if (!p) return emu_result(cudaErrorInvalidValue);
  return add_kernel(node, graph, p->func, p->gridDim, p->blockDim, p->sharedMemBytes,
                    p->kernelParams, p->extra);
}

EMU_EXPORT cudaError_t cudaGraphAddNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                        const cudaGraphNode_t *deps,
                                        const cudaGraphEdgeData *edges, size_t dep_count,
                                        struct cudaGraphNodeParams *p) {
  (void)deps, (void)edges, (void)dep_count;
  if (!p) return emu_result(cudaErrorInvalidValue);
  if (p->type != cudaGraphNodeTypeKernel) return emu_result(cudaErrorNotSupported);
  const struct cudaKernelNodeParamsV2 *k = &p->kernel;
  return add_kernel(node, graph, k->func, k->gridDim, k->blockDim, k->sharedMemBytes,
                    k->kernelParams, k->extra);
}

/* The child's nodes are copied into graph, in order (the node returned is the first copy). */
EMU_EXPORT cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *node, cudaGraph_t graph,
                                                  const cudaGraphNode_t *deps, size_t dep_count,
                                                  cudaGraph_t child) {
  (void)deps, (void)dep_count;
  if (!node || !graph || !child) return emu_result(cudaErrorInvalidValue);
  struct graph *g = (struct graph *)graph;
  struct node *first = NULL;
  for (const struct node *n = ((struct graph *)child)->first; n; n = n->next) {
    struct node *c = calloc(1, sizeof *c);
    cudaError_t err = c ? node_copy(c, n) : cudaErrorMemoryAllocation;
    if (err) {
      free(c);
      return emu_result(err);
    }
    c->origin = NULL;
    *g->tail = c;
    g->tail = &c->next;
    if (!first) first = c;
  }
  *node = (cudaGraphNode_t)first;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node,
                                                    struct cudaKernelNodeParams *p) {
  const struct node *n = (const struct node *)node;
  if (!n || !p || n->type != NODE_KERNEL) return emu_result(cudaErrorInvalidValue);
  memset(p, 0, sizeof *p);
  p->func = (void *)n->func;
  p->gridDim = n->grid;
  p->blockDim = n->block;
  p->sharedMemBytes = (unsigned)n->shared_mem;
  p->kernelParams = n->argv;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node,
                                                    const struct cudaKernelNodeParams *p) {
  if (!node || !p) return emu_result(cudaErrorInvalidValue);
  return emu_result(node_set((struct node *)node, p->func, p->gridDim, p->blockDim,
                             p->sharedMemBytes, p->kernelParams, p->extra));
}

EMU_EXPORT cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node,
                                              struct cudaGraphNodeParams *p) {
  if (!node || !p) return emu_result(cudaErrorInvalidValue);
  if (p->type != cudaGraphNodeTypeKernel) return emu_result(cudaErrorNotSupported);
  const struct cudaKernelNodeParamsV2 *k = &p->kernel;
  return emu_result(node_set((struct node *)node, k->func, k->gridDim, k->blockDim,
                             k->sharedMemBytes, k->kernelParams, k->extra));
}

EMU_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                            unsigned long long flags) {
  (void)flags;
  if (!exec || !graph) return emu_result(cudaErrorInvalidValue);
  struct graph *copy = calloc(1, sizeof *copy);
  if (!copy) return emu_result(cudaErrorMemoryAllocation);
  copy->tail = &copy->first;
  for (const struct node *n = ((struct graph *)graph)->first; n; n = n->next) {
    struct node *c = calloc(1, sizeof *c);
    cudaError_t err = c ? node_copy(c, n) : cudaErrorMemoryAllocation;
    if (err) {
      free(c);
      graph_free(copy);
      return emu_result(err);
    }
    *copy->tail = c;
    copy->tail = &c->next;
  }
  *exec = (cudaGraphExec_t)copy;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph,
                                                     unsigned long long flags) {
  return cudaGraphInstantiate(exec, graph, flags);
}

EMU_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (!exec) return emu_result(cudaErrorInvalidValue);
  graph_free((struct graph *)exec);
  return cudaSuccess;
}

static struct node *exec_node(cudaGraphExec_t exec, cudaGraphNode_t node) {
  for (struct node *n = ((struct graph *)exec)->first; n; n = n->next)
    if (n->origin == (const struct node *)node) return n;
  return NULL;
}

EMU_EXPORT cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                        const struct cudaKernelNodeParams *p) {
  struct node *n = exec && p ? exec_node(exec, node) : NULL;
  if (!n) return emu_result(cudaErrorInvalidValue);
  return emu_result(node_set(n, p->func, p->gridDim, p->blockDim, p->sharedMemBytes,
                             p->kernelParams, p->extra));
}

EMU_EXPORT cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                  struct cudaGraphNodeParams *p) {
  struct node *n = exec && p ? exec_node(exec, node) : NULL;
  if (!n) return emu_result(cudaErrorInvalidValue);
  if (p->type != cudaGraphNodeTypeKernel) return emu_result(cudaErrorNotSupported);
  const struct cudaKernelNodeParamsV2 *k = &p->kernel;
  return emu_result(node_set(n, k->func, k->gridDim, k->blockDim, k->sharedMemBytes,
                             k->kernelParams, k->extra));
}

EMU_EXPORT cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                        const struct cudaMemsetParams *p) {
  struct node *n = exec ? exec_node(exec, node) : NULL;
  if (!n || n->type != NODE_MEMSET) return emu_result(cudaErrorInvalidValue);
  cudaError_t err = check_memset(p);
  if (!err) n->set = *p;
  return emu_result(err);
}

EMU_EXPORT cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node,
                                                        const struct cudaMemcpy3DParms *p) {
  struct node *n = exec ? exec_node(exec, node) : NULL;
  if (!n || n->type != NODE_MEMCPY) return emu_result(cudaErrorInvalidValue);
  cudaError_t err = check_memcpy(p);
  if (!err) n->copy = *p;
  return emu_result(err);
}

EMU_EXPORT cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node,
                                                    const struct cudaMemsetParams *p) {
  struct node *n = (struct node *)node;
  if (!n || n->type != NODE_MEMSET) return emu_result(cudaErrorInvalidValue);
  cudaError_t err = check_memset(p);
  if (!err) n->set = *p;
  return emu_result(err);
}

EMU_EXPORT cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node,
                                                    const struct cudaMemcpy3DParms *p) {
  struct node *n = (struct node *)node;
  if (!n || n->type != NODE_MEMCPY) return emu_result(cudaErrorInvalidValue);
  cudaError_t err = check_memcpy(p);
  if (!err) n->copy = *p;
  return emu_result(err);
}

EMU_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  return emu_graph_launch(exec, stream);
}

cudaError_t emu_graph_launch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return emu_result(cudaErrorInvalidValue);
  for (struct node *n = ((struct graph *)exec)->first; n; n = n->next) {
    cudaError_t err;
    if (n->type == NODE_MEMSET)
      err = emu_memset2d(n->set.dst, n->set.pitch ? n->set.pitch : n->set.width, (int)n->set.value,
                         n->set.width, n->set.height ? n->set.height : 1, stream);
    else if (n->type == NODE_MEMCPY)
      err = cudaMemcpyAsync(n->copy.dstPtr.ptr, n->copy.srcPtr.ptr, n->copy.extent.width,
                            n->copy.kind, stream);
    else
      err = emu_launch(n->func, n->grid, n->block, n->argv, n->shared_mem, stream);
    if (err) return err;
  }
  return cudaSuccess;
}
