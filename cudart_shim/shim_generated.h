/* What the generated wrappers (shim_wrappers.c) include: the toolkit's runtime API, the shim's
 * gate and translation hooks. */
#ifndef CUDAW_SHIM_GENERATED_H
#define CUDAW_SHIM_GENERATED_H

#include <cuda_runtime_api.h>
#include <cuda_profiler_api.h>

#include "shim.h"

#define SHIM_GATE_ENTER(id) shim_gate_enter(id)
#define SHIM_GATE_ENTER_BLOCKING(id) shim_gate_enter_blocking(id)

#endif
