/* cudart_shim internal contract: initialisation, the real runtime's entry points, the API gate,
 * logging and options. Everything here is hidden inside libcudart.so; only the API is exported.
 * Inside: 0 or -errno. Conversion to cudaError_t happens in the exported functions only. */
#ifndef CUDAW_SHIM_H
#define CUDAW_SHIM_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shim_drv_ids.h"
#include "shim_fn_ids.h"

#define SHIM_EXPORT __attribute__((visibility("default")))
#define SHIM_LIKELY(x) __builtin_expect(!!(x), 1)
#define SHIM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SHIM_TLS __thread __attribute__((tls_model("initial-exec")))

typedef void (*shim_real_fn)(void);

/* ---- real runtime (real.c) ---------------------------------------------------------------- */

/* The real runtime's entry point for every export, indexed by enum shim_fn_id; NULL where the
 * loaded library lacks the symbol. Filled once by shim_init before shim_ready is set. */
extern shim_real_fn shim_real_table[SHIM_FN_COUNT];
extern const char *const shim_fn_names[SHIM_FN_COUNT];

/* Load the real runtime: CUDAW_REAL_CUDART, then the path found at build time, then well-known
 * locations; never cudaw itself. Fills shim_real_table. Returns 0, or -ENOENT after logging
 * every path tried. */
int shim_real_load(void);

/* Path of the loaded real runtime (NULL before shim_real_load succeeds). */
const char *shim_real_path(void);

/* Look up a symbol in the real runtime (for modules that need functions by name). */
void *shim_real_symbol(const char *name);

/* ---- initialisation (init.c) ---------------------------------------------------------------- */

/* 1 once shim_init has run (successfully or not); read on every API call. */
extern atomic_int shim_ready;
/* 0 if the real runtime loaded; otherwise every API call fails with this error. */
extern int shim_init_error;

/* Run initialisation once (pthread_once); safe from any thread, from the constructor and from
 * the first API call, whichever comes first. */
void shim_init(void);

/* At a thread's first CUDA call (and wherever a call finds no real entry point): say what the
 * options' check found at start, once, and stop the program (exit status CUDAW_EXIT_BAD_OPTION)
 * when an option is invalid under CUDAW_STRICT=1. One atomic load once said. */
void shim_options_first_call(void);

/* A start step: work of a layer above the core that shim_init runs once the real runtime has
 * loaded (starting the checkpoint module, joining cudawd, a layer offering a hook to another),
 * in increasing order, timed as profile phase `phase` (-1: not timed). The core does not name
 * them: each is a record in the section cudaw_start_steps, which init.c walks. */
struct shim_start_step {
  int order;
  int phase;
  void (*run)(void);
};
#define SHIM_START_STEP(order_, phase_, fn_)                                                    \
  static const struct shim_start_step shim_start_step_##fn_                                    \
      __attribute__((used, section("cudaw_start_steps"), aligned(sizeof(void *)))) = {         \
          (order_), (phase_), (fn_)}
/* The orders in use, lowest first: hooks before the modules that may call them. */
enum { SHIM_START_HOOKS = 0, SHIM_START_CHECKPOINT = 10, SHIM_START_SCHED = 20 };

/* ---- the API gate (gate.c) ----------------------------------------------------------------- */

/* The gate must cost next to nothing while open, from any number of threads. Each thread that
 * makes a counted call gets a slot of its own (its own cache line) whose in_flight flag it sets
 * and clears with plain stores; the closer sets shim_gate_closed, forces a full barrier on every
 * running thread of the process (membarrier, the expensive side of an asymmetric fence) and waits
 * for every slot's flag to drop. A thread that saw the gate open therefore had its flag visible to
 * the closer before the closer looked. Where membarrier is unavailable the fast path fences
 * itself (a sequentially consistent store, still on its own line). */

#define SHIM_ALWAYS_INLINE static inline __attribute__((always_inline))

struct shim_gate_slot {
  atomic_int in_flight;       /* 1 while the owner is inside a counted (outermost) call */
  int fenced;                 /* fence the flag's store here: no membarrier for this process */
  struct shim_gate_slot *all; /* the next slot ever made (the list the closer walks) */
  struct shim_gate_slot *spare; /* the next free slot (under the gate's lock) */
  bool in_use;                /* owned by a live thread (under the gate's lock) */
  atomic_uint calls;          /* counted calls the owner began (written by the owner only) */
  atomic_int blocking;        /* 1 while the owner is inside a blocking call (synchronisation) */
} __attribute__((aligned(64)));

/* Nonzero while a pause holds API calls. Read by every call and by the trampolines (asm). */
extern atomic_int shim_gate_closed;
/* Per-thread nesting depth of API calls: calls from inside cudaw pass the gate untouched. */
extern SHIM_TLS unsigned shim_depth;
/* This thread's slot; NULL until its first counted call. */
extern SHIM_TLS struct shim_gate_slot *shim_gate_self;

/* Decide how the fast path is fenced, before the first counted call: with use_membarrier,
 * register with membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) where the kernel allows it;
 * otherwise (or when it does not) every call fences itself. Only the first call decides (shim_init
 * calls it with 1; tests may call it first). Returns 1 when membarrier is in use. */
int shim_gate_setup(int use_membarrier);

/* The first counted call of a thread: initialise cudaw if needed, give the thread a slot (freed
 * when the thread exits). Returns the slot. */
struct shim_gate_slot *shim_gate_register(void);
/* Whether any thread ever made a counted call: the program has used CUDA (and has a runtime). */
bool shim_gate_used(void);

void shim_gate_wait_open(void);       /* block while the gate is closed; touches no flag */
/* A counted call met a closed gate: drop the flag, wait, raise it again. */
void shim_gate_enter_slow(struct shim_gate_slot *slot);

/* Raise this thread's flag, then look at the gate. The compiler barrier keeps the two in order;
 * the processor may still let the load pass the store, which the closer's membarrier covers. */
SHIM_ALWAYS_INLINE void shim_gate_mark(struct shim_gate_slot *slot)
{
  /* A plain load and store on the owner's own line: the activity the sharing client watches. */
  atomic_store_explicit(&slot->calls, atomic_load_explicit(&slot->calls, memory_order_relaxed) + 1,
                        memory_order_relaxed);
  if (SHIM_LIKELY(!slot->fenced)) {
    atomic_store_explicit(&slot->in_flight, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
  } else {
    atomic_store_explicit(&slot->in_flight, 1, memory_order_seq_cst);
  }
  if (SHIM_UNLIKELY(atomic_load_explicit(&shim_gate_closed, memory_order_relaxed)))
    shim_gate_enter_slow(slot);
}

/* Enter an API call of either layer (runtime or driver): initialise if needed, mark the call in
 * flight, wait while the gate is closed. Only the outermost call of a thread is gated and
 * counted: a runtime call that reaches the driver layer, or cudaw's own calls, pass untouched. */
SHIM_ALWAYS_INLINE void shim_gate_in(void)
{
  if (SHIM_LIKELY(shim_depth++ == 0)) {
    struct shim_gate_slot *slot = shim_gate_self;
    if (SHIM_UNLIKELY(!slot)) slot = shim_gate_register();
    shim_gate_mark(slot);
  }
}

/* The same for calls that may block (synchronisations): not marked in flight. */
SHIM_ALWAYS_INLINE void shim_gate_in_blocking(void)
{
  if (SHIM_LIKELY(shim_depth++ == 0)) {
    if (SHIM_UNLIKELY(!atomic_load_explicit(&shim_ready, memory_order_acquire))) shim_init();
    struct shim_gate_slot *slot = shim_gate_self; /* a thread waiting for the device is busy */
    if (SHIM_LIKELY(slot != NULL)) atomic_store_explicit(&slot->blocking, 1, memory_order_relaxed);
    if (SHIM_UNLIKELY(atomic_load_explicit(&shim_gate_closed, memory_order_acquire)))
      shim_gate_wait_open();
  }
}

/* Enter a runtime API call (shim_gate_in). Returns the real entry point (NULL if missing: call
 * shim_missing). */
SHIM_ALWAYS_INLINE shim_real_fn shim_gate_enter(enum shim_fn_id id)
{
  shim_gate_in();
  return shim_real_table[id];
}

/* Release: what the call did is visible to a closer that sees the flag drop. */
SHIM_ALWAYS_INLINE void shim_gate_leave(void)
{
  if (SHIM_LIKELY(--shim_depth == 0))
    atomic_store_explicit(&shim_gate_self->in_flight, 0, memory_order_release);
}

/* Blocking calls (synchronisations) wait while the gate is closed but are not counted in
 * flight, so a pause never waits for a thread that waits for the device or for another thread. */
SHIM_ALWAYS_INLINE shim_real_fn shim_gate_enter_blocking(enum shim_fn_id id)
{
  shim_gate_in_blocking();
  return shim_real_table[id];
}

SHIM_ALWAYS_INLINE void shim_gate_leave_blocking(void)
{
  if (SHIM_LIKELY(--shim_depth == 0) && SHIM_LIKELY(shim_gate_self != NULL))
    atomic_store_explicit(&shim_gate_self->blocking, 0, memory_order_relaxed);
}

/* Inside a counted call that is about to wait for something outside the process (cudawd's
 * answer): stop counting as in flight, so that a pause may proceed meanwhile. Returns what to
 * pass to shim_gate_step_in, which counts the call again, through the gate. */
int shim_gate_step_out(void);
void shim_gate_step_in(int stepped_out);

/* Close the gate: new calls block at entry; wait up to timeout_ns for calls in flight to
 * finish. Returns 0, -ETIMEDOUT (the gate is then open again and nothing changed), or the
 * -errno of a failed membarrier (likewise). Must be called from a thread that is not inside an API call. */
int shim_gate_close(uint64_t timeout_ns);
/* Reopen the gate and wake every blocked thread. */
void shim_gate_open(void);
/* Counted calls in flight now (a snapshot, for status and tests). */
unsigned shim_gate_calls_in_flight(void);
/* Counted calls begun so far by every thread (grows; a snapshot), threads waiting now at the
 * closed gate, and threads inside a blocking call (a synchronisation) now: whether the program
 * uses the GPU, for the sharing client's idle hint. */
uint64_t shim_gate_calls_begun(void);
unsigned shim_gate_waiters(void);
unsigned shim_gate_calls_blocking(void);

/* An API call whose real entry point is missing: leave the gate, log once, and return
 * cudaErrorNotSupported (or the initialisation error). */
int shim_missing(enum shim_fn_id id);
int shim_missing_blocking(enum shim_fn_id id);

/* ---- pointer translation hooks ------------------------------------------------------------ */

/* The virtual range whose pointers must be translated before reaching the real runtime; empty
 * (0, 0) while nothing needs translating (no vmem, or vmem's remap policy). */
extern uintptr_t shim_translate_base, shim_translate_end;
/* Under translate, vmem's count of allocations placed at their real address (outside the range)
 * that do not translate to themselves (moved by a resume, released): while it is 0, a pointer
 * outside the range needs nothing. NULL while nothing needs translating. */
extern _Atomic uint64_t *shim_translate_outside;
const void *shim_translate_slow(const void *p);

static inline const void *shim_translate_ptr(const void *p)
{
  uintptr_t u = (uintptr_t)p;
  if (SHIM_UNLIKELY(u - shim_translate_base < shim_translate_end - shim_translate_base))
    return shim_translate_slow(p);
  if (SHIM_UNLIKELY(shim_translate_outside != NULL &&
                    atomic_load_explicit(shim_translate_outside, memory_order_acquire) != 0))
    return shim_translate_slow(p);
  return p;
}
#define shim_translate_in(p) ((__typeof__(p))shim_translate_ptr(p))

/* ---- the real driver (real_driver.c) ----------------------------------------------------- */

/* The real driver's entry point for every export, indexed by enum shim_drv_id; NULL until the
 * driver is loaded (shim_drv_load) and where it lacks the symbol. */
extern shim_real_fn shim_drv_real_table[SHIM_DRV_COUNT];
extern const char *const shim_drv_names[SHIM_DRV_COUNT];

/* Load the real driver once: CUDAW_REAL_CUDA, else libcuda.so.1 as the dynamic loader finds it
 * (never cudaw itself). Returns 0, or -ENOENT (logged once) when there is none. */
int shim_drv_load(void);
/* Nonzero once the real driver is loaded (never loads it). */
int shim_drv_loaded(void);
/* Load the driver if needed and return the real entry point of id (NULL if missing). */
shim_real_fn shim_drv_resolve(enum shim_drv_id id);

/* 1 when the driver layer sees the libraries' driver calls too: CUDAW_DRIVER is not 0 and
 * cudaw's dlopen is the one the process resolves (cudaw preloaded or linked by the program). */
int shim_drv_routing(void);
/* 1 unless CUDAW_DRIVER=0 (read once). */
int shim_drv_enabled(void);

/* glibc's own dlopen (cudaw exports one that routes libcuda.so.1 to itself). */
void *shim_real_dlopen(const char *file, int mode);

/* Nonzero when handle is cudaw's own library. */
int shim_is_self_handle(void *handle);

/* ---- logging (log.c) ----------------------------------------------------------------------- */

enum shim_log_level { SHIM_LOG_ERROR, SHIM_LOG_WARN, SHIM_LOG_INFO, SHIM_LOG_DEBUG };
extern int shim_log_level;
void shim_log_open(void);
void shim_logv(enum shim_log_level level, const char *fmt, va_list ap);
__attribute__((format(printf, 2, 3))) void shim_log(enum shim_log_level level, const char *fmt,
                                                    ...);
/* The same whatever CUDAW_LOG says (output the user asked for by another option). */
__attribute__((format(printf, 2, 3))) void shim_log_always(enum shim_log_level level,
                                                           const char *fmt, ...);
#define shim_error(...) shim_log(SHIM_LOG_ERROR, __VA_ARGS__)
#define shim_warn(...) shim_log(SHIM_LOG_WARN, __VA_ARGS__)
#define shim_info(...) \
  do { if (shim_log_level >= SHIM_LOG_INFO) shim_log(SHIM_LOG_INFO, __VA_ARGS__); } while (0)
#define shim_debug(...) \
  do { if (shim_log_level >= SHIM_LOG_DEBUG) shim_log(SHIM_LOG_DEBUG, __VA_ARGS__); } while (0)

/* ---- static runtime detection (static_check.c) --------------------------------------------- */

/* Warn once when the main program carries CUDA kernels but its runtime is linked statically,
 * so cudaw never sees its calls. Returns 1 if it warned. */
int shim_check_static_runtime(const char *exe_path);

#endif
