/* The start-up profile (profile.c): what cudaw does before a program's first kernel runs, counted
 * always and timed with CUDAW_PROFILE=1, each phase split into cudaw's own time and the time spent
 * inside the real libraries (runtime, driver, loader) that it forwards to. Spans nest: a phase
 * that runs inside another's real call (a fatbin registered by a library's constructor during a
 * dlopen) is subtracted from the outer one, so every nanosecond is attributed to one cell. Only
 * for calls that are not hot paths: a span costs four clock reads when timed, one atomic add
 * otherwise. */
#ifndef CUDAW_SHIM_PROFILE_H
#define CUDAW_SHIM_PROFILE_H

#include <stddef.h>
#include <stdint.h>

enum shim_profile_phase {
  SHIM_PROFILE_INIT,         /* the library's initialisation, the phases it starts excluded */
  SHIM_PROFILE_RUNTIME,      /* loading the real runtime (dlopen) and resolving its exports */
  SHIM_PROFILE_STATIC_CHECK, /* reading the executable to detect a static runtime */
  SHIM_PROFILE_CHECKPOINT,   /* the checkpoint module's start: threads, socket, signal handler */
  SHIM_PROFILE_SCHED,        /* joining cudawd (CUDAW_SHARE=1) */
  SHIM_PROFILE_DRIVER,       /* loading the real driver, resolving its exports, the entry map */
  SHIM_PROFILE_DLOPEN,       /* the process's dlopen calls, which cudaw interposes */
  SHIM_PROFILE_ENTRY_POINT,  /* cuGetProcAddress, cudaGetDriverEntryPoint*: query and wrap */
  SHIM_PROFILE_FATBIN,       /* __cudaRegisterFatBinary */
  SHIM_PROFILE_FUNCTION,     /* __cudaRegisterFunction */
  SHIM_PROFILE_MODULE,       /* images recorded from cuModuleLoad*, cuLibraryLoad*,
                                cudaLibraryLoad* (real: the runtime's cudaLibraryLoad* only) */
  SHIM_PROFILE_VMEM,         /* vmem's start at the first allocation: the reservation, the first
                                context (the real calls are not separated) */
  SHIM_PROFILE_PINNING,      /* the checkpoint's staging buffers pinned (in the background) */
  SHIM_PROFILE_UNREGISTER,   /* __cudaUnregisterFatBinary (at exit) */
  SHIM_PROFILE_EXIT,         /* cudaw's exit: stopping the checkpoint module's threads */
  SHIM_PROFILE_PHASES
};

/* One timed call of a phase. On the caller's stack; begin and end on the same thread. */
struct shim_span {
  uint64_t start;          /* 0: not timed */
  uint64_t nested_at_start;
  uint64_t real_start;
  uint64_t nested_at_real;
  uint64_t real_ns;
};

/* Read CUDAW_PROFILE once (shim_init, before anything is timed). Nonzero when timing. */
int shim_profile_setup(void);

void shim_span_begin(struct shim_span *span);
/* Around each call into a real library inside the span. */
void shim_span_real_begin(struct shim_span *span);
void shim_span_real_end(struct shim_span *span);
/* Add the span to `phase`, counting `calls` (0 for a span whose call another span counts). */
void shim_span_end(struct shim_span *span, enum shim_profile_phase phase, unsigned calls);

/* The profile as JSON members for cudaw-ctl status (`,"startup":{...}`), at most len bytes
 * with the NUL. Returns the length written. */
size_t shim_profile_json(char *buf, size_t len);

#endif
