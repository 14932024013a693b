/* The one table of CUDAW_* environment options: name, default, what it accepts, one-line meaning.
 * Shared by the library and the launcher (`cudaw options`, `cudaw --help`; `--markdown` gives
 * docs/options.md's table, which a test keeps equal to it). The rows are struct ckpt_option_info
 * (ckpt.h): the checkpoint module's own rows are merged in, and its checker validates all. */
#ifndef CUDAW_OPTIONS_H
#define CUDAW_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The option's value: the environment's if set, non-empty and valid (see
 * cudaw_options_validate), else its default. NULL for a name that is not in the table (a
 * programming error, logged by the caller). */
const char *cudaw_option(const char *name);

/* Lookups made through cudaw_option, for the start-up profile: always counted, timed (ns) once
 * cudaw_options_time(1) was called. */
void cudaw_options_time(int on);
void cudaw_options_stats(uint64_t *count, uint64_t *ns);

/* A 0/1 option (validated): 1 when it is 1. */
int cudaw_option_flag(const char *name);

/* Called with one line per problem: "NAME=value: expected ..." (with the row's default), or for
 * an unknown name "NAME is not a cudaw option ..." (default NULL). */
typedef void cudaw_option_report(const char *line, const char *default_value, void *ctx);

/* Check every row's value in the environment, once at start: each invalid one is reported and
 * from then on read as unset (cudaw_option gives its default). Returns how many were invalid. */
unsigned cudaw_options_validate(cudaw_option_report *report, void *ctx);

/* Report each CUDAW_* name in the environment that is no row of the table (CUDAW_EMU_*, the
 * emulated device's, excepted), with the closest row's name when it looks like a typo. Returns
 * how many. */
unsigned cudaw_options_unknown(cudaw_option_report *report, void *ctx);

/* The merged table: the rows of core/options.c, then the checkpoint module's (ckpt_option_table
 * in ckpt.h). Static data, built at the first call. */
struct ckpt_option_info;
const struct ckpt_option_info *cudaw_options_table(size_t *count);

/* Print the whole table aligned, each option with its default, meaning and what it accepts
 * (markdown when `markdown` is nonzero). */
void cudaw_options_print(FILE *out, int markdown);

#endif
