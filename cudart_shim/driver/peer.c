/* Peer access through the driver: cuCtxEnablePeerAccess / cuCtxDisablePeerAccess (a static
 * runtime's cudaDeviceEnablePeerAccess, NCCL's P2P transport, JAX) open the peer context's
 * cudaMalloc-like memory to the current context. vmem's memory is mapped with the VMM calls, which
 * that does not reach, so vmem opens it itself, as for the runtime's call (runtime/device.c). vmem's
 * memory lives in primary contexts; the access it grants is per device. Listed in
 * gen/api.d/driver.conf. */
#include "shim_driver.h"

#include <string.h>

#include "shim_vmem.h"

/* The devices of the current context and of peer: 0, or -1 when either is unknown. The peer's is
 * read by making it current for a moment (the calling thread's, inside the gate). */
static int devices_of(CUcontext peer, int *device, int *peer_device)
{
  CUcontext current = NULL;
  CUdevice here, there;
  if (SHIM_DRV_REAL(cuCtxGetCurrent)(&current) != CUDA_SUCCESS || !current ||
      SHIM_DRV_REAL(cuCtxGetDevice)(&here) != CUDA_SUCCESS)
    return -1;
  if (SHIM_DRV_REAL(cuCtxSetCurrent)(peer) != CUDA_SUCCESS) return -1;
  CUresult got = SHIM_DRV_REAL(cuCtxGetDevice)(&there);
  SHIM_DRV_REAL(cuCtxSetCurrent)(current);
  if (got != CUDA_SUCCESS) return -1;
  *device = (int)here;
  *peer_device = (int)there;
  return 0;
}

static void follow(CUresult result, CUcontext peer, int enable)
{
  int done = enable ? result == CUDA_SUCCESS || result == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
                    : result == CUDA_SUCCESS || result == CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  int device, peer_device;
  if (!done || !peer || devices_of(peer, &device, &peer_device) != 0) return;
  int rc = shim_vmem_peer_access(device, peer_device, enable);
  if (rc)
    shim_error("%s: device %d's access to cudaw's memory on device %d could not be %s: %s",
               enable ? "cuCtxEnablePeerAccess" : "cuCtxDisablePeerAccess", device, peer_device,
               enable ? "granted" : "revoked", strerror(-rc));
}

SHIM_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
  shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_cuCtxEnablePeerAccess);
  if (!real) return shim_drv_missing_counted(SHIM_DRV_cuCtxEnablePeerAccess);
  CUresult result = ((__typeof__(&cuCtxEnablePeerAccess))real)(peerContext, Flags);
  follow(result, peerContext, 1);
  shim_gate_leave();
  return result;
}

SHIM_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
  shim_real_fn real = shim_drv_enter_counted(SHIM_DRV_cuCtxDisablePeerAccess);
  if (!real) return shim_drv_missing_counted(SHIM_DRV_cuCtxDisablePeerAccess);
  CUresult result = ((__typeof__(&cuCtxDisablePeerAccess))real)(peerContext);
  follow(result, peerContext, 0);
  shim_gate_leave();
  return result;
}
