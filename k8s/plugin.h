/* k8s: the device plugin's logic, in C; plugin_grpc.cc only translates the kubelet's messages to
 * and from these calls. Devices are N shares per GPU (1/N of its memory each), advertised as
 * cudaw.io/gpu-share; an allocation becomes CDI device names, or the same mounts and
 * environment for kubelets without CDI. */
#ifndef CUDAW_K8S_PLUGIN_H
#define CUDAW_K8S_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cdi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define K8S_DEFAULT_RESOURCE "cudaw.io/gpu-share"
#define K8S_DEFAULT_SOCKET_DIR "/var/lib/kubelet/device-plugins"
#define K8S_KUBELET_SOCKET "kubelet.sock"
#define K8S_PLUGIN_ENDPOINT "cudaw-gpu-share.sock"
#define K8S_API_VERSION "v1beta1"
#define K8S_ID_MAX 32

struct k8s_plugin_config {
  struct k8s_edits_config edits;
  int shares_per_gpu;           /* N */
  bool cdi;                     /* answer with CDI device names (else mounts and environment) */
  bool nvidia_cdi;              /* also name nvidia.com/gpu=<gpu> (CDI) or NVIDIA_VISIBLE_DEVICES */
  char resource[128];
  char socket_dir[K8S_PATH_MAX];
  char dev_dir[K8S_PATH_MAX];   /* health: <dev_dir>/nvidia<gpu> must exist; "" = not checked */
  int given_gpus;               /* --gpus N --memory SIZE: the node described, not probed */
  uint64_t given_memory;
};

/* The answer for one container. */
#define K8S_MAX_CDI_NAMES (K8S_MAX_GPUS + 1)
struct k8s_answer {
  char cdi[K8S_MAX_CDI_NAMES][96]; /* fully qualified, e.g. cudaw.io/gpu=0-shares-3-of-4 */
  int cdi_count;
  struct k8s_edits edits;          /* mounts and environment (without CDI) */
  uint64_t memory_limit;           /* CUDAW_MEM_LIMIT in bytes */
  int shares[K8S_MAX_GPUS];        /* shares granted per GPU */
};

/* The parsed command line; 0, or 2 (usage) with a message on stderr. */
int k8s_plugin_options(int argc, char **argv, struct k8s_plugin_config *config);

/* Device id of share `share` of `gpu` ("gpu0-share3"), and back: 0 or -ENOENT when the id is
 * not one of this node's (malformed, a GPU it lacks, a share past N). */
int k8s_device_id(int gpu, int share, char *out, size_t len);
int k8s_device_parse(const struct k8s_plugin_config *config, const struct k8s_node *node,
                     const char *id, int *gpu, int *share);

/* Every device, in order, for ListAndWatch: calls each(id, healthy, arg). */
void k8s_devices_each(const struct k8s_plugin_config *config, const struct k8s_node *node,
                      void (*each)(const char *id, bool healthy, void *arg), void *arg);

/* One container's Allocate: ids must be known, distinct, of healthy GPUs. The memory limit is
 * the shares' memory on the GPU where it is least (CUDAW_MEM_LIMIT applies to each device).
 * 0, or -EINVAL/-ENOENT/-EIO with a one-line reason in err. */
int k8s_allocate(const struct k8s_plugin_config *config, const struct k8s_node *node,
                 const char *const *ids, int count, struct k8s_answer *out, char *err,
                 size_t err_len);

/* GetPreferredAllocation for one container: `size` ids out of `available` (which must hold
 * `must`), packed onto as few GPUs as possible. chosen[] gets indices into available.
 * Returns how many were chosen, or -EINVAL with a reason. */
int k8s_preferred(const struct k8s_plugin_config *config, const struct k8s_node *node,
                  const char *const *available, int available_count, const char *const *must,
                  int must_count, int size, int *chosen, char *err, size_t err_len);

/* Re-reads each GPU's health; true when one changed (ListAndWatch then sends the list again). */
bool k8s_health_update(const struct k8s_plugin_config *config, struct k8s_node *node);

/* True when the kubelet's socket was (re)created since the last call: a kubelet restart, after
 * which the plugin must register again. *seen holds the socket's inode (0: none yet). */
bool k8s_kubelet_restarted(const char *socket_path, ino_t *seen);

#ifdef __cplusplus
}
#endif

#endif
