/* Description: `cudaw cdi generate` writes a CDI spec a container engine accepts: read back with
 * jansson, on the emulated device (2 devices of 1 GiB) and for a node described by options. The
 * version and kind, every device name once, whole-GPU devices without cudawd, share devices with
 * CUDAW_MEM_LIMIT = K x memory/N, cudawd's socket and the containers' run dirs mounted, cudaw's
 * library mounted read-only and preloaded. Bad requests (a GPU the node lacks, no GPU at all, a
 * half node description, a foreign --env, 0 shares) each fail with a one-line reason.
 *   usage: test_cdi CUDAW EMU            exit 0 pass, 1 fail */
#define _GNU_SOURCE
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"

static const char *cudaw, *emu;
static char tmp[] = "/tmp/cudaw-cdi.XXXXXX", libdir[1024];

/* Run `cudaw cdi generate ARGS` with ENV; stderr into err. Returns the exit code. */
static int generate(const char *env, const char *args, char *err, size_t err_len)
{
  char command[4096], err_path[1100];
  snprintf(err_path, sizeof err_path, "%s/err", tmp);
  snprintf(command, sizeof command, "env %s %s cdi generate %s 2>%s", env, cudaw, args, err_path);
  int status = system(command);
  FILE *f = fopen(err_path, "r");
  size_t n = f ? fread(err, 1, err_len - 1, f) : 0;
  err[n] = 0;
  if (f) fclose(f);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static json_t *device(json_t *spec, const char *name)
{
  size_t i;
  json_t *d;
  json_array_foreach(json_object_get(spec, "devices"), i, d)
    if (!strcmp(json_string_value(json_object_get(d, "name")), name)) return d;
  test_fail("no device %s", name);
}

static bool has_env(json_t *d, const char *want)
{
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(json_object_get(d, "containerEdits"), "env"), i, e)
    if (!strcmp(json_string_value(e), want)) return true;
  return false;
}

static bool has_env_prefix(json_t *d, const char *prefix)
{
  size_t i;
  json_t *e;
  json_array_foreach(json_object_get(json_object_get(d, "containerEdits"), "env"), i, e)
    if (!strncmp(json_string_value(e), prefix, strlen(prefix))) return true;
  return false;
}

/* The mount of host path `path`: its container path is the same, read-only as asked. */
static void check_mount(json_t *d, const char *path, bool read_only)
{
  size_t i;
  json_t *m;
  json_array_foreach(json_object_get(json_object_get(d, "containerEdits"), "mounts"), i, m) {
    if (strcmp(json_string_value(json_object_get(m, "hostPath")), path) != 0) continue;
    CHECK(!strcmp(json_string_value(json_object_get(m, "containerPath")), path));
    CHECK(!strcmp(json_string_value(json_object_get(m, "type")), "bind"));
    const char *first = json_string_value(json_array_get(json_object_get(m, "options"), 0));
    CHECK(!strcmp(first, read_only ? "ro" : "rw"), "mount %s: %s", path, first);
    return;
  }
  test_fail("device %s does not mount %s", json_string_value(json_object_get(d, "name")), path);
}

static size_t mounts(json_t *d)
{
  return json_array_size(json_object_get(json_object_get(d, "containerEdits"), "mounts"));
}

int main(int argc, char **argv)
{
  if (argc != 3) test_fail("usage: test_cdi CUDAW EMU");
  cudaw = argv[1], emu = argv[2];
  CHECK(mkdtemp(tmp));
  char command[2048], err[4096], env[2048], path[1100], want[1200];
  snprintf(command, sizeof command, "%s libdir", cudaw);
  FILE *p = popen(command, "r");
  CHECK(p && fgets(libdir, sizeof libdir, p));
  pclose(p);
  libdir[strcspn(libdir, "\n")] = 0;

  /* 1. The emulated device: two GPUs of 1 GiB, shares of 2 and 4. */
  snprintf(env, sizeof env, "CUDAW_REAL_CUDART=%s CUDAW_EMU_DEVICES=2 CUDAW_EMU_MEM=1G", emu);
  snprintf(path, sizeof path, "%s/cudaw.json", tmp);
  snprintf(command, sizeof command, "--output %s --shares 2,4 --env CUDAW_VMEM=remap "
           "--cudawd-socket /run/cudaw/sched/cudawd.sock", path);
  CHECK_EQ(generate(env, command, err, sizeof err), 0);
  json_error_t error;
  json_t *spec = json_load_file(path, 0, &error);
  CHECK(spec, "%s: %s (line %d)", path, error.text, error.line);
  CHECK(!strcmp(json_string_value(json_object_get(spec, "cdiVersion")), "1.1.0"));
  CHECK(!strcmp(json_string_value(json_object_get(spec, "kind")), "cudaw.io/gpu"));
  json_t *devices = json_object_get(spec, "devices");
  CHECK_EQ(json_array_size(devices), 2 * (1 + 2 + 4) + 1);
  size_t i, j;
  json_t *a, *b;
  json_array_foreach(devices, i, a) json_array_foreach(devices, j, b)
    CHECK(i == j || strcmp(json_string_value(json_object_get(a, "name")),
                           json_string_value(json_object_get(b, "name"))) != 0, "a name twice");
  snprintf(want, sizeof want, "LD_PRELOAD=%s/libcudart.so.13", libdir);
  const char *names[] = {"0", "1", "all", "0-share-2", "1-shares-3-of-4", "1-shares-4-of-4"};
  for (size_t n = 0; n < sizeof names / sizeof names[0]; n++) {
    json_t *d = device(spec, names[n]);
    bool shared = strchr(names[n], 's') != NULL;
    CHECK(has_env(d, want), "%s: no %s", names[n], want);
    CHECK(has_env(d, "CUDAW_VMEM=remap"), "%s: --env not passed", names[n]);
    snprintf(want + 200, 600, "CUDAW_REAL_CUDART=%s", emu);
    CHECK(has_env(d, want + 200), "%s: the real runtime is not named", names[n]);
    check_mount(d, libdir, true);
    check_mount(d, emu, true);
    CHECK_EQ(has_env(d, "CUDAW_SHARE=1"), shared);
    CHECK_EQ(has_env_prefix(d, "CUDAW_MEM_LIMIT="), shared);
    CHECK_EQ(mounts(d), shared ? 4 : 3);
    CHECK(has_env(d, "CUDAW_RUN_DIR=/run/cudaw/containers/pidns-%n-uid-%u"));
    check_mount(d, "/run/cudaw/containers", false);
    if (!shared) continue;
    CHECK(has_env(d, "CUDAW_SCHED_SOCKET=/run/cudaw/sched/cudawd.sock"));
    check_mount(d, "/run/cudaw/sched", false); /* cudawd's own folder: mounted whole */
  }
  CHECK(has_env(device(spec, "0-share-2"), "CUDAW_MEM_LIMIT=536870912"));
  CHECK(has_env(device(spec, "1-shares-3-of-4"), "CUDAW_MEM_LIMIT=805306368"));
  CHECK(has_env(device(spec, "1-shares-4-of-4"), "CUDAW_MEM_LIMIT=1073741824"));
  json_decref(spec);

  /* 2. A node described by options, to stdout, an older spec version, --gpu picks GPU 1 only. */
  snprintf(path, sizeof path, "%s/out.json", tmp);
  snprintf(command, sizeof command, "--gpus 2 --memory 80G --shares 4 --gpu 1 --real-cudart none "
           "--cdi-version 0.5.0 > %s", path);
  CHECK_EQ(generate("", command, err, sizeof err), 0);
  spec = json_load_file(path, 0, &error);
  CHECK(spec, "%s: %s", path, error.text);
  CHECK(!strcmp(json_string_value(json_object_get(spec, "cdiVersion")), "0.5.0"));
  CHECK_EQ(json_array_size(json_object_get(spec, "devices")), 1 + 4 + 1);
  CHECK(has_env(device(spec, "1-share-4"), "CUDAW_MEM_LIMIT=21474836480"));
  check_mount(device(spec, "1-share-4"), "/run/cudaw/cudawd.sock", false); /* in /run/cudaw: the file */
  CHECK(!has_env_prefix(device(spec, "1"), "CUDAW_REAL_CUDART="));
  CHECK_EQ(mounts(device(spec, "1")), 2);
  json_decref(spec);

  /* 3. Bad requests: each a one-line reason, no spec written. */
  snprintf(path, sizeof path, "%s/bad.json", tmp);
  struct {
    const char *env, *args, *reason;
    int code;
  } bad[] = {
    {env, "--gpu 2", "GPU 2 does not exist: this node has 2", 1},
    {"CUDAW_REAL_CUDART=/nonexistent/libcudart.so.13 LD_LIBRARY_PATH=/nonexistent", "--real-cudart none",
     "no GPU found", 1},
    {"", "--gpus 2", "describe the node with both --gpus N", 2},
    {"", "--gpus 1 --memory 1G --env LD_PRELOAD=/evil.so", "expected CUDAW_NAME=VALUE", 1},
    {"", "--gpus 1 --memory 1G --shares 0", "--shares '0'", 2},
    {"", "--gpus 1 --memory 1G --real-cudart relative/lib.so", "must be an absolute path", 2},
  };
  for (size_t n = 0; n < sizeof bad / sizeof bad[0]; n++) {
    snprintf(command, sizeof command, "--output %s %s", path, bad[n].args);
    int code = generate(bad[n].env, command, err, sizeof err);
    CHECK_EQ(code, bad[n].code);
    CHECK(strstr(err, bad[n].reason), "'%s': expected '%s' in: %s", bad[n].args, bad[n].reason, err);
    CHECK(access(path, F_OK) != 0, "'%s' left a spec behind", bad[n].args);
  }
  snprintf(command, sizeof command, "rm -rf %s", tmp);
  CHECK_EQ(system(command), 0);
  printf("cdi: spec of %d devices read back and checked; %zu bad requests refused\n",
         2 * 7 + 1, sizeof bad / sizeof bad[0]);
  return 0;
}
