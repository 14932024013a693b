/* The one table of CUDAW_* environment options: name, default, one-line meaning. Shared by the
 * library and the launcher (`cudaw options`, `cudaw --help`; `--markdown` gives docs/options.md's
 * table, which a test keeps equal to it). */
#ifndef CUDAW_OPTIONS_H
#define CUDAW_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct cudaw_option {
  const char *name;      /* environment variable */
  const char *fallback;  /* default, as the user would write it */
  const char *meaning;   /* one line */
};

extern const struct cudaw_option cudaw_options[];
extern const unsigned cudaw_option_count;

/* The option's value: the environment's if set and non-empty, else its default. NULL for a
 * name that is not in the table (a programming error, logged by the caller). */
const char *cudaw_option(const char *name);

/* Lookups made through cudaw_option, for the start-up profile: always counted, timed (ns) once
 * cudaw_options_time(1) was called. */
void cudaw_options_time(int on);
void cudaw_options_stats(uint64_t *count, uint64_t *ns);

/* A 0/1 option: 0 or 1 as given; the default for any other value, with *invalid set (the
 * caller logs it, naming the variable). */
int cudaw_option_flag(const char *name, int *invalid);

/* The merged table: the rows above, then the checkpoint module's (ckpt_option_table in ckpt.h).
 * Static data, built at the first call. */
struct ckpt_option_info;
const struct ckpt_option_info *cudaw_options_table(size_t *count);

/* Print the whole table (these rows and the checkpoint module's; see cudaw_options_table in
 * ckpt.h), aligned, one option per line (markdown when `markdown` is nonzero). */
void cudaw_options_print(FILE *out, int markdown);

#endif
