/* Description: the gate under load. Between a successful close and the reopen, no call may be
 * inside an API function: an emulated function records every moment it runs while the closer
 * holds the gate drained. Two phases:
 *  - aligned: one worker and the closer meet every round and race, the worker entering the gate
 *    just as the closer closes it, its store buffer full of stores to lines the closer took away
 *    (so the store of its in-flight flag lags behind its load of the gate: the reordering the
 *    closer's barrier exists for, which unprovoked is too rare to see);
 *  - free: several workers (some calls nested) and short-lived threads that register and exit
 *    while the closer closes and reopens the gate as fast as it can.
 * With the fast path's fence missing (no membarrier by the closer, or no sequentially consistent
 * store in the fenced mode) a call slips past the closer and this test fails.
 *   gate_stress membarrier|fenced [seconds]   (77: membarrier asked for, not available) */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "shim.h"
#include "test.h"

/* The gate is tested alone: these stand in for the rest of the library. */
atomic_int shim_ready = 1;
int shim_init_error;
shim_real_fn shim_real_table[SHIM_FN_COUNT];
void shim_init(void) {}
void shim_options_first_call(void) {}

enum { FREE_WORKERS = 3, CHECKS_PER_CALL = 64, NOISE_LINES = 32 };

static atomic_int drained;     /* set by the closer while the gate is closed and drained */
static atomic_long violations; /* observations of a call running while drained */
static atomic_long calls, churned;
static atomic_int stop;

/* Lines the worker writes before it calls and the closer writes while it holds the gate. */
static struct { _Alignas(64) atomic_long v; } noise[NOISE_LINES];

static void make_noise(long value)
{
  for (int k = 0; k < NOISE_LINES; k++)
    atomic_store_explicit(&noise[k].v, value, memory_order_relaxed);
}

static void observe(void)
{
  if (atomic_load(&drained)) atomic_fetch_add(&violations, 1);
}

/* An API function: gated, it looks for the closer's mark while it runs; every eighth call makes
 * a nested call first, whose leave must not end the outer call's flag. */
static void emulated_call(long i)
{
  shim_gate_enter(0);
  observe();
  if (i % 8 == 0) {
    shim_gate_enter(0);
    observe();
    shim_gate_leave();
  }
  for (int k = 0; k < CHECKS_PER_CALL; k++) observe();
  shim_gate_leave();
  atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
}

/* Hold the gate a moment: a call that slipped past the closer is caught inside. (A flag may rise
 * meanwhile: a thread that has not seen the gate closed yet raises it, sees, drops it again.) */
static void hold_closed(void)
{
  atomic_store(&drained, 1);
  for (int k = 0; k < 16; k++) make_noise(-k);
  atomic_store(&drained, 0);
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- aligned: one worker, one closer, meeting every round ---- */

static atomic_long round_go, round_started, round_done;

static void *aligned_worker(void *arg)
{
  (void)arg;
  for (long round = 1;; round++) {
    long go;
    while ((go = atomic_load_explicit(&round_go, memory_order_acquire)) >= 0 && go < round) {}
    if (go < 0) return NULL;
    atomic_store_explicit(&round_started, round, memory_order_relaxed);
    make_noise(round);
    emulated_call(round);
    atomic_store_explicit(&round_done, round, memory_order_release);
  }
}

static long aligned(double seconds)
{
  pthread_t worker;
  CHECK_EQ(pthread_create(&worker, NULL, aligned_worker, NULL), 0);
  long round = 0;
  double end = now_s() + seconds;
  /* At least 1000 rounds: a missing barrier shows within a hundred or so. */
  while (atomic_load(&violations) == 0 && (round < 1000 || now_s() < end)) {
    round++;
    shim_gate_calls_in_flight(); /* share the flag's line: its store must wait for it too */
    atomic_store_explicit(&round_go, round, memory_order_release);
    /* Close as soon as the worker has started: its stores are still on their way then, and
     * its load of the gate is done or about to be. */
    while (atomic_load_explicit(&round_started, memory_order_relaxed) < round) {}
    CHECK_EQ(shim_gate_close(5ull * 1000 * 1000 * 1000), 0);
    hold_closed();
    shim_gate_open();
    while (atomic_load_explicit(&round_done, memory_order_acquire) < round) {}
  }
  atomic_store(&round_go, -1);
  pthread_join(worker, NULL);
  return round;
}

/* ---- free: many threads, coming and going ---- */

static void *free_worker(void *arg)
{
  (void)arg;
  for (long i = 0; !atomic_load_explicit(&stop, memory_order_relaxed); i++) {
    make_noise(i);
    emulated_call(i);
  }
  return NULL;
}

/* A thread that makes a few calls and exits, often while the gate is closed. */
static void *short_lived(void *arg)
{
  (void)arg;
  for (long i = 1; i <= 3; i++) emulated_call(i);
  return NULL;
}

static void *churn(void *arg)
{
  (void)arg;
  while (!atomic_load(&stop)) {
    pthread_t t;
    if (pthread_create(&t, NULL, short_lived, NULL) == 0) pthread_join(t, NULL);
    atomic_fetch_add(&churned, 1);
  }
  return NULL;
}

static long free_running(double seconds)
{
  pthread_t workers[FREE_WORKERS], churner;
  for (int i = 0; i < FREE_WORKERS; i++)
    CHECK_EQ(pthread_create(&workers[i], NULL, free_worker, NULL), 0);
  CHECK_EQ(pthread_create(&churner, NULL, churn, NULL), 0);
  long cycles = 0;
  double end = now_s() + seconds;
  while (now_s() < end && atomic_load(&violations) == 0) {
    CHECK_EQ(shim_gate_close(5ull * 1000 * 1000 * 1000), 0);
    hold_closed();
    shim_gate_open();
    cycles++;
    /* Let the woken threads in before closing again (at most 100 us). */
    long before = atomic_load(&calls);
    for (double until = now_s() + 100e-6; atomic_load(&calls) < before + 8 && now_s() < until;) {}
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < FREE_WORKERS; i++) pthread_join(workers[i], NULL);
  pthread_join(churner, NULL);
  return cycles;
}

int main(int argc, char **argv)
{
  CHECK(argc >= 2 && (!strcmp(argv[1], "membarrier") || !strcmp(argv[1], "fenced")),
        "usage: gate_stress membarrier|fenced [seconds]");
  int want_membarrier = !strcmp(argv[1], "membarrier");
  double seconds = argc >= 3 ? atof(argv[2]) : 2.0;
  if (shim_gate_setup(want_membarrier) != want_membarrier)
    test_skip("membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) is not available here");

  long rounds = aligned(seconds / 2);
  long aligned_bad = atomic_load(&violations);
  long aligned_calls = atomic_load(&calls);
  long cycles = aligned_bad ? 0 : free_running(seconds / 2);
  long free_calls = atomic_load(&calls) - aligned_calls;
  long bad = atomic_load(&violations);
  printf("gate_stress %s: aligned: %ld rounds, %ld calls seen inside a closed gate; free: %ld "
         "close/open cycles, %ld calls, %ld short-lived threads, %ld calls seen inside a closed "
         "gate\n", argv[1], rounds, aligned_bad, cycles, free_calls, atomic_load(&churned),
         bad - aligned_bad);
  CHECK_EQ(bad, 0);
  CHECK(cycles > 100 && free_calls > 10 * cycles,
        "too little happened to mean anything");
  CHECK_EQ(shim_gate_calls_in_flight(), 0);
  printf("gate_stress: ok\n");
  return 0;
}
