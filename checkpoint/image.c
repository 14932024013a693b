/* The host image of the copy engine (engine_state.h): its regions built for a checkpoint (kept
 * buffers reused; the rest placed in cudawd's lent range, the reserve, or a fresh mapping), freed
 * or kept between checkpoints, and page-locked while paused so that the resume copies straight
 * from them. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "engine_state.h"

/* ---- page-locking the image while paused (engine_register_image; REGISTER_PIECE) ---- */

static void unregister_region(struct engine *e, struct image_region *r) {
  /* The reserve's registration stays with the reserve. */
  for (uint64_t at = 0; !r->in_reserve && at < r->registered; at += REGISTER_PIECE)
    e->ops->host_unregister(e->ctx, r->data + at);
  atomic_fetch_sub(&e->registered_bytes, r->registered);
  r->registered = 0;
}

/* The next piece to register: region and offset, or false when none is left. */
static bool next_piece(struct engine *e, size_t *region, uint64_t *offset) {
  pthread_mutex_lock(&e->registrar_lock);
  bool found = false;
  while (!found && e->register_region < e->image_count) {
    struct image_region *r = &e->image[e->register_region];
    if (e->register_offset < r->registered) e->register_offset = r->registered;
    if (r->in_reserve || e->register_offset >= r->mapped) {
      e->register_region++;
      e->register_offset = 0;
      continue;
    }
    *region = e->register_region;
    *offset = e->register_offset;
    e->register_offset += REGISTER_PIECE;
    found = true;
  }
  pthread_mutex_unlock(&e->registrar_lock);
  return found;
}

static uint64_t piece_length(const struct image_region *r, uint64_t offset) {
  return r->mapped - offset < REGISTER_PIECE ? r->mapped - offset : REGISTER_PIECE;
}

/* A piece is registered: extend its region's prefix, or keep it ahead of the prefix. */
static void piece_done(struct engine *e, size_t region, uint64_t offset) {
  pthread_mutex_lock(&e->registrar_lock);
  struct image_region *r = &e->image[region];
  if (offset != r->registered) {
    if (e->ahead_count < sizeof e->ahead / sizeof e->ahead[0])
      e->ahead[e->ahead_count++] = (struct piece_ref){region, offset};
    else /* far ahead of a slow piece: give it up (the prefix stops at the gap) */
      e->ops->host_unregister(e->ctx, r->data + offset);
    pthread_mutex_unlock(&e->registrar_lock);
    return;
  }
  for (bool grew = true; grew;) {
    uint64_t n = piece_length(r, r->registered);
    r->registered += n;
    atomic_fetch_add(&e->registered_bytes, n);
    grew = false;
    for (size_t i = 0; i < e->ahead_count; i++)
      if (e->ahead[i].region == region && e->ahead[i].offset == r->registered) {
        e->ahead[i] = e->ahead[--e->ahead_count];
        grew = true;
        break;
      }
  }
  pthread_mutex_unlock(&e->registrar_lock);
}

static void *register_pieces(void *arg) {
  struct engine *e = arg;
  size_t region;
  uint64_t offset;
  while (!atomic_load(&e->registrar_stop) && next_piece(e, &region, &offset)) {
    struct image_region *r = &e->image[region];
    int rc = e->ops->host_register(e->ctx, r->data + offset, (size_t)piece_length(r, offset));
    if (rc) {
      ckpt_logf(CKPT_LOG_DEBUG, "registering the host image for direct DMA failed: %s; the "
                "rest goes through staging buffers", strerror(-rc));
      atomic_store(&e->registrar_stop, true);
      break;
    }
    piece_done(e, region, offset);
  }
  return NULL;
}

void engine_register_image(struct engine *e) {
  if (!e->ops->host_register || !e->ops->host_unregister || e->registrar_count) return;
  atomic_store(&e->registrar_stop, false);
  e->register_region = 0;
  e->register_offset = 0;
  e->ahead_count = 0;
  for (int t = 0; t < REGISTER_THREADS; t++) {
    if (pthread_create(&e->registrar[t], NULL, register_pieces, e) != 0) break;
    e->registrar_count++;
  }
}

/* Stop registering (the pieces under way finish) before the image is used or changed; pieces
 * registered past a gap that did not close are unregistered again. */
static void stop_registering(struct engine *e) {
  if (!e->registrar_count) return;
  atomic_store(&e->registrar_stop, true);
  for (int t = 0; t < e->registrar_count; t++) pthread_join(e->registrar[t], NULL);
  e->registrar_count = 0;
  for (size_t i = 0; i < e->ahead_count; i++)
    e->ops->host_unregister(e->ctx, e->image[e->ahead[i].region].data + e->ahead[i].offset);
  e->ahead_count = 0;
}

void engine_stop_registering(struct engine *e) { stop_registering(e); }

void engine_unregister_image(struct engine *e) {
  stop_registering(e);
  for (size_t i = 0; i < e->image_count; i++)
    if (e->image[i].registered && !e->image[i].in_reserve) unregister_region(e, &e->image[i]);
}

uint64_t engine_image_registered(struct engine *e) { return atomic_load(&e->registered_bytes); }

static void free_image_region(struct engine *e, struct image_region *r) {
  if (r->registered) unregister_region(e, r);
  if (r->data && !r->in_reserve) munmap(r->data, r->mapped);
  free(r->sums);
  free(r->holds);
  memset(r, 0, sizeof *r);
}

void engine_forget_pinned(struct engine *e) {
  stop_registering(e);
  for (int s = 0; e->staging && s < e->slots; s++) e->staging[s] = NULL;
  for (size_t i = 0; i < e->image_count; i++)
    if (!e->image[i].in_reserve) e->image[i].registered = 0; /* gone with it */
  atomic_store(&e->registered_bytes, 0);
}

/* Unregister the fresh mapping from the filler: from now on an unfilled page faults in as zeroes
 * instead of waiting for a fill that will not come. */
void image_stop_filling(struct engine *e) {
  if (!e->filling) return;
  int rc = image_filler_unregister(&e->filler, e->filling, e->filling_bytes);
  if (rc) ckpt_logf(CKPT_LOG_WARN, "userfaultfd: unregistering the host image failed: %s",
                    strerror(-rc));
  for (size_t i = 0; i < e->image_count; i++) e->image[i].untouched = false;
  e->filling = NULL;
  e->filling_bytes = 0;
}

/* Free the image's regions; the reserve stays taken (see engine_drop_image). */
static void drop_regions(struct engine *e) {
  stop_registering(e);
  image_stop_filling(e);
  for (size_t i = 0; i < e->image_count; i++) free_image_region(e, &e->image[i]);
  free(e->image);
  e->image = NULL;
  e->image_count = 0;
  e->image_bytes = 0;
}

void engine_drop_image(struct engine *e) {
  drop_regions(e);
  if (e->reserve_held) reserve_give_back(e->reserve);
  e->reserve_held = false;
  if (e->pool_held) reserve_give_back(e->pool);
  e->pool_held = false;
  e->loan_length = 0; /* the range goes back to cudawd with the image */
}

void engine_empty_reserve(struct engine *e) {
  if (!e->reserve || e->reserve_held) return;
  reserve_yield_to(e->pool, NULL);
  reserve_free(e->reserve);
  e->reserve = reserve_new(e->ops, e->ctx, &e->options);
  reserve_standby(e->reserve, e->pool != NULL);
  reserve_yield_to(e->pool, e->reserve);
}

int engine_set_pool(struct engine *e, struct reserve *pool) {
  if (e->pool_held) return -EBUSY;
  reserve_free(e->pool);
  e->pool = pool;
  e->loan_length = 0;
  reserve_standby(e->reserve, pool != NULL);
  reserve_yield_to(pool, e->reserve);
  return 0;
}

void engine_lend(struct engine *e, uint64_t offset, uint64_t length) {
  if (e->pool_held) return; /* an image lies in the last range until it is dropped */
  e->loan_offset = offset;
  e->loan_length = e->pool ? length : 0;
}

bool engine_image_in_pool(const struct engine *e) { return e->pool_held; }


uint64_t engine_image_bytes(const struct engine *e) { return e->image_bytes; }
struct reserve *engine_reserve(struct engine *e) { return e->reserve; }
struct reserve *engine_pool(struct engine *e) { return e->pool; }
uint64_t engine_image_regions(const struct engine *e) { return e->image_count; }

int engine_image_device_bytes(const struct engine *e, uint64_t *bytes, int max_devices) {
  int devices = 0;
  for (int d = 0; d < max_devices; d++) bytes[d] = 0;
  for (size_t i = 0; i < e->image_count; i++) {
    int d = e->image[i].region.device;
    if (d < 0 || d >= max_devices) continue;
    bytes[d] += e->image[i].region.size;
    if (d + 1 > devices) devices = d + 1;
  }
  return devices;
}

uint8_t *engine_image_data(struct engine *e, size_t index, uint64_t *size) {
  if (index >= e->image_count) return NULL;
  *size = e->image[index].region.size;
  return e->image[index].data;
}

/* ---- enumeration and the image ---- */


int image_collect_region(void *arg, const struct ckpt_region *region) {
  struct region_list *list = arg;
  if (region->size == 0) return 0;
  if (list->count == list->capacity) {
    size_t capacity = list->capacity ? list->capacity * 2 : 64;
    void *items = realloc(list->items, capacity * sizeof *list->items);
    if (!items) return -ENOMEM;
    list->items = items;
    list->capacity = capacity;
  }
  list->items[list->count++] = *region;
  return 0;
}

/* How much of a region's image bytes the copies reach directly (registered, page-locked). */
uint64_t image_direct_bytes(const struct image_region *r) {
  return r->registered < r->region.size ? r->registered : r->region.size;
}

/* The regions of the image without memory yet, one after another from base + from at align
 * boundaries, in a taken reserve (or with in_pool cudawd's lent range) whose first span.ready
 * bytes are page-locked. A region goes there while it starts in the page-locked part: the part
 * of it past that is plain memory of the reserve's mapping, copied through staging (and
 * page-locked by the reserve's threads later, for the next checkpoint). Past the page-locked
 * part the rest stay out (the fresh arena), except in the pool (with all: memory cudawd lent,
 * better than more of the host's). Returns where the last one ends. */
static uint64_t place_fresh_regions(struct engine *e, uint8_t *base, struct reserve_span span,
                                    uint64_t from, uint64_t align, bool in_pool, bool all) {
  uint64_t at = from;
  for (size_t i = 0; i < e->image_count; i++) {
    struct image_region *r = &e->image[i];
    if (r->data) continue;
    uint64_t mapped = (r->region.size + align - 1) / align * align;
    if ((!all && at >= span.ready) || mapped > span.size - at) continue;
    r->data = base + at;
    r->mapped = (size_t)mapped;
    r->registered = span.ready > at ? (span.ready - at < mapped ? span.ready - at : mapped) : 0;
    atomic_fetch_add(&e->registered_bytes, r->registered); /* page-locked already: status counts it */
    r->in_reserve = true;
    r->in_pool = in_pool;
    r->fresh = true; /* no earlier image's bytes: every chunk is copied */
    at += mapped;
  }
  return at;
}

/* One line on where a new image's fresh regions went, where not all went direct. */
static void log_placement(struct engine *e, const char *what, const char *into_what, bool in_pool) {
  uint64_t fresh = 0, direct_part = 0;
  for (size_t i = 0; i < e->image_count; i++) {
    const struct image_region *r = &e->image[i];
    if (!r->fresh || !r->in_reserve || r->in_pool != in_pool) continue;
    direct_part += image_direct_bytes(r);
  }
  for (size_t i = 0; i < e->image_count; i++)
    if (e->image[i].fresh || !e->image[i].data) fresh += e->image[i].region.size;
  if (direct_part == fresh) return; /* the result's line says "straight into ..." */
  char into[32], of[32];
  ckpt_format_bytes(direct_part, into, sizeof into);
  ckpt_format_bytes(fresh, of, sizeof of);
  ckpt_logf(CKPT_LOG_INFO, "%s: %s of %s into %s (ready), the rest staged", what, into, of,
            into_what);
}

/* Put the fresh regions of the image into the reserve, each at a reserve_align boundary, as far
 * as it is page-locked (place_fresh_regions): never all or nothing. Where regions reused from
 * a kept image lie in it already, the fresh ones go after the last of those (a program's small
 * allocations that stay, beside big ones that come and go). Only for a checkpoint's image: one
 * read from disk is no reason to hold page-locked memory. */
static bool place_in_reserve(struct engine *e) {
  if (!e->reserve) return false;
  uint64_t align = reserve_align(e->reserve), bytes = 0, kept_bytes = 0, kept_end = 0;
  const uint8_t *start = reserve_base(e->reserve);
  for (size_t i = 0; i < e->image_count; i++) {
    const struct image_region *r = &e->image[i];
    if (!r->data) {
      bytes += (r->region.size + align - 1) / align * align;
    } else if (r->in_reserve && !r->in_pool) {
      kept_bytes += r->mapped;
      if ((uint64_t)(r->data - start) + r->mapped > kept_end)
        kept_end = (uint64_t)(r->data - start) + r->mapped;
    }
  }
  if (!bytes) return false;
  struct reserve_span span;
  uint8_t *base = reserve_take(e->reserve, e->reserve_held, &span);
  if (!base) return false;
  if (e->reserve_held && kept_end + bytes > span.ready && kept_bytes + bytes <= span.ready) {
    /* The kept regions stand in the way (the reserve grows with the program's memory, not with
     * the gaps the regions that went left): copy them afresh too, all from the start, since
     * that way every byte goes direct. */
    for (size_t i = 0; i < e->image_count; i++) {
      struct image_region *r = &e->image[i];
      if (!r->in_reserve || r->in_pool) continue;
      unregister_region(e, r);
      free(r->sums);
      r->sums = NULL;
      r->data = NULL;
      r->mapped = 0;
      r->in_reserve = false;
      r->fresh = true;
    }
    kept_end = 0;
  }
  uint64_t end = place_fresh_regions(e, base, span, kept_end, align, false, false);
  bool placed = end > kept_end;
  if (!placed) {
    char need[32], ready[32];
    ckpt_format_bytes(bytes, need, sizeof need);
    ckpt_format_bytes(span.ready, ready, sizeof ready);
    struct reserve_info info;
    reserve_status(e->reserve, &info);
    ckpt_logf(CKPT_LOG_INFO, "image reserve not used: the image's new regions need %s, the "
              "reserve has %s ready%s%s; copying them the old way", need, ready,
              kept_end ? " up to the regions kept in it" : "",
              info.refused ? " (refused, see above)" : "");
  }
  if (kept_end || placed) {
    e->reserve_held = true;
    reserve_use(e->reserve, end);
  } else {
    e->reserve_held = false;
    reserve_give_back(e->reserve);
  }
  if (placed) log_placement(e, "image reserve", "the reserve", false);
  return placed;
}

/* Put every fresh region of the image into the range of cudawd's pool lent for this checkpoint
 * (engine_lend), each at a reserve_align boundary, if the range holds them all; the part of it
 * page-locked already is copied to directly, the rest through staging. Otherwise say why in one
 * line (the image then goes to the reserve or the old way). */
static bool place_in_pool(struct engine *e) {
  if (!e->pool || !e->loan_length || e->pool_held) return false;
  uint64_t align = reserve_align(e->pool), bytes = 0;
  for (size_t i = 0; i < e->image_count; i++)
    if (!e->image[i].data) bytes += (e->image[i].region.size + align - 1) / align * align;
  if (!bytes) return false;
  char need[32], lent[32], ready[32];
  ckpt_format_bytes(bytes, need, sizeof need);
  ckpt_format_bytes(e->loan_length, lent, sizeof lent);
  if (bytes > e->loan_length) {
    ckpt_logf(CKPT_LOG_INFO, "cudawd's host-memory pool not used: the image needs %s, the range "
              "lent is %s; copying the old way", need, lent);
    return false;
  }
  struct reserve_span span;
  uint8_t *base = reserve_take_range(e->pool, e->loan_offset, bytes, &span);
  /* The range lent is host memory cudawd set aside for this image (its pool's window), faulted
   * in whatever the image does. So the image goes there even where none of the range is
   * page-locked yet, staged, never into memory of its own beside it: on a host sized for the pool
   * (128 GiB, a window of 94 GiB), a first swap-out that found its range not page-locked copied
   * 45 GiB the old way while cudawd faulted the rest of the window in, and the kernel's OOM killer
   * ended the program (H200 as an H100, 2026-11-28, share_bench host). In 2 MiB pages such a
   * staged save ran at 44 GB/s, in 4 KiB pages at 7-15 GB/s (faulting the shared pages into this
   * process). The done message says the image lies in the range even with no byte straight in
   * (glue/sched.c), so that cudawd keeps the range lent. */
  /* The program's own reserve takes the image only where it holds all of it page-locked: a
   * borrower paused 2 s after allocating 45 GiB had 7.75 GiB of its range page-locked and the
   * reserve wholly (staged into the pool 9.6 s, the reserve 1.0 s: H100, 2026-11-27); a reserve
   * ready in part would fault fresh memory of its own for the rest, beside cudawd's window. */
  uint64_t own = reserve_ready(e->reserve), in_range = span.ready < bytes ? span.ready : bytes;
  if (base && !e->pace && in_range < bytes && own >= bytes) {
    reserve_give_back(e->pool);
    char has[32];
    ckpt_format_bytes(in_range, has, sizeof has);
    ckpt_logf(CKPT_LOG_INFO, "cudawd's host-memory pool not used: %s of the range lent is "
              "page-locked, the image reserve has all of the image's %s", has, need);
    return false;
  }
  if (!base) {
    struct reserve_info info;
    reserve_status(e->pool, &info);
    ckpt_format_bytes(info.bytes, ready, sizeof ready);
    ckpt_logf(CKPT_LOG_INFO, "cudawd's host-memory pool not used: its range is not page-locked "
              "yet (%s of the pool registered so far%s); copying the old way", ready,
              info.refused ? ", registering it failed" : "");
    return false;
  }
  e->pool_held = true;
  place_fresh_regions(e, base, span, 0, align, true, true);
  log_placement(e, "cudawd's host-memory pool", "the range lent", true);
  return true;
}

/* Regions in a reserve: the pages its threads page-locked since the image was placed are copied
 * to and from directly from now on. Called before a job, never during one: a chunk's copy and
 * its completion must agree on the path. */
void image_note_registered(struct engine *e) {
  uint64_t ready[2] = {reserve_ready(e->reserve), reserve_ready(e->pool)};
  for (size_t i = 0; i < e->image_count; i++) {
    struct image_region *r = &e->image[i];
    if (!r->in_reserve) continue;
    const uint8_t *start = reserve_base(r->in_pool ? e->pool : e->reserve);
    uint64_t at = (uint64_t)(r->data - start), now = ready[r->in_pool];
    uint64_t registered = now > at ? (now - at < r->mapped ? now - at : r->mapped) : 0;
    if (registered <= r->registered) continue;
    atomic_fetch_add(&e->registered_bytes, registered - r->registered);
    r->registered = registered;
  }
}

/* Build the image for `list`: reuse a kept buffer whose region has the same id and size, map
 * the rest as one fresh mapping (with fill, registered with the filler), free what is no longer
 * needed. */
int image_build(struct engine *e, struct region_list *list, bool fill, char *reason,
                       size_t len) {
  struct image_region *image = calloc(list->count ? list->count : 1, sizeof *image);
  if (!image) return -ENOMEM;
  uint64_t needed = 0, total = 0;
  for (size_t i = 0; i < list->count; i++) {
    image[i].region = list->items[i];
    image[i].chunks = (list->items[i].size + e->chunk_bytes - 1) / e->chunk_bytes;
    total += list->items[i].size;
    for (size_t j = 0; j < e->image_count; j++) {
      struct image_region *old = &e->image[j];
      if (old->data && old->region.id == list->items[i].id &&
          old->region.size == list->items[i].size) {
        image[i].data = old->data;
        image[i].mapped = old->mapped;
        image[i].sums = old->sums;
        image[i].device_sums = old->device_sums;
        image[i].registered = old->registered;
        image[i].in_reserve = old->in_reserve;
        image[i].in_pool = old->in_pool;
        old->registered = 0;
        old->in_reserve = old->in_pool = false;
        image[i].fresh = false;
        old->data = NULL;
        old->sums = NULL;
        break;
      }
    }
    if (!image[i].data) needed += image_span(list->items[i].size);
  }
  bool reserve_kept = false, pool_kept = false;
  for (size_t i = 0; i < list->count; i++) {
    reserve_kept |= image[i].in_reserve && !image[i].in_pool;
    pool_kept |= image[i].in_pool;
  }
  drop_regions(e); /* what was not reused */
  if (e->reserve_held && !reserve_kept) reserve_give_back(e->reserve);
  e->reserve_held = reserve_kept;
  if (e->pool_held && !pool_kept) reserve_give_back(e->pool);
  e->pool_held = pool_kept;
  e->image = image;
  e->image_count = list->count;
  e->image_bytes = total;
  if (fill && !place_in_pool(e)) place_in_reserve(e);
  image_note_registered(e); /* kept regions: the reserve may have grown under them since */
  /* Fresh memory: the arena, and the own reserve's part not page-locked yet. Not the part of
   * cudawd's range that is not page-locked here: cudawd set that memory aside for the image
   * within its budget, and faults it in whatever the image does. Counted, it failed the first
   * swap-out of a 45 GiB job that had 3.2 GiB of its range page-locked ("host image needs 42.18
   * GiB more, only 26.89 GiB available": H200, 2 MiB pages), which then came 5 s late. */
  needed = 0;
  for (size_t i = 0; i < list->count; i++)
    if (!image[i].data) needed += image_span(image[i].region.size);
    else if (image[i].fresh && image[i].in_reserve && !image[i].in_pool)
      needed += image[i].mapped - image[i].registered;

  /* An exchange's save writes its image only as far as its pace allows, which the other
   * program raises by freeing its own image's pages: up front, only that first stretch must fit
   * (the whole image never lies beside the other one: that is what the exchange is for). */
  if (e->pace && e->pace->limit) {
    bool final = false;
    uint64_t first = e->pace->limit(e->pace->arg, &final);
    if (first < needed) needed = first;
  }
  /* cudawd faults its pool's window in whatever this image does: the part not page-locked here
   * yet is counted as taken (a page cudawd faulted in already is counted twice, which may fail a
   * checkpoint the host could hold; the retry finds the range ready). Without this, a first
   * swap-out copied 45 GiB the old way while cudawd faulted the rest of a 94 GiB window in, on a
   * 128 GiB host, and the kernel's OOM killer ended the program (H200, 2026-11-28). Not for an
   * exchange's save: cudawd ordered it for the host's memory as it is, and it frees as it goes. */
  uint64_t available = ckpt_meminfo("MemAvailable"), pool_due = 0;
  if (e->pool && !e->pool_held && !e->pace) {
    uint64_t window = reserve_size(e->pool), locked = reserve_ready(e->pool);
    pool_due = window > locked ? window - locked : 0;
  }
  if (needed > available || (needed && pool_due > available - needed)) {
    char need[32], have[32], due[32];
    ckpt_format_bytes(needed, need, sizeof need);
    ckpt_format_bytes(available, have, sizeof have);
    ckpt_format_bytes(pool_due, due, sizeof due);
    if (needed > available || !pool_due)
      snprintf(reason, len, "host image needs %s more, only %s of host memory available", need,
               have);
    else
      snprintf(reason, len, "host image needs %s more, only %s of host memory available, of "
               "which cudawd's pool window may still take %s", need, have, due);
    return -ENOMEM;
  }
  uint64_t arena_bytes = 0;
  for (size_t i = 0; i < list->count; i++) {
    struct image_region *r = &image[i];
    if (r->in_reserve && r->fresh && !r->sums &&
        !(r->sums = calloc(r->chunks ? r->chunks : 1, sizeof *r->sums))) {
      snprintf(reason, len, "host image: out of memory for checksums");
      return -ENOMEM;
    }
    if (r->data) continue;
    r->fresh = true;
    if (!(r->sums = calloc(r->chunks ? r->chunks : 1, sizeof *r->sums))) {
      snprintf(reason, len, "host image: out of memory for checksums");
      return -ENOMEM;
    }
    r->mapped = (size_t)image_span(r->region.size);
    arena_bytes += r->mapped;
  }
  uint8_t *arena = arena_bytes ? image_arena_map(arena_bytes) : NULL;
  if (arena_bytes && !arena) {
    char need[32];
    ckpt_format_bytes(arena_bytes, need, sizeof need);
    snprintf(reason, len, "host image: cannot map %s", need);
    return -ENOMEM;
  }
  /* Chunks must start on pages for the filler; a chunk size that is no page multiple copies. */
  bool filled = arena && fill && e->fill && e->chunk_bytes % 4096 == 0 &&
                image_filler_open(&e->filler) == 0 &&
                image_filler_register(&e->filler, arena, arena_bytes) == 0;
  if (filled) {
    e->filling = arena;
    e->filling_bytes = arena_bytes;
  }
  uint64_t at = 0;
  for (size_t i = 0; arena && i < list->count; i++) {
    struct image_region *r = &image[i];
    if (r->data) continue;
    r->data = arena + at; /* each region unmaps its own slice */
    at += r->mapped;
    r->untouched = filled;
  }
  return 0;
}

