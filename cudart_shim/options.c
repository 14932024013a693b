/* The one table of CUDAW_* options. Modules read their options through cudaw_option(), so that
 * every variable, its default and its meaning stay in this one place. */
#include <stdlib.h>
#include <string.h>

#include "options.h"

const struct cudaw_option cudaw_options[] = {
  {"CUDAW_LOG", "warn", "log level: error, warn, info or debug"},
  {"CUDAW_LOG_FILE", "", "append the log to this file instead of standard error"},
  {"CUDAW_REAL_CUDART", "", "absolute path of the real libcudart.so to forward to (first choice)"},
  {"CUDAW_STATIC_CHECK", "1", "warn when the program's CUDA runtime is linked statically (0: off)"},
  {"CUDAW_VMEM", "auto", "virtual device memory policy: auto (remap where the device has VMM), "
                         "remap, translate, or off (allocations not virtualised)"},
  {"CUDAW_VA_SIZE", "auto", "size of the reserved virtual range (auto: 4 x the devices' memory)"},
  {"CUDAW_MEM_LIMIT", "", "device memory quota per device: bytes, K/M/G/T, or a percentage"},
  {"CUDAW_CHECK", "0", "1: validate pointer arguments against live allocations and report "
                       "use after free"},
};
const unsigned cudaw_option_count = sizeof cudaw_options / sizeof cudaw_options[0];

const char *cudaw_option(const char *name)
{
  for (unsigned i = 0; i < cudaw_option_count; i++) {
    if (strcmp(cudaw_options[i].name, name) != 0) continue;
    const char *value = getenv(name);
    return value && *value ? value : cudaw_options[i].fallback;
  }
  return NULL;
}

void cudaw_options_print(FILE *out, int markdown)
{
  if (markdown) {
    fputs("| variable | default | meaning |\n| --- | --- | --- |\n", out);
    for (unsigned i = 0; i < cudaw_option_count; i++)
      fprintf(out, "| `%s` | %s%s%s | %s |\n", cudaw_options[i].name,
              *cudaw_options[i].fallback ? "`" : "", *cudaw_options[i].fallback
                  ? cudaw_options[i].fallback : "(unset)",
              *cudaw_options[i].fallback ? "`" : "", cudaw_options[i].meaning);
    return;
  }
  for (unsigned i = 0; i < cudaw_option_count; i++)
    fprintf(out, "  %-22s %-10s %s\n", cudaw_options[i].name,
            *cudaw_options[i].fallback ? cudaw_options[i].fallback : "-", cudaw_options[i].meaning);
}
