/* GPU-time shares (glue/gpu_share.c): with CUDAW_GPU_SHARE=PERCENT or `cudaw-ctl limit <pid>
 * --gpu PERCENT`, cudaw meters the GPU time of the program's launches (a pair of events around
 * each batch of launches on a stream, read back without blocking) and holds launches back at the
 * gate so that the program stays within its share over a sliding window. A program without a
 * share pays one branch on a cached flag per launch (folded into the kparam test). */
#ifndef CUDAW_SHIM_GPU_SHARE_H
#define CUDAW_SHIM_GPU_SHARE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shim.h"
#include "shim_kparam.h"

/* Nonzero while the program's launches are metered (a share is set). */
extern atomic_int shim_gpu_metered;

/* Whether a launch must take its slow path: kparam (translate or checks) or metering. One branch
 * on three cached words. */
static inline bool shim_launch_slow(void)
{
  return SHIM_UNLIKELY((shim_translate_end | (uintptr_t)shim_kparam_check |
                        (uintptr_t)atomic_load_explicit(&shim_gpu_metered,
                                                        memory_order_relaxed)) != 0);
}

/* What shim_gpu_before hands to shim_gpu_after for one launch. */
struct shim_gpu_ticket {
  int batch; /* the open batch the launch belongs to; -1: not metered */
  unsigned generation;
};

/* Around one launch (or graph launch) into `stream`, inside the gate. before: waits (outside the
 * gate's count, so that a pause proceeds) while the program is over its share, then opens or
 * continues the stream's batch. per_thread: the call is a _ptsz variant (stream 0 is then the
 * per-thread stream). after: marks the batch's end behind the launch. No-ops unless metered. */
void shim_gpu_before(void *stream, int per_thread, struct shim_gpu_ticket *ticket);
void shim_gpu_after(struct shim_gpu_ticket *ticket);

/* Set the share in percent (1-100; 100 meters without holding back) or 0 for none (metering
 * stops). 0, or -EINVAL. */
int shim_gpu_set_share(int percent);

/* The control socket's "limit" requests: "limit" (report) and "limit gpu=PERCENT|off".
 * Writes one JSON line (with its newline) into reply; 0, or -ENOENT for another request. */
int shim_gpu_limit_request(const char *request, char *reply, size_t len);

/* For status: `,"gpu_share":N,...` (nothing while no share was ever set); its length. */
size_t shim_gpu_status_json(char *buf, size_t len);

/* cudaDeviceReset destroyed the events of the current device: forget them. */
void shim_gpu_device_reset(void);

#endif
