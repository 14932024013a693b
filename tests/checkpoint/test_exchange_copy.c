/* Description: the copy engine's exchange modes (engine_save_releasing, engine_restore_creating)
 * on two fake programs sharing one fake device. A's checkpoint gives its device memory back piece
 * by piece while B's resume creates its own piece by piece and frees the image pages it consumed,
 * each paced by the other's progress: both finish byte-exact, and the device never holds more
 * than A's memory plus the spare B may use ahead. Also: a resume that fails midway keeps what
 * reached the device there and the rest in the image (its consumed pages freed) and a retry
 * finishes it byte-exact; a checkpoint that fails after releasing keeps its image, from which a
 * plain resume restores every byte. Memory that cannot move piece by piece (translate) is
 * refused before anything is copied. With checksums on the device and on the host; with those on
 * the device a resume checks each chunk as it lands, and one that lands wrong is copied again. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_host.h"
#include "internal.h"
#include "test.h"

#define PIECE (64u << 10)
#define CHUNK (16u << 10)
#define WINDOW (2 * PIECE)  /* A's image may run this far ahead of B's consumption */
#define SPARE (2 * PIECE)   /* B may create this much beyond what A gave back */

static struct fake_device device = {.lock = PTHREAD_MUTEX_INITIALIZER};
static _Atomic uint64_t a_released, b_consumed;
static _Atomic bool a_finished, b_finished; /* a side that stopped no longer holds the other */

static uint64_t a_limit(void *arg, bool *final) {
  (void)arg;
  (void)final;
  return atomic_load(&b_finished) ? UINT64_MAX : atomic_load(&b_consumed) + WINDOW;
}
static uint64_t b_limit(void *arg, bool *final) {
  (void)arg;
  (void)final;
  return atomic_load(&a_finished) ? UINT64_MAX : atomic_load(&a_released) + SPARE;
}
static void a_progress(void *arg, uint64_t bytes) { (void)arg; atomic_store(&a_released, bytes); }
static void b_progress(void *arg, uint64_t bytes) { (void)arg; atomic_store(&b_consumed, bytes); }

static struct engine *engine_of(struct fake_host *h, int threads, uint64_t chunk) {
  struct ckpt_options options;
  ckpt_options_from_env(&options, NULL, 0);
  options.staging_bytes = chunk;
  options.reserve_auto = 0; /* images in private memory, whose pages a resume frees */
  options.reserve_bytes = 0;
  options.streams = 2;
  options.threads = threads;
  struct engine *e = engine_new(&fake_host_ops, h, &options);
  CHECK(e != NULL, "engine_new");
  CHECK_EQ(engine_prepare(e), 0);
  return e;
}

static struct engine *new_engine(struct fake_host *h, int threads) {
  return engine_of(h, threads, CHUNK);
}

static void program(struct fake_host *h, bool device_hash, uint32_t seed, const uint64_t *sizes,
                    int count) {
  fake_host_init(h, 1);
  h->piece_bytes = PIECE;
  h->device = &device;
  h->device_hash = device_hash;
  for (int i = 0; i < count; i++) fake_host_add_region(h, sizes[i], 0, seed + (uint32_t)i);
  h->gate_closed = true; /* the fake checks copies happen with the gate closed */
}

struct side {
  struct engine *e;
  struct engine_pace pace;
  bool save;
  int rc;
  struct engine_stats stats;
  char reason[512];
};

static void *run_side(void *arg) {
  struct side *s = arg;
  s->rc = s->save ? engine_save_releasing(s->e, &s->pace, &s->stats, s->reason, sizeof s->reason)
                  : engine_restore_creating(s->e, &s->pace, &s->stats, s->reason,
                                            sizeof s->reason);
  atomic_store(s->save ? &a_finished : &b_finished, true);
  return NULL;
}

static void check_data(struct fake_host *h, const char *who) {
  uint64_t offset = 0;
  size_t bad = fake_host_verify(h, &offset);
  if (bad) test_fail("%s: region %zu differs at offset %" PRIu64, who, bad - 1, offset);
  CHECK_EQ(h->violations, 0);
}

/* B is swapped out (its image on the host, its memory released); A resident. Swap them. */
static void exchange(bool device_hash) {
  static const uint64_t a_sizes[] = {1u << 20, 300u << 10, 70000};
  static const uint64_t b_sizes[] = {800u << 10, 500u << 10, 12345};
  struct fake_host a, b;
  device.used = device.peak = 0;
  program(&b, device_hash, 500, b_sizes, 3);
  struct engine *eb = new_engine(&b, 2);
  struct engine_stats stats;
  char reason[512] = "";
  CHECK(engine_save(eb, &stats, reason, sizeof reason) == 0, "B's checkpoint: %s", reason);
  CHECK_EQ(fake_host_ops.release_all(&b), 0);
  program(&a, device_hash, 100, a_sizes, 3);
  uint64_t a_total = a.device_used, b_total = engine_image_bytes(eb);
  device.peak = device.used;
  CHECK_EQ(device.used, a_total);
  atomic_store(&a_released, 0);
  atomic_store(&b_consumed, 0);
  atomic_store(&a_finished, false);
  atomic_store(&b_finished, false);

  struct engine *ea = new_engine(&a, 2);
  struct side sa = {.e = ea, .pace = {a_limit, a_progress, NULL}, .save = true};
  struct side sb = {.e = eb, .pace = {b_limit, b_progress, NULL}, .save = false};
  pthread_t ta, tb;
  pthread_create(&ta, NULL, run_side, &sa);
  pthread_create(&tb, NULL, run_side, &sb);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  CHECK(sa.rc == 0, "A's releasing checkpoint: %s", sa.reason);
  CHECK(sb.rc == 0, "B's creating resume: %s", sb.reason);
  printf("exchange (%s sums): A %" PRIu64 " bytes out, B %" PRIu64 " in; device peak %" PRIu64
         " (A's %" PRIu64 " + spare %u)\n", device_hash ? "device" : "host", a_total, b_total,
         device.peak, a_total, SPARE);
  if (device.peak > a_total + SPARE)
    test_fail("the device held %" PRIu64 " bytes, above A's %" PRIu64 " + the spare %u",
              device.peak, a_total, SPARE);
  CHECK_EQ(sb.stats.exchange_given, b_total);  /* every image byte consumed */
  CHECK_EQ(sb.stats.exchange_moved, b_total);  /* every device byte created by the pace */
  CHECK(sa.stats.exchange_given >= a_total - 2 * PIECE, "A gave back %" PRIu64,
        sa.stats.exchange_given); /* all but the pieces of each region's tail */
  CHECK_EQ(engine_image_bytes(eb), 0); /* B's image is gone with its pages */
  if (device_hash && sb.stats.times.hash > 0) /* checked as it landed, not before it went */
    test_fail("B's resume hashed on the host for %.6f s", sb.stats.times.hash);
  if (device_hash) CHECK_EQ(sb.stats.verified_in_flight, b_total);
  CHECK_EQ(fake_host_ops.recreate_all(&b, &(uint64_t){0}), 0); /* nothing left to make */
  CHECK_EQ(b.device_used, b_total);
  check_data(&b, "B after the exchange");

  /* A: what is left goes, and A comes back whole (plain resume). */
  CHECK_EQ(fake_host_ops.release_all(&a), 0);
  CHECK_EQ(fake_host_ops.recreate_all(&a, &(uint64_t){0}), 0);
  CHECK(engine_restore(ea, &stats, reason, sizeof reason) == 0, "A's resume: %s", reason);
  check_data(&a, "A after its resume");
  engine_free(ea);
  engine_free(eb);
  fake_host_free(&a);
  fake_host_free(&b);
}

/* Resident pages of [p, p + n), whole pages inside only. */
static uint64_t resident_pages(const uint8_t *p, uint64_t n) {
  uintptr_t page = 4096, start = ((uintptr_t)p + page - 1) & ~(page - 1), end = ((uintptr_t)p + n) & ~(page - 1);
  static unsigned char vec[8192];
  uint64_t count = 0;
  CHECK((end - start) / page <= sizeof vec, "range too large");
  CHECK_EQ(mincore((void *)start, end - start, vec), 0);
  for (uintptr_t i = 0; i < (end - start) / page; i++) count += vec[i] & 1;
  return count;
}

/* B's resume runs out of device memory midway, then is retried. */
static void resume_fails(bool device_hash) {
  /* Chunks of whole huge pages: the image may lie in transparent huge pages, which a partial
   * MADV_DONTNEED splits without freeing at once. */
  static const uint64_t sizes[] = {24u << 20};
  struct fake_host b;
  program(&b, device_hash, 900, sizes, 1);
  struct engine *e = engine_of(&b, 2, 2u << 20);
  struct engine_stats stats;
  char reason[512] = "";
  CHECK_EQ(engine_save(e, &stats, reason, sizeof reason), 0);
  CHECK_EQ(fake_host_ops.release_all(&b), 0);
  uint64_t size = 0;
  uint8_t *image = engine_image_data(e, 0, &size);
  CHECK_EQ(resident_pages(image, size), size / 4096);
  b.range_fail_after = 6; /* the sixth chunk's creation fails: five chunks made */
  struct engine_pace unpaced = {0};
  CHECK_EQ(engine_restore_creating(e, &unpaced, &stats, reason, sizeof reason), -ENOMEM);
  printf("resume stopped: %s; %" PRIu64 " bytes consumed\n", reason, stats.exchange_given);
  CHECK(stats.exchange_given > 0 && stats.exchange_given < size, "consumed %" PRIu64,
        stats.exchange_given);
  uint64_t left = resident_pages(image, size);
  if (left > (size - stats.exchange_given) / 4096)
    test_fail("%" PRIu64 " image pages still resident after %" PRIu64 " of %" PRIu64
              " bytes were consumed", left, stats.exchange_given, size);
  CHECK_EQ(engine_restore_creating(e, &unpaced, &stats, reason, sizeof reason), 0);
  check_data(&b, "B after the retried resume");
  engine_free(e);
  fake_host_free(&b);
}

/* With checksums on the device, B's resume checks each chunk once it landed, not on the host
 * before it goes (the host's hash held a handover's resume to ~28 GB/s on the H100). A chunk
 * that lands wrong fails the resume, and its image pages must still be whole: they are freed
 * only once checked, so a retry brings every byte back. */
static void landed_wrong(void) {
  static const uint64_t sizes[] = {24u << 20};
  struct fake_host b;
  program(&b, true, 950, sizes, 1);
  struct engine *e = engine_of(&b, 2, 2u << 20);
  struct engine_stats stats;
  char reason[512] = "";
  CHECK_EQ(engine_save(e, &stats, reason, sizeof reason), 0);
  CHECK_EQ(fake_host_ops.release_all(&b), 0);
  b.h2d_garble_after = 4;
  int calls = b.device_hash_calls;
  struct engine_pace unpaced = {0};
  int rc = engine_restore_creating(e, &unpaced, &stats, reason, sizeof reason);
  printf("resume with a chunk landed wrong: %d (%s); %" PRIu64 " bytes consumed\n", rc, reason,
         stats.exchange_given);
  CHECK_EQ(rc, -EBADMSG);
  CHECK(strstr(reason, "on the device") != NULL, "found on the device: %s", reason);
  CHECK(stats.exchange_given < sizes[0], "consumed %" PRIu64, stats.exchange_given);
  CHECK(b.device_hash_calls > calls, "checked on the device");
  CHECK_EQ(engine_restore_creating(e, &unpaced, &stats, reason, sizeof reason), 0);
  check_data(&b, "B after the retry");
  engine_free(e);
  fake_host_free(&b);
}

/* A's releasing checkpoint fails after it gave memory back: the image keeps it. */
static void checkpoint_fails(bool device_hash) {
  static const uint64_t sizes[] = {700u << 10, 200u << 10};
  struct fake_host a;
  program(&a, device_hash, 300, sizes, 2);
  struct engine *e = new_engine(&a, 1); /* chunks done in order: the prefix grows chunk by chunk */
  struct engine_stats stats;
  char reason[512] = "";
  a.release_fail_after = 3; /* two pieces go back, the third release fails */
  struct engine_pace unpaced = {0};
  int rc = engine_save_releasing(e, &unpaced, &stats, reason, sizeof reason);
  if (rc != -EIO)
    test_fail("the releasing checkpoint returned %d (%s), gave back %" PRIu64 ", %d range calls", rc,
              reason, stats.exchange_given, a.range_calls);
  printf("checkpoint stopped: %s\n", reason);
  CHECK(stats.exchange_given > 0, "memory went back before the failure");
  CHECK(engine_image_bytes(e) > 0, "the image is kept");
  CHECK(a.device_used < 900u << 10, "some memory is released");
  CHECK_EQ(fake_host_ops.recreate_all(&a, &(uint64_t){0}), 0);
  CHECK(engine_restore(e, &stats, reason, sizeof reason) == 0, "resume: %s", reason);
  check_data(&a, "A after the resume");
  /* The next checkpoint copies what the failed one had not (its sums cannot match). */
  CHECK_EQ(engine_save(e, &stats, reason, sizeof reason), 0);
  CHECK_EQ(fake_host_ops.release_all(&a), 0);
  CHECK_EQ(fake_host_ops.recreate_all(&a, &(uint64_t){0}), 0);
  CHECK(engine_restore(e, &stats, reason, sizeof reason) == 0, "resume: %s", reason);
  check_data(&a, "A after a second cycle");
  engine_free(e);
  fake_host_free(&a);
}

/* Memory that cannot move piece by piece (translate): refused before anything moves. */
static void refused(void) {
  static const uint64_t sizes[] = {300u << 10};
  struct fake_host a;
  fake_host_init(&a, 1); /* no piece_bytes: the range operations say -ENOSYS */
  fake_host_add_region(&a, sizes[0], 0, 700);
  a.gate_closed = true;
  struct engine *e = new_engine(&a, 1);
  struct engine_stats stats;
  char reason[512] = "";
  struct engine_pace unpaced = {0};
  CHECK_EQ(engine_save_releasing(e, &unpaced, &stats, reason, sizeof reason), -ENOSYS);
  printf("refused: %s\n", reason);
  CHECK_EQ(engine_image_bytes(e), 0);
  CHECK_EQ(a.copies, 0);
  check_data(&a, "A after the refusal");
  engine_free(e);
  fake_host_free(&a);
}

int main(void) {
  refused();
  for (int device_hash = 1; device_hash >= 0; device_hash--) {
    exchange(device_hash);
    resume_fails(device_hash);
    checkpoint_fails(device_hash);
  }
  landed_wrong();
  printf("exchange copy: ok\n");
  return 0;
}
