/* Reading the shard and GPU counts of one node from gres.conf (see gres_shards.h). Only what
 * the N/M limit needs: Name, Count, File and NodeName; everything else is skipped. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gres_shards.h"

/* Devices named by a File= value: "/dev/nvidia0" is 1, "/dev/nvidia[0-3]" 4, "[0,2-3]" 3. */
static unsigned long count_files(const char *value) {
  const char *open = strchr(value, '[');
  if (!open) return 1;
  unsigned long count = 0;
  const char *p = open + 1;
  while (*p && *p != ']') {
    char *end;
    unsigned long first = strtoul(p, &end, 10), last = first;
    if (end == p) return 0;
    if (*end == '-') {
      p = end + 1;
      last = strtoul(p, &end, 10);
      if (end == p || last < first) return 0;
    }
    count += last - first + 1;
    p = end;
    if (*p == ',') p++;
  }
  return *p == ']' ? count : 0;
}

/* "2K" style counts are allowed by Slurm for large gres counts. */
static unsigned long parse_count(const char *value) {
  char *end;
  unsigned long n = strtoul(value, &end, 10);
  if (end == value) return 0;
  if (*end == 'k' || *end == 'K') n *= 1024, end++;
  else if (*end == 'm' || *end == 'M') n *= 1024 * 1024, end++;
  return *end ? 0 : n;
}

int gres_shards_per_gpu(const char *path, const char *host, unsigned *per_gpu, char *why,
                        size_t why_len) {
  FILE *file = fopen(path, "re");
  if (!file) {
    int rc = -errno;
    snprintf(why, why_len, "cannot read %s: %s", path, strerror(errno));
    return rc;
  }
  unsigned long shards = 0, gpus = 0;
  char line[4096];
  while (fgets(line, sizeof line, file)) {
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char name[32] = "", node[256] = "";
    unsigned long count = 0, files = 0;
    for (char *save = NULL, *token = strtok_r(line, " \t\r\n", &save); token;
         token = strtok_r(NULL, " \t\r\n", &save)) {
      char *value = strchr(token, '=');
      if (!value) continue;
      *value++ = '\0';
      if (!strcasecmp(token, "Name")) snprintf(name, sizeof name, "%s", value);
      else if (!strcasecmp(token, "Count")) count = parse_count(value);
      else if (!strcasecmp(token, "File")) files = count_files(value);
      else if (!strcasecmp(token, "NodeName")) snprintf(node, sizeof node, "%s", value);
    }
    if (node[0] && strcmp(node, host) != 0 && !strchr(node, '[')) continue;
    if (!strcasecmp(name, "shard")) shards += count;
    else if (!strcasecmp(name, "gpu")) gpus += count ? count : files;
  }
  fclose(file);
  if (!shards || !gpus) {
    snprintf(why, why_len, "%s has no %s for node %s", path, shards ? "GPU" : "shard count", host);
    return -ENODATA;
  }
  if (shards % gpus) {
    snprintf(why, why_len, "%s: %lu shards do not divide evenly among %lu GPUs", path, shards, gpus);
    return -EINVAL;
  }
  *per_gpu = (unsigned)(shards / gpus);
  return 0;
}
