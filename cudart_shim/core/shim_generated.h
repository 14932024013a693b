/* What the generated wrappers (shim_wrappers.c) include: the toolkit's runtime API, the shim's
 * gate and translation hooks. */
#ifndef CUDAW_SHIM_GENERATED_H
#define CUDAW_SHIM_GENERATED_H

#include <cuda_runtime_api.h>
#include <cuda_profiler_api.h>

#include "shim.h"

#define SHIM_GATE_ENTER(id) shim_gate_enter(id)
#define SHIM_GATE_ENTER_BLOCKING(id) shim_gate_enter_blocking(id)

/* The real runtime's `name`, typed, for hand-written overrides (NULL when missing). Inside cudaw
 * (shim_depth > 0) calls go straight there, without the gate. */
#define SHIM_REAL(name) ((__typeof__(&name))shim_real_table[SHIM_FN_##name])

/* Record an error cudaw returns without the real runtime seeing it, so that cudaGetLastError
 * reports it as the runtime would (core/last_error.c). Returns error. */
cudaError_t shim_set_last_error(cudaError_t error);

#endif
