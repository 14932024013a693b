/* cudaw-k8s-plugin's command line: one table of options, each with its one-line meaning, which
 * also prints itself for --help. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"
#include "size.h" /* the one size grammar of every cudaw option */

enum option_id {
  OPT_SOCKET_DIR, OPT_SHARES, OPT_RESOURCE, OPT_CDI, OPT_NVIDIA, OPT_GPUS, OPT_MEMORY, OPT_LIBDIR,
  OPT_REAL_CUDART, OPT_CUDAWD_SOCKET, OPT_CONTAINERS_DIR, OPT_DEV_DIR, OPT_ENV,
};

static const struct {
  const char *name, *default_text, *meaning;
} table[] = {
  [OPT_SOCKET_DIR] = {"--socket-dir", K8S_DEFAULT_SOCKET_DIR,
                      "the kubelet's device-plugin folder (kubelet.sock, our socket)"},
  [OPT_SHARES] = {"--shares", "4", "shares per GPU (N): each is 1/N of its memory"},
  [OPT_RESOURCE] = {"--resource", K8S_DEFAULT_RESOURCE, "the resource name advertised"},
  [OPT_CDI] = {"--cdi", "on", "on: answer with CDI device names; off: mounts and environment"},
  [OPT_NVIDIA] = {"--nvidia", "on", "also hand out the GPU: nvidia.com/gpu=<gpu> (CDI) or "
                  "NVIDIA_VISIBLE_DEVICES"},
  [OPT_GPUS] = {"--gpus", "(probed)", "the node's GPU count, with --memory (else the driver's)"},
  [OPT_MEMORY] = {"--memory", "(probed)", "each GPU's memory, e.g. 80G, with --gpus"},
  [OPT_LIBDIR] = {"--libdir", "(required)", "the host folder of cudaw's library"},
  [OPT_REAL_CUDART] = {"--real-cudart", "none", "the real runtime to mount and forward to"},
  [OPT_CUDAWD_SOCKET] = {"--cudawd-socket", K8S_DEFAULT_CUDAWD_SOCKET, "the node's cudawd"},
  [OPT_CONTAINERS_DIR] = {"--containers-dir", K8S_DEFAULT_CONTAINERS_DIR,
                          "host folder of the containers' run dirs"},
  [OPT_DEV_DIR] = {"--dev-dir", "/dev", "health: a GPU is unhealthy while <dir>/nvidia<gpu> is "
                   "missing ('' = not checked)"},
  [OPT_ENV] = {"--env", "", "CUDAW_NAME=VALUE for every container (repeatable)"},
};

static void usage(FILE *out)
{
  fprintf(out, "usage: cudaw-k8s-plugin [options]\n  the kubelet device plugin (API %s) that "
          "advertises GPU shares under cudaw\n", K8S_API_VERSION);
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    fprintf(out, "  %-18s %s (default %s)\n", table[i].name, table[i].meaning, table[i].default_text);
}

static int set_path(char *dest, const char *option, const char *value, bool allow_empty)
{
  if ((allow_empty && !*value) || (value[0] == '/' && strlen(value) < K8S_PATH_MAX - 64)) {
    snprintf(dest, K8S_PATH_MAX, "%s", value);
    return 0;
  }
  fprintf(stderr, "cudaw-k8s-plugin: %s must be an absolute path (got '%s')\n", option, value);
  return 2;
}

static int on_off(const char *option, const char *value, bool *out)
{
  if (!strcmp(value, "on") || !strcmp(value, "off")) {
    *out = value[1] == 'n';
    return 0;
  }
  fprintf(stderr, "cudaw-k8s-plugin: %s takes on or off (got '%s')\n", option, value);
  return 2;
}

int k8s_plugin_options(int argc, char **argv, struct k8s_plugin_config *config)
{
  memset(config, 0, sizeof *config);
  config->shares_per_gpu = 4;
  config->cdi = config->nvidia_cdi = true;
  snprintf(config->resource, sizeof config->resource, K8S_DEFAULT_RESOURCE);
  snprintf(config->socket_dir, sizeof config->socket_dir, K8S_DEFAULT_SOCKET_DIR);
  snprintf(config->dev_dir, sizeof config->dev_dir, "/dev");
  snprintf(config->edits.cudawd_socket, K8S_PATH_MAX, K8S_DEFAULT_CUDAWD_SOCKET);
  snprintf(config->edits.containers_dir, K8S_PATH_MAX, K8S_DEFAULT_CONTAINERS_DIR);
  const char *memory = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      exit(0);
    }
    if (!strcmp(argv[i], "--version")) {
      printf("cudaw-k8s-plugin %s\n", CUDAW_VERSION);
      exit(0);
    }
    size_t id = 0;
    while (id < sizeof table / sizeof table[0] && strcmp(argv[i], table[id].name) != 0) id++;
    if (id == sizeof table / sizeof table[0] || i + 1 >= argc) {
      fprintf(stderr, "cudaw-k8s-plugin: %s %s\nTry 'cudaw-k8s-plugin --help'.\n", argv[i],
              id == sizeof table / sizeof table[0] ? "is not an option" : "needs a value");
      return 2;
    }
    const char *value = argv[++i];
    char *end;
    long n;
    int rc = 0;
    switch ((enum option_id)id) {
    case OPT_SOCKET_DIR: rc = set_path(config->socket_dir, argv[i - 1], value, false); break;
    case OPT_LIBDIR: rc = set_path(config->edits.libdir, argv[i - 1], value, false); break;
    case OPT_REAL_CUDART:
      if (strcmp(value, "none") != 0) rc = set_path(config->edits.real_cudart, argv[i - 1], value, false);
      break;
    case OPT_CUDAWD_SOCKET: rc = set_path(config->edits.cudawd_socket, argv[i - 1], value, false); break;
    case OPT_CONTAINERS_DIR: rc = set_path(config->edits.containers_dir, argv[i - 1], value, false); break;
    case OPT_DEV_DIR: rc = set_path(config->dev_dir, argv[i - 1], value, true); break;
    case OPT_CDI: rc = on_off(argv[i - 1], value, &config->cdi); break;
    case OPT_NVIDIA: rc = on_off(argv[i - 1], value, &config->nvidia_cdi); break;
    case OPT_MEMORY: memory = value; break;
    case OPT_RESOURCE:
      if (!strchr(value, '/') || strlen(value) >= sizeof config->resource) {
        fprintf(stderr, "cudaw-k8s-plugin: --resource '%s': expected domain/name\n", value);
        rc = 2;
      } else snprintf(config->resource, sizeof config->resource, "%s", value);
      break;
    case OPT_SHARES: case OPT_GPUS:
      errno = 0;
      n = strtol(value, &end, 10);
      if (errno || *end || end == value || n < 1 ||
          n > (id == OPT_SHARES ? K8S_MAX_SHARES : K8S_MAX_GPUS)) {
        fprintf(stderr, "cudaw-k8s-plugin: %s '%s': expected 1-%d\n", argv[i - 1], value,
                id == OPT_SHARES ? K8S_MAX_SHARES : K8S_MAX_GPUS);
        rc = 2;
      } else if (id == OPT_SHARES) config->shares_per_gpu = (int)n;
      else config->given_gpus = (int)n;
      break;
    case OPT_ENV:
      if (config->edits.extra_env_count >= K8S_MAX_EXTRA_ENV) {
        fprintf(stderr, "cudaw-k8s-plugin: at most %d --env\n", K8S_MAX_EXTRA_ENV);
        rc = 2;
      } else config->edits.extra_env[config->edits.extra_env_count++] = value;
      break;
    }
    if (rc) return rc;
  }
  if ((config->given_gpus != 0) != (memory != NULL) ||
      (memory && vmem_parse_size(memory, 0, &config->given_memory) != 0)) {
    fprintf(stderr, "cudaw-k8s-plugin: describe the node with both --gpus N and --memory SIZE "
            "(e.g. 80G)\n");
    return 2;
  }
  if (!config->edits.libdir[0]) {
    fprintf(stderr, "cudaw-k8s-plugin: --libdir (the host folder of cudaw's library) is required\n");
    return 2;
  }
  return 0;
}
