/* Description: the SPANK plugin's decisions without Slurm. spank_cudaw.so is loaded into this
 * program, which stands in for srun and slurmstepd (the spank_* and slurm_* calls the plugin
 * makes, on a fake job's environment). --cudaw-mem takes exactly what the library's parser takes
 * (1.2.3G refused at submission; 5T, 1.5GiB, 25% accepted); plugstack.conf arguments are checked
 * (cudawd_quantum=0, device_memory=25% refused); in the task, a size above device_memory= is
 * refused before the program runs, naming the size, and one that fits becomes CUDAW_MEM_LIMIT;
 * without libdir= the library is found beside the plugin, and libdir= overrides that; the batch
 * step gets LD_LIBRARY_PATH but no LD_PRELOAD.
 *   usage: test_plugin PLUGIN        exit 0 pass, 1 fail */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "test.h"

/* ---- the fake Slurm: what the plugin calls ---- */

static spank_context_t context = S_CTX_LOCAL;
static uint32_t step_id = 0;
static struct spank_option *registered[16];
static int registered_count;
static char environment[16][2][512]; /* the task's: name, value */
static int environment_count;
static char last_error[1024];

spank_context_t spank_context(void) { return context; }
int spank_remote(spank_t sp) { (void)sp; return context == S_CTX_REMOTE; }

spank_err_t spank_option_register(spank_t sp, struct spank_option *option) {
  (void)sp;
  if (registered_count < 16) registered[registered_count++] = option;
  return ESPANK_SUCCESS;
}

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...) {
  (void)sp;
  va_list args;
  va_start(args, item);
  spank_err_t rc = ESPANK_SUCCESS;
  if (item == S_JOB_STEPID || item == S_TASK_GLOBAL_ID) *va_arg(args, uint32_t *) =
      item == S_JOB_STEPID ? step_id : 0;
  else rc = ESPANK_BAD_ARG;
  va_end(args);
  return rc;
}

static const char *task_getenv(const char *name) {
  for (int i = 0; i < environment_count; i++)
    if (!strcmp(environment[i][0], name)) return environment[i][1];
  return NULL;
}

spank_err_t spank_getenv(spank_t sp, const char *name, char *buf, int len) {
  (void)sp;
  const char *value = task_getenv(name);
  if (!value) return ESPANK_ENV_NOEXIST;
  snprintf(buf, (size_t)len, "%s", value);
  return ESPANK_SUCCESS;
}

spank_err_t spank_setenv(spank_t sp, const char *name, const char *value, int overwrite) {
  (void)sp;
  (void)overwrite;
  int i = 0;
  while (i < environment_count && strcmp(environment[i][0], name)) i++;
  if (i == 16) return ESPANK_ERROR;
  if (i == environment_count) environment_count++;
  snprintf(environment[i][0], sizeof environment[i][0], "%s", name);
  snprintf(environment[i][1], sizeof environment[i][1], "%s", value);
  return ESPANK_SUCCESS;
}

void slurm_error(const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(last_error, sizeof last_error, format, args);
  va_end(args);
}
void slurm_info(const char *format, ...) { (void)format; }
void slurm_debug(const char *format, ...) { (void)format; }

/* ---- driving the plugin ---- */

static const char *plugin_path;

struct plugin {
  void *handle;
  int (*init)(spank_t, int, char **);
  int (*task_init)(spank_t, int, char **);
};

/* A fresh copy of the plugin (its settings are per process), initialised in `in` with the
 * plugstack.conf arguments; the return of slurm_spank_init. */
static int load(struct plugin *p, spank_context_t in, int argc, char **argv) {
  p->handle = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
  CHECK(p->handle, "dlopen %s: %s", plugin_path, dlerror());
  p->init = (int (*)(spank_t, int, char **))dlsym(p->handle, "slurm_spank_init");
  p->task_init = (int (*)(spank_t, int, char **))dlsym(p->handle, "slurm_spank_task_init");
  CHECK(p->init && p->task_init, "the plugin lacks slurm_spank_init or slurm_spank_task_init");
  context = in;
  registered_count = environment_count = 0;
  last_error[0] = '\0';
  return p->init(NULL, argc, argv);
}

static void unload(struct plugin *p) {
  dlclose(p->handle);
  p->handle = NULL;
}

/* srun --<name>=<value>: the option's callback, as at submission. */
static int give_option(const char *name, const char *value) {
  for (int i = 0; i < registered_count; i++)
    if (!strcmp(registered[i]->name, name)) return registered[i]->cb(registered[i]->val, value, 0);
  test_fail("the plugin did not register --%s", name);
  return -1;
}

static void submission(void) {
  struct plugin p;
  CHECK_EQ(load(&p, S_CTX_LOCAL, 0, NULL), 0);
  const char *good[] = {"5T", "1.5GiB", "4G", "25%", "8192M", "123456"};
  const char *bad[] = {"1.2.3G", "lots", "0", "-1G", "101%", "1e3", "0x10", "4GG"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++)
    CHECK(give_option("cudaw-mem", good[i]) == 0, "--cudaw-mem=%s refused: %s", good[i], last_error);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    last_error[0] = '\0';
    CHECK(give_option("cudaw-mem", bad[i]) != 0, "--cudaw-mem=%s accepted", bad[i]);
    CHECK(strstr(last_error, bad[i]) && strstr(last_error, "expected a size"),
          "--cudaw-mem=%s: the error does not name it: %s", bad[i], last_error);
  }
  unload(&p);
  printf("ok: submission: --cudaw-mem=1.2.3G and %zu other malformed sizes refused, 5T etc. "
         "accepted\n", sizeof bad / sizeof *bad - 1);

  char *args[][1] = {{"cudawd_quantum=0"}, {"device_memory=25%"}, {"cudawd_host_memory=1.2.3G"},
                     {"mem=1.2.3G"}};
  for (size_t i = 0; i < sizeof args / sizeof *args; i++) {
    CHECK(load(&p, S_CTX_LOCAL, 1, args[i]) != 0, "plugstack.conf %s accepted", args[i][0]);
    CHECK(strstr(last_error, args[i][0]), "plugstack.conf %s: %s", args[i][0], last_error);
    unload(&p);
  }
  char *fine[] = {"cudawd_quantum=2.5", "cudawd_host_memory=off", "device_memory=80G"};
  CHECK(load(&p, S_CTX_LOCAL, 3, fine) == 0, "plugstack.conf arguments refused: %s", last_error);
  unload(&p);
  printf("ok: plugstack.conf: bad cudawd_quantum=, device_memory=, cudawd_host_memory=, mem= "
         "refused\n");
}

/* slurm_spank_task_init with --cudaw-mem=mem (NULL: none) in step `step`; its return. */
static int task(int argc, char **argv, const char *mem, uint32_t step) {
  struct plugin p;
  CHECK_EQ(load(&p, S_CTX_REMOTE, argc, argv), 0);
  step_id = step;
  CHECK_EQ(give_option(mem ? "cudaw-mem" : "cudaw", mem), 0);
  int rc = p.task_init(NULL, 0, NULL);
  unload(&p);
  return rc;
}

static void in_the_task(void) {
  char here[PATH_MAX], want[PATH_MAX + 32];
  CHECK(realpath(plugin_path, here), "realpath %s", plugin_path);
  snprintf(want, sizeof want, "%s/libcudart.so.13", dirname(here));

  char *sized[] = {"device_memory=256M"};
  CHECK(task(1, sized, "5T", 0) != 0, "--cudaw-mem=5T on a 256 MiB device: the task was started");
  CHECK(strstr(last_error, "--cudaw-mem=5T is more than this node's GPU memory (0.25 GiB, from "
                           "device_memory= in plugstack.conf)"),
        "5T: %s", last_error);
  CHECK(!task_getenv("LD_PRELOAD"), "5T: the refused task was prepared anyway");
  printf("ok: %s\n", last_error);
  CHECK_EQ(task(1, sized, "200M", 0), 0);
  CHECK(task_getenv("CUDAW_MEM_LIMIT") && !strcmp(task_getenv("CUDAW_MEM_LIMIT"), "200M"),
        "200M: CUDAW_MEM_LIMIT=%s", task_getenv("CUDAW_MEM_LIMIT"));

  CHECK_EQ(task(0, NULL, NULL, 0), 0);
  CHECK(task_getenv("LD_PRELOAD") && !strcmp(task_getenv("LD_PRELOAD"), want),
        "no libdir=: LD_PRELOAD=%s, expected %s beside the plugin", task_getenv("LD_PRELOAD"), want);
  printf("ok: no libdir=: LD_PRELOAD=%s\n", want);

  char *elsewhere[] = {"libdir=/"}; /* the library is not there: the task runs without cudaw */
  CHECK_EQ(task(1, elsewhere, NULL, 0), 0);
  CHECK(!task_getenv("LD_PRELOAD") && strstr(last_error, "/libcudart.so.13"),
        "libdir=/: LD_PRELOAD=%s (%s)", task_getenv("LD_PRELOAD"), last_error);
  printf("ok: libdir= overrides: %s\n", last_error);

  CHECK_EQ(task(0, NULL, NULL, SLURM_BATCH_SCRIPT), 0);
  CHECK(!task_getenv("LD_PRELOAD"), "batch step: LD_PRELOAD=%s", task_getenv("LD_PRELOAD"));
  CHECK(task_getenv("LD_LIBRARY_PATH") && strstr(want, task_getenv("LD_LIBRARY_PATH")) == want,
        "batch step: LD_LIBRARY_PATH=%s", task_getenv("LD_LIBRARY_PATH"));
  printf("ok: batch step: LD_LIBRARY_PATH=%s, no LD_PRELOAD\n", task_getenv("LD_LIBRARY_PATH"));
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_plugin PLUGIN\n");
    return 1;
  }
  plugin_path = argv[1];
  submission();
  in_the_task();
  return 0;
}
