/* Description: a resume under translate re-creates chunks at their old real addresses with the
 * VMM calls (issue 21, home.c), on fake devices whose allocator never hands an address out again.
 * The granule-aligned ranges over the old memory are reserved with the old address as the hint
 * and mapped: nothing moves, a pointer table kept in device memory still leads to its data, the
 * next resume maps memory into the same, still reserved, ranges without reserving again, and a
 * release gives every byte back. A range shared by several chunks stays until the last of them
 * is freed, or is re-made to fit at the next resume. Falls back to the allocator (counted as
 * moved, nothing left held) where the hint is refused (another address, an error, someone else's
 * reservation in the way) or a step fails (physical memory, map, access); an out-of-memory
 * resume undoes itself and a retry uses the kept reservations. Also: freed while released, freed while held by a live checkpoint, peer access,
 * and in_place off or no VMM (the allocator alone, as before). */
#include <stdlib.h>

#include "harness.h"

#define MAX_SAVED 64

static struct fake *fake;

struct saved {
  uintptr_t vaddr;
  uint64_t size, real;
  void *copy;
};
static struct saved saved[MAX_SAVED];
static int saved_count;

static int save(const struct vmem_chunk *c, void *ctx) {
  (void)ctx;
  CHECK(saved_count < MAX_SAVED);
  CHECK_EQ(c->state, VMEM_RESIDENT);
  struct saved *s = &saved[saved_count++];
  *s = (struct saved){c->vaddr, c->size, c->real, malloc(c->size)};
  CHECK(s->copy != NULL);
  memcpy(s->copy, (void *)(uintptr_t)c->real, c->size);
  return 0;
}

struct outcome {
  uint64_t in_place, moved, reserved; /* bytes: at the old address, elsewhere, in a reservation */
  int moved_chunks;
};

/* Copy each chunk's contents back (the checkpoint's restore) and classify it. */
static int restore(const struct vmem_chunk *c, void *ctx) {
  struct outcome *o = ctx;
  for (int i = 0; i < saved_count; i++) {
    struct saved *s = &saved[i];
    if (s->vaddr != c->vaddr) continue;
    CHECK_EQ(c->state, VMEM_RESIDENT);
    CHECK_EQ(c->size, s->size);
    memcpy((void *)(uintptr_t)c->real, s->copy, c->size);
    free(s->copy);
    s->copy = NULL;
    CHECK_EQ(c->moved, (int)(c->real != s->real));
    if (c->moved) {
      o->moved += c->size;
      o->moved_chunks++;
    } else {
      o->in_place += c->size;
    }
    if (fake_reserved(fake, c->real, c->size)) o->reserved += c->size;
    return 0;
  }
  test_fail("chunk %#lx was not saved", (unsigned long)c->vaddr);
}

/* Checkpoint (copy out, release) and resume (re-create, copy back); between the two, `between`
 * runs (may be NULL). The stats must agree with what the walk saw. */
static struct outcome round_trip(void (*between)(void *), void *arg) {
  saved_count = 0;
  CHECK_EQ(vmem_for_each(save, NULL), 0);
  CHECK_EQ(vmem_release_all(), 0);
  if (between) between(arg);
  CHECK_EQ(vmem_recreate_all(NULL), 0);
  struct outcome o = {0};
  CHECK_EQ(vmem_for_each(restore, &o), 0);
  struct vmem_stats stats;
  CHECK_EQ(vmem_get_stats(-1, &stats), 0);
  CHECK_EQ(stats.moved_bytes, o.moved);
  CHECK_EQ(stats.moved_chunks, (uint64_t)o.moved_chunks);
  CHECK_EQ(stats.in_place_bytes, o.in_place);
  CHECK_EQ(stats.in_place_mapped_bytes, o.reserved); /* in a home exactly when reserved */
  CHECK_EQ(stats.in_place_bytes + stats.moved_bytes, stats.held_bytes);
  return o;
}

static uint64_t held(void) {
  struct vmem_stats stats;
  CHECK_EQ(vmem_get_stats(-1, &stats), 0);
  return stats.held_bytes;
}

static struct fake *begin(struct setup s) {
  s.policy = VMEM_TRANSLATE;
  if (!s.device_bytes) s.device_bytes = GiB;
  fake = start(s);
  return fake;
}

static void released_state(void *arg) {
  CHECK_EQ(fake_used(fake, 0), 0);
  CHECK_EQ(fake_reservations(fake), *(int *)arg);
}

/* Nothing moves with VMM and in-place re-creation, although the allocator never reuses an
 * address; the reservations are kept and reused; shared ranges live until their last chunk. */
static void in_place_round_trips(void) {
  struct fake *f = begin((struct setup){.vmm = 1, .in_place = 1, .identity = 1});
  static const uint64_t sizes[] = {300, 3 * MiB + 64, 1000, 5 * MiB, 40 * MiB + 4096, 100000};
  enum { N = sizeof sizes / sizeof sizes[0] };
  void *p[N];
  for (int i = 0; i < N; i++) {
    CHECK_EQ(vmem_alloc(0, sizes[i], 0, &p[i]), 0);
    CHECK(!vmem_in_range(p[i]), "identity placement expected for %p", p[i]);
  }
  uint64_t *table = p[1]; /* a pointer table in device memory, holding the program's pointers */
  for (int i = 0; i < N; i++) {
    if (i != 1) *(uint64_t *)p[i] = 7000u + (unsigned)i;
    table[i] = (uintptr_t)p[i];
  }
  uint64_t mallocs = fake_calls(f, FAKE_DEV_MALLOC);
  struct outcome o = round_trip(NULL, NULL);
  CHECK_EQ(o.moved, 0);
  CHECK_EQ(o.in_place, held());
  CHECK_EQ(o.reserved, held());
  CHECK_EQ(fake_calls(f, FAKE_DEV_MALLOC), mallocs); /* the allocator was not asked */
  CHECK(!vmem_outside_irregular(), "everything translates to itself again");
  for (int i = 0; i < N; i++) {
    CHECK_EQ(vmem_translate(p[i]), p[i]);
    if (i != 1) CHECK_EQ(*(uint64_t *)(uintptr_t)table[i], 7000u + (unsigned)i);
  }
  int reservations = fake_reservations(f);
  CHECK(reservations >= 1);
  struct vmem_stats stats;
  CHECK_EQ(vmem_get_stats(-1, &stats), 0);
  CHECK_EQ(stats.in_place_refused, 0);
  CHECK(stats.home_bytes >= held() && stats.home_bytes % (2 * MiB) == 0);

  /* The next round trip maps into the same reservations: no new ones are asked for. While
   * released the device holds nothing, and the addresses stay reserved. */
  uint64_t reserves = fake_calls(f, FAKE_VA_RESERVE), creates = fake_calls(f, FAKE_PHYS_CREATE);
  o = round_trip(released_state, &reservations);
  CHECK_EQ(o.moved, 0);
  CHECK_EQ(o.reserved, held());
  CHECK_EQ(fake_calls(f, FAKE_VA_RESERVE), reserves);
  CHECK_EQ(fake_calls(f, FAKE_PHYS_CREATE), creates + (uint64_t)reservations);
  CHECK_EQ(fake_calls(f, FAKE_DEV_MALLOC), mallocs);
  for (int i = 0; i < N; i++)
    if (i != 1) CHECK_EQ(*(uint64_t *)(uintptr_t)table[i], 7000u + (unsigned)i);

  /* New allocations after a resume: plain memory, never inside a reservation. */
  void *q;
  CHECK_EQ(vmem_alloc(0, 6 * MiB, 0, &q), 0);
  CHECK(!fake_reserved(f, (uintptr_t)vmem_translate(q), 6 * MiB));
  CHECK_EQ(vmem_free(q, NULL), 0);

  /* Frees: a range's memory stays until its last chunk goes, then the reservation goes too. */
  uint64_t used = fake_used(f, 0);
  CHECK_EQ(vmem_free(p[3], NULL), 0);
  CHECK(fake_used(f, 0) == used || fake_reservations(f) < reservations,
        "memory of a shared range went before its last chunk");
  for (int i = 0; i < N; i++)
    if (i != 3) CHECK_EQ(vmem_free(p[i], NULL), 0);
  CHECK_EQ(vmem_trim(), 0);
  CHECK_EQ(fake_reservations(f), 0);
  CHECK_EQ(fake_used(f, 0), 0);
  CHECK_EQ(vmem_get_stats(-1, &stats), 0);
  CHECK_EQ(stats.home_bytes, 0);
  stop(f);
}

/* x, then a foreign block freed again (a gap of 8 MiB), then y: two ranges far apart. */
struct two_ranges {
  void *x, *y;
  uint64_t spacer, foreign; /* foreign: a reservation someone else holds over y's old range */
};

static void two_ranges(struct fake *f, struct two_ranges *t) {
  CHECK_EQ(vmem_alloc(0, 3 * MiB, 0, &t->x), 0);
  CHECK_EQ(fake_prims()->dev_malloc(f, 0, 8 * MiB, &t->spacer), 0);
  CHECK_EQ(vmem_alloc(0, 3 * MiB + 512, 0, &t->y), 0);
  CHECK_EQ(fake_prims()->dev_free(f, 0, t->spacer), 0);
  *(uint64_t *)vmem_translate(t->x) = 0x1111;
  *(uint64_t *)vmem_translate(t->y) = 0x2222;
}

static void check_two(struct two_ranges *t) {
  CHECK_EQ(*(uint64_t *)vmem_translate(t->x), 0x1111);
  CHECK_EQ(*(uint64_t *)vmem_translate(t->y), 0x2222);
}

/* While paused, another user of the device reserves the first granule of y's old range. */
static void take_y(void *arg) {
  struct two_ranges *t = arg;
  uint64_t at = saved[1].real / (2 * MiB) * (2 * MiB); /* y: the second chunk in address order */
  CHECK_EQ(saved[1].vaddr, (uintptr_t)t->y);
  CHECK_EQ(fake_prims()->va_reserve(fake, 2 * MiB, 2 * MiB, at, &t->foreign), 0);
  CHECK_EQ(t->foreign, at);
}

/* Where the old range is taken, that range alone goes to the allocator. */
static void partial_fallback(void) {
  struct fake *f = begin((struct setup){.vmm = 1, .in_place = 1, .identity = 1});
  struct two_ranges t;
  two_ranges(f, &t);
  uint64_t x_real = (uintptr_t)vmem_translate(t.x), y_real = (uintptr_t)vmem_translate(t.y);
  struct outcome o = round_trip(take_y, &t);
  CHECK_EQ(o.moved_chunks, 1);
  CHECK_EQ(o.moved, 3 * MiB + 512);
  CHECK_EQ((uintptr_t)vmem_translate(t.x), x_real);
  CHECK((uintptr_t)vmem_translate(t.y) != y_real, "y's range is reserved by someone else");
  CHECK_EQ(fake_reservations(f), 2); /* x's, and the foreign one */
  check_two(&t);
  struct vmem_stats stats;
  CHECK_EQ(vmem_get_stats(-1, &stats), 0);
  CHECK_EQ(stats.in_place_refused, 1);
  CHECK_EQ(fake_prims()->va_free(f, t.foreign, 2 * MiB), 0);
  uint64_t y_moved = (uintptr_t)vmem_translate(t.y);

  /* Out of memory: y's new range cannot be backed and the allocator fails too. The resume
   * undoes everything (x's memory unmapped, its reservation kept) and a retry puts both back. */
  CHECK_EQ(vmem_release_all(), 0);
  CHECK_EQ(fake_used(f, 0), 0);
  uint64_t reserves = fake_calls(f, FAKE_VA_RESERVE);
  fake_fail(f, FAKE_PHYS_CREATE, 2); /* the first maps x's kept range, the second y's new one */
  fake_fail(f, FAKE_DEV_MALLOC, 1);
  uint64_t shortfall = 0;
  CHECK_EQ(vmem_recreate_all(&shortfall), -ENOMEM);
  CHECK(shortfall > 0);
  CHECK(vmem_translate(t.x) == NULL && vmem_translate(t.y) == NULL);
  CHECK_EQ(fake_used(f, 0), 0);
  CHECK_EQ(fake_reservations(f), 1);
  CHECK_EQ(fake_calls(f, FAKE_VA_RESERVE), reserves + 1);
  CHECK_EQ(vmem_recreate_all(NULL), 0);
  CHECK_EQ((uintptr_t)vmem_translate(t.x), x_real);
  CHECK_EQ((uintptr_t)vmem_translate(t.y), y_moved); /* where the last resume had put it */
  CHECK_EQ(fake_calls(f, FAKE_VA_RESERVE), reserves + 2); /* y's range again; x's was kept */
  CHECK_EQ(fake_reservations(f), 2);

  /* Freed while released: x leaves its range, which goes with it. */
  CHECK_EQ(vmem_release_all(), 0);
  CHECK_EQ(vmem_free(t.x, NULL), 0);
  CHECK_EQ(fake_reservations(f), 1);
  CHECK_EQ(vmem_recreate_all(NULL), 0);
  CHECK(vmem_translate(t.y) != NULL);
  CHECK_EQ(vmem_free(t.y, NULL), 0);
  CHECK_EQ(fake_reservations(f), 0);
  stop(f);
}

/* A chunk freed while another one of its range lives keeps its memory until the next resume,
 * which re-makes the range to fit what is left, at the same addresses. */
static void shrink(void) {
  struct fake *f = begin((struct setup){.vmm = 1, .in_place = 1, .identity = 1});
  void *a, *b; /* adjacent on the fake device: one range */
  CHECK_EQ(vmem_alloc(0, 3 * MiB, 0, &a), 0);
  CHECK_EQ(vmem_alloc(0, 3 * MiB, 0, &b), 0);
  *(uint64_t *)b = 77;
  CHECK_EQ(round_trip(NULL, NULL).reserved, 6 * MiB);
  CHECK_EQ(fake_reservations(f), 1);
  struct vmem_stats stats;
  CHECK_EQ(vmem_get_stats(-1, &stats), 0);
  uint64_t both = stats.home_bytes, used = fake_used(f, 0);
  CHECK_EQ(vmem_free(a, NULL), 0);
  CHECK_EQ(fake_used(f, 0), used); /* still mapped: the range is b's too */
  struct outcome o = round_trip(NULL, NULL);
  CHECK_EQ(o.moved, 0);
  CHECK_EQ(o.reserved, 3 * MiB);
  CHECK_EQ(vmem_translate(b), b);
  CHECK_EQ(*(uint64_t *)b, 77);
  uint64_t b_start = (uintptr_t)b / (2 * MiB) * (2 * MiB);
  uint64_t b_bytes = ((uintptr_t)b + 3 * MiB + 2 * MiB - 1) / (2 * MiB) * (2 * MiB) - b_start;
  CHECK_EQ(vmem_get_stats(-1, &stats), 0);
  CHECK(stats.home_bytes == b_bytes && b_bytes < both, "range of %llu bytes, b needs %llu",
        (unsigned long long)stats.home_bytes, (unsigned long long)b_bytes);
  CHECK_EQ(fake_used(f, 0), b_bytes);
  CHECK_EQ(fake_reservations(f), 1);
  CHECK(fake_reserved(f, b_start, b_bytes));
  CHECK_EQ(vmem_free(b, NULL), 0);
  CHECK_EQ(fake_reservations(f), 0);
  stop(f);
}

/* The allocator fails for a chunk below one re-created in place: the undo releases that one too
 * (regression: only the chunks before the failing one were undone). */
static void undo_after_home(void) {
  struct fake *f = begin((struct setup){.vmm = 1, .in_place = 1, .identity = 1});
  struct two_ranges t;
  two_ranges(f, &t);
  saved_count = 0;
  CHECK_EQ(vmem_for_each(save, NULL), 0);
  CHECK_EQ(saved[0].vaddr, (uintptr_t)t.x);
  CHECK_EQ(vmem_release_all(), 0);
  uint64_t foreign;
  CHECK_EQ(fake_prims()->va_reserve(f, 2 * MiB, 2 * MiB, saved[0].real / (2 * MiB) * (2 * MiB),
                                    &foreign), 0);
  fake_fail(f, FAKE_DEV_MALLOC, 1);
  CHECK_EQ(vmem_recreate_all(NULL), -ENOMEM);
  CHECK(vmem_translate(t.x) == NULL && vmem_translate(t.y) == NULL, "y is still resident");
  CHECK_EQ(fake_used(f, 0), 0);
  CHECK_EQ(fake_reservations(f), 2); /* y's, kept, and the foreign one */
  CHECK_EQ(vmem_recreate_all(NULL), 0);
  struct outcome o = {0};
  CHECK_EQ(vmem_for_each(restore, &o), 0);
  CHECK_EQ(o.moved_chunks, 1);
  CHECK_EQ(o.reserved, 3 * MiB + 512);
  check_two(&t);
  CHECK_EQ(fake_prims()->va_free(f, foreign, 2 * MiB), 0);
  CHECK_EQ(vmem_free(t.x, NULL), 0);
  CHECK_EQ(vmem_free(t.y, NULL), 0);
  stop(f);
}

/* The device refuses every hint (another address, or an error): everything moves, as before,
 * and no reservation is left behind. */
static void refused(enum fake_hint hint) {
  struct fake *f = begin((struct setup){.vmm = 1, .in_place = 1, .identity = 1, .hint = hint});
  struct two_ranges t;
  two_ranges(f, &t);
  struct outcome o = round_trip(NULL, NULL);
  CHECK_EQ(o.in_place, 0);
  CHECK_EQ(o.moved, held());
  CHECK_EQ(o.moved_chunks, 2);
  CHECK_EQ(fake_reservations(f), 0);
  struct vmem_stats stats;
  CHECK_EQ(vmem_get_stats(-1, &stats), 0);
  CHECK(stats.in_place_refused >= 1);
  CHECK_EQ(stats.home_bytes, 0);
  check_two(&t);
  CHECK_EQ(vmem_free(t.x, NULL), 0);
  CHECK_EQ(vmem_free(t.y, NULL), 0);
  stop(f);
}

/* A step after the reservation fails once: that range falls back, the other stays in place. */
static void step_fails(enum fake_op op) {
  struct fake *f = begin((struct setup){.vmm = 1, .in_place = 1, .identity = 1});
  struct two_ranges t;
  two_ranges(f, &t);
  uint64_t x_real = (uintptr_t)vmem_translate(t.x);
  fake_fail(f, op, 1); /* the first range (x's, the lower address) */
  struct outcome o = round_trip(NULL, NULL);
  CHECK_EQ(o.moved_chunks, 1);
  CHECK((uintptr_t)vmem_translate(t.x) != x_real, "x's range failed: x moved");
  CHECK_EQ(o.reserved, 3 * MiB + 512);
  CHECK_EQ(fake_reservations(f), 1);
  check_two(&t);
  CHECK_EQ(vmem_free(t.x, NULL), 0);
  CHECK_EQ(vmem_free(t.y, NULL), 0);
  CHECK_EQ(fake_reservations(f), 0);
  stop(f);
}

/* A live checkpoint holds a freed chunk of a range: still mapped, until the hold ends. */
static void held_free(void) {
  struct fake *f = begin((struct setup){.vmm = 1, .in_place = 1, .identity = 1});
  void *a;
  CHECK_EQ(vmem_alloc(0, 5 * MiB, 0, &a), 0);
  *(uint64_t *)a = 42;
  CHECK_EQ(round_trip(NULL, NULL).reserved, held());
  CHECK_EQ(vmem_hold_releases(1), 0);
  CHECK_EQ(vmem_free(a, NULL), 0);
  CHECK_EQ(vmem_translate(a), a);
  CHECK_EQ(*(uint64_t *)a, 42); /* a copy in flight still reads it */
  CHECK_EQ(fake_reservations(f), 1);
  CHECK_EQ(vmem_hold_releases(0), 0);
  CHECK_EQ(fake_reservations(f), 0);
  CHECK_EQ(fake_used(f, 0), 0);
  stop(f);
}

/* Peer access reaches memory re-created in place (VMM memory is reachable only from the devices
 * set_access named): given when enabled, at each later resume, and taken back when disabled. */
static void peers(void) {
  struct fake *f = begin((struct setup){.vmm = 1, .in_place = 1, .identity = 1, .devices = 2});
  void *a;
  CHECK_EQ(vmem_alloc(1, 3 * MiB, 0, &a), 0);
  CHECK_EQ(round_trip(NULL, NULL).reserved, held());
  uint64_t calls = fake_calls(f, FAKE_SET_ACCESS);
  CHECK_EQ(vmem_peer_access(0, 1, 1), 0);
  CHECK_EQ(fake_calls(f, FAKE_SET_ACCESS), calls + 1);
  CHECK_EQ(round_trip(NULL, NULL).reserved, held());
  CHECK_EQ(fake_calls(f, FAKE_SET_ACCESS), calls + 3); /* the owner's and the peer's */
  CHECK_EQ(vmem_peer_access(0, 1, 0), 0);
  CHECK_EQ(fake_calls(f, FAKE_SET_ACCESS), calls + 4);
  CHECK_EQ(vmem_free(a, NULL), 0);
  stop(f);
}

/* in_place off, or devices without VMM: the allocator alone, which here never gives an address
 * back, so everything moves and nothing is reserved. */
static void allocator_only(int vmm, int in_place) {
  struct fake *f = begin((struct setup){.vmm = vmm, .in_place = in_place, .identity = 1});
  struct two_ranges t;
  two_ranges(f, &t);
  struct outcome o = round_trip(NULL, NULL);
  CHECK_EQ(o.moved, held());
  CHECK_EQ(fake_calls(f, FAKE_VA_RESERVE), 0);
  check_two(&t);
  CHECK_EQ(vmem_free(t.x, NULL), 0);
  CHECK_EQ(vmem_free(t.y, NULL), 0);
  stop(f);
}

/* in_place 2 (cudaw's default): every chunk is born in a reserved range of its own, so even a
 * chunk whose old address the device would not grant back (small cudaMalloc blocks on a GPU:
 * FAKE_HINT_FAIL refuses every hint) keeps its address across checkpoints; the allocator is
 * never asked and no hint is needed. */
static void born_in_homes(void) {
  struct fake *f =
      begin((struct setup){.vmm = 1, .in_place = 2, .identity = 1, .hint = FAKE_HINT_FAIL});
  static const uint64_t sizes[] = {300, 3 * MiB + 64, 1000, 5 * MiB, 100000};
  enum { N = sizeof sizes / sizeof sizes[0] };
  void *p[N];
  for (int i = 0; i < N; i++) {
    CHECK_EQ(vmem_alloc(0, sizes[i], 0, &p[i]), 0);
    CHECK(fake_reserved(f, (uintptr_t)vmem_translate(p[i]), sizes[i]), "chunk %d not in a home",
          i);
    *(uint64_t *)p[i] = 9000u + (unsigned)i;
  }
  CHECK_EQ(fake_calls(f, FAKE_DEV_MALLOC), 0);
  int reservations = fake_reservations(f);
  for (int round = 0; round < 3; round++) {
    struct outcome o = round_trip(NULL, NULL);
    CHECK_EQ(o.moved, 0);
    CHECK_EQ(o.in_place, held());
    CHECK_EQ(fake_reservations(f), reservations);
    CHECK_EQ(fake_calls(f, FAKE_DEV_MALLOC), 0);
    for (int i = 0; i < N; i++) {
      CHECK_EQ(vmem_translate(p[i]), p[i]);
      CHECK_EQ(*(uint64_t *)p[i], 9000u + (unsigned)i);
    }
  }
  for (int i = 0; i < N; i++) CHECK_EQ(vmem_free(p[i], NULL), 0);
  CHECK(fake_reservations(f) <= 1, "%d reservations left", fake_reservations(f)); /* an empty
                                                                                 * arena stays */
  stop(f);
}

int main(void) {
  born_in_homes();
  in_place_round_trips();
  partial_fallback();
  undo_after_home();
  shrink();
  refused(FAKE_HINT_MOVE_FREE);
  refused(FAKE_HINT_FAIL);
  step_fails(FAKE_PHYS_CREATE);
  step_fails(FAKE_MAP);
  step_fails(FAKE_SET_ACCESS);
  held_free();
  peers();
  allocator_only(1, 0);
  allocator_only(0, 1);
  printf("ok: re-created in place across resumes, shared ranges freed with their last chunk, "
         "fallback where refused or failed, undo and retry, held, peers\n");
  return 0;
}
