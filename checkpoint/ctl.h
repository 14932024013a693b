/* cudaw-ctl's own contract between its files (ctl.c: commands, sockets, replies; ctl_group.c:
 * the group pause). Not part of the checkpoint module's library. */
#ifndef CUDAW_CTL_H
#define CUDAW_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum exit_code {
  EXIT_OK = 0,
  EXIT_FAILED = 1,
  EXIT_USAGE = 2,
  EXIT_NO_PROCESS = 3,
  EXIT_NOT_CUDAW = 4,
  EXIT_PERMISSION = 5,
  EXIT_WRONG_STATE = 6,
  EXIT_NOT_HELD = 7, /* the process's device memory is not cudaw's (vmem off or not started) */
};

/* Print "cudaw-ctl: <message>" and "Try 'cudaw-ctl --help'." on stderr; returns EXIT_USAGE. */
int ctl_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Send one request line (with its '\n') to pid's control socket and read the reply line (without
 * it) into reply. Returns an exit code; problems reaching the process are printed on stderr. A
 * process stopped by a signal or a debugger, before or while it is asked, cannot answer:
 * EXIT_WRONG_STATE at once, and stderr says so. */
int ctl_ask(pid_t pid, const char *request, char *reply, size_t len);
/* The value of "key" in a flat one-line JSON reply, unquoted; false if absent. */
bool ctl_json_get(const char *json, const char *key, char *out, size_t len);
/* The exit code a reply stands for (EXIT_OK when "ok":true). */
int ctl_exit_for_reply(const char *json);
/* Print a checkpoint's or resume's reply as text (stdout), or a failed reply (stderr). */
void ctl_print_transition(pid_t pid, const char *reply);
void ctl_print_failure(pid_t pid, const char *reply);

#define CTL_GROUP_MAX 256 /* ranks in one group */

/* How a group pause runs (cudaw-ctl checkpoint --group). */
struct ctl_group_options {
  uint32_t drain_ms;  /* phase 2: the longest wait for one rank's device */
  uint32_t settle_ms; /* after a failed drain: how long the ranks run before the next try */
  uint32_t lease_ms;  /* a held rank reopens by itself after this long without a command */
  int attempts;       /* tries of phases 1-2 before giving up */
  bool json;          /* print the replies as JSON lines */
  const char *checkpoint_words; /* " release=all" etc., appended to each rank's checkpoint */
  const char *to_dir;           /* absolute; each rank's image goes to <to_dir>/<pid> (or NULL) */
};

/* Pause every pid together / resume every pid together; returns an exit code. On failure every
 * rank is running (checkpoint) or paused (resume) as before, and stderr says which rank failed. */
int ctl_group_checkpoint(const pid_t *pids, int count, const struct ctl_group_options *options);
int ctl_group_resume(const pid_t *pids, int count, const struct ctl_group_options *options);

#endif
