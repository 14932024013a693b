/* cudaw: run a program under cudaw. Puts cudaw's libcudart ahead on LD_LIBRARY_PATH (for
 * programs that find the runtime by name) and in LD_PRELOAD (for programs, like PyTorch, whose
 * DT_RPATH would otherwise pick the real one), then execs the command. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt.h"
#include "options.h"

static void usage(FILE *out)
{
  fprintf(out,
          "usage: cudaw run [--share [--spill-dir DIR]] [--] <command> [args...]\n"
          "                                            run a command under cudaw\n"
          "         --share: share the GPU with other programs through cudawd (started if none\n"
          "         answers on <run dir>/cudawd.sock; its log: <run dir>/cudawd.log). It exits\n"
          "         10 minutes after the last program (`cudaw-ctl sched --stop`: now)\n"
          "         --spill-dir DIR (with --share): the cudawd it starts moves the coldest\n"
          "         swapped-out images to DIR (on a disk, not tmpfs) when host memory runs\n"
          "         short (CUDAW_SCHED_SPILL_DIR; default: none)\n"
          "       cudaw libdir                         print the folder of cudaw's %s\n"
          "       cudaw cdi generate [--output FILE]   write a CDI spec for containers (--help)\n"
          "       cudaw options [--markdown]           print the CUDAW_* options (--markdown: the\n"
          "                                            table of docs/options.md)\n"
          "       cudaw --help | --version\n"
          "\nAny CUDA program works: the shared runtime is replaced, a static runtime (nvcc's\n"
          "default), CuPy, JAX and NVIDIA's libraries are seen through the driver layer.\n"
          "Pause and resume it with cudaw-ctl. Documentation: docs/ in cudaw's sources.\n\n"
          "Exit status: the command's; 2 a usage error, 78 an invalid CUDAW_* value (cudaw run\n"
          "checks them before it starts the command; CUDAW_STRICT=0 runs on, ignoring them),\n"
          "126/127 the command cannot be run.\n\n"
          "Options (environment):\n",
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

static bool cudawd_answers(const char *path)
{
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  bool answers = fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
  if (fd >= 0) close(fd);
  return answers;
}

/* --share: start cudawd (next to this launcher) unless one answers in the run dir. It is
 * detached (double fork, own session), so it outlives this program and serves later ones; it
 * exits by itself after its default --idle-exit (10 minutes) without a program. */
static int ensure_cudawd(void)
{
  struct ckpt_options options;
  char reason[200] = "";
  ckpt_options_from_env(&options, NULL, 0);
  const char *chosen = getenv("CUDAW_SCHED_SOCKET");
  if (chosen && *chosen) { /* someone else's cudawd (a node's system one): never started here */
    if (!cudawd_answers(options.sched_socket))
      fprintf(stderr, "cudaw run --share: no cudawd answers on %s (CUDAW_SCHED_SOCKET; a system "
              "cudawd is started by its unit file or the Slurm plugin); running unshared until "
              "one does\n", chosen);
    return 0;
  }
  if (ckpt_run_dir_prepare(options.run_dir, reason, sizeof reason) != 0) {
    fprintf(stderr, "cudaw run --share: %s\n", reason);
    return -1;
  }
  char sock[PATH_MAX], log[PATH_MAX], self[PATH_MAX], daemon[PATH_MAX + 16];
  snprintf(sock, sizeof sock, "%s/cudawd.sock", options.run_dir);
  snprintf(log, sizeof log, "%s/cudawd.log", options.run_dir);
  if (cudawd_answers(sock)) {
    const char *spill = getenv("CUDAW_SCHED_SPILL_DIR");
    if (spill && *spill)
      fprintf(stderr, "cudaw run --share: a cudawd already answers on %s: the spill directory "
              "applies to a cudawd this starts; that one keeps its own (cudaw-ctl sched shows "
              "it)\n", sock);
    return 0;
  }
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  snprintf(daemon, sizeof daemon, "%s/cudawd", self);
  pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    if (setsid() < 0 || fork() != 0) _exit(0);
    int null_fd = open("/dev/null", O_RDONLY), log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (null_fd >= 0) dup2(null_fd, 0);
    if (log_fd >= 0) {
      dup2(log_fd, 1);
      dup2(log_fd, 2);
    }
    execl(daemon, "cudawd", (char *)NULL);
    fprintf(stderr, "cudaw run --share: cannot run %s: %s\n", daemon, strerror(errno));
    _exit(127);
  }
  waitpid(child, NULL, 0);
  for (int i = 0; i < 100; i++) { /* up to 5 s */
    if (cudawd_answers(sock)) return 0;
    usleep(50000);
  }
  fprintf(stderr, "cudaw run --share: cudawd did not start (see %s); running unshared\n", log);
  return 0;
}

/* cudaw cdi ...: cudaw-cdi (k8s/) next to this launcher, told where the library is. */
static int run_cdi(const char *libdir, int argc, char **argv)
{
  char self[PATH_MAX], tool[PATH_MAX + 16];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  char *slash = strrchr(self, '/');
  if (slash) *slash = 0;
  snprintf(tool, sizeof tool, "%s/cudaw-cdi", self);
  char **args = calloc((size_t)argc + 3, sizeof *args);
  if (!args) return 127;
  args[0] = "cudaw-cdi", args[1] = "--libdir", args[2] = (char *)libdir;
  for (int i = 2; i < argc; i++) args[i + 1] = argv[i];
  execv(tool, args);
  fprintf(stderr, "cudaw: cannot run %s: %s\n", tool, strerror(errno));
  return 127;
}

static int no_libdir(void)
{
  fprintf(stderr, "cudaw: cannot find %s next to this launcher (looked in ../%s and ../lib)\n",
          CUDAW_LIB_NAME, CUDAW_INSTALL_LIBDIR);
  return 127;
}

/* One line naming what is wrong, then where to look: exit status 2. */
static int usage_error(const char *what, const char *arg)
{
  fprintf(stderr, "cudaw: %s%s%s%s\nTry 'cudaw --help'.\n", what, arg ? " '" : "", arg ? arg : "",
          arg ? "'" : "");
  return 2;
}

static void print_invalid(const char *line, const char *default_value, void *ctx)
{
  (void)default_value;
  (void)ctx;
  fprintf(stderr, "cudaw: %s\n", line);
}

int main(int argc, char **argv)
{
  if (argc < 2) return usage_error("no command given", NULL);
  const char *command = argv[1];
  if (!strcmp(command, "--help") || !strcmp(command, "-h")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(command, "--version")) {
    printf("cudaw %s (%s)\n", CUDAW_VERSION, CUDAW_LIB_NAME);
    return 0;
  }
  if (!strcmp(command, "options")) {
    if (argc > 3 || (argc == 3 && strcmp(argv[2], "--markdown")))
      return usage_error("options: unknown argument", argv[2]);
    cudaw_options_print(stdout, argc == 3);
    return 0;
  }
  if (strcmp(command, "libdir") && strcmp(command, "run") && strcmp(command, "cdi"))
    return usage_error(command[0] == '-' ? "unknown option" : "unknown command", command);
  if (!strcmp(command, "libdir") && argc > 2)
    return usage_error("libdir: unexpected argument", argv[2]);
  char libdir[PATH_MAX];
  if (!strcmp(command, "cdi")) { /* its arguments are cudaw-cdi's to check */
    if (find_libdir(libdir, sizeof libdir) != 0) return no_libdir();
    return run_cdi(libdir, argc, argv);
  }
  int first = 2;
  bool share = false, spill = false;
  for (; first < argc && argv[first][0] == '-'; first++) {
    if (!strcmp(argv[first], "--")) {
      first++;
      break;
    }
    if (!strcmp(argv[first], "--spill-dir")) {
      /* For the cudawd --share starts (CUDAW_SCHED_SPILL_DIR); cudawd checks the directory. */
      if (first + 1 >= argc || argv[first + 1][0] != '/')
        return usage_error("run: --spill-dir needs an absolute directory", NULL);
      if (setenv("CUDAW_SCHED_SPILL_DIR", argv[++first], 1) != 0) return 127;
      spill = true;
      continue;
    }
    if (strcmp(argv[first], "--share")) return usage_error("run: unknown option", argv[first]);
    share = true;
  }
  if (!strcmp(command, "run") && first >= argc) return usage_error("run: no command given", NULL);
  if (spill && !share) return usage_error("run: --spill-dir goes with --share", NULL);
  if (find_libdir(libdir, sizeof libdir) != 0) return no_libdir();
  if (!strcmp(command, "libdir")) {
    printf("%s\n", libdir);
    return 0;
  }
  /* The library would stop the program at its first CUDA call; before it starts is better.
   * Unknown names and, under CUDAW_STRICT=0, ignored values are the library's to say. */
  if (ckpt_options_strict() && cudaw_options_validate(print_invalid, NULL)) {
    fprintf(stderr, "cudaw: not starting %s (exit status %d): fix the value, or set "
            "CUDAW_STRICT=0 to ignore invalid values\n", argv[first], CUDAW_EXIT_BAD_OPTION);
    return CUDAW_EXIT_BAD_OPTION;
  }
  if (share && (setenv("CUDAW_SHARE", "1", 1) != 0 || ensure_cudawd() != 0)) return 127;
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
