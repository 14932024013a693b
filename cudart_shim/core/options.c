/* The one table of CUDAW_* options. Modules read their options through cudaw_option(), so that
 * every variable, its default and its meaning stay in this one place. The checkpoint module keeps
 * its rows next to the code that parses them (ckpt_option_table); they are merged in here, so
 * that `cudaw options` and docs/options.md (generated from `cudaw options --markdown`) show one
 * table. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt.h"
#include "options.h"

#define BOOL CKPT_OPTION_BOOL, NULL, 0, 0, NULL
#define CHOICE(words) CKPT_OPTION_CHOICE, words, 0, 0, NULL

static const struct ckpt_option_info own[] = {
  {"CUDAW_LOG", "warn", "log level: error, warn, info or debug", CHOICE("error|warn|info|debug")},
  {"CUDAW_LOG_FILE", "", "append the log to this file instead of standard error",
   CKPT_OPTION_LOG_FILE, NULL, 0, 0, NULL},
  {"CUDAW_REAL_CUDART", "", "absolute path of the real libcudart.so to forward to (first choice)",
   CKPT_OPTION_FILE, NULL, 0, 0, NULL},
  {"CUDAW_REAL_CUDA", "", "absolute path of the real libcuda.so.1 for the driver layer (default: "
                         "the one the dynamic loader finds)", CKPT_OPTION_FILE, NULL, 0, 0, NULL},
  {"CUDAW_DRIVER", "1", "0: do not route dlopen(\"libcuda.so.1\") and driver entry-point queries "
                        "to cudaw (programs using the driver API are then not held or virtualised)",
   BOOL},
  {"CUDAW_STATIC_CHECK", "1", "warn when the program's CUDA runtime is linked statically (0: off)",
   BOOL},
  {"CUDAW_VMEM", "auto", "virtual device memory policy: auto (remap where the device has VMM), "
                         "remap, translate, or off (allocations not virtualised)",
   CHOICE("auto|remap|translate|off")},
  {"CUDAW_VMEM_IDENTITY", "1", "translate: give an allocation its real address as its virtual "
                               "one where free, so pointers kept in device memory stay valid "
                               "until a resume moves memory (0: always from the virtual range; "
                               "off with CUDAW_CHECK=1)", BOOL},
  {"CUDAW_TEST_MOVE", "0", "translate, for tests: 1 makes every resume skip re-creating memory "
                          "at its old addresses with VMM and take the lowest free device address "
                          "of the current device first, so that memory comes back elsewhere (a "
                          "forced move) and graph updates can be tried on a GPU", BOOL},
  {"CUDAW_VMEM_PIECE", "auto", "remap: back an allocation larger than this with several physical "
                              "allocations of at most this size, which an exchange of two "
                              "programs on one GPU (docs/sharing.md) gives back and re-creates "
                              "one by one, a checkpoint gives back as each is saved and a resume "
                              "makes just ahead of its copy (auto: 1G)",
   CKPT_OPTION_SIZE, "auto", 2ull << 20, 1ull << 40, NULL},
  {"CUDAW_VA_SIZE", "auto", "size of the reserved virtual range (auto: 4 x the devices' memory)",
   CKPT_OPTION_SIZE, "auto", 1, 0, NULL},
  {"CUDAW_MEM_LIMIT", "", "device memory quota per device: bytes, K/M/G/T, or a percentage",
   CKPT_OPTION_SIZE_OR_PERCENT, "none", 0, 0, NULL},
  {"CUDAW_CHECK", "0", "1: validate pointer arguments against live allocations and report "
                       "use after free", BOOL},
  {"CUDAW_SHARE", "0", "1: share the GPU with other programs through cudawd (cudaw run --share "
                       "sets it)", BOOL},
  {"CUDAW_SHARE_IDLE_MS", "100", "sharing: after this many milliseconds without a CUDA call the "
                              "program tells cudawd it is idle, which may then swap it out for "
                              "a waiting program (0: never)",
   CKPT_OPTION_NUMBER, NULL, 0, 3600000, "milliseconds"},
  {"CUDAW_BORROW_POOL", "auto", "not sharing (CUDAW_SHARE not 1): auto borrows the host-memory "
                               "pool of this user's cudawd, if one answers on "
                               "CUDAW_SCHED_SOCKET, for the checkpoint images (page-locked "
                               "ahead, in place of the image reserve); off never connects",
   CHOICE("auto|off")},
  {"CUDAW_GPU_SHARE", "", "share of the GPU's time the program may use, in percent (1-100): "
                          "launches are metered and held back (cudaw-ctl limit <pid> --gpu "
                          "changes it live; 0 or off: no limit)",
   CKPT_OPTION_PERCENT, "off|none", 0, 100, NULL},
  {"CUDAW_TEST_REMOVE_DELAY_MS", "0", "test-only: removing a spilled image's files (docs/"
                                     "sharing.md, the disk tier) takes this much longer, as on "
                                     "a slow disk; never set it in production",
   CKPT_OPTION_NUMBER, NULL, 0, 10000, "milliseconds"},
  {"CUDAW_PROFILE", "0", "1: time cudaw's start-up (loading, registrations, vmem's start) and "
                         "print the profile at exit", BOOL},
};

#undef BOOL
#undef CHOICE

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

/* The merged table: the rows above, then the checkpoint module's. Built once. */
#define MERGED_MAX 64
static struct ckpt_option_info merged[MERGED_MAX];
static bool rejected[MERGED_MAX]; /* invalid in the environment: its default is used */
static size_t merged_count;
static pthread_once_t merged_once = PTHREAD_ONCE_INIT;

static void merge(void)
{
  size_t count = 0;
  const struct ckpt_option_info *checkpoint = ckpt_option_table(&count);
  for (size_t i = 0; i < sizeof own / sizeof own[0] && merged_count < MERGED_MAX; i++)
    merged[merged_count++] = own[i];
  for (size_t i = 0; i < count && merged_count < MERGED_MAX; i++)
    merged[merged_count++] = checkpoint[i];
}

const struct ckpt_option_info *cudaw_options_table(size_t *count)
{
  pthread_once(&merged_once, merge);
  *count = merged_count;
  return merged;
}

static const char *lookup(const char *name)
{
  size_t count;
  const struct ckpt_option_info *table = cudaw_options_table(&count);
  for (size_t i = 0; i < count; i++) {
    if (strcmp(table[i].name, name) != 0) continue;
    const char *value = getenv(name);
    return value && *value && !rejected[i] ? value : table[i].default_value;
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

int cudaw_option_flag(const char *name)
{
  const char *value = cudaw_option(name);
  return value && strcmp(value, "1") == 0;
}

/* Edit distance of two short names (a typo is a letter or two). */
static size_t distance(const char *a, const char *b)
{
  size_t lb = strlen(b), row[64];
  if (lb >= sizeof row / sizeof row[0]) return SIZE_MAX;
  for (size_t j = 0; j <= lb; j++) row[j] = j;
  for (size_t i = 1; *a; a++, i++) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= lb; j++) {
      size_t above = row[j];
      size_t best = diagonal + (*a != b[j - 1]);
      if (above + 1 < best) best = above + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diagonal = above;
    }
  }
  return row[lb];
}

unsigned cudaw_options_validate(cudaw_option_report *report, void *ctx)
{
  size_t count;
  const struct ckpt_option_info *table = cudaw_options_table(&count);
  unsigned bad = 0;
  for (size_t i = 0; i < count; i++) {
    char line[512];
    rejected[i] = ckpt_option_env_invalid(&table[i], line, sizeof line) != 0;
    if (!rejected[i]) continue;
    bad++;
    if (report) report(line, table[i].default_value, ctx);
  }
  return bad;
}

unsigned cudaw_options_unknown(cudaw_option_report *report, void *ctx)
{
  extern char **environ;
  size_t count;
  const struct ckpt_option_info *table = cudaw_options_table(&count);
  unsigned unknown = 0;
  for (char **entry = environ; entry && *entry; entry++) {
    const char *name = *entry;
    size_t length = strcspn(name, "=");
    /* The emulated device's own options, and the build's, are not cudaw's to judge. */
    if (strncmp(name, "CUDAW_", 6) != 0 || strncmp(name, "CUDAW_EMU_", 10) == 0) continue;
    char wanted[64];
    if (length >= sizeof wanted) length = sizeof wanted - 1;
    memcpy(wanted, name, length);
    wanted[length] = '\0';
    const char *closest = NULL;
    size_t best = 3; /* suggest only a name at most two edits away */
    bool known = false;
    for (size_t i = 0; i < count && !known; i++) {
      known = strcmp(table[i].name, wanted) == 0;
      size_t d = distance(wanted, table[i].name);
      if (d < best) {
        best = d;
        closest = table[i].name;
      }
    }
    if (known) continue;
    unknown++;
    char line[200];
    snprintf(line, sizeof line, "%s is not a cudaw option%s%s%s; it is ignored (cudaw options "
             "lists them)", wanted, closest ? " (did you mean " : "", closest ? closest : "",
             closest ? "?)" : "");
    if (report) report(line, NULL, ctx);
  }
  return unknown;
}

/* A '|' inside a cell would end it: escape it. */
static void markdown_cell(FILE *out, const char *text)
{
  for (; *text; text++) {
    if (*text == '|') fputc('\\', out);
    fputc(*text, out);
  }
}

/* Text wrapped at `width` columns, continuation lines indented by `indent`. */
static void wrapped(FILE *out, const char *text, size_t indent, size_t width)
{
  size_t column = indent;
  while (*text) {
    size_t word = strcspn(text, " ");
    if (column > indent && column + 1 + word > width) {
      fprintf(out, "\n%*s", (int)indent, "");
      column = indent;
    } else if (column > indent) {
      fputc(' ', out);
      column++;
    }
    fprintf(out, "%.*s", (int)word, text);
    column += word;
    text += word;
    while (*text == ' ') text++;
  }
  fputc('\n', out);
}

void cudaw_options_print(FILE *out, int markdown)
{
  size_t count;
  const struct ckpt_option_info *table = cudaw_options_table(&count);
  char accepts[256];
  if (markdown) {
    fputs("| variable | default | accepts | meaning |\n| --- | --- | --- | --- |\n", out);
    for (size_t i = 0; i < count; i++) {
      ckpt_option_describe(&table[i], accepts, sizeof accepts);
      fprintf(out, "| `%s` | %s%s%s | ", table[i].name, *table[i].default_value ? "`" : "",
              *table[i].default_value ? table[i].default_value : "(unset)",
              *table[i].default_value ? "`" : "");
      markdown_cell(out, strncmp(accepts, "expected ", 9) == 0 ? accepts + 9 : accepts);
      fputs(" | ", out);
      markdown_cell(out, table[i].meaning);
      fputs(" |\n", out);
    }
    return;
  }
  /* Name and default on one line, the meaning and what is accepted below, indented: long
   * defaults ("min(50% of RAM, available - 8G)") never run into the meaning. */
  for (size_t i = 0; i < count; i++) {
    ckpt_option_describe(&table[i], accepts, sizeof accepts);
    fprintf(out, "  %-26s default: %s\n", table[i].name,
            *table[i].default_value ? table[i].default_value : "(unset)");
    fputs("      ", out);
    wrapped(out, table[i].meaning, 6, 96);
    fputs("      accepts: ", out);
    wrapped(out, strncmp(accepts, "expected ", 9) == 0 ? accepts + 9 : accepts, 15, 96);
  }
}
