/* The library's use of kparam: kernel registration is recorded (pointers only; parsing waits for
 * the first launch that needs a plan), and every launch path hands its arguments through
 * shim_kparam_prepare, which translates virtual device pointers under the translate policy and
 * validates them under CUDAW_CHECK=1. Inside: 0 or -errno. */
#ifndef CUDAW_SHIM_KPARAM_H
#define CUDAW_SHIM_KPARAM_H

#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shim.h"

/* Nonzero under CUDAW_CHECK=1 (read once when the library loads). */
extern int shim_kparam_check;

/* Whether launches must look at their arguments at all: translate policy active, or checking.
 * Under remap without checks translation is the identity and launches skip kparam entirely
 * (two loads). */
static inline bool shim_kparam_active(void)
{
  return SHIM_UNLIKELY((shim_translate_end | (uintptr_t)shim_kparam_check) != 0);
}

#define SHIM_KPARAM_STACK_ARGS 64
#define SHIM_KPARAM_STACK_SCRATCH 2048

/* Per-launch storage for translated arguments: on the caller's stack, heap for big plans. The
 * caller's own args[] and the storage it points to are never written. */
struct shim_kparam_frame {
  void **args;   /* what to pass on: the caller's args, or a translated copy */
  void **extra;  /* likewise for the `extra` form (graph kernel nodes) */
  void *heap;    /* freed by shim_kparam_frame_release */
  void *extra_words[5];
  size_t extra_size;
  void *argv[SHIM_KPARAM_STACK_ARGS];
  alignas(16) unsigned char scratch[SHIM_KPARAM_STACK_SCRATCH];
};

/* How a launch names its kernel. */
enum shim_kparam_func {
  SHIM_KPARAM_HANDLE,            /* a cudaKernel_t (__cudaLaunchKernel) */
  SHIM_KPARAM_HOST_FUN_OR_HANDLE /* a host stub address, or a cudaKernel_t cast to void * */
};

/* Prepare the arguments of a launch of func: frame->args (and frame->extra for the extra form;
 * pass extra NULL otherwise) receive what to pass to the real runtime. Returns 0, or -EFAULT
 * when CUDAW_CHECK found a freed or unallocated pointer (reported; refuse the launch), -ENOMEM.
 * Kernels with unknown layouts are passed through untranslated (reported once per kernel).
 * Call inside the gate, only when shim_kparam_active(). Release the frame afterwards. */
int shim_kparam_prepare(const void *func, enum shim_kparam_func how, void **args, void **extra,
                        struct shim_kparam_frame *frame);
void shim_kparam_frame_release(struct shim_kparam_frame *frame);

/* Read CUDAW_CHECK, route kparam's log (idempotent, cheap after the first call). */
void shim_kparam_init(void);

/* A library or module (cudaLibrary_t, CUlibrary, CUmodule) and its image, which cudaw owns from
 * now on (malloc'd, or mmap'd when mapped): kernels later registered against handle get their
 * layouts from it. On failure the image is freed and a warning says the kernels stay opaque.
 * Remove forgets the handle and frees its image. (runtime/register.c) */
void shim_kparam_library_add(const void *handle, void *image, size_t size, bool mapped);
void shim_kparam_library_remove(const void *handle);
/* The same with a copy of the image at code (fatbin, wrapper, cubin or PTX; size from its
 * headers), or with the file at path mapped read-only. */
void shim_kparam_library_copy(const void *handle, const void *code);
void shim_kparam_library_file(const void *handle, const char *path);

/* ---- graphs and relocation (kparam_graphs.c) ------------------------------------------------ */

/* Graphs and executable graphs copy translated (real) addresses into their nodes. So that a
 * checkpoint that moves device memory (translate policy) can update them instead of refusing
 * them, cudaw keeps, per node it translated, what the program passed (virtual addresses) in a
 * blob, with the function that translates the blob again and sets the node (kernel nodes:
 * runtime/graph.c and driver/graph.c; memcpy and memset nodes: runtime/pointer.c). Content cudaw
 * cannot see into (captured work it did not record, child graphs, conditional bodies) makes the
 * graph "opaque": such graphs and their execs are refused after a move, with the reason. */

/* A reference-counted, immutable copy of one node's parameters as the program gave them. */
struct shim_kparam_blob {
  _Atomic unsigned refs;
  size_t size;          /* bytes of data */
  void **args;          /* kernel nodes: the argument array (into data), else NULL */
  alignas(16) unsigned char data[];
};

/* A blob of size zeroed bytes (refs 1), or NULL when out of memory. */
struct shim_kparam_blob *shim_kparam_blob_new(size_t size);
void shim_kparam_blob_put(struct shim_kparam_blob *blob); /* drops one reference */

/* A blob with header bytes (zeroed, for the caller's node fields) followed by a deep copy of a
 * kernel's arguments args (blob->args). *out NULL and 0 when nothing of the kernel is translated
 * (no layout known, or no pointer-sized word): there is nothing to keep. -ENOMEM. */
int shim_kparam_args_keep(const void *func, enum shim_kparam_func how, void **args, size_t header,
                          struct shim_kparam_blob **out);

/* Translate the blob again and set node of owner (a graph, or an exec when exec is true) through
 * the real API. 0 or -errno. Called after a move, outside any API call, with the program held. */
typedef int (*shim_kparam_node_update_fn)(const void *owner, bool exec, const void *node,
                                          const struct shim_kparam_blob *blob);

/* node of owner (graph, or exec when exec) now holds what blob translates to: the record replaces
 * an earlier one of the same node and takes blob's reference (NULL blob: the node holds nothing
 * translated any more, the record goes). Marks owner as holding translated content. */
void shim_kparam_node_keep(const void *owner, bool exec, const void *node,
                           shim_kparam_node_update_fn update, struct shim_kparam_blob *blob);

/* The same for a node whose parameters are a plain structure (memcpy and memset nodes of either
 * API): a blob holding a copy of fields' size bytes; a node of a graph (not an exec) also marks
 * the graph and the node's membership. Nothing under remap. */
void shim_kparam_node_keep_fields(const void *owner, bool exec, const void *node,
                                  shim_kparam_node_update_fn update, const void *fields,
                                  size_t size);

/* A kernel launch cudaw saw become a node of graph, which a stream capture is building (whether or
 * not a record was kept for it), and how many so far: at the end of the capture, a graph with more
 * kernel nodes than that holds launches cudaw did not see. */
void shim_kparam_capture_seen(const void *graph);
size_t shim_kparam_capture_count(const void *graph);

/* owner (graph or exec) holds translated content cudaw cannot update after a move; reason (a
 * string literal) ends the refusal's message. The first reason stays. */
void shim_kparam_graph_opaque(const void *owner, const char *reason);

/* After a checkpoint/resume re-created device memory: under translate, real addresses may have
 * changed. Every graph and exec holding translated content is updated through its node records;
 * those that cannot be (opaque, or a node update failed) are refused from now on
 * (cudaErrorNotPermitted, with a message naming the reason). Called by the checkpoint glue (weak
 * reference) outside any API call, while the program is held. Returns 0 or -errno. */
int shim_kparam_relocated(void);

/* The relocation epoch (starts at 0; shim_kparam_relocated increments it under translate). */
unsigned shim_kparam_epoch(void);

/* graph now holds translated content (kept per node with shim_kparam_node_keep, or opaque). No-op
 * unless the translate policy is active. */
void shim_kparam_graph_mark(const void *graph);
/* node (added by cudaw's override) belongs to graph: cudaGraphKernelNodeSetParams finds it. */
void shim_kparam_node_mark(const void *node, const void *graph);
const void *shim_kparam_node_graph(const void *node); /* NULL if unknown */
/* to now holds whatever from holds, without cudaw knowing its nodes (clone, child graph node):
 * to becomes opaque with reason if from holds translated content. */
void shim_kparam_graph_inherit(const void *to, const void *from, const char *reason);
/* exec was instantiated from graph (or updated from it): it gets the graph's node records and
 * state, replacing its own. */
void shim_kparam_exec_mark(const void *exec, const void *graph);
/* exec was updated from graph (cudaGraphExecUpdate): as exec_mark, but when graph is not the one
 * exec was instantiated from, its node handles are not the exec's: exec becomes opaque. */
void shim_kparam_exec_updated(const void *exec, const void *graph);
/* The graph or graph exec holds content translated before the last relocation that could not be
 * updated: logs why (once per object) and returns true. */
bool shim_kparam_graph_stale(const void *graph);
bool shim_kparam_exec_stale(const void *exec);
/* A node is being destroyed (cudaGraphDestroyNode): its records go; an exec instantiated with it
 * still runs the node, but cudaw can no longer name it to update it, so the exec becomes opaque. */
void shim_kparam_node_destroyed(const void *node);
/* Forget a destroyed graph or exec (handles are reused), with its node records. */
void shim_kparam_graph_forget(const void *graph_or_exec);

/* A kernel handle without a plan: register with kparam the layout the driver reports for it. 0
 * when a plan was registered. The driver layer offers one at start (shim_kparam_prepare asks it
 * under translate); learn must be safe from any thread. */
typedef int (*shim_kparam_layout_source_fn)(const void *function);
void shim_kparam_use_layout_source(shim_kparam_layout_source_fn learn);

#endif
