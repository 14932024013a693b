/* Description: the device plugin's logic without gRPC (k8s/plugin.c): 2 GPUs of 8 GiB and 12 GiB
 * with 4 shares each are 8 devices; Allocate of 1 and of 3 shares answers the CDI names
 * (nvidia.com/gpu=<gpu> and cudaw.io/gpu=<gpu>-share(s)-...) or, without CDI, the same mounts
 * and environment with CUDAW_MEM_LIMIT = shares x memory / 4; shares spread over two GPUs get
 * the smaller GPU's figure (never more than the container holds anywhere). Unknown, malformed,
 * repeated and empty ids and a lost GPU are refused with a reason. The preferred allocation
 * packs onto one GPU and keeps the required ids; health follows /dev/nvidia<gpu>; a re-created
 * kubelet.sock is seen as a restart. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "plugin.h"
#include "test.h"

static struct k8s_plugin_config config;
static struct k8s_node node;

static void count_device(const char *id, bool healthy, void *arg)
{
  int *counts = arg;
  counts[healthy]++;
  CHECK(strncmp(id, "gpu", 3) == 0);
}

static bool has_env(const struct k8s_answer *a, const char *want)
{
  for (int i = 0; i < a->edits.env_count; i++)
    if (!strcmp(a->edits.env[i], want)) return true;
  return false;
}

static int allocate(const char *const *ids, int n, struct k8s_answer *a, char *err)
{
  return k8s_allocate(&config, &node, ids, n, a, err, 200);
}

static void make_socket(const char *path)
{
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0);
  close(fd);
}

int main(void)
{
  char *argv[] = {"plugin", "--libdir", "/opt/cudaw/lib/cudaw", "--gpus", "2", "--memory", "8G",
                  "--dev-dir", "", "--env", "CUDAW_VMEM=remap", NULL};
  CHECK_EQ(k8s_plugin_options(11, argv, &config), 0);
  CHECK_EQ(config.shares_per_gpu, 4);
  CHECK(config.cdi && config.nvidia_cdi);
  CHECK(!strcmp(config.resource, "cudaw.io/gpu-share"));
  node.gpus = 2;
  node.memory[0] = 8ull << 30, node.memory[1] = 12ull << 30;
  node.healthy[0] = node.healthy[1] = true;

  int counts[2] = {0, 0};
  k8s_devices_each(&config, &node, count_device, counts);
  CHECK_EQ(counts[1], 8);
  CHECK_EQ(counts[0], 0);

  struct k8s_answer a;
  char err[200];
  /* One share of GPU 1: 3 GiB. */
  const char *one[] = {"gpu1-share2"};
  CHECK_EQ(allocate(one, 1, &a, err), 0);
  CHECK_EQ(a.memory_limit, 3ull << 30);
  CHECK_EQ(a.cdi_count, 2);
  CHECK(!strcmp(a.cdi[0], "nvidia.com/gpu=1"), "%s", a.cdi[0]);
  CHECK(!strcmp(a.cdi[1], "cudaw.io/gpu=1-share-4"), "%s", a.cdi[1]);
  /* Three shares of GPU 0: 6 GiB, the same name the CDI spec writes. */
  const char *three[] = {"gpu0-share0", "gpu0-share3", "gpu0-share1"};
  CHECK_EQ(allocate(three, 3, &a, err), 0);
  CHECK_EQ(a.memory_limit, 6ull << 30);
  char name[64];
  cdi_share_name(0, 3, 4, name, sizeof name);
  CHECK(!strcmp(a.cdi[1] + strlen("cudaw.io/gpu="), name), "%s vs %s", a.cdi[1], name);
  CHECK(!strcmp(a.cdi[1], "cudaw.io/gpu=0-shares-3-of-4"));
  /* Without CDI: mounts and environment, the memory limit among them. */
  config.cdi = false;
  CHECK_EQ(allocate(three, 3, &a, err), 0);
  CHECK_EQ(a.cdi_count, 0);
  CHECK(has_env(&a, "CUDAW_MEM_LIMIT=6442450944"));
  CHECK(has_env(&a, "CUDAW_SHARE=1"));
  CHECK(has_env(&a, "CUDAW_VMEM=remap"));
  CHECK(has_env(&a, "LD_PRELOAD=/opt/cudaw/lib/cudaw/libcudart.so.13"));
  CHECK(has_env(&a, "CUDAW_SCHED_SOCKET=/run/cudaw/cudawd.sock"));
  CHECK(has_env(&a, "NVIDIA_VISIBLE_DEVICES=0"));
  CHECK_EQ(a.edits.mount_count, 3);
  CHECK(!strcmp(a.edits.mount[0].host_path, "/opt/cudaw/lib/cudaw") && a.edits.mount[0].read_only);
  CHECK(!strcmp(a.edits.mount[1].host_path, "/run/cudaw/containers") && !a.edits.mount[1].read_only);
  CHECK(!strcmp(a.edits.mount[2].host_path, "/run/cudaw/cudawd.sock") && !a.edits.mount[2].read_only);
  /* Spread over both GPUs: 2 shares of GPU 1 (6 GiB) and 1 of GPU 0 (2 GiB): the least. */
  const char *spread[] = {"gpu1-share0", "gpu0-share2", "gpu1-share1"};
  CHECK_EQ(allocate(spread, 3, &a, err), 0);
  CHECK_EQ(a.memory_limit, 2ull << 30);
  CHECK(has_env(&a, "NVIDIA_VISIBLE_DEVICES=0,1"));
  config.cdi = true;

  /* Refusals. */
  const char *bad_ids[][2] = {{"gpu2-share0", NULL}, {"gpu0-share4", NULL}, {"gpu0-share-1", NULL},
                              {"gpu00-share1", NULL}, {"", NULL}, {"gpu0-share1x", NULL},
                              {"gpu0-share1", "gpu0-share1"}};
  const char *reasons[] = {"unknown device id", "unknown device id", "unknown device id",
                           "unknown device id", "unknown device id", "unknown device id",
                           "named twice"};
  for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
    int n = bad_ids[i][1] ? 2 : 1;
    CHECK(allocate(bad_ids[i], n, &a, err) < 0, "'%s' accepted", bad_ids[i][0]);
    CHECK(strstr(err, reasons[i]), "'%s': %s", bad_ids[i][0], err);
  }
  CHECK(allocate(one, 0, &a, err) == -EINVAL && strstr(err, "names no device"));

  /* Preferred: 3 of the 8 with gpu1-share0 required: all on GPU 1. Then 3 where GPU 0 has 3
   * free and GPU 1 has 4: the tighter fit, GPU 0. */
  const char *available[] = {"gpu0-share0", "gpu0-share1", "gpu0-share2", "gpu0-share3",
                             "gpu1-share0", "gpu1-share1", "gpu1-share2", "gpu1-share3"};
  const char *must[] = {"gpu1-share0"};
  int chosen[8];
  CHECK_EQ(k8s_preferred(&config, &node, available, 8, must, 1, 3, chosen, err, 200), 3);
  CHECK_EQ(chosen[0], 4);
  for (int i = 1; i < 3; i++) CHECK(chosen[i] >= 4, "chose %s", available[chosen[i]]);
  CHECK_EQ(k8s_preferred(&config, &node, available + 1, 7, NULL, 0, 3, chosen, err, 200), 3);
  for (int i = 0; i < 3; i++) CHECK(chosen[i] < 3, "chose %s", available[1 + chosen[i]]);
  CHECK(k8s_preferred(&config, &node, available, 8, NULL, 0, 9, chosen, err, 200) < 0);
  const char *gone[] = {"gpu7-share0"};
  CHECK(k8s_preferred(&config, &node, available, 8, gone, 1, 2, chosen, err, 200) < 0);

  /* Health: a GPU whose device node is gone is unhealthy, and cannot be allocated. */
  char dir[] = "/tmp/cudaw-k8s-dev.XXXXXX", path[128];
  CHECK(mkdtemp(dir));
  snprintf(config.dev_dir, sizeof config.dev_dir, "%s", dir);
  snprintf(path, sizeof path, "%s/nvidia0", dir);
  FILE *f = fopen(path, "w");
  CHECK(f);
  fclose(f);
  CHECK(k8s_health_update(&config, &node));
  CHECK(node.healthy[0] && !node.healthy[1]);
  CHECK(!k8s_health_update(&config, &node));
  counts[0] = counts[1] = 0;
  k8s_devices_each(&config, &node, count_device, counts);
  CHECK(counts[0] == 4 && counts[1] == 4);
  CHECK(allocate(one, 1, &a, err) == -EIO && strstr(err, "GPU 1 is unhealthy"), "%s", err);

  /* The kubelet's socket: first seen, unchanged, gone, back (a restart). */
  snprintf(path, sizeof path, "%s/kubelet.sock", dir);
  ino_t seen = 0;
  CHECK(!k8s_kubelet_restarted(path, &seen));
  make_socket(path);
  CHECK(k8s_kubelet_restarted(path, &seen));
  CHECK(!k8s_kubelet_restarted(path, &seen));
  unlink(path);
  CHECK(!k8s_kubelet_restarted(path, &seen));
  make_socket(path);
  CHECK(k8s_kubelet_restarted(path, &seen));
  unlink(path);
  snprintf(path, sizeof path, "%s/nvidia0", dir);
  unlink(path);
  rmdir(dir);
  printf("plugin logic: devices, allocations of 1 and 3 shares, %zu refusals, preferred, health, "
         "restart: ok\n", sizeof bad_ids / sizeof bad_ids[0] + 1);
  return 0;
}
