/* The runtime's calls that begin a stream capture or destroy a stream, counted for the
 * stream-ordered allocator (glue/capture.c) before the real call. Listed in gen/api.d/vmem.conf. */
#include "shim_generated.h"
#include "shim_vmem.h"

cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                               const cudaGraphNode_t *dependencies,
                                               const cudaGraphEdgeData *dependencyData,
                                               size_t numDependencies,
                                               enum cudaStreamCaptureMode mode);

/* ---- exported ---- */

#define BEGIN_CAPTURE(name, params, args)                                                      \
  SHIM_EXPORT cudaError_t name params                                                          \
  {                                                                                            \
    shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_##name);                                       \
    if (!real) return shim_missing(SHIM_FN_##name);                                            \
    shim_capture_begin();                                                                      \
    cudaError_t result = ((__typeof__(&name))real) args;                                       \
    if (result != cudaSuccess) shim_capture_begin_failed();                                    \
    shim_gate_leave();                                                                         \
    return result;                                                                             \
  }

BEGIN_CAPTURE(cudaStreamBeginCapture, (cudaStream_t stream, enum cudaStreamCaptureMode mode),
              (stream, mode))
BEGIN_CAPTURE(cudaStreamBeginCapture_ptsz,
              (cudaStream_t stream, enum cudaStreamCaptureMode mode), (stream, mode))
BEGIN_CAPTURE(cudaStreamBeginCaptureToGraph,
              (cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t *dependencies,
               const cudaGraphEdgeData *dependencyData, size_t numDependencies,
               enum cudaStreamCaptureMode mode),
              (stream, graph, dependencies, dependencyData, numDependencies, mode))
BEGIN_CAPTURE(cudaStreamBeginCaptureToGraph_ptsz,
              (cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t *dependencies,
               const cudaGraphEdgeData *dependencyData, size_t numDependencies,
               enum cudaStreamCaptureMode mode),
              (stream, graph, dependencies, dependencyData, numDependencies, mode))

SHIM_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaStreamDestroy);
  if (!real) return shim_missing(SHIM_FN_cudaStreamDestroy);
  atomic_fetch_add_explicit(&shim_streams_destroyed, 1, memory_order_seq_cst);
  cudaError_t result = ((__typeof__(&cudaStreamDestroy))real)(stream);
  shim_gate_leave();
  return result;
}
