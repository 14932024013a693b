/* The disk-tier tests' common ground (test_spill.c, test_tier_soak.c): a run dir, a spill
 * directory on a disk, a fake /proc/meminfo (CUDAWD_MEMINFO) whose MemAvailable the test sets,
 * and cudawd started on them. Header-only (static), after client.h. */
#ifndef CUDAW_TESTS_SCHED_TIER_H
#define CUDAW_TESTS_SCHED_TIER_H

#include <linux/magic.h>
#include <signal.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#include "client.h"

struct tier {
  char run_dir[64];     /* /tmp/cudaw-<name>-XXXXXX: cudawd's socket, the logs, the meminfo */
  char spill_dir[512];  /* <spill base>/<name>-spill-XXXXXX: cudawd's --spill-dir */
  char meminfo[160];    /* the fake /proc/meminfo */
};

/* MemTotal 8 GiB (cudawd keeps 1 GiB free and moves images to disk under twice that) and
 * MemAvailable `available` bytes, replaced at once (rename) so cudawd never reads half a file. */
static inline void tier_write_meminfo(const struct tier *t, uint64_t available)
{
  char tmp[200];
  snprintf(tmp, sizeof tmp, "%s.tmp", t->meminfo);
  FILE *f = fopen(tmp, "w");
  CHECK(f != NULL, "%s: %s", tmp, strerror(errno));
  fprintf(f, "MemTotal:       %llu kB\nMemAvailable:   %llu kB\n", 8ull << 20,
          (unsigned long long)available >> 10);
  fclose(f);
  CHECK(rename(tmp, t->meminfo) == 0, "%s: %s", t->meminfo, strerror(errno));
}

/* The directories (named after the test), the fake host with `available` bytes, and the
 * environment every job and cudawd inherits. 77 (printed why) if spill_base is memory-backed,
 * where there is no disk tier to test; else 0. */
static inline int tier_setup(struct tier *t, const char *spill_base, const char *name,
                             uint64_t available)
{
  struct statfs fs;
  CHECK(statfs(spill_base, &fs) == 0, "%s: %s", spill_base, strerror(errno));
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) {
    printf("SKIP: %s is memory-backed: no disk tier to test there\n", spill_base);
    return 77;
  }
  snprintf(t->run_dir, sizeof t->run_dir, "/tmp/cudaw-%s-XXXXXX", name);
  CHECK(mkdtemp(t->run_dir) != NULL, "mkdtemp: %s", strerror(errno));
  snprintf(t->spill_dir, sizeof t->spill_dir, "%s/%s-spill-XXXXXX", spill_base, name);
  CHECK(mkdtemp(t->spill_dir) != NULL, "mkdtemp %s: %s", t->spill_dir, strerror(errno));
  snprintf(t->meminfo, sizeof t->meminfo, "%s/meminfo", t->run_dir);
  tier_write_meminfo(t, available);
  setenv("CUDAWD_MEMINFO", t->meminfo, 1);
  setenv("CUDAW_RUN_DIR", t->run_dir, 1);
  setenv("CUDAW_SHARE", "1", 1);
  setenv("CUDAW_LOG", "info", 1);
  return 0;
}

/* cudawd on the tier: a device of 96 MiB, short turns, no pool (the fake host decides), the
 * spill directory, logging to <run dir>/cudawd.log (appended across restarts). Its pid, once it
 * answers. */
static inline pid_t tier_start_cudawd(const struct tier *t, const char *cudawd_path)
{
  char log[128];
  snprintf(log, sizeof log, "%s/cudawd.log", t->run_dir);
  const char *argv[] = {cudawd_path, "--device-memory", "96M", "--quantum", "0.5", "--min-run",
                        "0.1", "--host-memory", "off", "--spill-dir", t->spill_dir, "--verbose",
                        "--gpu-list", "none", NULL};
  pid_t pid = client_spawn(argv, log, false);
  CHECK(client_wait_up(t->run_dir, 10), "cudawd did not answer on %s (see %s)", t->run_dir, log);
  return pid;
}

/* Stop cudawd, then remove both directories unless KEEP is set (to look at them). */
static inline void tier_finish(const struct tier *t, pid_t cudawd_pid)
{
  if (cudawd_pid > 0) {
    kill(cudawd_pid, SIGTERM);
    waitpid(cudawd_pid, NULL, 0);
  }
  char command[700];
  snprintf(command, sizeof command, "rm -rf '%s' '%s'", t->run_dir, t->spill_dir);
  if (!getenv("KEEP") && system(command) != 0)
    fprintf(stderr, "could not remove %s\n", t->run_dir);
}

#endif
