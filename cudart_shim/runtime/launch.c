/* Hand-written launch overrides: every way a kernel is launched with an args[] array passes its
 * arguments through shim_kparam_prepare when kparam is active (translate policy or CUDAW_CHECK),
 * and is metered when the program has a GPU share (shim_gpu_before/after); otherwise the call
 * goes straight on (three loads, one branch). Launches during stream capture take the same path.
 * Listed in gen/api.d/kparam.conf. */
#include <errno.h>

#include "shim_generated.h"
#include "shim_gpu_share.h"
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
#define LAUNCH6(name, func_type, how, per_thread)                                                \
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

LAUNCH6(__cudaLaunchKernel, cudaKernel_t, SHIM_KPARAM_HANDLE, 0)
LAUNCH6(__cudaLaunchKernel_ptsz, cudaKernel_t, SHIM_KPARAM_HANDLE, 1)
LAUNCH6(cudaLaunchKernel, const void *, SHIM_KPARAM_HOST_FUN_OR_HANDLE, 0)
LAUNCH6(cudaLaunchKernel_ptsz, const void *, SHIM_KPARAM_HOST_FUN_OR_HANDLE, 1)
LAUNCH6(cudaLaunchCooperativeKernel, const void *, SHIM_KPARAM_HOST_FUN_OR_HANDLE, 0)
LAUNCH6(cudaLaunchCooperativeKernel_ptsz, const void *, SHIM_KPARAM_HOST_FUN_OR_HANDLE, 1)

#define LAUNCH_EX(name, per_thread)                                                             \
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

LAUNCH_EX(cudaLaunchKernelExC, 0)
LAUNCH_EX(cudaLaunchKernelExC_ptsz, 1)
