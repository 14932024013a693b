/* Description: SIGUSR1 before the program's first CUDA call (issue 10 hardening), under cudaw on
 * the emulated device: the pause takes hold with nothing on the device (no context is created
 * for it), the first CUDA call then waits at the gate until the resume, and afterwards the
 * program runs normally; a second SIGUSR1 while paused is refused, not queued. */
#include "e2e_common.h" /* first: it defines _GNU_SOURCE */

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

static atomic_int first_call_done;

static void *first_call(void *unused)
{
  (void)unused;
  void *p;
  CUDA_OK(cudaMalloc(&p, 4096));
  CUDA_OK(cudaMemset(p, 1, 4096));
  CUDA_OK(cudaFree(p));
  atomic_store(&first_call_done, 1);
  return NULL;
}

int main(void)
{
  CHECK(raise(SIGUSR1) == 0);
  CHECK(e2e_wait_state("paused", 10), "not paused after SIGUSR1 before any CUDA call");
  CHECK(raise(SIGUSR1) == 0); /* while paused: refused (logged), nothing queued */
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, first_call, NULL) == 0);
  e2e_sleep_us(200000);
  CHECK(!atomic_load(&first_call_done), "the first CUDA call ran while paused");
  char reply[4096];
  e2e_ask("resume", reply, sizeof reply);
  CHECK(e2e_reply_ok(reply) && e2e_reply_state(reply, "running"), "resume: %s", reply);
  pthread_join(thread, NULL);
  CHECK(atomic_load(&first_call_done));
  e2e_sleep_us(100000);
  e2e_ask("status", reply, sizeof reply);
  CHECK(e2e_reply_state(reply, "running"), "a queued signal paused again: %s", reply);
  printf("early signal: paused before the first CUDA call, which waited for the resume; ok\n");
  return 0;
}
