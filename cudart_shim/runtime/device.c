/* Device-wide calls that touch several modules. cudaDeviceReset destroys every allocation,
 * stream, event and page-locked buffer of the device: cudaw gives its own back first (vmem's
 * mappings are unmapped while the context still lives), forgets what the reset destroys, and
 * starts vmem again on the next allocation, so a program that resets and goes on keeps working.
 * Peer access: the runtime opens only cudaMalloc memory to the peer, so vmem opens its own VMM
 * mappings too (shim_vmem_peer_access). Listed in gen/api.d/device.conf. */
#include <errno.h>
#include <string.h>

#include "ckpt.h"
#include "shim_ckpt.h"
#include "shim_generated.h"
#include "shim_gpu_share.h"
#include "shim_texture.h"
#include "shim_vmem.h"

SHIM_EXPORT cudaError_t cudaDeviceReset(void)
{
  shim_real_fn real = SHIM_GATE_ENTER(SHIM_FN_cudaDeviceReset);
  if (!real) return shim_missing(SHIM_FN_cudaDeviceReset);
  int device = 0;
  if (shim_current_device(&device) == cudaSuccess) {
    if (shim_vmem_device_reset(device) == -EXDEV)
      shim_warn("cudaDeviceReset of device %d while other devices hold cudaw memory: cudaw keeps "
                "its records of device %d's allocations, which the reset destroys; using them "
                "afterwards fails", device, device);
    shim_mem_forget_device(device);
    shim_texture_forget_all();
    ckpt_device_reset();
    shim_ckpt_device_reset(device);
    shim_gpu_device_reset();
  }
  cudaError_t result = ((__typeof__(&cudaDeviceReset))real)();
  shim_gate_leave();
  return result;
}

/* After the runtime enabled (or disabled) the current device's access to peer_device, the same
 * for vmem's memory. "Already enabled" / "not enabled" from the runtime mean the record is
 * right already; vmem is told anyway (idempotent), so that both agree. A failure of vmem's part
 * is logged: the runtime's answer stands (the program's cudaMalloc-like memory is vmem's, so its
 * kernels on the device would fault on the peer's memory; the log says why). */
static cudaError_t peer_access(enum shim_fn_id id, int peer_device, unsigned flags, int enable)
{
  shim_real_fn real = SHIM_GATE_ENTER(id);
  if (!real) return shim_missing(id);
  cudaError_t result = enable
      ? ((__typeof__(&cudaDeviceEnablePeerAccess))real)(peer_device, flags)
      : ((__typeof__(&cudaDeviceDisablePeerAccess))real)(peer_device);
  int device;
  int done = enable ? result == cudaSuccess || result == cudaErrorPeerAccessAlreadyEnabled
                    : result == cudaSuccess || result == cudaErrorPeerAccessNotEnabled;
  if (done && shim_current_device(&device) == cudaSuccess) {
    int rc = shim_vmem_peer_access(device, peer_device, enable);
    if (rc)
      shim_error("%s: device %d's access to cudaw's memory on device %d could not be %s: %s",
                 enable ? "cudaDeviceEnablePeerAccess" : "cudaDeviceDisablePeerAccess", device,
                 peer_device, enable ? "granted" : "revoked", strerror(-rc));
  }
  shim_gate_leave();
  return result;
}

SHIM_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned int flags)
{
  return peer_access(SHIM_FN_cudaDeviceEnablePeerAccess, peer_device, flags, 1);
}

SHIM_EXPORT cudaError_t cudaDeviceDisablePeerAccess(int peer_device)
{
  return peer_access(SHIM_FN_cudaDeviceDisablePeerAccess, peer_device, 0, 0);
}
