/* kparam inside the library: per-launch argument preparation (translation of virtual device
 * pointers under the translate policy, validation under CUDAW_CHECK=1), the preferred arch set
 * lazily from the device at the first plan lookup, and kparam's log routed to cudaw's. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "kparam.h"
#include "options.h"
#include "shim_generated.h"
#include "shim_kparam.h"
#include "vmem.h"

int shim_kparam_check;

static void route_log(int level, const char *msg)
{
  if (level == 0) shim_warn("kparam: %s", msg);
  else shim_info("kparam: %s", msg);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init(void)
{
  kparam_set_log(route_log);
  shim_kparam_check = cudaw_option_flag("CUDAW_CHECK");
}

void shim_kparam_init(void) { pthread_once(&init_once, init); }

/* Launches may come before any registration (kernels of cudaLibrary*): read the option when the
 * library loads, so the launch fast path never has to. */
__attribute__((constructor)) static void init_at_load(void) { shim_kparam_init(); }

/* The device's compute capability, asked once at the first plan lookup (a context exists by
 * then: the program is launching a kernel), never at registration. */
static pthread_once_t arch_once = PTHREAD_ONCE_INIT;

static void set_arch(void)
{
  int device = 0, major = 0, minor = 0;
  if (SHIM_REAL(cudaGetDevice)(&device) == cudaSuccess &&
      SHIM_REAL(cudaDeviceGetAttribute)(&major, cudaDevAttrComputeCapabilityMajor, device) ==
          cudaSuccess &&
      SHIM_REAL(cudaDeviceGetAttribute)(&minor, cudaDevAttrComputeCapabilityMinor, device) ==
          cudaSuccess) {
    kparam_set_device_arch(major * 10 + minor);
    shim_debug("kparam: layouts preferred from sm_%d%d cubins", major, minor);
  }
}

/* Each thread remembers its last lookup: a loop launching one kernel skips the registry's lock
 * and hash, until any registration changes the registry. */
struct plan_cache {
  const void *func;
  uint64_t generation;
  const struct kparam_plan *plan;
  enum shim_kparam_func how;
};
static SHIM_TLS struct plan_cache plan_cache;

static const struct kparam_plan *plan_of(const void *func, enum shim_kparam_func how)
{
  uint64_t generation = kparam_registry_generation();
  struct plan_cache *cache = &plan_cache;
  if (cache->plan && cache->func == func && cache->how == how && cache->generation == generation)
    return cache->plan;
  pthread_once(&arch_once, set_arch);
  const struct kparam_plan *plan;
  if (how == SHIM_KPARAM_HANDLE) {
    plan = kparam_plan_for_kernel(func);
  } else {
    plan = kparam_plan_for_host_fun(func);
    if (!plan) plan = kparam_plan_for_kernel(func);
  }
  *cache = (struct plan_cache){func, generation, plan, how};
  return plan;
}

/* ---- kernels reported once ---- */

static pthread_mutex_t reported_lock = PTHREAD_MUTEX_INITIALIZER;
static const void **reported;
static size_t reported_count, reported_capacity;

/* True the first time key is seen. */
static bool first_time(const void *key)
{
  bool first = true;
  pthread_mutex_lock(&reported_lock);
  for (size_t i = 0; i < reported_count && first; i++) first = reported[i] != key;
  if (first && reported_count == reported_capacity) {
    size_t capacity = reported_capacity ? 2 * reported_capacity : 16;
    const void **grown = realloc(reported, capacity * sizeof *grown);
    if (grown) reported = grown, reported_capacity = capacity;
  }
  if (first && reported_count < reported_capacity) reported[reported_count++] = key;
  pthread_mutex_unlock(&reported_lock);
  return first;
}

static void report_untranslatable(const void *func, const struct kparam_plan *plan)
{
  if (!first_time(plan ? (const void *)plan : func)) return;
  if (!shim_translate_end) return; /* only checking: nothing is lost */
  if (!plan)
    shim_warn("kparam: kernel %p was never registered with cudaw (no fatbin, no library): its "
              "pointer arguments are passed untranslated and will fault on the device if they "
              "are virtual (CUDAW_VMEM=translate; use remap where the device has VMM)", func);
  else
    shim_warn("kparam: kernel %s has no known parameter layout: its pointer arguments are "
              "passed untranslated and will fault on the device if they are virtual "
              "(CUDAW_VMEM=translate; use remap where the device has VMM)",
              *plan->name ? plan->name : "(unnamed)");
}

/* ---- one word ---- */

struct word_context {
  const struct kparam_plan *plan;
  bool translate, check;
  int bad; /* words that failed the check */
};

static const char *check_kind_name(enum vmem_check_kind kind)
{
  switch (kind) {
  case VMEM_CHECK_FREED: return "freed memory (use after free)";
  case VMEM_CHECK_UNALLOCATED: return "memory that was never allocated";
  case VMEM_CHECK_RELEASED: return "memory released by a checkpoint";
  default: return "invalid memory";
  }
}

static void check_word(struct word_context *ctx, const void *p)
{
  struct vmem_check_report report;
  if (vmem_check_range(p, 0, &report) == 0) return;
  /* One past the end of an allocation is a valid kernel argument (end iterators). */
  struct vmem_check_report before;
  if (vmem_check_range((const char *)p - 1, 0, &before) == 0) return;
  ctx->bad++;
  const char *name = *ctx->plan->name ? ctx->plan->name : "(unnamed)";
  if (report.kind == VMEM_CHECK_FREED)
    shim_error("CUDAW_CHECK: kernel %s: argument %p points into freed memory (use after free): "
               "allocation %p of %lu bytes, freed by the call at %p; launch refused", name, p,
               report.base, (unsigned long)report.size, report.freed_where);
  else
    shim_error("CUDAW_CHECK: kernel %s: argument %p points into %s; launch refused", name, p,
               check_kind_name(report.kind));
}

/* A word outside the range while some outside allocation moved or is released: the allocation
 * containing it (or ending at it) translates; anything else is left as it is. */
static __attribute__((noinline)) int translate_outside_word(uint64_t *word)
{
  const char *p = (const char *)(uintptr_t)*word;
  const char *real = vmem_translate(p);
  if (real == p) {
    const char *before = vmem_translate(p - 1); /* an end pointer */
    if (before && before != p - 1) real = before + 1;
  }
  if (!real || real == p) return 0;
  *word = (uint64_t)(uintptr_t)real;
  return 1;
}

SHIM_ALWAYS_INLINE int translate_word(void *opaque, uint64_t *word)
{
  struct word_context *ctx = opaque;
  const void *p = (const void *)(uintptr_t)*word;
  if (!vmem_in_range(p)) {
    /* Outside the range: foreign or host memory, or an allocation at its real address (identity
     * placement), which needs translating only once a resume moved it. */
    if (!ctx->translate || !vmem_outside_irregular()) return 0;
    return translate_outside_word(word);
  }
  if (ctx->check) check_word(ctx, p);
  if (!ctx->translate) return 0;
  const char *real = vmem_translate(p);
  if (!real && (real = vmem_translate((const char *)p - 1))) real++; /* an end pointer */
  if (!real || real == (const char *)p) return 0;
  *word = (uint64_t)(uintptr_t)real;
  return 1;
}

/* ---- the frame ---- */

static int prepare_args(const struct kparam_plan *plan, void **args, struct word_context *ctx,
                        struct shim_kparam_frame *frame)
{
  void **argv = frame->argv;
  void *scratch = frame->scratch;
  size_t scratch_size = sizeof frame->scratch;
  if (plan->param_count > SHIM_KPARAM_STACK_ARGS || plan->scratch_bytes > scratch_size) {
    size_t argv_bytes = ((size_t)plan->param_count * sizeof(void *) + 15) & ~(size_t)15;
    frame->heap = malloc(argv_bytes + plan->scratch_bytes);
    if (!frame->heap) return -ENOMEM;
    argv = frame->heap;
    scratch = (char *)frame->heap + argv_bytes;
    scratch_size = plan->scratch_bytes;
  }
  int rc = kparam_translate_args_inline(plan, args, argv, scratch, scratch_size, translate_word,
                                        ctx);
  if (rc < 0) return rc;
  if (rc > 0) frame->args = argv;
  return 0;
}

/* The extra form: {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
 * CU_LAUNCH_PARAM_END}, in any order. A translated copy of the buffer replaces it. */
static int prepare_extra(const struct kparam_plan *plan, void **extra, struct word_context *ctx,
                         struct shim_kparam_frame *frame)
{
  void *buffer = NULL;
  size_t size = 0;
  for (size_t i = 0; i < 16 && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = extra[i + 1];
    else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
      size = *(const size_t *)extra[i + 1];
  }
  if (!buffer || size < plan->param_bytes) return 0; /* the real runtime reports it */
  void *copy = size <= sizeof frame->scratch ? (void *)frame->scratch : (frame->heap = malloc(size));
  if (!copy) return -ENOMEM;
  memcpy(copy, buffer, size);
  int rc = kparam_translate_buffer(plan, copy, size, translate_word, ctx);
  if (rc <= 0) return rc;
  frame->extra_size = size;
  frame->extra_words[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
  frame->extra_words[1] = copy;
  frame->extra_words[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
  frame->extra_words[3] = &frame->extra_size;
  frame->extra_words[4] = CU_LAUNCH_PARAM_END;
  frame->extra = frame->extra_words;
  return 0;
}

/* Where a kernel handle without an image gets its layout: the driver layer offers its own
 * (driver/launch.c: the driver's cuFuncGetParamInfo) at start; without it there is none. */
static _Atomic(shim_kparam_layout_source_fn) layout_source;

void shim_kparam_use_layout_source(shim_kparam_layout_source_fn learn)
{
  atomic_store_explicit(&layout_source, learn, memory_order_release);
}

static int learn_layout(const void *function)
{
  shim_kparam_layout_source_fn learn = atomic_load_explicit(&layout_source, memory_order_acquire);
  return learn ? learn(function) : -ENOENT;
}

int shim_kparam_prepare(const void *func, enum shim_kparam_func how, void **args, void **extra,
                        struct shim_kparam_frame *frame)
{
  frame->args = args;
  frame->extra = extra;
  frame->heap = NULL;
  const struct kparam_plan *plan = plan_of(func, how);
  /* No image seen for a kernel handle (a driver function, a static runtime's kernel): the
   * driver's own layout of it, once; the registration changes the generation, so the lookup is
   * fresh. Host stub addresses are never handed to the driver. */
  if ((!plan || plan->source == KPARAM_SOURCE_OPAQUE) && how == SHIM_KPARAM_HANDLE &&
      shim_translate_end && learn_layout(func) == 0)
    plan = plan_of(func, how);
  if (!plan || plan->source == KPARAM_SOURCE_OPAQUE) {
    report_untranslatable(func, plan);
    return 0;
  }
  if (!plan->needs_translation) return 0;
  struct word_context ctx = {plan, shim_translate_end != 0, shim_kparam_check != 0, 0};
  int rc = 0;
  if (args) rc = prepare_args(plan, args, &ctx, frame);
  else if (extra) rc = prepare_extra(plan, extra, &ctx, frame);
  if (rc == 0 && ctx.bad) rc = -EFAULT;
  if (rc < 0 && rc != -EFAULT)
    shim_warn("kparam: kernel %s: arguments not translated (%s)", plan->name, strerror(-rc));
  return rc == -ENOMEM || rc == -EFAULT ? rc : 0;
}

void shim_kparam_frame_release(struct shim_kparam_frame *frame)
{
  if (SHIM_UNLIKELY(frame->heap != NULL)) free(frame->heap);
  frame->heap = NULL;
}

/* ---- kept arguments (graph nodes, kparam_graphs.c) ---- */

struct shim_kparam_blob *shim_kparam_blob_new(size_t size)
{
  struct shim_kparam_blob *blob = calloc(1, sizeof *blob + size);
  if (!blob) return NULL;
  atomic_init(&blob->refs, 1);
  blob->size = size;
  return blob;
}

void shim_kparam_blob_put(struct shim_kparam_blob *blob)
{
  if (blob && atomic_fetch_sub(&blob->refs, 1) == 1) free(blob);
}

int shim_kparam_args_keep(const void *func, enum shim_kparam_func how, void **args, size_t header,
                          struct shim_kparam_blob **out)
{
  *out = NULL;
  const struct kparam_plan *plan = plan_of(func, how);
  if (!plan || plan->source == KPARAM_SOURCE_OPAQUE || !plan->needs_translation || !args)
    return 0;
  size_t at = (header + 15) & ~(size_t)15;
  size_t argv_at = at;
  at += ((size_t)plan->param_count * sizeof(void *) + 15) & ~(size_t)15;
  size_t values_at = at;
  for (uint32_t i = 0; i < plan->param_count; i++) at += (plan->params[i].size + 15u) & ~15u;
  struct shim_kparam_blob *blob = shim_kparam_blob_new(at);
  if (!blob) return -ENOMEM;
  blob->args = (void **)(blob->data + argv_at);
  for (uint32_t i = 0; i < plan->param_count; i++) {
    blob->args[i] = blob->data + values_at;
    memcpy(blob->args[i], args[i], plan->params[i].size);
    values_at += (plan->params[i].size + 15u) & ~15u;
  }
  *out = blob;
  return 0;
}
