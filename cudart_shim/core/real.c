/* Loading the real CUDA runtime. It has our SONAME, so it is opened by absolute path only
 * (by name the loader would return cudaw itself), and every export is resolved once. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <link.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"
#include "shim.h"
#include "shim_profile.h"

shim_real_fn shim_real_table[SHIM_FN_COUNT];

static void *real_handle;
static char real_path[PATH_MAX];

const char *shim_real_path(void) { return real_handle ? real_path : NULL; }

void *shim_real_symbol(const char *name)
{
  if (!real_handle) return NULL;
  void *sym = dlvsym(real_handle, name, SHIM_VERSION_NODE);
  return sym ? sym : dlsym(real_handle, name);
}

/* True if `path` is this library (a user pointing CUDAW_REAL_CUDART at cudaw, or a well-known
 * location that is cudaw's own install). */
static int is_self(const char *path)
{
  Dl_info self;
  char a[PATH_MAX], b[PATH_MAX];
  if (!dladdr((void *)&is_self, &self) || !self.dli_fname) return 0;
  if (!realpath(self.dli_fname, a) || !realpath(path, b)) return 0;
  return strcmp(a, b) == 0;
}

int shim_is_self_handle(void *handle)
{
  Dl_info self;
  struct link_map *map = NULL;
  if (!handle || !dladdr((void *)&is_self, &self)) return 0;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map) return 0;
  return (void *)map->l_addr == self.dli_fbase;
}

struct tried {
  char text[2048];
  size_t len;
};

static void note_tried(struct tried *t, const char *path, const char *why)
{
  int n = snprintf(t->text + t->len, sizeof t->text - t->len, "\n  %s: %s", path, why);
  if (n > 0 && t->len + (size_t)n < sizeof t->text) t->len += (size_t)n;
}

static int try_open(const char *path, struct tried *t, struct shim_span *span)
{
  if (!path || !*path) return -ENOENT;
  if (path[0] != '/') {
    note_tried(t, path, "not an absolute path");
    return -EINVAL;
  }
  if (is_self(path)) {
    note_tried(t, path, "this is cudaw itself");
    return -ELOOP;
  }
  shim_span_real_begin(span);
  void *h = shim_real_dlopen(path, RTLD_NOW | RTLD_LOCAL);
  shim_span_real_end(span);
  if (!h) {
    const char *err = dlerror();
    note_tried(t, path, err ? err : "dlopen failed");
    return -ENOENT;
  }
  real_handle = h;
  snprintf(real_path, sizeof real_path, "%s", path);
  return 0;
}

/* Toolkit and wheel locations, for a library built on one machine and run on another. */
static const char *const well_known[] = {
  "/usr/local/cuda/lib64/" SHIM_REAL_SONAME,
  "/usr/local/cuda/targets/x86_64-linux/lib/" SHIM_REAL_SONAME,
  "/usr/local/cuda-*/targets/x86_64-linux/lib/" SHIM_REAL_SONAME,
  "/usr/local/cuda-*/lib64/" SHIM_REAL_SONAME,
  "/usr/lib/x86_64-linux-gnu/" SHIM_REAL_SONAME,
  "/usr/lib64/" SHIM_REAL_SONAME,
};

/* Open the first real runtime that loads (the span times its dlopen as the real part). */
static int open_real(struct shim_span *span)
{
  struct tried tried = {.len = 0};
  const char *chosen = cudaw_option("CUDAW_REAL_CUDART");
  int rc = try_open(chosen, &tried, span);
  if (rc && *chosen)
    shim_warn("CUDAW_REAL_CUDART cannot be used:%s; trying the usual locations", tried.text);
#ifdef CUDAW_REAL_CUDART_BUILD
  if (rc) rc = try_open(CUDAW_REAL_CUDART_BUILD, &tried, span);
#endif
  for (size_t i = 0; rc && i < sizeof well_known / sizeof well_known[0]; i++) {
    glob_t g;
    if (glob(well_known[i], 0, NULL, &g) != 0) continue;
    for (size_t j = 0; rc && j < g.gl_pathc; j++) rc = try_open(g.gl_pathv[j], &tried, span);
    globfree(&g);
  }
  if (rc) {
    shim_error("fatal: cannot load the real CUDA runtime (%s); every CUDA call will fail with "
               "cudaErrorInitializationError. Set CUDAW_REAL_CUDART to its absolute path. "
               "Tried:%s", SHIM_REAL_SONAME, tried.len ? tried.text : " (nothing)");
    return -ENOENT;
  }
  return 0;
}

int shim_real_load(void)
{
  struct shim_span span;
  shim_span_begin(&span);
  int rc = open_real(&span);
  if (rc) {
    shim_span_end(&span, SHIM_PROFILE_RUNTIME, 1);
    return rc;
  }
  unsigned missing = 0;
  for (unsigned i = 0; i < SHIM_FN_COUNT; i++) {
    shim_real_table[i] = (shim_real_fn)shim_real_symbol(shim_fn_names[i]);
    missing += !shim_real_table[i];
  }
  shim_span_end(&span, SHIM_PROFILE_RUNTIME, 1);
  shim_info("forwarding to %s (%u of %u functions present)", real_path, SHIM_FN_COUNT - missing,
            SHIM_FN_COUNT);
  return 0;
}
