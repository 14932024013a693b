/* The device plugin's logic: device ids, allocation answers, preferred allocations, health and
 * kubelet restarts. No gRPC here: plugin_grpc.cc calls these with plain strings. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "plugin.h"

int k8s_device_id(int gpu, int share, char *out, size_t len)
{
  int n = snprintf(out, len, "gpu%d-share%d", gpu, share);
  return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int k8s_device_parse(const struct k8s_plugin_config *config, const struct k8s_node *node,
                     const char *id, int *gpu, int *share)
{
  int g, s, end = 0;
  if (strlen(id) >= K8S_ID_MAX || sscanf(id, "gpu%d-share%d%n", &g, &s, &end) != 2 ||
      (size_t)end != strlen(id))
    return -ENOENT;
  char canonical[K8S_ID_MAX]; /* "gpu01-share+2" parses too: only the exact spelling is ours */
  if (k8s_device_id(g, s, canonical, sizeof canonical) != 0 || strcmp(canonical, id) != 0 ||
      g < 0 || g >= node->gpus || s < 0 || s >= config->shares_per_gpu)
    return -ENOENT;
  *gpu = g;
  *share = s;
  return 0;
}

void k8s_devices_each(const struct k8s_plugin_config *config, const struct k8s_node *node,
                      void (*each)(const char *id, bool healthy, void *arg), void *arg)
{
  char id[K8S_ID_MAX];
  for (int g = 0; g < node->gpus; g++)
    for (int s = 0; s < config->shares_per_gpu; s++) {
      k8s_device_id(g, s, id, sizeof id);
      each(id, node->healthy[g], arg);
    }
}

int k8s_allocate(const struct k8s_plugin_config *config, const struct k8s_node *node,
                 const char *const *ids, int count, struct k8s_answer *out, char *err,
                 size_t err_len)
{
  memset(out, 0, sizeof *out);
  if (count <= 0) {
    snprintf(err, err_len, "an Allocate request for a container names no device");
    return -EINVAL;
  }
  bool taken[K8S_MAX_GPUS][K8S_MAX_SHARES] = {{false}};
  for (int i = 0; i < count; i++) {
    int g, s;
    if (!ids[i] || k8s_device_parse(config, node, ids[i], &g, &s) != 0) {
      snprintf(err, err_len, "unknown device id '%.40s' (this node has gpu0-share0 .. gpu%d-share%d)",
               ids[i] ? ids[i] : "(null)", node->gpus - 1, config->shares_per_gpu - 1);
      return -ENOENT;
    }
    if (taken[g][s]) {
      snprintf(err, err_len, "device id '%s' named twice for one container", ids[i]);
      return -EINVAL;
    }
    if (!node->healthy[g]) {
      snprintf(err, err_len, "device '%s': GPU %d is unhealthy", ids[i], g);
      return -EIO;
    }
    taken[g][s] = true;
    out->shares[g]++;
  }
  /* The least any used GPU gives: CUDAW_MEM_LIMIT is one quota for every device the program
   * sees, and more than its shares on some GPU would be another container's memory. */
  int least_gpu = -1;
  uint64_t n = (uint64_t)config->shares_per_gpu;
  for (int g = 0; g < node->gpus; g++) {
    if (!out->shares[g]) continue;
    uint64_t bytes = node->memory[g] / n * (uint64_t)out->shares[g];
    if (least_gpu < 0 || bytes < out->memory_limit) out->memory_limit = bytes, least_gpu = g;
  }
  int rc = k8s_edits_build(&config->edits, true, out->memory_limit, &out->edits, err, err_len);
  if (rc) return rc;
  char visible[4 * K8S_MAX_GPUS] = "";
  for (int g = 0; g < node->gpus; g++) {
    if (!out->shares[g]) continue;
    size_t used = strlen(visible);
    snprintf(visible + used, sizeof visible - used, "%s%d", used ? "," : "", g);
    if (config->cdi && config->nvidia_cdi)
      snprintf(out->cdi[out->cdi_count++], sizeof out->cdi[0], "nvidia.com/gpu=%d", g);
  }
  if (config->cdi) {
    char name[64];
    cdi_share_name(least_gpu, out->shares[least_gpu], config->shares_per_gpu, name, sizeof name);
    snprintf(out->cdi[out->cdi_count++], sizeof out->cdi[0], "%s=%s", CDI_KIND, name);
  } else if (config->nvidia_cdi && out->edits.env_count < K8S_MAX_EDIT_ENV) {
    snprintf(out->edits.env[out->edits.env_count++], sizeof out->edits.env[0],
             "NVIDIA_VISIBLE_DEVICES=%s", visible);
  }
  return 0;
}

int k8s_preferred(const struct k8s_plugin_config *config, const struct k8s_node *node,
                  const char *const *available, int available_count, const char *const *must,
                  int must_count, int size, int *chosen, char *err, size_t err_len)
{
  if (size <= 0 || size > available_count || must_count > size) {
    snprintf(err, err_len, "cannot choose %d of %d devices (%d required)", size, available_count,
             must_count);
    return -EINVAL;
  }
  int gpu_of[K8S_MAX_GPUS * K8S_MAX_SHARES], left[K8S_MAX_GPUS] = {0}, count = 0;
  bool picked[K8S_MAX_GPUS * K8S_MAX_SHARES] = {false}, used_gpu[K8S_MAX_GPUS] = {false};
  if (available_count > K8S_MAX_GPUS * K8S_MAX_SHARES) available_count = K8S_MAX_GPUS * K8S_MAX_SHARES;
  for (int i = 0; i < available_count; i++) {
    int s;
    if (k8s_device_parse(config, node, available[i], &gpu_of[i], &s) != 0) {
      snprintf(err, err_len, "unknown device id '%.40s' among the available ones", available[i]);
      return -ENOENT;
    }
    left[gpu_of[i]]++;
  }
  for (int m = 0; m < must_count; m++) {
    int i = 0;
    while (i < available_count && (picked[i] || strcmp(available[i], must[m]) != 0)) i++;
    if (i == available_count) {
      snprintf(err, err_len, "required device '%.40s' is not available", must[m]);
      return -EINVAL;
    }
    picked[i] = true, used_gpu[gpu_of[i]] = true, left[gpu_of[i]]--;
    chosen[count++] = i;
  }
  while (count < size) {
    /* A GPU already used first, then the one whose free shares fit the rest most tightly,
     * else the one with the most: few GPUs per container, big holes kept for big requests. */
    int need = size - count, best = -1;
    for (int g = 0; g < node->gpus; g++) {
      if (!left[g]) continue;
      if (best < 0) { best = g; continue; }
      bool g_fits = left[g] >= need, best_fits = left[best] >= need;
      if (used_gpu[g] != used_gpu[best]) { if (used_gpu[g]) best = g; continue; }
      if (g_fits != best_fits) { if (g_fits) best = g; continue; }
      if (g_fits ? left[g] < left[best] : left[g] > left[best]) best = g;
    }
    if (best < 0) break;
    for (int i = 0; i < available_count && count < size; i++)
      if (!picked[i] && gpu_of[i] == best) {
        picked[i] = true, left[best]--;
        chosen[count++] = i;
      }
    used_gpu[best] = true;
  }
  return count;
}

bool k8s_health_update(const struct k8s_plugin_config *config, struct k8s_node *node)
{
  if (!config->dev_dir[0]) return false;
  bool changed = false;
  for (int g = 0; g < node->gpus; g++) {
    char path[K8S_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/nvidia%d", config->dev_dir, g);
    bool healthy = access(path, F_OK) == 0;
    if (healthy != node->healthy[g]) {
      fprintf(stderr, "cudaw-k8s: GPU %d is %s (%s %s)\n", g, healthy ? "healthy again" : "unhealthy",
              path, healthy ? "is back" : "is gone");
      node->healthy[g] = healthy;
      changed = true;
    }
  }
  return changed;
}

bool k8s_kubelet_restarted(const char *socket_path, ino_t *seen)
{
  struct stat st;
  if (stat(socket_path, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    *seen = 0; /* gone: whatever appears next is a new kubelet, even at a reused inode number */
    return false;
  }
  if (st.st_ino == *seen) return false;
  *seen = st.st_ino;
  return true;
}
