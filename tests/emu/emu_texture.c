/* Texture and surface objects of the emulated device. An object keeps a copy of its descriptors;
 * creation checks, as the driver does, that linear and pitched resources lie in device memory
 * (a virtual pointer cudaw forgot to translate is refused) and that surfaces name an array.
 * The test hook cudaw_emu_texture_address gives the device address an object reads. */
#include <stdlib.h>

#include "emu_internal.h"

#define TEXTURE_MAGIC 0x54455854u
#define SURFACE_MAGIC 0x53555246u

struct emu_object {
  unsigned magic;
  struct cudaResourceDesc resource;
  struct cudaTextureDesc texture;
  struct cudaResourceViewDesc view;
  int has_view;
};

/* The device bytes a linear or pitched resource spans, or 0 for other kinds. */
static size_t resource_span(const struct cudaResourceDesc *r, const void **start)
{
  if (r->resType == cudaResourceTypeLinear) {
    *start = r->res.linear.devPtr;
    return r->res.linear.sizeInBytes;
  }
  if (r->resType == cudaResourceTypePitch2D) {
    *start = r->res.pitch2D.devPtr;
    return r->res.pitch2D.height ? r->res.pitch2D.pitchInBytes * r->res.pitch2D.height : 0;
  }
  *start = NULL;
  return 0;
}

static cudaError_t check_resource(const struct cudaResourceDesc *r)
{
  const void *start;
  size_t span = resource_span(r, &start);
  switch (r->resType) {
  case cudaResourceTypeArray: return r->res.array.array ? cudaSuccess : cudaErrorInvalidValue;
  case cudaResourceTypeMipmappedArray:
    return r->res.mipmap.mipmap ? cudaSuccess : cudaErrorInvalidValue;
  case cudaResourceTypeLinear:
  case cudaResourceTypePitch2D:
    return span && emu_memory_check(start, span, EMU_KINDS_ALL) == 0 ? cudaSuccess
                                                                     : cudaErrorInvalidValue;
  default: return cudaErrorInvalidValue;
  }
}

static struct emu_object *object(unsigned long long handle, unsigned magic)
{
  struct emu_object *o = (struct emu_object *)(uintptr_t)handle;
  return o && o->magic == magic ? o : NULL;
}

EMU_EXPORT cudaError_t cudaCreateTextureObject(cudaTextureObject_t *handle,
                                               const struct cudaResourceDesc *resource,
                                               const struct cudaTextureDesc *texture,
                                               const struct cudaResourceViewDesc *view)
{
  emu_init();
  if (!handle || !resource || !texture) return emu_result(cudaErrorInvalidValue);
  cudaError_t e = check_resource(resource);
  if (e != cudaSuccess) return emu_result(e);
  struct emu_object *o = calloc(1, sizeof *o);
  if (!o) return emu_result(cudaErrorMemoryAllocation);
  *o = (struct emu_object){.magic = TEXTURE_MAGIC, .resource = *resource, .texture = *texture};
  if (view) {
    o->view = *view;
    o->has_view = 1;
  }
  *handle = (cudaTextureObject_t)(uintptr_t)o;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t *handle,
                                               const struct cudaResourceDesc *resource)
{
  emu_init();
  if (!handle || !resource || resource->resType != cudaResourceTypeArray)
    return emu_result(cudaErrorInvalidValue);
  cudaError_t e = check_resource(resource);
  if (e != cudaSuccess) return emu_result(e);
  struct emu_object *o = calloc(1, sizeof *o);
  if (!o) return emu_result(cudaErrorMemoryAllocation);
  *o = (struct emu_object){.magic = SURFACE_MAGIC, .resource = *resource};
  *handle = (cudaSurfaceObject_t)(uintptr_t)o;
  return cudaSuccess;
}

static cudaError_t destroy(unsigned long long handle, unsigned magic)
{
  emu_init();
  if (!handle) return cudaSuccess;
  struct emu_object *o = object(handle, magic);
  if (!o) return emu_result(cudaErrorInvalidValue);
  o->magic = 0;
  free(o);
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaDestroyTextureObject(cudaTextureObject_t handle)
{
  return destroy(handle, TEXTURE_MAGIC);
}

EMU_EXPORT cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t handle)
{
  return destroy(handle, SURFACE_MAGIC);
}

EMU_EXPORT cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *out,
                                                        cudaTextureObject_t handle)
{
  emu_init();
  struct emu_object *o = object(handle, TEXTURE_MAGIC);
  if (!o || !out) return emu_result(cudaErrorInvalidValue);
  *out = o->resource;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaGetSurfaceObjectResourceDesc(struct cudaResourceDesc *out,
                                                        cudaSurfaceObject_t handle)
{
  emu_init();
  struct emu_object *o = object(handle, SURFACE_MAGIC);
  if (!o || !out) return emu_result(cudaErrorInvalidValue);
  *out = o->resource;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc *out,
                                                       cudaTextureObject_t handle)
{
  emu_init();
  struct emu_object *o = object(handle, TEXTURE_MAGIC);
  if (!o || !out) return emu_result(cudaErrorInvalidValue);
  *out = o->texture;
  return cudaSuccess;
}

EMU_EXPORT cudaError_t cudaGetTextureObjectResourceViewDesc(struct cudaResourceViewDesc *out,
                                                            cudaTextureObject_t handle)
{
  emu_init();
  struct emu_object *o = object(handle, TEXTURE_MAGIC);
  if (!o || !out || !o->has_view) return emu_result(cudaErrorInvalidValue);
  *out = o->view;
  return cudaSuccess;
}

/* Test hook: the device address a linear or pitched texture reads (what a kernel would fetch
 * through it), or NULL. */
EMU_EXPORT const void *cudaw_emu_texture_address(cudaTextureObject_t handle)
{
  struct emu_object *o = object(handle, TEXTURE_MAGIC);
  const void *start = NULL;
  if (o) (void)resource_span(&o->resource, &start);
  return start;
}
