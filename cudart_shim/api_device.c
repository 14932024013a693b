/* cudaDeviceReset destroys every allocation, stream, event and page-locked buffer of the device.
 * cudaw gives its own back first (vmem's mappings are unmapped while the context still lives),
 * forgets what the reset destroys, and starts vmem again on the next allocation, so a program
 * that resets and goes on keeps working. Listed in gen/api.d/device.conf. */
#include <errno.h>

#include "ckpt.h"
#include "shim_generated.h"
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
  }
  cudaError_t result = ((__typeof__(&cudaDeviceReset))real)();
  shim_gate_leave();
  return result;
}
