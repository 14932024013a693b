/* The checkpoint module inside the library: struct ckpt_host_ops over the API gate, vmem and the
 * real runtime. The module calls these from its own threads, which are never inside an API call,
 * so they use the real runtime directly (SHIM_REAL), never cudaw's gated exports. Started by
 * shim_init (no CUDA call there); nothing here creates a CUDA context: while vmem has not
 * started there is nothing to drain or save, and the devices count as none. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "ckpt.h"
#include "delta_kernel_image.h"
#include "options.h"
#include "shim_ckpt.h"
#include "shim_generated.h"
#include "shim_gpu_share.h"
#include "shim_profile.h"
#include "shim_sched.h"
#include "shim_texture.h"
#include "shim_vmem.h"
#include "shim_vmm.h"
#include "vmem.h"

/* Defined by the launch-translation glue when it is linked in: refreshes whatever it caches of
 * real addresses after vmem re-created memory at new ones (translate policy). 0 or -errno. */
extern int shim_kparam_relocated(void) __attribute__((weak));

static _Atomic int exiting; /* set by the destructor: the real runtime may be gone */

/* The program's own VMM mappings: the driver layer keeps them (driver/vmm.c) and offers them here
 * at start (shim_ckpt_use_vmm); without it there are none. */
static _Atomic(const struct shim_vmm_ops *) vmm_ops;

void shim_ckpt_use_vmm(const struct shim_vmm_ops *ops)
{
  atomic_store_explicit(&vmm_ops, ops, memory_order_release);
}

static const struct shim_vmm_ops *vmm(void)
{
  return atomic_load_explicit(&vmm_ops, memory_order_acquire);
}

static void vmm_totals(uint64_t *mapped_bytes, uint64_t *kept_bytes)
{
  *mapped_bytes = *kept_bytes = 0;
  if (vmm()) vmm()->totals(mapped_bytes, kept_bytes);
}

static int vmm_for_each(int (*cb)(const struct shim_vmm_region *region, void *ctx), void *ctx)
{
  return vmm() ? vmm()->for_each(cb, ctx) : 0;
}

static int vmm_release_all(void)
{
  return vmm() ? vmm()->release_all() : 0;
}

static int vmm_recreate_all(uint64_t *shortfall_bytes)
{
  *shortfall_bytes = 0;
  return vmm() ? vmm()->recreate_all(shortfall_bytes) : 0;
}

/* The last failed runtime call of this (module) thread, for last_error: the -errno below keeps
 * only a class of the cause. */
static SHIM_TLS const char *failed_call;
static SHIM_TLS cudaError_t failed_error;

static int errno_from_cuda(cudaError_t error, const char *what)
{
  if (error == cudaSuccess) return 0;
  failed_call = what;
  failed_error = error;
  shim_debug("checkpoint: %s: %s", what, SHIM_REAL(cudaGetErrorName)
                                             ? SHIM_REAL(cudaGetErrorName)(error) : "?");
  switch (error) {
  case cudaErrorMemoryAllocation: return -ENOMEM;
  case cudaErrorInvalidValue: case cudaErrorInvalidHostPointer: return -EINVAL;
  case cudaErrorInvalidDevice: case cudaErrorNoDevice: return -ENODEV;
  case cudaErrorNotSupported: return -ENOTSUP;
  /* The process is exiting: a background thread's page-locking met the runtime's unload (the
   * reserve's "page-locking it failed (Input/output error)", H100 2026-11-27). */
  case cudaErrorCudartUnloading: return -ESHUTDOWN;
  case cudaErrorHostMemoryAlreadyRegistered: return -EEXIST;
  case cudaErrorHostMemoryNotRegistered: return -ENOENT;
  case cudaErrorNotPermitted: return -EPERM;
  case cudaErrorInitializationError: case cudaErrorInsufficientDriver: return -ENXIO;
  default: return -EIO;
  }
}

static void last_error(void *ctx, char *buf, size_t len)
{
  (void)ctx;
  if (!failed_call) {
    snprintf(buf, len, "%s", "");
    return;
  }
  const char *name = SHIM_REAL(cudaGetErrorName) ? SHIM_REAL(cudaGetErrorName)(failed_error) : NULL;
  const char *text = SHIM_REAL(cudaGetErrorString) ? SHIM_REAL(cudaGetErrorString)(failed_error)
                                                   : NULL;
  snprintf(buf, len, "%s returned %s (%d)%s%s", failed_call, name ? name : "error",
           (int)failed_error, text ? ": " : "", text ? text : "");
}

/* Everything below runs on the module's threads, outside any API call. While they are in the
 * real runtime or in vmem, shim_depth is raised, so that a call the real runtime makes to one
 * of its own exports (bound to cudaw's wrapper by symbol interposition) passes the closed gate
 * instead of waiting for the pause it is part of. */
static cudaError_t leave(cudaError_t error)
{
  shim_depth--;
  return error;
}

/* Call the real runtime's `name`, or fail with -ENOSYS where the loaded runtime lacks it. */
#define REAL_CALL(name, ...)                                                                  \
  (SHIM_REAL(name) ? (shim_depth++, errno_from_cuda(leave(SHIM_REAL(name)(__VA_ARGS__)), #name)) \
                   : -ENOSYS)

/* The device this (module) thread last made current, to skip redundant cudaSetDevice calls. */
static SHIM_TLS int thread_device = -1;

static int use_device(int device)
{
  if (thread_device == device) return 0;
  int rc = REAL_CALL(cudaSetDevice, device);
  if (rc == 0) thread_device = device;
  return rc;
}

/* ---- gate ---------------------------------------------------------------------------------- */

static int gate_close(void *ctx, uint64_t timeout_ns)
{
  (void)ctx;
  return shim_gate_close(timeout_ns); /* reopens the gate itself on -ETIMEDOUT */
}

static void gate_open(void *ctx)
{
  (void)ctx;
  shim_gate_open();
}

/* ---- devices ------------------------------------------------------------------------------- */

/* Whether cudaw holds anything a checkpoint moves: vmem's memory or the program's own mappings. */
static int holds_memory(void)
{
  if (shim_vmem_running()) return 1;
  uint64_t mapped, kept;
  vmm_totals(&mapped, &kept);
  return mapped > kept;
}

static int device_count(void *ctx, int *count)
{
  (void)ctx;
  *count = 0;
  if (!holds_memory()) return 0; /* no virtual memory yet: nothing on any device */
  return REAL_CALL(cudaGetDeviceCount, count);
}

typedef int (*primary_ctx_state_fn)(int device, unsigned *flags, int *active);

/* Whether `device` has a context, without creating one: the driver's primary context state where
 * the runtime hands out cuDevicePrimaryCtxGetState (runtime and driver ordinals agree: both see
 * CUDA_VISIBLE_DEVICES), and in any case when vmem holds memory there. */
static int device_has_context(int device)
{
  struct vmem_stats stats;
  if (vmem_get_stats(device, &stats) == 0 && stats.chunks > 0) return 1;
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  int active = 0;
  if (REAL_CALL(cudaGetDriverEntryPointByVersion, "cuDevicePrimaryCtxGetState", &fn, 12000,
                cudaEnableDefault, &status) == 0 &&
      status == cudaDriverEntryPointSuccess && fn) {
    unsigned flags = 0;
    shim_depth++;
    if (((primary_ctx_state_fn)fn)(device, &flags, &active) != 0) active = 0;
    shim_depth--;
  }
  return active;
}

static int device_drain(void *ctx)
{
  int count = 0, rc = device_count(ctx, &count);
  for (int device = 0; rc == 0 && device < count; device++) {
    if (!device_has_context(device)) continue;
    rc = use_device(device);
    if (rc == 0) rc = REAL_CALL(cudaDeviceSynchronize);
    if (rc) shim_error("checkpoint: draining device %d failed: %s", device, strerror(-rc));
  }
  return rc;
}

/* ---- regions: vmem's backing chunks -------------------------------------------------------- */

struct chunk_list {
  struct vmem_chunk *items;
  size_t count, capacity;
};

/* Runs with vmem's mutex held: only collect. */
static int collect_chunk(const struct vmem_chunk *chunk, void *arg)
{
  struct chunk_list *list = arg;
  if (chunk->state != VMEM_RESIDENT || chunk->size == 0) return 0;
  if (list->count == list->capacity) {
    size_t capacity = list->capacity ? list->capacity * 2 : 256;
    struct vmem_chunk *items = realloc(list->items, capacity * sizeof *items);
    if (!items) return -ENOMEM;
    list->items = items;
    list->capacity = capacity;
  }
  list->items[list->count++] = *chunk;
  return 0;
}

/* The program's own mappings (driver/vmm.c) join the list as chunks at their real addresses. */
static int collect_mapping(const struct shim_vmm_region *region, void *arg)
{
  struct vmem_chunk chunk = {.vaddr = region->vaddr, .size = region->size,
                             .device = region->device, .real = region->vaddr,
                             .state = VMEM_RESIDENT};
  return collect_chunk(&chunk, arg);
}

/* A live checkpoint is under way (live_begin .. live_end): copies out of the program's own
 * mappings are pinned (copy_d2h_async), and vmem holds releases where it held them. */
static _Atomic int live_copying;
static int live_vmem_held;
static _Atomic uint64_t live_skipped, live_skipped_bytes; /* copies of memory unmapped meanwhile */

static void live_end(void *ctx)
{
  (void)ctx;
  atomic_store(&live_copying, 0);
  if (vmm()) vmm()->live_hold(0);
  uint64_t skipped = atomic_exchange(&live_skipped, 0);
  uint64_t bytes = atomic_exchange(&live_skipped_bytes, 0);
  if (skipped)
    shim_info("live checkpoint: %llu copies (%llu bytes) of memory the program unmapped during the "
              "pre-copy were skipped; the pause compared those chunks on the device",
              (unsigned long long)skipped, (unsigned long long)bytes);
  if (!live_vmem_held) return;
  live_vmem_held = 0;
  shim_depth++;
  int rc = vmem_hold_releases(0);
  shim_depth--;
  if (rc) shim_warn("checkpoint: giving back memory freed during a live checkpoint failed: %s",
                    strerror(-rc));
}

/* Hand the collected chunks to the module, then free the list. */
static int visit_chunks(struct chunk_list *list, int rc, ckpt_region_visit_fn visit, void *visit_ctx)
{
  for (size_t i = 0; rc == 0 && i < list->count; i++) {
    /* The virtual address names the chunk: it stays the same from checkpoint to resume. */
    struct ckpt_region region = {.id = list->items[i].vaddr, .vaddr = list->items[i].vaddr,
                                 .size = list->items[i].size, .device = list->items[i].device};
    rc = visit(visit_ctx, &region);
  }
  free(list->items);
  return rc;
}

static int for_each_region(void *ctx, ckpt_region_visit_fn visit, void *visit_ctx)
{
  (void)ctx;
  struct chunk_list list = {0};
  shim_depth++;
  int rc = shim_vmem_running() ? vmem_for_each(collect_chunk, &list) : 0;
  if (rc == 0) rc = vmm_for_each(collect_mapping, &list);
  shim_depth--;
  return visit_chunks(&list, rc, visit, visit_ctx);
}

/* Live checkpoints: vmem holds what the program frees from now on (a copy may be in flight on
 * it), and the program's own VMM mappings are pinned copy by copy (their cuMemUnmap cannot be
 * held, so it waits for the copies on the mapping instead); then both are listed. */
static int live_begin(void *ctx, ckpt_region_visit_fn visit, void *visit_ctx)
{
  (void)ctx;
  struct chunk_list list = {0};
  if (vmm()) vmm()->live_hold(1);
  atomic_store(&live_copying, 1);
  shim_depth++;
  int rc = 0;
  if (shim_vmem_running()) {
    rc = vmem_hold_releases(1);
    live_vmem_held = rc == 0;
    if (rc == 0) rc = vmem_for_each(collect_chunk, &list);
  }
  if (rc == 0) rc = vmm_for_each(collect_mapping, &list);
  shim_depth--;
  rc = visit_chunks(&list, rc, visit, visit_ctx);
  if (rc) live_end(ctx);
  return rc;
}

/* After vmem re-created memory. Under translate vmem asks for every chunk at its old real
 * address; only when some landed elsewhere must graphs holding translated arguments be updated
 * (kparam_graphs.c), and
 * device pointers the program or its libraries keep in device memory (pointer tables, plans)
 * point at nothing: one warning says how much. On failure the memory is given back again. */
#define MOVED_NAMED 4 /* chunks the warning names; the rest are counted */

struct moved_names {
  char text[640];
  size_t length;
  unsigned named;
  unsigned long long more;
};

static int name_moved(const struct vmem_chunk *chunk, void *ctx)
{
  struct moved_names *m = ctx;
  if (!chunk->moved) return 0;
  if (m->named == MOVED_NAMED || m->length >= sizeof m->text) {
    m->more++;
    return 0;
  }
  int n = snprintf(m->text + m->length, sizeof m->text - m->length, "%s%#llx..%#llx%s",
                   m->named ? ", " : "", (unsigned long long)chunk->vaddr,
                   (unsigned long long)(chunk->vaddr + chunk->size),
                   chunk->outside ? " (was its own device address)" : "");
  if (n > 0) m->length += (size_t)n;
  m->named++;
  return 0;
}

static int after_recreate(void)
{
  if (vmem_policy() != VMEM_TRANSLATE) return 0;
  struct vmem_stats stats;
  if (vmem_get_stats(-1, &stats) != 0) stats = (struct vmem_stats){0};
  shim_info("resume (CUDAW_VMEM=translate): %llu bytes in %llu chunks re-created at their old "
            "device addresses (%llu bytes of them mapped in reserved ranges; %llu ranges the "
            "device would not reserve there), %llu bytes in %llu chunks moved",
            (unsigned long long)stats.in_place_bytes, (unsigned long long)stats.in_place_chunks,
            (unsigned long long)stats.in_place_mapped_bytes,
            (unsigned long long)stats.in_place_refused, (unsigned long long)stats.moved_bytes,
            (unsigned long long)stats.moved_chunks);
  if (!shim_kparam_relocated || stats.moved_bytes == 0) return 0;
  struct moved_names names = {.length = 0};
  shim_depth++;
  vmem_for_each(name_moved, &names);
  shim_depth--;
  char more[64] = "";
  if (names.more) snprintf(more, sizeof more, " and %llu more", names.more);
  shim_warn("resume (CUDAW_VMEM=translate): %llu bytes in %llu chunks came back at other "
            "device addresses: %s%s. Kernel arguments and API calls are translated to the new "
            "addresses, but device pointers into these ranges stored in device memory (pointer "
            "tables, library plans and generators) are stale and can no longer be translated. "
            "Graphs whose nodes cudaw kept are updated; any it cannot update is refused at its "
            "next launch, with the reason. CUDAW_VMEM=remap keeps every address",
            (unsigned long long)stats.moved_bytes, (unsigned long long)stats.moved_chunks,
            names.named ? names.text : "(none named)", more);
  shim_depth++;
  int rc = shim_kparam_relocated();
  if (rc) vmem_release_all();
  shim_depth--;
  if (rc)
    shim_error("checkpoint: launch translation could not follow the new device addresses: %s",
               strerror(-rc));
  return rc;
}

/* ---- the contexts' stack memory ----------------------------------------------------------- */

/* A context reserves local memory for every thread the device can hold at the stack limit
 * (1 KiB a thread by default: 264 MiB on an H100, half of what a bare context costs). Nothing
 * runs while paused, so the limit goes to 0 with the memory, and back to what it was before the
 * memory is re-created. Measured on the H100: a paused PyTorch job kept 628 MiB, 264 MiB of it
 * this reservation. Only devices whose primary context exists are touched (none is created). */
#define STACK_DEVICES 64 /* devices past this keep their reservation */
static struct {
  size_t limit[STACK_DEVICES];
  unsigned char saved[STACK_DEVICES];
} stacks;

/* Not fatal: where the runtime refuses, the reservation simply stays on the device. Every
 * device the program touched, whether or not cudaw holds memory yet: a program paused after
 * creating its context but before its first allocation would otherwise keep the reservation
 * (regression: e2e_stress paused at its start under translate left 2 MiB on the emulated one). */
static void release_stacks(void)
{
  int count = 0;
  if (!shim_gate_used() || REAL_CALL(cudaGetDeviceCount, &count) != 0) return;
  for (int device = 0; device < count && device < STACK_DEVICES; device++) {
    size_t limit = 0;
    if (stacks.saved[device] || !device_has_context(device) || use_device(device) != 0 ||
        REAL_CALL(cudaDeviceGetLimit, &limit, cudaLimitStackSize) != 0 || limit == 0)
      continue;
    int rc = REAL_CALL(cudaDeviceSetLimit, cudaLimitStackSize, (size_t)0);
    if (rc) {
      shim_debug("checkpoint: device %d keeps its stack memory (%s)", device, strerror(-rc));
      continue;
    }
    stacks.limit[device] = limit;
    stacks.saved[device] = 1;
    shim_info("checkpoint: device %d: the context's stack memory released (limit %zu bytes a "
              "thread, set back at resume)", device, limit);
  }
}

/* All or nothing: a stack limit that cannot be set back (no memory) fails the resume before any
 * memory is re-created, and the limits already set back go to 0 again. */
static int restore_stacks(void)
{
  int rc = 0, failed = STACK_DEVICES;
  for (int device = 0; device < STACK_DEVICES && rc == 0; device++) {
    if (!stacks.saved[device]) continue;
    rc = use_device(device);
    if (rc == 0) rc = REAL_CALL(cudaDeviceSetLimit, cudaLimitStackSize, stacks.limit[device]);
    if (rc) {
      failed = device;
      shim_error("checkpoint: device %d: the stack memory of its context (%zu bytes a thread) "
                 "could not be re-created: %s", device, stacks.limit[device], strerror(-rc));
    }
  }
  if (rc == 0) {
    memset(&stacks, 0, sizeof stacks);
    return 0;
  }
  for (int undo = 0; undo < failed; undo++)
    if (stacks.saved[undo] && use_device(undo) == 0)
      (void)REAL_CALL(cudaDeviceSetLimit, cudaLimitStackSize, (size_t)0);
  return rc;
}

/* CUDAW_TEST_MOVE=1 (translate): vmem does not re-create memory at reserved old addresses
 * (config.in_place off, glue/vmem.c), and a small allocation made before the memory is
 * re-created takes the lowest free address, where the first chunk would have come back, so the
 * resume moves memory on a device whose allocator would otherwise give every address back. Freed
 * afterwards. */
static void *test_move_block(void)
{
  static int wanted = -1;
  if (wanted < 0) wanted = cudaw_option_flag("CUDAW_TEST_MOVE");
  void *block = NULL;
  if (!wanted || vmem_policy() != VMEM_TRANSLATE || !shim_vmem_running()) return NULL;
  if (REAL_CALL(cudaMalloc, &block, (size_t)2 << 20) != 0) return NULL;
  shim_info("CUDAW_TEST_MOVE: resume re-creates memory around a block at %p", block);
  return block;
}

static int recreate_all(void *ctx, uint64_t *shortfall)
{
  (void)ctx;
  *shortfall = 0;
  int rc = restore_stacks();
  if (rc) return rc;
  void *blocker = test_move_block();
  shim_depth++;
  rc = shim_vmem_running() ? vmem_recreate_all(shortfall) : 0;
  if (rc == 0) {
    uint64_t missing = 0;
    rc = vmm_recreate_all(&missing);
    if (rc) {
      *shortfall = missing;
      if (shim_vmem_running()) vmem_release_all(); /* all or nothing */
    }
  }
  shim_depth--;
  if (blocker) (void)REAL_CALL(cudaFree, blocker);
  if (rc == 0 && shim_vmem_running()) rc = after_recreate();
  if (rc) release_stacks();
  return rc;
}

/* A resume that makes memory beside its copy sets the stacks back first (ckpt.h). */
static int restore_context(void *ctx)
{
  (void)ctx;
  return restore_stacks();
}

/* Exchanges: vmem's memory piece by piece (remap only; vmem says -ENOSYS under translate). Memory
 * the program maps itself and the stacks move with release_all / recreate_all as always. */
static uint64_t piece_bytes(void *ctx)
{
  (void)ctx;
  return shim_vmem_running() ? vmem_piece_bytes() : 0;
}

static int release_range(void *ctx, uint64_t vaddr, uint64_t bytes, uint64_t *done)
{
  (void)ctx;
  *done = 0;
  if (!shim_vmem_running()) return -ENOSYS;
  shim_depth++;
  int rc = vmem_release_range((uintptr_t)vaddr, bytes, done);
  shim_depth--;
  return rc;
}

static int recreate_range(void *ctx, uint64_t vaddr, uint64_t bytes, uint64_t *done)
{
  (void)ctx;
  *done = 0;
  if (!shim_vmem_running()) return -ENOSYS;
  shim_depth++;
  int rc = vmem_recreate_range((uintptr_t)vaddr, bytes, done);
  shim_depth--;
  return rc;
}

static int device_free(void *ctx, int device, uint64_t *bytes)
{
  (void)ctx;
  *bytes = 0;
  if (!shim_vmem_running()) return -ENOSYS;
  shim_depth++;
  int rc = vmem_device_free(device, bytes);
  shim_depth--;
  return rc;
}

static int range_missing(void *ctx, uint64_t vaddr, uint64_t bytes, uint64_t *missing)
{
  (void)ctx;
  *missing = 0;
  if (!shim_vmem_running()) return -ENOSYS;
  return vmem_range_missing((uintptr_t)vaddr, bytes, missing);
}

/* vmem releases what it can and reports the first error; the contract here is all or nothing,
 * so on error re-create what was released (the module then restores it from the image). */
static int release_all(void *ctx)
{
  (void)ctx;
  shim_depth++;
  uint64_t mapped, kept;
  vmm_totals(&mapped, &kept);
  if (kept)
    shim_warn("checkpoint: %llu bytes the program mapped itself are shared with another process "
              "(exported or imported); they stay on the device while paused",
              (unsigned long long)kept);
  int running = shim_vmem_running();
  int rc = running ? vmem_release_all() : 0;
  if (rc == 0) rc = vmm_release_all(); /* on error it re-created its own part */
  uint64_t shortfall = 0;
  int undo = rc && running ? vmem_recreate_all(&shortfall) : 0;
  shim_depth--;
  if (rc == 0) {
    release_stacks();
    return 0;
  }
  if (undo == 0 && running) undo = after_recreate();
  if (undo)
    shim_error("checkpoint: releasing device memory failed (%s) and re-creating the part released "
               "failed too (%s)", strerror(-rc), strerror(-undo));
  return rc;
}

/* ---- streams, copies, pinned memory -------------------------------------------------------- */

/* The module's "streams" are not CUDA streams: the driver keeps the device memory of a stream it
 * created (512 KiB each on an H200) in the context after cudaStreamDestroy, so every stream we
 * created would stay ours on the device while the program is paused. All copies go to the
 * device's legacy default stream instead (the context has it anyway; the program's streams are
 * drained while the gate is closed, and one stream reaches the copy ceiling), and each handle is
 * an event recorded after its copies, which is what stream_sync waits for. */
#define PINS_MAX 8 /* copies of the program's mappings pinned on one stream at once */

struct glue_stream {
  cudaStream_t stream;
  cudaEvent_t done;
  int device;
  uint64_t pinned[PINS_MAX]; /* live: addresses of the copies whose mapping is pinned */
  unsigned pins;
};

static int stream_create(void *ctx, int device, void **out);

/* A live checkpoint copies while the program runs: not on the legacy stream, which waits for the
 * program's blocking streams and makes them wait; and a resume checks what landed on the device
 * beside the copies still on the legacy stream. One non-blocking stream per device for both,
 * created when first needed and kept (its device memory stays in the context anyway, see above). */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t live_streams[64];

static void forget_hash_state(int device); /* below, with the checksums */

/* The device's non-blocking stream (device current). */
static int side_stream(int device, cudaStream_t *out)
{
  if (device < 0 || device >= 64) return -ENODEV;
  int rc = 0;
  pthread_mutex_lock(&live_lock);
  if (!live_streams[device])
    rc = REAL_CALL(cudaStreamCreateWithFlags, &live_streams[device], cudaStreamNonBlocking);
  *out = live_streams[device];
  pthread_mutex_unlock(&live_lock);
  return rc;
}

void shim_ckpt_device_reset(int device)
{
  if (device < 0 || device >= 64) return;
  pthread_mutex_lock(&live_lock);
  live_streams[device] = NULL;
  pthread_mutex_unlock(&live_lock);
  forget_hash_state(device);
}

static int live_stream_create(void *ctx, int device, void **out)
{
  if (device < 0 || device >= 64) return -ENODEV;
  int rc = use_device(device);
  cudaStream_t stream = NULL;
  if (rc == 0) rc = side_stream(device, &stream);
  if (rc == 0) rc = stream_create(ctx, device, out);
  if (rc == 0) ((struct glue_stream *)*out)->stream = stream;
  return rc;
}

static int stream_create(void *ctx, int device, void **out)
{
  (void)ctx;
  struct glue_stream *s = calloc(1, sizeof *s);
  if (!s) return -ENOMEM;
  s->device = device;
  s->stream = cudaStreamLegacy;
  int rc = use_device(device);
  if (rc == 0) rc = REAL_CALL(cudaEventCreateWithFlags, &s->done, cudaEventDisableTiming);
  if (rc) {
    free(s);
    return rc;
  }
  *out = s;
  return 0;
}

/* The stream's copies are done (or will never read again): their mappings may be unmapped. */
static void unpin_copies(struct glue_stream *s)
{
  for (unsigned i = 0; i < s->pins; i++) vmm()->copy_unpin(s->pinned[i]);
  s->pins = 0;
}

static void stream_destroy(void *ctx, void *stream)
{
  (void)ctx;
  struct glue_stream *s = stream;
  if (!s) return;
  /* A copy still pinned here is waited for first: an unmap waiting on it may then go on. */
  if (s->pins && !atomic_load(&exiting)) (void)REAL_CALL(cudaEventSynchronize, s->done);
  if (s->pins) unpin_copies(s);
  if (!atomic_load(&exiting)) (void)REAL_CALL(cudaEventDestroy, s->done);
  free(s);
}

/* A virtual device address of a resident chunk -> the real one (identity under remap and for
 * the program's own mappings, which lie outside vmem's range). */
static int device_address(uint64_t vaddr, void **real)
{
  *real = vmem_translate((const void *)(uintptr_t)vaddr);
  /* An exchange copies chunks partly released or partly created (pieces): vmem translates only
   * wholly resident ones, but under remap an address whose piece is there is its own real one. */
  uint64_t missing = 1;
  if (!*real && vmem_policy() == VMEM_REMAP &&
      vmem_range_missing((uintptr_t)vaddr, 1, &missing) == 0 && missing == 0)
    *real = (void *)(uintptr_t)vaddr;
  return *real ? 0 : -EFAULT;
}

static int stream_sync(void *ctx, void *stream);

/* During a live checkpoint, a copy out of one of the program's own mappings pins it until the
 * stream is synchronised. 1: pinned; 0: nothing to pin (vmem's memory, or no live checkpoint);
 * -ENOENT: the mapping is gone or going, the copy must be skipped. */
static int pin_copy(struct glue_stream *s, uint64_t vaddr, size_t n)
{
  if (!atomic_load(&live_copying) || !vmm() || vmem_owns((const void *)(uintptr_t)vaddr))
    return 0;
  if (s->pins == PINS_MAX) {
    int rc = stream_sync(NULL, s); /* unpins the copies queued so far */
    if (rc) return rc;
  }
  int rc = vmm()->copy_pin(vaddr, n);
  if (rc == 0) s->pinned[s->pins++] = vaddr;
  return rc ? rc : 1;
}

static int copy_d2h_async(void *ctx, void *host, uint64_t vaddr, size_t n, void *stream)
{
  (void)ctx;
  struct glue_stream *s = stream;
  void *device;
  int rc = device_address(vaddr, &device);
  if (rc == 0) rc = use_device(s->device);
  int pinned = rc == 0 ? pin_copy(s, vaddr, n) : 0;
  /* The program unmapped it meanwhile: the image keeps what it had there, and its checksum
   * says so; the pause lists the mappings again and re-copies what differs. */
  if (pinned == -ENOENT) {
    atomic_fetch_add(&live_skipped, 1);
    atomic_fetch_add(&live_skipped_bytes, n);
  } else if (pinned < 0) {
    rc = pinned;
  } else if (rc == 0) {
    rc = REAL_CALL(cudaMemcpyAsync, host, device, n, cudaMemcpyDeviceToHost, s->stream);
  }
  if (rc == 0) rc = REAL_CALL(cudaEventRecord, s->done, s->stream);
  return rc;
}

static int copy_h2d_async(void *ctx, uint64_t vaddr, const void *host, size_t n, void *stream)
{
  (void)ctx;
  struct glue_stream *s = stream;
  void *device;
  int rc = device_address(vaddr, &device);
  if (rc == 0) rc = use_device(s->device);
  if (rc == 0)
    rc = REAL_CALL(cudaMemcpyAsync, device, host, n, cudaMemcpyHostToDevice, s->stream);
  if (rc == 0) rc = REAL_CALL(cudaEventRecord, s->done, s->stream);
  return rc;
}

static int stream_sync(void *ctx, void *stream)
{
  (void)ctx;
  struct glue_stream *s = stream;
  int rc = REAL_CALL(cudaEventSynchronize, s->done);
  if (s->pins) unpin_copies(s); /* failed or not, nothing of these copies runs any more */
  return rc;
}

/* Page-locking runs on cudaw's threads while the program runs (early pinning, the reserve), and
 * is an "unsafe" call for stream capture: under the default thread mode it would invalidate a
 * program's global-mode capture in progress on another thread (seen on the H100:
 * cudaStreamEndCapture -> cudaErrorStreamCaptureInvalidated). The calling thread switches to the
 * relaxed mode for the call, which the runtime provides for exactly this, and back after. */
static enum cudaStreamCaptureMode capture_mode_relaxed(void)
{
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (SHIM_REAL(cudaThreadExchangeStreamCaptureMode)) {
    shim_depth++;
    SHIM_REAL(cudaThreadExchangeStreamCaptureMode)(&mode);
    shim_depth--;
  }
  return mode;
}

static void capture_mode_restore(enum cudaStreamCaptureMode mode)
{
  if (SHIM_REAL(cudaThreadExchangeStreamCaptureMode)) {
    shim_depth++;
    SHIM_REAL(cudaThreadExchangeStreamCaptureMode)(&mode);
    shim_depth--;
  }
}

static int host_alloc_pinned(void *ctx, size_t n, void **host)
{
  (void)ctx;
  struct shim_span span; /* staging pinned early shows in the start-up profile */
  shim_span_begin(&span);
  shim_span_real_begin(&span);
  enum cudaStreamCaptureMode mode = capture_mode_relaxed();
  int rc = REAL_CALL(cudaHostAlloc, host, n, cudaHostAllocPortable);
  capture_mode_restore(mode);
  shim_span_real_end(&span);
  shim_span_end(&span, SHIM_PROFILE_PINNING, 1);
  return rc;
}

static int host_register(void *ctx, void *host, size_t n)
{
  (void)ctx;
  enum cudaStreamCaptureMode mode = capture_mode_relaxed();
  int rc = REAL_CALL(cudaHostRegister, host, n, cudaHostRegisterPortable);
  capture_mode_restore(mode);
  return rc;
}

static void host_unregister(void *ctx, void *host)
{
  (void)ctx;
  if (atomic_load(&exiting)) return;
  enum cudaStreamCaptureMode mode = capture_mode_relaxed();
  (void)REAL_CALL(cudaHostUnregister, host);
  capture_mode_restore(mode);
}

static void host_free_pinned(void *ctx, void *host)
{
  (void)ctx;
  if (atomic_load(&exiting)) return;
  enum cudaStreamCaptureMode mode = capture_mode_relaxed();
  (void)REAL_CALL(cudaFreeHost, host);
  capture_mode_restore(mode);
}

/* ---- checksums on the device: cudaw's own kernel, through the driver API -------------------- */

/* The kernel (checkpoint/delta_kernel.cu) ships as a fatbinary (cubins and PTX) and is loaded with
 * cuModuleLoadData from
 * the driver functions the real runtime hands out, so it needs nothing from the program. The
 * module stays loaded once loaded (below). The piece table and the sums live in page-locked host
 * memory that the kernel reads and writes directly (mapped, unified addresses). */
static struct {
  pthread_once_t once;
  CUresult (*load)(CUmodule *, const void *);
  CUresult (*get_function)(CUfunction *, CUmodule, const char *);
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void **, void **);
  CUresult (*unload)(CUmodule);
  CUresult (*synchronize)(CUstream);
} kernel_api = {.once = PTHREAD_ONCE_INIT};

static void *driver_function(const char *name)
{
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  if (REAL_CALL(cudaGetDriverEntryPointByVersion, name, &fn, 12000, cudaEnableDefault, &status) ||
      status != cudaDriverEntryPointSuccess)
    return NULL;
  return fn;
}

static void find_kernel_api(void)
{
  void *load = driver_function("cuModuleLoadData"), *get = driver_function("cuModuleGetFunction");
  void *launch = driver_function("cuLaunchKernel"), *unload = driver_function("cuModuleUnload");
  void *sync = driver_function("cuStreamSynchronize");
  memcpy(&kernel_api.load, &load, sizeof load);
  memcpy(&kernel_api.get_function, &get, sizeof get);
  memcpy(&kernel_api.launch, &launch, sizeof launch);
  memcpy(&kernel_api.unload, &unload, sizeof unload);
  memcpy(&kernel_api.synchronize, &sync, sizeof sync);
}

static int from_driver(CUresult result, const char *what)
{
  if (result == CUDA_SUCCESS) return 0;
  shim_debug("checkpoint: device checksums: %s failed (CUresult %d)", what, (int)result);
  return result == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

/* Kept between passes: a resume checks what landed in batches beside its copy (engine.c), and
 * loading the module, pinning the table and freeing it for each batch held the copy threads up
 * in the driver (cudaFreeHost and cuModuleUnload wait for the device: 0.3 s of a 32 GiB resume
 * went to queueing copies, H100 2026-11-27). The module's code memory stayed in the context
 * after an unload anyway (~4 MiB, measured on the H100). Under the lock: one pass at a time. */
static struct {
  pthread_mutex_t lock;
  CUmodule module[64];
  CUfunction function[64];
  struct ckpt_delta_piece *table; /* mapped, page-locked: pieces, then as many sums */
  size_t capacity;                /* pieces */
} hash_kept = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A device reset destroys the context that loaded the module (and may free the table with it:
 * forgotten, not freed). */
static void forget_hash_state(int device)
{
  pthread_mutex_lock(&hash_kept.lock);
  hash_kept.module[device] = NULL;
  hash_kept.table = NULL;
  hash_kept.capacity = 0;
  pthread_mutex_unlock(&hash_kept.lock);
}

static int hash_table(size_t count)
{
  if (count <= hash_kept.capacity) return 0;
  size_t capacity = count > 2 * hash_kept.capacity ? count : 2 * hash_kept.capacity;
  if (capacity < 16384) capacity = 16384; /* a 64 GiB image in 4 MiB chunks */
  struct ckpt_delta_piece *table = NULL;
  int rc = REAL_CALL(cudaHostAlloc, (void **)&table,
                     capacity * (sizeof *table + sizeof(uint64_t)),
                     cudaHostAllocPortable | cudaHostAllocMapped);
  if (rc) return rc;
  if (hash_kept.table) (void)REAL_CALL(cudaFreeHost, hash_kept.table);
  hash_kept.table = table;
  hash_kept.capacity = capacity;
  return 0;
}

static int device_hash(void *ctx, int device, const struct ckpt_delta_piece *pieces, size_t count,
                       uint64_t *sums)
{
  (void)ctx;
  pthread_once(&kernel_api.once, find_kernel_api);
  if (!kernel_api.load || !kernel_api.get_function || !kernel_api.launch || !kernel_api.unload ||
      !kernel_api.synchronize)
    return -ENOSYS;
  if (count == 0) return 0;
  if (device < 0 || device >= 64) return -ENODEV;
  int rc = use_device(device);
  cudaStream_t stream = NULL;
  if (rc == 0) rc = side_stream(device, &stream);
  if (rc) return rc;
  pthread_mutex_lock(&hash_kept.lock);
  rc = hash_table(count);
  struct ckpt_delta_piece *table = hash_kept.table;
  uint64_t *found = (uint64_t *)(table + hash_kept.capacity);
  for (size_t i = 0; i < count && rc == 0; i++) {
    void *real;
    rc = device_address(pieces[i].address, &real);
    table[i] = (struct ckpt_delta_piece){(uint64_t)(uintptr_t)real, pieces[i].bytes};
  }
  void *table_device = NULL, *sums_device = NULL;
  if (rc == 0) rc = REAL_CALL(cudaHostGetDevicePointer, &table_device, table, 0);
  if (rc == 0) rc = REAL_CALL(cudaHostGetDevicePointer, &sums_device, found, 0);
  shim_depth++;
  if (rc == 0 && !hash_kept.module[device]) {
    rc = from_driver(kernel_api.load(&hash_kept.module[device], ckpt_delta_kernel_image),
                     "cuModuleLoadData");
    if (rc == 0)
      rc = from_driver(kernel_api.get_function(&hash_kept.function[device],
                                               hash_kept.module[device], "cudaw_delta_hash"),
                       "cuModuleGetFunction");
    if (rc && hash_kept.module[device]) kernel_api.unload(hash_kept.module[device]);
    if (rc) hash_kept.module[device] = NULL;
  }
  if (rc == 0) {
    unsigned long long pieces_count = count;
    void *params[] = {&table_device, &pieces_count, &sums_device};
    unsigned blocks = count < (1u << 20) ? (unsigned)count : 1u << 20;
    rc = from_driver(kernel_api.launch(hash_kept.function[device], blocks, 1, 1, 256, 1, 1, 0,
                                       (CUstream)stream, params, NULL), "cuLaunchKernel");
  }
  if (rc == 0) rc = from_driver(kernel_api.synchronize((CUstream)stream), "cuStreamSynchronize");
  shim_depth--;
  if (rc == 0) memcpy(sums, found, count * sizeof *sums);
  pthread_mutex_unlock(&hash_kept.lock);
  return rc;
}

/* ---- memory vmem does not hold: managed memory and arrays (the shim's registry) -------------- */

/* Managed memory is prefetched to host memory at a checkpoint: the driver migrates it and frees
 * its device pages, its contents never pass through the image (the process's own pages hold
 * them), and at resume it is prefetched back to the device it was allocated on. Arrays stay on
 * the device: a cudaArray_t cannot be re-created under the same handle (textures and surfaces
 * name it); cudaw does not touch them while paused and status reports them as still held. */
struct other_list {
  struct shim_mem_record *items;
  size_t count, capacity;
  struct ckpt_other_memory held;
};

/* Runs with the registry's lock held: only collect. */
static int collect_other(const struct shim_mem_record *record, void *arg)
{
  struct other_list *list = arg;
  if (record->kind == SHIM_MEM_ARRAY || record->kind == SHIM_MEM_MIPMAPPED) {
    list->held.arrays++;
    list->held.array_bytes += record->size;
    return 0;
  }
  if (record->kind == SHIM_MEM_PASSTHROUGH) {
    list->held.kept_bytes += record->size;
    return 0;
  }
  if (record->kind != SHIM_MEM_MANAGED || record->size == 0) return 0;
  if (list->count == list->capacity) {
    size_t capacity = list->capacity ? list->capacity * 2 : 32;
    struct shim_mem_record *items = realloc(list->items, capacity * sizeof *items);
    if (!items) return -ENOMEM;
    list->items = items;
    list->capacity = capacity;
  }
  list->items[list->count++] = *record;
  list->held.managed_allocations++;
  list->held.managed_bytes += record->size;
  return 0;
}

/* Prefetch every managed allocation to host memory (to_host) or back to its device, on the
 * legacy stream of that device, and wait. */
static int prefetch_managed(const struct other_list *list, int to_host)
{
  int rc = 0;
  for (size_t i = 0; i < list->count && rc == 0; i++) {
    const struct shim_mem_record *r = &list->items[i];
    struct cudaMemLocation where = {.type = to_host ? cudaMemLocationTypeHost
                                                    : cudaMemLocationTypeDevice,
                                    .id = to_host ? 0 : r->device};
    if ((rc = use_device(r->device)) != 0) break;
    rc = REAL_CALL(cudaMemPrefetchAsync, r->handle, (size_t)r->size, where, 0, cudaStreamLegacy);
    if (rc == 0) rc = REAL_CALL(cudaStreamSynchronize, cudaStreamLegacy);
  }
  return rc;
}

static struct other_list parked; /* the managed allocations moved at the last checkpoint */

/* Functions the program obtained that cudaw does not wrap, logged once each. */
#define UNWRAPPED_MAX 64
static pthread_mutex_t unwrapped_lock = PTHREAD_MUTEX_INITIALIZER;
static const void *unwrapped[UNWRAPPED_MAX];
static unsigned unwrapped_count;

void shim_ckpt_note_ungated(const void *real, const char *symbol)
{
  pthread_mutex_lock(&unwrapped_lock);
  unsigned i = 0;
  while (i < unwrapped_count && unwrapped[i] != real) i++;
  int first = i == unwrapped_count;
  if (first && unwrapped_count < UNWRAPPED_MAX) unwrapped[unwrapped_count++] = real;
  pthread_mutex_unlock(&unwrapped_lock);
  if (first)
    shim_warn("driver layer: %s is not a function cudaw knows (its driver is newer than the "
              "toolkit cudaw was built with): the program calls it without cudaw's gate, so a "
              "pause does not hold it", symbol ? symbol : "(unnamed)");
}

static unsigned ungated_count(void)
{
  pthread_mutex_lock(&unwrapped_lock);
  unsigned count = unwrapped_count;
  pthread_mutex_unlock(&unwrapped_lock);
  return count;
}

static int park_other(void *ctx, struct ckpt_other_memory *held)
{
  (void)ctx;
  struct other_list list = {0};
  int rc = shim_mem_for_each(collect_other, &list);
  if (rc) {
    free(list.items);
    return rc;
  }
  if (prefetch_managed(&list, 1) != 0) {
    /* Still valid where it is (the driver keeps it): pause anyway, holding it. */
    shim_warn("checkpoint: managed memory could not be moved to the host; it stays on the device");
    list.count = 0;
    list.held.managed_allocations = list.held.managed_bytes = 0;
  }
  uint64_t mapped, shared;
  vmm_totals(&mapped, &shared);
  list.held.kept_bytes += shared;
  list.held.ungated_functions = ungated_count();
  if (list.held.ungated_functions)
    shim_warn("checkpoint: the program holds %llu driver functions that cudaw does not wrap "
              "(named earlier in the log): calls to them are not held by this pause",
              (unsigned long long)list.held.ungated_functions);
  *held = list.held;
  free(parked.items);
  parked = list;
  return 0;
}

static int unpark_other(void *ctx)
{
  (void)ctx;
  int rc = prefetch_managed(&parked, 0);
  free(parked.items);
  parked = (struct other_list){0};
  return rc;
}

/* ---- memory held, from NVML (never creates a context) -------------------------------------- */

/* The few NVML declarations used (nvml.h is not part of the toolkit here; this ABI is stable). */
typedef struct nvml_device *nvml_device_t;
struct nvml_process_info {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id, compute_instance_id;
};
#define NVML_SUCCESS 0
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_VALUE_NOT_AVAILABLE (~0ull)

static struct {
  pthread_mutex_t lock;
  int state; /* 0 not tried, 1 ready, -1 unavailable */
  int (*init)(void);
  int (*by_pci_bus_id)(const char *bus_id, nvml_device_t *device);
  int (*processes)(nvml_device_t device, unsigned *count, struct nvml_process_info *infos);
} nvml = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int nvml_ready(void)
{
  pthread_mutex_lock(&nvml.lock);
  if (nvml.state == 0) {
    nvml.state = -1;
    /* cudaw's own: glibc's dlopen, not the program's interposed one */
    void *lib = shim_real_dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      nvml.init = (int (*)(void))dlsym(lib, "nvmlInit_v2");
      nvml.by_pci_bus_id = (int (*)(const char *, nvml_device_t *))dlsym(
          lib, "nvmlDeviceGetHandleByPciBusId_v2");
      void *processes = dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
      nvml.processes = (int (*)(nvml_device_t, unsigned *, struct nvml_process_info *))processes;
      if (nvml.init && nvml.by_pci_bus_id && nvml.processes && nvml.init() == NVML_SUCCESS)
        nvml.state = 1;
      else
        dlclose(lib);
    }
  }
  int ready = nvml.state == 1;
  pthread_mutex_unlock(&nvml.lock);
  return ready;
}

static int mem_held_nvml(int device, uint64_t *bytes);

/* NVML runs inside cudaw (raised shim_depth): whatever it loads or calls (it may open the CUDA
 * driver) passes cudaw's gate, which is closed while paused. */
static int mem_held(void *ctx, int device, uint64_t *bytes)
{
  (void)ctx;
  shim_depth++;
  int rc = mem_held_nvml(device, bytes);
  shim_depth--;
  return rc;
}

static int mem_held_nvml(int device, uint64_t *bytes)
{
  *bytes = 0;
  if (!nvml_ready()) return -ENODEV;
  char bus_id[32];
  int rc = REAL_CALL(cudaDeviceGetPCIBusId, bus_id, (int)sizeof bus_id, device);
  if (rc) return rc;
  nvml_device_t handle;
  if (nvml.by_pci_bus_id(bus_id, &handle) != NVML_SUCCESS) return -ENODEV;
  struct nvml_process_info infos[64];
  unsigned count = 64;
  int status = nvml.processes(handle, &count, infos);
  if (status != NVML_SUCCESS) return -EIO; /* more than 64 processes: not worth more */
  for (unsigned i = 0; i < count; i++)
    if (infos[i].pid == (unsigned)getpid()) {
      if (infos[i].used_gpu_memory == NVML_VALUE_NOT_AVAILABLE) return -ENODATA;
      *bytes = infos[i].used_gpu_memory;
    }
  return 0;
}

/* The device memory that stays when vmem does not hold the program's: the process's own figure
 * from NVML where it has one, else the device's used memory (total - free: the emulated device
 * counts this process only; a GPU counts every process on it). */
static int memory_not_held(void *ctx, uint64_t *bytes, char *why, size_t len)
{
  if (!shim_vmem_not_running(why, len)) return 0;
  *bytes = 0;
  int devices = 0, current = 0;
  if (REAL_CALL(cudaGetDeviceCount, &devices) != 0) return 1;
  REAL_CALL(cudaGetDevice, &current);
  for (int d = 0; d < devices; d++) {
    uint64_t held = 0;
    size_t free_bytes = 0, total = 0;
    if (mem_held(ctx, d, &held) == 0 && held) *bytes += held;
    else if (REAL_CALL(cudaSetDevice, d) == 0 &&
             REAL_CALL(cudaMemGetInfo, &free_bytes, &total) == 0 && total > free_bytes)
      *bytes += total - free_bytes;
  }
  REAL_CALL(cudaSetDevice, current);
  return 1;
}

/* ---- log and start ------------------------------------------------------------------------- */

static void log_message(void *ctx, int level, const char *message)
{
  (void)ctx;
  static const enum shim_log_level levels[] = {SHIM_LOG_ERROR, SHIM_LOG_WARN, SHIM_LOG_INFO,
                                               SHIM_LOG_DEBUG};
  enum shim_log_level shim_level = (unsigned)level < 4 ? levels[level] : SHIM_LOG_DEBUG;
  if ((int)shim_level <= shim_log_level) shim_log(shim_level, "%s", message);
}

/* What cannot survive a resume that moves memory (translate): texture objects over vmem. */
static int refuse_checkpoint(void *ctx, char *why, size_t len)
{
  (void)ctx;
  return shim_texture_blocks_checkpoint(why, len);
}

/* For the reserve (CUDAW_CKPT_RESERVE=auto): vmem's device memory and the program's mappings. */
static int device_bytes(void *ctx, uint64_t *bytes, uint64_t *regions)
{
  (void)ctx;
  struct vmem_stats stats = {0};
  if (shim_vmem_running() && vmem_get_stats(-1, &stats) != 0) stats = (struct vmem_stats){0};
  uint64_t mapped, kept;
  vmm_totals(&mapped, &kept);
  *bytes = stats.held_bytes + (mapped > kept ? mapped - kept : 0);
  *regions = stats.chunks + (mapped > kept ? 1 : 0);
  return 0;
}

void shim_ckpt_device_bytes(uint64_t *bytes, uint64_t *regions)
{
  device_bytes(NULL, bytes, regions);
}

static size_t status_extra(void *ctx, char *buf, size_t len)
{
  (void)ctx;
  struct vmem_stats stats = {0};
  if (shim_vmem_running()) vmem_get_stats(-1, &stats);
  int n = snprintf(buf, len, ",\"moved_bytes\":%llu,\"moved_chunks\":%llu,\"in_place_bytes\":%llu",
                   (unsigned long long)stats.moved_bytes, (unsigned long long)stats.moved_chunks,
                   (unsigned long long)stats.in_place_bytes);
  if (n < 0 || (size_t)n >= len) return 0;
  n += (int)shim_gpu_status_json(buf + n, len - (size_t)n);
  return (size_t)n + shim_profile_json(buf + n, len - (size_t)n);
}

static int extra_request(void *ctx, const char *request, char *reply, size_t len)
{
  (void)ctx;
  return shim_gpu_limit_request(request, reply, len);
}

static const struct ckpt_host_ops host_ops = {
  .gate_close = gate_close,
  .gate_open = gate_open,
  .device_drain = device_drain,
  .for_each_region = for_each_region,
  .release_all = release_all,
  .recreate_all = recreate_all,
  .restore_context = restore_context,
  .release_range = release_range,
  .recreate_range = recreate_range,
  .range_missing = range_missing,
  .piece_bytes = piece_bytes,
  .device_free = device_free,
  .device_count = device_count,
  .stream_create = stream_create,
  .stream_destroy = stream_destroy,
  .copy_d2h_async = copy_d2h_async,
  .copy_h2d_async = copy_h2d_async,
  .stream_sync = stream_sync,
  .host_alloc_pinned = host_alloc_pinned,
  .host_free_pinned = host_free_pinned,
  .host_register = host_register,
  .host_unregister = host_unregister,
  .last_error = last_error,
  .device_hash = device_hash,
  .live_begin = live_begin,
  .live_end = live_end,
  .live_stream_create = live_stream_create,
  .park_other = park_other,
  .unpark_other = unpark_other,
  .mem_held = mem_held,
  .memory_not_held = memory_not_held,
  .device_bytes = device_bytes,
  .refuse_checkpoint = refuse_checkpoint,
  .status_extra = status_extra,
  .extra_request = extra_request,
  .log = log_message,
};

/* Threads and a socket, no CUDA call. */
static void start_checkpoint(void)
{
  int rc = ckpt_init(&host_ops, NULL);
  if (rc && rc != -EALREADY) shim_warn("checkpoint: not available in this process");
}
SHIM_START_STEP(SHIM_START_CHECKPOINT, SHIM_PROFILE_CHECKPOINT, start_checkpoint);

/* At exit: stop the control thread and the signal handler and wait for a transition under way.
 * The real runtime may already have torn itself down (its exit handlers run before ours), so
 * the staging buffers and streams are left to the process's end. A paused program stays
 * paused. */
__attribute__((destructor)) static void shim_ckpt_stop(void)
{
  atomic_store(&exiting, 1);
  struct shim_span span;
  shim_span_begin(&span);
  shim_sched_leaving(); /* before the module stops: cudawd's orders would find it gone */
  ckpt_shutdown();
  shim_span_end(&span, SHIM_PROFILE_EXIT, 1);
}
