/* cudaw-cdi: `cudaw cdi generate` (the launcher execs this with --libdir first). Writes the CDI
 * spec for the node's GPUs, probed or described by options; --output replaces the file
 * atomically, since container engines watch /etc/cdi and /var/run/cdi. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdi.h"
#include "size.h" /* the one size grammar of every cudaw option */

#define TRY_HELP "Try 'cudaw cdi --help'.\n"

static void usage(FILE *out)
{
  fprintf(out,
    "usage: cudaw cdi generate [--output FILE] [options]\n"
    "  writes a CDI spec (kind " CDI_KIND ") whose devices put a container under cudaw:\n"
    "  <gpu> and all (cudaw only), <gpu>-share-N (1/N of the GPU's memory, under cudawd) and\n"
    "  <gpu>-shares-K-of-N. The GPU itself comes from NVIDIA's nvidia.com/gpu spec: name both.\n"
    "  --output FILE          write there (atomically), e.g. /etc/cdi/cudaw.json; default stdout\n"
    "  --gpus N --memory SIZE describe the node instead of asking the driver\n"
    "  --gpu LIST             only these GPUs (e.g. 0,2); a GPU the node lacks is an error\n"
    "  --shares LIST          share counts N per GPU (default 2,4)\n"
    "  --real-cudart PATH     the real runtime to mount and forward to (default\n"
    "                         $CUDAW_REAL_CUDART, else the toolkit's if present; 'none': the\n"
    "                         container's own)\n"
    "  --cudawd-socket PATH   the node's cudawd (default " K8S_DEFAULT_CUDAWD_SOCKET ")\n"
    "  --containers-dir DIR   host folder of the containers' run dirs (default\n"
    "                         " K8S_DEFAULT_CONTAINERS_DIR ")\n"
    "  --env CUDAW_NAME=VALUE an option for every device (repeatable)\n"
    "  --cdi-version V        the spec version written (default " CDI_DEFAULT_VERSION "; 0.5.0\n"
    "                         for older engines)\n");
}

static int parse_list(const char *text, int *out, int max, int low, int high)
{
  int n = 0;
  const char *p = text;
  while (*p) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (errno || end == p || v < low || v > high || n >= max) return -EINVAL;
    out[n++] = (int)v;
    if (*end == ',') end++;
    else if (*end) return -EINVAL;
    p = end;
  }
  return n;
}

static int write_output(const char *path, const struct k8s_edits_config *config,
                        const struct k8s_node *node, const struct cdi_spec_request *request)
{
  char err[2 * K8S_PATH_MAX + 100] = "", tmp[K8S_PATH_MAX + 16];
  FILE *out = stdout;
  if (path) {
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    if (!(out = fopen(tmp, "w"))) {
      fprintf(stderr, "cudaw cdi: cannot write %s: %s\n", tmp, strerror(errno));
      return 1;
    }
  }
  int rc = cdi_spec_write(out, config, node, request, err, sizeof err);
  if (path) {
    if (fclose(out) != 0 && !rc) rc = -EIO, snprintf(err, sizeof err, "%s: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0) {
      rc = -errno;
      snprintf(err, sizeof err, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    }
    if (rc) unlink(tmp);
  }
  if (rc) {
    fprintf(stderr, "cudaw cdi: %s\n", err);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv)
{
  struct k8s_edits_config config = {.extra_env_count = 0};
  struct cdi_spec_request request = {.version = CDI_DEFAULT_VERSION, .shares = {2, 4},
                                     .share_count = 2};
  const char *output = NULL, *gpus_text = NULL, *memory_text = NULL, *select_text = NULL;
  const char *real = getenv("CUDAW_REAL_CUDART");
  snprintf(config.cudawd_socket, sizeof config.cudawd_socket, K8S_DEFAULT_CUDAWD_SOCKET);
  snprintf(config.containers_dir, sizeof config.containers_dir, K8S_DEFAULT_CONTAINERS_DIR);
  if (!real || !*real) real = access("/usr/local/cuda/lib64/libcudart.so.13", R_OK) == 0
                                  ? "/usr/local/cuda/lib64/libcudart.so.13" : "none";
  int i = 1;
  if (i + 1 < argc && !strcmp(argv[i], "--libdir")) {
    snprintf(config.libdir, sizeof config.libdir, "%s", argv[i + 1]);
    i += 2;
  }
  if (i >= argc || strcmp(argv[i], "generate") != 0) {
    if (i < argc && (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))) {
      usage(stdout);
      return 0;
    }
    if (i < argc && !strcmp(argv[i], "--version")) {
      printf("cudaw cdi %s\n", CUDAW_VERSION);
      return 0;
    }
    fprintf(stderr, "cudaw cdi: expected 'generate'%s%s\n" TRY_HELP, i < argc ? ", got " : "",
            i < argc ? argv[i] : "");
    return 2;
  }
  for (i++; i < argc; i++) {
    const char *opt = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
      usage(stdout);
      return 0;
    }
    if (!value) {
      fprintf(stderr, "cudaw cdi: %s needs a value (or is unknown)\n" TRY_HELP, opt);
      return 2;
    }
    i++;
    if (!strcmp(opt, "--output")) output = value;
    else if (!strcmp(opt, "--gpus")) gpus_text = value;
    else if (!strcmp(opt, "--memory")) memory_text = value;
    else if (!strcmp(opt, "--gpu")) select_text = value;
    else if (!strcmp(opt, "--real-cudart")) real = value;
    else if (!strcmp(opt, "--libdir")) snprintf(config.libdir, sizeof config.libdir, "%s", value);
    else if (!strcmp(opt, "--cudawd-socket") || !strcmp(opt, "--containers-dir")) {
      char *dest = !strcmp(opt, "--cudawd-socket") ? config.cudawd_socket : config.containers_dir;
      if (value[0] != '/' || strlen(value) >= K8S_PATH_MAX - 64) {
        fprintf(stderr, "cudaw cdi: %s must be an absolute path (got '%s')\n", opt, value);
        return 2;
      }
      snprintf(dest, K8S_PATH_MAX, "%s", value);
    } else if (!strcmp(opt, "--env")) {
      if (config.extra_env_count >= K8S_MAX_EXTRA_ENV) {
        fprintf(stderr, "cudaw cdi: at most %d --env\n", K8S_MAX_EXTRA_ENV);
        return 2;
      }
      config.extra_env[config.extra_env_count++] = value;
    } else if (!strcmp(opt, "--shares")) {
      request.share_count = parse_list(value, request.shares, 8, 1, K8S_MAX_SHARES);
      if (request.share_count <= 0) {
        fprintf(stderr, "cudaw cdi: --shares '%s': expected up to 8 counts 1-%d, e.g. 2,4\n",
                value, K8S_MAX_SHARES);
        return 2;
      }
    } else if (!strcmp(opt, "--cdi-version")) {
      if (strspn(value, "0123456789.") != strlen(value) || strlen(value) >= sizeof request.version) {
        fprintf(stderr, "cudaw cdi: --cdi-version '%s': expected a version like 1.1.0\n", value);
        return 2;
      }
      snprintf(request.version, sizeof request.version, "%s", value);
    } else {
      fprintf(stderr, "cudaw cdi: unknown option '%s'\n" TRY_HELP, opt);
      return 2;
    }
  }
  if (!config.libdir[0]) {
    fprintf(stderr, "cudaw cdi: cudaw's library folder is unknown (run it as 'cudaw cdi', or "
            "give --libdir)\n");
    return 2;
  }
  if (strcmp(real, "none") != 0) {
    if (real[0] != '/' || access(real, R_OK) != 0) {
      fprintf(stderr, "cudaw cdi: --real-cudart %s: %s\n", real,
              real[0] != '/' ? "must be an absolute path" : strerror(errno));
      return 2;
    }
    snprintf(config.real_cudart, sizeof config.real_cudart, "%s", real);
  }

  struct k8s_node node = {.gpus = 0};
  char err[300] = "";
  if (gpus_text || memory_text) {
    int n;
    uint64_t bytes;
    if (!gpus_text || !memory_text || parse_list(gpus_text, &n, 1, 1, K8S_MAX_GPUS) != 1 ||
        vmem_parse_size(memory_text, 0, &bytes) != 0) {
      fprintf(stderr, "cudaw cdi: describe the node with both --gpus N (1-%d) and --memory SIZE "
              "(e.g. 80G)\n", K8S_MAX_GPUS);
      return 2;
    }
    node.gpus = n;
    for (int g = 0; g < n; g++) node.memory[g] = bytes, node.healthy[g] = true;
    snprintf(node.source, sizeof node.source, "given by --gpus");
  } else if (k8s_node_probe(&node, err, sizeof err) != 0) {
    fprintf(stderr, "cudaw cdi: %s\n", err);
    return 1;
  }
  if (select_text) {
    int chosen[K8S_MAX_GPUS], n = parse_list(select_text, chosen, K8S_MAX_GPUS, 0, 1 << 20);
    if (n <= 0) {
      fprintf(stderr, "cudaw cdi: --gpu '%s': expected GPU numbers, e.g. 0,2\n", select_text);
      return 2;
    }
    for (int j = 0; j < n; j++)
      if (chosen[j] >= node.gpus) {
        fprintf(stderr, "cudaw cdi: GPU %d does not exist: this node has %d (GPUs 0-%d, %s)\n",
                chosen[j], node.gpus, node.gpus - 1, node.source);
        return 1;
      }
    for (int g = 0; g < node.gpus; g++) request.skip[g] = true;
    for (int j = 0; j < n; j++) request.skip[chosen[j]] = false;
  }
  return write_output(output, &config, &node, &request);
}
