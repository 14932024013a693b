/* emu_errors.c: cudaGetErrorName/cudaGetErrorString, last-error bookkeeping and the translation
 * of internal -errno results into cudaError_t. */
#include <errno.h>

#include "emu_internal.h"

static _Thread_local cudaError_t last_error = cudaSuccess;

cudaError_t emu_result(cudaError_t err) {
  if (err != cudaSuccess) last_error = err;
  return err;
}

cudaError_t emu_error_from_errno(int negative_errno) {
  switch (negative_errno) {
  case 0: return cudaSuccess;
  case -ENOMEM: return cudaErrorMemoryAllocation;
  case -EEXIST: return cudaErrorHostMemoryAlreadyRegistered;
  case -EBADF: return cudaErrorInvalidResourceHandle;
  case -ENOSYS: return cudaErrorNotSupported;
  case -EFAULT: return cudaErrorIllegalAddress; /* memory the device cannot reach */
  default: return cudaErrorInvalidValue;
  }
}

EMU_EXPORT cudaError_t cudaGetLastError(void) {
  cudaError_t err = last_error;
  last_error = cudaSuccess;
  return err;
}

EMU_EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }

#define EMU_ERROR_NAMES(X)                                                                         \
  X(cudaSuccess) X(cudaErrorInvalidValue) X(cudaErrorMemoryAllocation)                             \
  X(cudaErrorInitializationError) X(cudaErrorCudartUnloading) X(cudaErrorInvalidConfiguration)     \
  X(cudaErrorInvalidPitchValue) X(cudaErrorInvalidSymbol) X(cudaErrorInvalidHostPointer)           \
  X(cudaErrorInvalidDevicePointer) X(cudaErrorInvalidMemcpyDirection)                              \
  X(cudaErrorSynchronizationError) X(cudaErrorNotYetImplemented) X(cudaErrorStubLibrary)           \
  X(cudaErrorInsufficientDriver) X(cudaErrorMissingConfiguration) X(cudaErrorPriorLaunchFailure)   \
  X(cudaErrorInvalidDeviceFunction) X(cudaErrorNoDevice) X(cudaErrorInvalidDevice)                 \
  X(cudaErrorStartupFailure) X(cudaErrorInvalidKernelImage) X(cudaErrorNoKernelImageForDevice)     \
  X(cudaErrorPeerAccessUnsupported) X(cudaErrorInvalidResourceHandle) X(cudaErrorIllegalState)     \
  X(cudaErrorSymbolNotFound) X(cudaErrorNotReady) X(cudaErrorIllegalAddress)                       \
  X(cudaErrorLaunchOutOfResources) X(cudaErrorLaunchTimeout) X(cudaErrorPeerAccessAlreadyEnabled)  \
  X(cudaErrorPeerAccessNotEnabled) X(cudaErrorSetOnActiveProcess) X(cudaErrorContextIsDestroyed)   \
  X(cudaErrorAssert) X(cudaErrorHostMemoryAlreadyRegistered) X(cudaErrorHostMemoryNotRegistered)   \
  X(cudaErrorMisalignedAddress) X(cudaErrorLaunchFailure) X(cudaErrorNotPermitted)                 \
  X(cudaErrorNotSupported) X(cudaErrorTimeout) X(cudaErrorStreamCaptureUnsupported)                \
  X(cudaErrorFunctionNotLoaded) X(cudaErrorUnknown)

#define EMU_ERROR_NAME_CASE(e) case e: return #e;

EMU_EXPORT const char *cudaGetErrorName(cudaError_t error) {
  switch (error) {
    EMU_ERROR_NAMES(EMU_ERROR_NAME_CASE)
  default: return "unrecognized error code";
  }
}

EMU_EXPORT const char *cudaGetErrorString(cudaError_t error) {
  switch (error) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInitializationError: return "initialization error";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorInvalidPitchValue: return "invalid pitch argument";
  case cudaErrorInvalidSymbol: return "invalid device symbol";
  case cudaErrorInvalidDevicePointer: return "invalid device pointer";
  case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
  case cudaErrorMissingConfiguration: return "__global__ function call is not configured";
  case cudaErrorInvalidDeviceFunction: return "invalid device function";
  case cudaErrorNoDevice: return "no CUDA-capable device is detected";
  case cudaErrorInvalidDevice: return "invalid device ordinal";
  case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  case cudaErrorSymbolNotFound: return "named symbol not found";
  case cudaErrorNotReady: return "device not ready";
  case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
  case cudaErrorHostMemoryAlreadyRegistered:
    return "part or all of the requested memory range is already mapped";
  case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
  case cudaErrorLaunchFailure: return "unspecified launch failure";
  case cudaErrorNotSupported: return "operation not supported";
  case cudaErrorUnknown: return "unknown error";
  default: break;
  }
  const char *name = cudaGetErrorName(error);
  return name[0] == 'c' ? name : "unrecognized error code";
}
