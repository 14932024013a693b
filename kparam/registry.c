/* The registry: what the shim learns from __cudaRegisterFatBinary, __cudaRegisterFunction,
 * __cudaGetKernel and cudaLibrary*, kept as pointers until a kernel is first looked up; then its
 * module's images are opened, the kernel's plan is built once and cached. Thread-safe. */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PRELINKED 65536

struct kparam_module {
  const void *data;              /* container, cubin or PTX */
  size_t size;                   /* 0: find out from the headers */
  const void *const *prelinked;  /* version-2 wrappers: NULL-terminated containers */
  char label[160];
  bool opened;
  struct image **images;
  size_t image_count;
  /* What unregistering must undo, so that it never walks the whole registry: a process exits
   * unregistering thousands of modules (2,789 for PyTorch) with tens of thousands of kernels. */
  struct function *functions;    /* every function made for it, live or retired */
  const void *library;           /* its handle in `libraries`, NULL for a fatbin */
  uint64_t *handles;             /* kernel handles ever mapped to one of its functions */
  size_t handle_count, handle_capacity;
  bool handles_lost;             /* out of memory recording one: search the whole map */
};

struct function {
  struct function *retired_next; /* on the retired list once replaced */
  struct function *module_next;  /* the module's `functions` */
  const void *host_fun; /* NULL for library kernels */
  struct kparam_module *module;
  char *name;
  bool retired;
  _Atomic(struct kparam_plan *) plan;
};

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
/* Bumped by every change under the write lock, so callers may cache lookups (see kparam.h). */
static _Atomic uint64_t generation;

static void write_lock(void) { pthread_rwlock_wrlock(&lock); }
static void write_unlock(void) {
  atomic_fetch_add_explicit(&generation, 1, memory_order_release);
  pthread_rwlock_unlock(&lock);
}

uint64_t kparam_registry_generation(void) {
  return atomic_load_explicit(&generation, memory_order_acquire);
}
static struct hash_map modules;               /* module -> module: the registered ones */
static struct hash_map functions_by_host_fun; /* host_fun -> function */
static struct hash_map functions_by_handle;   /* kernel or library-kernel handle -> function
                                                 (library kernels are owned here) */
static struct hash_map libraries;             /* lib_handle -> module */
static struct hash_map pending_handles;       /* kernel handle -> host_fun, not registered yet */
static atomic_int device_arch;
/* Functions replaced by a re-registration: their plans may still be in use by a launch on
 * another thread, so they are freed only when their module is unregistered. */
static struct function *retired;

static uint64_t key_of(const void *p) { return (uint64_t)(uintptr_t)p; }

void kparam_set_device_arch(int sm) { atomic_store(&device_arch, sm); }

static struct kparam_module *module_new(const void *data, size_t size) {
  struct kparam_module *module = calloc(1, sizeof *module);
  if (!module) return NULL;
  module->data = data;
  module->size = size;
  snprintf(module->label, sizeof module->label, "%p", data);
  return module;
}

kparam_module_key kparam_register_fatbin(const void *wrapper) {
  if (!wrapper) return NULL;
  uint32_t magic, version;
  memcpy(&magic, wrapper, 4);
  struct kparam_module *module;
  if (magic == FATBIN_WRAPPER_MAGIC) {
    const void *data, *extra;
    memcpy(&version, (const char *)wrapper + 4, 4);
    memcpy(&data, (const char *)wrapper + 8, sizeof data);
    memcpy(&extra, (const char *)wrapper + 16, sizeof extra);
    module = module_new(data, 0);
    if (!module) return NULL;
    if (version == 2) module->prelinked = extra;
    else if (version == 1 && extra)
      snprintf(module->label, sizeof module->label, "%.140s (%p)", (const char *)extra, data);
  } else {
    module = module_new(wrapper, 0);
    if (!module) return NULL;
  }
  write_lock();
  int rc = hash_put(&modules, key_of(module), module);
  write_unlock();
  if (rc) {
    free(module);
    return NULL;
  }
  return module;
}

static size_t extent_of(const void *data) {
  if (!data) return 0;
  size_t size = fatbin_container_extent(data);
  if (!size) size = cubin_extent(data);
  if (!size) size = strnlen(data, KPARAM_MAX_IMAGE_BYTES);
  return size;
}

static void open_one(struct kparam_module *module, const void *data, size_t size) {
  struct image *image = NULL;
  if (!size) size = extent_of(data);
  image_open(data, size, module->label, &image); /* warns itself; keeps the good entries */
  if (image) module->images[module->image_count++] = image;
}

/* Open the module's images on first use. Called with the write lock held. */
static void module_open(struct kparam_module *module) {
  if (module->opened) return;
  module->opened = true;
  size_t prelinked = 0;
  while (module->prelinked && prelinked < MAX_PRELINKED && module->prelinked[prelinked])
    prelinked++;
  module->images = calloc(prelinked + 1, sizeof *module->images);
  if (!module->images) return;
  if (module->data) open_one(module, module->data, module->size);
  for (size_t i = 0; i < prelinked; i++) open_one(module, module->prelinked[i], 0);
}

/* Layout from the host stub's machine code: sizes only, natural alignment assumed. */
static struct kparam_plan *plan_from_stub(const struct function *fn) {
  uint32_t sizes[256];
  int count = fn->host_fun ? kparam_stub_arg_sizes(fn->host_fun, sizes, 256) : -ENOENT;
  if (count < 0 || count > 256) return NULL;
  struct kparam_param params[256];
  uint32_t cursor = 0;
  for (int i = 0; i < count; i++) {
    uint32_t align = sizes[i] & (~sizes[i] + 1); /* largest power of two dividing it */
    if (align > 8) align = 8;
    cursor = (cursor + align - 1) & ~(align - 1);
    params[i] = (struct kparam_param){(uint32_t)i, cursor, sizes[i], KPARAM_KIND_UNKNOWN};
    cursor += sizes[i];
  }
  struct kparam_layout layout = {fn->name, (uint32_t)count, cursor, params};
  return plan_build(&layout, KPARAM_SOURCE_HOST_STUB, 0);
}

/* Build fn's plan: best layout over the module's images, else the stub, else opaque. */
static struct kparam_plan *build_plan(struct function *fn) {
  const struct kparam_layout *best = NULL;
  enum kparam_source best_source = KPARAM_SOURCE_OPAQUE;
  int best_sm = 0, prefer = atomic_load(&device_arch);
  if (fn->module) {
    module_open(fn->module);
    for (size_t i = 0; i < fn->module->image_count; i++) {
      enum kparam_source source;
      int sm;
      const struct kparam_layout *layout =
          image_lookup(fn->module->images[i], fn->name, prefer, &source, &sm);
      if (layout && (!best || source < best_source)) {
        best = layout;
        best_source = source;
        best_sm = sm;
      }
    }
  }
  struct kparam_plan *plan = best ? plan_build(best, best_source, best_sm) : NULL;
  if (!plan && !best) {
    plan = plan_from_stub(fn);
    if (!plan)
      kparam_warn("kernel %s (fatbin %s): no parameter layout found; its arguments will not be "
                  "translated", fn->name, fn->module ? fn->module->label : "?");
  }
  return plan ? plan : plan_opaque(fn->name);
}

static const struct kparam_plan *plan_of(struct hash_map *map, const void *key) {
  pthread_rwlock_rdlock(&lock);
  struct function *fn = hash_get(map, key_of(key));
  struct kparam_plan *plan = fn ? atomic_load(&fn->plan) : NULL;
  pthread_rwlock_unlock(&lock);
  if (plan || !fn) return plan;
  write_lock();
  fn = hash_get(map, key_of(key)); /* may have gone or been built meanwhile */
  if (fn && !(plan = atomic_load(&fn->plan))) {
    plan = build_plan(fn);
    atomic_store(&fn->plan, plan);
  }
  write_unlock();
  return plan;
}

const struct kparam_plan *kparam_plan_for_host_fun(const void *host_fun) {
  return host_fun ? plan_of(&functions_by_host_fun, host_fun) : NULL;
}

const struct kparam_plan *kparam_plan_for_kernel(const void *kernel_handle) {
  return kernel_handle ? plan_of(&functions_by_handle, kernel_handle) : NULL;
}

static struct function *function_new(struct kparam_module *module, const void *host_fun,
                                     const char *name) {
  struct function *fn = calloc(1, sizeof *fn);
  if (!fn) return NULL;
  fn->name = strdup(name);
  if (!fn->name) {
    free(fn);
    return NULL;
  }
  fn->module = module;
  fn->host_fun = host_fun;
  return fn;
}

/* Write lock held: fn (made for module) becomes one of its functions. */
static void module_adopt(struct function *fn) {
  if (!fn->module) return;
  fn->module_next = fn->module->functions;
  fn->module->functions = fn;
}

/* Write lock held: fn was replaced and goes on the retired list (see kparam.h). */
static void retire(struct function *fn) {
  fn->retired = true;
  fn->retired_next = retired;
  retired = fn;
}

/* Write lock held: kernel handle -> fn, remembered by fn's module for its unregistration. */
static int put_handle(uint64_t handle, struct function *fn) {
  int rc = hash_put(&functions_by_handle, handle, fn);
  struct kparam_module *module = fn->module;
  if (rc || !module) return rc;
  if (module->handle_count == module->handle_capacity) {
    size_t capacity = module->handle_capacity ? 2 * module->handle_capacity : 8;
    uint64_t *grown = realloc(module->handles, capacity * sizeof *grown);
    if (!grown) {
      module->handles_lost = true;
      return 0;
    }
    module->handles = grown;
    module->handle_capacity = capacity;
  }
  module->handles[module->handle_count++] = handle;
  return 0;
}

/* Write lock held: drop every kernel handle that stands for a function of module. */
static void forget_module_handles(struct kparam_module *module) {
  for (size_t i = 0; i < module->handle_count; i++) {
    struct function *fn = hash_get(&functions_by_handle, module->handles[i]);
    if (fn && fn->module == module) hash_remove(&functions_by_handle, module->handles[i]);
  }
  for (size_t i = 0; module->handles_lost && i < functions_by_handle.capacity; i++) {
    struct function *fn;
    while (functions_by_handle.keys[i] && (fn = functions_by_handle.values[i]) &&
           fn->module == module)
      hash_remove(&functions_by_handle, functions_by_handle.keys[i]);
  }
}

static void function_free(struct function *fn) {
  if (!fn) return;
  plan_free(atomic_load(&fn->plan));
  free(fn->name);
  free(fn);
}

/* Drop every handle that points at fn. Write lock held. */
static void forget_handles_of(const struct function *fn) {
  for (size_t i = 0; i < functions_by_handle.capacity; i++)
    while (functions_by_handle.keys[i] && functions_by_handle.values[i] == fn)
      hash_remove(&functions_by_handle, functions_by_handle.keys[i]);
}

int kparam_register_function(kparam_module_key key, const void *host_fun, const char *device_name) {
  if (!key || !host_fun || !device_name) return -EINVAL;
  struct function *fn = function_new(key, host_fun, device_name);
  if (!fn) return -ENOMEM;
  write_lock();
  struct function *old = hash_get(&functions_by_host_fun, key_of(host_fun));
  int rc = hash_put(&functions_by_host_fun, key_of(host_fun), fn);
  if (rc) {
    write_unlock();
    function_free(fn);
    return rc;
  }
  module_adopt(fn);
  if (old) {
    forget_handles_of(old);
    retire(old);
  }
  /* A __cudaGetKernel that came first (rare: the map is empty but for those). */
  for (size_t i = 0; rc == 0 && pending_handles.count && i < pending_handles.capacity; i++)
    while (pending_handles.keys[i] && pending_handles.values[i] == host_fun) {
      uint64_t handle = pending_handles.keys[i];
      hash_remove(&pending_handles, handle);
      rc = put_handle(handle, fn);
    }
  write_unlock();
  return rc;
}

int kparam_register_kernel_handle(const void *kernel_handle, const void *host_fun) {
  if (!kernel_handle || !host_fun) return -EINVAL;
  write_lock();
  struct function *fn = hash_get(&functions_by_host_fun, key_of(host_fun));
  int rc = fn ? put_handle(key_of(kernel_handle), fn)
              : hash_put(&pending_handles, key_of(kernel_handle), (void *)host_fun);
  write_unlock();
  return rc;
}

int kparam_register_library(const void *lib_handle, const void *image, size_t size_or_0) {
  if (!lib_handle || !image) return -EINVAL;
  struct kparam_module *module;
  uint32_t magic;
  memcpy(&magic, image, 4);
  if (magic == FATBIN_WRAPPER_MAGIC) {
    module = kparam_register_fatbin(image);
    if (!module) return -ENOMEM;
    write_lock();
  } else {
    module = module_new(image, size_or_0);
    if (!module) return -ENOMEM;
    snprintf(module->label, sizeof module->label, "library %p (image %p)", lib_handle, image);
    write_lock();
    if (hash_put(&modules, key_of(module), module) != 0) {
      write_unlock();
      free(module);
      return -ENOMEM;
    }
  }
  module->library = lib_handle;
  int rc = hash_put(&libraries, key_of(lib_handle), module);
  write_unlock();
  return rc;
}

int kparam_register_kernel_layout(const void *kernel_handle, const char *name, uint32_t count,
                                  const uint32_t *offsets, const uint32_t *sizes) {
  if (!kernel_handle || !name || (count && (!offsets || !sizes))) return -EINVAL;
  struct kparam_param stack_params[64], *params = stack_params;
  if (count > 64 && !(params = malloc(count * sizeof *params))) return -ENOMEM;
  uint32_t bytes = 0;
  for (uint32_t i = 0; i < count; i++) {
    params[i] = (struct kparam_param){i, offsets[i], sizes[i], KPARAM_KIND_UNKNOWN};
    if (offsets[i] + sizes[i] > bytes) bytes = offsets[i] + sizes[i];
  }
  struct kparam_layout layout = {(char *)name, count, bytes, params};
  struct kparam_plan *plan = plan_build(&layout, KPARAM_SOURCE_DRIVER, 0);
  if (params != stack_params) free(params);
  struct function *fn = plan ? function_new(NULL, NULL, name) : NULL;
  if (!fn) {
    plan_free(plan);
    return -ENOMEM;
  }
  atomic_store(&fn->plan, plan);
  write_lock();
  struct function *old = hash_get(&functions_by_handle, key_of(kernel_handle));
  int rc = hash_put(&functions_by_handle, key_of(kernel_handle), fn);
  if (rc == 0 && old && !old->host_fun) retire(old); /* a library kernel or an earlier layout */
  write_unlock();
  if (rc) function_free(fn);
  return rc;
}

int kparam_register_library_kernel(const void *kernel_handle, const void *lib_handle,
                                   const char *name) {
  if (!kernel_handle || !lib_handle || !name) return -EINVAL;
  write_lock();
  struct kparam_module *module = hash_get(&libraries, key_of(lib_handle));
  int rc = -ENOENT;
  if (module) {
    struct function *fn = function_new(module, NULL, name);
    struct function *old = hash_get(&functions_by_handle, key_of(kernel_handle));
    rc = fn ? put_handle(key_of(kernel_handle), fn) : -ENOMEM;
    if (rc == 0) module_adopt(fn);
    if (rc == 0 && old && !old->host_fun) retire(old); /* library kernels are ours */
    else if (rc) function_free(fn);
  }
  write_unlock();
  return rc;
}

void kparam_unregister_fatbin(kparam_module_key key) {
  if (!key) return;
  write_lock();
  if (!hash_remove(&modules, key_of(key))) { /* not registered (any more) */
    write_unlock();
    return;
  }
  forget_module_handles(key); /* while its functions still say which module they belong to */
  /* Live functions; retired ones are freed from the retired list below. */
  for (struct function *fn = key->functions, *next; fn; fn = next) {
    next = fn->module_next;
    if (fn->retired) continue;
    if (fn->host_fun && hash_get(&functions_by_host_fun, key_of(fn->host_fun)) == fn)
      hash_remove(&functions_by_host_fun, key_of(fn->host_fun));
    function_free(fn);
  }
  if (key->library && hash_get(&libraries, key_of(key->library)) == key)
    hash_remove(&libraries, key_of(key->library));
  for (struct function **at = &retired; *at;) {
    struct function *fn = *at;
    if (fn->module == key) {
      *at = fn->retired_next;
      function_free(fn);
    } else {
      at = &fn->retired_next;
    }
  }
  write_unlock();
  for (size_t i = 0; i < key->image_count; i++) image_close(key->images[i]);
  free(key->images);
  free(key->handles);
  free(key);
}

void kparam_unregister_library(const void *lib_handle) {
  if (!lib_handle) return;
  pthread_rwlock_rdlock(&lock);
  struct kparam_module *module = hash_get(&libraries, key_of(lib_handle));
  pthread_rwlock_unlock(&lock);
  kparam_unregister_fatbin(module);
}

const void *kparam_image_data(const void *data) {
  uint32_t magic;
  if (!data) return NULL;
  memcpy(&magic, data, 4);
  if (magic != FATBIN_WRAPPER_MAGIC) return data;
  const void *inner;
  memcpy(&inner, (const char *)data + 8, sizeof inner);
  return inner;
}

size_t kparam_image_extent(const void *data) { return extent_of(data); }
