/* The texture objects over vmem memory that the API layers created (runtime/texture.c): what the
 * program gave and what the device got, so that a resource reads back with the program's own
 * pointer, and a checkpoint under translate is refused while one lives (a resume moves memory,
 * and a texture object cannot be re-created under its old handle: the driver picks it). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "shim.h"
#include "shim_texture.h"
#include "vmem.h"

static struct {
  pthread_mutex_t lock;
  struct shim_texture_record *items;
  size_t count, capacity;
} textures = {.lock = PTHREAD_MUTEX_INITIALIZER};

int shim_texture_track(const struct shim_texture_record *record)
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

void shim_texture_created(const struct shim_texture_record *record)
{
  if (shim_texture_track(record) != 0)
    shim_warn("out of host memory: texture object %#llx is not tracked; its resource reads back "
              "with a real address and a checkpoint will not know of it",
              (unsigned long long)record->handle);
}

int shim_texture_untrack(cudaTextureObject_t handle, struct shim_texture_record *out)
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

int shim_texture_find(cudaTextureObject_t handle, struct shim_texture_record *out)
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

int shim_texture_blocks_checkpoint(char *why, size_t len)
{
  if (vmem_policy() != VMEM_TRANSLATE) return 0;
  size_t live = 0;
  struct shim_texture_record first = {0};
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
