/* The runtime's per-thread "last error" for errors cudaw returns itself: the real runtime never
 * saw them, so cudaGetLastError and cudaPeekAtLastError merge our record with the real one. */
#include "shim_generated.h"

static SHIM_TLS cudaError_t last_error;

cudaError_t shim_set_last_error(cudaError_t error)
{
  if (error != cudaSuccess) {
    /* Ours is now the most recent error: forget the real runtime's older one. */
    if (shim_real_table[SHIM_FN_cudaGetLastError]) SHIM_REAL(cudaGetLastError)();
    last_error = error;
  }
  return error;
}

SHIM_EXPORT cudaError_t cudaGetLastError(void)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaGetLastError);
  if (!real) return shim_missing(SHIM_FN_cudaGetLastError);
  /* A real error recorded after ours (ours cleared the real one) is the more recent. */
  cudaError_t result = ((__typeof__(&cudaGetLastError))real)();
  if (result == cudaSuccess) result = last_error;
  last_error = cudaSuccess;
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaPeekAtLastError(void)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaPeekAtLastError);
  if (!real) return shim_missing(SHIM_FN_cudaPeekAtLastError);
  cudaError_t result = ((__typeof__(&cudaPeekAtLastError))real)();
  if (result == cudaSuccess) result = last_error;
  shim_gate_leave();
  return result;
}
