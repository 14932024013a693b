/* cudaw-ctl's scheduler commands (ctl_sched.c), dispatched from checkpoint/ctl.c. */
#ifndef CUDAW_SCHED_CTL_H
#define CUDAW_SCHED_CTL_H

#include <stdbool.h>

/* Handle `sched` and `priority <pid> N` (args without the program name and --json); returns
 * cudaw-ctl's exit code. */
int sched_ctl_main(int count, const char *const *args, bool json);

/* From checkpoint/ctl.c: "cudaw-ctl: <message>" and the pointer to --help on stderr; returns the
 * usage exit code (2). */
int ctl_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
