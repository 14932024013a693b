/* kparam: kernel parameter layouts from fatbinary metadata, and translation of launch arguments.
 * The whole contract of the module: the shim registers fatbins and kernels as the runtime sees
 * them, looks a plan up per launch, and lets kparam rewrite the pointer words of the arguments.
 * A plan stays valid until its module is unregistered, even if its kernel is registered again
 * meanwhile (the replaced plan is retired, not freed: another thread may be launching with it).
 * Every function returning int returns 0 (or a count) on success and -errno on failure. */
#ifndef CUDAW_KPARAM_H
#define CUDAW_KPARAM_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a parameter holds, as far as the mangled name tells. */
enum kparam_kind {
  KPARAM_KIND_UNKNOWN = 0,   /* no type information (extern "C", undecodable name) */
  KPARAM_KIND_POINTER = 1,   /* pointer or reference: always translated */
  KPARAM_KIND_SCALAR = 2,    /* builtin arithmetic type: never translated */
  KPARAM_KIND_AGGREGATE = 3, /* class, struct, union, vector, closure: aligned words scanned */
};

/* Where a plan's layout came from, best first. */
enum kparam_source {
  KPARAM_SOURCE_OPAQUE = 0,          /* nothing known: arguments cannot be translated */
  KPARAM_SOURCE_CUBIN_EXACT = 1,     /* .nv.info of a cubin for the preferred arch */
  KPARAM_SOURCE_CUBIN_OTHER_ARCH = 2,/* .nv.info of a cubin for another arch (same layout) */
  KPARAM_SOURCE_PTX = 3,             /* the .entry parameter list of PTX text */
  KPARAM_SOURCE_HOST_STUB = 4,       /* machine code of the host launch stub (best effort) */
  KPARAM_SOURCE_DRIVER = 5,          /* offsets and sizes the driver reports (no image seen) */
};

struct kparam_param {
  uint32_t ordinal;      /* position in the kernel's signature, 0-based */
  uint32_t offset;       /* byte offset in the packed parameter buffer */
  uint32_t size;         /* bytes */
  enum kparam_kind kind;
};

/* One 8-byte word that may hold a device pointer: param index and byte offset inside the param.
 * Its offset in the packed buffer (param offset + offset_in_param) is a multiple of 8. */
struct kparam_word {
  uint32_t param;
  uint32_t offset_in_param;
};

/* A kernel's layout plus the precomputed list of words to translate. Immutable once returned;
 * owned by the registry (or by the image that returned it) and valid until that is freed. */
struct kparam_plan {
  const char *name;                  /* device (usually mangled) name; "" if unknown */
  enum kparam_source source;
  int sm_arch;                       /* arch of the cubin the layout came from, 0 otherwise */
  uint32_t param_count;
  uint32_t param_bytes;              /* total size of the packed parameter buffer */
  const struct kparam_param *params; /* param_count entries, ordered by ordinal */
  uint32_t word_count;
  const struct kparam_word *words;   /* pointer params, and every aligned word of
                                        aggregate/unknown params (conservative scan) */
  size_t scratch_bytes;              /* scratch kparam_translate_args may need at most */
  bool needs_translation;            /* word_count > 0 */
};

/* ---- Logging ---- */

/* level: 0 warning, 1 info. msg is NUL-terminated without a newline, valid during the call. */
typedef void (*kparam_log_fn)(int level, const char *msg);

/* Route kparam's warnings to fn (NULL: print to stderr). Thread-safe; affects later messages. */
void kparam_set_log(kparam_log_fn fn);

/* ---- Registry (thread-safe; registration only records pointers, parsing happens lazily) ---- */

typedef struct kparam_module *kparam_module_key;

/* Arch to prefer for layouts, e.g. 90 for sm_90. Call once before lookups; later calls only
 * affect plans not built yet. */
void kparam_set_device_arch(int sm);

/* Record a fatbin as __cudaRegisterFatBinary receives it. wrapper: the 24-byte wrapper
 * {u32 magic 0x466243B1, u32 version, data, filename_or_fatbins} (version 1: data is a container;
 * version 2: data is a container and filename_or_fatbins a NULL-terminated array of prelinked
 * containers), or directly a fatbin container, a cubin ELF or PTX text. The memory must stay
 * mapped until kparam_unregister_fatbin. Returns a key (never NULL unless out of memory). */
kparam_module_key kparam_register_fatbin(const void *wrapper);

/* Forget a module and the kernels registered against it. Plans returned for them become invalid.*/
void kparam_unregister_fatbin(kparam_module_key key);

/* __cudaRegisterFunction: host_fun launches device_name (copied) from module key.
 * Returns 0, -EINVAL (NULL argument) or -ENOMEM. Re-registering a host_fun replaces it. */
int kparam_register_function(kparam_module_key key, const void *host_fun, const char *device_name);

/* __cudaGetKernel: kernel_handle stands for host_fun (registered before or later).
 * Returns 0, -EINVAL or -ENOMEM. */
int kparam_register_kernel_handle(const void *kernel_handle, const void *host_fun);

/* cudaLibraryLoadData: image (fatbin container, wrapper, cubin or PTX), size in bytes or 0 when
 * unknown. The image must stay mapped while the library is in use. Returns 0, -EINVAL, -ENOMEM. */
int kparam_register_library(const void *lib_handle, const void *image, size_t size_or_0);

/* cudaLibraryGetKernel: kernel_handle is kernel name (copied) of library lib_handle.
 * Returns 0, -EINVAL, -ENOENT (unknown library) or -ENOMEM. */
int kparam_register_library_kernel(const void *kernel_handle, const void *lib_handle,
                                   const char *name);

/* A kernel handle whose image was never seen (a static runtime may load its fatbins by private
 * paths), with each parameter's offset and size as the driver reports them (cuFuncGetParamInfo):
 * its plan takes kinds from the name when it is mangled and scans every aligned word of the
 * others. Replaces what the handle stood for. Returns 0, -EINVAL or -ENOMEM. */
int kparam_register_kernel_layout(const void *kernel_handle, const char *name, uint32_t count,
                                  const uint32_t *offsets, const uint32_t *sizes);

/* cudaLibraryUnload: forget the library, its module and its kernels (plans become invalid). */
void kparam_unregister_library(const void *lib_handle);

/* The image a wrapper stands for (its version-1 container), or data itself when data is no
 * wrapper; and the size in bytes of a fatbin container, cubin ELF or PTX text at data, read from
 * its headers (0 when unrecognised). For copying a library image before its owner frees it. */
const void *kparam_image_data(const void *data);
size_t kparam_image_extent(const void *data);

/* The plan for a host function / kernel handle. Never NULL for a registered kernel (an opaque
 * plan when nothing is known); NULL only if it was never registered. The first lookup parses;
 * later ones are a hash lookup. Thread-safe. */
const struct kparam_plan *kparam_plan_for_host_fun(const void *host_fun);
const struct kparam_plan *kparam_plan_for_kernel(const void *kernel_handle);

/* A number that changes whenever a registration or unregistration could change what the lookups
 * above return: a caller may cache a lookup and reuse it while this stays the same (read it
 * before the lookup). Lock-free. */
uint64_t kparam_registry_generation(void);

/* ---- Translation ---- */

/* Called per candidate word. If *word holds a virtual device pointer, replace it with the real
 * one and return 1; return 0 if it is not one; -errno on error (translation stops). */
typedef int (*kparam_translate_fn)(void *ctx, uint64_t *word);

/* Translate the args[] of a launch. args_in has plan->param_count entries and is never modified,
 * nor is the storage it points to. args_out (param_count entries) receives args_in[i], or a
 * pointer into scratch where a changed copy of parameter i lives. scratch needs at most
 * plan->scratch_bytes. Only a parameter's own bytes are read. Returns the number of words
 * replaced, -ENOTSUP for an opaque plan, -ENOSPC if scratch is too small, -EINVAL, or the
 * callback's error. */
int kparam_translate_args(const struct kparam_plan *plan, void **args_in, void **args_out,
                          void *scratch, size_t scratch_size, kparam_translate_fn fn, void *ctx);

/* The same, inline: on the launch path, where fn is a known function, the compiler inlines it
 * into the loop (an indirect call per word costs as much as the translation itself). */
static inline int kparam_translate_args_inline(const struct kparam_plan *plan, void **args_in,
                                               void **args_out, void *scratch,
                                               size_t scratch_size, kparam_translate_fn fn,
                                               void *ctx) {
  if (!plan || !fn || (plan->param_count && (!args_in || !args_out))) return -EINVAL;
  if (plan->source == KPARAM_SOURCE_OPAQUE) return -ENOTSUP;
  for (uint32_t i = 0; i < plan->param_count; i++) args_out[i] = args_in[i];
  int replaced = 0;
  size_t used = 0;
  uint32_t copied_param = UINT32_MAX; /* the param whose copy is at the end of scratch */
  for (uint32_t w = 0; w < plan->word_count; w++) {
    const struct kparam_word *word = &plan->words[w];
    const struct kparam_param *param = &plan->params[word->param];
    const unsigned char *source = (const unsigned char *)args_out[word->param];
    if (!source) return -EINVAL;
    uint64_t value;
    memcpy(&value, source + word->offset_in_param, sizeof value);
    int rc = fn(ctx, &value);
    if (rc < 0) return rc;
    if (rc == 0) continue;
    if (copied_param != word->param) { /* words come grouped by param, in order */
      size_t bytes = (param->size + 7u) & ~(size_t)7u;
      if (!scratch || scratch_size - used < bytes || used > scratch_size) return -ENOSPC;
      unsigned char *copy = (unsigned char *)scratch + used;
      if (param->size == sizeof value) /* a pointer: no call to memcpy */
        memcpy(copy, args_in[word->param], sizeof value);
      else
        memcpy(copy, args_in[word->param], param->size);
      args_out[word->param] = copy;
      used += bytes;
      copied_param = word->param;
    }
    memcpy((unsigned char *)args_out[word->param] + word->offset_in_param, &value, sizeof value);
    replaced++;
  }
  return replaced;
}

/* Translate in place the packed parameter buffer of the `extra` launch form
 * (CU_LAUNCH_PARAM_BUFFER_POINTER); pass a copy. size must be >= plan->param_bytes. Returns the
 * number of words replaced, -ENOTSUP (opaque), -EINVAL, or the callback's error. */
int kparam_translate_buffer(const struct kparam_plan *plan, void *packed_params, size_t size,
                            kparam_translate_fn fn, void *ctx);

/* ---- Images: parse a whole fatbin outside the registry (tool, tests) ---- */

struct kparam_image;

/* Parse data: a .nv_fatbin section (one or more containers), one container, a cubin ELF or PTX
 * text, of size bytes. label names the image in warnings. prefer_sm as in
 * kparam_set_device_arch (0: none). Every entry is parsed. On success *out owns the parsed result
 * (data may be freed afterwards). Returns 0, -EBADMSG (corrupt, a warning names the offset),
 * -EINVAL or -ENOMEM. */
int kparam_image_parse(const void *data, size_t size, const char *label, int prefer_sm,
                       struct kparam_image **out);

/* Number of distinct kernels, and the i-th one's plan (sorted by name; owned by the image). */
size_t kparam_image_kernel_count(const struct kparam_image *image);
const struct kparam_plan *kparam_image_kernel(const struct kparam_image *image, size_t i);

/* The plan for one kernel name, or NULL. */
const struct kparam_plan *kparam_image_find(const struct kparam_image *image, const char *name);

/* Entries seen: total, cubins, PTX. Any pointer may be NULL. */
void kparam_image_stats(const struct kparam_image *image, size_t *entries, size_t *cubins,
                        size_t *ptx);

void kparam_image_free(struct kparam_image *image);

/* ---- Names ---- */

const char *kparam_kind_name(enum kparam_kind kind);     /* "pointer", "scalar", ... */
const char *kparam_source_name(enum kparam_source src); /* "cubin-exact", ... */

/* Decode the parameter kinds of an Itanium-mangled function name into kinds[0..max).
 * Returns the number of parameters (may exceed max), or -EINVAL if name is not a mangled
 * function name or cannot be decoded (extern "C" names give -EINVAL). */
int kparam_demangle_kinds(const char *name, enum kparam_kind *kinds, size_t max);

/* Best-effort analysis of an nvcc host launch stub at host_fun: the sizes of the argument
 * slots the stub stores into its void *args[] array, in order, into sizes[0..max). Returns the
 * slot count or -ENOENT when the code does not look like a launch stub. */
int kparam_stub_arg_sizes(const void *host_fun, uint32_t *sizes, size_t max);

#ifdef __cplusplus
}
#endif
#endif
