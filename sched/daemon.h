/* cudawd inside: the programs and devices it schedules (one schedule per device), shared by the
 * socket loop (cudawd.c), the policy (schedule.c) and the reports (report.c). Single-threaded:
 * everything runs on the daemon's poll loop. */
#ifndef CUDAW_SCHED_DAEMON_H
#define CUDAW_SCHED_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "pool.h"
#include "sched_proto.h"

#define SCHED_DEFAULT_PER_USER 16
#define SCHED_IDLE_KIN 16         /* commands whose last idle phase is remembered */
#define SCHED_RATE_MIN_BYTES (256ull << 20) /* a swap smaller than this leaves the rates be */

struct sched_config {
  double quantum;          /* --quantum: seconds of a turn, times the program's priority */
  double min_run;          /* --min-run: an idle program keeps its turn at least this long */
  double idle_cpu;         /* a program using less CPU than this fraction counts as idle */
  uint64_t device_memory;  /* --device-memory in bytes; 0: device_fraction of the device */
  double device_fraction;  /* --device-memory N% (or the default margin) */
  double swap_timeout;     /* --swap-timeout: a checkpoint or resume not answered by then no
                            * longer holds up the others */
  const char *gpu_list;    /* --gpu-list: the driver's GPU directory; keys must be its UUIDs
                            * (when it exists); "none": any well-formed key */
  const char *pci_devices; /* where each GPU's PCIe link is read (NULL: /sys/bus/pci/devices),
                            * by the directory name of the GPU list: its bus id */
  const char *metrics_file;
  uint64_t host_memory;    /* --host-memory: the pool's size (0: no pool) */
  bool host_memory_set;    /* given; else the default from the machine's memory */
  double pool_release;     /* --pool-release: the pool's window shrinks (memory given back)
                            * after being larger than needed this long */
  double idle_exit;        /* --idle-exit: exit after this long without a program (0: never) */
  bool verbose;            /* --verbose: log every message and decision */
  bool system;             /* --system: root, one cudawd for every user of the node */
  int max_per_user;        /* --max-per-user: programs one uid (not root) may have joined; it
                            * may hold twice as many connections */
  double client_timeout;   /* --client-timeout: a peer silent this long (never joined, or joined
                            * and never sent work) is closed to make room; an order to a program
                            * that never sent work times out after it */
  uint64_t log_max;        /* --log-max: a log file larger than this is rotated (0: never) */
  const char *spill_dir;   /* --spill-dir: the disk tier's directory (NULL: no disk tier) */
  bool resume_ahead;       /* not --no-resume-ahead: an idle swapped-out program comes back
                            * where the device has room and nobody waits */
};

/* A uid's standing (peers.c): its limits are counted here. */
struct uid_account {
  bool used;
  uid_t uid;
  int connections, programs;  /* open, joined now */
  double last_seen;
  uint64_t connections_total, refused, closed, protocol_errors, messages;
};

struct device {
  bool used;
  char key[SCHED_KEY_LEN];
  uint64_t capacity;
  uint64_t total;          /* what the device has (its first SCHED_DEVICE) */
  uint64_t outside;        /* held outside cudawd's books: contexts, libraries, other processes
                            * (from the last free figure a program reported) */
  double outside_at;       /* when `outside` was last observed (or probed) */
  uint64_t max_resident;
  uint64_t swaps;
  double link_rate;        /* bytes/s a swap is priced at before one is measured, from the
                            * GPU's PCIe link (0: unknown, the defaults) */
};

struct program {
  int fd;
  pid_t pid;
  uid_t uid;               /* the peer's, from SO_PEERCRED */
  bool joined;             /* sent SCHED_HELLO (a connection without it is cudaw-ctl) */
  enum sched_program_state state;
  int slot[SCHED_MAX_DEVICES];        /* ordinal -> device index, -1 unknown */
  uint64_t bytes[SCHED_MAX_DEVICES];  /* per device index: what it holds when resident */
  bool wants;              /* an allocation waits: it wants want_bytes on device want_slot */
  int want_slot;
  uint64_t want_bytes;
  bool in_flight[SCHED_MAX_DEVICES]; /* per device index: granted, allocation not reported yet */
  uint64_t before_grant[SCHED_MAX_DEVICES]; /* what it held when that grant was given */
  bool usage_seen[SCHED_MAX_DEVICES]; /* reported what it holds since its hello */
  int priority;            /* weight: a turn lasts quantum x priority; higher goes first */
  double state_since;      /* when it entered its state */
  double accounted_at;     /* time is accounted to its state up to here */
  double resident_since;   /* start of its current turn */
  double wanting_since;    /* when it began waiting or was swapped out */
  double gpu_seconds, swap_seconds, wait_seconds; /* gpu: running resident, not idle by its hint */
  double share_seconds;    /* GPU seconds over its priority since it joined, its fair share's
                            * clock (schedule.c): the least goes first, the most is swapped out */
  bool share_started;      /* share_seconds was set level with the programs present */
  uint64_t swaps;
  double skip_until;       /* a checkpoint of it failed (pause timeout): try others first */
  bool leaving;            /* it said it exits (SCHED_LEAVING): not ordered out or in while it
                            * goes, its memory counted until its connection closes; for
                            * --client-timeout only (expire_leaving): one that stays is
                            * scheduled as any other again */
  double leaving_at;       /* when it said so (0: never) */
  int corrupt_resumes;     /* resumes in a row that found its image corrupt (-EBADMSG) */
  int pending_op;          /* the SCHED_DONE it owes: 1 checkpoint, 2 resume, 3 spill, 0 none */
  double connected_at;
  uint64_t last_grant_bytes;
  double last_grant_at;    /* 0: never granted */
  uint64_t retries, failed; /* see struct sched_program_detail */
  /* CPU use from /proc/<pid>/stat, for the idle test */
  double cpu_time, cpu_at;
  bool idle;
  double idle_since;       /* when `idle` became true (the start of that CPU sample) */
  bool pool_sent;          /* it was sent the pool (SCHED_POOL) */
  uint64_t pool_window;    /* the window last sent to it (0: none yet) */
  uint64_t pool_acked;     /* the window it said it mapped, at most the one last sent: it is
                            * lent ranges below this only */
  bool pool_cramped;       /* a checkpoint or handover found no room below pool_acked; the
                            * window may have it: send it */
  bool pool_alone;         /* told it is alone and idle (SCHED_POOL_ALONE 1): it gives back its
                            * page-locking of the pool until told 0 (tell_alone) */
  bool pool_grows;         /* it grows a window in place (SCHED_POOL_GROWS): send each larger
                            * one at once */
  struct pool_loan loan;   /* the range lent for its image (length 0: none) */
  pid_t loan_heir;         /* a handover: this program's image still lies in part of `loan`;
                            * the range goes to it when taken back from this one */
  bool gpu_idle;           /* it said it makes no CUDA call (SCHED_GPU_IDLE): may be swapped out at
                            * once its idleness has cost what a swap costs; swapped out, it is
                            * brought back when it calls again, or ahead of that where the
                            * device has room and nobody waits (resume_ahead) */
  double gpu_idle_since;
  bool ahead;              /* resumed ahead of its call (the device had room, nobody waited):
                            * until it calls the GPU, anyone who wants the room has it at once */
  double last_idle;        /* how long its last idle phase (by the hint) lasted, seconds */
  uint64_t command_key;    /* a hash of its command line (/proc/<pid>/cmdline at its hello; 0:
                            * unread): before its own first idle phase ends, the last one of a
                            * program of its user and command stands for it (idle_kin) */
  bool host_refused;       /* logged: not swapped out, its image would leave the host short */
  bool worked;             /* sent work after its hello: described a device, asked for or
                            * reported memory, answered an order (else it may be a squatter) */
  double last_message;     /* when it last sent anything */
  const char *close_reason; /* set: closed at the end of the step (sched_peer_sweep) */
  bool retired;            /* marked to be closed: holds no share, pool range or count now */
  /* The disk tier (spill.c) */
  bool on_disk;            /* its image lies on disk (it spilled it, for us or an earlier cudawd) */
  uint64_t disk_bytes;     /* that image's bytes */
  uint64_t spills;         /* times moved to disk */
  double spill_skip_until; /* a spill of it failed: not asked again before this */
  double spill_started;    /* when its spill was ordered (pending_op 3) */
  bool spill_ordered;      /* this cudawd ordered it to disk: its cudaw-<uid>-<pid> under
                            * --spill-dir is cudawd's to remove if it dies */
  bool read_back;          /* read back ahead of its turn: not spilled again while it wants it */
  double read_back_at;     /* when that read-back ended (0: none): not spilled again soon */
  bool read_back_refused;  /* logged: no host room to read it back ahead */
  bool read_back_failed;   /* a read-back failed or went unanswered: its resume streams */
  double read_back_started;
  uint64_t piece_bytes;    /* it can take part in an exchange, pieces of at most this (0: no) */
  bool handover;           /* ... also in a handover (SCHED_EXCHANGE_HANDOVER) */
  uint64_t reserve_image_bytes; /* its image's bytes in its own reserve (its last checkpoint) */
  uint64_t placed;         /* its last checkpoint's bytes straight into its pool range (ready) */
  /* A borrower (SCHED_HELLO_BORROWER, lending.c): a program not under sharing that only borrows
   * the pool. It is never scheduled (no device, no state but running, never a victim); `loan` is
   * its standing loan, which only it gives back (or its leaving). */
  bool borrower;
  uint64_t borrow_bytes;   /* the image it said it would take */
  bool loan_wanted;        /* it holds no loan: lend one once it mapped the pool and has memory */
  bool loan_refused;       /* told that the pool has no room for it (once per want) */
  struct program *next;
};

/* An exchange under way (exchange.c): two programs' transitions at once, one page. */
struct exchange_page;
struct exchange_state {
  bool active;
  struct program *out, *in;  /* NULL once that side answered (or is gone) */
  pid_t out_pid, in_pid;
  int out_status, in_status;
  bool out_left, in_left;     /* that side's answer came as its program exits (SCHED_LEAVING) */
  struct exchange_page *page; /* cudawd's mapping, for the figures */
  uint64_t window, spare, out_bytes, in_bytes;
  bool handover;              /* in's image lies in the pool: out's goes over it */
  uint64_t run_ahead;         /* a handover: the free pool bytes out's range has before in's */
  double started;
};
struct daemon {
  struct sched_config config;
  struct device device[SCHED_MAX_DEVICES];
  struct program *programs;
  struct program *transition;  /* the program whose checkpoint or resume is under way */
  struct sched_program_info exited[SCHED_MAX_EXITED]; /* the last programs gone, oldest first */
  struct sched_program_detail exited_detail[SCHED_MAX_EXITED];
  double exited_grant_at[SCHED_MAX_EXITED];
  uid_t exited_uid[SCHED_MAX_EXITED];
  int exited_count;
  double started;
  /* Swap rates seen so far (bytes/s; defaults until a swap of SCHED_RATE_MIN_BYTES is seen), for
   * the cost of swapping an idle program out and back in. Kept apart for images in the pool
   * ([1]) and elsewhere ([0]): on the H100 the one runs near the link's speed and the other up to
   * 6x slower, and whichever came last would misjudge the other. */
  double rate_out[2], rate_in[2];
  /* Host memory: MemAvailable and MemTotal (bytes), read at most every 0.25 s; a checkpoint whose
   * image would leave less than host_margin() available is not ordered. */
  uint64_t host_available, host_total;
  double host_read_at;
  pid_t host_blocked;      /* the program kept from swapping out for host memory (0: none) */
  pid_t host_blocked_for;  /* the program that waits for it */
  struct host_pool pool;       /* --host-memory (size 0: none) */
  struct pool_ledger_view pool_others; /* the other cudawds' pools on this host (every 5 s) */
  double pool_shrink_since; /* since when the window is larger than needed (0: it is not) */
  bool pool_short_said;    /* logged: the window is smaller than the images need (the budget) */
  double idle_since;       /* since when no program is joined (0: some are) */
  /* The last idle phase (by the hint) of each command a user ran lately, the oldest replaced: the
   * same script run side by side or again idles as the others did (schedule.c, may_preempt). */
  struct idle_kin { uid_t uid; uint64_t key; double seconds, at; } idle_kin[SCHED_IDLE_KIN];
  /* The disk tier (--spill-dir, spill.c): the directory, open (-1: none), and its figures. */
  int spill_fd;
  uint64_t spills, spill_failures, spilled_bytes;
  double disk_read_rate;   /* bytes/s of the last read from disk (0: none yet) */
  struct program *reading_back; /* the one read-back ahead of a turn under way (NULL: none) */
  /* The one spill under way (NULL: none). It runs beside the swaps, not as the transition: it
   * moves host memory to disk, and a 20-30 GiB write at 1 GB/s held every turn for 10-26 s
   * (notebook_bench on the H100-sized run). */
  struct program *spilling;
  /* Programs gone (their connection closed) with an image cudawd had them write, whose process
   * had not finished exiting yet: their directory is removed once it has, or given up on after a
   * few seconds (a program still alive keeps its files). */
  struct spill_leftover { pid_t pid; uid_t uid; bool on_disk; uint64_t disk_bytes; double until; }
      leftovers[8];
  int leftover_count;
  uint64_t read_backs;
  bool disk_short_logged;  /* said once that the spill directory's disk has no room */
  struct exchange_state exchange;
  uint64_t exchanges, exchange_failures, exchanged_out_bytes, exchanged_in_bytes;
  uint64_t exchange_peak_bytes; /* the most extra host memory an exchange took */
  double exchange_last_seconds;
  struct uid_account uids[SCHED_MAX_UIDS];
  int connections, joined;     /* open connections, joined programs */
};

/* schedule.c */
double sched_now(void);
/* Device index for a program's SCHED_DEVICE message (registers the device); -ENOSPC if full. */
int sched_device_slot(struct daemon *d, const char *key, uint64_t total);
uint64_t sched_resident(const struct daemon *d, int slot);
/* A program holding `held` on slot saw device_free free there: re-estimate the device's memory
 * outside the books. */
void sched_observe_free(struct daemon *d, const struct program *reporter, int slot, uint64_t held,
                        uint64_t device_free);
/* Account time to every program's state up to now, refresh CPU samples. */
void sched_account(struct daemon *d);
void sched_set_state(struct daemon *d, struct program *p, enum sched_program_state state);
/* Decide: grant what fits, deny what never fits, resume, checkpoint. Sends the messages. */
void sched_step(struct daemon *d);
/* Why p waits, its last grant and its counts, as the snapshot shows them. */
void sched_program_detail(const struct daemon *d, const struct program *p,
                          struct sched_program_detail *out);
/* Seconds a swap out and back in of p is expected to take, at the rates seen so far. */
double sched_swap_cost(const struct daemon *d, const struct program *p);
/* The same for swapping v out to make room for head (NULL: none in particular): a handover into
 * the pool over head's image is costed at the pool's rates. */
double sched_preempt_cost(const struct daemon *d, const struct program *v,
                          const struct program *head);
/* The program said it is idle on the GPU (host work), or that it calls again. */
void sched_idle_hint(struct daemon *d, struct program *p, bool idle);
/* How long p's idle phase (by the hint) is expected to last: as its last one, or before its
 * first one has ended, as the last one of its user's same command (0: nothing known). */
double sched_idle_expected(const struct daemon *d, const struct program *p);
/* A hash (XXH3) of pid's command line (its arguments, NUL-separated), 0 if unreadable. */
uint64_t sched_command_key(pid_t pid);
/* The program is gone (exit, kill, closed socket): its share is free at once. */
void sched_forget(struct daemon *d, struct program *p);
/* Its checkpoint (op 1) or resume (op 2) of `bytes` ended with status (0 or -errno) after
 * `seconds`. */
void sched_done(struct daemon *d, struct program *p, int op, int status, uint64_t bytes,
                double seconds);

/* A program that just joined holds `bytes` on slot (resident): memory the device counted outside
 * the books until now (it ran unshared, or under an earlier cudawd) is in them from now on. */
void sched_joined_usage(struct daemon *d, int slot, uint64_t bytes);

/* cudawd.c */
int sched_send(struct program *p, const struct sched_msg *msg);

/* peers.c: the connections, and the limits per uid and per peer that keep any one user's
 * clients from locking the others out. */
/* A new connection fd from (pid, uid), allowed to connect at all or not (another user of a
 * user's own cudawd): admitted (a new program entry, returned) if the limits allow, after closing
 * a silent connection of the same uid (or, the table being full, of the uid with the most) where
 * that makes room; NULL: refused with the reason, counted against the uid, and closed. */
struct program *sched_peer_admit(struct daemon *d, int fd, pid_t pid, uid_t uid, bool allowed);
/* p says hello: false if it may not join (its uid is at its limit and no silent program of that
 * uid can be closed); a second connection of the same process replaces the first. */
bool sched_peer_join(struct daemon *d, struct program *p);
/* Close every connection that was marked (close_reason; "" for a peer that hung up or broke the
 * protocol), or silent too long without joining. */
void sched_peer_sweep(struct daemon *d);
/* Count a message from p (protocol_error: it broke the protocol). */
void sched_peer_count(struct daemon *d, const struct program *p, bool protocol_error);
void sched_uid_info(const struct daemon *d, struct sched_snapshot *out);

/* log.c: lines a peer can cause are rate-limited per kind and summed up; the log file is
 * rotated past its cap. */
enum sched_noise {
  SCHED_NOISE_REFUSED,
  SCHED_NOISE_CLOSED,
  SCHED_NOISE_PROTOCOL,
  SCHED_NOISE_IGNORED,
  SCHED_NOISE_JOINED,
  SCHED_NOISE_LEFT,
  SCHED_NOISE_KINDS
};
void sched_log_noisy(enum sched_noise kind, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
/* The same, budgeted under `key` (a constant string) rather than the format. */
void sched_log_noisy_as(enum sched_noise kind, const char *key, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
void sched_log_set_cap(uint64_t bytes);
/* Once per step: summaries of the windows that ended, the size cap. */
void sched_log_tick(void);

/* lending.c: the pool's ranges and the programs. */
/* Send the pool's current window to p (just joined, or the window changed), if it may have it. */
void sched_pool_offer(struct daemon *d, struct program *p);
/* p answered SCHED_POOL: it mapped (or not) a window of `bytes` (0: the one sent last); grows:
 * it grows a window in place (SCHED_POOL_GROWS). */
void sched_pool_mapped(struct daemon *d, struct program *p, bool mapped, uint64_t bytes,
                       bool grows);
/* Once per loop: grow the pool's window to what the programs' images need, or shrink it (giving
 * memory back) after --pool-release seconds larger than needed; tell the programs. */
void sched_pool_follow(struct daemon *d);
/* A checkpoint order for p: lend it a range for its resident bytes if the pool has room (fills
 * msg's bytes/held), else leave them 0. */
void sched_pool_lend(struct daemon *d, struct program *p, struct sched_msg *msg);
/* Whether p's next checkpoint would be lent a range (its image then needs no other host memory). */
bool sched_pool_would_lend(const struct daemon *d, const struct program *p);
/* Take p's range back (resume done, checkpoint failed, gone). A range whose heir (loan_heir)
 * still has image bytes in it goes to the heir instead. */
void sched_pool_take_back(struct daemon *d, struct program *p, const char *why);
/* An exchange's handover: lend `out` a range for its image over `in`'s, which `in` reads until
 * its resume is done (in's loan moves into out's, in becomes its heir). 0 with *range, or -errno
 * (nothing changed). sched_pool_handover_undo puts in's loan back (the orders were not sent). */
int sched_pool_handover(struct daemon *d, struct program *out, struct program *in,
                        struct pool_loan *range);
void sched_pool_handover_undo(struct daemon *d, struct program *out, struct program *in,
                              struct pool_loan in_loan);
/* Whether an exchange of `out` for `in` could be a handover now (in's image in the pool, out able
 * to write there, no loan of its own): out's image would then go into page-locked pool memory. */
bool sched_pool_could_hand_over(const struct daemon *d, const struct program *out,
                                const struct program *in);
void sched_pool_info(const struct daemon *d, struct sched_pool_info *out);
/* p said hello as a borrower: answer it (SCHED_REPLY 0 and the pool), or refuse it where cudawd
 * has no pool for its user (false: close the connection). */
bool sched_pool_borrower_join(struct daemon *d, struct program *p);
/* Borrower p's SCHED_BORROW: its image takes `bytes` now; give_back: its loan comes back. */
void sched_pool_borrow(struct daemon *d, struct program *p, uint64_t bytes, bool give_back);
/* The snapshot's borrowers. */
void sched_pool_borrowers(const struct daemon *d, struct sched_snapshot *out);

/* Whether p wants to run (its memory, or more of it) and which of two wanting programs goes
 * first: the policy's queue (schedule.c). */
bool sched_wanting(const struct program *p);
bool sched_before(const struct program *a, const struct program *b);
uint64_t sched_image_bytes(const struct program *p);
/* What a checkpoint must leave available on the host (schedule.c). */
uint64_t sched_host_margin(const struct daemon *d);

/* spill.c: the disk tier. */
/* Check and open --spill-dir (an absolute directory, not RAM-backed). 0, or -errno with the one
 * line that says why written to stderr. */
int sched_spill_open(struct daemon *d);
/* The host is short of memory for images (why: one phrase): order the coldest swapped-out image
 * to disk, unless it will be needed sooner than it could be read back (head: the program first in
 * the queue, NULL: none; idle_only: only an image of a program idle on the GPU). True if an order
 * was sent (it is the spill under way, d->spilling, beside the swaps). */
bool sched_spill_coldest(struct daemon *d, const struct program *head, double now,
                         const char *why, bool idle_only);
/* p answered its spill: status 0 or -errno, `bytes` on disk after `seconds`. */
void sched_spill_done(struct daemon *d, struct program *p, int status, uint64_t bytes,
                      double seconds);
/* p re-joined paused with its image on disk (SCHED_ON_DISK). */
void sched_spill_rejoined(struct daemon *d, struct program *p, uint64_t bytes);
/* p's resume (from disk, if its image was there) ended with status after seconds. */
void sched_spill_resumed(struct daemon *d, struct program *p, int status, uint64_t bytes,
                         double seconds);
/* The snapshot's disk figures. */
void sched_spill_info(const struct daemon *d, struct sched_spill_info *out);
/* Read-back ahead of the turn: order the earliest wanting image on disk read back into host
 * memory if the host has room for it and stays above what makes the disk tier spill (twice the
 * margin), one at a time, beside no transition or one that does not read the disk (a
 * checkpoint, whose image counts as taken, or a resume from host memory), never beside a spill. */
void sched_spill_read_ahead(struct daemon *d, double now);
/* A spill not answered within --swap-timeout no longer holds the next one back; the images of
 * programs gone since are removed once their process has exited. */
void sched_spill_check(struct daemon *d, double now);
/* p answered its read-back (SCHED_DONE value 4). */
void sched_spill_read_done(struct daemon *d, struct program *p, int status, uint64_t bytes,
                           double seconds);
/* Bytes of the read-back under way, not yet in MemAvailable's figure for sure. */
uint64_t sched_spill_reading(const struct daemon *d);
/* Seconds reading p's image back from disk takes (0: not on disk). */
double sched_spill_read_seconds(const struct daemon *d, const struct program *p);
/* p is gone: stop waiting for its read-back; if it died with an image cudawd had it write
 * (under --spill-dir), remove that; log either way. */
void sched_spill_forget(struct daemon *d, struct program *p);

/* lending.c: msg to p with the descriptor fd (SCM_RIGHTS). 0 or -errno. */
int sched_send_fd(struct program *p, const struct sched_msg *msg, int fd);

/* report.c */
void sched_fill_snapshot(const struct daemon *d, struct sched_snapshot *out);
/* The figures of one program, as the snapshot shows them. */
void sched_program_info(const struct program *p, struct sched_program_info *info);
int sched_write_metrics(const struct daemon *d, const char *path);

/* exchange.c */
/* Order an exchange: `out` (resident) gives the device to `in` (swapped out, image in private
 * host memory, or in the pool: a handover, out's image going into a range lent over in's)
 * through a shared page, both orders at once. host_room: what the host can spare beyond its
 * margin; spare: what the device has free for `in` ahead of out's releases. False (nothing
 * sent) where an exchange does not apply: a program that cannot (an older one, or translate),
 * an image in its own reserve or on disk, a window under a piece and a chunk, the window and
 * the spare under two pieces and a chunk (each side waiting for the other's whole piece), A's
 * image not fitting even once B's is gone; for a handover, a program that does not pace one, no
 * range for A over B's, or run-ahead and spare under the window: then why_not says why, for
 * the refusal's line. */
bool sched_exchange_order(struct daemon *d, struct program *out, struct program *in,
                          uint64_t host_room, uint64_t spare, char *why_not, size_t why_len);
/* p is one side of the exchange under way. */
bool sched_exchange_member(const struct daemon *d, const struct program *p);
/* p answered its side (status 0 or -errno), or is gone: when both are, the log line. */
void sched_exchange_done(struct daemon *d, const struct program *p, int status);
void sched_exchange_gone(struct daemon *d, const struct program *p);
/* An exchange older than --swap-timeout no longer holds up the others. */
void sched_exchange_check(struct daemon *d, double now);
void sched_exchange_info(const struct daemon *d, struct sched_exchange_info *out);

#endif
