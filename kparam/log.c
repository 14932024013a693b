/* Warnings from kparam, routed to the shim's logger (kparam_set_log) or to stderr. */
#include "internal.h"

#include <stdatomic.h>
#include <stdio.h>

static _Atomic(kparam_log_fn) log_callback;

void kparam_set_log(kparam_log_fn fn) { atomic_store(&log_callback, fn); }

void kparam_log(int level, const char *fmt, ...) {
  char message[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  kparam_log_fn fn = atomic_load(&log_callback);
  if (fn)
    fn(level, message);
  else
    fprintf(stderr, "cudaw kparam: %s: %s\n", level == 0 ? "warning" : "info", message);
}
