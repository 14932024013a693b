/* The container edits that put a container under cudaw, and the CDI spec (kind cudaw.io/gpu)
 * made of them. The spec carries cudaw's part only: the GPU itself comes from NVIDIA's
 * nvidia.com/gpu spec, named next to ours (docs/kubernetes.md). JSON is written by hand (a few
 * fixed shapes); tests read it back with jansson. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdi.h"

#ifndef CUDAW_LIB_NAME
#define CUDAW_LIB_NAME "libcudart.so.13"
#endif

static int add_env(struct k8s_edits *out, char *err, size_t err_len, const char *format, ...)
    __attribute__((format(printf, 4, 5)));

static int add_env(struct k8s_edits *out, char *err, size_t err_len, const char *format, ...)
{
  if (out->env_count >= K8S_MAX_EDIT_ENV) {
    snprintf(err, err_len, "too many environment variables (at most %d)", K8S_MAX_EDIT_ENV);
    return -EINVAL;
  }
  va_list args;
  va_start(args, format);
  int n = vsnprintf(out->env[out->env_count], sizeof out->env[0], format, args);
  va_end(args);
  if (n < 0 || (size_t)n >= sizeof out->env[0]) {
    snprintf(err, err_len, "an environment variable is too long");
    return -EINVAL;
  }
  out->env_count++;
  return 0;
}

static void add_mount(struct k8s_edits *out, const char *path, bool read_only)
{
  snprintf(out->mount[out->mount_count].host_path, K8S_PATH_MAX, "%s", path);
  snprintf(out->mount[out->mount_count].container_path, K8S_PATH_MAX, "%s", path);
  out->mount[out->mount_count].read_only = read_only;
  out->mount_count++;
}

int k8s_edits_build(const struct k8s_edits_config *config, bool shared, uint64_t memory_limit,
                    struct k8s_edits *out, char *err, size_t err_len)
{
  memset(out, 0, sizeof *out);
  if (config->libdir[0] != '/') {
    snprintf(err, err_len, "cudaw's library folder must be an absolute path (got '%s')",
             config->libdir);
    return -EINVAL;
  }
  int rc = add_env(out, err, err_len, "LD_PRELOAD=%s/%s", config->libdir, CUDAW_LIB_NAME);
  add_mount(out, config->libdir, true);
  if (!rc && config->real_cudart[0]) {
    rc = add_env(out, err, err_len, "CUDAW_REAL_CUDART=%s", config->real_cudart);
    add_mount(out, config->real_cudart, true);
  }
  if (!rc && memory_limit) rc = add_env(out, err, err_len, "CUDAW_MEM_LIMIT=%" PRIu64, memory_limit);
  /* The run dir is one per pid namespace (CUDAW_RUN_DIR's %n and %u), under a host folder every
   * container mounts: pids repeat between containers, and the host's cudaw-ctl lists the
   * programs there and reaches each by its host pid. */
  if (!rc) rc = add_env(out, err, err_len, "CUDAW_RUN_DIR=%s/pidns-%%n-uid-%%u", config->containers_dir);
  add_mount(out, config->containers_dir, false);
  if (!rc && shared) {
    rc = add_env(out, err, err_len, "CUDAW_SHARE=1");
    if (!rc) rc = add_env(out, err, err_len, "CUDAW_SCHED_SOCKET=%s", config->cudawd_socket);
    /* A folder of cudawd's own is mounted whole, so that a restarted cudawd's new socket is seen
     * in running containers; /run/cudaw also holds root's programs' sockets, so there only the
     * socket file is (docs/kubernetes.md, Limits). */
    char folder[K8S_PATH_MAX];
    snprintf(folder, sizeof folder, "%s", config->cudawd_socket);
    char *slash = strrchr(folder, '/');
    if (slash && slash != folder) *slash = '\0';
    add_mount(out, strcmp(folder, "/run/cudaw") == 0 ? config->cudawd_socket : folder, false);
  }
  for (int i = 0; !rc && i < config->extra_env_count; i++) {
    const char *e = config->extra_env[i], *eq = strchr(e, '=');
    if (strncmp(e, "CUDAW_", 6) != 0 || !eq || eq == e + 6) {
      snprintf(err, err_len, "--env '%s': expected CUDAW_NAME=VALUE", e);
      return -EINVAL;
    }
    rc = add_env(out, err, err_len, "%s", e);
  }
  return rc;
}

void k8s_json_string(FILE *out, const char *s)
{
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
    else if (*p < 0x20) fprintf(out, "\\u%04x", *p);
    else fputc(*p, out);
  }
  fputc('"', out);
}

static void write_edits(FILE *out, const struct k8s_edits *edits)
{
  fprintf(out, "{\n        \"env\": [");
  for (int i = 0; i < edits->env_count; i++) {
    fprintf(out, "%s\n          ", i ? "," : "");
    k8s_json_string(out, edits->env[i]);
  }
  fprintf(out, "\n        ],\n        \"mounts\": [");
  for (int i = 0; i < edits->mount_count; i++) {
    fprintf(out, "%s\n          {\"hostPath\": ", i ? "," : "");
    k8s_json_string(out, edits->mount[i].host_path);
    fprintf(out, ", \"containerPath\": ");
    k8s_json_string(out, edits->mount[i].container_path);
    fprintf(out, ", \"type\": \"bind\", \"options\": [\"%s\", \"rbind\", \"nosuid\", \"nodev\"]}",
            edits->mount[i].read_only ? "ro" : "rw");
  }
  fprintf(out, "\n        ]\n      }");
}

int cdi_share_name(int gpu, int k, int n, char *out, size_t len)
{
  int written = k == 1 ? snprintf(out, len, "%d-share-%d", gpu, n)
                       : snprintf(out, len, "%d-shares-%d-of-%d", gpu, k, n);
  return written < 0 || (size_t)written >= len ? -ENAMETOOLONG : 0;
}

static int write_device(FILE *out, bool *first, const char *name,
                        const struct k8s_edits_config *config, bool shared, uint64_t limit,
                        char *err, size_t err_len)
{
  struct k8s_edits edits;
  int rc = k8s_edits_build(config, shared, limit, &edits, err, err_len);
  if (rc) return rc;
  fprintf(out, "%s\n    {\n      \"name\": ", *first ? "" : ",");
  k8s_json_string(out, name);
  fprintf(out, ",\n      \"containerEdits\": ");
  write_edits(out, &edits);
  fprintf(out, "\n    }");
  *first = false;
  return 0;
}

int cdi_spec_write(FILE *out, const struct k8s_edits_config *config, const struct k8s_node *node,
                   const struct cdi_spec_request *request, char *err, size_t err_len)
{
  if (node->gpus <= 0) {
    snprintf(err, err_len, "no GPU to describe (%s)", node->source);
    return -ENODEV;
  }
  for (int s = 0; s < request->share_count; s++)
    if (request->shares[s] < 1 || request->shares[s] > K8S_MAX_SHARES) {
      snprintf(err, err_len, "shares per GPU must be 1-%d (got %d)", K8S_MAX_SHARES,
               request->shares[s]);
      return -EINVAL;
    }
  fprintf(out, "{\n  \"cdiVersion\": ");
  k8s_json_string(out, request->version);
  fprintf(out, ",\n  \"kind\": \"%s\",\n  \"devices\": [", CDI_KIND);
  bool first = true;
  char name[64];
  int rc = 0;
  for (int g = 0; !rc && g < node->gpus; g++) {
    if (request->skip[g]) continue;
    snprintf(name, sizeof name, "%d", g);
    rc = write_device(out, &first, name, config, false, 0, err, err_len);
    for (int s = 0; !rc && s < request->share_count; s++) {
      int n = request->shares[s];
      for (int k = 1; !rc && k <= n; k++) {
        cdi_share_name(g, k, n, name, sizeof name);
        rc = write_device(out, &first, name, config, true, node->memory[g] / (uint64_t)n * (uint64_t)k,
                          err, err_len);
      }
    }
  }
  if (!rc) rc = write_device(out, &first, "all", config, false, 0, err, err_len);
  fprintf(out, "\n  ]\n}\n");
  if (!rc && ferror(out)) {
    snprintf(err, err_len, "writing the spec: %s", strerror(errno));
    rc = -EIO;
  }
  return rc;
}
