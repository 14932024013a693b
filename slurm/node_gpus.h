/* How much memory this node's GPUs have, for the plugin's check of --cudaw-mem before a task
 * starts: NVML (the driver's management library, no CUDA context), read without linking it. */
#ifndef CUDAW_NODE_GPUS_H
#define CUDAW_NODE_GPUS_H

#include <stddef.h>
#include <stdint.h>

/* The memory of this node's largest GPU, by NVML. 0 with *bytes set, or -errno with one line in
 * why: -ENOENT no NVML (no driver: the emulated device), -ENODEV no GPU, -EIO NVML failed. */
int node_gpus_largest_memory(uint64_t *bytes, char *why, size_t why_len);

#endif
