/* The driver layer's share of what the stream-ordered allocator knows about streams
 * (runtime/stream.c): captures begun through the driver and destroyed streams are counted, so that
 * an allocation asks a stream's capture status only while a capture may be open. The end of a
 * capture is counted in driver/graph.c. Listed in gen/api.d/driver.conf. */
#include "shim_driver.h"

#include "shim_vmem.h"

#define BEGIN_CAPTURE(name, params, args)                                                      \
  SHIM_EXPORT CUresult name params                                                             \
  {                                                                                            \
    shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_##name);                               \
    if (!real) return shim_drv_missing_counted(SHIM_DRV_##name);                               \
    shim_capture_begin();                                                                      \
    CUresult result = ((__typeof__(&name))real) args;                                          \
    if (result != CUDA_SUCCESS) shim_capture_begin_failed();                                   \
    shim_gate_leave();                                                                         \
    return result;                                                                             \
  }

BEGIN_CAPTURE(cuStreamBeginCapture, (CUstream hStream), (hStream))
BEGIN_CAPTURE(cuStreamBeginCapture_ptsz, (CUstream hStream), (hStream))
BEGIN_CAPTURE(cuStreamBeginCapture_v2, (CUstream hStream, CUstreamCaptureMode mode),
              (hStream, mode))
BEGIN_CAPTURE(cuStreamBeginCapture_v2_ptsz, (CUstream hStream, CUstreamCaptureMode mode),
              (hStream, mode))
BEGIN_CAPTURE(cuStreamBeginCaptureToGraph,
              (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
               const CUgraphEdgeData *dependencyData, size_t numDependencies,
               CUstreamCaptureMode mode),
              (hStream, hGraph, dependencies, dependencyData, numDependencies, mode))
BEGIN_CAPTURE(cuStreamBeginCaptureToGraph_ptsz,
              (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
               const CUgraphEdgeData *dependencyData, size_t numDependencies,
               CUstreamCaptureMode mode),
              (hStream, hGraph, dependencies, dependencyData, numDependencies, mode))

#define DESTROY(name)                                                                          \
  SHIM_EXPORT CUresult name(CUstream hStream)                                                  \
  {                                                                                            \
    shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_##name);                               \
    if (!real) return shim_drv_missing_counted(SHIM_DRV_##name);                               \
    atomic_fetch_add_explicit(&shim_streams_destroyed, 1, memory_order_seq_cst);               \
    CUresult result = ((__typeof__(&name))real)(hStream);                                      \
    shim_gate_leave();                                                                         \
    return result;                                                                             \
  }

DESTROY(cuStreamDestroy)
DESTROY(cuStreamDestroy_v2)
