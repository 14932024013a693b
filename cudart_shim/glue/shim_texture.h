/* Texture objects over vmem memory (glue/texture.c): tracked by the API layers that create them,
 * read by the checkpoint glue and by device reset. */
#ifndef CUDAW_SHIM_TEXTURE_H
#define CUDAW_SHIM_TEXTURE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

/* A live texture object over vmem memory: what the program gave, what the device got. */
struct shim_texture_record {
  cudaTextureObject_t handle;
  void *virtual_ptr;
  void *real_ptr;
  uint64_t span;
};

/* Track a new texture object (0, or -ENOMEM); forget one into *out if given (0, or -ENOENT when it
 * is not tracked); find one (0, or -ENOENT). */
int shim_texture_track(const struct shim_texture_record *record);
/* A texture object was created over vmem memory (record complete): track it, or say once why a
 * checkpoint will not know of it (out of host memory). */
void shim_texture_created(const struct shim_texture_record *record);
int shim_texture_untrack(cudaTextureObject_t handle, struct shim_texture_record *out);
int shim_texture_find(cudaTextureObject_t handle, struct shim_texture_record *out);

/* -ENOTSUP, with the reason in why, when a checkpoint must be refused: under translate a live
 * texture object reads vmem memory, which a resume moves. 0 otherwise. */
int shim_texture_blocks_checkpoint(char *why, size_t len);

/* Forget every tracked texture object (cudaDeviceReset destroyed them). */
void shim_texture_forget_all(void);

#endif
