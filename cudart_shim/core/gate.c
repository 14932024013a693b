/* The API gate: every exported function passes it. Open, an outermost call writes only its own
 * thread's in-flight flag (no atomic read-modify-write, no shared cache line written); closed
 * (during a pause), new calls block at entry while the closer waits for every flag to drop. The
 * closer's membarrier is what makes the unfenced fast path safe (see shim.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"

atomic_int shim_gate_closed;
SHIM_TLS unsigned shim_depth;
SHIM_TLS struct shim_gate_slot *shim_gate_self;

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_opened = PTHREAD_COND_INITIALIZER;

/* Every slot ever made, newest first; slots are reused, never freed, so the closer walks the list
 * without a lock while threads come and go. */
static _Atomic(struct shim_gate_slot *) all_slots;
/* Slots of exited threads, ready for new ones (under slots_lock). */
static struct shim_gate_slot *spare_slots;
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t slot_key;

/* 1 when the process is registered for MEMBARRIER_CMD_PRIVATE_EXPEDITED; decided once. */
static int use_membarrier;
static atomic_int setup_done;
static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;

static long membarrier(int cmd)
{
  return syscall(__NR_membarrier, cmd, 0, 0);
}

static int register_membarrier(void)
{
  long supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || !(supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return 0;
  return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

static void release_slot(void *opaque)
{
  struct shim_gate_slot *slot = opaque;
  /* A thread that ends inside a counted call (cancelled, pthread_exit from a callback) must not
   * hold every later pause. */
  atomic_store_explicit(&slot->in_flight, 0, memory_order_release);
  atomic_store_explicit(&slot->blocking, 0, memory_order_relaxed);
  pthread_mutex_lock(&slots_lock);
  slot->in_use = false;
  slot->spare = spare_slots;
  spare_slots = slot;
  pthread_mutex_unlock(&slots_lock);
  shim_gate_self = NULL; /* a call from a later destructor registers again */
}

/* fork: the child has one thread, the one that forked. Calls other threads had in flight are
 * gone with them, and membarrier registration is renewed for the child's memory map. */
static void before_fork(void) { pthread_mutex_lock(&slots_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&slots_lock); }

static void after_fork_child(void)
{
  pthread_mutex_init(&slots_lock, NULL);
  if (use_membarrier && !register_membarrier()) use_membarrier = 0;
  for (struct shim_gate_slot *slot = atomic_load(&all_slots); slot; slot = slot->all) {
    slot->fenced = !use_membarrier;
    if (slot == shim_gate_self || !slot->in_use) continue;
    atomic_store(&slot->in_flight, 0);
    atomic_store(&slot->blocking, 0);
    slot->in_use = false;
    slot->spare = spare_slots;
    spare_slots = slot;
  }
}

int shim_gate_setup(int membarrier_wanted)
{
  if (atomic_load_explicit(&setup_done, memory_order_acquire)) return use_membarrier;
  pthread_mutex_lock(&setup_lock);
  if (!atomic_load_explicit(&setup_done, memory_order_relaxed)) {
    use_membarrier = membarrier_wanted && register_membarrier();
    if (pthread_key_create(&slot_key, release_slot) != 0) abort(); /* no key left at start-up */
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    atomic_store_explicit(&setup_done, 1, memory_order_release);
  }
  pthread_mutex_unlock(&setup_lock);
  return use_membarrier;
}

struct shim_gate_slot *shim_gate_register(void)
{
  if (!atomic_load_explicit(&shim_ready, memory_order_acquire)) shim_init();
  shim_options_first_call();
  shim_gate_setup(1);
  pthread_mutex_lock(&slots_lock);
  struct shim_gate_slot *slot = spare_slots;
  if (slot) spare_slots = slot->spare;
  pthread_mutex_unlock(&slots_lock);
  if (!slot) {
    slot = aligned_alloc(_Alignof(struct shim_gate_slot), sizeof *slot);
    if (!slot) abort(); /* a few bytes, once per thread: nothing sensible is left to do */
    *slot = (struct shim_gate_slot){0};
    slot->all = atomic_load(&all_slots);
    while (!atomic_compare_exchange_weak(&all_slots, &slot->all, slot)) {}
  }
  slot->fenced = !use_membarrier;
  slot->in_use = true;
  shim_gate_self = slot;
  pthread_setspecific(slot_key, slot);
  return slot;
}

bool shim_gate_used(void)
{
  return atomic_load_explicit(&all_slots, memory_order_acquire) != NULL;
}

static atomic_uint waiters;

void shim_gate_wait_open(void)
{
  pthread_mutex_lock(&gate_lock);
  atomic_fetch_add_explicit(&waiters, 1, memory_order_relaxed);
  while (atomic_load_explicit(&shim_gate_closed, memory_order_acquire))
    pthread_cond_wait(&gate_opened, &gate_lock);
  atomic_fetch_sub_explicit(&waiters, 1, memory_order_relaxed);
  pthread_mutex_unlock(&gate_lock);
}

unsigned shim_gate_waiters(void) { return atomic_load_explicit(&waiters, memory_order_relaxed); }

unsigned shim_gate_calls_blocking(void)
{
  unsigned count = 0;
  for (struct shim_gate_slot *slot = atomic_load_explicit(&all_slots, memory_order_acquire); slot;
       slot = slot->all)
    count += atomic_load_explicit(&slot->blocking, memory_order_relaxed) != 0;
  return count;
}

uint64_t shim_gate_calls_begun(void)
{
  uint64_t count = 0;
  for (struct shim_gate_slot *slot = atomic_load_explicit(&all_slots, memory_order_acquire); slot;
       slot = slot->all)
    count += atomic_load_explicit(&slot->calls, memory_order_relaxed);
  return count;
}

void shim_gate_enter_slow(struct shim_gate_slot *slot)
{
  while (atomic_load_explicit(&shim_gate_closed, memory_order_seq_cst)) {
    atomic_store_explicit(&slot->in_flight, 0, memory_order_seq_cst);
    shim_gate_wait_open();
    atomic_store_explicit(&slot->in_flight, 1, memory_order_seq_cst);
  }
}

int shim_gate_step_out(void)
{
  struct shim_gate_slot *slot = shim_gate_self;
  if (!slot || !atomic_load_explicit(&slot->in_flight, memory_order_relaxed)) return 0;
  atomic_store_explicit(&slot->in_flight, 0, memory_order_release);
  return 1;
}

void shim_gate_step_in(int stepped_out)
{
  if (!stepped_out) return;
  struct shim_gate_slot *slot = shim_gate_self;
  atomic_store_explicit(&slot->in_flight, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&shim_gate_closed, memory_order_seq_cst)) shim_gate_enter_slow(slot);
}

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int shim_gate_close(uint64_t timeout_ns)
{
  int barrier = shim_gate_setup(1); /* settled before any slot exists, read after */
  atomic_store_explicit(&shim_gate_closed, 1, memory_order_seq_cst);
  /* Every thread that runs now passes a full barrier: a flag raised before its load of
   * shim_gate_closed is visible below; a load after it sees the gate closed. */
  if (barrier && membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
    int rc = errno ? -errno : -EIO;
    shim_gate_open();
    return rc;
  }
  uint64_t start = now_ns();
  unsigned spins = 0;
  for (struct shim_gate_slot *slot = atomic_load_explicit(&all_slots, memory_order_acquire); slot;
       slot = slot->all) {
    while (atomic_load_explicit(&slot->in_flight, memory_order_acquire)) {
      if (now_ns() - start > timeout_ns) {
        shim_gate_open();
        return -ETIMEDOUT;
      }
      /* Calls in flight are usually short: spin briefly, then sleep 50 us at a time. */
      if (++spins > 1000) {
        struct timespec pause = {0, 50000};
        nanosleep(&pause, NULL);
      }
    }
  }
  return 0;
}

void shim_gate_open(void)
{
  pthread_mutex_lock(&gate_lock);
  atomic_store_explicit(&shim_gate_closed, 0, memory_order_seq_cst);
  pthread_cond_broadcast(&gate_opened);
  pthread_mutex_unlock(&gate_lock);
}

unsigned shim_gate_calls_in_flight(void)
{
  unsigned count = 0;
  for (struct shim_gate_slot *slot = atomic_load_explicit(&all_slots, memory_order_acquire); slot;
       slot = slot->all)
    count += atomic_load_explicit(&slot->in_flight, memory_order_acquire) != 0;
  return count;
}
