/* vmem inside the library: started lazily by the first call that needs virtual memory (so that a
 * program that never allocates never creates a context because of cudaw), configured from the
 * options table, and hooked into the wrappers' pointer translation under the translate policy. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "options.h"
#include "prims.h"
#include "shim_generated.h"
#include "shim_profile.h"
#include "shim_sched.h"
#include "shim_vmem.h"
#include "vmem.h"

int shim_vmem_check_all;

/* Started once, and again after a cudaDeviceReset gave everything back (shim_vmem_device_reset). */
static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int started;
static int vmem_status = -ENODEV; /* 0 once vmem runs; else why it does not */
static uint64_t mem_limit;         /* CUDAW_MEM_LIMIT in bytes (0: none), for its warning */
/* Peer access the program enabled (bit p of peers[d]: device d may access device p's memory),
 * under start_lock: a program may enable it before its first allocation starts vmem, and vmem
 * starts over after a cudaDeviceReset, so the shim keeps the record and hands it to each start. */
#define SHIM_MAX_PEERS 64
static uint64_t peers[SHIM_MAX_PEERS];

/* Hand the recorded peer access to a freshly started vmem (start_lock held). */
static void apply_peers(void)
{
  for (int d = 0; d < SHIM_MAX_PEERS; d++)
    for (int p = 0; p < SHIM_MAX_PEERS; p++)
      if (peers[d] >> p & 1) {
        int rc = vmem_peer_access(d, p, 1);
        if (rc)
          shim_warn("vmem: device %d cannot be given access to device %d's memory: %s", d, p,
                    strerror(-rc));
      }
}

static int parse_policy(const char *text, enum vmem_policy *policy)
{
  static const struct { const char *name; enum vmem_policy policy; } names[] = {
    {"auto", VMEM_AUTO}, {"remap", VMEM_REMAP}, {"translate", VMEM_TRANSLATE}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(text, names[i].name) == 0) {
      *policy = names[i].policy;
      return 0;
    }
  return -EINVAL;
}

static int read_config(const struct vmem_prims *prims, void *ctx, struct vmem_config *config)
{
  memset(config, 0, sizeof *config);
  if (parse_policy(cudaw_option("CUDAW_VMEM"), &config->policy) != 0) {
    shim_error("CUDAW_VMEM=%s: expected auto, remap, translate or off", cudaw_option("CUDAW_VMEM"));
    return -EINVAL;
  }
  config->check = cudaw_option_flag("CUDAW_CHECK");
  /* Identity placement (translate): pointers stored in device memory stay valid until a resume
   * moves memory. CUDAW_CHECK keeps every pointer in the range instead, where a freed or stray
   * one is recognised as cudaw's and reported; a freed identity address is the device's again. */
  config->identity = cudaw_option_flag("CUDAW_VMEM_IDENTITY");
  if (config->check) config->identity = 0;
  /* A resume re-creates memory at its old addresses where the device has VMM; CUDAW_TEST_MOVE
   * asks for a move instead (glue/checkpoint.c). */
  config->in_place = cudaw_option_flag("CUDAW_TEST_MOVE") ? 0 : 2;
  /* Sharing a GPU: memory a program frees must leave the device at once, or cudawd counts it as
   * held by someone else and nobody can give it back: no slabs at a resume (a freed chunk keeps
   * its slab's memory until the slab goes). A resume then maps every chunk on its own. */
  bool share = strcmp(cudaw_option("CUDAW_SHARE"), "1") == 0;
  if (share) config->slab_max_bytes = 1;
  /* Pieces of 1 GiB (0: vmem's default): an exchange under sharing moves memory piece by piece,
   * a checkpoint gives each piece back once it is saved and a resume makes each just ahead of
   * its copy (CUDAW_CKPT_CREATE=beside): one 64 GiB allocation made whole took 187-201 ms in front
   * of the copy, its resume 0.86x of H2D; in pieces 0.93-0.97x (H100). The option table checked
   * the size already. */
  const char *piece = cudaw_option("CUDAW_VMEM_PIECE");
  if (strcmp(piece, "auto") == 0)
    config->piece_bytes = 0;
  else if (vmem_parse_size(piece, 0, &config->piece_bytes) != 0) {
    shim_error("CUDAW_VMEM_PIECE=%s: expected a size such as 1G", cudaw_option("CUDAW_VMEM_PIECE"));
    return -EINVAL;
  }
  const char *va = cudaw_option("CUDAW_VA_SIZE");
  if (strcmp(va, "auto") != 0 && vmem_parse_size(va, 0, &config->va_size) != 0) {
    shim_error("CUDAW_VA_SIZE=%s: expected a size such as 256G", va);
    return -EINVAL;
  }
  const char *limit = cudaw_option("CUDAW_MEM_LIMIT");
  if (*limit && strcmp(limit, "none") != 0) {
    uint64_t free_bytes = 0, total = 0;
    int rc = prims->mem_info(ctx, 0, &free_bytes, &total);
    if (rc != 0) return rc;
    if (vmem_parse_size(limit, total, &config->mem_limit) != 0) {
      shim_error("CUDAW_MEM_LIMIT=%s: expected bytes, K/M/G/T or a percentage", limit);
      return -EINVAL;
    }
    mem_limit = config->mem_limit;
  }
  return 0;
}

/* Libraries that launch their kernels without going through libcudart (static runtime inside, or
 * the driver API): under translate the virtual pointers they receive are not valid on the device.
 * Their kernels fault on such a pointer, and a program that does not check every status (NVIDIA's
 * conjugateGradientUM sample does not) then prints a wrong result as if nothing happened. So
 * translate is not used while one is loaded: allocations stay real (as CUDAW_VMEM=off), or, for
 * one loaded after virtual memory was handed out, further allocations are refused. */
static const char *const bypassing_libraries[] = {
  "libcublas", "libcublasLt", "libcudnn", "libnccl", "libcufft", "libcusparse", "libcusolver",
  "libcurand", "libnvrtc", "libtriton"};

struct bypass_scan {
  char name[128];             /* the first such library's file name, "" if none */
  unsigned long long adds;    /* the loader's count of objects added so far */
};

static int find_bypassing(struct dl_phdr_info *info, size_t size, void *ctx)
{
  struct bypass_scan *scan = ctx;
  if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
    scan->adds = info->dlpi_adds;
  const char *name = strrchr(info->dlpi_name, '/');
  name = name ? name + 1 : info->dlpi_name;
  for (size_t i = 0; i < sizeof bypassing_libraries / sizeof bypassing_libraries[0]; i++) {
    size_t n = strlen(bypassing_libraries[i]);
    if (strncmp(name, bypassing_libraries[i], n) == 0 &&
        (name[n] == '.' || name[n] == '_' || name[n] == '-')) {
      snprintf(scan->name, sizeof scan->name, "%s", name);
      return 1;
    }
  }
  return 0;
}

static int loader_adds(struct dl_phdr_info *info, size_t size, void *ctx)
{
  if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
    *(unsigned long long *)ctx = info->dlpi_adds;
  return 1; /* the first object says it */
}

static unsigned long long scanned_adds; /* loader's count at the last scan (under translate) */
static atomic_int late_bypass;           /* a bypassing library came after vmem started */

/* Under translate, on each allocation: has a bypassing library been loaded since the last look?
 * Cheap when nothing was loaded (one loader callback). Returns -ENOTSUP once one has. */
static int check_late_libraries(void)
{
  if (atomic_load_explicit(&late_bypass, memory_order_relaxed)) return -ENOTSUP;
  unsigned long long adds = 0;
  dl_iterate_phdr(loader_adds, &adds);
  if (adds == scanned_adds) return 0;
  struct bypass_scan scan = {"", 0};
  dl_iterate_phdr(find_bypassing, &scan);
  scanned_adds = adds;
  if (!scan.name[0]) return 0;
  if (atomic_exchange(&late_bypass, 1) == 0)
    shim_error("vmem: %s was loaded after CUDAW_VMEM=translate handed out virtual device "
               "pointers; it launches its kernels without the CUDA runtime, so those pointers "
               "would make it fault or compute wrong results: every further allocation is "
               "refused (cudaErrorNotSupported). Use CUDAW_VMEM=remap (needs VMM) or off",
               scan.name);
  return -ENOTSUP;
}

static const char *policy_name(enum vmem_policy policy)
{
  return policy == VMEM_REMAP ? "remap" : policy == VMEM_TRANSLATE ? "translate" : "auto";
}

static void start(void)
{
  shim_depth++;
  const char *wanted = cudaw_option("CUDAW_VMEM");
  if (strcmp(wanted, "off") == 0) {
    vmem_status = -ECANCELED;
    shim_info("vmem: off (CUDAW_VMEM=off): allocations are not virtualised");
    goto out;
  }
  const struct vmem_prims *prims;
  void *ctx;
  struct vmem_config config;
  int rc = vmem_prims_cuda(shim_real_symbol, &prims, &ctx);
  if (rc == 0) rc = read_config(prims, ctx, &config);
  if (rc == 0) rc = vmem_init(&config, prims, ctx);
  if (rc != 0) {
    vmem_status = rc;
    shim_warn("vmem: not started (%s): allocations are passed to the real runtime unchanged and "
              "cannot be checkpointed", strerror(-rc));
    goto out;
  }
  shim_vmem_check_all = config.check;
  uintptr_t base;
  uint64_t size;
  vmem_range(&base, &size);
  if (vmem_policy() == VMEM_TRANSLATE) {
    struct bypass_scan scan = {"", 0};
    /* With the driver layer routing libcuda to cudaw, those libraries' launches are translated
     * like the program's (driver/launch.c): only without it must they be kept from virtual memory. */
    if (!shim_drv_routing()) dl_iterate_phdr(find_bypassing, &scan);
    if (scan.name[0]) {
      vmem_fini();
      vmem_status = -ENOTSUP;
      shim_error("vmem: %s is loaded and launches its kernels without the CUDA runtime: under "
                 "CUDAW_VMEM=translate the device pointers it receives would be virtual (it "
                 "would fault or compute wrong results), so allocations are not virtualised (as "
                 "CUDAW_VMEM=off) and cannot be checkpointed. Use CUDAW_VMEM=remap (needs VMM) "
                 "to keep both", scan.name);
      goto out;
    }
    dl_iterate_phdr(loader_adds, &scanned_adds);
    shim_translate_base = base;
    shim_translate_end = base + size;
    shim_translate_outside = &vmem_fast.outside_irregular;
  }
  uint64_t piece = vmem_piece_bytes();
  char pieces[32] = "none";
  if (piece && piece != VMEM_PIECE_NONE)
    snprintf(pieces, sizeof pieces, "%llu MiB", (unsigned long long)(piece >> 20));
  shim_info("vmem: policy %s, virtual range %#lx..%#lx (%lu GiB), granule %lu KiB, pieces %s",
            policy_name(vmem_policy()), (unsigned long)base, (unsigned long)(base + size),
            (unsigned long)(size >> 30), (unsigned long)(vmem_granule() >> 10), pieces);
  vmem_status = 0;
  apply_peers();
  ckpt_prepare_early(); /* a context exists now: the checkpoint's staging can be pinned */
out:
  shim_depth--;
}

int shim_vmem_start(void)
{
  if (SHIM_LIKELY(atomic_load_explicit(&started, memory_order_acquire))) return vmem_status;
  pthread_mutex_lock(&start_lock);
  if (!atomic_load_explicit(&started, memory_order_relaxed)) {
    struct shim_span span; /* the start-up profile's "vmem" row */
    shim_span_begin(&span);
    start();
    shim_span_end(&span, SHIM_PROFILE_VMEM, 1);
    atomic_store_explicit(&started, 1, memory_order_release);
  }
  pthread_mutex_unlock(&start_lock);
  return vmem_status;
}

int shim_vmem_peer_access(int device, int peer, int enable)
{
  if (device < 0 || peer < 0 || device >= SHIM_MAX_PEERS || peer >= SHIM_MAX_PEERS) return -EINVAL;
  int rc = 0;
  pthread_mutex_lock(&start_lock);
  if (enable) peers[device] |= 1ull << peer;
  else peers[device] &= ~(1ull << peer);
  if (atomic_load_explicit(&started, memory_order_relaxed) && vmem_status == 0) {
    shim_depth++;
    rc = vmem_peer_access(device, peer, enable);
    shim_depth--;
  }
  pthread_mutex_unlock(&start_lock);
  return rc;
}

int shim_vmem_device_reset(int device)
{
  int rc = 0;
  pthread_mutex_lock(&start_lock);
  /* The reset destroys the device's context and the peer access it had enabled. */
  if (device >= 0 && device < SHIM_MAX_PEERS) peers[device] = 0;
  if (atomic_load_explicit(&started, memory_order_relaxed) && vmem_status == 0) {
    struct vmem_stats all, here;
    if (vmem_get_stats(-1, &all) == 0 && vmem_get_stats(device, &here) == 0 &&
        all.chunks != here.chunks) {
      rc = -EXDEV; /* other devices hold memory: vmem cannot start over */
    } else {
      shim_vmem_forget_frees();
      shim_translate_base = shim_translate_end = 0;
      shim_translate_outside = NULL;
      vmem_fini();
      atomic_store_explicit(&started, 0, memory_order_release);
      vmem_status = -ENODEV;
    }
  }
  pthread_mutex_unlock(&start_lock);
  return rc;
}

int shim_vmem_running(void)
{
  return atomic_load_explicit(&vmem_fast.size, memory_order_acquire) != 0;
}

int shim_vmem_not_running(char *why, size_t len)
{
  pthread_mutex_lock(&start_lock);
  int status = atomic_load_explicit(&started, memory_order_relaxed) ? vmem_status : 0;
  pthread_mutex_unlock(&start_lock);
  if (status == 0) return 0;
  if (status == -ECANCELED) snprintf(why, len, "vmem off (CUDAW_VMEM=off)");
  else if (status == -ENOTSUP)
    snprintf(why, len, "vmem off (translate refused: a library that launches without the "
             "runtime is loaded)");
  else snprintf(why, len, "vmem not started (%s; see the program's log)", strerror(-status));
  return 1;
}

/* A virtual pointer whose memory is not backed (never allocated, freed, released) is passed on
 * unchanged: it lies in a PROT_NONE host range, so the real runtime rejects it as invalid. */
const void *shim_translate_slow(const void *p)
{
  void *real = vmem_translate(p);
  return real ? real : p;
}

cudaError_t shim_error_from_errno(int rc)
{
  switch (rc) {
  case 0: return cudaSuccess;
  case -ENOMEM: return cudaErrorMemoryAllocation;
  case -EINVAL: case -ENOENT: case -EFAULT: return cudaErrorInvalidValue;
  case -ENOSYS: case -ENOTSUP: return cudaErrorNotSupported;
  case -EBUSY: return cudaErrorNotPermitted;
  case -ENODEV: return cudaErrorNoDevice;
  default: return cudaErrorUnknown;
  }
}

cudaError_t shim_current_device(int *device)
{
  return SHIM_REAL(cudaGetDevice)(device);
}

cudaError_t shim_vmem_alloc(void **ptr, uint64_t size)
{
  int device;
  cudaError_t result = shim_current_device(&device);
  if (result != cudaSuccess) return result;
  return shim_vmem_alloc_on(device, ptr, size);
}

/* Seconds since this process started (/proc/self/stat's start time against CLOCK_BOOTTIME);
 * a large number when unknown. */
static double process_age(void)
{
  char text[1024];
  FILE *f = fopen("/proc/self/stat", "re");
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  text[n] = '\0';
  char *p = strrchr(text, ')'); /* the command name may hold spaces */
  unsigned long long start = 0;
  for (int field = 2; p && field < 22; field++) p = strchr(p + 1, ' ');
  if (!p || sscanf(p + 1, "%llu", &start) != 1) return 1e9;
  struct timespec now;
  clock_gettime(CLOCK_BOOTTIME, &now);
  return (double)now.tv_sec + now.tv_nsec * 1e-9 - (double)start / (double)sysconf(_SC_CLK_TCK);
}

/* CUDAW_SUSPEND=release (a Slurm job): a job that Slurm starts while it suspends another (gang
 * scheduling, suspend preemption) can find the device still full, since the other job releases
 * its memory only within its 2 s before the stop (or, when Slurm suspended it before its
 * program started, at its next suspension). So in the program's first CUDAW_SUSPEND_START_WAIT
 * seconds an allocation that does not fit tries again every 50 ms until it fits or that time
 * is up (said once). Later ones fail at once, as without cudaw. */
static int suspend_start_wait(int device, uint64_t size, void **ptr)
{
  struct ckpt_options options;
  ckpt_options_from_env(&options, NULL, 0);
  const double wait = options.suspend_start_wait_s;
  double age = process_age();
  if (!options.suspend_release || age >= wait) return -ENOMEM;
  static _Atomic bool said;
  if (!atomic_exchange(&said, true))
    shim_info("suspend: an allocation of %" PRIu64 " bytes does not fit %.1f s after the start; "
              "waiting up to %.1f s for a job Slurm is suspending to release its memory", size,
              age, wait - age);
  int rc = -ENOMEM;
  while (rc == -ENOMEM && process_age() < wait) {
    nanosleep(&(struct timespec){0, 50000000}, NULL);
    SHIM_REAL(cudaGetLastError)();
    rc = vmem_alloc(device, size, 0, ptr);
  }
  if (rc == 0) shim_info("suspend: the allocation fitted %.1f s after the start", process_age());
  return rc;
}

/* The program sees only "out of memory" when the limit refuses: say once that it was cudaw's
 * limit, with the figures (later refusals would flood a program that retries smaller sizes). */
static void limit_refused(int device, uint64_t asked)
{
  static atomic_bool said;
  if (atomic_exchange(&said, true)) return;
  uint64_t held = 0;
  vmem_quota_refusals(device, &held);
  char asked_text[32], held_text[32], limit_text[32];
  ckpt_format_bytes(asked, asked_text, sizeof asked_text);
  ckpt_format_bytes(held, held_text, sizeof held_text);
  ckpt_format_bytes(mem_limit, limit_text, sizeof limit_text);
  shim_warn("CUDAW_MEM_LIMIT refused an allocation of %s on device %d: %s held, limit %s; the "
            "program gets out of memory (said once; further refusals are not logged)",
            asked_text, device, held_text, limit_text);
}

int shim_vmem_charge(int device, uint64_t bytes)
{
  int rc = vmem_quota_charge(device, bytes);
  if (rc == -ENOMEM) limit_refused(device, bytes);
  return rc;
}

cudaError_t shim_vmem_alloc_on(int device, void **ptr, uint64_t size)
{
  uint64_t refusals = vmem_quota_refusals(device, NULL);
  if (shim_translate_end && !shim_drv_routing() && check_late_libraries() != 0)
    return cudaErrorNotSupported;
  shim_vmem_reap_frees(0);
  /* Sharing the GPU (CUDAW_SHARE=1): wait until cudawd says the memory fits. */
  int rc = shim_sched_admit(device, size);
  if (rc != 0) {
    shim_sched_failed(device, size, rc); /* never fits: the native error, counted */
    return shim_error_from_errno(rc);
  }
  rc = vmem_alloc(device, size, 0, ptr);
  if (rc == -ENOMEM) {
    /* Like the runtime's pools: blocks freed on streams still running come back first. */
    /* The failed attempt's runtime error (translate: cudaMalloc) is not the program's. */
    SHIM_REAL(cudaGetLastError)();
    shim_vmem_reap_frees(1);
    rc = vmem_alloc(device, size, 0, ptr);
  }
  for (int attempt = 0; rc == -ENOMEM && shim_sched_retry(device, size, attempt) == 0; attempt++)
    rc = vmem_alloc(device, size, 0, ptr);
  if (rc == -ENOMEM) rc = suspend_start_wait(device, size, ptr);
  shim_sched_allocated(device);
  if (rc == 0) shim_vmem_note_device(device);
  if (rc == -ENOMEM) shim_sched_failed(device, size, rc);
  if (rc == -ENOMEM && vmem_quota_refusals(device, NULL) != refusals) limit_refused(device, size);
  return shim_error_from_errno(rc);
}

/* "name+0x12 (libfoo.so)" for a code address, for use-after-free reports. */
static void describe_site(const void *where, char *out, size_t size)
{
  Dl_info info;
  if (where && dladdr(where, &info) && info.dli_fname) {
    const char *file = strrchr(info.dli_fname, '/');
    file = file ? file + 1 : info.dli_fname;
    if (info.dli_sname)
      snprintf(out, size, "%s+%#lx (%s)", info.dli_sname,
               (unsigned long)((uintptr_t)where - (uintptr_t)info.dli_saddr), file);
    else
      snprintf(out, size, "%s+%#lx", file,
               (unsigned long)((uintptr_t)where - (uintptr_t)info.dli_fbase));
  } else {
    snprintf(out, size, "%p", where);
  }
}

/* The allocation this thread's last ranged check found, valid while vmem_ended() == ended. */
struct range_cache {
  uintptr_t base;
  uint64_t size; /* 0: nothing cached */
  uint64_t ended;
};
static SHIM_TLS struct range_cache last_range;

int shim_vmem_check_arg(enum shim_fn_id id, const void *p, uint64_t bytes, int ranged)
{
  const char *fn = shim_fn_names[id];
  if (shim_vmem_check_all) {
    struct vmem_check_report report;
    if (vmem_check_range(p, bytes, &report) == 0) return 0;
    char site[256];
    switch (report.kind) {
    case VMEM_CHECK_FREED:
      describe_site(report.freed_where, site, sizeof site);
      shim_error("CUDAW_CHECK: %s: %p is a use after free: it lies in an allocation of %" PRIu64
                 " bytes at %p freed by %s", fn, p, report.size, report.base, site);
      break;
    case VMEM_CHECK_OVERFLOW:
      shim_error("CUDAW_CHECK: %s: %p + %" PRIu64 " bytes runs past the end of the allocation of "
                 "%" PRIu64 " bytes at %p", fn, p, bytes, report.size, report.base);
      break;
    case VMEM_CHECK_RELEASED:
      shim_error("CUDAW_CHECK: %s: %p is in an allocation whose memory is released (checkpoint)",
                 fn, p);
      break;
    default:
      shim_error("CUDAW_CHECK: %s: %p is not inside any live allocation", fn, p);
      break;
    }
    return -EFAULT;
  }
  if (!ranged || bytes == 0) return 0;
  /* Copies go to the same allocation again and again: the last one this thread checked is
   * remembered until any allocation ends, so that the check takes no lock. */
  struct range_cache *cache = &last_range;
  uint64_t ended = vmem_ended();
  uint64_t offset = (uintptr_t)p - cache->base;
  if (cache->size == 0 || cache->ended != ended || offset >= cache->size) {
    struct vmem_info info;
    if (vmem_lookup(p, &info) != 0) {
      shim_warn("%s: %p is not inside any live allocation", fn, p);
      return -EFAULT;
    }
    *cache = (struct range_cache){(uintptr_t)info.base, info.size, ended};
    offset = info.offset;
  }
  if (bytes > cache->size - offset) {
    shim_warn("%s: %p + %" PRIu64 " bytes runs past the end of the allocation of %" PRIu64
              " bytes at %p", fn, p, bytes, cache->size, (void *)cache->base);
    return -EFAULT;
  }
  return 0;
}

/* ---- copies that name another device's memory ------------------------------------------- */

atomic_uint shim_vmem_devices_used;

void shim_vmem_note_device(int device)
{
  unsigned bit = 1u << (device < 31 ? device : 31);
  if (!(atomic_load_explicit(&shim_vmem_devices_used, memory_order_relaxed) & bit))
    atomic_fetch_or_explicit(&shim_vmem_devices_used, bit, memory_order_relaxed);
}

/* The device of the vmem allocation holding p, or -1 (not vmem's: host or foreign memory). */
static int owner_of(const void *p)
{
  struct vmem_info info;
  if (!p || !vmem_owns(p) || vmem_lookup(p, &info) != 0) return -1;
  return info.device;
}

/* Under remap, and under translate where chunks are born in VMM homes (vmem/home.c), vmem's
 * memory is mapped for its device and the peers it was opened to only. */
int shim_vmem_copy_across(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                          cudaStream_t stream, int async, cudaError_t *result)
{
  if (vmem_policy() != VMEM_REMAP && vmem_policy() != VMEM_TRANSLATE) return 0;
  int current;
  if (shim_current_device(&current) != cudaSuccess) return 0;
  int dst_owner = owner_of(dst), src_owner = owner_of(src);
  int dst_foreign = dst_owner >= 0 && dst_owner != current && !vmem_peer_enabled(current, dst_owner);
  int src_foreign = src_owner >= 0 && src_owner != current && !vmem_peer_enabled(current, src_owner);
  if (!dst_foreign && !src_foreign) return 0;
  if (async && shim_capture_possible()) {
    enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (SHIM_REAL(cudaStreamIsCapturing)(stream, &capture) != cudaSuccess ||
        capture != cudaStreamCaptureStatusNone)
      return 0; /* a graph node: the real runtime decides, as it would natively */
  }
  static atomic_int said;
  int owner = dst_foreign ? dst_owner : src_owner;
  if (!atomic_exchange(&said, 1))
    shim_info("a copy names device %d's memory while device %d is current, without peer access: "
              "cudaw runs it on device %d (its memory is mapped for the devices that may reach "
              "it, which the driver does not stage through)", owner, current, owner);
  void *real_dst = shim_translate_in(dst);
  const void *real_src = shim_translate_in(src);
  if (dst_owner >= 0 && src_owner >= 0 && dst_owner != src_owner) {
    *result = async ? SHIM_REAL(cudaMemcpyPeerAsync)(real_dst, dst_owner, real_src, src_owner,
                                                     count, stream)
                    : SHIM_REAL(cudaMemcpyPeer)(real_dst, dst_owner, real_src, src_owner, count);
    return 1;
  }
  /* Host memory (or the owner's own) on the other side: the copy runs with the owner current.
   * An asynchronous one keeps its order on the program's stream by waiting for it first. */
  if (async && (*result = SHIM_REAL(cudaStreamSynchronize)(stream)) != cudaSuccess) return 1;
  cudaError_t r = SHIM_REAL(cudaSetDevice)(owner);
  if (r == cudaSuccess) {
    r = SHIM_REAL(cudaMemcpy)(real_dst, real_src, count, kind);
    cudaError_t back = SHIM_REAL(cudaSetDevice)(current);
    if (r == cudaSuccess) r = back;
  }
  *result = r;
  return 1;
}
