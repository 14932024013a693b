/* Description: cudaw's libcudart exports exactly the real runtime's functions (plus the driver
 * layer's: libcuda's functions and dlopen, listed by the generator), with the same
 * versions and SONAME. Both lists come from cudaw-gen-exports (libelf), run by ctest. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

struct list {
  char **line;
  size_t count;
};

static int cmp(const void *a, const void *b)
{
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static struct list load(const char *path)
{
  FILE *f = fopen(path, "r");
  if (!f) test_fail("cannot open %s", path);
  struct list l = {NULL, 0};
  char buf[512];
  while (fgets(buf, sizeof buf, f)) {
    buf[strcspn(buf, "\n")] = 0;
    l.line = realloc(l.line, (l.count + 1) * sizeof *l.line);
    l.line[l.count++] = strdup(buf);
  }
  fclose(f);
  qsort(l.line, l.count, sizeof *l.line, cmp);
  return l;
}

int main(int argc, char **argv)
{
  if (argc != 3) test_fail("usage: compare_exports <real list> <cudaw list>");
  struct list real = load(argv[1]), ours = load(argv[2]);
  size_t i = 0, j = 0, funcs = 0, diffs = 0;
  while (i < real.count || j < ours.count) {
    int c = i == real.count ? 1 : j == ours.count ? -1 : strcmp(real.line[i], ours.line[j]);
    if (c == 0) {
      funcs += strncmp(real.line[i], "func ", 5) == 0;
      i++, j++;
    } else if (c < 0) {
      fprintf(stderr, "missing in cudaw: %s\n", real.line[i++]);
      diffs++;
    } else {
      fprintf(stderr, "extra in cudaw:   %s\n", ours.line[j++]);
      diffs++;
    }
  }
  for (size_t k = 0; k < real.count; k++) free(real.line[k]);
  for (size_t k = 0; k < ours.count; k++) free(ours.line[k]);
  free(real.line);
  free(ours.line);
  printf("real runtime %s: %zu lines; cudaw: %zu lines; %zu functions match, %zu differences\n",
         argv[1], real.count, ours.count, funcs, diffs);
  CHECK(funcs > 0, "no functions compared");
  CHECK_EQ(diffs, 0);
  return 0;
}
