/* CUDA arrays are opaque device memory the real runtime lays out (texture tiling), so vmem cannot
 * back them; they are passed through and tracked with their format, extent and flags
 * (mem_registry.c), so that the checkpoint glue can copy their contents out and back. */
#include "shim_generated.h"
#include "shim_vmem.h"

static void track_array(enum shim_mem_kind kind, void *handle,
                        const struct cudaChannelFormatDesc *desc, struct cudaExtent extent,
                        unsigned levels, unsigned flags)
{
  struct shim_mem_record record = {.kind = kind, .handle = handle, .flags = flags,
                                   .extent = extent, .levels = levels};
  if (desc) record.format = *desc;
  if (shim_current_device(&record.device) != cudaSuccess) record.device = 0;
  if (shim_mem_track(&record) != 0)
    shim_warn("out of host memory: CUDA array %p is not tracked and will not be checkpointed",
              handle);
}

SHIM_EXPORT cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                        size_t width, size_t height, unsigned int flags)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaMallocArray);
  if (!real) return shim_missing(SHIM_FN_cudaMallocArray);
  cudaError_t result = ((__typeof__(&cudaMallocArray))real)(array, desc, width, height, flags);
  if (result == cudaSuccess && array && *array)
    track_array(SHIM_MEM_ARRAY, *array, desc, (struct cudaExtent){width, height, 0}, 0, flags);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaMalloc3DArray(cudaArray_t *array,
                                          const struct cudaChannelFormatDesc *desc,
                                          struct cudaExtent extent, unsigned int flags)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaMalloc3DArray);
  if (!real) return shim_missing(SHIM_FN_cudaMalloc3DArray);
  cudaError_t result = ((__typeof__(&cudaMalloc3DArray))real)(array, desc, extent, flags);
  if (result == cudaSuccess && array && *array)
    track_array(SHIM_MEM_ARRAY, *array, desc, extent, 0, flags);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t *mipmappedArray,
                                                 const struct cudaChannelFormatDesc *desc,
                                                 struct cudaExtent extent, unsigned int numLevels,
                                                 unsigned int flags)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaMallocMipmappedArray);
  if (!real) return shim_missing(SHIM_FN_cudaMallocMipmappedArray);
  cudaError_t result = ((__typeof__(&cudaMallocMipmappedArray))real)(mipmappedArray, desc, extent,
                                                                    numLevels, flags);
  if (result == cudaSuccess && mipmappedArray && *mipmappedArray)
    track_array(SHIM_MEM_MIPMAPPED, *mipmappedArray, desc, extent, numLevels, flags);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaFreeArray(cudaArray_t array)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaFreeArray);
  if (!real) return shim_missing(SHIM_FN_cudaFreeArray);
  cudaError_t result = ((__typeof__(&cudaFreeArray))real)(array);
  if (result == cudaSuccess && array) shim_mem_untrack(SHIM_MEM_ARRAY, array, NULL);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmappedArray)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaFreeMipmappedArray);
  if (!real) return shim_missing(SHIM_FN_cudaFreeMipmappedArray);
  cudaError_t result = ((__typeof__(&cudaFreeMipmappedArray))real)(mipmappedArray);
  if (result == cudaSuccess && mipmappedArray)
    shim_mem_untrack(SHIM_MEM_MIPMAPPED, mipmappedArray, NULL);
  shim_gate_leave();
  return result;
}
