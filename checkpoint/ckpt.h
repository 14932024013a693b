/* cudaw checkpoint: pause a CUDA program, copy its device memory into a host image, give the
 * device memory back, and later restore it byte for byte. This header is the module's whole
 * contract: the host operations the shim implements, the options, and the entry points. */
#ifndef CUDAW_CKPT_H
#define CUDAW_CKPT_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "delta_hash.h"

#ifdef __cplusplus
extern "C" {
#endif

enum ckpt_state_id {
  CKPT_RUNNING = 0, /* the gate is open, the program runs */
  CKPT_PAUSING,     /* a checkpoint is under way */
  CKPT_PAUSED,      /* gate closed, device memory saved in the host image and released */
  CKPT_RESUMING,    /* a resume is under way */
  CKPT_HELD,        /* gate closed, nothing saved: one rank of a group pause (cudaw-ctl --group) */
  CKPT_HOLDING,     /* a hold, drain or unhold is under way */
};

/* HOLD closes the gate without draining, DRAIN waits (bounded) for the device while held,
 * UNHOLD reopens the gate: the steps of a group pause (ctl_group.c). SPILL writes a paused
 * program's host image to disk and frees it, UNSPILL reads it back; both stay paused. */
enum ckpt_op {
  CKPT_OP_CHECKPOINT = 1,
  CKPT_OP_RESUME = 2,
  CKPT_OP_HOLD = 3,
  CKPT_OP_DRAIN = 4,
  CKPT_OP_UNHOLD = 5,
  CKPT_OP_SPILL = 6,
  CKPT_OP_UNSPILL = 7,
};

enum ckpt_log_level { CKPT_LOG_ERROR = 0, CKPT_LOG_WARN, CKPT_LOG_INFO, CKPT_LOG_DEBUG };

/* One piece of device memory to save: [vaddr, vaddr + size) on `device`. `id` is stable from
 * the checkpoint to the resume (it names the region in reports and matches a kept image). */
struct ckpt_region {
  uint64_t id;
  uint64_t vaddr;
  uint64_t size;
  int device;
};

/* Device memory that is not in the regions: managed memory (moved to host memory while paused)
 * and CUDA arrays (kept on the device: a cudaArray_t cannot be re-created under the same
 * handle). Filled by the host's park_other for status. */
struct ckpt_other_memory {
  uint64_t managed_allocations;
  uint64_t managed_bytes; /* prefetched to host memory: not on the device while paused */
  uint64_t arrays;
  uint64_t array_bytes;   /* still on the device while paused */
  uint64_t kept_bytes;    /* device memory cudaw cannot release: not virtualised (another
                             context, stream capture) or shared with another process */
  uint64_t ungated_functions; /* driver functions the program calls without the gate */
};

/* Called once per region; a non-zero return stops the walk and becomes its result. */
typedef int (*ckpt_region_visit_fn)(void *visit_ctx, const struct ckpt_region *region);

/* The host operations: everything the checkpoint module needs from the shim (gate, device) and
 * from vmem (regions). Every function returns 0 or -errno unless it says otherwise; `ctx` is the
 * pointer given to ckpt_init. They are called only from the module's own threads (the control
 * thread, the transition thread and the copy threads), never from a signal handler, and mostly
 * while the gate is closed: the shim must implement them with the real runtime directly, not
 * through its own gate, and make the right device current itself (a stream knows its device).
 * Pinned buffers the module allocates must stay valid across release_all and recreate_all; its
 * streams live only while one copy job runs (so that none holds device memory while paused).
 * Host operations the copy threads call (stream_*, copy_*, host_alloc_pinned) must be safe to
 * call from several threads at once. Optional members may be NULL where noted. */
struct ckpt_host_ops {
  /* Stop new API calls from every thread at entry (they block until gate_open) and wait up to
   * timeout_ns for the calls in flight to return. -ETIMEDOUT if they did not: the host then
   * reopens the gate itself, so that on any error the gate is open and the program runs. */
  int (*gate_close)(void *ctx, uint64_t timeout_ns);
  /* Reopen the gate; blocked calls proceed. Precondition: the gate is closed. */
  void (*gate_open)(void *ctx);
  /* Wait until all work on every device is done (cudaDeviceSynchronize on each). */
  int (*device_drain)(void *ctx);
  /* Visit every piece of device memory that must be saved. Precondition: gate closed, drained.
   * Regions do not overlap; the region passed to visit is only valid during the call. */
  int (*for_each_region)(void *ctx, ckpt_region_visit_fn visit, void *visit_ctx);
  /* Release the device memory of every region, keeping their virtual addresses reserved.
   * All or nothing: on error nothing is released (or the host has recreated it). */
  int (*release_all)(void *ctx);
  /* Recreate device memory behind every region at the same virtual addresses (content
   * undefined). All or nothing: on error nothing is held and *shortfall is the number of
   * bytes missing (0 if unknown), so that a later retry may succeed. */
  int (*recreate_all)(void *ctx, uint64_t *shortfall);
  /* Optional: set back what the contexts gave up while paused besides memory (their stack
   * reservation), as recreate_all does first. A resume that makes memory beside its copy calls
   * it before anything else: called at the end, after the copy, it waited 1.4-1.7 s behind
   * another process's exit (H200 run as an H100, share_bench host, session 30). All or nothing:
   * on error nothing of it is held. release_all gives it up again. */
  int (*restore_context)(void *ctx);
  /* Exchanges (optional, NULL where memory cannot be moved piece by piece, e.g. translate):
   * release_range gives back the device memory of every piece wholly inside [vaddr, vaddr +
   * bytes); recreate_range makes every missing piece overlapping it (content undefined; all or
   * none); range_missing says how many bytes recreate_range would make. *bytes: what was
   * released, made or would be. vmem.h's vmem_release_range says what a piece is. */
  int (*release_range)(void *ctx, uint64_t vaddr, uint64_t bytes, uint64_t *done);
  int (*recreate_range)(void *ctx, uint64_t vaddr, uint64_t bytes, uint64_t *done);
  int (*range_missing)(void *ctx, uint64_t vaddr, uint64_t bytes, uint64_t *missing);
  /* Optional: the size of the pieces that release_range gives back one by one, each starting
   * a multiple of it from its region's start (0 or NULL: whole regions only). A checkpoint gives
   * each piece back as soon as it is saved. */
  uint64_t (*piece_bytes)(void *ctx);
  /* Optional. Free memory on `device` now, as the device counts it: a resume that makes memory
   * beside its copy checks that what it will make fits before it starts (recreate_all checks the
   * same itself). Gate closed, transition thread. */
  int (*device_free)(void *ctx, int device, uint64_t *bytes);
  /* Number of devices; must not create a context. */
  int (*device_count)(void *ctx, int *count);
  /* Create / destroy an asynchronous stream on `device`. The handle is opaque to us. */
  int (*stream_create)(void *ctx, int device, void **stream);
  void (*stream_destroy)(void *ctx, void *stream);
  /* Queue a copy of n bytes on `stream`; it may run after the call returns. `host` is always
   * inside a buffer from host_alloc_pinned or a range registered with host_register;
   * [vaddr, vaddr + n) always inside one region. */
  int (*copy_d2h_async)(void *ctx, void *host, uint64_t vaddr, size_t n, void *stream);
  int (*copy_h2d_async)(void *ctx, uint64_t vaddr, const void *host, size_t n, void *stream);
  /* Wait until everything queued on `stream` is done; reports a failed queued copy. */
  int (*stream_sync)(void *ctx, void *stream);
  /* Optional (both or neither). Page-lock [host, host + n) of the module's image for copies on
   * every device (cudaHostRegisterPortable), and undo it (host is the start of a registered
   * range). Called from several module threads at once (the image's registrar and the
   * reserve's threads), each on a range of its own that no copy uses meanwhile. */
  int (*host_register)(void *ctx, void *host, size_t n);
  void (*host_unregister)(void *ctx, void *host);
  /* Optional. The calling thread's last failed host call, in the host's words (for the
   * runtime: the call, the error's name and its description), "" if none. A -errno loses the
   * cause; messages about a failure add this. */
  void (*last_error)(void *ctx, char *buf, size_t len);
  /* Page-locked host memory usable by copies on every device (cudaHostAllocPortable). */
  int (*host_alloc_pinned)(void *ctx, size_t n, void **host);
  void (*host_free_pinned)(void *ctx, void *host);
  /* Optional (both or neither). Memory outside the regions. park_other runs at a checkpoint
   * after the regions were saved, before release_all: it moves what can leave the device off it
   * (managed memory to host memory) and describes in *held what it moved and what stays. On
   * error nothing stays moved. unpark_other runs at resume after the regions were restored, and
   * after a checkpoint that failed after park_other: it brings moved memory back. */
  int (*park_other)(void *ctx, struct ckpt_other_memory *held);
  int (*unpark_other)(void *ctx);
  /* Optional. Called with the gate closed, before anything is saved: a -errno when the
   * program's state cannot be checkpointed now, with the reason (one line) in why. */
  int (*refuse_checkpoint)(void *ctx, char *why, size_t len);
  /* Optional. Checksum `count` pieces of device memory on `device`, on the device, with
   * ckpt_delta_hash (delta_hash.h): pieces[i] is [address, address + bytes) inside one region
   * (virtual addresses); sums[i] receives its checksum. Synchronous; one caller at a time.
   * Where it is missing or fails, the module checksums on the host and copies every chunk at
   * every checkpoint; where it works, a checkpoint with a kept image copies only changed chunks
   * and a resume checks every chunk on the device after its copy. */
  int (*device_hash)(void *ctx, int device, const struct ckpt_delta_piece *pieces, size_t count,
                     uint64_t *sums);
  /* Optional. What a checkpoint would save now, roughly: the bytes of device memory and how many
   * regions they are in. Any module thread, gate open or not; cheap (polled by the reserve,
   * CUDAW_CKPT_RESERVE=auto, which stays empty without it). */
  int (*device_bytes)(void *ctx, uint64_t *bytes, uint64_t *regions);
  /* Optional. Device memory the process still holds on `device` (context, ...) for status.
   * Must not create a context: -ENODEV where there is none. */
  int (*mem_held)(void *ctx, int device, uint64_t *bytes);
  /* Optional. 1 when the program's device memory is not cudaw's to release (vmem off, or it
   * did not start), with the device memory that stays (*bytes, every device) and why (e.g.
   * "vmem off (CUDAW_VMEM=off)"); 0 when cudaw holds it or nothing was allocated yet. A
   * checkpoint is then refused (CKPT_ERROR_NOT_HELD) unless it releases all through the driver,
   * and status says so. Called on the module's threads, never while the driver holds the
   * process. */
  int (*memory_not_held)(void *ctx, uint64_t *bytes, char *why, size_t len);
  /* Optional. More members for status: writes `,"name":value...` (at most len bytes with the
   * NUL) and returns its length, 0 for nothing. Called on the control thread, gate open or not. */
  size_t (*status_extra)(void *ctx, char *buf, size_t len);
  /* Optional. A request line the module does not know itself (the shim's "limit ..."): writes
   * one JSON line with its newline into reply (at most len bytes with the NUL) and returns 0, or
   * -ENOENT for a request the host does not know either. Called on the control thread. */
  int (*extra_request)(void *ctx, const char *request, char *reply, size_t len);
  /* Optional (all three or none): live checkpoints. live_begin runs with the gate open and the
   * program running: from then on until live_end, no copy queued by copy_d2h_async reads memory
   * the program gave back (memory it frees stays mapped and its range unused; memory it unmaps
   * itself waits for the copies reading it, and a copy of memory already unmapped is skipped,
   * leaving the image's bytes there as they were); then it visits every region (vmem's and the
   * program's own VMM mappings). On error nothing is held.
   * live_end gives the held memory back (once after each successful live_begin).
   * live_stream_create is stream_create for a stream that does not wait for the program's
   * streams, nor they for it (non-blocking); stream_destroy destroys it. */
  int (*live_begin)(void *ctx, ckpt_region_visit_fn visit, void *visit_ctx);
  void (*live_end)(void *ctx);
  int (*live_stream_create)(void *ctx, int device, void **stream);
  /* Optional. Where the module's messages go (one line, no newline); NULL: stderr. */
  void (*log)(void *ctx, int level, const char *message);
};

/* The module's options, read from the environment in one place (ckpt_options_from_env). */
struct ckpt_options {
  uint32_t pause_timeout_ms; /* CUDAW_PAUSE_TIMEOUT */
  int signal_number;         /* CUDAW_SIGNAL: SIGUSR1, SIGUSR2 or 0 for none */
  char run_dir[96];          /* CUDAW_RUN_DIR, or the default (see ckpt_default_run_dir) */
  char sched_socket[108];    /* CUDAW_SCHED_SOCKET, or <run_dir>/cudawd.sock ("" if too long) */
  char sched_host_memory[32]; /* CUDAW_SCHED_HOST_MEMORY: cudawd's --host-memory default ("":
                              * cudawd's own default) */
  char sched_spill_dir[256]; /* CUDAW_SCHED_SPILL_DIR: cudawd's --spill-dir default ("": none) */
  uint32_t streams;          /* CUDAW_CKPT_STREAMS: streams per device = staging buffers in all */
  uint64_t staging_bytes;    /* CUDAW_CKPT_STAGING: size of one staging buffer = one chunk */
  uint32_t threads;          /* CUDAW_CKPT_THREADS: host copy threads */
  int keep_image;            /* CUDAW_CKPT_KEEP_IMAGE: keep the host image after a resume */
  int release_all;           /* CUDAW_CKPT_RELEASE=all: a checkpoint also hands the rest to the driver */
  char driver_tool[256];     /* CUDAW_CKPT_DRIVER_TOOL: path of cudaw-ckpt-driver, "" to search */
  int prefault;              /* CUDAW_CKPT_PREFAULT: fault fresh image pages in ahead of copies */
  int register_image;        /* CUDAW_CKPT_REGISTER: page-lock the image while paused */
  int pin_early;             /* CUDAW_CKPT_PIN_EARLY: pin staging once the program has memory */
  int fill_kernel;           /* CUDAW_CKPT_FILL=kernel: fresh image pages filled by userfaultfd */
  int create_first;          /* CUDAW_CKPT_CREATE=first: a resume re-creates all memory first */
  int suspend_release;       /* CUDAW_SUSPEND=release: SIGTSTP checkpoints, SIGCONT resumes */
  uint32_t suspend_start_wait_s; /* CUDAW_SUSPEND_START_WAIT: an early allocation waits this long */
  int live;                  /* CUDAW_CKPT_LIVE: a signal's checkpoint copies while the program runs */
  int reserve_auto;          /* CUDAW_CKPT_RESERVE=auto: a reserve the size of device memory */
  uint64_t reserve_bytes;    /* CUDAW_CKPT_RESERVE=SIZE (0: off unless auto) */
  uint32_t reserve_budget_pct; /* CUDAW_CKPT_RESERVE_BUDGET: % of MemAvailable it may take */
  uint64_t reserve_piece;    /* the reserve grows by this much (not from the environment: tests) */
  uint32_t reserve_threads;  /* CUDAW_CKPT_RESERVE_THREADS: threads faulting in and page-locking it */
  uint32_t pool_threads;     /* CUDAW_CKPT_POOL_THREADS: ... cudawd's pool (0: none, all staged) */
  uint32_t exchange_delay_ms; /* CUDAW_TEST_EXCHANGE_DELAY_MS: tests only, see exchange_side */
};

/* What a row accepts. Every row of every options table names one, so that an invalid value is
 * caught in one place (ckpt_option_check) with a message that says what would have been valid. */
enum ckpt_option_kind {
  CKPT_OPTION_TEXT,            /* anything */
  CKPT_OPTION_BOOL,            /* 0 or 1 */
  CKPT_OPTION_CHOICE,          /* one of `words` */
  CKPT_OPTION_SIGNAL,          /* one of `words`, any case, SIG before a name allowed (SIGUSR1) */
  CKPT_OPTION_NUMBER,          /* a whole number from min to max, in `unit` */
  CKPT_OPTION_SIZE,            /* a size from min to max bytes (vmem_parse_size), or a word */
  CKPT_OPTION_SIZE_OR_PERCENT, /* a size, N% (1-100) of a total known later, or a word */
  CKPT_OPTION_PERCENT,         /* N or N% from min to max, or a word */
  CKPT_OPTION_DIRECTORY,       /* an absolute path of at most max bytes */
  CKPT_OPTION_FILE,            /* an absolute path of an existing, readable file */
  CKPT_OPTION_LOG_FILE,        /* a file that can be appended to (it or its folder writable) */
  CKPT_OPTION_PROGRAM,         /* an executable file, by path or found on PATH */
};

/* One row of an options table (the module's own, and the shim's merged one: `cudaw options`). */
struct ckpt_option_info {
  const char *name;
  const char *default_value;
  const char *meaning;
  enum ckpt_option_kind kind;
  const char *words;           /* "a|b|c": CHOICE's values; other kinds' extra words ("auto") */
  uint64_t min, max;           /* NUMBER, SIZE, PERCENT bounds; DIRECTORY's length (0: none) */
  const char *unit;            /* NUMBER's unit, for the message ("milliseconds") */
};

/* The table of the module's CUDAW_* options; *count receives the number of rows. Static data. */
const struct ckpt_option_info *ckpt_option_table(size_t *count);

/* The row of that name in the module's table, or NULL. */
const struct ckpt_option_info *ckpt_option_find(const char *name);

/* Is `value` valid for the row? 0 if so; else -EINVAL with "expected ..." (what the row
 * accepts, one phrase) in `expected`. */
int ckpt_option_check(const struct ckpt_option_info *row, const char *value, char *expected,
                      size_t len);

/* What the row accepts, as one phrase "expected ..." (messages, and `cudaw options`). */
void ckpt_option_describe(const struct ckpt_option_info *row, char *out, size_t len);

/* The environment's value of the row if it is set, non-empty and invalid: then 1, with the one
 * line "NAME=value: expected ..." in `line`; 0 otherwise. */
int ckpt_option_env_invalid(const struct ckpt_option_info *row, char *line, size_t len);

/* CUDAW_STRICT: 1 (the default) when an invalid CUDAW_* value must stop the program; 0 when it
 * is ignored (its default used) with one line saying so. */
int ckpt_options_strict(void);

/* A checkpoint refused because the program's device memory is not cudaw's (memory_not_held):
 * pausing would release nothing and look like success. Its error kind is "not_held". */
#define CKPT_ERROR_NOT_HELD (-ENOMEDIUM)

/* The exit status of a program or tool stopped by an invalid CUDAW_* value (sysexits'
 * EX_CONFIG). */
#define CUDAW_EXIT_BAD_OPTION 78

/* For tools (cudaw-ctl, cudawd): check the options they read (`names`, NULL-terminated rows of
 * the module's table) in the environment, write one line "<tool>: NAME=value: expected ..." per
 * invalid value to stderr (with "; ignored" under CUDAW_STRICT=0). Returns CUDAW_EXIT_BAD_OPTION
 * when the tool must stop, else 0. */
int ckpt_options_check_env(const char *tool, const char *const *names);

/* Fill *out with the defaults overridden by the environment. An invalid value (ckpt_option_check)
 * keeps its default and returns -EINVAL with the line naming it in `error` (may be NULL). */
int ckpt_options_from_env(struct ckpt_options *out, char *error, size_t error_len);

/* The run directory when CUDAW_RUN_DIR is unset: $XDG_RUNTIME_DIR/cudaw, else /run/cudaw for
 * root, else /tmp/cudaw-<uid>. 0, or -ENAMETOOLONG. */
int ckpt_default_run_dir(char *buf, size_t len);

/* What a checkpoint or resume did; `error` 0 on success, else -errno with `reason` saying why. */
struct ckpt_result {
  int op;                 /* enum ckpt_op */
  int error;
  char reason[256];
  uint64_t bytes;         /* bytes copied */
  uint64_t regions;
  uint64_t shortfall;     /* resume: bytes recreate_all could not get */
  double gate_seconds;    /* request (signal, socket, call) -> gate closed */
  double drain_seconds;
  double setup_seconds;   /* pinning staging (first checkpoint, before the copies) plus the
                           * slowest copy thread's stream creation (inside copy_seconds) */
  double copy_seconds;    /* the copy engine, checksums included */
  /* Inside copy_seconds, per copy thread on average: where the host side's time went. */
  double dma_wait_seconds;    /* waiting for the DMA of a staging buffer */
  double host_copy_seconds;   /* staging <-> image copies (first-touch faults included) */
  double hash_seconds;        /* checksums on the host */
  double fault_seconds;       /* faulting fresh image pages in while their DMA runs */
  double issue_seconds;       /* in the driver calls that queue the copies */
  double image_seconds;       /* checkpoint: listing the regions and mapping the image (whole) */
  double device_hash_seconds; /* checksums on the device (the whole pass, not per thread) */
  uint32_t copy_threads;
  uint64_t unchanged_bytes;   /* delta checkpoint: bytes found unchanged and not copied */
  uint64_t filled_bytes;      /* checkpoint: bytes the kernel put into fresh image pages itself
                               * (CUDAW_CKPT_FILL=kernel), skipping their zeroing */
  uint64_t reserve_bytes;     /* checkpoint: image bytes copied straight into the reserve */
  uint64_t pool_bytes;        /* checkpoint: image bytes copied straight into cudawd's pool */
  uint64_t pool_image_bytes;  /* checkpoint: image bytes in the range cudawd lent, straight or
                               * staged (a range not page-locked yet is staged into) */
  uint64_t staged_bytes;      /* bytes that went through staging buffers */
  uint64_t released_early_bytes; /* checkpoint: device memory given back while the rest was saved */
  double release_early_seconds;  /* ... the driver's time doing so, beside the copy */
  double release_tail_seconds;   /* ... what it added after the last copy */
  double memory_seconds;  /* release_all (checkpoint) or recreate_all (resume); a resume that
                           * made memory beside its copy: its time in the driver doing so */
  bool memory_beside;     /* resume: device memory was made beside the copy, not before it */
  double memory_wait_seconds; /* ... how long the copy threads waited for it (each, on average) */
  double total_seconds;   /* request -> paused or running */
  uint64_t disk_bytes;    /* image bytes written to / read from disk (0: host memory only) */
  uint64_t disk_stored;   /* bytes in the files (less when compressed) */
  double disk_seconds;
  double driver_seconds;  /* the driver's process checkpoint or restore (release all) */
  bool driver_released;   /* checkpoint: nothing left on the device, the driver holds the rest */
  /* Checkpoint: what the program waited for, gate closed to device memory released (disk and
   * driver steps included where asked for). */
  double stall_seconds;
  bool live;              /* a live checkpoint: memory was copied before the pause */
  uint64_t precopy_bytes; /* live: copied while the program ran */
  double precopy_seconds; /* live: how long that took (the program ran meanwhile) */
  uint64_t recopy_bytes;  /* checkpoint: bytes copied inside the pause (all, unless delta/live) */
  /* Resume from disk: the most host memory its reading held at once beyond the staging
   * buffers (zstd decoders and input; the image itself never lies in host memory). */
  uint64_t disk_peak_bytes;
  bool exchange;            /* one side of an exchange (ckpt_request_exchange) */
  uint64_t exchange_moved;  /* checkpoint: image bytes written; resume: device bytes created */
  uint64_t exchange_given;  /* checkpoint: device bytes released; resume: image bytes consumed */
};

/* Write the paused program's image to `dir` (an absolute path; made 0700 if missing, and it
 * must be this uid's) and free its host memory, as the control socket's "spill to=" does: still
 * paused, the next resume streams it from there. 0; -EALREADY when it is on disk already or the
 * program is not paused; else the failure's -errno (the image then stays in host memory).
 * *result (may be NULL) receives what it did (disk_bytes, disk_seconds); ckpt_last_result keeps
 * the last checkpoint or resume, not this. */
int ckpt_request_spill(const char *dir, struct ckpt_result *result);
/* Read a spilled image back into host memory, verified (its files stay until the resume), as the
 * control socket's "unspill" does: still paused, the next resume copies from host memory. 0;
 * -EALREADY when the image is in host memory already or the program is not paused; else the
 * failure's -errno (the image then stays on disk). *result (may be NULL) as for a spill. */
int ckpt_request_unspill(struct ckpt_result *result);

/* One side of an exchange that cudawd ordered (docs/sharing.md): `page_fd` is the page the two
 * programs share (exchange_page.h; the caller keeps and closes its fd). out: a checkpoint that
 * gives each piece of device memory back as soon as its bytes are in the image, paced by what
 * the other program consumed; else (paused) a resume that creates each piece just before its
 * bytes go in and frees the image as it goes, paced by what the other released. Results as
 * ckpt_request_checkpoint / ckpt_request_resume, with the figures in *result (may be NULL);
 * -ENOSYS where memory cannot move piece by piece (translate), -EPERM when the page names
 * another program, -EINVAL when fd is no exchange page. A failed checkpoint that already gave
 * memory back leaves the program paused with its image (a resume brings it back). */
int ckpt_request_exchange(int page_fd, bool out, struct ckpt_result *result);

/* Start the module: options, transition thread, control socket <run dir>/<pid>.sock and the
 * signal handler. `ops` and `ctx` must stay valid until ckpt_shutdown. Fails softly: 0 when the
 * module can take requests (a socket or signal problem is logged and leaves the rest working),
 * -errno with a logged message otherwise; it never terminates the host program.
 * -EALREADY if already started. */
int ckpt_init(const struct ckpt_host_ops *ops, void *ctx);

/* Run a checkpoint / resume on the transition thread and wait for it: the same path as the
 * socket. 0 on success; -EALREADY in the wrong state (checkpoint while paused, resume while
 * running); -EBUSY while another transition runs; -ENOTCONN before ckpt_init; otherwise the
 * failure's -errno (the state is then running for a checkpoint, paused for a resume).
 * Must not be called from inside a gated API call (the gate would wait for the caller). */
int ckpt_request_checkpoint(void);
int ckpt_request_resume(void);
/* Where the paused image lies on disk: its directory into dir (len bytes), its size into *bytes
 * (may be NULL) and 1; 0 when it is in host memory (or the program is not paused). */
int ckpt_image_on_disk(char *dir, size_t len, uint64_t *bytes);
/* Remove an image that cudaw wrote to dir (its manifest and chunk files, nothing else), then
 * dir itself if that leaves it empty. For an image nobody will read again (resumed from it). */
int ckpt_remove_image(const char *dir);
/* The same for the directory `name` under the open directory parent_fd, for a process that is
 * not the image's (cudawd cleaning up after a program that died): the directory must be
 * owner's and not a link, and only owner's files named as cudaw names them go. 0 or -errno
 * (-ENOTEMPTY: other files kept it). */
int ckpt_remove_image_at(int parent_fd, const char *name, uid_t owner);

/* cudawd's host-memory pool (sharing): `base` maps `mapping` bytes of it (MAP_SHARED), of which
 * the first `size` (cudawd's window) are the pool's now; the module never touches the rest. On
 * success the module owns the mapping (unmaps all of it when replaced or at shutdown) and
 * page-locks the window with a thread of its own once the program holds device memory, never on
 * the program's threads. -EBUSY while an image lies in the pool attached before (keep that one;
 * the caller unmaps base), -ENOTCONN before ckpt_init, -ENOSYS where the host cannot page-lock
 * memory. (NULL, 0, 0) lets go of the pool (its cudawd went away): -EBUSY while an image lies in
 * it. */
int ckpt_pool_attach(void *base, uint64_t size, uint64_t mapping);
/* cudawd's window grew to `size` bytes of the pool attached at `base` (at most its mapping): the
 * rest is page-locked too, what is already stays, an image in the pool stays where it is. 0;
 * -ENOENT when base is not the pool attached now, -EINVAL when size is not larger, past the
 * mapping, or the last window ended inside one of the module's pieces (attach instead). */
int ckpt_pool_grow(void *base, uint64_t size);
/* The program computes (true: it makes CUDA calls and none waits for the GPU) or not (idle,
 * waiting for its turn, paused). While it computes, the pool is page-locked one piece at a time,
 * at most half the time; otherwise by every reserve thread (CUDAW_CKPT_RESERVE_THREADS). The
 * driver holds a program's launches back while it page-locks: with every thread at it, a shared
 * job's 2-ms kernels ran 1.13-2.2x slower on the H100 while the programs page-locked the pool;
 * with one thread in every program, 1.03x (docs/sharing.md). Holds for a pool attached later
 * too. */
void ckpt_pool_quiet(bool computing);
/* cudawd schedules no other program and this one is idle on the GPU (SCHED_POOL_ALONE): no swap
 * needs the pool page-locked, and an exit would wait for the driver to unpin it (94 GiB: 2 s on
 * the H100). true: the pool's page-locking is given back in the background, piece by piece from
 * the top; false: page-locked again. Holds for a pool attached later too. */
void ckpt_pool_alone(bool alone);
/* The next checkpoint may put its image in [offset, offset + length) of the pool (length 0: no
 * loan). Call right before ckpt_request_checkpoint, and with 0 after it. The image in the range
 * is dropped after the resume: cudawd lends the range again. */
void ckpt_pool_lend(uint64_t offset, uint64_t length);
/* A standing loan, for a program not under sharing that borrows the pool (glue/borrow.c):
 * every checkpoint from now on, whoever asks for it (signal, cudaw-ctl, Slurm), may put its image
 * in [offset, offset + length) of the pool, until ckpt_pool_unlend (length 0: none). The image
 * there is dropped after each resume as with ckpt_pool_lend; the loan stays. The image reserve
 * (CUDAW_CKPT_RESERVE=auto) stands by while `covers` (the caller found the range large enough
 * for the image a checkpoint would take now) and the range is page-locked, and grows as without a
 * pool otherwise, so that the image finds page-locked memory either way (a checkpoint takes
 * whichever holds more of it). Returns whether it stands by: until it does, call again (the
 * range is page-locked in the background). Call after ckpt_pool_attach (which puts the reserve
 * on standby) whenever either changes. */
bool ckpt_pool_lend_standing(uint64_t offset, uint64_t length, bool covers);
/* End the standing loan so that its range can go back to cudawd: 0 when no checkpoint uses the
 * range now or can from now on (none under way, no image in the pool); -EBUSY otherwise (the
 * loan stays: try again once running). */
int ckpt_pool_unlend(void);

/* The program reset the device (cudaDeviceReset): the page-locked staging buffers the module
 * allocated through host_alloc_pinned were destroyed with the context. Forget them (the next
 * checkpoint allocates new ones). Call from inside a gated API call, so that no transition runs
 * concurrently. Safe before ckpt_init. */
void ckpt_device_reset(void);

/* The program has device memory now (a context exists): pin the staging buffers in the
 * background (CUDAW_CKPT_PIN_EARLY), so that the first checkpoint does not wait ~65 ms per
 * 128 MiB for them. Returns at once; a no-op before ckpt_init or when the option is off. */
void ckpt_prepare_early(void);

/* The current state (CKPT_RUNNING before init). */
enum ckpt_state_id ckpt_state(void);
const char *ckpt_state_name(enum ckpt_state_id state);

/* The result of the last completed transition: 0, or -ENOENT if none has run. */
int ckpt_last_result(struct ckpt_result *out);

/* Stop the control thread and signal handler, remove the socket, free staging buffers, streams
 * and the image. Waits for a running transition; does not resume a paused program. Call it
 * while the host operations still work (before the real runtime is unloaded). */
void ckpt_shutdown(void);

/* For the tools beside it (cudaw-ctl's subcommands, cudawd, the launcher): */
/* Create the run dir (0700) if missing; refuse one owned by another user, with the reason. */
int ckpt_run_dir_prepare(const char *dir, char *reason, size_t reason_len);
/* CUDAW_RUN_DIR's "%n" (the inode of the caller's pid namespace) and "%u" (its effective uid),
 * so that one folder shared by containers gives each container and user a run dir of its own:
 * pids repeat between containers, and a namespace's inode number is reused after it ends. "%%"
 * is "%". 0, or -ENAMETOOLONG/-errno. */
int ckpt_run_dir_expand(const char *text, char *out, size_t len);
/* The control socket of a process in a pid namespace below ours (a container), found by its host
 * pid: its pid in its own namespace (/proc/<pid>/status NSpid) under its run dir, reached through
 * /proc/<pid>/root, and checked to be served by that very process (SO_PEERCRED). 0, -ENOENT
 * (not namespaced, or no socket), -EACCES (not ours to look into), -ESRCH (another process). */
int ckpt_namespaced_socket(pid_t pid, char *path, size_t len);
/* Where the CDI spec and the Kubernetes plugin put the containers' run dirs on the host. */
#define CKPT_CONTAINERS_DIR "/run/cudaw/containers"
/* The host pids of the cudaw programs whose run dirs lie in dir/<name>/ (the containers' run
 * dirs, K8S/CDI layout): each socket's server, by SO_PEERCRED. Returns how many (at most max). */
size_t ckpt_container_pids(const char *dir, pid_t *pids, size_t max);
/* A byte count for people: "1.50 GiB". */
void ckpt_format_bytes(uint64_t bytes, char *buf, size_t len);
/* A figure of a /proc/meminfo-format file (NULL or "": /proc/meminfo) in bytes ("MemAvailable",
 * "MemTotal"), UINT64_MAX when the file or the figure is missing. */
uint64_t ckpt_meminfo_at(const char *path, const char *key);

#ifdef __cplusplus
}
#endif
#endif
