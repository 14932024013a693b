/* Description: an allocation that CUDAW_MEM_LIMIT refuses is logged (issue 33: going over the limit
 * was silent, even at CUDAW_LOG=debug): one warning at the default log level naming
 * CUDAW_MEM_LIMIT with the figures (asked, held, limit), and only one, however many allocations
 * the limit refuses afterwards, through cudaMalloc or through the charged paths (managed memory).
 * ctest sets CUDAW_MEM_LIMIT=64M and CUDAW_LOG_FILE; CUDAW_LOG stays unset. */
#include <sys/stat.h>
#include <unistd.h>

#include "vmemshim.h"

#define MiB ((size_t)1 << 20)

/* The log written since `offset`. */
static void read_log(const char *path, long offset, char *out, size_t len)
{
  FILE *f = fopen(path, "r");
  CHECK(f != NULL, "%s: cannot open", path);
  fseek(f, offset, SEEK_SET);
  size_t n = fread(out, 1, len - 1, f);
  out[n] = '\0';
  fclose(f);
}

/* Lines of this process (both policies may run at once, appending to one file) saying `what`. */
static int count(const char *text, const char *what)
{
  char mine[32];
  snprintf(mine, sizeof mine, "cudaw[%d]: ", (int)getpid());
  int n = 0;
  for (const char *line = text; *line;) {
    const char *end = strchr(line, '\n');
    size_t length = end ? (size_t)(end - line) : strlen(line);
    const char *hit = strstr(line, what);
    if (strncmp(line, mine, strlen(mine)) == 0 && hit && hit < line + length) n++;
    line += length + (end != NULL);
  }
  return n;
}

int main(void)
{
  if (!vmem_expected()) test_skip("CUDAW_VMEM=off: no limit");
  const char *log = getenv("CUDAW_LOG_FILE");
  CHECK(log && *log, "ctest sets CUDAW_LOG_FILE");
  CHECK(!getenv("CUDAW_LOG"), "the warning must show at the default log level");
  struct stat st;
  long start = stat(log, &st) == 0 ? (long)st.st_size : 0; /* earlier runs appended */

  void *a, *b, *m;
  CUDA_OK(cudaMalloc(&a, 32 * MiB));
  char text[8192];
  read_log(log, start, text, sizeof text);
  CHECK(count(text, "CUDAW_MEM_LIMIT") == 0, "warned before any refusal:\n%s", text);

  CUDA_FAILS(cudaMalloc(&b, 40 * MiB), cudaErrorMemoryAllocation);
  read_log(log, start, text, sizeof text);
  CHECK(count(text, "warn: CUDAW_MEM_LIMIT refused an allocation of 40.00 MiB on device 0: "
                    "32.00 MiB held, limit 64.00 MiB") == 1,
        "no warning with the figures after the refusal:\n%s", text);

  /* More refusals, through the allocator and through a charged path: still one line. */
  CUDA_FAILS(cudaMalloc(&b, 48 * MiB), cudaErrorMemoryAllocation);
  CUDA_FAILS(cudaMallocManaged(&m, 40 * MiB, cudaMemAttachGlobal), cudaErrorMemoryAllocation);
  read_log(log, start, text, sizeof text);
  CHECK(count(text, "CUDAW_MEM_LIMIT") == 1, "the warning is not said once:\n%s", text);

  CUDA_OK(cudaFree(a));
  CUDA_OK(cudaMalloc(&b, 40 * MiB)); /* within the limit again: no further line */
  CUDA_OK(cudaFree(b));
  read_log(log, start, text, sizeof text);
  CHECK(count(text, "CUDAW_MEM_LIMIT") == 1, "a line for an allocation that fitted:\n%s", text);
  printf("limit warning said once\n");
  return 0;
}
