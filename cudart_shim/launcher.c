/* cudaw: run a program under cudaw. Puts cudaw's libcudart ahead on LD_LIBRARY_PATH (for
 * programs that find the runtime by name) and in LD_PRELOAD (for programs, like PyTorch, whose
 * DT_RPATH would otherwise pick the real one), then execs the command. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "options.h"

static void usage(FILE *out)
{
  fprintf(out,
          "usage: cudaw run [--] <command> [args...]   run a command under cudaw\n"
          "       cudaw libdir                         print the folder of cudaw's %s\n"
          "       cudaw options [--markdown]           print the CUDAW_* options\n"
          "       cudaw --version\n"
          "\nThe command must use the shared CUDA runtime (nvcc -cudart shared).\n"
          "Pause and resume it with cudaw-ctl.\n\nOptions (environment):\n",
          CUDAW_LIB_NAME);
  cudaw_options_print(out, 0);
}

/* The folder holding cudaw's library: <prefix>/lib/cudaw when installed, <build>/lib in the
 * build tree; both relative to this executable. */
static int find_libdir(char *out, size_t size)
{
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return -errno;
  self[n] = 0;
  char *slash = strrchr(self, '/');
  if (!slash) return -ENOENT;
  *slash = 0;
  const char *candidates[] = {"/../" CUDAW_INSTALL_LIBDIR, "/../lib"};
  for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
    char dir[PATH_MAX], lib[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s%s", self, candidates[i]);
    snprintf(lib, sizeof lib, "%s/%s", dir, CUDAW_LIB_NAME);
    if (access(lib, R_OK) == 0 && realpath(dir, out) && strlen(out) < size) return 0;
  }
  return -ENOENT;
}

static int prepend(const char *var, const char *value, char sep)
{
  const char *old = getenv(var);
  if (!old || !*old) return setenv(var, value, 1);
  size_t len = strlen(value) + strlen(old) + 2;
  char *joined = malloc(len);
  if (!joined) return -1;
  snprintf(joined, len, "%s%c%s", value, sep, old);
  int rc = setenv(var, joined, 1);
  free(joined);
  return rc;
}

int main(int argc, char **argv)
{
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("cudaw %s (%s)\n", CUDAW_VERSION, CUDAW_LIB_NAME);
    return 0;
  }
  if (!strcmp(argv[1], "options")) {
    cudaw_options_print(stdout, argc > 2 && !strcmp(argv[2], "--markdown"));
    return 0;
  }
  char libdir[PATH_MAX];
  if (find_libdir(libdir, sizeof libdir) != 0) {
    fprintf(stderr, "cudaw: cannot find %s next to this launcher (looked in ../%s and ../lib)\n",
            CUDAW_LIB_NAME, CUDAW_INSTALL_LIBDIR);
    return 127;
  }
  if (!strcmp(argv[1], "libdir")) {
    printf("%s\n", libdir);
    return 0;
  }
  if (strcmp(argv[1], "run") != 0) {
    fprintf(stderr, "cudaw: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
  }
  int first = 2;
  if (first < argc && !strcmp(argv[first], "--")) first++;
  if (first >= argc) {
    fprintf(stderr, "cudaw run: no command given\n");
    return 2;
  }
  char lib[PATH_MAX + 64];
  snprintf(lib, sizeof lib, "%s/%s", libdir, CUDAW_LIB_NAME);
  if (prepend("LD_LIBRARY_PATH", libdir, ':') || prepend("LD_PRELOAD", lib, ':')) {
    perror("cudaw: setenv");
    return 127;
  }
  execvp(argv[first], argv + first);
  fprintf(stderr, "cudaw: cannot run %s: %s\n", argv[first], strerror(errno));
  return errno == ENOENT ? 127 : 126;
}
