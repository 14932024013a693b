/* Benchmark driver: runs a benchmark program alternately natively and under cudaw, several
 * times, and prints each metric's median in both modes, their ratio (cudaw / native) and their
 * difference (what cudaw adds, in the metric's unit).
 *
 *   compare_runs <repeats> <cudaw libdir> [--env NAME=VALUE]... [--native-env NAME=VALUE]...
 *                -- <program> [args...]
 *
 * The program prints lines `metric <name> <value> <unit>` (lower is better). --env options
 * apply to the cudaw runs only (e.g. a policy), --native-env ones to the native runs only (e.g.
 * LD_PRELOAD of the emulated device). Exit 77 if the program does (no GPU). */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_METRICS 32
#define MAX_REPEATS 64

struct metric {
  char name[64], unit[16];
  double value[2][MAX_REPEATS];
  int count[2];
};

static struct metric metrics[MAX_METRICS];
static int metric_count;

static struct metric *find(const char *name, const char *unit)
{
  for (int i = 0; i < metric_count; i++)
    if (!strcmp(metrics[i].name, name)) return &metrics[i];
  if (metric_count == MAX_METRICS) return NULL;
  struct metric *m = &metrics[metric_count++];
  snprintf(m->name, sizeof m->name, "%s", name);
  snprintf(m->unit, sizeof m->unit, "%s", unit);
  return m;
}

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static char *cudaw_library(const char *libdir)
{
  DIR *d = opendir(libdir);
  struct dirent *e;
  char *found = NULL;
  while (d && (e = readdir(d)))
    if (!strncmp(e->d_name, "libcudart.so.", 13) && !found) {
      size_t len = strlen(libdir) + strlen(e->d_name) + 2;
      found = malloc(len);
      snprintf(found, len, "%s/%s", libdir, e->d_name);
    }
  if (d) closedir(d);
  return found;
}

/* Run once; mode 1 = under cudaw. Returns the exit status. */
static int run(int mode, const char *libdir, char **env, int envc, char **native_env,
               int native_envc, char **argv)
{
  int fds[2];
  if (pipe(fds)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    if (mode) {
      char *lib = cudaw_library(libdir);
      setenv("LD_LIBRARY_PATH", libdir, 1);
      if (lib) setenv("LD_PRELOAD", lib, 1);
      for (int i = 0; i < envc; i++) putenv(env[i]);
    } else {
      for (int i = 0; i < native_envc; i++) putenv(native_env[i]);
    }
    execvp(argv[0], argv);
    perror("exec");
    _exit(127);
  }
  close(fds[1]);
  FILE *f = fdopen(fds[0], "r");
  char line[256];
  while (fgets(line, sizeof line, f)) {
    char name[64], unit[16];
    double value;
    if (sscanf(line, "metric %63s %lf %15s", name, &value, unit) == 3) {
      struct metric *m = find(name, unit);
      if (m && m->count[mode] < MAX_REPEATS) m->value[mode][m->count[mode]++] = value;
    } else if (strncmp(line, "skipped", 7) == 0) {
      fputs(line, stdout);
    }
  }
  fclose(f);
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int main(int argc, char **argv)
{
  if (argc < 5) {
    fprintf(stderr, "usage: compare_runs <repeats> <cudaw libdir> [--env N=V]... "
                    "[--native-env N=V]... -- prog...\n");
    return 2;
  }
  int repeats = atoi(argv[1]);
  if (repeats < 1 || repeats > MAX_REPEATS) repeats = 5;
  const char *libdir = argv[2];
  char *env[16], *native_env[16];
  int envc = 0, native_envc = 0, i = 3;
  for (; i < argc && strcmp(argv[i], "--"); i++) {
    if (!strcmp(argv[i], "--env") && i + 1 < argc && envc < 16) env[envc++] = argv[++i];
    else if (!strcmp(argv[i], "--native-env") && i + 1 < argc && native_envc < 16)
      native_env[native_envc++] = argv[++i];
  }
  if (i + 1 >= argc) return 2;
  char **prog = argv + i + 1;
  for (int r = 0; r < repeats; r++)
    for (int mode = 0; mode < 2; mode++) {
      int rc = run(mode, libdir, env, envc, native_env, native_envc, prog);
      if (rc == 77) return 77;
      if (rc) {
        fprintf(stderr, "%s run %d failed with %d\n", mode ? "cudaw" : "native", r, rc);
        return 1;
      }
    }
  printf("%-32s %12s %12s %8s %12s  (median of %d runs each, alternating", "metric", "native",
         "cudaw", "ratio", "added", repeats);
  for (int e = 0; e < envc; e++) printf(", %s", env[e]);
  for (int e = 0; e < native_envc; e++) printf(", native %s", native_env[e]);
  printf(")\n");
  for (int m = 0; m < metric_count; m++) {
    struct metric *x = &metrics[m];
    if (!x->count[0] || !x->count[1]) continue;
    double a = median(x->value[0], x->count[0]), b = median(x->value[1], x->count[1]);
    printf("%-32s %9.3f %-2s %9.3f %-2s %8.3f %9.3f %-2s\n", x->name, a, x->unit, b, x->unit,
           b / a, b - a, x->unit);
  }
  return 0;
}
