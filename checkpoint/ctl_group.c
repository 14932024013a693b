/* The group pause: `cudaw-ctl checkpoint --group` / `resume --group` over the ranks of one job
 * (processes that wait for each other in collectives, e.g. NCCL). Pausing ranks one at a time can
 * hang: a rank paused before it enqueued its side of a collective leaves its peers' collective
 * spinning on the device, so their drain never ends. So a group pause runs in phases:
 *   1. hold: close every rank's gate without draining. A rank that cannot be held (API calls
 *      still in flight, gone, not cudaw) reopens every gate held so far and the pause fails.
 *   2. drain: wait a bounded time for each rank's device. A collective one rank enqueued whose
 *      partner was held before enqueueing its side never completes: if any drain is not done in
 *      time, reopen gates, let those ranks run for settle_ms, and try phases 1-2 again; after
 *      `attempts` tries fail with every rank running, naming the rank that would not drain.
 *      Which gates reopen: the ranks that drained are the ones behind (a rank waiting in a
 *      collective waits for one that has not enqueued its side, so has nothing pending), so
 *      mostly only they run and catch up while the waiting ranks stay held: with one slow rank
 *      whose thread waits for its device each step, the fast ranks are almost always waiting
 *      for its next step, and a hold at a random moment nearly never finds all drained. Every
 *      third try reopens every gate instead: a fast rank released to catch up can run into
 *      the next collective at once, and the ranks then take turns at being ahead.
 *   3. checkpoint every rank (in parallel: each copies its own devices). If one fails (it then
 *      runs again), the others are restored with "resume hold" and every gate reopens.
 * Resume restores every rank with its gate still closed ("resume hold"), then reopens all gates
 * together; if one rank cannot be restored, the restored ones are checkpointed again. Any failure
 * leaves every rank running (checkpoint) or every rank paused (resume), never a mix, except when
 * an undo step fails too: then stderr names the rank and the command that finishes the job. A
 * held rank whose controller dies reopens by itself after lease_ms. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt.h"
#include "ctl.h"

#define REPLY_MAX 8192

/* One rank's request and reply, asked on a thread of its own when the ranks go in parallel. */
struct rank {
  pid_t pid;
  char request[4400];
  char reply[REPLY_MAX];
  int code;
};

static void *ask_thread(void *arg) {
  struct rank *r = arg;
  r->code = ctl_ask(r->pid, r->request, r->reply, sizeof r->reply);
  if (r->code == EXIT_OK) r->code = ctl_exit_for_reply(r->reply);
  return NULL;
}

/* Send each rank marked in `which` (all when NULL) its request, all at once; wait for every reply. */
static void ask_all(struct rank *ranks, int count, const bool *which) {
  pthread_t threads[CTL_GROUP_MAX];
  bool started[CTL_GROUP_MAX] = {0};
  for (int i = 0; i < count; i++) {
    started[i] = false;
    if (which && !which[i]) continue;
    started[i] = pthread_create(&threads[i], NULL, ask_thread, &ranks[i]) == 0;
    if (!started[i]) ask_thread(&ranks[i]);
  }
  for (int i = 0; i < count; i++)
    if (started[i]) pthread_join(threads[i], NULL);
}

static void set_request(struct rank *r, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

static void set_request(struct rank *r, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(r->request, sizeof r->request, format, args);
  va_end(args);
  r->reply[0] = '\0';
  r->code = EXIT_FAILED;
}

static const char *reason_of(const struct rank *r, char *buf, size_t len) {
  if (!ctl_json_get(r->reply, "reason", buf, len)) snprintf(buf, len, "no reply (see above)");
  return buf;
}

static void sleep_ms(uint32_t ms) {
  struct timespec t = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0) {
  }
}

/* Every rank answers and is in `state`; else prints why and returns an exit code. */
static int check_states(struct rank *ranks, int count, const char *state) {
  for (int i = 0; i < count; i++) {
    set_request(&ranks[i], "status\n");
    ask_thread(&ranks[i]);
    if (ranks[i].code != EXIT_OK) {
      fprintf(stderr, "cudaw-ctl: group: pid %ld cannot be controlled; nothing was done\n",
              (long)ranks[i].pid);
      return ranks[i].code;
    }
    char now[16] = "";
    ctl_json_get(ranks[i].reply, "state", now, sizeof now);
    if (strcmp(now, state) != 0) {
      fprintf(stderr, "cudaw-ctl: group: pid %ld is %s, not %s; nothing was done\n",
              (long)ranks[i].pid, now, state);
      return EXIT_WRONG_STATE;
    }
  }
  return EXIT_OK;
}

/* Reopen the gates of the ranks marked in `held`, all at once. */
static void unhold(struct rank *ranks, int count, const bool *held) {
  for (int i = 0; i < count; i++) set_request(&ranks[i], "unhold\n");
  ask_all(ranks, count, held);
  for (int i = 0; i < count; i++)
    if (held[i] && ranks[i].code != EXIT_OK) {
      char why[512];
      fprintf(stderr, "cudaw-ctl: group: pid %ld: unhold failed: %s (its gate reopens by itself "
              "when its lease runs out)\n", (long)ranks[i].pid, reason_of(&ranks[i], why, sizeof why));
    }
}

/* Phase 1: hold every rank not held yet. 0 with every rank held, or an exit code with none held. */
static int hold_all(struct rank *ranks, int count, bool *held, const struct ctl_group_options *o) {
  for (int i = 0; i < count; i++) { /* one by one: a refusal stops before the next rank */
    if (held[i]) continue;
    set_request(&ranks[i], "hold lease=%u\n", o->lease_ms);
    ask_thread(&ranks[i]);
    if (ranks[i].code == EXIT_OK) {
      held[i] = true;
      continue;
    }
    char why[512];
    fprintf(stderr, "cudaw-ctl: group: pid %ld cannot be held: %s; every rank runs on\n",
            (long)ranks[i].pid, reason_of(&ranks[i], why, sizeof why));
    int code = ranks[i].code;
    unhold(ranks, count, held);
    return code;
  }
  return EXIT_OK;
}

/* Phase 2: drain every held rank; drained[i] says which did. 0 when all drained; else the index
 * of a rank that did not drain in time (-1 - index), or an exit code for another failure. Ranks
 * stay held. */
static int drain_all(struct rank *ranks, int count, bool *drained,
                     const struct ctl_group_options *o) {
  for (int i = 0; i < count; i++) set_request(&ranks[i], "drain wait=%u\n", o->drain_ms);
  ask_all(ranks, count, NULL);
  int slow = 0;
  for (int i = 0; i < count; i++) {
    drained[i] = ranks[i].code == EXIT_OK;
    if (drained[i]) continue;
    char errno_text[16] = "";
    ctl_json_get(ranks[i].reply, "errno", errno_text, sizeof errno_text);
    if (atoi(errno_text) != ETIMEDOUT) {
      char why[512];
      fprintf(stderr, "cudaw-ctl: group: pid %ld: drain failed: %s\n", (long)ranks[i].pid,
              reason_of(&ranks[i], why, sizeof why));
      return ranks[i].code == EXIT_OK ? EXIT_FAILED : ranks[i].code;
    }
    if (!slow) slow = -1 - i;
  }
  return slow;
}

/* Undo a partly done phase 3: restore the paused ranks with their gates closed, then reopen
 * every gate. Returns how many ranks could not be brought back. */
static int undo_checkpoints(struct rank *ranks, int count, const bool *paused,
                            const struct ctl_group_options *o) {
  for (int i = 0; i < count; i++) set_request(&ranks[i], "resume hold lease=%u\n", o->lease_ms);
  ask_all(ranks, count, paused);
  bool held[CTL_GROUP_MAX] = {0};
  int stuck = 0;
  for (int i = 0; i < count; i++) {
    held[i] = paused[i] && ranks[i].code == EXIT_OK;
    if (paused[i] && !held[i]) {
      char why[512];
      fprintf(stderr, "cudaw-ctl: group: pid %ld stays PAUSED: its resume failed: %s (retry: "
              "cudaw-ctl resume %ld)\n", (long)ranks[i].pid, reason_of(&ranks[i], why, sizeof why),
              (long)ranks[i].pid);
      stuck++;
    }
  }
  unhold(ranks, count, held);
  return stuck;
}

static void print_replies(struct rank *ranks, int count, const struct ctl_group_options *o) {
  for (int i = 0; i < count; i++) {
    if (o->json) printf("%s\n", ranks[i].reply);
    else ctl_print_transition(ranks[i].pid, ranks[i].reply);
  }
}

int ctl_group_checkpoint(const pid_t *pids, int count, const struct ctl_group_options *o) {
  struct rank *ranks = calloc((size_t)count, sizeof *ranks);
  if (!ranks) return EXIT_FAILED;
  for (int i = 0; i < count; i++) ranks[i].pid = pids[i];
  int code = check_states(ranks, count, "running");
  int attempt = 0, slow = 0;
  bool held[CTL_GROUP_MAX] = {0}, drained[CTL_GROUP_MAX] = {0};
  while (code == EXIT_OK && attempt < o->attempts) {
    attempt++;
    if ((code = hold_all(ranks, count, held, o)) != EXIT_OK) break; /* none held now */
    slow = drain_all(ranks, count, drained, o);
    if (slow == 0) break;
    if (slow > 0) { /* not a timeout: stop */
      unhold(ranks, count, held);
      code = slow;
      break;
    }
    int behind = 0;
    for (int i = 0; i < count; i++) behind += drained[i];
    bool all = !behind || attempt % 3 == 0;
    bool *reopen = all ? held : drained;
    if (!o->json)
      fprintf(stderr, "cudaw-ctl: group: try %d of %d: pid %ld did not drain within %u ms; %s "
              "for %u ms, then again\n", attempt, o->attempts, (long)pids[-1 - slow], o->drain_ms,
              all ? "every rank runs" : "the ranks that drained run", o->settle_ms);
    unhold(ranks, count, reopen);
    for (int i = 0; i < count; i++)
      if (reopen[i]) held[i] = false;
    sleep_ms(o->settle_ms);
  }
  if (code == EXIT_OK && slow < 0) {
    unhold(ranks, count, held);
    unhold(ranks, count, held);
    fprintf(stderr, "cudaw-ctl: group: pid %ld would not drain in %d tries (is it waiting for a "
            "process outside the group?); every rank runs on\n", (long)pids[-1 - slow], attempt);
    code = EXIT_FAILED;
  }
  if (code != EXIT_OK) {
    free(ranks);
    return code;
  }
  /* Phase 3: every rank is held and drained. */
  for (int i = 0; i < count; i++) {
    char dir[4200] = "";
    if (o->to_dir) snprintf(dir, sizeof dir, " to=%s/%ld", o->to_dir, (long)pids[i]);
    set_request(&ranks[i], "checkpoint%s%s\n", o->checkpoint_words ? o->checkpoint_words : "", dir);
  }
  ask_all(ranks, count, NULL);
  bool paused[CTL_GROUP_MAX] = {0};
  int failed = -1;
  for (int i = 0; i < count; i++) {
    paused[i] = ranks[i].code == EXIT_OK;
    if (!paused[i] && failed < 0) failed = i;
  }
  if (failed < 0) {
    print_replies(ranks, count, o);
    if (!o->json)
      printf("group of %d paused together (%d tr%s)\n", count, attempt, attempt == 1 ? "y" : "ies");
    free(ranks);
    return EXIT_OK;
  }
  char why[512];
  fprintf(stderr, "cudaw-ctl: group: pid %ld: checkpoint failed: %s; resuming the others\n",
          (long)pids[failed], reason_of(&ranks[failed], why, sizeof why));
  code = ranks[failed].code;
  /* A rank whose checkpoint failed runs again already; the rest come back together. */
  if (undo_checkpoints(ranks, count, paused, o) == 0)
    fprintf(stderr, "cudaw-ctl: group: every rank runs on\n");
  free(ranks);
  return code;
}

int ctl_group_resume(const pid_t *pids, int count, const struct ctl_group_options *o) {
  struct rank *ranks = calloc((size_t)count, sizeof *ranks);
  if (!ranks) return EXIT_FAILED;
  for (int i = 0; i < count; i++) ranks[i].pid = pids[i];
  int code = check_states(ranks, count, "paused");
  if (code != EXIT_OK) {
    free(ranks);
    return code;
  }
  for (int i = 0; i < count; i++) set_request(&ranks[i], "resume hold lease=%u\n", o->lease_ms);
  ask_all(ranks, count, NULL);
  bool held[CTL_GROUP_MAX] = {0};
  int failed = -1;
  for (int i = 0; i < count; i++) {
    held[i] = ranks[i].code == EXIT_OK;
    if (!held[i] && failed < 0) failed = i;
  }
  if (failed < 0) {
    struct rank *replies = malloc((size_t)count * sizeof *replies);
    if (replies) memcpy(replies, ranks, (size_t)count * sizeof *replies);
    unhold(ranks, count, held); /* every gate opens within a few round trips of the others */
    if (replies) print_replies(replies, count, o);
    if (!o->json) printf("group of %d resumed together\n", count);
    free(replies);
    free(ranks);
    return EXIT_OK;
  }
  char why[512];
  fprintf(stderr, "cudaw-ctl: group: pid %ld: resume failed: %s; pausing the others again\n",
          (long)pids[failed], reason_of(&ranks[failed], why, sizeof why));
  code = ranks[failed].code;
  /* Checkpoint the restored ones from held: their gates never opened. */
  for (int i = 0; i < count; i++)
    set_request(&ranks[i], "checkpoint%s\n", o->checkpoint_words ? o->checkpoint_words : "");
  ask_all(ranks, count, held);
  int running = 0;
  for (int i = 0; i < count; i++)
    if (held[i] && ranks[i].code != EXIT_OK) {
      fprintf(stderr, "cudaw-ctl: group: pid %ld RUNS while the others are paused: its checkpoint "
              "failed: %s\n", (long)pids[i], reason_of(&ranks[i], why, sizeof why));
      running++;
    }
  if (!running) fprintf(stderr, "cudaw-ctl: group: every rank stays paused\n");
  free(ranks);
  return code;
}
