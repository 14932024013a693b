/* vmem_parse_size on its own (size.c): for the Slurm plugin, which links nothing else of cudaw. */
#ifndef CUDAW_VMEM_SIZE_H
#define CUDAW_VMEM_SIZE_H

#include <stdint.h>

/* Parse a size: plain bytes, a K/M/G/T suffix (binary, optional trailing B/iB, fractions
 * allowed: "1.5G"), or "N%" of device_total (refused when device_total is 0). -EINVAL for
 * anything else ("1.2.3G", signs, hex, exponents), 0 or overflow. */
int vmem_parse_size(const char *text, uint64_t device_total, uint64_t *out);

#endif
