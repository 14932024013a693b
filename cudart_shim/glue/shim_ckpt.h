/* The library's use of the checkpoint module (glue/checkpoint.c). */
#ifndef CUDAW_SHIM_CKPT_H
#define CUDAW_SHIM_CKPT_H

/* Start the checkpoint module (control thread, socket, signal handler) with the host operations
 * over vmem and the real runtime. Called once from shim_init after the real runtime loaded; makes
 * no CUDA call. A failure is logged and leaves the program running without checkpointing. */
void shim_ckpt_start(void);

#endif
