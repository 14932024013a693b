/* The protocol between cudawd, the programs that share a GPU through it (the library's
 * glue/sched.c) and cudaw-ctl: fixed binary messages over a UNIX SOCK_SEQPACKET socket
 * <run dir>/cudawd.sock, one struct per datagram, so that nothing read back needs a parser.
 * Both ends check the peer with SO_PEERCRED: only the same user (or root) may join or control. */
#ifndef CUDAW_SCHED_PROTO_H
#define CUDAW_SCHED_PROTO_H

#include <stdint.h>

#define SCHED_PROTO_VERSION 2u
#define SCHED_SOCKET_NAME "cudawd.sock"
#define SCHED_MAX_DEVICES 8     /* device ordinals a program may use under the scheduler */
#define SCHED_MAX_PROGRAMS 64   /* programs in one snapshot (and joined at once) */
#define SCHED_MAX_CONNECTIONS 512 /* connections cudawd holds at once, joined or not */
#define SCHED_KEY_LEN 40        /* a device's identity: its UUID in hex */

enum sched_msg_type {
  /* program -> cudawd */
  SCHED_HELLO = 1,   /* join; value: 1 if the program is paused (re-joining a new cudawd),
                      * SCHED_HELLO_BORROWER: a program not under sharing that only borrows the
                      * host-memory pool (below) */
  SCHED_DEVICE,      /* ordinal `device` is the device `key`, `bytes` of memory in all */
  SCHED_ALLOC,       /* wants to hold `bytes` in all on `device` (it holds `held` now); waits
                      * for SCHED_GRANT. value: SCHED_ALLOC_* bits; device_free: what
                      * cudaMemGetInfo says is free on the device now */
  SCHED_USAGE,       /* holds `bytes` on `device` now (after frees) */
  SCHED_DONE,        /* the checkpoint (value 1) or resume (value 2) asked for is done: status
                      * 0 or -errno, `bytes` copied, `seconds` it took; a checkpoint's `held`:
                      * image bytes it put straight into the lent pool range (page-locked), at
                      * least 1 if the image lies there, staged where the range was not
                      * page-locked yet (0: the range holds nothing; an older cudawd ignores it);
                      * a checkpoint's `device_free`: image bytes in the program's own
                      * page-locked reserve, which its resume counts but does not free (0 from
                      * an older program) */
  /* cudawd -> program */
  SCHED_GRANT,       /* answer to SCHED_ALLOC: status 0 (allocate) or -ENOMEM (never fits) */
  SCHED_CHECKPOINT,  /* pause and checkpoint now, answer SCHED_DONE. With a host-memory pool
                      * (SCHED_POOL): `bytes` > 0 lends the range [held, held + bytes) of it for
                      * the image until the resume is done (0: no loan; an older program ignores
                      * both fields) */
  SCHED_RESUME,      /* resume now, answer SCHED_DONE */
  /* cudaw-ctl -> cudawd */
  SCHED_STATUS,      /* answered with one struct sched_snapshot */
  SCHED_PRIORITY,    /* set program `pid`'s priority to `value`; answered with SCHED_REPLY */
  SCHED_REPLY,       /* status 0 or -errno (-ESRCH: no such program) */
  /* program -> cudawd (added within version 2: an older cudawd logs and ignores it) */
  SCHED_FAILED,      /* an allocation of `bytes` on `device` failed and its error (status,
                      * -errno) went back to the program */
  /* program -> cudawd (an older cudawd logs and ignores it) */
  SCHED_GPU_IDLE,    /* value 1: no CUDA call for CUDAW_SHARE_IDLE_MS (host work); 0: calls again
                      * (a thread waits at the gate if it is paused) */
  /* The host-memory pool (cudawd --host-memory), added within version 2: an older program drops
   * SCHED_POOL and its descriptor unread and is never lent a range; an older cudawd never sends
   * it, so never hears SCHED_POOL_MAPPED. */
  SCHED_POOL,        /* cudawd -> program, with the pool's memfd (SCM_RIGHTS): `bytes` the
                      * window to map, [0, bytes) of it; value 1 if huge pages back it. Sent
                      * again whenever the window changes: the new one replaces the old */
  SCHED_POOL_MAPPED, /* program -> cudawd: value 1: mapped, cudawd may lend it ranges; 0: not;
                      * `bytes`: the window it mapped (0 from an older program: the last sent);
                      * `held` SCHED_POOL_GROWS: a larger window of the same pool keeps what
                      * it page-locked (0 from an older program: it page-locks each anew) */
  /* cudaw-ctl -> cudawd, added within version 2 (an older cudawd logs and ignores it) */
  SCHED_STOP,        /* stop cudawd (its owner or root); value 1: even with programs joined.
                      * Answered with SCHED_REPLY: 0, -EPERM, or -EBUSY with `value` programs */
  /* The disk tier (cudawd --spill-dir), added within version 2: an older program ignores
   * SCHED_SPILL (it never answers: cudawd's swap timeout lets the others go on), an older
   * cudawd logs and ignores SCHED_ON_DISK. */
  SCHED_SPILL,       /* cudawd -> paused program, with a directory (SCM_RIGHTS): write the image
                      * into a directory of the program's own under it (0700, as its own user),
                      * free its host memory, stay paused; answer SCHED_DONE value 3 (`bytes`
                      * written). The resume it is sent later streams the image from disk */
  SCHED_ON_DISK,     /* program -> cudawd, right after a hello saying it is paused: its image
                      * lies on disk (`bytes`), written for an earlier cudawd */
  /* Read-back ahead of the turn, added within version 2: an older program ignores it (cudawd
   * stops waiting for the answer after its swap timeout and the resume streams from disk). */
  SCHED_UNSPILL,     /* cudawd -> paused program whose image is on disk: read it back into host
                      * memory now (verified; stay paused), so that the resume on its turn copies
                      * from memory; answer SCHED_DONE value 4 (`bytes` read, `seconds`) */
  /* Exchanges (docs/sharing.md), added within version 2: an older cudawd logs and ignores
   * SCHED_CAN_EXCHANGE and so never sends SCHED_EXCHANGE; an older program never says it can. */
  SCHED_CAN_EXCHANGE, /* program -> cudawd after its hello: its memory can move piece by piece
                       * (remap), pieces of at most `bytes`; `value` SCHED_EXCHANGE_HANDOVER: it
                       * paces a handover by the page (0 from an older program: never one) */
  SCHED_EXCHANGE,    /* cudawd -> program, with the exchange's page (SCM_RIGHTS, a memfd):
                      * value 1: checkpoint giving memory back as it goes (the program going
                      * out), 2: resume creating it as it goes (the one coming in); the other
                      * program gets the other order with the same page at once. Answered with
                      * SCHED_DONE value 1 or 2 (`held`: image bytes consumed or device bytes
                      * released) */
  /* Borrowing the pool (docs/sharing.md), added within version 2. A program not under sharing
   * says hello with value SCHED_HELLO_BORROWER; cudawd answers SCHED_REPLY (0: it borrows, and
   * the pool follows as SCHED_POOL; -EOPNOTSUPP: no pool for it, and the connection closes). An
   * older cudawd closes the connection at such a hello (a malformed one), so the program runs as
   * if there were no cudawd. A borrower sends no SCHED_DEVICE, ALLOC or USAGE: cudawd never
   * schedules it, counts it on a device, or orders it anything. */
  SCHED_BORROW,      /* borrower -> cudawd: `bytes` its image would take now (its device memory,
                      * each region's start rounded up to a page); value 1: it gives its standing
                      * loan back (no checkpoint uses that range, and none will) */
  SCHED_LOAN,        /* cudawd -> borrower: its standing loan, [held, held + bytes) of the pool,
                      * for every checkpoint until it gives the range back (a resume does not end
                      * it); bytes 0: none, status -ENOSPC: the pool has no room for the image */
  /* Added within version 2; an older cudawd logs and ignores it. */
  SCHED_LEAVING,     /* program -> cudawd: it exits (its checkpoint module stops): never order it
                      * out or in again; its memory counts until its connection closes. An order
                      * already on its way is answered with an error, which is not a failure */
  SCHED_POOL_ALONE,  /* cudawd -> program that mapped the pool (added within version 2; an older
                      * program ignores it): value 1: it is the only program scheduled and idle
                      * on the GPU, so no swap needs its page-locking of the pool: it gives that
                      * back in the background (its exit then waits for no unpinning); 0: another
                      * program joined, page-lock it again */
};

#define SCHED_HELLO_BORROWER 2

/* SCHED_CAN_EXCHANGE's value: the program takes part in a handover, an exchange whose incoming
 * image lies in cudawd's pool (the page's handover fields; SCHED_EXCHANGE value 1 then carries
 * the range lent for the outgoing image in `held` (offset) and `bytes` (length)). */
#define SCHED_EXCHANGE_HANDOVER 1
/* SCHED_POOL_MAPPED's held: the program grows a window in place (added within version 2). */
#define SCHED_POOL_GROWS 1

struct sched_msg {
  uint32_t version;  /* SCHED_PROTO_VERSION */
  uint32_t type;     /* enum sched_msg_type */
  int32_t pid;
  int32_t device;    /* the program's device ordinal */
  int32_t status;
  int32_t value;
  uint64_t bytes;
  uint64_t held;
  double seconds;
  char key[SCHED_KEY_LEN];
  uint64_t device_free;
};

#define SCHED_ALLOC_FREE_KNOWN 1  /* device_free is the device's figure */
#define SCHED_ALLOC_FAILED 2      /* granted before, the real allocation failed: make room */

enum sched_program_state {
  SCHED_RUNNING = 0,  /* resident on its devices, running */
  SCHED_WAITING,      /* resident, an allocation waits for memory */
  SCHED_SWAPPING_OUT, /* a checkpoint is under way */
  SCHED_SWAPPED_OUT,  /* checkpointed: nothing of its memory on the device */
  SCHED_SWAPPING_IN,  /* a resume is under way */
  SCHED_EXITED,       /* gone (its figures are kept for the last SCHED_MAX_EXITED programs) */
};

#define SCHED_MAX_EXITED 16

struct sched_device_info {
  char key[SCHED_KEY_LEN];
  uint64_t capacity;      /* bytes cudawd may hand out on this device */
  uint64_t resident;      /* bytes the resident programs hold */
  uint64_t max_resident;  /* the highest `resident` seen */
  uint64_t swaps;         /* checkpoints of programs holding memory here */
  int32_t programs;       /* programs holding memory on it */
  int32_t users;          /* joined programs that described it (0: its slot may be reused) */
};

struct sched_program_info {
  int32_t pid;
  int32_t state;          /* enum sched_program_state */
  int32_t priority;
  int32_t device_mask;    /* device slots (sched_device_info indexes) it holds memory on */
  uint64_t bytes;         /* its memory on all devices, resident or not */
  uint64_t swaps;         /* times checkpointed by the scheduler */
  double gpu_seconds;     /* time it ran resident: not waiting, not idle by its hint */
  double swap_seconds;    /* time its checkpoints and resumes took */
  double wait_seconds;    /* time it waited (for memory or, swapped out, for its turn) */
};

/* Why a program waits (sched_program_detail.wait_reason). */
enum sched_wait_reason {
  SCHED_WAIT_NONE = 0,      /* not waiting */
  SCHED_WAIT_MEMORY,        /* needs need_bytes more on its device, which has free_bytes free */
  SCHED_WAIT_QUEUED,        /* also needs memory, and pid behind_pid goes first */
  SCHED_WAIT_SWAPPING_OUT,  /* its checkpoint is under way */
  SCHED_WAIT_SWAPPING_IN,   /* its resume is under way */
  SCHED_WAIT_HOST_MEMORY,   /* needs memory that only pid behind_pid can give, whose image the
                             * host has no room for (need_bytes: that image; free_bytes: what the
                             * host has available) */
  SCHED_WAIT_SPILLING,      /* its image is being written to disk (need_bytes: the image); its
                             * resume comes after, from disk */
};

struct sched_program_detail {
  int32_t wait_reason;      /* enum sched_wait_reason */
  int32_t behind_pid;       /* SCHED_WAIT_QUEUED: the program ahead of it */
  uint64_t need_bytes;      /* what it waits for beyond what it holds resident */
  uint64_t free_bytes;      /* what cudawd can hand out on that device now */
  uint64_t last_grant_bytes;/* its last grant: bytes added to what it held */
  double last_grant_ago;    /* seconds since that grant; < 0: none yet */
  uint64_t retries;         /* granted allocations that failed on the device and were asked
                             * again (cudawd made room) */
  uint64_t failed;          /* allocations whose error went back to the program */
};

/* cudawd's host-memory pool, as the snapshot shows it (all zero: none, or an older cudawd). */
struct sched_pool_info {
  int32_t enabled;        /* 1: there is a pool */
  int32_t huge_pages;     /* 1: backed by huge pages (MFD_HUGETLB) */
  int32_t loans;          /* ranges lent now */
  int32_t reserved;
  uint64_t size;
  uint64_t lent;
  uint64_t free;
  uint64_t populated;     /* bytes faulted in so far */
  uint64_t loans_total;   /* ranges lent since cudawd started */
  uint64_t placed_bytes;  /* image bytes the programs put into lent ranges */
  uint64_t fallbacks;     /* checkpoints ordered without a loan: no room in the pool */
  /* Added at the end in the same way as detail[]: who holds the pool, and how much of it the
   * kernel has pages for (the pool is a memfd that cudawd does not keep mapped, so ps and top
   * show none of it in cudawd's RSS; it is Shmem in /proc/meminfo). */
  int32_t holder_pid;     /* the cudawd process that holds it */
  int32_t other_pools;    /* other cudawds' pools on this host (the host-wide ledger) */
  uint64_t resident;      /* bytes of the pool the kernel holds pages for now */
  uint64_t other_bytes;   /* what those other pools hold in all */
};

/* The disk tier, as the snapshot shows it (all zero: none, or an older cudawd). */
struct sched_spill_info {
  int32_t enabled;        /* 1: --spill-dir given */
  int32_t on_disk;        /* programs whose image is on disk now */
  uint64_t spills;        /* images moved to disk since cudawd started */
  uint64_t spill_failures;/* spills a program answered with an error */
  uint64_t disk_bytes;    /* image bytes on disk now */
  uint64_t spilled_bytes; /* image bytes moved to disk since start */
  double read_rate;       /* bytes/s of the last resume from disk (0: none yet) */
  char dir[256];          /* --spill-dir (cut short past 255 bytes) */
};

/* One program's image on disk (struct sched_snapshot.disk, per program[]). */
struct sched_program_disk {
  int32_t on_disk;        /* 1: its image lies on disk (under the spill dir, in a directory of
                           * its own) */
  int32_t reserved;
  uint64_t bytes;         /* that image's bytes */
  uint64_t spills;        /* times moved to disk */
};

/* Who connects, per uid (struct sched_snapshot.uid): cudawd's limits are per uid and per peer,
 * so that no user's clients can keep another's programs from being scheduled. */
#define SCHED_MAX_UIDS 32

struct sched_uid_info {
  uint32_t uid;
  int32_t connections;       /* open now */
  int32_t programs;          /* joined now */
  int32_t reserved;
  uint64_t connections_total;
  uint64_t refused;          /* connections refused: over a limit, or not allowed */
  uint64_t closed;           /* connections cudawd closed: silent, unanswered orders, a second
                              * hello from the same process */
  uint64_t protocol_errors;  /* malformed or out-of-turn messages */
  uint64_t messages;
};

struct sched_exchange_info {
  uint64_t exchanges;        /* exchanges both sides finished since cudawd started */
  uint64_t failures;         /* exchanges a side answered with an error (or left, or timed out) */
  uint64_t out_bytes;        /* image bytes written by the programs going out */
  uint64_t in_bytes;         /* image bytes consumed by the programs coming in */
  uint64_t peak_extra_bytes; /* the most extra host memory one exchange took */
  double last_seconds;       /* the last exchange's duration */
  int32_t active;            /* 1: one is under way */
  int32_t reserved;
};

/* A program not under sharing that borrows the pool (struct sched_snapshot.borrower). */
struct sched_borrower_info {
  int32_t pid;
  uint32_t uid;
  uint64_t bytes;          /* the image it said it would take */
  uint64_t loan_offset;    /* its standing loan: [loan_offset, loan_offset + lent) of the pool */
  uint64_t lent;           /* 0: none (no room, or not asked yet) */
};

struct sched_snapshot {
  uint32_t version;
  uint32_t type;          /* SCHED_STATUS */
  int32_t devices;
  int32_t programs;
  double quantum;
  double uptime;
  struct sched_device_info device[SCHED_MAX_DEVICES];
  struct sched_program_info program[SCHED_MAX_PROGRAMS + SCHED_MAX_EXITED];
  /* Added within version 2, after everything an older cudaw-ctl reads (it receives the snapshot
   * cut short; a newer cudaw-ctl accepts an older cudawd's shorter one, details unknown). */
  struct sched_program_detail detail[SCHED_MAX_PROGRAMS + SCHED_MAX_EXITED]; /* per program[] */
  /* Added after detail[] in the same way. */
  struct sched_pool_info pool;
  /* Added after pool in the same way. */
  int32_t uids;            /* rows of uid[] used */
  int32_t reserved;
  struct sched_uid_info uid[SCHED_MAX_UIDS];
  /* Added after uid[] in the same way: the pool following demand, and cudawd's idle exit. */
  uint64_t pool_window;    /* the part of the pool offered to the programs (faulted in) */
  uint64_t pool_released;  /* bytes of the pool given back to the kernel since start */
  double pool_release;     /* --pool-release seconds */
  double idle_exit;        /* --idle-exit seconds (0: never) */
  double idle_for;         /* seconds without a program joined (0: programs now) */
  /* Added after idle_for in the same way: the disk tier (--spill-dir). */
  struct sched_spill_info spill;
  struct sched_program_disk disk[SCHED_MAX_PROGRAMS + SCHED_MAX_EXITED]; /* per program[] */
  /* Added after disk[] in the same way: exchanges. */
  struct sched_exchange_info exchange;
  /* Added after exchange in the same way: the programs that borrow the pool (never scheduled,
   * so not in program[]). */
  int32_t borrowers;
  int32_t reserved_borrowers;
  struct sched_borrower_info borrower[SCHED_MAX_PROGRAMS];
};

/* A device key fit to print anywhere (terminal, JSON, metrics labels): letters, digits, '-', '.'
 * and '_' as they are, anything else as '?', at most SCHED_KEY_LEN bytes even if the key is not
 * terminated (it came from a peer). Returns out. */
static inline const char *sched_key_printable(const char *key, char out[SCHED_KEY_LEN + 1])
{
  int i = 0;
  for (; i < SCHED_KEY_LEN && key[i]; i++) {
    char c = key[i];
    int plain = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                c == '-' || c == '.' || c == '_';
    out[i] = plain ? c : '?';
  }
  out[i] = '\0';
  return out;
}

static inline const char *sched_wait_name(int reason)
{
  static const char *const names[] = {"none",        "memory",      "queued",   "swapping_out",
                                      "swapping_in", "host_memory", "spilling"};
  return reason >= 0 && reason <= SCHED_WAIT_SPILLING ? names[reason] : "unknown";
}

static inline const char *sched_state_name(int state)
{
  static const char *const names[] = {"running", "waiting", "swapping_out", "swapped_out",
                                      "swapping_in", "exited"};
  return state >= 0 && state <= SCHED_EXITED ? names[state] : "unknown";
}

#endif
