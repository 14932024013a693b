/* How many shards each GPU of this node has, from Slurm's gres.conf: the shard Count of the
 * lines for this node divided by its GPUs (Count=, or the devices File= names). */
#ifndef CUDAW_GRES_SHARDS_H
#define CUDAW_GRES_SHARDS_H

#include <stddef.h>

/* Reads `path` for node `host` (lines with NodeName= apply when it names host exactly or is a
 * host list with brackets, which is not expanded). 0 with *per_gpu set, or -errno with one line
 * in why: -ENOENT no file, -ENODATA no shard or no GPU lines, -EINVAL shards that do not divide
 * evenly among the GPUs. */
int gres_shards_per_gpu(const char *path, const char *host, unsigned *per_gpu, char *why,
                        size_t why_len);

#endif
