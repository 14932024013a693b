/* The driver layer's internal contract: cudaw wraps every libcuda.so.1 export behind the same gate
 * as the runtime's, so that programs that reach the GPU through the driver API (a static CUDA
 * runtime, CuPy, JAX, NVIDIA's libraries, Triton) are held, virtualised and checkpointed too.
 * Programs reach the wrappers three ways: by symbol (linked against libcuda, cudaw preloaded),
 * through dlopen("libcuda.so.1") (driver/dlopen.c returns cudaw itself) and through
 * cuGetProcAddress / cudaGetDriverEntryPoint (proc_address.c maps each real entry point to its
 * wrapper).
 *
 * Driver translation units see cuda.h's internal view (__CUDA_API_VERSION_INTERNAL): every export
 * is declared under its own name (cuMemAlloc with 32-bit sizes beside cuMemAlloc_v2, the _ptds and
 * _ptsz variants), so that a wrapper's prototype is exactly the export's. Name versions explicitly
 * (cuMemAlloc_v2) in hand-written code. */
#ifndef CUDAW_SHIM_DRIVER_H
#define CUDAW_SHIM_DRIVER_H

#ifdef CUDA_VERSION
#error "shim_driver.h must be included before cuda.h (it needs cuda.h's internal view)"
#endif
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaProfiler.h>

#include "shim.h"
#include "shim_kparam.h"

/* cudaw's own export for every id (generated wrapper or hand-written override). */
extern const shim_real_fn shim_drv_wrappers[SHIM_DRV_COUNT];

/* cudaw's wrapper for a real driver entry point that cuGetProcAddress or cudaGetDriverEntryPoint
 * returned for `symbol`: the program then calls through the gate. A function cudaw does not wrap
 * (newer than the toolkit cudaw was built with) is returned unchanged and logged once by name. */
void *shim_drv_wrap(void *real, const char *symbol);


/* Enter a driver call through the gate (shim_gate_in / shim_gate_in_blocking). Returns the real
 * entry point; NULL when it is missing: return shim_drv_missing_*(id) then. */
static inline shim_real_fn shim_drv_enter_counted(enum shim_drv_id id)
{
  shim_gate_in();
  shim_real_fn real = shim_drv_real_table[id];
  return SHIM_LIKELY(real != NULL) ? real : shim_drv_resolve(id);
}

static inline shim_real_fn shim_drv_enter_blocking(enum shim_drv_id id)
{
  shim_gate_in_blocking();
  shim_real_fn real = shim_drv_real_table[id];
  return SHIM_LIKELY(real != NULL) ? real : shim_drv_resolve(id);
}

/* Leave the gate and report a missing entry point (logged once per function):
 * CUDA_ERROR_NOT_INITIALIZED without a driver, else CUDA_ERROR_NOT_SUPPORTED. */
CUresult shim_drv_missing_counted(enum shim_drv_id id);
CUresult shim_drv_missing_blocking(enum shim_drv_id id);

/* The real driver's `name` (an export name such as cuMemAlloc_v2), typed; NULL when missing. */
#define SHIM_DRV_REAL(name) ((__typeof__(&name))shim_drv_resolve(SHIM_DRV_##name))

/* ---- launch arguments (driver/launch.c) ------------------------------------------------------ */

/* shim_kparam_prepare for a launch (or a graph kernel node) of f, its error as a CUresult: a bad
 * pointer under CUDAW_CHECK or out of memory refuses the launch. Release the frame always. */
CUresult shim_drv_prepare(CUfunction f, void **params, void **extra,
                          struct shim_kparam_frame *frame);

/* A kernel launch on stream succeeded with translated arguments (p: the program's) while a stream
 * capture may be open: if stream is capturing, the node it became keeps p so that the captured
 * graph can be updated after a move (graph.c). Call only under translate. */
void shim_drv_captured_launch(CUstream stream, const CUDA_KERNEL_NODE_PARAMS *p);

/* A device address argument: virtual -> real under translate, unchanged otherwise. */
static inline CUdeviceptr shim_translate_address(CUdeviceptr address)
{
  return (CUdeviceptr)(uintptr_t)shim_translate_ptr((const void *)(uintptr_t)address);
}

/* The device (or unified) addresses of a copy structure (CUDA_MEMCPY2D, CUDA_MEMCPY3D,
 * CUDA_MEMCPY3D_PEER), translated in place. */
#define SHIM_DRV_TRANSLATE_SIDES(copy)                                                     \
  do {                                                                                     \
    if ((copy).srcMemoryType == CU_MEMORYTYPE_DEVICE ||                                    \
        (copy).srcMemoryType == CU_MEMORYTYPE_UNIFIED)                                     \
      (copy).srcDevice = shim_translate_address((copy).srcDevice);                         \
    if ((copy).dstMemoryType == CU_MEMORYTYPE_DEVICE ||                                    \
        (copy).dstMemoryType == CU_MEMORYTYPE_UNIFIED)                                     \
      (copy).dstDevice = shim_translate_address((copy).dstDevice);                         \
  } while (0)

/* Generic node parameters (cuGraphAddNode & co., graph.c) of a memcpy or memset node under
 * translate: *copy is *p with its device addresses translated and true is returned; false (and
 * nothing written) for any other node, or under remap (graph_copy.c). */
bool shim_drv_copy_node_in(const CUgraphNodeParams *p, CUgraphNodeParams *copy);
/* Such a node of owner (a graph, or an exec when exec) was set from p, the program's parameters:
 * keep them, so that after a move it is translated again and set in place. */
void shim_drv_copy_node_keep(const void *owner, bool exec, CUgraphNode node,
                             const CUgraphNodeParams *p);

#endif
