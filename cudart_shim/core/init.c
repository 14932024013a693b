/* Initialisation, safe when preloaded: a constructor and the first API call race to one
 * pthread_once; calls made meanwhile from other threads wait for it, calls from inside it (our
 * own, or the real runtime's) pass the gate untouched through the per-thread depth.
 *
 * The options are validated here, once, but an invalid one stops the program only at its first
 * CUDA call (shim_options_first_call), not in the constructor: cudaw is preloaded into every
 * process of a tree (a job's shell, `cudaw run bash -c ...`, Python before it imports torch), and
 * those that never use CUDA should run on as they would without cudaw. A CUDA program's first
 * call is usually nvcc's __cudaRegisterFatBinary, in its static constructors: before main. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "options.h"
#include "shim.h"
#include "shim_profile.h"

atomic_int shim_ready;
int shim_init_error;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* What the options' check found at start, said at the first CUDA call: one line each. */
static char option_lines[4096];
static size_t option_lines_len;
static unsigned invalid_options;
static int stop_on_options; /* invalid values under CUDAW_STRICT=1 */
static atomic_int options_said;
static pthread_mutex_t stop_lock = PTHREAD_MUTEX_INITIALIZER;

static void keep_line(const char *line, const char *default_value, void *ctx)
{
  (void)ctx;
  const char *ignored = !default_value || ckpt_options_strict() ? ""
                        : *default_value ? "; ignored (CUDAW_STRICT=0): using the default, "
                                         : "; ignored (CUDAW_STRICT=0): left unset";
  size_t left = sizeof option_lines - option_lines_len;
  int n = snprintf(option_lines + option_lines_len, left, "%c%s%s%s\n", default_value ? 'E' : 'W',
                   line, ignored, default_value && *ignored && *default_value ? default_value : "");
  if (n > 0 && (size_t)n < left) option_lines_len += (size_t)n;
}

void shim_options_first_call(void)
{
  if (SHIM_LIKELY(atomic_load_explicit(&options_said, memory_order_acquire))) return;
  pthread_mutex_lock(&stop_lock); /* a second thread waits here while the first one stops */
  if (!atomic_load_explicit(&options_said, memory_order_relaxed)) {
    for (char *line = option_lines; *line;) {
      char *end = strchr(line, '\n');
      *end = '\0';
      int error = line[0] == 'E' && stop_on_options;
      shim_log_always(error ? SHIM_LOG_ERROR : SHIM_LOG_WARN, "%s", line + 1);
      line = end + 1;
    }
    if (stop_on_options) {
      shim_log_always(SHIM_LOG_ERROR, "stopping at the program's first CUDA call (exit status %d) "
                      "on %u invalid option%s: fix the value, or set CUDAW_STRICT=0 to ignore "
                      "invalid values", CUDAW_EXIT_BAD_OPTION, invalid_options,
                      invalid_options == 1 ? "" : "s");
      fflush(NULL); /* what the program printed so far */
      _exit(CUDAW_EXIT_BAD_OPTION);
    }
    atomic_store_explicit(&options_said, 1, memory_order_release);
  }
  pthread_mutex_unlock(&stop_lock);
}

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
  invalid_options = cudaw_options_validate(keep_line, NULL);
  cudaw_options_unknown(keep_line, NULL);
  stop_on_options = invalid_options && ckpt_options_strict();
  shim_log_open();
  shim_profile_setup();
  struct shim_span span;
  shim_span_begin(&span);
  shim_gate_setup(1); /* membarrier registration is cheapest while the process has one thread */
  /* Stopping: nothing is loaded or started (no socket, no cudawd), every CUDA call stops. */
  shim_init_error = stop_on_options ? -EINVAL : shim_real_load();
  if (!stop_on_options && cudaw_option_flag("CUDAW_STATIC_CHECK"))
    TIMED(SHIM_PROFILE_STATIC_CHECK, shim_check_static_runtime("/proc/self/exe"));
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
