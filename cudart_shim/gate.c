/* The API gate: every exported function passes it. Open, it costs one atomic increment and
 * decrement per outermost call; closed (during a pause), new calls block at entry while the
 * closer waits for calls in flight to finish. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "shim.h"

atomic_int shim_gate_closed;
atomic_long shim_gate_inflight;
SHIM_TLS unsigned shim_depth;

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_opened = PTHREAD_COND_INITIALIZER;

void shim_gate_wait_open(void)
{
  pthread_mutex_lock(&gate_lock);
  while (atomic_load_explicit(&shim_gate_closed, memory_order_acquire))
    pthread_cond_wait(&gate_opened, &gate_lock);
  pthread_mutex_unlock(&gate_lock);
}

void shim_gate_enter_slow(void)
{
  while (atomic_load_explicit(&shim_gate_closed, memory_order_seq_cst)) {
    atomic_fetch_sub_explicit(&shim_gate_inflight, 1, memory_order_seq_cst);
    shim_gate_wait_open();
    atomic_fetch_add_explicit(&shim_gate_inflight, 1, memory_order_seq_cst);
  }
}

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int shim_gate_close(uint64_t timeout_ns)
{
  atomic_store_explicit(&shim_gate_closed, 1, memory_order_seq_cst);
  uint64_t start = now_ns();
  unsigned spins = 0;
  while (atomic_load_explicit(&shim_gate_inflight, memory_order_seq_cst) > 0) {
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
  return 0;
}

void shim_gate_open(void)
{
  pthread_mutex_lock(&gate_lock);
  atomic_store_explicit(&shim_gate_closed, 0, memory_order_seq_cst);
  pthread_cond_broadcast(&gate_opened);
  pthread_mutex_unlock(&gate_lock);
}
