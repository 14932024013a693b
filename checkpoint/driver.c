/* Handing what remains on the device to the driver's process checkpoint. The driver's calls
 * (cuCheckpointProcessLock/Checkpoint/Restore/Unlock) take the pid of the process to act on and
 * wait for its CUDA work, so they run in a helper process, cudaw-ckpt-driver, which this file
 * starts and waits for. The helper loads the driver; this library and cudaw-ctl never do. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"

extern char **environ;

#define TOOL_NAME "cudaw-ckpt-driver"

/* CUDAW_CKPT_DRIVER_TOOL, else <dir of this library>/../bin/cudaw-ckpt-driver when it exists,
 * else the name alone (searched on PATH). */
static void tool_path(char *buf, size_t len) {
  const char *set = ckpt_rt.options.driver_tool;
  if (*set) {
    snprintf(buf, len, "%s", set);
    return;
  }
  Dl_info info;
  if (dladdr((void *)tool_path, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", info.dli_fname);
    snprintf(buf, len, "%s/../bin/" TOOL_NAME, dirname(copy));
    if (access(buf, X_OK) == 0) return;
  }
  snprintf(buf, len, TOOL_NAME);
}

/* Run the tool with `action` on our pid; its last output line becomes `reason` on failure. */
static int run_tool(const char *action, uint32_t timeout_ms, char *reason, size_t len) {
  char path[PATH_MAX], pid_text[16], timeout_text[16];
  tool_path(path, sizeof path);
  snprintf(pid_text, sizeof pid_text, "%ld", (long)getpid());
  snprintf(timeout_text, sizeof timeout_text, "%u", timeout_ms);
  char *argv[] = {path, (char *)action, pid_text, timeout_text, NULL};
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return -errno;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  /* Our environment without LD_PRELOAD: the helper must not load cudaw (or anything else the
   * program was given) on top of the driver. */
  size_t count = 0;
  while (environ[count]) count++;
  char **env = calloc(count + 1, sizeof *env);
  size_t kept = 0;
  for (size_t i = 0; env && i < count; i++)
    if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0) env[kept++] = environ[i];
  pid_t child;
  int rc = env ? posix_spawnp(&child, path, &actions, NULL, argv, env) : ENOMEM;
  free(env);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    snprintf(reason, len, "cannot start %s: %s (set CUDAW_CKPT_DRIVER_TOOL)", path, strerror(rc));
    return -rc;
  }
  char text[1024];
  size_t used = 0;
  ssize_t n;
  while ((n = read(out[0], text + used, sizeof text - 1 - used)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    used += (size_t)n;
    if (used == sizeof text - 1) used = 0; /* keep the tail only */
  }
  close(out[0]);
  text[used] = '\0';
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  while (used && (text[used - 1] == '\n' || text[used - 1] == ' ')) text[--used] = '\0';
  char *last = strrchr(text, '\n');
  snprintf(reason, len, "%s", last ? last + 1 : text[0] ? text : "the driver tool failed");
  return WIFEXITED(status) && WEXITSTATUS(status) == 3 ? -ENOSYS : -EIO;
}

int driver_checkpoint(uint32_t timeout_ms, char *reason, size_t len) {
  return run_tool("checkpoint", timeout_ms, reason, len);
}

int driver_restore(char *reason, size_t len) { return run_tool("restore", 0, reason, len); }
