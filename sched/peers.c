/* cudawd's connections and the limits that keep one user's clients, broken or hostile, from
 * locking the others out: connections per process, per uid and in all; joined programs per uid
 * and in all. At a limit, a connection that has been silent (never joined, or joined and never
 * sent work) is closed to make room; a peer that cannot be given room is refused with a reason
 * and counted against its uid. Connections are closed at the end of a step (sched_peer_sweep),
 * so that no pointer the socket loop holds goes stale; from the moment one is marked it counts
 * nowhere. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon.h"

#define PEER_CONNECTIONS 4   /* one process: a program needs 1, cudaw-ctl 1 */
#define UNJOINED_GRACE 0.5   /* a program or cudaw-ctl says what it wants at once */

/* The row of uid, made (reusing the longest gone) if it has none; NULL: every row has live
 * connections. */
static struct uid_account *uid_account(struct daemon *d, uid_t uid)
{
  struct uid_account *free_row = NULL, *stale = NULL;
  for (int i = 0; i < SCHED_MAX_UIDS; i++) {
    struct uid_account *a = &d->uids[i];
    if (a->used && a->uid == uid) return a;
    if (!a->used && !free_row) free_row = a;
    if (a->used && !a->connections && (!stale || a->last_seen < stale->last_seen)) stale = a;
  }
  struct uid_account *row = free_row ? free_row : stale; /* forget the longest gone */
  if (!row) return NULL;
  *row = (struct uid_account){.used = true, .uid = uid};
  return row;
}

/* Whether uid's clients are held to --max-per-user and PEER_CONNECTIONS a process: root's
 * never (the administrator's tools and jobs), nor those of a user's own cudawd, which serves that
 * user alone (there the table's limits hold, and silent connections make room). */
static bool limited(const struct daemon *d, uid_t uid)
{
  return uid != 0 && d->config.system;
}

static bool silent(const struct daemon *d, const struct program *p, double now)
{
  if (p->retired || p->close_reason) return false;
  if (!p->joined) return now - p->last_message >= UNJOINED_GRACE;
  return !p->worked && p->state != SCHED_SWAPPING_OUT && p->state != SCHED_SWAPPING_IN &&
         now - p->last_message >= d->config.client_timeout;
}

/* Mark p to be closed: from now on it holds no share, no pool range and no count. */
static void retire(struct daemon *d, struct program *p, const char *why)
{
  if (p->retired) return;
  p->retired = true;
  if (why) p->close_reason = why;
  else if (!p->close_reason) p->close_reason = "";
  struct uid_account *a = uid_account(d, p->uid);
  if (*p->close_reason) {
    if (a) a->closed++;
    sched_log_noisy(SCHED_NOISE_CLOSED, "cudawd: closing pid %ld (uid %u): %s\n", (long)p->pid,
                    (unsigned)p->uid, p->close_reason);
  } else if (p->joined) {
    sched_log_noisy(SCHED_NOISE_LEFT, "cudawd: pid %ld left (%s)\n", (long)p->pid,
                    sched_state_name(p->state));
  }
  if (p->joined) {
    d->joined--;
    if (a) a->programs--;
  }
  d->connections--;
  if (a) a->connections--;
  sched_forget(d, p);
  sched_pool_take_back(d, p, "gone");
  shutdown(p->fd, SHUT_RDWR);
}

/* The silent connection to close to make room: of uid `only` (or any uid when all is set, then
 * of the uid that holds the most), joined ones only when joined_only; the longest silent. */
static struct program *silent_victim(struct daemon *d, uid_t only, bool all, bool joined_only,
                                     const struct program *except)
{
  double now = sched_now();
  struct program *best = NULL;
  int best_weight = -1;
  for (struct program *p = d->programs; p; p = p->next) {
    if (p == except || (!all && p->uid != only) || (joined_only && !p->joined) ||
        !silent(d, p, now))
      continue;
    const struct uid_account *a = uid_account(d, p->uid);
    int weight = all && a ? a->connections : 0;
    if (weight > best_weight || (weight == best_weight && p->last_message < best->last_message)) {
      best = p;
      best_weight = weight;
    }
  }
  return best;
}

static bool make_room(struct daemon *d, uid_t uid, bool all, bool joined_only,
                      const struct program *except)
{
  struct program *victim = silent_victim(d, uid, all, joined_only, except);
  if (!victim) return false;
  retire(d, victim, victim->joined ? "joined and never sent work; its room is needed"
                                   : "connected and said nothing; its room is needed");
  return true;
}

/* status: -EACCES (not allowed at all) or -EUSERS (over a limit), for the program to say why. */
static void refuse(int fd, pid_t pid, uid_t uid, struct uid_account *a, int status,
                   const char *why)
{
  if (a) a->refused++;
  sched_log_noisy(SCHED_NOISE_REFUSED, "cudawd: refused pid %ld (uid %u): %s\n", (long)pid,
                  (unsigned)uid, why);
  struct program refused = {.fd = fd};
  struct sched_msg msg = {.version = SCHED_PROTO_VERSION, .type = SCHED_REPLY, .status = status};
  sched_send(&refused, &msg);
  close(fd);
}

struct program *sched_peer_admit(struct daemon *d, int fd, pid_t pid, uid_t uid, bool allowed)
{
  double now = sched_now();
  struct uid_account *a = uid_account(d, uid);
  char why[96];
  if (!allowed) {
    snprintf(why, sizeof why, "another user (only uid %u or root may join)", (unsigned)geteuid());
    refuse(fd, pid, uid, a, -EACCES, why);
    return NULL;
  }
  if (!a) {
    refuse(fd, pid, uid, NULL, -EUSERS, "connections of too many users at once");
    return NULL;
  }
  a->last_seen = now;
  a->connections_total++;
  int same_process = 0;
  for (const struct program *p = d->programs; p; p = p->next)
    same_process += p->pid == pid && !p->retired;
  if (limited(d, uid) && same_process >= PEER_CONNECTIONS) {
    snprintf(why, sizeof why, "its process holds %d connections already", same_process);
    refuse(fd, pid, uid, a, -EUSERS, why);
    return NULL;
  }
  int per_uid = 2 * d->config.max_per_user;
  if (limited(d, uid) && a->connections >= per_uid && !make_room(d, uid, false, false, NULL)) {
    snprintf(why, sizeof why, "its user holds %d connections, the most one user may "
             "(--max-per-user %d)", a->connections, d->config.max_per_user);
    refuse(fd, pid, uid, a, -EUSERS, why);
    return NULL;
  }
  if (d->connections >= SCHED_MAX_CONNECTIONS && !make_room(d, uid, true, false, NULL)) {
    snprintf(why, sizeof why, "%d connections already, none of them silent", d->connections);
    refuse(fd, pid, uid, a, -EUSERS, why);
    return NULL;
  }
  struct program *p = calloc(1, sizeof *p);
  if (!p) {
    close(fd);
    return NULL;
  }
  p->fd = fd;
  p->pid = pid; /* the kernel's word, not the message's */
  p->uid = uid;
  p->priority = 1;
  p->connected_at = p->last_message = now;
  for (int i = 0; i < SCHED_MAX_DEVICES; i++) p->slot[i] = -1;
  p->next = d->programs;
  d->programs = p;
  d->connections++;
  a->connections++;
  return p;
}

bool sched_peer_join(struct daemon *d, struct program *p)
{
  /* The same process (the kernel vouches for the pid) joined before on another connection: it
   * lost that one (a reconnect can overtake the hang-up). The newer one is the one it uses. */
  for (struct program *q = d->programs; q; q = q->next)
    if (q != p && q->joined && !q->retired && q->pid == p->pid && q->uid == p->uid)
      retire(d, q, "its process joined again on a new connection");
  struct uid_account *a = uid_account(d, p->uid);
  if (!a) return false;
  char why[96];
  if (limited(d, p->uid) && a->programs >= d->config.max_per_user &&
      !make_room(d, p->uid, false, true, p)) {
    snprintf(why, sizeof why, "its user has %d programs joined, the most one user may "
             "(--max-per-user)", a->programs);
    a->refused++;
    sched_log_noisy(SCHED_NOISE_REFUSED, "cudawd: refused pid %ld (uid %u) its join: %s\n",
                    (long)p->pid, (unsigned)p->uid, why);
    return false;
  }
  if (d->joined >= SCHED_MAX_PROGRAMS && !make_room(d, p->uid, true, true, p)) {
    a->refused++;
    sched_log_noisy(SCHED_NOISE_REFUSED, "cudawd: refused pid %ld (uid %u) its join: %d programs "
                    "joined already, none of them silent\n", (long)p->pid, (unsigned)p->uid,
                    d->joined);
    return false;
  }
  a->programs++;
  d->joined++;
  return true;
}

static void unlink_program(struct daemon *d, struct program *p)
{
  for (struct program **link = &d->programs; *link; link = &(*link)->next)
    if (*link == p) {
      *link = p->next;
      break;
    }
  close(p->fd);
  free(p);
}

void sched_peer_sweep(struct daemon *d)
{
  double now = sched_now();
  for (struct program *p = d->programs, *next; p; p = next) {
    next = p->next;
    if (!p->retired && !p->joined && now - p->last_message >= d->config.client_timeout)
      retire(d, p, "connected and said nothing");
    if (p->close_reason) {
      retire(d, p, NULL);
      unlink_program(d, p);
    }
  }
}

void sched_peer_count(struct daemon *d, const struct program *p, bool protocol_error)
{
  struct uid_account *a = uid_account(d, p->uid);
  if (!a) return;
  a->messages++;
  a->protocol_errors += protocol_error;
  a->last_seen = sched_now();
}

void sched_uid_info(const struct daemon *d, struct sched_snapshot *out)
{
  for (int i = 0; i < SCHED_MAX_UIDS; i++) {
    const struct uid_account *a = &d->uids[i];
    if (!a->used) continue;
    out->uid[out->uids++] = (struct sched_uid_info){
        .uid = a->uid, .connections = a->connections, .programs = a->programs,
        .connections_total = a->connections_total, .refused = a->refused, .closed = a->closed,
        .protocol_errors = a->protocol_errors, .messages = a->messages};
  }
}
