/* Internal contract between the checkpoint module's files (not for the shim). Each block names
 * the file that implements it. Everything returns 0 or -errno unless it says otherwise. */
#ifndef CUDAW_CKPT_INTERNAL_H
#define CUDAW_CKPT_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <sys/types.h>

#include "ckpt.h"

/* init.c: what ckpt_init was given, shared read-only by the other files while started. */
struct ckpt_runtime {
  const struct ckpt_host_ops *ops;
  void *ctx;
  struct ckpt_options options;
};
extern struct ckpt_runtime ckpt_rt;

/* log.c */
void ckpt_logf(int level, const char *format, ...) __attribute__((format(printf, 2, 3)));
double ckpt_now(void); /* CLOCK_MONOTONIC seconds */
/* A /proc/meminfo figure in bytes ("MemAvailable", "MemTotal"), UINT64_MAX when unknown.
 * CUDAW_TEST_MEMINFO names another file to read (tests: a host short of memory). */
uint64_t ckpt_meminfo(const char *key);

/* state.c: the state machine. state_begin moves running -> pausing, paused -> resuming or
 * running/held -> holding atomically, or says why not (-EBUSY: a transition runs; -EALREADY:
 * already there). state_finish moves to `to` (the transition knows where it landed), keeps a
 * checkpoint's or resume's result as the last one, and logs the transition. */
int state_begin(enum ckpt_op op, const char **why);
void state_finish(const struct ckpt_result *result, enum ckpt_state_id to);
void state_reset(void);
/* After fork, in the child (one thread): forget the parent's threads, fds and locks. */
void state_forget_after_fork(void);
bool state_last(struct ckpt_result *out);
const char *ckpt_op_name(int op);

/* image_mem.c: the host image's memory. Fresh regions share one mapping, each at a huge-page
 * boundary (IMAGE_ALIGN); an image_filler fills untouched pages of it from staging through
 * userfaultfd without the kernel zeroing them first (see the file). */
#define IMAGE_ALIGN (2u << 20)
uint64_t image_span(uint64_t size); /* size rounded up to IMAGE_ALIGN */
uint8_t *image_arena_map(uint64_t bytes); /* bytes: a multiple of IMAGE_ALIGN; NULL on failure */
struct image_filler {
  int fd;       /* the userfaultfd, 0 while not open */
  bool refused; /* the kernel said no once: do not ask again */
};
int image_filler_open(struct image_filler *f);
void image_filler_close(struct image_filler *f);
int image_filler_register(struct image_filler *f, uint8_t *data, uint64_t bytes);
int image_filler_unregister(struct image_filler *f, uint8_t *data, uint64_t bytes);
/* Fill n bytes at dst (page-aligned, registered, never touched) from src. */
int image_filler_copy(struct image_filler *f, uint8_t *dst, const uint8_t *src, size_t n);

/* reserve.c: page-locked host memory kept for the next image (CUDAW_CKPT_RESERVE), grown by
 * threads of its own. NULL (no reserve) where the option is off or the host cannot register. */
struct reserve;
struct reserve_info {
  bool enabled, refused; /* refused: the budget (or page-locking) stopped its growth */
  uint64_t bytes;  /* faulted in and registered */
  uint64_t used;   /* taken by the current image */
  uint64_t target; /* what it grows towards */
};
/* What an image may use of a taken reserve, from the pointer returned: `ready` bytes
 * page-locked (direct DMA), then plain memory of its mapping up to `size` (staged copies). */
struct reserve_span {
  uint64_t ready, size;
};
struct reserve *reserve_new(const struct ckpt_host_ops *ops, void *ctx,
                            const struct ckpt_options *options);
/* cudawd's host-memory pool as a reserve: base maps `size` bytes (MAP_SHARED, faulted in by
 * cudawd) of a mapping of `mapping` bytes, registered by `threads` threads in pieces once the
 * program holds device memory (one piece at a time while quiet: reserve_quiet). The reserve owns
 * the mapping from then on (unmaps all of it). NULL where the host cannot register. */
struct reserve *reserve_new_shared(const struct ckpt_host_ops *ops, void *ctx, void *base,
                                   uint64_t size, uint64_t mapping, uint64_t piece,
                                   uint32_t threads, bool quiet);
/* cudawd's window grew: `size` bytes of the mapping are the pool's now (more than before, at
 * most the mapping). What is page-locked stays; the threads go on from where they were. 0, or
 * -EINVAL (also where the last window ended inside a piece: attach the new one instead). */
int reserve_grow_shared(struct reserve *rs, uint64_t size);
void reserve_free(struct reserve *rs); /* unregisters and unmaps it */
/* An auto reserve stands by (wants nothing, so gives its memory back) while cudawd's pool takes
 * the images: both would page-lock an image's size each. A fixed size is kept. cudawd's pool
 * stands by while its program is alone and idle (SCHED_POOL_ALONE): it gives back its
 * page-locking, piece by piece from the top, and keeps its pages (cudawd's). */
void reserve_standby(struct reserve *rs, bool standby);
/* Quiet: one piece is page-locked at a time, whatever the threads, and the next only after a
 * pause as long as that took. While a piece is page-locked the driver holds the program's own
 * launches back; a program computing beside its pool's threads ran its kernels up to 2.2x slower
 * (issue 30, docs/sharing.md). */
void reserve_quiet(struct reserve *rs, bool quiet);
/* A shared reserve (the pool) page-locks nothing more while `other` (the program's own reserve)
 * has pieces under way: a borrower paused soon after allocating finds more of its image ready
 * in its own reserve when the pool's threads (and cudawd's, faulting the pool in) do not compete
 * for the host's memory bandwidth (H100: 13.75 of 45 GiB after 2 s beside them, all alone).
 * NULL: none. The caller unsets it before freeing `other`. */
void reserve_yield_to(struct reserve *rs, struct reserve *other);
/* Take the reserve for an image (kept false: no image holds it), or go on using it (kept true:
 * a kept image holds it, the next image adds regions after those): its base, and in *span how
 * much of it is page-locked now (a prefix that only grows while taken) and its size; NULL when
 * it is not in the state `kept` names. Regions start at reserve_align multiples. The image says
 * how far it reaches with reserve_use; reserve_give_back once no image uses it. */
uint8_t *reserve_take(struct reserve *rs, bool kept, struct reserve_span *span);
/* [offset, offset + bytes) of it for one image (cudawd's loan), or NULL if taken or past its
 * end; *span relative to base + offset. */
uint8_t *reserve_take_range(struct reserve *rs, uint64_t offset, uint64_t bytes,
                            struct reserve_span *span);
void reserve_use(struct reserve *rs, uint64_t end);
void reserve_give_back(struct reserve *rs);
/* Bytes page-locked from its start (a prefix). */
uint64_t reserve_ready(struct reserve *rs);
uint64_t reserve_align(const struct reserve *rs);
uint64_t reserve_size(struct reserve *rs); /* its mapping's usable bytes (a pool: the window) */
const uint8_t *reserve_base(const struct reserve *rs);
/* How much of [p, p + n) (inside the taken reserve) lies in p's registered piece: a copy must
 * not cross from one registered range into the next. */
size_t reserve_piece_left(const struct reserve *rs, const uint8_t *p, size_t n);
void reserve_status(struct reserve *rs, struct reserve_info *out);
/* For tests: wait up to `seconds` until `bytes` are ready; false if not (or refused). */
bool reserve_wait(struct reserve *rs, uint64_t bytes, double seconds);

/* engine.c and image.c: the copy engine and the host image. */
struct engine;
/* Where a copy thread's time went, in seconds; engine_stats holds the average over threads. */
struct engine_times {
  double wait;  /* waiting for the DMA of a staging buffer (stream_sync) */
  double copy;  /* copying between staging and the image (first-touch faults included) */
  double hash;  /* checksums on the host */
  double fault; /* faulting fresh image pages in ahead of the copy, while the DMA runs */
  double issue; /* in the driver calls that queue the copies */
  double admit; /* an exchange: refused by its pace (finishing copies in flight included) */
};
struct engine_stats {
  uint64_t bytes;
  uint64_t regions;
  double setup_seconds; /* the slowest copy thread's stream creation */
  struct engine_times times;
  int threads;
  double device_hash_seconds;
  uint64_t unchanged_bytes; /* delta: not copied, unchanged since the kept image */
  uint64_t filled_bytes; /* saved into fresh pages through userfaultfd (no zeroing) */
  double image_seconds; /* save: listing the regions and mapping the image */
  uint64_t reserve_bytes; /* save: image bytes placed in the reserve (copied to directly) */
  uint64_t pool_bytes;    /* save: image bytes placed in cudawd's lent pool range */
  uint64_t pool_image_bytes; /* save: ... and those staged into it (not page-locked yet) */
  uint64_t staged_bytes;  /* bytes that went through a staging buffer */
  uint64_t exchange_moved; /* an exchange: image bytes written (save) or device bytes created */
  uint64_t exchange_given; /* ... device bytes released (save) or image bytes consumed */
  uint64_t released_early; /* save: device bytes given back while copying (engine_release_as_saved) */
  double release_driver_seconds; /* ... the releasing thread's time in the driver */
  double release_tail_seconds;   /* ... what it added after the last copy */
  uint64_t given_back; /* a failed save: of those, what could not be put back (the image holds it) */
  uint64_t verified_in_flight; /* restore: bytes checked on the device while the copy went on */
  double verify_tail_seconds;  /* restore: what the check added after the last copy */
  /* engine_restore_beside: device memory made beside the copy. */
  bool created_beside;         /* it was (else the caller made it before the copy) */
  double create_seconds;       /* in the driver making memory: ranges and recreate_all */
  double create_wait_seconds;  /* copy threads waiting for memory not made yet, per thread */
  bool create_failed;          /* making memory failed (not the copy): the error is that */
  uint64_t create_shortfall;   /* ... bytes still to be made when the device said no (0: unknown) */
};
struct engine *engine_new(const struct ckpt_host_ops *ops, void *ctx, const struct ckpt_options *options);
/* Learn the device count, size the stream table and pin the staging buffers still missing (in
 * parallel; kept from then on). Cheap after the first time; every job calls it too. Streams
 * exist only while a job runs. */
int engine_prepare(struct engine *engine);
/* With cancel, a running or later engine_prepare pins no further buffer (each pinner finishes the
 * one it is pinning) and returns -ECANCELED; the buffers pinned so far are kept. Any thread. */
void engine_cancel_pinning(struct engine *engine, bool cancel);
/* Enumerate the regions and copy them into the image. Precondition: gate closed, drained. */
/* With engine_release_as_saved on, each region's device memory goes back (ops->release_range)
 * as soon as all of it is saved, beside the copy of the rest, instead of all at once afterwards
 * (thousands of allocations take the driver ~45 us each to unmap and release). A save that fails
 * then re-creates what went back and copies it back from the image, so that the program continues
 * as before; if even that fails, stats->given_back says how much the image alone holds (the image
 * is kept, its chunk map says what it holds, and the program must stay paused). */
int engine_save(struct engine *engine, struct engine_stats *stats, char *reason, size_t reason_len);
/* Live checkpoint, gate open and the program running: list the regions the host lets us copy now
 * (live_begin: their releases are held from then on), build the image for them and copy them all
 * on non-blocking streams, each chunk's checksum taken from the bytes that arrived
 * (ckpt_delta_hash), so that the pause's engine_save re-copies exactly the chunks whose checksum
 * on the device differs, and regions that appeared since in full. On success the releases stay
 * held: the caller calls ops->live_end after the pause's save. -ENOSYS where the host lacks the
 * live operations or device checksums; on any error nothing is held and the image is dropped. */
int engine_precopy(struct engine *engine, struct engine_stats *stats, char *reason, size_t reason_len);
/* With cancel, a pre-copy under way stops (its copies in flight finish) and returns -ECANCELED. */
void engine_cancel_precopy(struct engine *engine, bool cancel);
/* Give device memory back during the next saves (see engine_save): only for a stop-the-world
 * checkpoint whose next step releases everything anyway; no-op where memory cannot be released
 * piece by piece (translate). Transition thread. */
void engine_release_as_saved(struct engine *engine, bool on);
/* Copy the image back, verifying every chunk's checksum before it is sent; a mismatch is
 * -EBADMSG with the region and offset in `reason`. Precondition: regions recreated. */
int engine_restore(struct engine *engine, struct engine_stats *stats, char *reason, size_t reason_len);
/* Whether engine_restore_beside can run: the host moves memory piece by piece (remap), the image
 * is in host memory. */
bool engine_creates_beside(struct engine *engine);
/* engine_restore into released memory, making it beside the copy: a thread re-creates the
 * memory of each chunk (ops->recreate_range) ahead of the copy threads, in their order, and a
 * copy thread waits only at a chunk not made yet; regions the range operations do not make
 * (memory the program maps itself) are made by ops->recreate_all once those copies are done
 * (the stacks too), then copied. Checked beside the copy as engine_restore. Precondition:
 * released (ops->release_all), engine_creates_beside. On error stats->create_failed says whether
 * making memory failed (create_shortfall: how much was short), and the caller gives back what
 * was made (ops->release_all): the image is intact. */
int engine_restore_beside(struct engine *engine, struct engine_stats *stats, char *reason,
                          size_t reason_len);
/* Start registering the image for direct DMA (host_register) on a thread of its own, piece by
 * piece: done while the program is paused, so that the resume and later checkpoints copy
 * between the device and the image without staging buffers. save, restore, drop and
 * forget_pinned stop it first. No-op without host_register. */
void engine_register_image(struct engine *engine);
/* Stop that registering now (the pieces under way finish): the resume does so before it
 * re-creates device memory, which the driver makes wait behind page-locking calls. */
void engine_stop_registering(struct engine *engine);
/* Bytes of the image registered so far (pieces are rounded up to pages). Any thread. */
uint64_t engine_image_registered(struct engine *engine);
/* Free the image's memory (kept between cycles with keep_image). */
void engine_drop_image(struct engine *engine);
uint64_t engine_image_bytes(const struct engine *engine);
uint64_t engine_image_regions(const struct engine *engine);
/* bytes[d] = the image's bytes that came from device d (its regions there), for d < max_devices;
 * returns 1 + the highest device that has any (0 for an empty image). */
int engine_image_device_bytes(const struct engine *engine, uint64_t *bytes, int max_devices);
void engine_free(struct engine *engine);
/* The engine's reserve (NULL without CUDAW_CKPT_RESERVE). Any thread. */
struct reserve *engine_reserve(struct engine *engine);
struct reserve *engine_pool(struct engine *engine); /* cudawd's pool, or NULL */
/* The image went to disk to free host memory: the reserve's goes too (unregistered, unmapped);
 * a new one grows again once the program runs. No-op while an image lies in it. */
void engine_empty_reserve(struct engine *engine);
/* cudawd's host-memory pool (a shared reserve; the engine owns it from now on, NULL: none), in
 * place of the last one; -EBUSY while an image lies in the last one. Transition thread or with
 * no transition under way. */
int engine_set_pool(struct engine *engine, struct reserve *pool);
/* The next checkpoint's image may go to [offset, offset + length) of the pool (0: no loan);
 * ignored while an image lies in the pool. The loan ends when that image is dropped. */
void engine_lend(struct engine *engine, uint64_t offset, uint64_t length);
bool engine_image_in_pool(const struct engine *engine);
/* The device was reset: its pinned staging buffers are gone with the context. Forget them
 * without freeing; the next transition pins new ones. Only while no transition runs. */
void engine_forget_pinned(struct engine *engine);
/* For tests: the image bytes of region `index` (in enumeration order), or NULL. */
uint8_t *engine_image_data(struct engine *engine, size_t index, uint64_t *size);
/* For disk.c: the image as regions of `chunks` chunks of engine_chunk_bytes (the last one
 * shorter), each with its checksum in sums[]. The view is valid until the image changes. */
struct engine_image_view {
  struct ckpt_region region;
  uint8_t *data;
  uint64_t *sums;
  uint64_t chunks;
  bool *device_sums; /* the sums are ckpt_delta_hash values (delta_hash.h), else XXH3-64 */
};
size_t engine_chunk_bytes(const struct engine *engine);
int engine_image_region(struct engine *engine, size_t index, struct engine_image_view *view);
/* Replace the image by one for `regions` (data and sums to be filled in by the caller, e.g.
 * from disk), as engine_save would allocate it. On error the image is empty. */
int engine_image_create(struct engine *engine, const struct ckpt_region *regions, size_t count,
                        char *reason, size_t reason_len);

/* A restore whose chunks come from elsewhere (disk_stream.c) instead of a host image: `source`
 * fills dst with the n bytes of chunk `chunk` (engine_chunk_bytes each) of region `region` and
 * checks them, or returns -errno with `reason`; called by several copy threads at once, each
 * chunk once, while other chunks' copies run. Precondition: regions recreated, no image in host
 * memory. The chunks go through the staging buffers (all verified by the source before they
 * are sent); host memory beyond them is the source's. On error the copies stop. */
typedef int (*engine_source_fn)(void *arg, size_t region, uint64_t chunk, uint8_t *dst, size_t n,
                                char *reason, size_t reason_len);
int engine_restore_from(struct engine *engine, const struct ckpt_region *regions, size_t count,
                        engine_source_fn source, void *arg, struct engine_stats *stats,
                        char *reason, size_t reason_len);

/* Exchanges: one program's checkpoint gives its device memory back piece by piece as its bytes
 * reach the image while another's resume creates device memory piece by piece and frees the host
 * bytes it consumed, each paced by a limit the other side's progress raises (docs/sharing.md).
 * limit(arg, &final): the most bytes this side may have moved so far (a save: image bytes
 * written; a resume: device bytes created), polled while the next step would pass it; UINT64_MAX
 * (or a NULL limit): none. final is set when the limit will not rise again (the other side's
 * copy failed): a step past it then fails the copy instead of waiting. progress(arg, bytes), may
 * be NULL: what this side has given the other so far (a save: device bytes released; a resume:
 * image bytes consumed), after each change. */
struct engine_pace {
  uint64_t (*limit)(void *arg, bool *final);
  void (*progress)(void *arg, uint64_t bytes);
  void *arg;
  /* May be NULL: what this side has moved so far (the limit's measure), after each admission. */
  void (*moved)(void *arg, uint64_t bytes);
  /* May be NULL. A save: may a chunk's image bytes go to [pool_at, pool_at + n) of cudawd's pool
   * (UINT64_MAX: the chunk is not in the pool's page-locked part)? 0, -EAGAIN (not yet), or
   * -errno (never: the save fails). */
  int (*place)(void *arg, uint64_t pool_at, uint64_t n);
  /* May be NULL. A resume: the lowest offset of cudawd's pool its image still needs (UINT64_MAX:
   * none), after each chunk. */
  void (*needed)(void *arg, uint64_t pool_from);
};
/* engine_save, releasing every piece (ops->release_range) whose chunks are all in the image as
 * the copy goes. On success the caller still calls ops->release_all for what is left. On an
 * error after a release the image is kept, marked with what it holds: the released memory lives
 * only there, so the program must stay paused, and a later engine_restore or
 * engine_restore_creating copies back exactly the chunks the image holds. -ENOSYS without the
 * host's range operations. */
int engine_save_releasing(struct engine *engine, const struct engine_pace *pace,
                          struct engine_stats *stats, char *reason, size_t reason_len);
/* engine_restore into released memory, creating each piece (ops->recreate_range) just before its
 * first chunk is copied and freeing each chunk's image pages once it is on the device (pages in
 * a reserve or cudawd's pool are counted, not freed). Each chunk is checked against its checksum
 * on the host before it is sent. Precondition: regions released or partly created, nothing
 * else touches them. On success the image is dropped (the caller then calls ops->recreate_all
 * for what vmem does not hold); on error what reached the device stays there, the image keeps
 * the rest, and a retry (or engine_restore after ops->recreate_all) copies only the rest. */
/* Page-locked image pages cannot be given back to the kernel: unregister the image (not a
 * reserve's), so that engine_restore_creating frees what it consumed. Its copies are staged. */
void engine_unregister_image(struct engine *engine);
int engine_restore_creating(struct engine *engine, const struct engine_pace *pace,
                            struct engine_stats *stats, char *reason, size_t reason_len);

/* exchange_side.c: one program's side of an exchange over the shared page (exchange_page.h). */
struct exchange_page;
struct exchange_side {
  struct exchange_page *page;
  bool out;          /* the program going out (its save releases), else coming in */
  int peer_pidfd;    /* -1: none (kill(pid, 0) instead) */
  uint64_t delay_ns; /* tests: each pace check waits this long, to reach the middle surely */
};
/* The side of `page` this process is (out: the one going out): -EPERM when the page names
 * another pid for it. */
int exchange_side_open(struct exchange_side *side, struct exchange_page *page, bool out);
/* The pace for engine_save_releasing (out) or engine_restore_creating (in); valid until close. */
void exchange_side_pace(struct exchange_side *side, struct engine_pace *pace);
/* This side's copy ended. Succeeded: the peer goes on without its limit; the side going out
 * must have released all its memory first (ops->release_all), or the peer could overfill the
 * device. Failed: the peer stops at its next step (what this side did not move stays here).
 * The page stays mapped. */
void exchange_side_close(struct exchange_side *side, bool failed);
/* This process's side of `page` (out: the one going out) was refused before it began: ended
 * as failed, so that the peer stops waiting for it. Nothing when the page names another pid. */
void exchange_side_refuse(struct exchange_page *page, bool out);
/* Wait up to timeout_ms for the peer's copy to end (finished or its process gone): the side
 * going out resumes only after the one coming in is done. 0, or -ETIMEDOUT. */
int exchange_side_wait_peer(struct exchange_side *side, int timeout_ms);

/* exchange_pace.c, for engine.c: an exchange copy's pace and its range operations. */
struct exchange_run;
struct exchange_run *exchange_run_new(const struct ckpt_host_ops *ops, void *ctx,
                                      const struct engine_pace *pace, bool save);
void exchange_run_free(struct exchange_run *run);
/* May the copy of [vaddr, vaddr + n) start? A save counts its image bytes (pool_at: where they
 * go in cudawd's pool, UINT64_MAX: not there), a resume first creates the device memory (all of
 * it or none). 0, -EAGAIN while the limit forbids (the caller finishes its copies in flight and
 * asks again), -EPIPE when it forbids for good (the other side failed), or the pace's or the
 * range operation's -errno. */
int exchange_admit(struct exchange_run *run, uint64_t vaddr, uint64_t n, uint64_t pool_at);
/* A save: [vaddr, vaddr + n) is all in the image: give its pieces back. */
int exchange_release(struct exchange_run *run, uint64_t vaddr, uint64_t n);
/* A resume: the chunk at data (n bytes) is on the device; free_pages: give its whole pages
 * back to the kernel (a private image), else only count it. pool_from: the lowest offset of
 * cudawd's pool the image still needs (UINT64_MAX: none). */
void exchange_consumed(struct exchange_run *run, uint8_t *data, uint64_t n, bool free_pages,
                       uint64_t pool_from);
/* What this run moved and gave so far (for the stats). */
void exchange_totals(struct exchange_run *run, uint64_t *moved, uint64_t *given);

/* create_ahead.c, for engine.c: device memory made ahead of a resume's copy, range by range in
 * the copy's order, on a thread of its own. */
struct create_range {
  uint64_t vaddr, bytes;
};
struct creator_totals {
  double driver_seconds; /* in recreate_range */
  uint64_t created;      /* bytes made */
  int error;             /* the failed recreate_range's -errno, 0 if none failed */
  uint64_t failed_at;    /* ... at this range's start */
  uint64_t shortfall;    /* -ENOMEM: `missing` less what was made (bytes short, roughly) */
};
struct creator;
/* Start making ranges[0..count) (kept by the caller until creator_finish); `missing`: what they
 * lack in all now (ops->range_missing), for the shortfall. 0 or -errno (nothing started). */
int creator_start(struct creator **creator, const struct ckpt_host_ops *ops, void *ctx,
                  const struct create_range *ranges, uint64_t count, uint64_t missing);
/* Wait until ranges[index] and all before it exist: 0; the failure's -errno once making failed
 * before it, -ECANCELED once cancelled. The time spent waiting is added to *waited. */
int creator_wait(struct creator *creator, uint64_t index, double *waited);
/* Make no more (the copy failed); waiters return -ECANCELED. Any thread. */
void creator_cancel(struct creator *creator);
/* Wait for the thread, then free it; *totals: what it did. */
void creator_finish(struct creator *creator, struct creator_totals *totals);

/* transition.c: the transition thread runs one checkpoint or resume at a time. submit checks
 * the state at once (an error means nothing was started) and calls done(arg, result) on the
 * transition thread when finished. */
typedef void (*transition_done_fn)(void *arg, const struct ckpt_result *result);
/* What a checkpoint request asks for beyond keeping the image in host memory. */
struct transition_request {
  bool hold_after;   /* resume: keep the gate closed (state held) for a group's unhold */
  uint32_t hold_ms;  /* hold and drain: the lease (a held process reopens by itself after it);
                      * drain: also the longest wait for the device */
  bool release_all;  /* then hand what remains on the device to the driver's process checkpoint */
  bool live;         /* copy device memory while the program runs, then pause (engine_precopy) */
  bool compress;     /* zstd chunk files */
  char to_dir[4096]; /* write the image there and free its host memory ("" keeps it in memory) */
  struct exchange_page *exchange; /* checkpoint or resume as one side of an exchange (NULL: no) */
};
/* Where a paused program's state is (zeros while running). */
struct transition_paused {
  bool driver_released; /* the driver holds the context etc. in host memory: 0 bytes on the GPU */
  uint64_t disk_bytes;  /* the image is on disk in `dir`, not in host memory */
  uint64_t disk_stored;
  char dir[4096];
};
int transition_start(void);
void transition_stop(void);
int transition_submit(enum ckpt_op op, double requested_at, transition_done_fn done, void *arg,
                      const char **why);
/* As transition_submit, with a checkpoint's request (NULL: the defaults from the options). */
int transition_submit_with(enum ckpt_op op, double requested_at, const struct transition_request *request,
                           transition_done_fn done, void *arg, const char **why);
void transition_paused_info(struct transition_paused *out);
/* The paused image is on disk or with the driver (no lock taken: any thread, any lock held). */
bool transition_image_away(void);
void transition_forget_after_fork(void);
uint64_t transition_image_bytes(void);
/* engine_image_device_bytes of the current image (0 devices while none is complete). */
int transition_image_device_bytes(uint64_t *bytes, int max_devices);
uint64_t transition_image_registered(void); /* bytes of the image page-locked (pinned) */
/* For tests: the engine (only touch it while no transition runs). */
struct engine *transition_engine(void);
void transition_reserve(struct reserve_info *out); /* all zero without a reserve */
int transition_pool_attach(void *base, uint64_t size, uint64_t mapping); /* ckpt_pool_attach */
int transition_pool_grow(void *base, uint64_t size); /* see ckpt_pool_grow */
void transition_pool_quiet(bool quiet);              /* see ckpt_pool_quiet */
void transition_pool_alone(bool alone);              /* see ckpt_pool_alone */
void transition_pool_lend(uint64_t offset, uint64_t length);
bool transition_pool_lend_standing(uint64_t offset, uint64_t length, bool covers);
int transition_pool_unlend(void); /* see ckpt_pool_unlend */
uint64_t transition_image_regions(void);
/* While paused: what park_other reported (zeros otherwise). */
struct ckpt_other_memory transition_other_memory(void);

/* control.c: the control thread and socket. signal_fd receives what the signal handler
 * writes; control_signal_fd is its write end for signal.c. */
int control_start(void);
void control_stop(void);
void control_forget_after_fork(void);
int control_signal_fd(void);
const char *control_socket_path(void);
/* Rewrite <pid>.state now (the control thread also does within 250 ms of any change). */
void control_state_changed(void);
/* One line of JSON (with '\n') describing a transition's result. */
int control_format_result(const struct ckpt_result *result, char *buf, size_t len);

/* driver.c: the driver's process checkpoint of this process, through the helper tool
 * cudaw-ckpt-driver. -ENOSYS where the driver lacks it; `reason` says why. */
int driver_checkpoint(uint32_t timeout_ms, char *reason, size_t reason_len);
int driver_restore(char *reason, size_t reason_len);

/* signal.c */
int signal_install(int signal_number, int notify_fd);
/* What the suspend-mode handlers write to suspend.c's pipe: when and which signal. */
struct suspend_event {
  uint64_t monotonic_ns;
  uint32_t signal_number; /* SIGTSTP or SIGCONT */
  uint32_t from_terminal; /* sent by the kernel (a terminal's Ctrl-Z), not by kill() */
};
/* Handlers for SIGTSTP and SIGCONT that write a suspend_event to fd (CUDAW_SUSPEND=release). */
int signal_install_suspend(int fd);
void signal_restore_suspend(void);
void signal_restore(void);
/* Remove socket_path when a termination signal with its default action kills the process (see
 * signal.c); signal_remove_cleanup puts those signals back to SIG_DFL. */
void signal_install_cleanup(const char *socket_path);
void signal_remove_cleanup(void);

/* suspend.c: suspend mode. suspend_start opens the event pipe and installs the handlers;
 * the control thread polls suspend_event_fd() and calls suspend_on_events when it is readable. */
int suspend_start(void);
void suspend_stop(void);
void suspend_forget_after_fork(void);
int suspend_event_fd(void); /* -1 when suspend mode is off */
void suspend_on_events(void);

/* rundir.c: where sockets live; shared with cudaw-ctl. */
int ckpt_socket_path(const char *dir, pid_t pid, char *buf, size_t len);
/* 1 alive, 0 gone, by kill(pid, 0). */
int ckpt_pid_alive(pid_t pid);
/* <run dir>/<pid>.state for <run dir>/<pid>.sock: one JSON line the control thread keeps up to
 * date (state, image and device bytes, "since": when it became so), read by cudaw-ctl when the
 * process cannot answer (stopped by SIGSTOP). 0, -EINVAL (not a .sock path) or -ENAMETOOLONG. */
int ckpt_state_path(const char *socket_path, char *buf, size_t len);
/* Unlink <pid>.sock files (and <pid>.state files) of processes that are gone; returns how many
 * sockets. */
int ckpt_clean_stale(const char *dir);
/* Parse "<pid>.sock"; 0 if the name is not one. */
pid_t ckpt_socket_name_pid(const char *name);

#endif
