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
