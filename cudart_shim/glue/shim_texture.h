/* Texture objects over vmem memory (runtime/texture.c), for the checkpoint glue and device reset. */
#ifndef CUDAW_SHIM_TEXTURE_H
#define CUDAW_SHIM_TEXTURE_H

#include <stddef.h>

/* -ENOTSUP, with the reason in why, when a checkpoint must be refused: under translate a live
 * texture object reads vmem memory, which a resume moves. 0 otherwise. */
int shim_texture_blocks_checkpoint(char *why, size_t len);

/* Forget every tracked texture object (cudaDeviceReset destroyed them). */
void shim_texture_forget_all(void);

#endif
