/* k8s: the node's description (its GPUs), the container edits that put a container under cudaw,
 * and the CDI spec that names them. The spec writer (cudaw cdi generate) and the device plugin
 * build their edits with the same function, so a kubelet without CDI gets what CDI would give. */
#ifndef CUDAW_K8S_CDI_H
#define CUDAW_K8S_CDI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define K8S_MAX_GPUS 16
#define K8S_MAX_SHARES 64      /* shares per GPU */
#define K8S_MAX_EXTRA_ENV 16   /* --env NAME=VALUE */
#define K8S_PATH_MAX 512
#define CDI_KIND "cudaw.io/gpu"
#define CDI_DEFAULT_VERSION "1.1.0" /* the CDI spec's current published version */

/* The default host places: the system cudawd's socket, and the directory under which the
 * programs of containers make their run dirs (pidns-<inode>-uid-<uid>, one per pid namespace and user). */
#define K8S_DEFAULT_CUDAWD_SOCKET "/run/cudaw/cudawd.sock"
#define K8S_DEFAULT_CONTAINERS_DIR CKPT_CONTAINERS_DIR /* where cudaw-ctl list looks */

struct k8s_node {
  int gpus;
  uint64_t memory[K8S_MAX_GPUS]; /* bytes per GPU */
  bool healthy[K8S_MAX_GPUS];
  char source[64];               /* "driver", "emulated device", "options" */
};

/* How containers get cudaw: where its library is on the host (mounted at the same path in the
 * container), the real runtime it forwards to, cudawd's socket, and options passed through. */
struct k8s_edits_config {
  char libdir[K8S_PATH_MAX];       /* holds libcudart.so.13 */
  char real_cudart[K8S_PATH_MAX];  /* mounted and named by CUDAW_REAL_CUDART; "" = the image's */
  char cudawd_socket[K8S_PATH_MAX];
  char containers_dir[K8S_PATH_MAX];
  const char *extra_env[K8S_MAX_EXTRA_ENV]; /* NAME=VALUE, CUDAW_* only */
  int extra_env_count;
};

/* One container's edits: environment and read-only-or-not bind mounts (host path = container
 * path for everything cudaw mounts, so that the paths in the environment hold on both sides). */
#define K8S_MAX_EDIT_ENV 24
#define K8S_MAX_EDIT_MOUNTS 6
struct k8s_edits {
  char env[K8S_MAX_EDIT_ENV][K8S_PATH_MAX + 32];
  int env_count;
  struct {
    char host_path[K8S_PATH_MAX];
    char container_path[K8S_PATH_MAX];
    bool read_only;
  } mount[K8S_MAX_EDIT_MOUNTS];
  int mount_count;
};

/* The edits for `shares` of `of` shares of each GPU in `gpus` (of == 0: the whole GPU, not
 * shared, no cudawd). memory_limit: bytes for CUDAW_MEM_LIMIT (0: none). 0 or -EINVAL (a
 * message in err). */
int k8s_edits_build(const struct k8s_edits_config *config, bool shared, uint64_t memory_limit,
                    struct k8s_edits *out, char *err, size_t err_len);

/* What cudaw cdi generate writes: the devices and the spec's version. */
struct cdi_spec_request {
  char version[16];
  int shares[8];   /* the share counts N for which <gpu>-share-N devices are written */
  int share_count;
  bool skip[K8S_MAX_GPUS]; /* GPUs left out (--gpu LIST); names keep the node's numbering */
};

/* Write the CDI spec (JSON, which is also YAML) for every GPU of node: devices "<gpu>", "all",
 * and for each N: "<gpu>-share-N" (one share, 1/N of the memory) and "<gpu>-shares-K-of-N"
 * (K > 1). 0 or -errno with a message. */
int cdi_spec_write(FILE *out, const struct k8s_edits_config *config, const struct k8s_node *node,
                   const struct cdi_spec_request *request, char *err, size_t err_len);

/* The CDI device name of k of n shares of gpu ("0-share-4", "0-shares-3-of-4"). */
int cdi_share_name(int gpu, int k, int n, char *out, size_t len);

/* The node's GPUs: from the real driver when one loads (libcuda.so.1), else from the runtime
 * CUDAW_REAL_CUDART names (the emulated device in tests). 0, or -ENODEV with a message. */
int k8s_node_probe(struct k8s_node *node, char *err, size_t err_len);

/* Write s as a JSON string (quotes and escapes included). */
void k8s_json_string(FILE *out, const char *s);

#ifdef __cplusplus
}
#endif

#endif
