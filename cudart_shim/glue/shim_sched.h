/* The library's side of GPU sharing (glue/sched.c): with CUDAW_SHARE=1 the program joins
 * cudawd on <run dir>/cudawd.sock, asks it before its device memory grows, and pauses or resumes
 * when cudawd says so. Without a cudawd the program runs unshared. It joins from a start step,
 * after the checkpoint module started (a thread and a socket, no CUDA call). */
#ifndef CUDAW_SHIM_SCHED_H
#define CUDAW_SHIM_SCHED_H

#include <stdint.h>

/* Before vmem allocates `size` bytes on `device`: 0 to go ahead, after waiting (uncounted by the
 * gate, so that the program can be paused meanwhile) while the memory does not fit; -ENOMEM when
 * it can never fit (the program alone needs more than the device). On 0 the caller must call
 * shim_sched_allocated once vmem is done. A no-op when not sharing. */
int shim_sched_admit(int device, uint64_t size);
void shim_sched_allocated(int device);

/* After an admitted allocation failed on the device (memory outside cudawd's books): asks cudawd
 * to make room and waits; 0 to try the allocation again, -ENOMEM to give the program the error
 * (not sharing, cudawd gone, it can never fit, SHIM_SCHED_RETRIES attempts, `attempt` from 0, or
 * SHIM_SCHED_RETRY_SECONDS since the first). */
#define SHIM_SCHED_RETRIES 300
#define SHIM_SCHED_RETRY_SECONDS 30 /* and no longer than this, however slowly cudawd answers */
int shim_sched_retry(int device, uint64_t size, int attempt);

/* An allocation on device failed with rc (-errno) and its error goes back to the program: tells
 * cudawd (which counts failed allocations: sharing should never make one) when sharing. */
void shim_sched_failed(int device, uint64_t size, int rc);

/* The process exits (glue/checkpoint.c, before the checkpoint module stops): tells cudawd, which
 * orders us no checkpoint or resume from then on (one already on its way is answered with an
 * error, which cudawd does not count as a failure). Our memory counts until the connection
 * closes with the process. A no-op when not joined, or in a child forked since. */
void shim_sched_leaving(void);

#endif
