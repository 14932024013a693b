/* CUDA arrays are opaque device memory the real runtime lays out (texture tiling), so vmem cannot
 * back them; they are passed through and tracked with their format, extent and flags
 * (glue/mem_registry.c), so that the checkpoint glue can copy their contents out and back. */
#include "shim_generated.h"
#include "shim_vmem.h"
#include "vmem.h"

/* Device bytes an array takes: what the runtime says, else its texels (levels: a third more). */
static uint64_t array_bytes(enum shim_mem_kind kind, void *handle, int device,
                            const struct cudaChannelFormatDesc *desc, struct cudaExtent extent,
                            unsigned levels)
{
  struct cudaArrayMemoryRequirements req = {0};
  cudaError_t e = cudaErrorNotSupported;
  if (kind == SHIM_MEM_ARRAY && shim_real_table[SHIM_FN_cudaArrayGetMemoryRequirements])
    e = SHIM_REAL(cudaArrayGetMemoryRequirements)(&req, handle, device);
  else if (kind == SHIM_MEM_MIPMAPPED &&
           shim_real_table[SHIM_FN_cudaMipmappedArrayGetMemoryRequirements])
    e = SHIM_REAL(cudaMipmappedArrayGetMemoryRequirements)(&req, handle, device);
  if (e == cudaSuccess && req.size) return req.size;
  if (e != cudaSuccess && shim_real_table[SHIM_FN_cudaGetLastError]) SHIM_REAL(cudaGetLastError)();
  uint64_t bits = desc ? (uint64_t)(desc->x + desc->y + desc->z + desc->w) : 32;
  uint64_t texels = (uint64_t)(extent.width ? extent.width : 1) *
                    (extent.height ? extent.height : 1) * (extent.depth ? extent.depth : 1);
  uint64_t bytes = texels * ((bits + 7) / 8);
  return levels > 1 ? bytes + bytes / 3 : bytes;
}

/* Track a new array and count it against the quota. Over the quota: the array is freed again
 * and the allocation fails like a full device. */
static cudaError_t track_array(enum shim_mem_kind kind, void *handle,
                               const struct cudaChannelFormatDesc *desc, struct cudaExtent extent,
                               unsigned levels, unsigned flags)
{
  struct shim_mem_record record = {.kind = kind, .handle = handle, .flags = flags,
                                   .extent = extent, .levels = levels};
  if (desc) record.format = *desc;
  if (shim_current_device(&record.device) != cudaSuccess) record.device = 0;
  record.size = array_bytes(kind, handle, record.device, desc, extent, levels);
  if (shim_vmem_start() == 0) {
    uint64_t bytes = record.size;
    if (shim_vmem_charge(record.device, bytes) != 0) {
      if (kind == SHIM_MEM_ARRAY) SHIM_REAL(cudaFreeArray)(handle);
      else SHIM_REAL(cudaFreeMipmappedArray)(handle);
      return shim_set_last_error(cudaErrorMemoryAllocation);
    }
    record.charged = bytes;
  }
  if (shim_mem_track(&record) != 0)
    shim_warn("out of host memory: CUDA array %p is not tracked and will not be checkpointed",
              handle);
  return cudaSuccess;
}

static void untrack_array(enum shim_mem_kind kind, void *handle)
{
  struct shim_mem_record record;
  if (shim_mem_untrack(kind, handle, &record) == 0 && record.charged)
    vmem_quota_uncharge(record.device, record.charged);
}

SHIM_EXPORT cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                        size_t width, size_t height, unsigned int flags)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaMallocArray);
  if (!real) return shim_missing(SHIM_FN_cudaMallocArray);
  cudaError_t result = ((__typeof__(&cudaMallocArray))real)(array, desc, width, height, flags);
  if (result == cudaSuccess && array && *array)
    result = track_array(SHIM_MEM_ARRAY, *array, desc, (struct cudaExtent){width, height, 0}, 0,
                         flags);
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
    result = track_array(SHIM_MEM_ARRAY, *array, desc, extent, 0, flags);
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
    result = track_array(SHIM_MEM_MIPMAPPED, *mipmappedArray, desc, extent, numLevels, flags);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaFreeArray(cudaArray_t array)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaFreeArray);
  if (!real) return shim_missing(SHIM_FN_cudaFreeArray);
  cudaError_t result = ((__typeof__(&cudaFreeArray))real)(array);
  if (result == cudaSuccess && array) untrack_array(SHIM_MEM_ARRAY, array);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmappedArray)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaFreeMipmappedArray);
  if (!real) return shim_missing(SHIM_FN_cudaFreeMipmappedArray);
  cudaError_t result = ((__typeof__(&cudaFreeMipmappedArray))real)(mipmappedArray);
  if (result == cudaSuccess && mipmappedArray) untrack_array(SHIM_MEM_MIPMAPPED, mipmappedArray);
  shim_gate_leave();
  return result;
}
