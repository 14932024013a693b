/* Initialisation, safe when preloaded: a constructor and the first API call race to one
 * pthread_once; calls made meanwhile from other threads wait for it, calls from inside it (our
 * own, or the real runtime's) pass the gate untouched through the per-thread depth. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"
#include "shim.h"
#include "shim_profile.h"

atomic_int shim_ready;
int shim_init_error;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* Run one start-up step as a span of its phase (cudaw's own work: it calls no real library). */
#define TIMED(phase, step)                  \
  do {                                      \
    struct shim_span step_span;             \
    shim_span_begin(&step_span);            \
    step;                                   \
    shim_span_end(&step_span, (phase), 1);  \
  } while (0)

/* The records SHIM_START_STEP put in their section, bounded by the linker. */
extern const struct shim_start_step __start_cudaw_start_steps[], __stop_cudaw_start_steps[];

/* Every start step once, lowest order first (a handful: a selection each round is enough). */
static void run_start_steps(void)
{
  const struct shim_start_step *begin = __start_cudaw_start_steps, *end = __stop_cudaw_start_steps;
  int last = -1;
  for (;;) {
    const struct shim_start_step *next = NULL;
    for (const struct shim_start_step *s = begin; s < end; s++)
      if (s->order > last && (!next || s->order < next->order)) next = s;
    if (!next) return;
    for (const struct shim_start_step *s = begin; s < end; s++) {
      if (s->order != next->order) continue;
      if (s->phase >= 0) TIMED((enum shim_profile_phase)s->phase, s->run());
      else s->run();
    }
    last = next->order;
  }
}

static void init_body(void)
{
  shim_depth++;
  shim_log_open();
  shim_profile_setup();
  struct shim_span span;
  shim_span_begin(&span);
  shim_gate_setup(1); /* membarrier registration is cheapest while the process has one thread */
  shim_init_error = shim_real_load();
  int invalid;
  int static_check = cudaw_option_flag("CUDAW_STATIC_CHECK", &invalid);
  if (invalid)
    shim_warn("CUDAW_STATIC_CHECK=%s is not 0 or 1; using the default (%d)",
              cudaw_option("CUDAW_STATIC_CHECK"), static_check);
  if (static_check) TIMED(SHIM_PROFILE_STATIC_CHECK, shim_check_static_runtime("/proc/self/exe"));
  if (shim_init_error == 0) run_start_steps();
  shim_span_end(&span, SHIM_PROFILE_INIT, 1);
  shim_depth--;
  atomic_store_explicit(&shim_ready, 1, memory_order_release);
}

void shim_init(void)
{
  pthread_once(&init_once, init_body);
}

__attribute__((constructor)) static void shim_constructor(void)
{
  shim_init();
}
