/* Hand-written launch overrides: every way a kernel is launched with an args[] array passes its
 * arguments through shim_kparam_prepare when kparam is active (translate policy or CUDAW_CHECK),
 * and is metered when the program has a GPU share (shim_gpu_before/after); otherwise the call
 * goes straight on (three loads, one branch). Launches during stream capture take the same path,
 * and under translate the node each became keeps the program's arguments (graph.c), so that the
 * captured graph can be updated after a move. Listed in gen/api.d/kparam.conf. */
#include <errno.h>

#include "shim_generated.h"
#include "shim_gpu_share.h"
#include "shim_graph.h"
#include "shim_kparam.h"
#include "shim_vmem.h"

/* Declared only in nvcc's generated host code. */
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                               size_t sharedMem, cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
                                    void **args, size_t sharedMem, cudaStream_t stream);
cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                  size_t sharedMem, cudaStream_t stream);
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
                                             void **args, size_t sharedMem, cudaStream_t stream);
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
                                     void **args);

/* A launch cudaw refuses itself (CUDAW_CHECK found a bad pointer, or no memory for the copy). */
static cudaError_t refused(int rc)
{
  return shim_set_last_error(rc == -EFAULT ? cudaErrorInvalidValue : cudaErrorMemoryAllocation);
}

/* The six-argument launches: (func, grid, block, args, shared memory, stream). The translated
 * path is a function of its own, so that the fast path's frame does not hold the argument copy. */
/* After a translated launch: the capture's node, if stream (query_stream) is capturing. */
#define CAPTURED(query_stream, func, grid, block, shared_mem, args)                              \
  if (result == cudaSuccess && shim_translate_end && shim_capture_possible())                  \
    shim_graph_captured_launch(query_stream, (const void *)(func), grid, block, shared_mem, args)

#define LAUNCH6(name, func_type, how, per_thread, query_stream)                                  \
  static __attribute__((noinline)) cudaError_t name##_prepared(                                \
      __typeof__(&name) forward, func_type func, dim3 grid, dim3 block, void **args,            \
      size_t shared_mem, cudaStream_t stream)                                                  \
  {                                                                                            \
    struct shim_kparam_frame frame;                                                            \
    frame.args = args;                                                                         \
    frame.heap = NULL;                                                                         \
    struct shim_gpu_ticket ticket;                                                             \
    shim_gpu_before(stream, per_thread, &ticket);                                              \
    int rc = shim_kparam_active()                                                              \
                 ? shim_kparam_prepare((const void *)func, how, args, NULL, &frame)            \
                 : 0;                                                                          \
    cudaError_t result =                                                                       \
        rc ? refused(rc) : forward(func, grid, block, frame.args, shared_mem, stream);         \
    shim_gpu_after(&ticket);                                                                   \
    shim_kparam_frame_release(&frame);                                                         \
    CAPTURED(query_stream, func, grid, block, shared_mem, args);                               \
    return result;                                                                             \
  }                                                                                            \
  SHIM_EXPORT cudaError_t name(func_type func, dim3 grid, dim3 block, void **args,             \
                               size_t shared_mem, cudaStream_t stream)                        \
  {                                                                                            \
    shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_##name);                                       \
    if (!real) return shim_missing(SHIM_FN_##name);                                            \
    __typeof__(&name) forward = (__typeof__(&name))real;                                       \
    cudaError_t result =                                                                       \
        SHIM_LIKELY(!shim_launch_slow())                                                       \
            ? forward(func, grid, block, args, shared_mem, stream)                             \
            : name##_prepared(forward, func, grid, block, args, shared_mem, stream);           \
    shim_gate_leave();                                                                         \
    return result;                                                                             \
  }

/* In a _ptsz call, stream 0 is the calling thread's default stream. */
#define PER_THREAD(stream) ((stream) ? (stream) : cudaStreamPerThread)

LAUNCH6(__cudaLaunchKernel, cudaKernel_t, SHIM_KPARAM_HANDLE, 0, stream)
LAUNCH6(__cudaLaunchKernel_ptsz, cudaKernel_t, SHIM_KPARAM_HANDLE, 1, PER_THREAD(stream))
LAUNCH6(cudaLaunchKernel, const void *, SHIM_KPARAM_HOST_FUN_OR_HANDLE, 0, stream)
LAUNCH6(cudaLaunchKernel_ptsz, const void *, SHIM_KPARAM_HOST_FUN_OR_HANDLE, 1, PER_THREAD(stream))
LAUNCH6(cudaLaunchCooperativeKernel, const void *, SHIM_KPARAM_HOST_FUN_OR_HANDLE, 0, stream)
LAUNCH6(cudaLaunchCooperativeKernel_ptsz, const void *, SHIM_KPARAM_HOST_FUN_OR_HANDLE, 1,
        PER_THREAD(stream))

#define LAUNCH_EX(name, per_thread, query_stream)                                               \
  static __attribute__((noinline)) cudaError_t name##_prepared(                                \
      __typeof__(&name) forward, const cudaLaunchConfig_t *config, const void *func,           \
      void **args)                                                                             \
  {                                                                                            \
    struct shim_kparam_frame frame;                                                            \
    frame.args = args;                                                                         \
    frame.heap = NULL;                                                                         \
    struct shim_gpu_ticket ticket;                                                             \
    shim_gpu_before(config ? config->stream : NULL, per_thread, &ticket);                      \
    int rc = shim_kparam_active()                                                              \
                 ? shim_kparam_prepare(func, SHIM_KPARAM_HOST_FUN_OR_HANDLE, args, NULL, &frame) \
                 : 0;                                                                          \
    cudaError_t result = rc ? refused(rc) : forward(config, func, frame.args);                 \
    shim_gpu_after(&ticket);                                                                   \
    shim_kparam_frame_release(&frame);                                                         \
    if (config)                                                                                \
      CAPTURED(query_stream, func, config->gridDim, config->blockDim, config->dynamicSmemBytes, \
               args);                                                                          \
    return result;                                                                             \
  }                                                                                            \
  SHIM_EXPORT cudaError_t name(const cudaLaunchConfig_t *config, const void *func, void **args)\
  {                                                                                            \
    shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_##name);                                       \
    if (!real) return shim_missing(SHIM_FN_##name);                                            \
    __typeof__(&name) forward = (__typeof__(&name))real;                                       \
    cudaError_t result = SHIM_LIKELY(!shim_launch_slow())                                      \
                             ? forward(config, func, args)                                     \
                             : name##_prepared(forward, config, func, args);                   \
    shim_gate_leave();                                                                         \
    return result;                                                                             \
  }

LAUNCH_EX(cudaLaunchKernelExC, 0, config->stream)
LAUNCH_EX(cudaLaunchKernelExC_ptsz, 1, PER_THREAD(config->stream))
