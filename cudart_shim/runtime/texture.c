/* Texture objects over linear and pitched device memory name a device address inside their
 * resource descriptor, where the generated wrappers cannot see it: the address is range-checked
 * and translated in a copy of the descriptor, and read back as the program's own virtual pointer.
 * Surface objects and array textures name CUDA arrays, which vmem never moves: they pass through.
 * Under translate a resume gives memory new real addresses, and a texture object cannot be
 * re-created under its old handle (the driver picks it), so a checkpoint is refused while a
 * texture object reads vmem memory. Listed in gen/api.d/texture.conf. */
#include <errno.h>

#include "shim_generated.h"
#include "shim_texture.h"
#include "shim_vmem.h"
#include "vmem.h"

/* The device pointer field of a linear or pitched resource and the bytes it spans; NULL for
 * resources that name arrays. */
static void **resource_pointer(struct cudaResourceDesc *r, uint64_t *span)
{
  if (r->resType == cudaResourceTypeLinear) {
    *span = r->res.linear.sizeInBytes;
    return &r->res.linear.devPtr;
  }
  if (r->resType == cudaResourceTypePitch2D) {
    const struct cudaChannelFormatDesc *f = &r->res.pitch2D.desc;
    uint64_t texel = (uint64_t)((unsigned)f->x + (unsigned)f->y + (unsigned)f->z + (unsigned)f->w) / 8;
    *span = shim_extent_2d(r->res.pitch2D.pitchInBytes, r->res.pitch2D.width * (texel ? texel : 1),
                           r->res.pitch2D.height);
    return &r->res.pitch2D.devPtr;
  }
  return NULL;
}

SHIM_EXPORT cudaError_t cudaCreateTextureObject(cudaTextureObject_t *pTexObject,
                                                const struct cudaResourceDesc *pResDesc,
                                                const struct cudaTextureDesc *pTexDesc,
                                                const struct cudaResourceViewDesc *pResViewDesc)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaCreateTextureObject);
  if (!real) return shim_missing(SHIM_FN_cudaCreateTextureObject);
  struct cudaResourceDesc copy;
  const struct cudaResourceDesc *use = pResDesc;
  struct shim_texture_record record = {0};
  void **field = NULL;
  if (pResDesc) {
    copy = *pResDesc;
    field = resource_pointer(&copy, &record.span);
  }
  if (field && *field && vmem_owns(*field)) {
    if (shim_vmem_check_arg(SHIM_FN_cudaCreateTextureObject, *field, record.span, 1) != 0) {
      shim_gate_leave();
      return shim_set_last_error(cudaErrorInvalidValue);
    }
    record.virtual_ptr = *field;
    *field = (void *)shim_translate_in(*field);
    record.real_ptr = *field;
    use = &copy;
  }
  cudaError_t result =
      ((__typeof__(&cudaCreateTextureObject))real)(pTexObject, use, pTexDesc, pResViewDesc);
  if (result == cudaSuccess && record.virtual_ptr && pTexObject) {
    record.handle = *pTexObject;
    shim_texture_created(&record);
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaDestroyTextureObject);
  if (!real) return shim_missing(SHIM_FN_cudaDestroyTextureObject);
  cudaError_t result = ((__typeof__(&cudaDestroyTextureObject))real)(texObject);
  if (result == cudaSuccess) (void)shim_texture_untrack(texObject, NULL);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *pResDesc,
                                                         cudaTextureObject_t texObject)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGetTextureObjectResourceDesc);
  if (!real) return shim_missing(SHIM_FN_cudaGetTextureObjectResourceDesc);
  cudaError_t result = ((__typeof__(&cudaGetTextureObjectResourceDesc))real)(pResDesc, texObject);
  struct shim_texture_record record;
  if (result == cudaSuccess && pResDesc && shim_texture_find(texObject, &record) == 0) {
    uint64_t span;
    void **field = resource_pointer(pResDesc, &span);
    if (field && *field == record.real_ptr) *field = record.virtual_ptr;
  }
  shim_gate_leave();
  return result;
}
