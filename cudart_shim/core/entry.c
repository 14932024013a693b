/* Slow paths shared by the generated wrappers and trampolines: missing entry points and the
 * trampolines' resolution (initialise, wait at the gate, return the real function). */
#include <stdatomic.h>

#include "shim_generated.h"

static atomic_uchar missing_logged[SHIM_FN_COUNT];

static int report_missing(enum shim_fn_id id)
{
  shim_options_first_call();
  if (shim_init_error) return cudaErrorInitializationError;
  if (!atomic_exchange(&missing_logged[id], 1))
    shim_warn("%s is not in the real runtime %s; returning cudaErrorNotSupported",
              shim_fn_names[id], shim_real_path() ? shim_real_path() : "(none)");
  return cudaErrorNotSupported;
}

int shim_missing(enum shim_fn_id id)
{
  shim_gate_leave();
  return report_missing(id);
}

int shim_missing_blocking(enum shim_fn_id id)
{
  shim_gate_leave_blocking();
  return report_missing(id);
}

/* An undeclared export has no known signature; if its real entry point is missing, the best
 * we can do is return cudaErrorNotSupported in the integer return register. */
static int unsupported_undeclared(void) { return cudaErrorNotSupported; }

/* Called by shim_trampoline_slow (assembly) with every argument register saved. */
shim_real_fn shim_trampoline_resolve(unsigned id);
shim_real_fn shim_trampoline_resolve(unsigned id)
{
  if (!atomic_load_explicit(&shim_ready, memory_order_acquire)) shim_init();
  if (shim_depth == 0) shim_options_first_call();
  if (shim_depth == 0) shim_gate_wait_open();
  shim_real_fn real = id < SHIM_FN_COUNT ? shim_real_table[id] : NULL;
  if (!real) {
    report_missing((enum shim_fn_id)id);
    return (shim_real_fn)unsupported_undeclared;
  }
  return real;
}

/* Set by glue/vmem.c when vmem runs its translate policy; empty otherwise. */
uintptr_t shim_translate_base, shim_translate_end;
_Atomic uint64_t *shim_translate_outside;
