/* Texture objects created through the driver (a static runtime's cudaCreateTextureObject arrives
 * as cuTexObjectCreate): a linear or pitched resource names a device address inside its
 * descriptor. As the runtime's (runtime/texture.c), the address goes to the device translated in
 * a copy of the descriptor, reads back as the program's own, and the object is tracked, so that
 * under translate a checkpoint is refused while it reads vmem memory (a resume may move the
 * memory, and the driver cannot re-create an object under its old handle). Arrays pass through.
 * Listed in gen/api.d/driver.conf. */
#include "shim_driver.h"

#include "shim_texture.h"
#include "shim_vmem.h"
#include "vmem.h"

/* Bytes per element of a channel format (4 where unknown: the span only records what it reads). */
static uint64_t format_bytes(CUarray_format format)
{
  switch (format) {
  case CU_AD_FORMAT_UNSIGNED_INT8:
  case CU_AD_FORMAT_SIGNED_INT8: return 1;
  case CU_AD_FORMAT_UNSIGNED_INT16:
  case CU_AD_FORMAT_SIGNED_INT16:
  case CU_AD_FORMAT_HALF: return 2;
  default: return 4;
  }
}

/* The device address field of a linear or pitched resource and the bytes it spans; NULL for
 * resources that name arrays. */
static CUdeviceptr *resource_address(CUDA_RESOURCE_DESC *r, uint64_t *span)
{
  if (r->resType == CU_RESOURCE_TYPE_LINEAR) {
    *span = r->res.linear.sizeInBytes;
    return &r->res.linear.devPtr;
  }
  if (r->resType == CU_RESOURCE_TYPE_PITCH2D) {
    uint64_t texel = format_bytes(r->res.pitch2D.format) *
                     (r->res.pitch2D.numChannels ? r->res.pitch2D.numChannels : 1);
    *span = shim_extent_2d(r->res.pitch2D.pitchInBytes, r->res.pitch2D.width * texel,
                           r->res.pitch2D.height);
    return &r->res.pitch2D.devPtr;
  }
  return NULL;
}

SHIM_EXPORT CUresult cuTexObjectCreate(CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *pResDesc,
                                       const CUDA_TEXTURE_DESC *pTexDesc,
                                       const CUDA_RESOURCE_VIEW_DESC *pResViewDesc)
{
  shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_cuTexObjectCreate);
  if (!real) return shim_drv_missing_counted(SHIM_DRV_cuTexObjectCreate);
  CUDA_RESOURCE_DESC copy;
  const CUDA_RESOURCE_DESC *use = pResDesc;
  struct shim_texture_record record = {0};
  CUdeviceptr *field = NULL;
  if (pResDesc) {
    copy = *pResDesc;
    field = resource_address(&copy, &record.span);
  }
  void *virtual_ptr = field ? (void *)(uintptr_t)*field : NULL;
  if (virtual_ptr && vmem_owns(virtual_ptr)) {
    record.virtual_ptr = virtual_ptr;
    *field = shim_translate_address(*field);
    record.real_ptr = (void *)(uintptr_t)*field;
    use = &copy;
  }
  CUresult result =
      ((__typeof__(&cuTexObjectCreate))real)(pTexObject, use, pTexDesc, pResViewDesc);
  if (result == CUDA_SUCCESS && record.virtual_ptr && pTexObject) {
    record.handle = (cudaTextureObject_t)*pTexObject;
    shim_texture_created(&record);
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuTexObjectDestroy(CUtexObject texObject)
{
  shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_cuTexObjectDestroy);
  if (!real) return shim_drv_missing_counted(SHIM_DRV_cuTexObjectDestroy);
  CUresult result = ((__typeof__(&cuTexObjectDestroy))real)(texObject);
  if (result == CUDA_SUCCESS) (void)shim_texture_untrack((cudaTextureObject_t)texObject, NULL);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUtexObject texObject)
{
  shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_cuTexObjectGetResourceDesc);
  if (!real) return shim_drv_missing_counted(SHIM_DRV_cuTexObjectGetResourceDesc);
  CUresult result = ((__typeof__(&cuTexObjectGetResourceDesc))real)(pResDesc, texObject);
  struct shim_texture_record record;
  if (result == CUDA_SUCCESS && pResDesc &&
      shim_texture_find((cudaTextureObject_t)texObject, &record) == 0) {
    uint64_t span;
    CUdeviceptr *field = resource_address(pResDesc, &span);
    if (field && (void *)(uintptr_t)*field == record.real_ptr)
      *field = (CUdeviceptr)(uintptr_t)record.virtual_ptr;
  }
  shim_gate_leave();
  return result;
}
