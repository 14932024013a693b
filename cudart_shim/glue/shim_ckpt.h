/* The library's use of the checkpoint module (glue/checkpoint.c). It starts the module (control
 * thread, socket, signal handler) from a start step once the real runtime loaded, with the host
 * operations over vmem and the real runtime; a failure is logged and leaves the program running
 * without checkpointing. See shim_vmm.h for what the driver layer offers it. */
#ifndef CUDAW_SHIM_CKPT_H
#define CUDAW_SHIM_CKPT_H

#include <stdint.h>

/* The program obtained a driver function that cudaw does not wrap (real, named symbol): it runs
 * without the gate, so a pause does not hold it. Logged once per function; status counts them. */
void shim_ckpt_note_ungated(const void *real, const char *symbol);
/* cudaDeviceReset of `device` destroys the live checkpoints' copy stream there: forget it (the
 * next live checkpoint creates another). Call inside the gated call, before the reset. */
void shim_ckpt_device_reset(int device);

/* What a checkpoint would save now: the device memory cudaw holds for the program (vmem's and
 * its own VMM mappings), in *bytes, and how many regions it is in. Any thread. */
void shim_ckpt_device_bytes(uint64_t *bytes, uint64_t *regions);

#endif
