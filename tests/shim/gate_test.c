/* Description: the API gate. Open, calls pass and are counted; closing waits for calls in flight
 * and blocks new ones until reopened; a close that cannot drain in time reopens and reports
 * -ETIMEDOUT; blocking calls are not counted; nested calls pass untouched. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "shim.h"
#include "test.h"

/* The gate is tested alone: these stand in for the rest of the library. */
atomic_int shim_ready = 1;
int shim_init_error;
shim_real_fn shim_real_table[SHIM_FN_COUNT];
void shim_init(void) {}
void shim_options_first_call(void) {}

static atomic_int entered, finished;
static atomic_int hold_in_flight;

static void *caller(void *arg)
{
  (void)arg;
  shim_gate_enter(0);
  atomic_fetch_add(&entered, 1);
  while (atomic_load(&hold_in_flight)) usleep(100);
  shim_gate_leave();
  atomic_fetch_add(&finished, 1);
  return NULL;
}

static void *blocking_caller(void *arg)
{
  (void)arg;
  shim_gate_enter_blocking(0);
  atomic_fetch_add(&entered, 1);
  while (atomic_load(&hold_in_flight)) usleep(100);
  shim_gate_leave_blocking();
  atomic_fetch_add(&finished, 1);
  return NULL;
}

static void wait_for(atomic_int *v, int value)
{
  for (int i = 0; i < 20000 && atomic_load(v) < value; i++) usleep(100);
  CHECK(atomic_load(v) >= value, "timed out waiting for %d", value);
}

int main(void)
{
  /* Nested calls count once. */
  shim_gate_enter(0);
  shim_gate_enter(0);
  CHECK_EQ(shim_gate_calls_in_flight(), 1);
  shim_gate_leave();
  shim_gate_leave();
  CHECK_EQ(shim_gate_calls_in_flight(), 0);

  /* A call in flight that never finishes: the close times out and the gate reopens. */
  pthread_t t[4];
  atomic_store(&hold_in_flight, 1);
  pthread_create(&t[0], NULL, caller, NULL);
  wait_for(&entered, 1);
  CHECK_EQ(shim_gate_close(20 * 1000 * 1000), -ETIMEDOUT);
  CHECK_EQ(atomic_load(&shim_gate_closed), 0);

  /* A blocking call in flight does not hold a close. */
  pthread_create(&t[1], NULL, blocking_caller, NULL);
  wait_for(&entered, 2);
  atomic_store(&hold_in_flight, 0);
  wait_for(&finished, 2);
  atomic_store(&hold_in_flight, 1);
  pthread_create(&t[2], NULL, blocking_caller, NULL);
  wait_for(&entered, 3);
  CHECK_EQ(shim_gate_close(1000 * 1000 * 1000), 0);

  /* Closed: a new call blocks at entry until the gate opens. */
  atomic_store(&hold_in_flight, 0);
  wait_for(&finished, 3);
  pthread_create(&t[3], NULL, caller, NULL);
  usleep(50 * 1000);
  CHECK_EQ(atomic_load(&entered), 3);
  shim_gate_open();
  wait_for(&finished, 4);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  CHECK_EQ(shim_gate_calls_in_flight(), 0);
  printf("gate: ok\n");
  return 0;
}
