/* The library's use of vmem: lazy start and the error conversion at the API edge. */
#ifndef CUDAW_SHIM_VMEM_H
#define CUDAW_SHIM_VMEM_H

#include <cuda_runtime_api.h>

/* Start vmem once (options, primitives over the real runtime, reservation). 0 when allocations
 * are virtualised; -errno when they are not (CUDAW_VMEM=off, no device, ...): callers then pass
 * allocations to the real runtime unchanged. Creates the CUDA context. Call inside the gate. */
int shim_vmem_start(void);

/* Nonzero once vmem runs (cheap; never starts it). */
int shim_vmem_running(void);

/* 0 / -errno from vmem or the shim -> the cudaError_t the real runtime would return. */
cudaError_t shim_error_from_errno(int rc);

/* Record an error cudaw returns without the real runtime seeing it, so that cudaGetLastError
 * reports it as the runtime would (last_error.c). Returns error. */
cudaError_t shim_set_last_error(cudaError_t error);

#endif
