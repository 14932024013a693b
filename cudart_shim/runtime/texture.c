/* Texture objects over linear and pitched device memory name a device address inside their
 * resource descriptor, where the generated wrappers cannot see it: the address is range-checked
 * and translated in a copy of the descriptor, and read back as the program's own virtual pointer.
 * Surface objects and array textures name CUDA arrays, which vmem never moves: they pass through.
 * Under translate a resume gives memory new real addresses, and a texture object cannot be
 * re-created under its old handle (the driver picks it), so a checkpoint is refused while a
 * texture object reads vmem memory. Listed in gen/api.d/texture.conf. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "shim_generated.h"
#include "shim_texture.h"
#include "shim_vmem.h"
#include "vmem.h"

/* A live texture object over vmem memory: what the program gave, what the device got. */
struct texture_record {
  cudaTextureObject_t handle;
  void *virtual_ptr;
  void *real_ptr;
  uint64_t span;
};

static struct {
  pthread_mutex_t lock;
  struct texture_record *items;
  size_t count, capacity;
} textures = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int track(const struct texture_record *record)
{
  pthread_mutex_lock(&textures.lock);
  int rc = 0;
  if (textures.count == textures.capacity) {
    size_t capacity = textures.capacity ? 2 * textures.capacity : 16;
    void *grown = realloc(textures.items, capacity * sizeof *textures.items);
    if (grown) {
      textures.items = grown;
      textures.capacity = capacity;
    } else {
      rc = -ENOMEM;
    }
  }
  if (rc == 0) textures.items[textures.count++] = *record;
  pthread_mutex_unlock(&textures.lock);
  return rc;
}

/* Remove handle's record into *out (if given). 0, or -ENOENT when it is not tracked. */
static int untrack(cudaTextureObject_t handle, struct texture_record *out)
{
  pthread_mutex_lock(&textures.lock);
  int rc = -ENOENT;
  for (size_t i = 0; i < textures.count; i++) {
    if (textures.items[i].handle != handle) continue;
    if (out) *out = textures.items[i];
    textures.items[i] = textures.items[--textures.count];
    rc = 0;
    break;
  }
  pthread_mutex_unlock(&textures.lock);
  return rc;
}

static int find(cudaTextureObject_t handle, struct texture_record *out)
{
  pthread_mutex_lock(&textures.lock);
  int rc = -ENOENT;
  for (size_t i = 0; i < textures.count && rc; i++)
    if (textures.items[i].handle == handle) {
      *out = textures.items[i];
      rc = 0;
    }
  pthread_mutex_unlock(&textures.lock);
  return rc;
}

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
  struct texture_record record = {0};
  void **field = NULL;
  if (pResDesc) {
    copy = *pResDesc;
    field = resource_pointer(&copy, &record.span);
  }
  if (field && *field && vmem_in_range(*field)) {
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
    if (track(&record) != 0)
      shim_warn("out of host memory: texture object %#llx is not tracked; its resource reads "
                "back with a real address and a checkpoint will not know of it",
                (unsigned long long)record.handle);
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaDestroyTextureObject);
  if (!real) return shim_missing(SHIM_FN_cudaDestroyTextureObject);
  cudaError_t result = ((__typeof__(&cudaDestroyTextureObject))real)(texObject);
  if (result == cudaSuccess) (void)untrack(texObject, NULL);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *pResDesc,
                                                         cudaTextureObject_t texObject)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGetTextureObjectResourceDesc);
  if (!real) return shim_missing(SHIM_FN_cudaGetTextureObjectResourceDesc);
  cudaError_t result = ((__typeof__(&cudaGetTextureObjectResourceDesc))real)(pResDesc, texObject);
  struct texture_record record;
  if (result == cudaSuccess && pResDesc && find(texObject, &record) == 0) {
    uint64_t span;
    void **field = resource_pointer(pResDesc, &span);
    if (field && *field == record.real_ptr) *field = record.virtual_ptr;
  }
  shim_gate_leave();
  return result;
}

int shim_texture_blocks_checkpoint(char *why, size_t len)
{
  if (vmem_policy() != VMEM_TRANSLATE) return 0;
  size_t live = 0;
  struct texture_record first = {0};
  pthread_mutex_lock(&textures.lock);
  for (size_t i = 0; i < textures.count; i++) {
    struct vmem_info info;
    if (vmem_lookup(textures.items[i].virtual_ptr, &info) != 0) continue; /* memory freed */
    if (live++ == 0) first = textures.items[i];
  }
  pthread_mutex_unlock(&textures.lock);
  if (live == 0) return 0;
  snprintf(why, len,
           "%zu texture object%s over cudaw memory (first %#llx, %p): under CUDAW_VMEM=translate "
           "a resume moves it and a texture cannot be re-created under its handle; destroy them "
           "before pausing, or use remap",
           live, live == 1 ? "" : "s", (unsigned long long)first.handle, first.virtual_ptr);
  return -ENOTSUP; /* "failed" with the reason (cudaw-ctl exit 1), not a wrong state */
}

void shim_texture_forget_all(void)
{
  pthread_mutex_lock(&textures.lock);
  textures.count = 0;
  pthread_mutex_unlock(&textures.lock);
}
