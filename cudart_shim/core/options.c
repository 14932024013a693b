/* The one table of CUDAW_* options. Modules read their options through cudaw_option(), so that
 * every variable, its default and its meaning stay in this one place. The checkpoint module keeps
 * its rows next to the code that parses them (ckpt_option_table); they are merged in here, so
 * that `cudaw options` and docs/options.md (generated from `cudaw options --markdown`) show one
 * table. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt.h"
#include "options.h"

const struct cudaw_option cudaw_options[] = {
  {"CUDAW_LOG", "warn", "log level: error, warn, info or debug"},
  {"CUDAW_LOG_FILE", "", "append the log to this file instead of standard error"},
  {"CUDAW_REAL_CUDART", "", "absolute path of the real libcudart.so to forward to (first choice)"},
  {"CUDAW_REAL_CUDA", "", "absolute path of the real libcuda.so.1 for the driver layer (default: "
                         "the one the dynamic loader finds)"},
  {"CUDAW_DRIVER", "1", "0: do not route dlopen(\"libcuda.so.1\") and driver entry-point queries "
                        "to cudaw (programs using the driver API are then not held or virtualised)"},
  {"CUDAW_STATIC_CHECK", "1", "warn when the program's CUDA runtime is linked statically (0: off)"},
  {"CUDAW_VMEM", "auto", "virtual device memory policy: auto (remap where the device has VMM), "
                         "remap, translate, or off (allocations not virtualised)"},
  {"CUDAW_VMEM_IDENTITY", "1", "translate: give an allocation its real address as its virtual "
                               "one where free, so pointers kept in device memory stay valid "
                               "until a resume moves memory (0: always from the virtual range; "
                               "off with CUDAW_CHECK=1)"},
  {"CUDAW_TEST_MOVE", "0", "translate, for tests: 1 makes every resume skip re-creating memory "
                          "at its old addresses with VMM and take the lowest free device address "
                          "of the current device first, so that memory comes back elsewhere (a "
                          "forced move) and graph updates can be tried on a GPU"},
  {"CUDAW_VA_SIZE", "auto", "size of the reserved virtual range (auto: 4 x the devices' memory)"},
  {"CUDAW_MEM_LIMIT", "", "device memory quota per device: bytes, K/M/G/T, or a percentage"},
  {"CUDAW_CHECK", "0", "1: validate pointer arguments against live allocations and report "
                       "use after free"},
  {"CUDAW_SHARE", "0", "1: share the GPU with other programs through cudawd (cudaw run --share "
                       "sets it)"},
  {"CUDAW_SHARE_IDLE_MS", "500", "sharing: after this many milliseconds without a CUDA call the "
                              "program tells cudawd it is idle, which may then swap it out for "
                              "a waiting program (0: never)"},
  {"CUDAW_GPU_SHARE", "", "share of the GPU's time the program may use, in percent (1-100): "
                          "launches are metered and held back (cudaw-ctl limit <pid> --gpu "
                          "changes it live)"},
  {"CUDAW_PROFILE", "0", "1: time cudaw's start-up (loading, registrations, vmem's start) and "
                         "print the profile at exit"},
};
const unsigned cudaw_option_count = sizeof cudaw_options / sizeof cudaw_options[0];

static atomic_uint_fast64_t lookups, lookup_ns;
static atomic_int lookups_timed;

void cudaw_options_time(int on) { atomic_store_explicit(&lookups_timed, on, memory_order_relaxed); }

void cudaw_options_stats(uint64_t *count, uint64_t *ns)
{
  *count = atomic_load_explicit(&lookups, memory_order_relaxed);
  *ns = atomic_load_explicit(&lookup_ns, memory_order_relaxed);
}

static uint64_t now_ns(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static const char *lookup(const char *name)
{
  for (unsigned i = 0; i < cudaw_option_count; i++) {
    if (strcmp(cudaw_options[i].name, name) != 0) continue;
    const char *value = getenv(name);
    return value && *value ? value : cudaw_options[i].fallback;
  }
  return NULL;
}

const char *cudaw_option(const char *name)
{
  atomic_fetch_add_explicit(&lookups, 1, memory_order_relaxed);
  if (!atomic_load_explicit(&lookups_timed, memory_order_relaxed)) return lookup(name);
  uint64_t start = now_ns();
  const char *value = lookup(name);
  atomic_fetch_add_explicit(&lookup_ns, now_ns() - start, memory_order_relaxed);
  return value;
}

int cudaw_option_flag(const char *name, int *invalid)
{
  const char *value = cudaw_option(name);
  *invalid = 0;
  if (value && strcmp(value, "0") == 0) return 0;
  if (value && strcmp(value, "1") == 0) return 1;
  *invalid = 1;
  for (unsigned i = 0; i < cudaw_option_count; i++)
    if (strcmp(cudaw_options[i].name, name) == 0) return strcmp(cudaw_options[i].fallback, "1") == 0;
  return 0;
}

/* The merged table: the rows above, then the checkpoint module's. Built once. */
#define MERGED_MAX 64
static struct ckpt_option_info merged[MERGED_MAX];
static size_t merged_count;
static pthread_once_t merged_once = PTHREAD_ONCE_INIT;

static void merge(void)
{
  size_t count = 0;
  const struct ckpt_option_info *checkpoint = ckpt_option_table(&count);
  for (unsigned i = 0; i < cudaw_option_count && merged_count < MERGED_MAX; i++)
    merged[merged_count++] = (struct ckpt_option_info){
        cudaw_options[i].name, cudaw_options[i].fallback, cudaw_options[i].meaning};
  for (size_t i = 0; i < count && merged_count < MERGED_MAX; i++) merged[merged_count++] = checkpoint[i];
}

const struct ckpt_option_info *cudaw_options_table(size_t *count)
{
  pthread_once(&merged_once, merge);
  *count = merged_count;
  return merged;
}

/* A '|' inside a cell would end it: escape it. */
static void markdown_cell(FILE *out, const char *text)
{
  for (; *text; text++) {
    if (*text == '|') fputc('\\', out);
    fputc(*text, out);
  }
}

void cudaw_options_print(FILE *out, int markdown)
{
  size_t count;
  const struct ckpt_option_info *table = cudaw_options_table(&count);
  if (markdown) {
    fputs("| variable | default | meaning |\n| --- | --- | --- |\n", out);
    for (size_t i = 0; i < count; i++) {
      fprintf(out, "| `%s` | %s%s%s | ", table[i].name, *table[i].default_value ? "`" : "",
              *table[i].default_value ? table[i].default_value : "(unset)",
              *table[i].default_value ? "`" : "");
      markdown_cell(out, table[i].meaning);
      fputs(" |\n", out);
    }
    return;
  }
  for (size_t i = 0; i < count; i++)
    fprintf(out, "  %-22s %-10s %s\n", table[i].name,
            *table[i].default_value ? table[i].default_value : "-", table[i].meaning);
}
