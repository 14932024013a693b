/* The copy engine: device memory <-> host image, in chunks of one staging buffer. Pinned staging
 * buffers are allocated once, in parallel, and reused (pinning on the fly is slower than
 * pageable copies). Streams live only while a copy job runs, so that nothing of ours holds device
 * memory while the program is paused. Each host thread owns a few (stream, staging) slots and
 * keeps the DMA of one slot running while it copies another between staging and the image; the
 * parts of the image registered while paused are copied to and from directly. Every chunk has a
 * checksum: taken on the device (delta_hash.h) where the host offers it, which lets a checkpoint
 * into a kept image copy only changed chunks and a resume check each chunk on the device after
 * its copy; otherwise XXH3-64 on the host, checked before the chunk is sent back. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "delta_hash.h"
#include "engine_state.h"

/* Hash in pieces that stay in cache between the memcpy and the hash. */
#define PIECE_BYTES (256u << 10)



/* One chunk of work: region index and chunk index in it. */
struct chunk_ref {
  uint32_t region;
  uint32_t chunk;
  uint32_t count; /* 0 or 1: that chunk; more: as many consecutive direct chunks, one copy */
};

/* A thread beside a job's copy threads that they feed (under the job's lock): it waits on `cond`
 * and ends once `last` is set and its work is done. */
struct helper {
  bool running;
  bool last;
  pthread_cond_t cond;
  pthread_t thread;
};

/* A save or restore run, shared by its threads. */
struct job {
  struct engine *engine;
  bool save;
  bool host_sums; /* save: checksum on the host (XXH3) while copying */
  bool live; /* pre-copy: non-blocking streams, sums of the copied bytes with ckpt_delta_hash */
  struct chunk_ref *chunks;
  uint64_t chunk_count;
  _Atomic uint64_t next;
  _Atomic int failed;
  _Atomic bool filler_failed; /* the next checkpoint copies into zeroed pages instead */
  struct exchange_run *exchange; /* an exchange's copy (engine_save_releasing and co.), or NULL */
  pthread_mutex_t admit_lock; /* an exchange takes `next` under it, admitted (take_admitted) */
  pthread_mutex_t lock;
  int error;
  char reason[256];
  /* A save giving memory back as it goes: the units wholly saved (start_releasing; the engine's
   * unit_*), in a queue (under lock) that one thread empties, so that the copy threads never
   * wait for the driver's release. unit_left: chunks still to save per unit. */
  struct helper releaser;
  struct saved_unit { uint32_t region, unit; } *saved;
  size_t saved_head, saved_tail;
  _Atomic uint64_t *unit_left;
  uint64_t released_bytes, released_units;
  double release_seconds; /* the releasing thread's time in release_range */
  int release_error;
  /* A restore checked on the device as it goes (engine_restore): the chunks that landed, in the
   * order they did (under lock), checked in batches by one thread beside the copy. */
  struct helper verifier;
  struct chunk_ref *landed;
  uint64_t landed_count, checked_count, landed_pending; /* pending: bytes landed, not checked */
  uint64_t verified_bytes;
  /* A restore making device memory ahead of its copy (engine_restore_beside): one range per
   * chunk reference, in the copy's order. */
  struct creator *creator;
  struct create_range *ranges;
};

struct worker {
  struct job *job;
  int index;
  pthread_t thread;
  uint64_t staged_bytes; /* save or restore: bytes through staging */
  double setup_seconds; /* creating streams */
  double create_wait; /* waiting for device memory not made yet (engine_restore_beside) */
  struct engine_times times;
};

struct engine *engine_new(const struct ckpt_host_ops *ops, void *ctx, const struct ckpt_options *options) {
  struct engine *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->ops = ops;
  e->ctx = ctx;
  e->options = *options;
  e->prefault = options->prefault;
  e->fill = options->fill_kernel != 0;
  e->chunk_bytes = (size_t)options->staging_bytes;
  e->threads = (int)options->threads;
  if (e->threads > (int)options->streams) e->threads = (int)options->streams;
  e->slots_per_thread = (int)options->streams / e->threads;
  e->slots = e->threads * e->slots_per_thread;
  pthread_mutex_init(&e->registrar_lock, NULL);
  e->reserve = reserve_new(ops, ctx, options);
  return e;
}

struct pinner {
  struct engine *engine;
  int first, count, rc;
  pthread_t thread;
};

static void *pin_slots(void *arg) {
  struct pinner *p = arg;
  struct engine *e = p->engine;
  for (int s = p->first; s < p->first + p->count && !p->rc; s++) {
    if (atomic_load_explicit(&e->pin_cancel, memory_order_relaxed)) p->rc = -ECANCELED;
    else if (!e->staging[s])
      p->rc = e->ops->host_alloc_pinned(e->ctx, e->chunk_bytes, &e->staging[s]);
  }
  return NULL;
}

void engine_cancel_pinning(struct engine *e, bool cancel) {
  atomic_store_explicit(&e->pin_cancel, cancel, memory_order_relaxed);
}

/* Pin the staging buffers still missing, one thread per copy thread's share: pinning is slow
 * (~2 GB/s) and scales a little. Done before any copy starts: pinning while copies run on the
 * legacy stream slowed both down (measured: 1.05 s instead of 0.42 s for 8 GiB). */
static int pin_staging(struct engine *e) {
  struct pinner pinners[64];
  int count = e->threads < 64 ? e->threads : 64, started = 0, rc = 0;
  int share = (e->slots + count - 1) / count;
  for (int t = 0; t < count; t++) {
    pinners[t] = (struct pinner){.engine = e, .first = t * share, .count = share};
    if (pinners[t].first + share > e->slots) pinners[t].count = e->slots - pinners[t].first;
    if (pinners[t].count <= 0) pinners[t].count = 0;
  }
  for (int t = 1; t < count; t++) {
    if (pthread_create(&pinners[t].thread, NULL, pin_slots, &pinners[t]) != 0) break;
    started++;
  }
  pin_slots(&pinners[0]);
  for (int t = 1; t <= started; t++) pthread_join(pinners[t].thread, NULL);
  for (int t = started + 1; t < count; t++) pin_slots(&pinners[t]); /* threads that did not start */
  for (int t = 0; t < count && !rc; t++) rc = pinners[t].rc;
  return rc;
}

int engine_prepare(struct engine *e) {
  int devices = 0;
  int rc = e->ops->device_count(e->ctx, &devices);
  if (rc) return rc;
  /* No device in use yet (the host creates no context for us): nothing to copy, nothing to
   * allocate; prepare again next time. */
  if (devices <= 0) return 0;
  if (!e->staging && !(e->staging = calloc((size_t)e->slots, sizeof *e->staging))) return -ENOMEM;
  if ((rc = pin_staging(e)) != 0) return rc;
  if (devices != e->devices) {
    void **streams = calloc((size_t)devices * (size_t)e->slots, sizeof *streams);
    if (!streams) return -ENOMEM;
    free(e->streams);
    e->streams = streams;
    e->devices = devices;
  }
  return 0;
}



void engine_free(struct engine *e) {
  if (!e) return;
  engine_drop_image(e);
  reserve_yield_to(e->pool, NULL); /* before the reserve it reads goes */
  reserve_free(e->reserve);
  reserve_free(e->pool);
  image_filler_close(&e->filler);
  for (int i = 0; e->streams && i < e->devices * e->slots; i++)
    if (e->streams[i]) e->ops->stream_destroy(e->ctx, e->streams[i]);
  for (int s = 0; e->staging && s < e->slots; s++)
    if (e->staging[s]) e->ops->host_free_pinned(e->ctx, e->staging[s]);
  free(e->streams);
  free(e->staging);
  pthread_mutex_destroy(&e->registrar_lock);
  free(e);
}
/* ---- the copy threads ---- */

static void job_fail(struct job *job, int error, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static void job_fail(struct job *job, int error, const char *format, ...) {
  pthread_mutex_lock(&job->lock);
  if (!job->error) {
    job->error = error;
    va_list args;
    va_start(args, format);
    vsnprintf(job->reason, sizeof job->reason, format, args);
    va_end(args);
  }
  /* Nothing more will be copied. Under the lock: the verifier may fail while stop_creating
   * takes the creator away. */
  if (job->creator) creator_cancel(job->creator);
  pthread_mutex_unlock(&job->lock);
  atomic_store(&job->failed, 1);
}

/* Copy n bytes with non-temporal stores where both ends are 16-byte aligned: the destination is
 * not read again by this thread (the image waits for the resume; staging is read by the DMA), so
 * writing around the cache saves the read-for-ownership pass over it. Ends with a store fence. */
static void copy_streaming(uint8_t *dst, const uint8_t *src, size_t n) {
#if defined(__SSE2__)
  if ((((uintptr_t)dst | (uintptr_t)src) & 15) == 0) {
    size_t body = n & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
      __m128i a = _mm_load_si128((const __m128i *)(src + i));
      __m128i b = _mm_load_si128((const __m128i *)(src + i + 16));
      __m128i c = _mm_load_si128((const __m128i *)(src + i + 32));
      __m128i d = _mm_load_si128((const __m128i *)(src + i + 48));
      _mm_stream_si128((__m128i *)(dst + i), a);
      _mm_stream_si128((__m128i *)(dst + i + 16), b);
      _mm_stream_si128((__m128i *)(dst + i + 32), c);
      _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    memcpy(dst + body, src + body, n - body);
    _mm_sfence();
    return;
  }
#endif
  memcpy(dst, src, n);
}

/* Write n bytes into the image at dst: through the filler where its pages are untouched
 * (filler non-NULL), else a streaming copy. */
static int image_write(struct image_filler *filler, uint8_t *dst, const uint8_t *src, size_t n) {
  if (filler) return image_filler_copy(filler, dst, src, n);
  copy_streaming(dst, src, n);
  return 0;
}

/* Hash the source in cache-sized pieces and copy each piece while it is still in cache: the
 * source is read from memory once, the destination written once. Sets *sum to the source's
 * XXH3-64; fails only where the filler does. */
static int hash_and_copy(XXH3_state_t *state, struct image_filler *filler, uint8_t *dst,
                         const uint8_t *src, size_t n, uint64_t *sum, struct engine_times *times) {
  XXH3_64bits_reset(state);
  double t0 = ckpt_now(), hashing = 0;
  int rc = 0;
  for (size_t done = 0; done < n && rc == 0; done += PIECE_BYTES) {
    size_t piece = n - done < PIECE_BYTES ? n - done : PIECE_BYTES;
    double t = ckpt_now();
    XXH3_64bits_update(state, src + done, piece);
    hashing += ckpt_now() - t;
    rc = image_write(filler, dst + done, src + done, piece);
  }
  times->hash += hashing;
  times->copy += ckpt_now() - t0 - hashing;
  *sum = XXH3_64bits_digest(state);
  return rc;
}

static uint64_t hash_only(XXH3_state_t *state, const uint8_t *data, size_t n,
                          struct engine_times *times) {
  double t0 = ckpt_now();
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, data, n);
  times->hash += ckpt_now() - t0;
  return XXH3_64bits_digest(state);
}

/* Whether the chunk at offset is registered image memory that the DMA can use directly. */
static bool direct(const struct image_region *r, uint64_t offset, size_t n) {
  return offset + n <= r->registered;
}

/* Queue a chunk's copy between the device and the image itself (registered). A chunk may cross
 * from one registered piece into the next (the reserve's, or the registrar's where the chunk size
 * does not divide REGISTER_PIECE): one copy per piece. */
static int copy_direct(struct engine *e, const struct image_region *r, bool save, uint64_t offset,
                       size_t n, void *stream) {
  uint8_t *host = r->data + offset;
  uint64_t vaddr = r->region.vaddr + offset;
  while (n) {
    uint64_t left = REGISTER_PIECE - (uint64_t)(host - r->data) % REGISTER_PIECE;
    size_t part = r->in_reserve ? reserve_piece_left(r->in_pool ? e->pool : e->reserve, host, n)
                  : n < left ? n : (size_t)left;
    int rc = save ? e->ops->copy_d2h_async(e->ctx, host, vaddr, part, stream)
                  : e->ops->copy_h2d_async(e->ctx, vaddr, host, part, stream);
    if (rc) return rc;
    host += part;
    vaddr += part;
    n -= part;
  }
  return 0;
}

static int copy_timed(struct image_filler *filler, uint8_t *dst, const uint8_t *src, size_t n,
                      struct engine_times *times) {
  double t0 = ckpt_now();
  int rc = image_write(filler, dst, src, n);
  times->copy += ckpt_now() - t0;
  return rc;
}

/* Fault the image pages of a fresh chunk in while its DMA runs, instead of inside the copy. */
static void fault_in(uint8_t *data, size_t n, struct engine_times *times) {
  double t0 = ckpt_now();
  size_t page = 4096, length = (n + page - 1) / page * page;
  if (madvise(data, length, MADV_POPULATE_WRITE) != 0)
    for (size_t i = 0; i < n; i += page) ((volatile uint8_t *)data)[i] = 0;
  times->fault += ckpt_now() - t0;
}

struct slot {
  int staging; /* index into engine->staging */
  int64_t chunk; /* chunk in flight, -1 if none */
};

static void *stream_of(struct engine *e, int device, int slot) {
  if (device < 0 || device >= e->devices) return NULL;
  return e->streams[device * e->slots + slot];
}

/* The bytes of a chunk reference: its chunks, the region's last one shorter. */
static uint64_t chunk_length(const struct engine *e, struct chunk_ref ref) {
  const struct image_region *r = &e->image[ref.region];
  uint64_t offset = (uint64_t)ref.chunk * e->chunk_bytes;
  uint64_t n = (uint64_t)(ref.count > 1 ? ref.count : 1) * e->chunk_bytes;
  return r->region.size - offset < n ? r->region.size - offset : n;
}

static bool holds(const struct image_region *r, uint64_t k) {
  return !r->holds || (r->holds[k / 8] >> (k % 8) & 1);
}

static void set_holds(struct image_region *r, uint64_t k, bool on) {
  if (on) r->holds[k / 8] |= (uint8_t)(1u << (k % 8));
  else r->holds[k / 8] &= (uint8_t)~(1u << (k % 8));
}

/* A resume under way (the job's lock held): the lowest offset of cudawd's pool whose bytes the
 * image still needs, UINT64_MAX when none. Each pool region's held_prefix skips the chunks
 * already on the device, so that a handover (docs/sharing.md) learns exactly where the other
 * program may write. */
static uint64_t pool_needed_from(struct engine *e) {
  uint64_t lowest = UINT64_MAX;
  const uint8_t *base = reserve_base(e->pool);
  for (size_t i = 0; base && i < e->image_count; i++) {
    struct image_region *r = &e->image[i];
    if (!r->in_pool || !r->holds) continue;
    while (r->held_prefix < r->chunks && !holds(r, r->held_prefix)) r->held_prefix++;
    if (r->held_prefix == r->chunks) continue;
    uint64_t at = (uint64_t)(r->data - base) + r->held_prefix * e->chunk_bytes;
    if (at < lowest) lowest = at;
  }
  return lowest;
}

/* An exchange's chunk is done. A save: the chunks hold; the pieces of the region's prefix that
 * holds go back to the device. A resume: the chunks are on the device and leave the image. */
static int exchange_done(struct job *job, struct chunk_ref ref) {
  struct engine *e = job->engine;
  struct image_region *r = &e->image[ref.region];
  uint64_t count = ref.count > 1 ? ref.count : 1, offset = (uint64_t)ref.chunk * e->chunk_bytes;
  if (!job->save) {
    pthread_mutex_lock(&job->lock);
    for (uint64_t k = ref.chunk; k < ref.chunk + count; k++) set_holds(r, k, false);
    uint64_t pool_from = pool_needed_from(e);
    pthread_mutex_unlock(&job->lock);
    exchange_consumed(job->exchange, r->data + offset, chunk_length(e, ref),
                      !r->in_reserve && r->registered == 0, pool_from);
    return 0;
  }
  pthread_mutex_lock(&job->lock);
  for (uint64_t k = ref.chunk; k < ref.chunk + count; k++) set_holds(r, k, true);
  uint64_t before = r->held_prefix;
  while (r->held_prefix < r->chunks && holds(r, r->held_prefix)) r->held_prefix++;
  uint64_t prefix = r->held_prefix;
  pthread_mutex_unlock(&job->lock);
  if (prefix == before) return 0;
  uint64_t bytes = prefix * e->chunk_bytes;
  return exchange_release(job->exchange, r->region.vaddr,
                          bytes < r->region.size ? bytes : r->region.size);
}

/* ---- a save that gives device memory back as it goes (engine_release_as_saved) ----
 * Thousands of allocations cost the driver ~45 us each to unmap and release, one at a time
 * whatever the threads (8192 of them: 375 ms after a 0.66 s copy of 32 GiB; H100 2026-11-25).
 * Released by one thread beside the copy, as each region is wholly saved, the release hides
 * behind the DMA (2048 allocations of 4 MiB: copy and release 0.189 s against 0.265 s one after
 * the other, the copy itself at the same 51.8 GB/s; H100 2026-11-27). */

static bool helper_start(struct helper *h, void *(*run)(void *), void *arg) {
  *h = (struct helper){0};
  pthread_cond_init(&h->cond, NULL);
  if (pthread_create(&h->thread, NULL, run, arg) != 0) {
    pthread_cond_destroy(&h->cond);
    return false;
  }
  return h->running = true;
}

/* No more work will come: let it finish what it has, and wait for it. */
static bool helper_stop(struct helper *h, pthread_mutex_t *lock) {
  if (!h->running) return false;
  pthread_mutex_lock(lock);
  h->last = true;
  pthread_cond_signal(&h->cond);
  pthread_mutex_unlock(lock);
  pthread_join(h->thread, NULL);
  pthread_cond_destroy(&h->cond);
  h->running = false;
  return true;
}

static void queue_saved(struct job *job, uint32_t region, uint64_t unit) {
  pthread_mutex_lock(&job->lock);
  job->saved[job->saved_tail++] = (struct saved_unit){region, (uint32_t)unit};
  pthread_cond_signal(&job->releaser.cond);
  pthread_mutex_unlock(&job->lock);
}

/* `ref`'s chunks are in the image: each unit goes back once none of it is left to save. (With
 * whole regions, unit_chunks UINT64_MAX, every chunk is in unit 0 and (0 + 1) * it is no
 * overflow.) */
static void note_saved(struct job *job, struct chunk_ref ref) {
  const struct engine *e = job->engine;
  uint64_t first = ref.chunk, end = first + (ref.count > 1 ? ref.count : 1);
  while (first < end) {
    uint64_t unit = first / e->unit_chunks, unit_end = (unit + 1) * e->unit_chunks;
    uint64_t n = (unit_end < end ? unit_end : end) - first;
    if (atomic_fetch_sub(&job->unit_left[e->unit_first[ref.region] + unit], n) == n)
      queue_saved(job, ref.region, unit);
    first += n;
  }
}

/* Whether the releasing save under way gave back the unit that holds `chunk` of region `region`
 * (then that chunk is in the image). */
static bool chunk_gone(const struct engine *e, size_t region, uint64_t chunk) {
  if (!e->unit_gone) return false;
  uint64_t unit = e->unit_first[region] + chunk / e->unit_chunks;
  return e->unit_gone[unit / 8] >> (unit % 8) & 1;
}

/* Whether any of region `region`'s device memory went back during the save under way. */
static bool region_gone(const struct engine *e, size_t region) {
  if (!e->unit_gone) return false;
  for (uint64_t u = e->unit_first[region]; u < e->unit_first[region + 1]; u++)
    if (e->unit_gone[u / 8] >> (u % 8) & 1) return true;
  return false;
}

/* Unit `unit` of region r: [*vaddr, *vaddr + *bytes). */
static void unit_span(const struct engine *e, const struct image_region *r, uint64_t unit,
                      uint64_t *vaddr, uint64_t *bytes) {
  if (e->unit_chunks == UINT64_MAX) {
    *vaddr = r->region.vaddr;
    *bytes = r->region.size;
    return;
  }
  uint64_t unit_bytes = e->unit_chunks * e->chunk_bytes, offset = unit * unit_bytes;
  *vaddr = r->region.vaddr + offset;
  *bytes = r->region.size - offset < unit_bytes ? r->region.size - offset : unit_bytes;
}

static void *release_saved(void *arg) {
  struct job *job = arg;
  struct engine *e = job->engine;
  pthread_mutex_lock(&job->lock);
  for (;;) {
    while (job->saved_head == job->saved_tail && !job->releaser.last)
      pthread_cond_wait(&job->releaser.cond, &job->lock);
    /* After a failure nothing more goes: what went comes back (put_back_released). */
    if (job->saved_head == job->saved_tail || atomic_load(&job->failed)) break;
    struct saved_unit unit = job->saved[job->saved_head++];
    struct image_region *r = &e->image[unit.region];
    pthread_mutex_unlock(&job->lock);
    uint64_t done = 0, vaddr, bytes;
    unit_span(e, r, unit.unit, &vaddr, &bytes);
    double t0 = ckpt_now();
    int rc = e->ops->release_range(e->ctx, vaddr, bytes, &done);
    pthread_mutex_lock(&job->lock);
    job->release_seconds += ckpt_now() - t0;
    /* Marked: a failed save puts it back, or its image keeps it (put_back_released). */
    if (done || (rc == 0 && e->unit_chunks == UINT64_MAX)) {
      uint64_t u = e->unit_first[unit.region] + unit.unit;
      e->unit_gone[u / 8] |= (uint8_t)(1u << (u % 8));
    }
    job->released_bytes += done;
    job->released_units += done ? 1 : 0;
    if (rc) { /* the rest goes at the end, with everything else (release_all) */
      job->release_error = rc;
      break;
    }
  }
  pthread_mutex_unlock(&job->lock);
  return NULL;
}

static void free_units(struct job *job) {
  free(job->saved);
  free(job->unit_left);
  job->saved = NULL;
  job->unit_left = NULL;
}

/* The save is over (saved, put back, or kept in its image): the units are done with. */
static void drop_units(struct engine *e) {
  for (size_t i = 0; e->unit_holds && i < e->image_count; i++) free(e->unit_holds[i]);
  free(e->unit_holds);
  free(e->unit_first);
  free(e->unit_gone);
  e->unit_holds = NULL;
  e->unit_first = NULL;
  e->unit_gone = NULL;
}

/* Before the copy threads start: the units (the host's pieces, which release_range gives back
 * one by one, else whole regions), what each has to save, those with nothing to save (unchanged
 * since the kept image) queued at once, the releasing thread started. Off on error. A region
 * released whole once all of it was saved held its last pieces until the end: a 45 GiB region's
 * release ended 110-183 ms after the last copy (H100, 2026-11-27). */
static void start_releasing(struct job *job) {
  struct engine *e = job->engine;
  uint64_t piece = e->ops->piece_bytes ? e->ops->piece_bytes(e->ctx) : 0;
  drop_units(e);
  e->unit_chunks = piece && piece % e->chunk_bytes == 0 && piece / e->chunk_bytes < UINT32_MAX
                       ? piece / e->chunk_bytes
                       : UINT64_MAX;
  uint64_t units = 0;
  e->unit_first = malloc((e->image_count + 1) * sizeof *e->unit_first);
  for (size_t i = 0; e->unit_first && i < e->image_count; i++) {
    e->unit_first[i] = units;
    uint64_t chunks = e->image[i].chunks ? e->image[i].chunks : 1;
    units += (chunks - 1) / e->unit_chunks + 1; /* whole regions (UINT64_MAX): one each */
  }
  if (e->unit_first) e->unit_first[e->image_count] = units;
  e->unit_gone = calloc(units / 8 + 1, 1);
  /* The chunk maps a failed put-back gives the image, made now: made by the put-back, a map it
   * could not allocate read as "holds every chunk" (NULL), and the resume copied chunks never
   * saved over memory that never left the device. */
  bool maps = (e->unit_holds = calloc(e->image_count ? e->image_count : 1, sizeof *e->unit_holds));
  for (size_t i = 0; maps && i < e->image_count; i++)
    maps = (e->unit_holds[i] = calloc(e->image[i].chunks / 8 + 1, 1)) != NULL;
  job->unit_left = calloc(units ? units : 1, sizeof *job->unit_left);
  job->saved = malloc((units ? units : 1) * sizeof *job->saved);
  if (!e->unit_first || !e->unit_gone || !maps || !job->unit_left || !job->saved) {
    free_units(job);
    drop_units(e);
    return;
  }
  for (uint64_t k = 0; k < job->chunk_count; k++) {
    struct chunk_ref ref = job->chunks[k];
    for (uint64_t c = ref.chunk; c < ref.chunk + (ref.count > 1 ? ref.count : 1); c++)
      atomic_fetch_add(&job->unit_left[e->unit_first[ref.region] + c / e->unit_chunks], 1);
  }
  for (size_t i = 0; i < e->image_count; i++)
    for (uint64_t u = e->unit_first[i]; u < e->unit_first[i + 1]; u++)
      if (atomic_load(&job->unit_left[u]) == 0)
        job->saved[job->saved_tail++] = (struct saved_unit){(uint32_t)i, (uint32_t)(u - e->unit_first[i])};
  if (!helper_start(&job->releaser, release_saved, job)) {
    free_units(job);
    drop_units(e);
  }
}

static void stop_releasing(struct job *job, struct engine_stats *stats) {
  double copied = ckpt_now();
  if (!helper_stop(&job->releaser, &job->lock)) return;
  free_units(job);
  stats->released_early = job->released_bytes;
  stats->release_driver_seconds = job->release_seconds;
  stats->release_tail_seconds = ckpt_now() - copied;
  char bytes[32];
  ckpt_format_bytes(job->released_bytes, bytes, sizeof bytes);
  ckpt_logf(CKPT_LOG_DEBUG, "checkpoint: %" PRIu64 " ranges (%s) given back while saving: the "
            "releasing thread spent %.1f ms in the driver and ended %.1f ms after the last copy",
            job->released_units, bytes, job->release_seconds * 1e3,
            stats->release_tail_seconds * 1e3);
  if (job->release_error)
    ckpt_logf(CKPT_LOG_DEBUG, "checkpoint: giving device memory back while saving stopped (%s); "
              "the rest goes back at the end", strerror(-job->release_error));
}

/* ---- a restore checked on the device beside its copy (engine_restore) ----
 * Checking every chunk once all had landed took 16-22 ms for 45-60 GiB on the H100, after the
 * copy (2% of a resume). Checked in batches as they land, by one thread whose kernels run beside
 * the copy (the host's hash stream is not the copies' one), only the last batch is left when the
 * copy ends. Nothing runs before the check is done: engine_restore returns after it. */

/* A batch: a sixteenth of the image, from one chunk to 2 GiB (~1 ms on the device at the end).
 * An exchange's resume checks whatever landed at once: its chunks leave the image only once
 * checked, and the other program may be waiting for exactly those pages or that device memory. */
static uint64_t verify_batch(const struct engine *e) {
  if (e->pace) return 1;
  uint64_t batch = e->image_bytes / 16;
  return batch < e->chunk_bytes ? e->chunk_bytes : batch > (2ull << 30) ? 2ull << 30 : batch;
}

static int verify_chunks(struct engine *e, struct chunk_ref *chunks, uint64_t count,
                         struct engine_stats *stats, char *reason, size_t len);

/* `ref` is on the device: queue it for the check, waking the thread once a batch is there. */
static void note_landed(struct job *job, struct chunk_ref ref) {
  pthread_mutex_lock(&job->lock);
  job->landed[job->landed_count++] = ref;
  job->landed_pending += chunk_length(job->engine, ref);
  if (job->landed_pending >= verify_batch(job->engine)) pthread_cond_signal(&job->verifier.cond);
  pthread_mutex_unlock(&job->lock);
}

struct verifier_args {
  struct job *job;
  struct engine_stats *stats;
};

static void *verify_landed(void *arg) {
  struct verifier_args *va = arg;
  struct job *job = va->job;
  struct engine *e = job->engine;
  uint64_t chunks = 1; /* merged copies counted chunk by chunk */
  for (uint64_t k = 0; k < job->chunk_count; k++)
    chunks += job->chunks[k].count > 1 ? job->chunks[k].count : 1;
  struct chunk_ref *batch = malloc(chunks * sizeof *batch);
  char reason[256] = "out of memory for checking the restored chunks";
  int rc = batch ? 0 : -ENOMEM;
  pthread_mutex_lock(&job->lock);
  while (rc == 0) {
    while (!job->verifier.last && job->landed_pending < verify_batch(e))
      pthread_cond_wait(&job->verifier.cond, &job->lock);
    /* After a failure elsewhere an exchange still checks what landed, so that it leaves the
     * image (the other program may wait for it); a plain resume stops. */
    if ((atomic_load(&job->failed) && !job->exchange) || job->checked_count == job->landed_count)
      break;
    uint64_t n = 0, first = job->checked_count; /* merged copies checked chunk by chunk: each */
    for (; job->checked_count < job->landed_count; job->checked_count++) {
      struct chunk_ref ref = job->landed[job->checked_count];
      for (uint32_t c = 0; c < (ref.count > 1 ? ref.count : 1); c++)
        batch[n++] = (struct chunk_ref){ref.region, ref.chunk + c, 0}; /* has its own sum */
    }
    uint64_t last = job->checked_count;
    job->landed_pending = 0;
    pthread_mutex_unlock(&job->lock);
    uint64_t bytes = 0; /* counted first: verify_chunks reorders the batch in place */
    for (uint64_t k = 0; k < n; k++) bytes += chunk_length(e, batch[k]);
    rc = verify_chunks(e, batch, n, va->stats, reason, sizeof reason);
    /* An exchange's chunks leave the image now, checked on the device: until here their pages
     * stayed whole, so a chunk that arrived wrong is copied again by a retry. */
    for (uint64_t k = first; rc == 0 && job->exchange && k < last; k++)
      exchange_done(job, job->landed[k]);
    pthread_mutex_lock(&job->lock);
    if (rc == 0) job->verified_bytes += bytes;
  }
  pthread_mutex_unlock(&job->lock);
  free(batch);
  if (rc) job_fail(job, rc, "%s", reason);
  return NULL;
}

static void start_verifying(struct job *job, struct verifier_args *args) {
  bool on_device = false; /* else each chunk was checked on the host before it went */
  for (size_t i = 0; i < job->engine->image_count; i++) on_device |= job->engine->image[i].device_sums;
  if (!on_device) return;
  if (!(job->landed = malloc((job->chunk_count ? job->chunk_count : 1) * sizeof *job->landed)))
    return;
  if (!helper_start(&job->verifier, verify_landed, args)) {
    free(job->landed);
    job->landed = NULL;
  }
}

/* After the copy threads: the last batch checked (or, after a failure, the thread stopped). */
static void stop_verifying(struct job *job, struct engine_stats *stats) {
  if (!helper_stop(&job->verifier, &job->lock)) return;
  free(job->landed);
  job->landed = NULL;
  stats->verified_in_flight += job->verified_bytes; /* engine_restore_beside runs two jobs */
}

/* ---- a restore making device memory ahead of its copy (engine_restore_beside) ----
 * One range per chunk reference in the copy threads' order (staged and direct interleaved, direct
 * ones merged), made by create_ahead.c's thread; the staging copy of a chunk waits for nothing,
 * only its copy to the device waits for the memory. */

static int start_creating(struct job *job) {
  struct engine *e = job->engine;
  job->ranges = malloc((job->chunk_count ? job->chunk_count : 1) * sizeof *job->ranges);
  if (!job->ranges) return -ENOMEM;
  for (uint64_t k = 0; k < job->chunk_count; k++) {
    struct chunk_ref ref = job->chunks[k];
    job->ranges[k] = (struct create_range){
        e->image[ref.region].region.vaddr + (uint64_t)ref.chunk * e->chunk_bytes,
        chunk_length(e, ref)};
  }
  struct creator *creator = NULL;
  int rc = creator_start(&creator, e->ops, e->ctx, job->ranges, job->chunk_count,
                         e->create_missing);
  if (rc) {
    free(job->ranges);
    job->ranges = NULL;
    return rc;
  }
  pthread_mutex_lock(&job->lock); /* the verifier's job_fail reads it */
  job->creator = creator;
  pthread_mutex_unlock(&job->lock);
  return 0;
}

/* Before the copy of chunk reference `index` to the device: wait until its memory is made. */
static int wait_made(struct worker *w, uint64_t index) {
  struct job *job = w->job;
  int rc = creator_wait(job->creator, index, &w->create_wait);
  if (rc && rc != -ECANCELED) {
    const struct create_range *range = &job->ranges[index];
    job_fail(job, rc, "recreating device memory at 0x%" PRIx64 " (%" PRIu64 " bytes) failed: %s",
             range->vaddr, range->bytes, strerror(-rc));
  } else if (rc) {
    job_fail(job, rc, "making device memory beside the copy stopped");
  }
  return rc;
}

/* After the copy threads (workers: NULL after a failure before they started): the thread joined,
 * its figures and the threads' waits in stats. */
static void stop_creating(struct job *job, const struct worker *workers, int started,
                          struct engine_stats *stats) {
  pthread_mutex_lock(&job->lock);
  struct creator *creator = job->creator;
  job->creator = NULL;
  pthread_mutex_unlock(&job->lock);
  if (!creator) return;
  creator_cancel(creator); /* it made everything already, unless the copy stopped early */
  struct creator_totals totals;
  creator_finish(creator, &totals);
  free(job->ranges);
  job->ranges = NULL;
  stats->created_beside = true;
  stats->create_seconds += totals.driver_seconds;
  for (int t = 0; t < started; t++) stats->create_wait_seconds += workers[t].create_wait / started;
  if (totals.error) {
    stats->create_failed = true;
    stats->create_shortfall = totals.shortfall;
    job_fail(job, totals.error, "recreating device memory at 0x%" PRIx64 " failed: %s",
             totals.failed_at, strerror(-totals.error)); /* kept only if nothing failed first */
  }
}

/* The slot's copy is done (stream synchronized); finish it on the host side. */
static int complete_slot(struct worker *w, struct slot *slot, XXH3_state_t *state) {
  struct job *job = w->job;
  struct engine *e = job->engine;
  struct chunk_ref ref = job->chunks[slot->chunk];
  struct image_region *r = &e->image[ref.region];
  void *stream = stream_of(e, r->region.device, slot->staging);
  slot->chunk = -1;
  double t0 = ckpt_now();
  int rc = e->ops->stream_sync(e->ctx, stream);
  w->times.wait += ckpt_now() - t0;
  uint64_t offset = (uint64_t)ref.chunk * e->chunk_bytes;
  if (rc) {
    job_fail(job, rc, "%s region %" PRIu64 " (device %d) at offset %" PRIu64 ": copy failed (%s)",
             job->save ? "saving" : "restoring", r->region.id, r->region.device, offset,
             strerror(-rc));
    return rc;
  }
  if (job->save && !atomic_load(&job->failed)) {
    size_t n = (size_t)chunk_length(e, ref);
    struct image_filler *filler = r->untouched ? &e->filler : NULL;
    const uint8_t *staging = e->staging[slot->staging];
    if (direct(r, offset, n)) { /* the DMA wrote the image itself */
      if (job->host_sums) r->sums[ref.chunk] = hash_only(state, r->data + offset, n, &w->times);
    } else if (job->host_sums) {
      rc = hash_and_copy(state, filler, r->data + offset, staging, n, &r->sums[ref.chunk],
                         &w->times);
    } else {
      rc = copy_timed(filler, r->data + offset, staging, n, &w->times);
    }
    if (rc) {
      job_fail(job, rc, "saving region %" PRIu64 " at offset %" PRIu64 ": filling the host "
               "image through userfaultfd failed (%s)", r->region.id, offset, strerror(-rc));
      atomic_store(&job->filler_failed, true);
      return rc;
    }
    if (job->live) { /* what arrived, as the device would checksum it (the pause compares) */
      double t = ckpt_now();
      r->sums[ref.chunk] = ckpt_delta_hash(r->data + offset, n);
      w->times.hash += ckpt_now() - t;
    }
  }
  if (job->releaser.running && !atomic_load(&job->failed)) note_saved(job, ref);
  if (job->verifier.running && !atomic_load(&job->failed)) note_landed(job, ref);
  /* A resume checked as it lands hands its chunks over once they are checked (verify_landed). */
  bool checked_later = !job->save && job->verifier.running;
  if (job->exchange && !checked_later && !atomic_load(&job->failed) &&
      (rc = exchange_done(job, ref)) != 0) {
    job_fail(job, rc, "exchange: giving back region %" PRIu64 "'s memory failed (%s)",
             r->region.id, strerror(-rc));
    return rc;
  }
  return 0;
}

/* engine_restore_from's chunk: the source fills staging and verifies it, then the H2D goes. The
 * source is asked first, before anything can fail: a source that hands out chunks in order
 * (zstd files) then sees every chunk that a thread took. */
static int start_from_source(struct worker *w, struct slot *slot, uint64_t index, uint64_t offset,
                             size_t n, void *stream, void *staging) {
  struct job *job = w->job;
  struct engine *e = job->engine;
  struct chunk_ref ref = job->chunks[index];
  const struct image_region *r = &e->image[ref.region];
  char why[224] = "";
  double t0 = ckpt_now();
  int rc = e->source(e->source_arg, ref.region, ref.chunk, staging, n, why, sizeof why);
  w->times.copy += ckpt_now() - t0;
  if (rc) {
    job_fail(job, rc, "%s", why);
    return rc;
  }
  if (!stream) {
    job_fail(job, -ENODEV, "region %" PRIu64 " is on device %d, but only %d devices exist",
             r->region.id, r->region.device, e->devices);
    return -ENODEV;
  }
  w->staged_bytes += n;
  t0 = ckpt_now();
  rc = e->ops->copy_h2d_async(e->ctx, r->region.vaddr + offset, staging, n, stream);
  w->times.issue += ckpt_now() - t0;
  if (rc) {
    job_fail(job, rc, "restoring region %" PRIu64 " (device %d) at offset %" PRIu64 ": %s",
             r->region.id, r->region.device, offset, strerror(-rc));
    return rc;
  }
  slot->chunk = (int64_t)index;
  return 0;
}

/* A chunk of the image does not match its checksum: the restore stops before sending it. */
static int image_corrupt(struct job *job, const struct image_region *r, uint64_t chunk,
                         uint64_t offset, size_t n, uint64_t sum) {
  job_fail(job, -EBADMSG,
           "image corrupt: region %" PRIu64 " (vaddr 0x%" PRIx64 ", device %d) chunk at offset "
           "%" PRIu64 " (%zu bytes): checksum %016" PRIx64 ", saved %016" PRIx64 "; not restored",
           r->region.id, r->region.vaddr, r->region.device, offset, n, sum, r->sums[chunk]);
  return -EBADMSG;
}

/* Start the slot's next chunk: save issues the D2H; restore fills staging, verifies, issues H2D. */
static int start_slot(struct worker *w, struct slot *slot, uint64_t index, XXH3_state_t *state) {
  struct job *job = w->job;
  struct engine *e = job->engine;
  struct chunk_ref ref = job->chunks[index];
  struct image_region *r = &e->image[ref.region];
  uint64_t offset = (uint64_t)ref.chunk * e->chunk_bytes;
  size_t n = (size_t)chunk_length(e, ref);
  void *stream = stream_of(e, r->region.device, slot->staging);
  void *staging = e->staging[slot->staging];
  if (e->source) return start_from_source(w, slot, index, offset, n, stream, staging);
  if (!stream) {
    job_fail(job, -ENODEV, "region %" PRIu64 " is on device %d, but only %d devices exist",
             r->region.id, r->region.device, e->devices);
    return -ENODEV;
  }
  int rc;
  bool straight = direct(r, offset, n);
  if (!straight) w->staged_bytes += n;
  double t0 = ckpt_now();
  if (job->save) {
    rc = straight ? copy_direct(e, r, true, offset, n, stream)
                  : e->ops->copy_d2h_async(e->ctx, staging, r->region.vaddr + offset, n, stream);
    w->times.issue += ckpt_now() - t0;
    if (rc == 0 && r->fresh && !r->untouched && e->prefault && !straight)
      fault_in(r->data + offset, n, &w->times);
  } else if (r->device_sums) { /* checked on the device once restored (verify_restored) */
    if (job->exchange && !job->verifier.running) { /* its pages are freed once it is done */
      double t = ckpt_now();
      uint64_t sum = ckpt_delta_hash(r->data + offset, n);
      w->times.hash += ckpt_now() - t;
      if (sum != r->sums[ref.chunk]) return image_corrupt(job, r, ref.chunk, offset, n, sum);
    }
    if (!straight) copy_timed(NULL, staging, r->data + offset, n, &w->times);
    t0 = ckpt_now();
    rc = straight ? copy_direct(e, r, false, offset, n, stream)
                  : e->ops->copy_h2d_async(e->ctx, r->region.vaddr + offset, staging, n, stream);
    w->times.issue += ckpt_now() - t0;
  } else {
    uint64_t sum;
    if (straight) sum = hash_only(state, r->data + offset, n, &w->times);
    else hash_and_copy(state, NULL, staging, r->data + offset, n, &sum, &w->times);
    if (sum != r->sums[ref.chunk]) return image_corrupt(job, r, ref.chunk, offset, n, sum);
    t0 = ckpt_now();
    rc = straight ? copy_direct(e, r, false, offset, n, stream)
                  : e->ops->copy_h2d_async(e->ctx, r->region.vaddr + offset, staging, n, stream);
    w->times.issue += ckpt_now() - t0;
  }
  if (rc) {
    job_fail(job, rc, "%s region %" PRIu64 " (device %d) at offset %" PRIu64 ": %s",
             job->save ? "saving" : "restoring", r->region.id, r->region.device, offset,
             strerror(-rc));
    return rc;
  }
  slot->chunk = (int64_t)index;
  return 0;
}

/* Create this worker's streams on every device (the staging buffers are pinned already). */
static int worker_setup(struct worker *w) {
  struct job *job = w->job;
  struct engine *e = job->engine;
  double t0 = ckpt_now();
  int first = w->index * e->slots_per_thread, rc = 0;
  if (!e->staging) return 0; /* no device: no chunks either */
  for (int s = first; s < first + e->slots_per_thread && !rc; s++) {
    for (int d = 0; d < e->devices && !rc; d++)
      if ((rc = (job->live ? e->ops->live_stream_create : e->ops->stream_create)(
               e->ctx, d, &e->streams[d * e->slots + s])) != 0)
        job_fail(job, rc, "creating a copy stream on device %d failed: %s", d, strerror(-rc));
  }
  w->setup_seconds = ckpt_now() - t0;
  return rc;
}

/* Destroy this worker's streams (their device resources go back with them). */
static void worker_teardown(struct worker *w) {
  struct engine *e = w->job->engine;
  int first = w->index * e->slots_per_thread;
  for (int d = 0; e->streams && d < e->devices; d++)
    for (int s = first; s < first + e->slots_per_thread; s++) {
      void **stream = &e->streams[d * e->slots + s];
      if (*stream) e->ops->stream_destroy(e->ctx, *stream);
      *stream = NULL;
    }
}

/* How long a thread refused by an exchange's pace waits before it asks again (nanosleep's
 * timer slack adds ~50 us; a dozen threads ask in turn). */
#define ADMIT_POLL_NS (50 * 1000)

/* An exchange's next chunk: taken and admitted in one step under admit_lock, by whichever thread
 * has a slot free, so that no thread ever holds a chunk that waits for its turn. In order,
 * because a save gives back the prefix of each region that is in the image: a chunk admitted
 * past a waiting one would spend the window on bytes that cannot be given back yet, and both
 * sides could wait for ever. While the pace refuses the next chunk, this thread finishes its
 * copies in flight (what they give back may be what the other side waits for) and asks again
 * soon. (Each thread used to take its chunk first and wait for its turn, and a thread not at its
 * turn emptied its slots and slept 200 us: the turns then went from sleeper to sleeper, and the
 * going-out side of a 45 GiB exchange waited 1.3 s of 1.43 s for admission, H200 2026-11-28.)
 * 0 with *index taken, 1 when no chunk is left, -errno after a failure. */
static int take_admitted(struct worker *w, struct slot *slots, int count, uint64_t *index,
                         XXH3_state_t *state) {
  struct job *job = w->job;
  struct engine *e = job->engine;
  for (;;) {
    pthread_mutex_lock(&job->admit_lock);
    uint64_t k = atomic_load(&job->next);
    if (k >= job->chunk_count) {
      pthread_mutex_unlock(&job->admit_lock);
      return 1;
    }
    struct chunk_ref ref = job->chunks[k];
    const struct image_region *r = &e->image[ref.region];
    uint64_t offset = (uint64_t)ref.chunk * e->chunk_bytes, n = chunk_length(e, ref);
    /* Where a save's chunk goes in cudawd's pool: a handover writes only where the other
     * program is done, staged (its range not page-locked yet) or not; an exchange's save takes
     * its chunks in the image's order, which is the pool's (order_for_copy). */
    uint64_t pool_at = job->save && r->in_pool
                           ? (uint64_t)(r->data + offset - reserve_base(e->pool))
                           : UINT64_MAX;
    int rc = exchange_admit(job->exchange, r->region.vaddr + offset, n, pool_at);
    if (rc == 0) atomic_store(&job->next, k + 1);
    pthread_mutex_unlock(&job->admit_lock);
    if (rc == 0) {
      *index = k;
      return 0;
    }
    if (rc != -EAGAIN) {
      if (rc == -EPIPE)
        job_fail(job, rc, "exchange: the other program's %s failed, so the %s this one still "
                 "needs stays in use", job->save ? "resume" : "checkpoint",
                 job->save ? "host memory of its image" : "device memory");
      else if (job->save)
        job_fail(job, rc, "exchange: region %" PRIu64 "'s image has no place in cudawd's pool "
                 "that the other program is done with (%s)", r->region.id, strerror(-rc));
      else
        job_fail(job, rc, "exchange: making device memory for region %" PRIu64 " failed (%s)",
                 r->region.id, strerror(-rc));
      return rc;
    }
    double refused = ckpt_now();
    for (int i = 0; i < count; i++)
      if (slots[i].chunk >= 0 && complete_slot(w, &slots[i], state) != 0) return -EIO;
    if (atomic_load(&job->failed)) return -ECANCELED;
    struct timespec pause = {0, ADMIT_POLL_NS};
    nanosleep(&pause, NULL);
    w->times.admit += ckpt_now() - refused;
  }
}

static void *run_worker(void *arg) {
  struct worker *w = arg;
  struct job *job = w->job;
  struct engine *e = job->engine;
  struct slot slots[64];
  int count = e->slots_per_thread;
  for (int i = 0; i < count; i++) slots[i] = (struct slot){w->index * count + i, -1};
  XXH3_state_t *state = XXH3_createState();
  if (!state) {
    job_fail(job, -ENOMEM, "out of memory for a checksum state");
    return NULL;
  }
  if (worker_setup(w) != 0) goto out;
  /* Round robin over the slots: the oldest copy is waited for while the others run. */
  for (int turn = 0;; turn = (turn + 1) % count) {
    struct slot *slot = &slots[turn];
    if (slot->chunk >= 0 && complete_slot(w, slot, state) != 0) break;
    if (atomic_load(&job->failed)) break;
    if (job->live && atomic_load(&e->precopy_cancel)) {
      job_fail(job, -ECANCELED, "the live checkpoint's copy was cancelled");
      break;
    }
    uint64_t index;
    if (job->exchange) {
      if (take_admitted(w, slots, count, &index, state) != 0) break;
    } else if ((index = atomic_fetch_add(&job->next, 1)) >= job->chunk_count) {
      break;
    }
    if (job->creator && wait_made(w, index) != 0) break;
    if (start_slot(w, slot, index, state) != 0) break;
  }
  /* Finish (or, after a failure, at least wait for) what is still in flight. */
  for (int i = 0; i < count; i++)
    if (slots[i].chunk >= 0) complete_slot(w, &slots[i], state);
out:
  worker_teardown(w);
  XXH3_freeState(state);
  return NULL;
}

/* Which of list_chunks' interleaved lanes a region's chunks go to (a bad device number fails
 * in start_slot, from lane 0). */
static int lane(const struct image_region *r) { return r->region.device > 0 ? r->region.device : 0; }

/* Every chunk of the image, the devices' chunks interleaved: the copy threads take chunks in this
 * order, and each device has its own copy engine and link, so that several devices copy at once
 * instead of one after the other. Within a device, in image order. */
static struct chunk_ref *list_chunks(const struct engine *e, uint64_t *count) {
  uint64_t total = 0;
  int devices = 1;
  for (size_t i = 0; i < e->image_count; i++) {
    total += e->image[i].chunks;
    if (lane(&e->image[i]) + 1 > devices) devices = lane(&e->image[i]) + 1;
  }
  struct chunk_ref *chunks = malloc((total ? total : 1) * sizeof *chunks);
  /* A cursor per device: its region and chunk. */
  struct cursor { size_t region; uint64_t chunk; } *at = calloc((size_t)devices, sizeof *at);
  *count = 0;
  if (!chunks || !at) {
    free(chunks);
    free(at);
    return NULL;
  }
  while (*count < total)
    for (int d = 0; d < devices; d++) {
      struct cursor *c = &at[d];
      while (c->region < e->image_count &&
             (lane(&e->image[c->region]) != d || c->chunk >= e->image[c->region].chunks)) {
        c->region++;
        c->chunk = 0;
      }
      if (c->region < e->image_count)
        chunks[(*count)++] = (struct chunk_ref){(uint32_t)c->region, (uint32_t)c->chunk++, 0};
    }
  free(at);
  return chunks;
}


/* Direct copies of up to this many bytes go as one: a copy of one 4 MiB chunk costs the link
 * a gap at each end, ~8% of a resume on the H100 (0.92x of H2D in 4 MiB copies, 2026-11-27). */
#define BATCH_BYTES (64ull << 20)

/* The order the copy threads take `chunks` in (a copy; the caller's list keeps its order): the
 * staged chunks and the direct ones interleaved in proportion to their bytes, so that the host
 * work of the staged ones (faulting fresh pages in, copying through staging) runs while the DMA
 * of the direct ones keeps the link busy, from the first chunk to the last. (Staged chunks first,
 * as before, left the link half idle while every thread staged: a 45 GiB checkpoint with 14 GiB
 * staged took 1.18 s on the H100 where the link alone needs 0.91 s.) Consecutive direct chunks
 * of a region are merged into one copy where nothing is done per chunk on the host (saved or
 * verified with device checksums). NULL when out of memory. */
static struct chunk_ref *order_for_copy(const struct engine *e, const struct chunk_ref *chunks,
                                        uint64_t *count, bool save, bool host_sums, bool live) {
  size_t size = (*count ? *count : 1) * sizeof(struct chunk_ref);
  struct chunk_ref *list[2] = {malloc(size), malloc(size)}, *work = malloc(size);
  if (!list[0] || !list[1] || !work) {
    free(list[0]);
    free(list[1]);
    free(work);
    return NULL;
  }
  uint64_t n[2] = {0, 0}, bytes[2] = {0, 0}, batch = BATCH_BYTES / e->chunk_bytes;
  for (uint64_t k = 0; k < *count; k++) { /* list[0]: staged, list[1]: direct */
    struct chunk_ref ref = chunks[k];
    const struct image_region *r = &e->image[ref.region];
    uint64_t offset = (uint64_t)ref.chunk * e->chunk_bytes, length = chunk_length(e, ref);
    int straight = direct(r, offset, (size_t)length);
    bytes[straight] += length;
    /* An exchange goes chunk by chunk: its pace admits one at a time, and a batch larger than
     * the window would never be admitted; its resume checks and frees each chunk. */
    bool quiet = straight && !live && !e->pace && (save ? !host_sums : r->device_sums);
    struct chunk_ref *last = n[straight] ? &list[straight][n[straight] - 1] : NULL;
    if (quiet && last && last->region == ref.region && last->count >= 1 &&
        last->chunk + last->count == ref.chunk && last->count < batch) {
      last->count++;
      continue;
    }
    ref.count = quiet ? 1 : 0;
    list[straight][n[straight]++] = ref;
  }
  /* An exchange's save keeps the image's order: its pace admits chunks strictly in the order
   * given, a handover writes each where the other program is done with the pool (in the pool's
   * order, whether the chunk is staged or not), and it gives back each region's prefix. */
  if (e->pace && save) {
    memcpy(work, chunks, (size_t)*count * sizeof *work);
    free(list[0]);
    free(list[1]);
    return work;
  }
  /* Take from the list that is behind: done[i] / bytes[i] compared as done[0] * bytes[1] against
   * done[1] * bytes[0] (in MiB, so that the products stay far from overflowing). */
  uint64_t taken[2] = {0, 0}, done[2] = {0, 0}, out = 0;
  while (taken[0] < n[0] || taken[1] < n[1]) {
    /* An exchange's pace admits chunks strictly in the order given: staged, then direct. */
    int pick = e->pace && taken[0] < n[0] ? 0
               : taken[0] == n[0]   ? 1
               : taken[1] == n[1] ? 0
               : (done[0] >> 20) * (bytes[1] >> 20) <= (done[1] >> 20) * (bytes[0] >> 20) ? 0
                                                                                          : 1;
    struct chunk_ref ref = list[pick][taken[pick]++];
    done[pick] += chunk_length(e, ref);
    work[out++] = ref;
  }
  free(list[0]);
  free(list[1]);
  *count = out;
  return work;
}

/* An exchange's chunk map before its copy. A save: the chunks it will not copy (unchanged since
 * the kept image) hold already, the others not yet. A resume: kept as it is (NULL: all hold). */
static int prepare_holds(struct engine *e, bool save, const struct chunk_ref *chunks,
                         uint64_t count) {
  for (size_t i = 0; i < e->image_count; i++) {
    struct image_region *r = &e->image[i];
    bool fresh = !r->holds;
    if (fresh && !(r->holds = malloc(r->chunks / 8 + 1))) return -ENOMEM;
    if (save || fresh) memset(r->holds, 0xff, r->chunks / 8 + 1);
    r->held_prefix = 0; /* a resume: the chunks from the start already on the device */
  }
  for (uint64_t k = 0; save && k < count; k++)
    for (uint32_t c = 0; c < (chunks[k].count > 1 ? chunks[k].count : 1); c++)
      set_holds(&e->image[chunks[k].region], chunks[k].chunk + c, false);
  return 0;
}

/* Copy `count` chunks (save: device -> image; restore: image -> device) with the copy threads. */
static int run_job(struct engine *e, bool save, bool host_sums, bool live, struct chunk_ref *chunks,
                   uint64_t count, struct engine_stats *stats, char *reason, size_t len) {
  if (e->pace && prepare_holds(e, save, chunks, count) != 0) {
    snprintf(reason, len, "out of memory for the exchange's chunk map");
    return -ENOMEM;
  }
  int rc = engine_prepare(e);
  if (rc == 0 && count > 0 && e->devices == 0) rc = -ENODEV;
  if (rc) {
    snprintf(reason, len, "preparing the copy engine failed: %s", strerror(-rc));
    return rc;
  }
  /* A restore from disk (e->source) reads in the list's order: kept as it is. */
  struct chunk_ref *work = e->source ? NULL
                                     : order_for_copy(e, chunks, &count, save, host_sums, live);
  if (!e->source && !work) {
    snprintf(reason, len, "out of memory for the chunk list");
    return -ENOMEM;
  }
  struct job job = {.engine = e, .save = save, .host_sums = host_sums, .live = live,
                    .chunks = work ? work : chunks, .chunk_count = count};
  if (e->pace && !(job.exchange = exchange_run_new(e->ops, e->ctx, e->pace, save))) {
    free(work);
    snprintf(reason, len, "out of memory for the exchange");
    return -ENOMEM;
  }
  pthread_mutex_init(&job.lock, NULL);
  pthread_mutex_init(&job.admit_lock, NULL);
  if (save && !live && !e->pace && e->release_as_saved) start_releasing(&job);
  struct verifier_args verifier = {&job, stats};
  if (!save && !e->source && e->verify_in_flight && e->ops->device_hash)
    start_verifying(&job, &verifier);
  struct worker *workers = calloc((size_t)e->threads, sizeof *workers);
  if (!workers) {
    rc = -ENOMEM;
    snprintf(reason, len, "out of memory for the copy threads");
    goto out;
  }
  if (!save && e->create_beside && (rc = start_creating(&job)) != 0) {
    snprintf(reason, len, "starting to make device memory beside the copy failed: %s",
             strerror(-rc));
    goto out;
  }

  /* Worker 0 runs on this thread; if a thread cannot start, its slots stay unused. */
  int started = 1;
  for (int t = 0; t < e->threads; t++) workers[t] = (struct worker){.job = &job, .index = t};
  for (int t = 1; t < e->threads; t++) {
    if (pthread_create(&workers[t].thread, NULL, run_worker, &workers[t]) != 0) break;
    started++;
  }
  run_worker(&workers[0]);
  for (int t = 1; t < started; t++) pthread_join(workers[t].thread, NULL);
  stop_creating(&job, workers, started, stats);
  stop_releasing(&job, stats);
  double copied = ckpt_now();
  stop_verifying(&job, stats);
  stats->verify_tail_seconds += job.chunk_count ? ckpt_now() - copied : 0;
  for (int t = 0; t < started; t++) {
    if (workers[t].setup_seconds > stats->setup_seconds) stats->setup_seconds = workers[t].setup_seconds;
    stats->times.wait += workers[t].times.wait / started;
    stats->times.copy += workers[t].times.copy / started;
    stats->times.hash += workers[t].times.hash / started;
    stats->times.fault += workers[t].times.fault / started;
    stats->times.issue += workers[t].times.issue / started;
    stats->times.admit += workers[t].times.admit / started;
    stats->staged_bytes += workers[t].staged_bytes;
  }
  stats->threads = started;
  if (atomic_load(&job.filler_failed)) e->fill = false;
  if (job.error) {
    rc = job.error;
    snprintf(reason, len, "%s", job.reason);
  } else {
    stats->bytes = e->image_bytes;
    stats->regions = e->image_count;
  }
out:
  stop_creating(&job, NULL, 0, stats); /* no-ops if stopped above */
  stop_releasing(&job, stats);
  stop_verifying(&job, stats);
  if (job.exchange) exchange_totals(job.exchange, &stats->exchange_moved, &stats->exchange_given);
  exchange_run_free(job.exchange);
  free(workers);
  free(work);
  pthread_mutex_destroy(&job.lock);
  pthread_mutex_destroy(&job.admit_lock);
  return rc;
}

/* ---- checksums on the device (delta checkpoints, verification at resume) ---- */

/* sums[k] = ckpt_delta_hash of chunks[k] on the device, one host call per device. */
static int device_checksums(struct engine *e, const struct chunk_ref *chunks, uint64_t count,
                            uint64_t *sums, struct engine_stats *stats) {
  if (!e->ops->device_hash || e->chunk_bytes % 8) return -ENOSYS;
  double t0 = ckpt_now();
  struct ckpt_delta_piece *pieces = malloc((count ? count : 1) * sizeof *pieces);
  uint64_t *where = malloc((count ? count : 1) * sizeof *where);
  uint64_t *found = malloc((count ? count : 1) * sizeof *found);
  int rc = pieces && where && found ? 0 : -ENOMEM;
  for (int d = 0; rc == 0 && d < e->devices; d++) {
    size_t n = 0;
    for (uint64_t k = 0; k < count; k++) {
      const struct image_region *r = &e->image[chunks[k].region];
      if (r->region.device != d) continue;
      pieces[n] = (struct ckpt_delta_piece){
          r->region.vaddr + (uint64_t)chunks[k].chunk * e->chunk_bytes, chunk_length(e, chunks[k])};
      where[n++] = k;
    }
    if (n && (rc = e->ops->device_hash(e->ctx, d, pieces, n, found)) == 0)
      for (size_t i = 0; i < n; i++) sums[where[i]] = found[i];
  }
  free(pieces);
  free(where);
  free(found);
  stats->device_hash_seconds += ckpt_now() - t0;
  return rc;
}

/* Save: checksum every chunk on the device, then copy only those that changed since the kept
 * image (a fresh region copies all). On success the regions' sums are the device's. */
static int save_delta(struct engine *e, struct chunk_ref *chunks, uint64_t count, uint64_t *sums,
                      struct engine_stats *stats, char *reason, size_t len) {
  uint64_t changed = 0;
  for (uint64_t k = 0; k < count; k++) {
    const struct image_region *r = &e->image[chunks[k].region];
    if (r->fresh || !r->device_sums || r->sums[chunks[k].chunk] != sums[k]) {
      chunks[changed] = chunks[k];
      sums[changed++] = sums[k];
    } else {
      stats->unchanged_bytes += chunk_length(e, chunks[k]);
    }
  }
  /* Until the copy succeeds the regions' sums describe nothing: mark them host (not reusable). */
  for (size_t i = 0; i < e->image_count; i++)
    if (e->image[i].fresh) e->image[i].device_sums = false;
  int rc = run_job(e, true, false, false, chunks, changed, stats, reason, len);
  if (rc && !stats->exchange_given) {
    /* Units that went back while saving are wholly in the image: with their sums, to be put
     * back (put_back_released). */
    for (uint64_t k = 0; k < changed; k++)
      if (chunk_gone(e, chunks[k].region, chunks[k].chunk))
        e->image[chunks[k].region].sums[chunks[k].chunk] = sums[k];
    for (size_t i = 0; i < e->image_count; i++)
      if (region_gone(e, i)) e->image[i].device_sums = true;
    return rc;
  }
  /* An exchange that stopped keeps what its image holds, to be restored: with its sums. */
  for (uint64_t k = 0; k < changed; k++) {
    struct image_region *r = &e->image[chunks[k].region];
    bool arrived = rc == 0 || holds(r, chunks[k].chunk);
    r->sums[chunks[k].chunk] = arrived ? sums[k] : ~sums[k]; /* else never matches: copied again */
  }
  for (size_t i = 0; i < e->image_count; i++) e->image[i].device_sums = true;
  return rc;
}

/* Restore's check for regions with device sums: checksum what arrived on the device (on the
 * host from the image where the device cannot). */
/* Keep the chunks whose bytes the image holds (an exchange may have moved the others to the
 * device already); the new count. */
static uint64_t only_held(const struct engine *e, struct chunk_ref *chunks, uint64_t count) {
  uint64_t kept = 0;
  for (uint64_t k = 0; k < count; k++)
    if (holds(&e->image[chunks[k].region], chunks[k].chunk)) chunks[kept++] = chunks[k];
  return kept;
}

/* The check of `chunks` (reordered in place) once restored. */
static int verify_chunks(struct engine *e, struct chunk_ref *chunks, uint64_t count,
                         struct engine_stats *stats, char *reason, size_t len) {
  uint64_t *sums = malloc((count ? count : 1) * sizeof *sums);
  if (!sums) {
    snprintf(reason, len, "out of memory for verifying the restored chunks");
    return -ENOMEM;
  }
  uint64_t kept = 0;
  for (uint64_t k = 0; k < count; k++)
    if (e->image[chunks[k].region].device_sums) chunks[kept++] = chunks[k];
  bool on_device = kept == 0 || device_checksums(e, chunks, kept, sums, stats) == 0;
  int rc = 0;
  for (uint64_t k = 0; k < kept && rc == 0; k++) {
    const struct image_region *r = &e->image[chunks[k].region];
    uint64_t offset = (uint64_t)chunks[k].chunk * e->chunk_bytes, n = chunk_length(e, chunks[k]);
    uint64_t sum = on_device ? sums[k] : ckpt_delta_hash(r->data + offset, n);
    if (sum != r->sums[chunks[k].chunk]) {
      rc = -EBADMSG;
      snprintf(reason, len,
               "image corrupt: region %" PRIu64 " (vaddr 0x%" PRIx64 ", device %d) chunk at offset "
               "%" PRIu64 " (%" PRIu64 " bytes): checksum %016" PRIx64 " %s, saved %016" PRIx64
               "; not restored",
               r->region.id, r->region.vaddr, r->region.device, offset, n, sum,
               on_device ? "on the device" : "in the image", r->sums[chunks[k].chunk]);
    }
  }
  free(sums);
  return rc;
}

static int verify_restored(struct engine *e, struct engine_stats *stats, char *reason, size_t len) {
  uint64_t count = 0;
  struct chunk_ref *chunks = list_chunks(e, &count);
  if (!chunks) {
    snprintf(reason, len, "out of memory for verifying the restored chunks");
    return -ENOMEM;
  }
  int rc = verify_chunks(e, chunks, only_held(e, chunks, count), stats, reason, len);
  free(chunks);
  return rc;
}

/* A save failed after giving back the memory of regions it had wholly saved: create that memory
 * again and copy those regions back from the image, checked, so that the program continues as if
 * the checkpoint had not begun. If that fails too, the image is all that holds them: its chunk
 * map says so (a resume restores just those) and stats->given_back says how much. */
static void put_back_released(struct engine *e, struct engine_stats *stats) {
  uint64_t count = 0, kept = 0;
  struct chunk_ref *chunks = list_chunks(e, &count);
  char why[256] = "out of memory for the chunk list";
  int rc = chunks ? 0 : -ENOMEM;
  for (size_t i = 0; rc == 0 && i < e->image_count; i++) {
    const struct image_region *r = &e->image[i];
    uint64_t made;
    if (region_gone(e, i) && (rc = e->ops->recreate_range(e->ctx, r->region.vaddr, r->region.size,
                                                    &made)) != 0)
      snprintf(why, sizeof why, "re-creating region %" PRIu64 " failed: %s", r->region.id,
               strerror(-rc));
  }
  for (uint64_t k = 0; rc == 0 && k < count; k++)
    if (chunk_gone(e, chunks[k].region, chunks[k].chunk)) chunks[kept++] = chunks[k];
  struct engine_stats again = {0};
  if (rc == 0) rc = run_job(e, false, false, false, chunks, kept, &again, why, sizeof why);
  if (rc == 0) rc = verify_chunks(e, chunks, kept, &again, why, sizeof why);
  free(chunks);
  for (size_t i = 0; i < e->image_count; i++) {
    struct image_region *r = &e->image[i];
    if (!rc) continue;
    free(r->holds); /* the image keeps exactly the units that went back (map made up front) */
    r->holds = e->unit_holds[i];
    e->unit_holds[i] = NULL;
    for (uint64_t c = 0; c < r->chunks; c++) {
      if (!chunk_gone(e, i, c)) continue;
      set_holds(r, c, true);
      stats->given_back += chunk_length(e, (struct chunk_ref){(uint32_t)i, (uint32_t)c, 0});
    }
  }
  if (rc)
    ckpt_logf(CKPT_LOG_ERROR, "checkpoint: putting back the device memory given back while "
              "saving failed (%s); the image holds %" PRIu64 " bytes of it, the program stays "
              "paused", why, stats->given_back);
}

/* The bytes of r that went straight between the device and the image: its chunks wholly in the
 * page-locked part (direct()). A chunk across that part's end was staged whole; counted by the
 * page-locked bytes, its page-locked share counted twice (e2e_stress_translate, now and then:
 * the reserve's ready part ended 1 MiB into a chunk). */
static uint64_t direct_bytes(const struct engine *e, const struct image_region *r) {
  uint64_t registered = image_direct_bytes(r);
  return registered == r->region.size ? registered : registered / e->chunk_bytes * e->chunk_bytes;
}

/* A saved region's share of the result: filled by the kernel, straight into the pool or the
 * reserve, and (the pool) all its bytes in the range lent, staged or not. */
static void count_placement(const struct engine *e, const struct image_region *r,
                            struct engine_stats *stats) {
  if (r->untouched) stats->filled_bytes += r->region.size;
  if (r->in_pool) {
    stats->pool_bytes += direct_bytes(e, r);
    stats->pool_image_bytes += r->region.size;
  } else if (r->in_reserve) {
    stats->reserve_bytes += direct_bytes(e, r);
  }
}

int engine_save(struct engine *e, struct engine_stats *stats, char *reason, size_t len) {
  struct region_list list = {0};
  *stats = (struct engine_stats){0};
  engine_stop_registering(e);
  double t0 = ckpt_now();
  int rc = e->ops->for_each_region(e->ctx, image_collect_region, &list);
  if (rc) {
    snprintf(reason, len, "listing device memory regions failed: %s", strerror(-rc));
  } else if ((rc = image_build(e, &list, true, reason, len)) == 0) {
    stats->image_seconds = ckpt_now() - t0;
    for (size_t i = 0; i < e->image_count && !rc; i++)
      if (e->image[i].chunks > UINT32_MAX || e->image_count > UINT32_MAX) {
        snprintf(reason, len, "region %" PRIu64 " has too many chunks", e->image[i].region.id);
        rc = -E2BIG;
      }
    uint64_t count = 0;
    struct chunk_ref *chunks = rc ? NULL : list_chunks(e, &count);
    uint64_t *sums = chunks ? malloc((count ? count : 1) * sizeof *sums) : NULL;
    if (!rc && !sums) {
      snprintf(reason, len, "out of memory for the chunk list");
      rc = -ENOMEM;
    }
    if (!rc && (rc = engine_prepare(e)) != 0)
      snprintf(reason, len, "preparing the copy engine failed: %s", strerror(-rc));
    if (!rc) {
      /* Checksums on the device, one pass at its memory bandwidth (~20 ms for 45 GiB on the
       * H100), so that neither side's copy spends host memory bandwidth on hashing: the host's
       * XXH3 while copying held a 45 GiB resume to 0.85x of H2D (16 threads hashed 0.8 s each
       * beside the DMA, H100 2026-11-27), and the resume now checks what arrived on the device
       * instead. The price: loading cudaw's kernel leaves ~4 MiB of code memory in the context
       * (measured on the H100), which the paused program holds. Where the device cannot, the
       * host checksums as it copies. */
      int hashed = device_checksums(e, chunks, count, sums, stats);
      if (hashed == 0) {
        rc = save_delta(e, chunks, count, sums, stats, reason, len);
      } else {
        if (hashed != -ENOSYS && !e->device_hash_warned) {
          ckpt_logf(CKPT_LOG_WARN, "checkpoint: checksums on the device failed (%s); checksumming "
                    "on the host and copying every chunk", strerror(-hashed));
          e->device_hash_warned = true;
        }
        for (size_t i = 0; i < e->image_count; i++) e->image[i].device_sums = false;
        rc = run_job(e, true, true, false, chunks, count, stats, reason, len);
      }
    }
    free(chunks);
    free(sums);
    for (size_t i = 0; rc == 0 && i < e->image_count; i++) count_placement(e, &e->image[i], stats);
    image_stop_filling(e);
    for (size_t i = 0; i < e->image_count; i++) e->image[i].fresh = false;
    if (rc && stats->released_early) put_back_released(e, stats);
    drop_units(e);
  }
  free(list.items);
  /* Half an image is worth nothing, unless device memory went back with it: then it holds the
   * only copy of what its map says. */
  if (rc && !stats->exchange_given && !stats->given_back) engine_drop_image(e);
  return rc;
}

/* Whether the host can move this program's memory piece by piece (not under translate). */
static bool moves_pieces(struct engine *e) {
  uint64_t missing;
  return e->ops->release_range && e->ops->recreate_range && e->ops->range_missing &&
         e->ops->range_missing(e->ctx, 0, 0, &missing) != -ENOSYS;
}

void engine_release_as_saved(struct engine *e, bool on) {
  e->release_as_saved = on && moves_pieces(e);
}

void engine_cancel_precopy(struct engine *e, bool cancel) {
  atomic_store(&e->precopy_cancel, cancel);
}

int engine_precopy(struct engine *e, struct engine_stats *stats, char *reason, size_t len) {
  const struct ckpt_host_ops *ops = e->ops;
  *stats = (struct engine_stats){0};
  /* Without checksums on the device the pause could not tell what changed since. */
  if (!ops->live_begin || !ops->live_end || !ops->live_stream_create || !ops->device_hash ||
      e->chunk_bytes % 8) {
    snprintf(reason, len, "the host offers no live copies or no checksums on the device");
    return -ENOSYS;
  }
  engine_stop_registering(e);
  struct region_list list = {0};
  double t0 = ckpt_now();
  int rc = ops->live_begin(e->ctx, image_collect_region, &list);
  if (rc) {
    free(list.items);
    snprintf(reason, len, "listing device memory regions failed: %s", strerror(-rc));
    return rc;
  }
  uint64_t count = 0;
  struct chunk_ref *chunks = NULL;
  if ((rc = image_build(e, &list, true, reason, len)) == 0) {
    stats->image_seconds = ckpt_now() - t0;
    for (size_t i = 0; i < e->image_count && !rc; i++)
      if (e->image[i].chunks > UINT32_MAX || e->image_count > UINT32_MAX) {
        snprintf(reason, len, "region %" PRIu64 " has too many chunks", e->image[i].region.id);
        rc = -E2BIG;
      }
    if (!rc && !(chunks = list_chunks(e, &count))) {
      snprintf(reason, len, "out of memory for the chunk list");
      rc = -ENOMEM;
    }
  }
  /* Until every chunk has arrived the sums describe nothing: not reusable by the pause. */
  for (size_t i = 0; i < e->image_count; i++) e->image[i].device_sums = false;
  if (!rc) rc = run_job(e, true, false, true, chunks, count, stats, reason, len);
  /* Cancelled because the program ends: its runtime may fail the copies first; say why. */
  if (rc && atomic_load(&e->precopy_cancel)) rc = -ECANCELED;
  free(chunks);
  free(list.items);
  for (size_t i = 0; rc == 0 && i < e->image_count; i++) {
    count_placement(e, &e->image[i], stats);
    e->image[i].device_sums = true; /* ckpt_delta_hash of the image: the pause compares */
  }
  image_stop_filling(e);
  for (size_t i = 0; i < e->image_count; i++) e->image[i].fresh = false;
  if (rc) {
    engine_drop_image(e);
    ops->live_end(e->ctx);
  }
  return rc;
}

/* A region whose memory the range operations make: it lacks some now (NOT_ASKED: no chunk of it
 * is copied; 0: its memory is the program's own mapping, or there already). */
#define NOT_ASKED UINT64_MAX
static bool ranged(uint64_t lacks) { return lacks != NOT_ASKED && lacks > 0; }

/* What the ranged regions lack, per device, against the device's free memory (ops->device_free):
 * a resume that cannot fit fails before it makes anything, with the shortfall recreate_all
 * would report. Without device_free, or where it fails, making memory finds out midway. */
static int check_fits(struct engine *e, const uint64_t *lacks, struct engine_stats *stats) {
  if (!e->ops->device_free) return 0;
  int devices = 0;
  for (size_t i = 0; i < e->image_count; i++)
    if (ranged(lacks[i]) && lane(&e->image[i]) + 1 > devices) devices = lane(&e->image[i]) + 1;
  uint64_t *need = calloc(devices ? (size_t)devices : 1, sizeof *need);
  if (!need) return 0;
  for (size_t i = 0; i < e->image_count; i++)
    if (ranged(lacks[i])) need[lane(&e->image[i])] += lacks[i];
  uint64_t shortfall = 0, free_bytes;
  for (int d = 0; d < devices; d++)
    if (need[d] && e->ops->device_free(e->ctx, d, &free_bytes) == 0 && free_bytes < need[d])
      shortfall += need[d] - free_bytes;
  free(need);
  if (!shortfall) return 0;
  stats->create_failed = true;
  stats->create_shortfall = shortfall;
  return -ENOMEM;
}

/* engine_restore_beside's copy of `chunks` (held, in list order; reordered in place): first
 * the contexts (ops->restore_context, where the host has it); then the chunks of regions whose
 * memory the range operations make, with that memory made beside the copy; then
 * ops->recreate_all for the rest (memory the program maps itself, which the range operations
 * do not know, and the stacks where restore_context did not set them back), and the rest's
 * chunks. recreate_all runs only once no copy is in flight: on error it gives back what it
 * holds, vmem's memory too. */
static int restore_beside(struct engine *e, struct chunk_ref *chunks, uint64_t count,
                          struct engine_stats *stats, char *reason, size_t len) {
  uint64_t *lacks = malloc((e->image_count ? e->image_count : 1) * sizeof *lacks);
  struct chunk_ref *rest = malloc((count ? count : 1) * sizeof *rest);
  if (!lacks || !rest) {
    free(lacks);
    free(rest);
    snprintf(reason, len, "out of memory for the chunk list");
    return -ENOMEM;
  }
  for (size_t i = 0; i < e->image_count; i++) lacks[i] = NOT_ASKED;
  uint64_t missing = 0, first = 0;
  int rc = 0;
  /* The contexts first (their stacks: what the driver reserves counts in the free memory that
   * check_fits sees), while nothing else is in flight. */
  if (e->ops->restore_context) {
    double t0 = ckpt_now();
    rc = e->ops->restore_context(e->ctx);
    stats->create_seconds += ckpt_now() - t0;
    if (rc) {
      stats->create_failed = true;
      snprintf(reason, len, "the contexts' stack memory could not be set back: %s",
               strerror(-rc));
      free(lacks);
      free(rest);
      return rc;
    }
  }
  for (uint64_t k = 0; k < count && rc == 0; k++) {
    const struct image_region *r = &e->image[chunks[k].region];
    if (lacks[chunks[k].region] != NOT_ASKED) continue;
    rc = e->ops->range_missing(e->ctx, r->region.vaddr, r->region.size, &lacks[chunks[k].region]);
    missing += rc ? 0 : lacks[chunks[k].region];
  }
  if (rc)
    snprintf(reason, len, "asking which device memory is missing failed: %s", strerror(-rc));
  else if ((rc = check_fits(e, lacks, stats)) != 0)
    snprintf(reason, len, "recreating device memory failed: %s", strerror(-rc));
  if (rc) {
    free(lacks);
    free(rest);
    return rc;
  }
  /* The ranged chunks first, each group in its order (a stable partition). */
  uint64_t rest_count = 0;
  for (uint64_t k = 0; k < count; k++) {
    if (ranged(lacks[chunks[k].region])) chunks[first++] = chunks[k];
    else rest[rest_count++] = chunks[k];
  }
  memcpy(chunks + first, rest, rest_count * sizeof *rest);
  free(rest);
  free(lacks);
  stats->created_beside = true;
  if (first > 0) {
    e->create_beside = true;
    e->create_missing = missing;
    rc = run_job(e, false, false, false, chunks, first, stats, reason, len);
    e->create_beside = false;
    if (rc) return rc;
  }
  uint64_t shortfall = 0;
  double t0 = ckpt_now();
  rc = e->ops->recreate_all(e->ctx, &shortfall);
  stats->create_seconds += ckpt_now() - t0;
  if (rc) {
    stats->create_failed = true;
    stats->create_shortfall = shortfall;
    snprintf(reason, len, "recreating device memory failed: %s", strerror(-rc));
    return rc;
  }
  if (rest_count > 0 &&
      (rc = run_job(e, false, false, false, chunks + first, rest_count, stats, reason, len)) != 0)
    return rc;
  stats->bytes = e->image_bytes;
  stats->regions = e->image_count;
  return 0;
}

/* Copy the held chunks back; with beside, make their memory as the copy goes (see
 * engine_restore_beside). */
static int restore(struct engine *e, bool beside, struct engine_stats *stats, char *reason,
                   size_t len) {
  *stats = (struct engine_stats){0};
  engine_stop_registering(e);
  image_note_registered(e);
  uint64_t count = 0;
  struct chunk_ref *chunks = list_chunks(e, &count);
  if (!chunks) {
    snprintf(reason, len, "out of memory for the chunk list");
    return -ENOMEM;
  }
  count = only_held(e, chunks, count);
  uint64_t held = 0;
  for (uint64_t k = 0; k < count; k++) held += chunk_length(e, chunks[k]);
  e->verify_in_flight = true;
  int rc = beside ? restore_beside(e, chunks, count, stats, reason, len)
                  : run_job(e, false, false, false, chunks, count, stats, reason, len);
  e->verify_in_flight = false;
  free(chunks);
  /* A creating resume checked each chunk as it landed, or before it sent it, and freed it after;
   * a plain one checked as they landed is done too, unless some batch could not be (then all
   * are checked here). */
  if (rc == 0 && !e->pace && stats->verified_in_flight < held)
    rc = verify_restored(e, stats, reason, len);
  for (size_t i = 0; rc == 0 && i < e->image_count; i++) { /* the device holds it all again */
    free(e->image[i].holds);
    e->image[i].holds = NULL;
  }
  return rc;
}

int engine_restore(struct engine *e, struct engine_stats *stats, char *reason, size_t len) {
  return restore(e, false, stats, reason, len);
}

bool engine_creates_beside(struct engine *e) {
  return moves_pieces(e) && !e->pace && !e->source;
}

int engine_restore_beside(struct engine *e, struct engine_stats *stats, char *reason, size_t len) {
  if (!engine_creates_beside(e)) {
    *stats = (struct engine_stats){0};
    snprintf(reason, len, "this program's memory cannot be made piece by piece");
    return -ENOSYS;
  }
  return restore(e, true, stats, reason, len);
}

/* engine_save or engine_restore with an exchange's pace. */
static int exchange_copy(struct engine *e, const struct engine_pace *pace, bool save,
                         struct engine_stats *stats, char *reason, size_t len) {
  if (!moves_pieces(e)) {
    *stats = (struct engine_stats){0};
    snprintf(reason, len, "this program's memory cannot be moved piece by piece");
    return -ENOSYS;
  }
  e->pace = pace;
  int rc = save ? engine_save(e, stats, reason, len) : engine_restore(e, stats, reason, len);
  e->pace = NULL;
  return rc;
}

int engine_save_releasing(struct engine *e, const struct engine_pace *pace,
                          struct engine_stats *stats, char *reason, size_t len) {
  int rc = exchange_copy(e, pace, true, stats, reason, len);
  if (rc && stats->exchange_given) {
    char why[256];
    snprintf(why, sizeof why, "%s", reason);
    snprintf(reason, len, "%s; %" PRIu64 " bytes of device memory went back first: the image "
             "keeps them, the program stays paused", why, stats->exchange_given);
  }
  for (size_t i = 0; rc == 0 && i < e->image_count; i++) { /* every chunk holds */
    free(e->image[i].holds);
    e->image[i].holds = NULL;
  }
  return rc;
}

int engine_restore_creating(struct engine *e, const struct engine_pace *pace,
                            struct engine_stats *stats, char *reason, size_t len) {
  int rc = exchange_copy(e, pace, false, stats, reason, len);
  if (rc == 0) engine_drop_image(e); /* its pages are gone: nothing to keep for a delta */
  return rc;
}

/* ---- the image for disk.c: a narrow view, so that the copy paths above may change freely ---- */

size_t engine_chunk_bytes(const struct engine *e) { return e->chunk_bytes; }

int engine_image_region(struct engine *e, size_t index, struct engine_image_view *view) {
  if (index >= e->image_count) return -ENOENT;
  struct image_region *r = &e->image[index];
  *view = (struct engine_image_view){r->region, r->data, r->sums, r->chunks, &r->device_sums};
  return 0;
}

int engine_image_create(struct engine *e, const struct ckpt_region *regions, size_t count,
                        char *reason, size_t len) {
  struct region_list list = {(struct ckpt_region *)regions, count, count};
  int rc = image_build(e, &list, false, reason, len); /* read() fills it: no filler */
  if (rc) engine_drop_image(e);
  return rc;
}

int engine_restore_from(struct engine *e, const struct ckpt_region *regions, size_t count,
                        engine_source_fn source, void *arg, struct engine_stats *stats,
                        char *reason, size_t len) {
  *stats = (struct engine_stats){0};
  if (e->image_count) {
    snprintf(reason, len, "a restore from elsewhere while an image is in host memory");
    return -EBUSY;
  }
  /* The image's table without its memory: no data, no sums, nothing registered (every chunk
   * goes through staging). Only the transition thread looks at the table meanwhile. */
  struct image_region *table = calloc(count ? count : 1, sizeof *table);
  if (!table) {
    snprintf(reason, len, "out of memory for the region table");
    return -ENOMEM;
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < count; i++) {
    table[i].region = regions[i];
    table[i].chunks = (regions[i].size + e->chunk_bytes - 1) / e->chunk_bytes;
    bytes += regions[i].size;
  }
  e->image = table;
  e->image_count = count;
  e->source = source;
  e->source_arg = arg;
  uint64_t chunk_count = 0;
  struct chunk_ref *chunks = list_chunks(e, &chunk_count);
  int rc = -ENOMEM;
  if (!chunks) snprintf(reason, len, "out of memory for the chunk list");
  else rc = run_job(e, false, false, false, chunks, chunk_count, stats, reason, len);
  free(chunks);
  e->image = NULL;
  e->image_count = 0;
  e->source = NULL;
  e->source_arg = NULL;
  free(table);
  if (!rc) {
    stats->bytes = bytes;
    stats->regions = count;
  }
  return rc;
}
