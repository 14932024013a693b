/* Description: shards per GPU from gres.conf, the M of a job's N/M memory limit: one GPU, GPUs
 * named by a File range or a Count, lines for other nodes skipped, comments ignored, and the
 * files it must refuse (no shards, uneven shards, missing file). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gres_shards.h"
#include "test.h"

static char path[] = "/tmp/cudaw-gres-XXXXXX";

static int shards_of(const char *text, unsigned *per_gpu) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL, "cannot write %s", path);
  fputs(text, f);
  fclose(f);
  char why[256] = "";
  *per_gpu = 0;
  int rc = gres_shards_per_gpu(path, "node1", per_gpu, why, sizeof why);
  if (rc) fprintf(stderr, "refused as expected? %s\n", why);
  return rc;
}

int main(void) {
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  close(fd);
  unsigned m;
  CHECK_EQ(shards_of("AutoDetect=off\nName=gpu File=/dev/nvidia0\nName=shard Count=4 File=/dev/nvidia0\n", &m), 0);
  CHECK_EQ(m, 4);
  CHECK_EQ(shards_of("# two GPUs\nName=gpu File=/dev/nvidia[0-1]   # both\nName=shard Count=16\n", &m), 0);
  CHECK_EQ(m, 8);
  CHECK_EQ(shards_of("Name=gpu Type=h100 File=/dev/nvidia[0,2-3]\nname=shard count=12\n", &m), 0);
  CHECK_EQ(m, 4);
  CHECK_EQ(shards_of("NodeName=node1 Name=gpu Count=2\nNodeName=node1 Name=shard Count=8\n"
                     "NodeName=other Name=gpu Count=8\nNodeName=other Name=shard Count=64\n", &m), 0);
  CHECK_EQ(m, 4);
  CHECK_EQ(shards_of("Name=gpu File=/dev/nvidia0\n", &m), -ENODATA);
  CHECK_EQ(shards_of("Name=gpu File=/dev/nvidia[0-2]\nName=shard Count=8\n", &m), -EINVAL);
  unlink(path);
  char why[256];
  CHECK_EQ(gres_shards_per_gpu(path, "node1", &m, why, sizeof why), -ENOENT);
  return 0;
}
