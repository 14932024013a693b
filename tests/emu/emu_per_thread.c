/* emu_per_thread.c: the _ptds/_ptsz (per-thread default stream) variants of the entry points the
 * emu implements. Compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM, so the header renames each
 * definition below (cudaMemcpy -> cudaMemcpy_ptds) and checks it against its own prototype. The
 * emu runs everything synchronously, so they behave exactly like the legacy-stream versions. */
#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "emu_per_thread.c must be compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

#include "emu_internal.h"

EMU_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                                  enum cudaMemcpyKind kind) {
  return emu_memcpy2d(dst, count, src, count, count, 1, kind, cudaStreamPerThread);
}

EMU_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                                       enum cudaMemcpyKind kind, cudaStream_t stream) {
  return emu_memcpy2d(dst, count, src, count, count, 1, kind, stream);
}

EMU_EXPORT cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                    size_t width, size_t height, enum cudaMemcpyKind kind) {
  return emu_memcpy2d(dst, dpitch, src, spitch, width, height, kind, cudaStreamPerThread);
}

EMU_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                         size_t width, size_t height, enum cudaMemcpyKind kind,
                                         cudaStream_t stream) {
  return emu_memcpy2d(dst, dpitch, src, spitch, width, height, kind, stream);
}

EMU_EXPORT cudaError_t cudaMemset(void *dst, int value, size_t count) {
  return emu_memset2d(dst, count, value, count, 1, cudaStreamPerThread);
}

EMU_EXPORT cudaError_t cudaMemsetAsync(void *dst, int value, size_t count, cudaStream_t stream) {
  return emu_memset2d(dst, count, value, count, 1, stream);
}

EMU_EXPORT cudaError_t cudaMemset2D(void *dst, size_t pitch, int value, size_t width,
                                    size_t height) {
  return emu_memset2d(dst, pitch, value, width, height, cudaStreamPerThread);
}

EMU_EXPORT cudaError_t cudaMemset2DAsync(void *dst, size_t pitch, int value, size_t width,
                                         size_t height, cudaStream_t stream) {
  return emu_memset2d(dst, pitch, value, width, height, stream);
}

EMU_EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count,
                                          size_t offset, enum cudaMemcpyKind kind) {
  return emu_memcpy_symbol(symbol, (void *)src, count, offset, kind, true, cudaStreamPerThread);
}

EMU_EXPORT cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count,
                                            size_t offset, enum cudaMemcpyKind kind) {
  return emu_memcpy_symbol(symbol, dst, count, offset, kind, false, cudaStreamPerThread);
}

EMU_EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t count,
                                               size_t offset, enum cudaMemcpyKind kind,
                                               cudaStream_t stream) {
  return emu_memcpy_symbol(symbol, (void *)src, count, offset, kind, true, stream);
}

EMU_EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count,
                                                 size_t offset, enum cudaMemcpyKind kind,
                                                 cudaStream_t stream) {
  return emu_memcpy_symbol(symbol, dst, count, offset, kind, false, stream);
}

EMU_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) { return emu_stream_query(stream); }

EMU_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return emu_stream_sync(stream);
}

EMU_EXPORT cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int *flags) {
  return emu_stream_get_flags(stream, flags);
}

EMU_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t stream, int *priority) {
  return emu_stream_get_priority(stream, priority);
}

EMU_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                           unsigned int flags) {
  return emu_stream_wait_event(stream, event, flags);
}

EMU_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback,
                                             void *user_data, unsigned int flags) {
  return emu_stream_add_callback(stream, callback, user_data, flags);
}

EMU_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return emu_event_record(event, stream);
}

EMU_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream,
                                                unsigned int flags) {
  if (flags & ~(unsigned)cudaEventRecordExternal) return emu_result(cudaErrorInvalidValue);
  return emu_event_record(event, stream);
}

EMU_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user_data) {
  return emu_launch_host_func(stream, fn, user_data);
}

EMU_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
                                        size_t shared_mem, cudaStream_t stream) {
  return emu_launch(func, grid, block, args, shared_mem, stream);
}

EMU_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
                                           void **args) {
  return emu_launch_ex(config, func, args);
}

EMU_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 grid, dim3 block,
                                                   void **args, size_t shared_mem,
                                                   cudaStream_t stream) {
  return emu_launch(func, grid, block, args, shared_mem, stream);
}

EMU_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  return emu_graph_launch(exec, stream);
}

EMU_EXPORT cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t stream) {
  return emu_malloc_async(ptr, size, stream);
}

EMU_EXPORT cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream) {
  return emu_free_async(ptr, stream);
}

EMU_EXPORT cudaError_t cudaMemPrefetchAsync(const void *ptr, size_t count,
                                            struct cudaMemLocation location, unsigned int flags,
                                            cudaStream_t stream) {
  return emu_prefetch(ptr, count, location, flags, stream);
}

EMU_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **func,
                                               unsigned long long flags,
                                               enum cudaDriverEntryPointQueryResult *status) {
  (void)flags;
  return emu_get_driver_entry_point(symbol, func, status);
}

EMU_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **func,
                                                        unsigned int version,
                                                        unsigned long long flags,
                                                        enum cudaDriverEntryPointQueryResult *status) {
  (void)version, (void)flags;
  return emu_get_driver_entry_point(symbol, func, status);
}
