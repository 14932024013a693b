/* cudaw_emu.h: the test-facing contract of the emulated CUDA device (libcudaw-emu.so).
 * The emu exports the CUDA runtime ABI backed by host memory; kernels run on the host through
 * implementations that tests supply per mangled kernel name. */
#ifndef CUDAW_EMU_H
#define CUDAW_EMU_H

#include <stddef.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#define CUDAW_EMU_EXTERN_C extern "C"
#else
#define CUDAW_EMU_EXTERN_C
#endif

/* What a host kernel implementation learns about its launch. */
struct cudaw_emu_launch {
  dim3 grid, block;
  size_t shared_mem;
  cudaStream_t stream;
  const char *name; /* mangled device name, e.g. "_Z4vaddPKfS0_Pfi" */
  int device;       /* the device it runs on (the launching thread's current one) */
};

/* A host implementation of a kernel. args is exactly the runtime's void **args: args[i] points
 * at the value of the i-th kernel parameter. */
typedef void (*cudaw_emu_kernel_fn)(const struct cudaw_emu_launch *launch, void **args);

/* Prefix of the exported symbol the emu looks up with dlsym(RTLD_DEFAULT) for a kernel. */
#define CUDAW_EMU_KERNEL_PREFIX "cudaw_emu_kernel_"

/* Defines the host implementation of the kernel with this mangled name. The executable must
 * export it (-rdynamic, CMake ENABLE_EXPORTS), or pass it to cudaw_emu_register_kernel. */
#define CUDAW_EMU_KERNEL(mangled)                                                             \
  CUDAW_EMU_EXTERN_C __attribute__((visibility("default"), used)) void                        \
      cudaw_emu_kernel_##mangled(const struct cudaw_emu_launch *launch, void **args)

/* The value of kernel argument i, of the given type. */
#define CUDAW_EMU_ARG(args, i, type) (*(type *)((args)[i]))

/* Loop over every thread of a launch in order, with blockIdx/threadIdx-like uint3 variables. */
#define CUDAW_EMU_FOR_EACH_THREAD(launch, block_idx, thread_idx)                              \
  for (uint3 block_idx = {0, 0, 0}; block_idx.z < (launch)->grid.z; block_idx.z++)            \
    for (block_idx.y = 0; block_idx.y < (launch)->grid.y; block_idx.y++)                      \
      for (block_idx.x = 0; block_idx.x < (launch)->grid.x; block_idx.x++)                    \
        for (uint3 thread_idx = {0, 0, 0}; thread_idx.z < (launch)->block.z; thread_idx.z++)  \
          for (thread_idx.y = 0; thread_idx.y < (launch)->block.y; thread_idx.y++)            \
            for (thread_idx.x = 0; thread_idx.x < (launch)->block.x; thread_idx.x++)

/* Whether the kernel of `launch` may touch [ptr, ptr + size) from its device: 0, or -EFAULT for
 * memory its device cannot reach (another device's memory without peer access, VMM memory that
 * cuMemSetAccess did not open to it, freed or unknown memory). After -EFAULT the launch returns
 * cudaErrorIllegalAddress, as a GPU reports an illegal address. Host kernels that want the
 * device's access rules call it before touching an argument's memory. */
int cudaw_emu_access(const struct cudaw_emu_launch *launch, const void *ptr, size_t size);

/* Registers (or replaces) the host implementation for a mangled kernel name; takes precedence
 * over a dlsym-found one. Returns 0, or -EINVAL for a NULL name or function, -ENOMEM. */
int cudaw_emu_register_kernel(const char *mangled, cudaw_emu_kernel_fn fn);

/* Hold (hold != 0) or release a stream: while held, events recorded on it report
 * cudaErrorNotReady, as if the stream had not reached them yet; synchronising with such an event
 * releases the stream. For stream-ordered allocation tests. Returns 0, or -EINVAL. */
int cudaw_emu_hold_stream(cudaStream_t stream, int hold);

/* Declares the parameter sizes of a kernel (mangled name), in order: graph kernel nodes need them
 * to copy their arguments, as the real runtime does from the kernel's metadata. A node added for
 * a kernel without declared sizes fails with cudaErrorNotSupported. Returns 0, -EINVAL, -ENOMEM.*/
int cudaw_emu_set_kernel_param_sizes(const char *mangled, unsigned count, const size_t *sizes);

/* Leaves work behind on the calling thread's current device, as a kernel that keeps running on a
 * GPU: until done(arg) returns non-zero, cudaDeviceSynchronize and cudaStreamSynchronize on that
 * device wait and cudaStreamQuery reports cudaErrorNotReady. done is called from whichever thread
 * synchronises, one call at a time, and not again once it returned non-zero. For collectives that
 * wait for a peer process (tests/checkpoint/e2e_group.c). Returns 0, -EINVAL, -ENOSPC (64 at once). */
int cudaw_emu_defer(int (*done)(void *arg), void *arg);

/* Always returns 1: lets a program prove its runtime calls reach the emu (look it up with dlsym). */
int cudaw_emu_is_emulated(void);

#ifdef __cplusplus
}
#endif
#endif
